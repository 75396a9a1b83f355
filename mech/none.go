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
type none struct{}

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

func (none) NewSum(n int, rg Range) (Sum, error) { return newFloatSum(n, rg) }

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
// with a value outside [lo, hi]: finite values for the noisy mechanisms,
// the range itself for clip.
type floatSum struct {
	meanSum
	lo, hi float32
}

func newFloatSum(n int, rg Range) (*floatSum, error) {
	return newBoundedSum(n, rg, -math.MaxFloat32, math.MaxFloat32)
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
