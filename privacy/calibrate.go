package privacy

import (
	"fmt"
	"math"
)

// The noise multipliers NoiseMultiplier searches between.
const (
	MinNoiseMultiplier = 0.05
	MaxNoiseMultiplier = 1000
)

// NoiseMultiplier is the smallest noise multiplier z in
// [MinNoiseMultiplier, MaxNoiseMultiplier], to a relative 1e-4, whose run
// event(z) is (targetEps, delta)-DP by an Auto accountant: the z to run
// with for a target budget. event builds the whole run from z, e.g.
//
//	func(z float64) Event { return Composed{PoissonSampled{0.1, Gaussian{z}}, 1000} }
//
// and its epsilon must not grow with z. The returned z was checked: the
// accountant gives at most targetEps there. The search brackets z with the
// RDP accountant (cheap, and never below the accountant's answer), then
// narrows the bracket by regula falsi on log eps against log z.
//
// A target that no z in the range meets (below the epsilon at
// MaxNoiseMultiplier, e.g. when part of the run does not depend on z) is
// refused with an error that gives the smallest epsilon reached; a target
// met already at MinNoiseMultiplier returns MinNoiseMultiplier.
func NoiseMultiplier(targetEps, delta float64, event func(z float64) Event) (float64, error) {
	if !(targetEps > 0) || math.IsInf(targetEps, 0) {
		return 0, fmt.Errorf("privacy: target epsilon %v must be positive and finite", targetEps)
	}
	if err := checkDelta(delta); err != nil {
		return 0, err
	}
	if event == nil {
		return 0, fmt.Errorf("privacy: NoiseMultiplier needs an event function")
	}
	// The search runs the PLD accountant at 10 times its step (with
	// connect-the-dots rounding this moves epsilon by far less than the
	// tolerance, and it is still an upper bound); the answer is checked
	// at the accountant's own precision.
	const searchRho = 10 * pldRho
	epsAt := func(z float64, m Method) (float64, Method, error) {
		a := NewAccountant(m)
		a.rho = searchRho
		if err := a.Compose(event(z)); err != nil {
			return 0, 0, fmt.Errorf("privacy: the run at noise multiplier %v: %w", z, err)
		}
		g, err := a.Guarantee(delta)
		return g.Eps, a.Method(), err
	}
	// The least epsilon reachable, at the largest z.
	eMax, method, err := epsAt(MaxNoiseMultiplier, Auto)
	if err != nil {
		return 0, err
	}
	if eMax > targetEps {
		return 0, fmt.Errorf("privacy: target epsilon %v at delta %v is out of reach: the smallest epsilon reachable with noise multipliers up to %v is %.6g",
			targetEps, delta, float64(MaxNoiseMultiplier), eMax)
	}
	// meets reports whether z meets the target by method m, and its log
	// epsilon over the target's; an evaluation that fails does not meet it.
	meets := func(z float64, m Method) (bool, float64) {
		e, _, err := epsAt(z, m)
		if err != nil || math.IsNaN(e) {
			return false, math.Inf(1)
		}
		return e <= targetEps, math.Log(e / targetEps)
	}
	if ok, _ := meets(MinNoiseMultiplier, Auto); ok {
		return MinNoiseMultiplier, nil
	}
	// Bracket with RDP: its epsilon is at least the accountant's, so where
	// RDP meets the target the accountant does too.
	lo, hi := MinNoiseMultiplier, float64(MaxNoiseMultiplier)
	if ok, _ := meets(hi, RDP); ok {
		for hi/lo > 1+1e-3 {
			mid := math.Sqrt(lo * hi)
			if ok, _ := meets(mid, RDP); ok {
				hi = mid
			} else {
				lo = mid
			}
		}
		if method == RDP {
			return hi, nil
		}
		// The accountant's bracket: hi meets; step down until a z fails.
		lo = hi
		for f := 0.8; ; f *= 0.8 {
			z := max(MinNoiseMultiplier, hi*f)
			if ok, _ := meets(z, Auto); !ok {
				lo = z
				break
			}
			hi = z
		}
	}
	// Regula falsi (Illinois) on g(t) = log eps - log target, t = log z,
	// g(lo) > 0 >= g(hi); fl, fh are the values it interpolates (halved
	// as Illinois does when one end stays).
	tl, th := math.Log(lo), math.Log(hi)
	_, gl := meets(lo, Auto)
	_, gh := meets(hi, Auto)
	fl, fh := gl, gh
	side := 0
	for th-tl > 1e-4 && gh < -1e-6 {
		t := (tl + th) / 2
		if !math.IsInf(fl, 0) && fl != fh {
			t = th - fh*(th-tl)/(fh-fl)
			// keep clear of the ends, so the bracket shrinks
			t = min(max(t, tl+(th-tl)/20), th-(th-tl)/20)
		}
		z := math.Exp(t)
		ok, g := meets(z, Auto)
		if ok {
			hi, th, gh, fh = z, t, g, g
			if side == 1 {
				fl /= 2
			}
			side = 1
		} else {
			tl, fl = t, g
			if side == -1 {
				fh /= 2
			}
			side = -1
		}
	}
	// The check, at the accountant's own precision, stepping up by the
	// tolerance while it fails.
	for range 100 {
		a := NewAccountant(Auto)
		if err := a.Compose(event(hi)); err != nil {
			return 0, err
		}
		e, err := a.Epsilon(delta)
		if err == nil && e <= targetEps {
			return hi, nil
		}
		hi *= 1 + 1e-4
	}
	return 0, fmt.Errorf("privacy: noise multiplier for epsilon %v at delta %v: the search's answer %v fails at full precision", targetEps, delta, hi)
}
