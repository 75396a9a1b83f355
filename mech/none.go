package mech

import (
	"encoding/binary"
	"fmt"
	"math"
)

func init() {
	Register(Info{
		Name:      "none",
		Summary:   "no privacy, no compression, no clipping: float32 per parameter (the reference)",
		Unclipped: true,
		New:       func(Config) (Mechanism, error) { return none{}, nil },
	})
}

// none sends each parameter as a float32: 32 bits, no noise, and no
// clipping either, since the range exists for the mechanisms' sake and the
// reference should not pay for it. Its estimate of the mean is exact up to
// float32 rounding.
//
// Support: the server accepts values within noneSupport radii of the
// center, c ± 1000r (clamped to the float32 range), and refuses the rest.
// An honest client is not clipped, so this is a stated limit, not a tail
// bound: the shipped experiments that run none (mnist-none, fmnist-none:
// fixed:0,0.05 on updates) accept updates up to 50 per parameter, far above
// what two local epochs of SGD at lr 0.1 move a weight; fl's minmax and
// quantile ranges have r >= 1e-3, so at least 1 per parameter.
type none struct{}

// noneSupport is none's support half-width in radii of the range.
const noneSupport = 1000

func (none) Name() string       { return "none" }
func (none) Coupling() Coupling { return Independent }
func (none) Alone() float64     { return 0 }
func (none) Bits(n int) int     { return 32 * n }

func (none) Encode(dst []byte, w []float32, rg Range, _ Slot) ([]byte, error) {
	if err := rg.Validate(); err != nil {
		return dst, err
	}
	if err := checkInput(w); err != nil {
		return dst, err
	}
	return appendFloats(dst, w), nil
}

func (none) NewSum(n int, rg Range) (Sum, error) {
	if err := rg.Validate(); err != nil {
		return nil, err
	}
	lo, hi := float32Bounds(rg, noneSupport*rg.Radius)
	return newBoundedSum(n, rg, lo, hi)
}

// Support is the largest distance from the center of a value the server
// accepts: noneSupport radii.
func (none) Support(rg Range) (float64, error) {
	if err := rg.Validate(); err != nil {
		return 0, err
	}
	return noneSupport * rg.Radius, nil
}

// Variance is 0: the only error is float32 rounding.
func (none) Variance(float64, Range) float64 { return 0 }

// appendFloats appends w as little-endian float32s.
func appendFloats(dst []byte, w []float32) []byte {
	for _, v := range w {
		dst = binary.LittleEndian.AppendUint32(dst, math.Float32bits(v))
	}
	return dst
}

// meanSum is the state of every Sum that decodes values: a running sum per
// coordinate, and the number of payloads in it.
type meanSum struct {
	sum   []float64
	count int
}

func (s *meanSum) Count() int { return s.count }

func (s *meanSum) Mean(dst []float64) error {
	if err := checkMean(dst, len(s.sum), s.count); err != nil {
		return err
	}
	for i, v := range s.sum {
		dst[i] = v / float64(s.count)
	}
	return nil
}

// floatSum adds payloads of little-endian float32s: the server side of every
// mechanism whose message is the (noisy) value itself. It refuses a payload
// with a value outside [lo, hi], the mechanism's support: what an honest
// client sends (gaussian and laplace: up to a stated tail probability).
type floatSum struct {
	meanSum
	lo, hi float32
}

// float32Bounds is [c-h, c+h] rounded to float32 and clamped to the finite
// float32s. Rounding to nearest is monotone, so an honest value v with
// |v - c| <= h, rounded to float32 the same way, stays inside.
func float32Bounds(rg Range, h float64) (lo, hi float32) {
	return float32(max(rg.Center-h, -math.MaxFloat32)), float32(min(rg.Center+h, math.MaxFloat32))
}

// floatSupport is the check of gaussian, laplace and clip, which send
// c + y rounded to float32 with |y| <= h: if c ± h is beyond the float32
// range an honest value could round to an infinity, which the server must
// refuse, so the range is refused instead.
func floatSupport(rg Range, h float64, name string) (lo, hi float32, err error) {
	if !(math.Abs(rg.Center)+h <= math.MaxFloat32) {
		return 0, 0, fmt.Errorf("mech: %s: range %v±%v with support half-width %v leaves the float32 range", name, rg.Center, rg.Radius, h)
	}
	lo, hi = float32Bounds(rg, h)
	return lo, hi, nil
}

func newBoundedSum(n int, rg Range, lo, hi float32) (*floatSum, error) {
	if n < 0 {
		return nil, fmt.Errorf("mech: negative tensor size %d", n)
	}
	if err := rg.Validate(); err != nil {
		return nil, err
	}
	return &floatSum{meanSum: meanSum{sum: make([]float64, n)}, lo: lo, hi: hi}, nil
}

func (s *floatSum) Add(payload []byte, _ Slot) error {
	if len(payload) != 4*len(s.sum) {
		return fmt.Errorf("mech: payload is %d bytes, want %d for %d float32 parameters", len(payload), 4*len(s.sum), len(s.sum))
	}
	for i := range s.sum {
		// NaN fails both comparisons, infinities one.
		if v := math.Float32frombits(binary.LittleEndian.Uint32(payload[4*i:])); !(v >= s.lo && v <= s.hi) {
			return fmt.Errorf("mech: payload parameter %d is %v, outside [%v, %v]", i, v, s.lo, s.hi)
		}
	}
	for i := range s.sum {
		s.sum[i] += float64(math.Float32frombits(binary.LittleEndian.Uint32(payload[4*i:])))
	}
	s.count++
	return nil
}

// checkMean is the common precondition of Sum.Mean.
func checkMean(dst []float64, n, count int) error {
	if len(dst) != n {
		return fmt.Errorf("mech: mean buffer has length %d, want %d", len(dst), n)
	}
	if count == 0 {
		return fmt.Errorf("mech: mean of no payloads")
	}
	return nil
}
