package mech

import (
	"fmt"
	"math/bits"

	"github.com/fedpq/fedpq/corr"
)

func init() {
	Register(Info{
		Name:    "cq",
		Summary: "correlated quantization (Suresh et al. 2022), no privacy: the round's clients share a permutation, 1 bit/param",
		New:     func(Config) (Mechanism, error) { return cq{}, nil },
	})
}

// cq is one-bit correlated quantization (Suresh, Sun, Ro, Yu, ICML 2022), the
// compression-only baseline of CorBin-FL. The n clients of a round hold
// distinct positions p_i (a random permutation, Slot.Index) and share one
// uniform shift s_j per coordinate; client i uses
// U = ((p_i + s_j) mod n + u)/n with a private uniform u and sends 1 iff
// U < x = (w - c + r)/(2r). For each coordinate the clients' U are a
// stratified sample of [0, 1), so their errors cancel: the mean's error is
// O(1/n^2) for close inputs instead of 1/(4n). A cyclic shift of one
// permutation per round replaces a fresh permutation per coordinate, as the
// authors' public notebook does; each client's marginal is unchanged.
//
// Output c+r (bit 1) or c-r (bit 0); P(1|w) = x up to 2^-63, so it is
// unbiased to that precision. No privacy: it is not LDP.
//
// Integer: the decode does not depend on the client's position in the group
// (Slot.Index only places its private draw in the stratified sample), so
// the number of ones per coordinate decodes to the mean as it does for the
// eps-LDP one-bit mechanisms.
type cq struct{ bitFields }

func (cq) Name() string       { return "cq" }
func (cq) Coupling() Coupling { return Grouped }
func (cq) Alone() float64     { return 0 }
func (cq) Bits(n int) int     { return n }

func (cq) Encode(dst []byte, w []float32, rg Range, s Slot) ([]byte, error) {
	if err := rg.Validate(); err != nil {
		return dst, err
	}
	if err := checkInput(w); err != nil {
		return dst, err
	}
	if s.Private == nil || s.Shared == nil {
		return dst, fmt.Errorf("mech: cq needs private bits and bits shared by the group")
	}
	if s.Size < 1 || s.Index < 0 || s.Index >= s.Size {
		return dst, fmt.Errorf("mech: cq position %d outside a group of %d", s.Index, s.Size)
	}
	n := uint64(s.Size)
	off, scale := rg.Radius-rg.Center, 1/(2*rg.Radius)
	var u [chunk]uint64
	for len(w) > 0 {
		m := min(len(w), chunk)
		s.Private.Fill(u[:m])
		for start := 0; start < m; start += 64 {
			var word uint64
			for i := start; i < min(m, start+64); i++ {
				x := min(max((float64(w[i])+off)*scale, 0), 1)
				t := uint64(x * 0x1p63) // threshold out of 2^63
				p := (uint64(s.Index) + corr.Below(s.Shared, n)) % n
				// 1 iff (p*2^63 + u/2) < n*t: both sides as 128-bit numbers.
				thi, tlo := bits.Mul64(n, t)
				vhi, vlo := p>>1, p<<63|u[i]>>1
				if vhi < thi || vhi == thi && vlo < tlo {
					word |= 1 << (i - start)
				}
			}
			for k := 0; k < (min(m, start+64)-start+7)/8; k++ {
				dst = append(dst, byte(word>>(8*k)))
			}
		}
		w = w[m:]
	}
	return dst, nil
}

func (cq) NewSum(n int, rg Range) (Sum, error) {
	if err := rg.Validate(); err != nil {
		return nil, err
	}
	return newBitSum(n, rg.Center-rg.Radius, rg.Center+rg.Radius)
}

// DecodeSum decodes the number of ones per coordinate to c ± r, as its
// Sum does; slots are ignored.
func (cq) DecodeSum(dst []float64, sum []uint64, count int, rg Range, _ []Slot) error {
	if err := rg.Validate(); err != nil {
		return err
	}
	return decodeBitSum(dst, sum, count, rg.Center-rg.Radius, rg.Center+rg.Radius)
}

// Support is the radius: the decoder outputs c ± r.
func (cq) Support(rg Range) (float64, error) {
	if err := rg.Validate(); err != nil {
		return 0, err
	}
	return rg.Radius, nil
}
