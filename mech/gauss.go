package mech

import (
	"encoding/binary"
	"fmt"
	"math"
	"slices"

	"github.com/fedpq/fedpq/corr"
	"github.com/fedpq/fedpq/mech/noise"
	"github.com/fedpq/fedpq/privacy"
)

func init() {
	Register(Info{
		Name:    "gaussian",
		Summary: "analytic Gaussian baseline (Balle-Wang): (eps, delta)-LDP per parameter (delta = Config.Delta, default 1e-5), exact discrete Gaussian on a grid, float32/param",
		LDP:     true,
		New:     newGaussian,
	})
}

// gaussian is the Gaussian baseline of CorBin-FL: each parameter w, clipped
// to [c-r, c+r], is sent as the float32 nearest to c + y, where y is
// x = clip(w) - c (computed in float64 and clamped to [-r, r]) rounded
// randomly and unbiasedly to a power-of-two grid of step g, plus g*Z with Z
// an exact discrete Gaussian (package mech/noise).
//
// Calibration: the sensitivity of x is 2r; after the rounding it is
// D = noise.DiscreteGaussian.Sensitivity(2r), 2r plus at most two grid
// steps. sigma starts at privacy.AnalyticGaussianSigma(eps, delta, 2r) and
// grows until privacy.DiscreteGaussianDelta(eps, Sigma(), D, g) <= delta:
// a rigorous bound on the exact delta of the discrete mechanism (Canonne,
// Kamath and Steinke, Theorem 7). The sigma used exceeds the continuous
// calibration by 0.04% at eps = 1 and 0.3% at eps = 0.1
// (TestGaussianCalibration), but more at small eps, where the grid (tied to
// sigma, sigma/g in [2^14, 2^15)) is coarse against 2r: 1.2% at eps = 0.03,
// 17% at eps = 0.001 (delta = 1e-5), and below about eps = 3e-4 no sigma
// meets the bound and Encode returns an error.
//
// Guarantee: every parameter is (eps, delta)-LDP against the server and any
// eavesdropper. The float32 conversion and the addition of the public c
// act on the exact grid value c + y and nothing else, so they are
// post-processing; the noise never exists as a floating-point sample, so
// the attack of Mironov (2012) on its low-order bits does not apply.
//
// Output: E[c + y] = clip(w) (exactly, for x; clip(w) - c + c rounds once
// in float64), and Var = Sigma()^2 + f(1-f)g^2, f the fractional part of
// x/g (Variance). The float32 rounding adds at most half a float32 ulp of
// c + y (a relative 2^-24), which neither the mean nor Variance include.
//
// Support: the server accepts values within r + g + zGauss*Sigma() of c
// (Support) and refuses the rest. The rounding moves x at most g beyond
// [-r, r], and the discrete Gaussian is subgaussian with parameter Sigma()
// (Canonne, Kamath and Steinke, Cor. 9), so P(|g Z| > z Sigma()) <=
// 2 exp(-z^2/2); zGauss = sqrt(2 ln(2/1e-12)) = 7.527 makes that 1e-12,
// the largest probability that an honest value is refused (the continuous
// Gaussian's tail there is 5.2e-14).
type gaussian struct{ eps, delta float64 }

// zGauss is the tail cut of the gaussian support, in units of sigma:
// 2 exp(-zGauss^2/2) = refusalTarget.
var zGauss = math.Sqrt(2 * math.Log(2/refusalTarget))

func newGaussian(c Config) (Mechanism, error) {
	eps, delta, err := c.epsDelta("gaussian")
	if err != nil {
		return nil, err
	}
	return gaussian{eps: eps, delta: delta}, nil
}

func (gaussian) Name() string       { return "gaussian" }
func (gaussian) Coupling() Coupling { return Independent }
func (gaussian) Alone() float64     { return 0 }
func (gaussian) Bits(n int) int     { return 32 * n }

// noise returns the calibrated noise for parameters clipped to rg.
func (m gaussian) noise(rg Range) (noise.DiscreteGaussian, error) {
	if err := rg.Validate(); err != nil {
		return noise.DiscreteGaussian{}, err
	}
	sens := 2 * rg.Radius
	sigma, err := privacy.AnalyticGaussianSigma(m.eps, m.delta, sens)
	if err != nil {
		return noise.DiscreteGaussian{}, fmt.Errorf("mech: gaussian: %w", err)
	}
	// The grid costs under 1% of sigma: grow by 2^-7 until the bound holds,
	// then bisect down to a relative 1e-6. Only checked sigmas are returned
	// (the bound is not monotone where the grid step doubles).
	check := func(sigma float64) (noise.DiscreteGaussian, bool, error) {
		d, err := noise.NewGaussian(sigma)
		if err != nil {
			return d, false, fmt.Errorf("mech: gaussian: range radius %v: %w", rg.Radius, err)
		}
		bound, err := privacy.DiscreteGaussianDelta(m.eps, d.Sigma(), d.Sensitivity(sens), d.Granularity())
		if err != nil {
			return d, false, fmt.Errorf("mech: gaussian: %w", err)
		}
		return d, bound <= m.delta, nil
	}
	lo, hi := sigma, sigma
	best, ok, err := check(hi)
	for i := 0; !ok; i++ {
		if err != nil {
			return best, err
		}
		if i == 64 {
			return best, fmt.Errorf("mech: gaussian: no sigma meets eps %v, delta %v on the grid", m.eps, m.delta)
		}
		lo, hi = hi, hi*(1+0x1p-7)
		best, ok, err = check(hi)
	}
	for hi-lo > 1e-6*hi {
		mid := lo + (hi-lo)/2
		d, ok, err := check(mid)
		if err != nil {
			return d, err
		}
		if ok {
			best, hi = d, mid
		} else {
			lo = mid
		}
	}
	return best, nil
}

// bounded is the noise of rg and the float32 bounds of what the server
// accepts, refusing a range whose support float32 cannot hold: what
// Encode, NewSum and Extreme all need first.
func (m gaussian) bounded(rg Range) (d noise.DiscreteGaussian, lo, hi float32, err error) {
	if d, err = m.noise(rg); err != nil {
		return d, 0, 0, err
	}
	lo, hi, err = floatSupport(rg, gridSupport(d, zGauss*d.Sigma(), rg), "gaussian")
	return d, lo, hi, err
}

func (m gaussian) Encode(dst []byte, w []float32, rg Range, s Slot) ([]byte, error) {
	d, _, _, err := m.bounded(rg)
	if err != nil {
		return dst, err
	}
	return encodeGrid(dst, w, rg, s, "gaussian", d)
}

func (m gaussian) NewSum(n int, rg Range) (Sum, error) {
	_, lo, hi, err := m.bounded(rg)
	if err != nil {
		return nil, err
	}
	return newBoundedSum(n, rg, lo, hi)
}

// Support is r + g + zGauss*Sigma(), with a relative 2^-40 for its
// rounding: what an honest value exceeds with probability at most 1e-12.
func (m gaussian) Support(rg Range) (float64, error) {
	d, err := m.noise(rg)
	if err != nil {
		return 0, err
	}
	return gridSupport(d, zGauss*d.Sigma(), rg), nil
}

// Variance is Var[Q(w)] of the exact grid value: Sigma()^2 plus the
// rounding's f(1-f)g^2 (NaN for a range the mechanism rejects).
func (m gaussian) Variance(w float64, rg Range) float64 {
	d, err := m.noise(rg)
	if err != nil {
		return math.NaN()
	}
	return gridVariance(d, w, rg)
}

// gridNoise is what the grid mechanisms (gaussian, laplace) need from
// mech/noise.
type gridNoise interface {
	Add(src corr.Source, x float64) (float64, error)
	Variance() float64
	Granularity() float64
}

// centered is w - c in float64, clamped to [-r, r] so that its range, and
// so the sensitivity, is exactly 2r.
func centered(w float64, rg Range) float64 {
	return min(max(w-rg.Center, -rg.Radius), rg.Radius)
}

// encodeGrid appends, for each parameter, the float32 nearest to
// c + nz.Add(centered(w)), the shared encoder of gaussian and laplace.
func encodeGrid(dst []byte, w []float32, rg Range, s Slot, name string, nz gridNoise) ([]byte, error) {
	if err := checkInput(w); err != nil {
		return dst, err
	}
	if s.Private == nil {
		return dst, errNoPrivate(name)
	}
	out := slices.Grow(dst, 4*len(w))
	for _, v := range w {
		y, err := nz.Add(s.Private, centered(float64(v), rg))
		if err != nil {
			return dst, fmt.Errorf("mech: %s: %w", name, err)
		}
		out = binary.LittleEndian.AppendUint32(out, math.Float32bits(float32(rg.Center+y)))
	}
	return out, nil
}

// gridSupport is the half-width of the values encodeGrid sends when the
// noise is at most tail: r, plus one grid step for the rounding, plus tail,
// widened by a relative 2^-40 to cover the float64 rounding of the sum.
func gridSupport(nz gridNoise, tail float64, rg Range) float64 {
	return (rg.Radius + nz.Granularity() + tail) * (1 + 0x1p-40)
}

// gridVariance is nz's variance plus that of the random rounding of
// centered(w) to the grid: f(1-f)g^2, f its fractional part in steps.
func gridVariance(nz gridNoise, w float64, rg Range) float64 {
	g := nz.Granularity()
	q := centered(w, rg) / g
	f := q - math.Floor(q)
	return nz.Variance() + f*(1-f)*g*g
}
