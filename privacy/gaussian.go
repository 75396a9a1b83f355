package privacy

import (
	"fmt"
	"math"
)

// GaussianDelta is the smallest delta for which adding N(0, sigma^2) noise
// to a query of L2 sensitivity D is (eps, delta)-DP (Balle and Wang 2018,
// Theorem 8):
//
//	delta = Phi(D/(2 sigma) - eps sigma/D) - e^eps Phi(-D/(2 sigma) - eps sigma/D).
//
// It is evaluated in log space (log Phi through erfc and its asymptotic
// series), so neither e^eps nor the tails overflow or underflow to a wrong
// answer.
func GaussianDelta(eps, sigma, sensitivity float64) (float64, error) {
	if err := checkEpsilon(eps); err != nil {
		return 0, err
	}
	if err := checkSensitivity(sensitivity); err != nil {
		return 0, err
	}
	if !(sigma > 0) || math.IsInf(sigma, 0) {
		return 0, fmt.Errorf("privacy: sigma %v must be positive and finite", sigma)
	}
	return math.Exp(logGaussianDelta(eps, sigma, sensitivity)), nil
}

// logGaussianDelta is log GaussianDelta: with a = D/(2 sigma) - eps sigma/D
// and b = a - D/sigma, delta = Phi(a) (1 - exp(eps + log Phi(b) - log Phi(a))).
func logGaussianDelta(eps, sigma, d float64) float64 {
	u, v := d/(2*sigma), eps*sigma/d
	la, lb := logPhi(u-v), logPhi(-u-v)
	x := eps + lb - la // <= 0 mathematically
	if x >= 0 {
		return math.Inf(-1)
	}
	return la + math.Log(-math.Expm1(x))
}

// logPhi is log of the standard normal CDF, accurate in both tails.
func logPhi(x float64) float64 {
	if x > 0 {
		return math.Log1p(-0.5 * math.Erfc(x/math.Sqrt2))
	}
	return math.Log(0.5) + logErfc(-x/math.Sqrt2)
}

// logErfc is log erfc(z) for z >= 0: directly while erfc(z) is far from
// underflow, else from the asymptotic series
// erfc(z) = e^{-z^2}/(z sqrt(pi)) sum_k (-1)^k (2k-1)!!/(2z^2)^k, whose
// terms are below 1e-17 by k = 8 at z >= 25.
func logErfc(z float64) float64 {
	if z < 25 {
		return math.Log(math.Erfc(z))
	}
	w := 1 / (2 * z * z)
	sum, term := 1.0, 1.0
	for k := 1; k <= 8; k++ {
		term *= -float64(2*k-1) * w
		sum += term
	}
	return -z*z - math.Log(z*math.SqrtPi) + math.Log(sum)
}

// AnalyticGaussianSigma is the smallest sigma (up to a relative 1e-13) for
// which N(0, sigma^2) noise on a query of L2 sensitivity D is (eps, delta)-DP:
// the calibration of Balle and Wang (2018, Algorithm 1), done by bisection
// on the exact condition of GaussianDelta, which is decreasing in sigma.
// It is valid for every eps > 0, unlike the classic
// sigma = sqrt(2 ln(1.25/delta)) D/eps, which holds only for eps < 1 and is
// loose there. The returned sigma satisfies GaussianDelta(eps, sigma, D) <=
// delta as computed.
func AnalyticGaussianSigma(eps, delta, sensitivity float64) (float64, error) {
	if err := checkEpsilon(eps); err != nil {
		return 0, err
	}
	if err := checkDelta(delta); err != nil {
		return 0, err
	}
	if err := checkSensitivity(sensitivity); err != nil {
		return 0, err
	}
	target := math.Log(delta)
	ok := func(sigma float64) bool { return logGaussianDelta(eps, sigma, sensitivity) <= target }
	return bisect(ok, sensitivity)
}

// bisect returns the smallest sigma (to a relative 1e-13) with ok(sigma),
// for ok false near 0 and true for large sigma, starting from the scale s0.
func bisect(ok func(float64) bool, s0 float64) (float64, error) {
	lo, hi := s0, s0
	for !ok(hi) {
		if hi *= 2; math.IsInf(hi, 0) {
			return 0, fmt.Errorf("privacy: no finite sigma reaches the target delta")
		}
	}
	for ok(lo) {
		if lo /= 2; lo == 0 {
			return 0, fmt.Errorf("privacy: the target delta is reached by every sigma > 0")
		}
	}
	for hi-lo > 1e-13*hi {
		mid := lo + (hi-lo)/2
		if ok(mid) {
			hi = mid
		} else {
			lo = mid
		}
	}
	return hi, nil
}

// DiscreteGaussianDelta bounds the delta of the discrete Gaussian mechanism
// that package mech/noise implements: the query rounded to a grid of step g,
// so that its sensitivity D is a whole number m of steps, plus g*Z with Z
// the discrete Gaussian of variance parameter (sigma/g)^2. Canonne, Kamath
// and Steinke (2020, Theorem 7) give its exact delta,
// P[Z > A1] - e^eps P[Z > A2] with A1 = eps sigma^2/(D g) - m/2 and
// A2 = A1 + m: GaussianDelta's formula with sums in place of integrals.
// Comparing each tail sum with its integral (the terms decrease away from
// zero, and the normalizing sum is sqrt(2 pi) sigma/g (1 + eta) with
// 0 <= eta <= 2 e^{-2 pi^2 (sigma/g)^2}/(1 - e^{-2 pi^2 (sigma/g)^2}) by
// Poisson summation) gives
//
//	delta <= GaussianDelta(eps, sigma, D) + 2 (g/sigma) phi(a) + 2 eta,
//
// phi the standard normal density, a = eps sigma/D - D/(2 sigma) (using
// e^eps phi(a + D/sigma) = phi(a)). This is the bound it returns. For
// sigma/g >= 2^14 (mech/noise's grid) eta is 0 in float64 and the grid term
// is at most a few percent of delta.
func DiscreteGaussianDelta(eps, sigma, sensitivity, granularity float64) (float64, error) {
	d, err := GaussianDelta(eps, sigma, sensitivity)
	if err != nil {
		return 0, err
	}
	if !(granularity > 0) || math.IsInf(granularity, 0) {
		return 0, fmt.Errorf("privacy: granularity %v must be positive and finite", granularity)
	}
	if m := sensitivity / granularity; m != math.Trunc(m) {
		return 0, fmt.Errorf("privacy: sensitivity %v is not a whole number of grid steps %v", sensitivity, granularity)
	}
	a := eps*sigma/sensitivity - sensitivity/(2*sigma)
	phi := math.Exp(-a*a/2) / math.Sqrt(2*math.Pi)
	e := math.Exp(-2 * math.Pi * math.Pi * (sigma / granularity) * (sigma / granularity))
	eta := 2 * e / (1 - e)
	return min(1, d+2*granularity/sigma*phi+2*eta), nil
}
