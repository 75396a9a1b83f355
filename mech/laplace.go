package mech

import (
	"fmt"
	"math"

	"github.com/fedpq/fedpq/mech/noise"
	"github.com/fedpq/fedpq/privacy"
)

func init() {
	Register(Info{
		Name:    "laplace",
		Summary: "Laplace baseline: eps-LDP per parameter (up to a delta below e^-(2^30) from the sampler's truncation), scale 2r/eps, exact discrete Laplace on a grid, float32/param",
		LDP:     true,
		New:     newLaplace,
	})
}

// laplace is the Laplace baseline of CorBin-FL: each parameter w, clipped
// to [c-r, c+r], is sent as the float32 nearest to c + y, where y is
// x = clip(w) - c (computed in float64 and clamped to [-r, r]) rounded
// randomly and unbiasedly to a power-of-two grid of step g, plus g*K with K
// an exact discrete Laplace integer (package mech/noise).
//
// Calibration: the scale starts at privacy.LaplaceScale(eps, 2r) = 2r/eps
// and grows until noise.DiscreteLaplace.IsPrivate(eps, 2r) holds exactly:
// after the rounding the sensitivity is m grid steps, m <= 2r/g + 2, and the
// privacy loss of a shift of m steps is m/t <= eps, t the scale in steps.
// The scale ends up above 2r/eps by at most two grid steps over eps plus
// one grid step (t = ceil(b/g)), a relative 2^-30/eps + 2^-31.
//
// Guarantee: every parameter is eps-LDP against the server and any
// eavesdropper, exactly for the discrete Laplace; the sampler conditions on
// |K| < 2^30 t, which adds a delta below e^-(2^30) (the output's support
// then depends on the input). The float32 conversion and the addition of the
// public c act on the exact grid value c + y alone, so they are
// post-processing; the noise never exists as a floating-point sample, so
// the attack of Mironov (2012) does not apply.
//
// Output: E[c + y] = clip(w) (exactly, for x), and Var = 2p/(1-p)^2 g^2,
// p = exp(-1/t) (below 2b^2 by about g^2/6, b = t*g the scale), plus the
// rounding's f(1-f)g^2 (Variance). The float32 rounding adds at
// most half a float32 ulp of c + y, which neither the mean nor Variance
// include.
//
// Support: the server accepts values within r + g + zLaplace*b of c
// (Support) and refuses the rest. P(|K| > z t) = 2 p^m/(1+p) with m the
// first integer above z t, which is below 2 exp(-z); zLaplace = ln(2/1e-12)
// = 28.32 makes that 1e-12, the largest probability that an honest value
// is refused (for the continuous Laplace, exp(-z) = 5e-13).
type laplace struct{ eps float64 }

// zLaplace is the tail cut of the laplace support, in units of the scale:
// 2 exp(-zLaplace) = refusalTarget.
var zLaplace = math.Log(2 / refusalTarget)

func newLaplace(c Config) (Mechanism, error) {
	if err := c.ValidateEpsilon(); err != nil {
		return nil, err
	}
	return laplace{eps: c.Epsilon}, nil
}

func (laplace) Name() string       { return "laplace" }
func (laplace) Coupling() Coupling { return Independent }
func (laplace) Alone() float64     { return 0 }
func (laplace) Bits(n int) int     { return 32 * n }

// noise returns the calibrated noise for parameters clipped to rg.
func (m laplace) noise(rg Range) (noise.DiscreteLaplace, error) {
	if err := rg.Validate(); err != nil {
		return noise.DiscreteLaplace{}, err
	}
	sens := 2 * rg.Radius
	b, err := privacy.LaplaceScale(m.eps, sens)
	if err != nil {
		return noise.DiscreteLaplace{}, fmt.Errorf("mech: laplace: %w", err)
	}
	// The second scale, (sensitivity on the grid)/eps with a 2^-40 margin
	// for its rounding, passes unless the grid doubled; the third then does.
	for range 4 {
		l, err := noise.NewLaplace(b)
		if err != nil {
			return noise.DiscreteLaplace{}, fmt.Errorf("mech: laplace: range radius %v: %w", rg.Radius, err)
		}
		if l.IsPrivate(m.eps, sens) {
			return l, nil
		}
		b = l.Sensitivity(sens) / m.eps * (1 + 0x1p-40)
	}
	return noise.DiscreteLaplace{}, fmt.Errorf("mech: laplace: no scale meets eps %v on the grid", m.eps)
}

func (m laplace) Encode(dst []byte, w []float32, rg Range, s Slot) ([]byte, error) {
	l, err := m.noise(rg)
	if err != nil {
		return dst, err
	}
	if _, _, err := floatSupport(rg, gridSupport(l, zLaplace*l.Scale(), rg), "laplace"); err != nil {
		return dst, err
	}
	return encodeGrid(dst, w, rg, s, "laplace", l)
}

func (m laplace) NewSum(n int, rg Range) (Sum, error) {
	l, err := m.noise(rg)
	if err != nil {
		return nil, err
	}
	lo, hi, err := floatSupport(rg, gridSupport(l, zLaplace*l.Scale(), rg), "laplace")
	if err != nil {
		return nil, err
	}
	return newBoundedSum(n, rg, lo, hi)
}

// Support is r + g + zLaplace*b, with a relative 2^-40 for its rounding:
// what an honest value exceeds with probability at most 1e-12.
func (m laplace) Support(rg Range) (float64, error) {
	l, err := m.noise(rg)
	if err != nil {
		return 0, err
	}
	return gridSupport(l, zLaplace*l.Scale(), rg), nil
}

// Variance is Var[Q(w)] of the exact grid value (NaN for a range the
// mechanism rejects).
func (m laplace) Variance(w float64, rg Range) float64 {
	l, err := m.noise(rg)
	if err != nil {
		return math.NaN()
	}
	return gridVariance(l, w, rg)
}
