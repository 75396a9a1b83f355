package noise

import (
	"math"
	"math/bits"

	"github.com/fedpq/fedpq/corr"
)

// gaussianShift fixes the grid of the Gaussian noise: sigma/g is in
// [2^14, 2^15), the finest grid on which every quantity of the exact
// sampler (2*S*t^2 below) fits in 64 bits. A step is at most 2^-14 sigma;
// the values are sent as float32 anyway.
const gaussianShift = 14

// gaussianMax truncates the discrete Gaussian at |Z| < 2^32 grid steps, more
// than 2^17 standard deviations: the mass beyond is below exp(-2^33).
const gaussianMax = 1 << 32

// DiscreteGaussian is Gaussian noise of a given standard deviation on a
// power-of-two grid.
//
// Its samples are g*Z where g = Granularity() is a power of two in
// (sigma*2^-15, sigma*2^-14] and Z is the discrete Gaussian integer with
// P(Z = z) proportional to exp(-z^2/(2S)), S = ceil((sigma/g)^2), so
// Sigma() = sqrt(S)*g is at least the sigma asked for (by less than a
// relative 2^-28). Z is conditioned on |Z| < 2^32, an event of probability
// above 1 - exp(-2^33); nothing else is approximate. Its variance is S*g^2:
// the discrete Gaussian's differs from S by a relative amount below
// exp(-2 pi^2 S) < 10^-(10^9) (Canonne, Kamath and Steinke, Prop. 19).
//
// Privacy: Add(src, x) releases g*(n+Z), n being x/g rounded randomly to a
// neighbouring integer. For inputs at most delta apart the possible n differ
// by at most m = Sensitivity(delta)/g steps, so Add is the discrete Gaussian
// mechanism of integer sensitivity m, whose exact (eps, delta') is CKS
// Theorem 7: delta' = P[Z > eps S/m - m/2] - e^eps P[Z > eps S/m + m/2].
// This is the continuous Gaussian's condition (Balle and Wang 2018) with
// sums in place of integrals; privacy.DiscreteGaussianDelta bounds the
// difference rigorously, and callers must calibrate with that bound (at
// Sigma() and Sensitivity(delta)), not with the continuous formula alone.
// Adding noise from Sample to an input that is not on the grid gives no
// such exact guarantee: use Add.
type DiscreteGaussian struct {
	g       float64
	s, t, d uint64 // S, t = floor(sqrt(S))+1, d = 2 S t^2 < 2^62
}

// NewGaussian returns Gaussian noise of at least the given standard
// deviation, which must be in [2^-960, 2^960].
func NewGaussian(sigma float64) (DiscreteGaussian, error) {
	if err := checkScale("gaussian sigma", sigma); err != nil {
		return DiscreteGaussian{}, err
	}
	g := gridOf(sigma, gaussianShift)
	x := sigma / g // exact, in [2^14, 2^15)
	// x^2 = p + e exactly (FMA gives the rounding error e). If p is not an
	// integer, x^2 lies strictly between the same two integers as p.
	p := x * x
	e := math.FMA(x, x, -p)
	s := uint64(math.Ceil(p))
	if float64(s) == p && e > 0 {
		s++
	}
	t := isqrt(s) + 1
	return DiscreteGaussian{g: g, s: s, t: t, d: 2 * s * t * t}, nil
}

// isqrt is floor(sqrt(n)) for n < 2^52.
func isqrt(n uint64) uint64 {
	r := uint64(math.Sqrt(float64(n)))
	for r*r > n {
		r--
	}
	for (r+1)*(r+1) <= n {
		r++
	}
	return r
}

// Gaussian returns one sample of DiscreteGaussian noise of standard
// deviation sigma: g*Z as described there. It is for callers that validated
// sigma; it panics if NewGaussian would fail. To add noise to a value with
// an exact guarantee, use DiscreteGaussian.Add.
func Gaussian(src corr.Source, sigma float64) float64 {
	d, err := NewGaussian(sigma)
	if err != nil {
		panic(err)
	}
	return d.Sample(src)
}

// Granularity is the grid step g, a power of two.
func (d DiscreteGaussian) Granularity() float64 { return d.g }

// Sigma is sqrt(S)*g, the parameter of the distribution actually sampled.
func (d DiscreteGaussian) Sigma() float64 { return math.Sqrt(float64(d.s)) * d.g }

// Variance is S*g^2 (see the type's comment for why this is exact in
// float64).
func (d DiscreteGaussian) Variance() float64 { return float64(d.s) * d.g * d.g }

// LogProb is log P(Z = z) - log P(Z = 0) = -z^2/(2S), for the exact
// likelihood ratios of the sampled integers.
func (d DiscreteGaussian) LogProb(z int64) float64 {
	f := float64(z)
	return -f * f / (2 * float64(d.s))
}

// Sensitivity is the largest distance between the grid points that Add can
// round two inputs at most delta apart to: g*(ceil(delta/g)+1).
func (d DiscreteGaussian) Sensitivity(delta float64) float64 {
	return gridSensitivity(delta, d.g)
}

// Sample returns g*Z.
func (d DiscreteGaussian) Sample(src corr.Source) float64 {
	return float64(d.sample(src)) * d.g
}

// Add returns x rounded randomly to the grid (unbiasedly) plus g*Z, computed
// in integer arithmetic: the result is a function of the exact sum, so any
// later rounding is post-processing. The variance of the result is
// Variance() plus the rounding's f(1-f)g^2, f the fractional part of x/g.
// It fails for non-finite x and for |x| >= 2^52 g.
func (d DiscreteGaussian) Add(src corr.Source, x float64) (float64, error) {
	if err := checkGridInput(x, d.g); err != nil {
		return 0, err
	}
	return addOnGrid(src, x, d.g, d.sample(src)), nil
}

// sample is CKS Algorithm 3: Y from the discrete Laplace of scale t, kept
// with probability exp(-(|Y| - S/t)^2/(2S)) = exp(-a^2/d), a = t|Y| - S.
// Proposals with |Y| >= gaussianMax are rejected, which conditions the
// output on |Z| < gaussianMax and keeps a^2 below 2^96, so its quotient by
// d < 2^62 fits in 64 bits.
func (d DiscreteGaussian) sample(src corr.Source) int64 {
	for {
		y := discreteLaplace(src, d.t)
		ay := uint64(y)
		if y < 0 {
			ay = uint64(-y)
		}
		if ay >= gaussianMax {
			continue
		}
		prod := ay * d.t
		var a uint64
		if prod >= d.s {
			a = prod - d.s
		} else {
			a = d.s - prod
		}
		hi, lo := bits.Mul64(a, a)
		q, r := bits.Div64(hi, lo, d.d)
		if bernExp(src, q, r, d.d) {
			return y
		}
	}
}
