package noise

import (
	"math"

	"github.com/fedpq/fedpq/corr"
)

// laplaceShift fixes the grid of the Laplace noise: scale/g is in
// [2^31, 2^32), so a grid step is at most 2^-31 of the scale.
const laplaceShift = 31

// laplaceMaxV truncates the discrete Laplace at |K| < laplaceMaxV*t, so that
// K fits in 62 bits; the mass beyond is exp(-2^30).
const laplaceMaxV = 1 << 30

// DiscreteLaplace is Laplace noise of a given scale on a power-of-two grid.
//
// Its samples are g*K where g = Granularity() is a power of two in
// (scale*2^-32, scale*2^-31] and K is the discrete Laplace (two-sided
// geometric) integer with P(K = k) proportional to exp(-|k|/t), t =
// ceil(scale/g) an integer. So Scale() = t*g is at least the scale asked for
// and exceeds it by less than one grid step. K is conditioned on
// |K| < 2^30 t, an event of probability 1 - exp(-2^30) (it keeps the integer
// arithmetic in 64 bits); nothing else is approximate.
//
// Privacy: for any integers k, k+m the ratio P(K=k)/P(K=k+m) is at most
// exp(|m|/t). Add(src, x) releases g*(n+K) where n is x/g rounded randomly
// to a neighbouring integer. If two inputs are at most delta apart, their
// possible n differ by at most Sensitivity(delta)/g, so Add is exactly
// Epsilon(delta)-DP, where Epsilon(delta) = Sensitivity(delta)/Scale(). To
// reach a target eps, grow the scale until IsPrivate(eps, delta) holds (the
// grid adds about 2^-31 relative to the scale).
// Adding noise from Sample to an input that is not on the grid gives no
// such exact guarantee: use Add.
type DiscreteLaplace struct {
	g float64
	t uint64
}

// NewLaplace returns Laplace noise of at least the given scale (the b of
// the density exp(-|x|/b)/(2b)); scale must be in [2^-960, 2^960].
func NewLaplace(scale float64) (DiscreteLaplace, error) {
	if err := checkScale("laplace scale", scale); err != nil {
		return DiscreteLaplace{}, err
	}
	g := gridOf(scale, laplaceShift)
	return DiscreteLaplace{g: g, t: uint64(math.Ceil(scale / g))}, nil
}

// Laplace returns one sample of DiscreteLaplace noise of the given scale:
// g*K as described there. It is for callers that validated the scale; it
// panics if NewLaplace would fail. To add noise to a value with an exact
// guarantee, use DiscreteLaplace.Add.
func Laplace(src corr.Source, scale float64) float64 {
	l, err := NewLaplace(scale)
	if err != nil {
		panic(err)
	}
	return l.Sample(src)
}

// Granularity is the grid step g, a power of two.
func (l DiscreteLaplace) Granularity() float64 { return l.g }

// Scale is t*g, the scale of the distribution actually sampled.
func (l DiscreteLaplace) Scale() float64 { return float64(l.t) * l.g }

// Variance is the exact variance of a sample, 2p/(1-p)^2 g^2 with
// p = exp(-1/t) (the truncation changes it by a relative exp(-2^30)). It is
// below 2*Scale()^2 by about g^2/6.
func (l DiscreteLaplace) Variance() float64 {
	q := -math.Expm1(-1 / float64(l.t)) // 1 - p
	return 2 * (1 - q) / (q * q) * l.g * l.g
}

// LogProb is log P(K = k) - log P(K = 0) = -|k|/t, for the exact
// likelihood ratios of the sampled integers: a shift of m grid steps changes
// it by at most |m|/t.
func (l DiscreteLaplace) LogProb(k int64) float64 {
	return -math.Abs(float64(k)) / float64(l.t)
}

// Sensitivity is the largest distance between the grid points that Add can
// round two inputs at most delta apart to: g*(ceil(delta/g)+1).
func (l DiscreteLaplace) Sensitivity(delta float64) float64 {
	return gridSensitivity(delta, l.g)
}

// Epsilon is the eps of Add for inputs at most delta apart: m/t for
// m = Sensitivity(delta)/g, rounded once to a double. Use IsPrivate to
// decide a target exactly.
func (l DiscreteLaplace) Epsilon(delta float64) float64 {
	return l.Sensitivity(delta) / l.Scale()
}

// IsPrivate reports exactly whether Add is eps-DP for inputs at most delta
// apart, that is m <= eps*t: one fused multiply-add gives eps*t - m rounded
// once, and rounding never changes the sign of a result.
func (l DiscreteLaplace) IsPrivate(eps, delta float64) bool {
	m := l.Sensitivity(delta) / l.g
	return math.FMA(eps, float64(l.t), -m) >= 0
}

// Sample returns g*K.
func (l DiscreteLaplace) Sample(src corr.Source) float64 {
	return float64(discreteLaplace(src, l.t)) * l.g
}

// Add returns x rounded randomly to the grid (unbiasedly) plus g*K, computed
// in integer arithmetic: the result is a function of the exact sum, so any
// later rounding is post-processing. The variance of the result is
// Variance() plus the rounding's f(1-f)g^2, f the fractional part of x/g.
// It fails for non-finite x and for |x| >= 2^52 g.
func (l DiscreteLaplace) Add(src corr.Source, x float64) (float64, error) {
	if err := checkGridInput(x, l.g); err != nil {
		return 0, err
	}
	return addOnGrid(src, x, l.g, discreteLaplace(src, l.t)), nil
}

// discreteLaplace returns K with P(K=k) proportional to exp(-|k|/t),
// conditioned on |K| < laplaceMaxV*t (CKS Algorithm 2 with s = 1): U uniform
// in [0, t) kept with probability exp(-U/t), V geometric with ratio exp(-1),
// |K| = U + t*V, a random sign, and -0 rejected so that 0 is not counted
// twice. t must be in [1, 2^32].
func discreteLaplace(src corr.Source, t uint64) int64 {
	for {
		u := below(src, t)
		if !bernExpFrac(src, u, t) {
			continue
		}
		v := uint64(0)
		for v < laplaceMaxV && bernExpMinus1(src) {
			v++
		}
		if v == laplaceMaxV {
			continue
		}
		x := int64(u + t*v)
		if src.Uint64()&1 == 1 {
			if x == 0 {
				continue
			}
			return -x
		}
		return x
	}
}
