// Package act is the native engine's sigmoid activation over rows of
// float32s: a float32 exponential without branches, in AVX-512 where the
// CPU has it and in Go elsewhere, with the same bits on both paths.
//
// The exponential is Cody and Waite's reduction by ln 2 in two parts and
// the polynomial of Cephes' expf (Moshier, Cephes Math Library). Every
// operation is a single IEEE float32 operation in a fixed order, none
// fused, so the assembly and Go (whatever GOAMD64 lets the compiler fuse)
// round alike.
package act

import "math"

const (
	log2e    = 1.44269504088896341
	ln2Hi    = 0.693359375 // 9 significant bits: n*ln2Hi is exact
	ln2Lo    = -2.12194440e-4
	roundInt = 0x1.8p23 // adding it to a float32 below 2^22 in magnitude rounds it to an integer
	expCut   = 104      // exp(-104) is below half the least float32: e rounds to 0 from here on
)

// expPoly are Cephes expf's coefficients, highest degree first: exp(r) =
// 1 + r + r^2 P(r) for |r| <= ln 2 / 2.
var expPoly = [...]float32{1.9875691500e-4, 1.3981999507e-3, 8.3334519073e-3, 4.1665795894e-2, 1.6666665459e-1, 5.0000001201e-1}

// Sigmoid is 1/(1+exp(-v)) in float32, within 3 ulp of the exact value
// (TestSigmoid measures at most 2.4). It computes e = exp(-|v|) in (0, 1],
// then 1/(1+e) for v >= 0 and e/(1+e) below, so 1+e never overflows and
// a negative v keeps its relative accuracy down to the subnormals. A NaN
// stays NaN, and the infinities give 1 and 0. It has no branch: the sign
// of an activation is a coin toss for branch prediction.
//
// The explicit conversions keep the compiler from fusing a multiply and an
// add (which the language allows), so that the bits are the assembly's.
func Sigmoid(v float32) float32 {
	a := min(math.Float32frombits(math.Float32bits(v)&^(1<<31)), expCut) // |v|, NaN stays
	// -a = f ln 2 + r, f = n an integer in [-150, 0], |r| <= ln 2 / 2.
	t := float32(a*-log2e) + roundInt
	n := int32(math.Float32bits(t) - math.Float32bits(roundInt))
	f := t - roundInt
	r := -a - float32(f*ln2Hi) - float32(f*ln2Lo)
	q := expPoly[0]
	for _, c := range expPoly[1:] {
		q = float32(q*r) + c
	}
	p := float32(float32(q*r)*r) + r + 1
	// e = p 2^n, in two normal factors 2^n1 2^n2 so that a subnormal e
	// is rounded once.
	n1 := n >> 1
	e := p * math.Float32frombits(uint32(n1+127)<<23) * math.Float32frombits(uint32(n-n1+127)<<23)
	neg := uint32(int32(math.Float32bits(v)) >> 31) // all ones where v < 0: a mask, not a branch
	num := math.Float32bits(1)&^neg | math.Float32bits(e)&neg
	return math.Float32frombits(num) / (1 + e)
}

// SigmoidRows writes Sigmoid(src[i*lds+j] + bias) into dst[i*ldd+j] for
// i < rows, j < width.
func SigmoidRows(dst []float32, ldd int, src []float32, lds int, rows, width int, bias float32) {
	if rows <= 0 || width <= 0 {
		return
	}
	if rows > 1 && width > min(ldd, lds) {
		panic("act: rows overlap")
	}
	_, _ = dst[(rows-1)*ldd+width-1], src[(rows-1)*lds+width-1]
	if haveAVX512 {
		sigmoidRowsAVX512(&dst[0], ldd, &src[0], lds, rows, width, bias)
		return
	}
	sigmoidRowsGo(dst, ldd, src, lds, rows, width, bias)
}

// sigmoidRowsGo is SigmoidRows in Go.
func sigmoidRowsGo(dst []float32, ldd int, src []float32, lds int, rows, width int, bias float32) {
	for i := range rows {
		d, s := dst[i*ldd:i*ldd+width], src[i*lds:i*lds+width]
		for j, v := range s {
			d[j] = Sigmoid(v + bias)
		}
	}
}
