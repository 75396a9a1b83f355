// Package noise samples the privacy noise of fedpq's Laplace and Gaussian
// mechanisms without the floating-point weakness that Mironov (2012) used to
// break textbook implementations: a continuous sample computed in floating
// point (for example -b*log(U)) takes values on an irregular set of doubles
// that depends on the input it is added to, so the low-order bits of the
// output can reveal the input exactly.
//
// Here every sample is an integer K drawn exactly from a discrete
// distribution, using only integer arithmetic and uniform words from a
// corr.Source (the samplers of Canonne, Kamath and Steinke, "The Discrete
// Gaussian for Differential Privacy", NeurIPS 2020, Algorithms 1-3), and the
// noise is K*g for a granularity g that is a power of two tied to the scale,
// as in Google's differential-privacy library. K*g is exactly representable.
// The helpers Add first round the input to a multiple of g (randomly, so
// that the result stays unbiased) and add the noise in integer arithmetic,
// so the released double is a deterministic function of the exact integer
// sum: whatever happens to it afterwards (a float32 conversion, adding a
// public center) is post-processing and cannot weaken the guarantee.
//
// The samplers are seedable: the same Source gives the same noise. They are
// exact except for one documented truncation each, at a distance from zero
// whose probability is below exp(-2^30).
package noise

import (
	"fmt"
	"math"
	"math/bits"

	"github.com/fedpq/fedpq/corr"
)

// below returns a uniform integer in [0, n) for n > 0, exactly (Lemire's
// multiply-and-reject).
func below(src corr.Source, n uint64) uint64 {
	hi, lo := bits.Mul64(src.Uint64(), n)
	if lo < n {
		thresh := -n % n
		for lo < thresh {
			hi, lo = bits.Mul64(src.Uint64(), n)
		}
	}
	return hi
}

// bern returns true with probability exactly n/d, for 0 <= n and d > 0
// (n >= d always gives true and uses no randomness).
func bern(src corr.Source, n, d uint64) bool {
	if n == 0 {
		return false
	}
	if n >= d {
		return true
	}
	return below(src, d) < n
}

// bernExpFrac returns true with probability exactly exp(-n/d), for
// 0 <= n <= d, d > 0 (CKS Algorithm 1 for gamma in [0, 1]): the number of
// successes of Bernoulli(gamma/k), k = 1, 2, ..., before the first failure
// is even with probability exp(-gamma). Bernoulli(gamma/k) is drawn as
// Bernoulli(n/d) and Bernoulli(1/k), so nothing overflows.
func bernExpFrac(src corr.Source, n, d uint64) bool {
	k := uint64(1)
	for bern(src, n, d) && bern(src, 1, k) {
		k++
	}
	return k&1 == 1
}

// bernExpMinus1 returns true with probability exactly exp(-1).
func bernExpMinus1(src corr.Source) bool { return bernExpFrac(src, 1, 1) }

// bernExp returns true with probability exactly exp(-(q + r/d)), for
// 0 <= r < d: q independent trials of exp(-1), then exp(-r/d) (CKS
// Algorithm 1 for gamma > 1). It stops at the first failure, so a large q
// costs about 1.6 trials on average.
func bernExp(src corr.Source, q, r, d uint64) bool {
	for range q {
		if !bernExpMinus1(src) {
			return false
		}
	}
	return bernExpFrac(src, r, d)
}

// bernDyadic returns true with probability exactly p, for a double p in
// [0, 1): it compares p, 64 bits at a time, with the binary expansion of a
// uniform number. Each step is exact: p*2^64 only changes the exponent and
// subtracting its integer part is exact.
func bernDyadic(src corr.Source, p float64) bool {
	for p > 0 {
		p = math.Ldexp(p, 64)
		hi := math.Floor(p)
		p -= hi
		u, h := src.Uint64(), uint64(hi)
		if u != h {
			return u < h
		}
	}
	return false
}

// maxGridInput bounds |x|/g in Add: the rounding of x to the grid and the
// integer sum stay exact below it.
const maxGridInput = 1 << 52

// addOnGrid rounds x/g randomly to one of its two neighbouring integers (up
// with probability equal to the fractional part, so the expectation is x/g
// exactly), adds the integer noise k and returns the sum times g. The float
// conversion of the integer sum is a function of that sum alone.
func addOnGrid(src corr.Source, x, g float64, k int64) float64 {
	// x/g is exact unless it is subnormal; even then it stays between
	// floor and ceil of the exact quotient, which is all the privacy
	// argument needs (only the expectation moves, by under 2^-1074 steps).
	q := x / g
	f := math.Floor(q)
	n := int64(f)
	if bernDyadic(src, q-f) {
		n++
	}
	return float64(n+k) * g
}

// checkGridInput reports an x that addOnGrid cannot round exactly.
func checkGridInput(x, g float64) error {
	if math.IsNaN(x) || math.IsInf(x, 0) {
		return errorf("input %v is not finite", x)
	}
	if math.Abs(x)/g >= maxGridInput {
		return errorf("input %v is more than 2^52 grid steps (granularity %v) from zero; add the noise to x minus a public center instead", x, g)
	}
	return nil
}

// gridSensitivity is the largest distance between the grid points that two
// inputs at most delta apart can be rounded to by addOnGrid: with x' <= x,
// ceil(x/g) - floor(x'/g) < delta/g + 2, so it is g*(ceil(delta/g) + 1).
func gridSensitivity(delta, g float64) float64 {
	return g * (math.Ceil(delta/g) + 1)
}

// gridOf returns 2^(floor(log2 s) - shift): the power of two such that
// s/g lies in [2^shift, 2^(shift+1)).
func gridOf(s float64, shift int) float64 {
	_, e := math.Frexp(s) // s = f * 2^e, f in [0.5, 1)
	return math.Ldexp(1, e-1-shift)
}

// errorf prefixes the package name, like every fedpq error.
func errorf(format string, a ...any) error {
	return fmt.Errorf("noise: "+format, a...)
}

// checkScale reports a scale outside the range in which the grid and every
// output are normal, finite doubles.
func checkScale(what string, s float64) error {
	if !(s >= minScale && s <= maxScale) {
		return errorf("%s %v must be in [2^-960, 2^960]", what, s)
	}
	return nil
}

const (
	minScale = 0x1p-960
	maxScale = 0x1p960
)
