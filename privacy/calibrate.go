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
// accountant gives at most targetEps there. Where the run has a PLD, the
// search brackets z with the RDP accountant (cheap, and never below the
// accountant's answer); it narrows the bracket by regula falsi on log eps
// against log z (narrow).
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
	// at the accountant's own precision. The last few z's events are
	// kept: a costly curve (pbm's) keeps its values for the bracket's
	// ends and the check, and its memory stays bounded.
	const searchRho = 10 * pldRho
	type built struct {
		z  float64
		ev Event
	}
	var recent []built
	eventAt := func(z float64) Event {
		for _, b := range recent {
			if b.z == z {
				return b.ev
			}
		}
		if len(recent) == 4 {
			recent = recent[1:]
		}
		recent = append(recent, built{z, event(z)})
		return recent[len(recent)-1].ev
	}
	epsAt := func(z float64, m Method) (float64, Method, error) {
		a := NewAccountant(m)
		a.rho = searchRho
		if err := a.Compose(eventAt(z)); err != nil {
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
	lo, hi := MinNoiseMultiplier, float64(MaxNoiseMultiplier)
	if method != RDP {
		// Bracket with RDP: its epsilon is at least the accountant's, so
		// where RDP meets the target the accountant does too.
		if ok, _ := meets(hi, RDP); ok {
			hi = narrow(lo, hi, 1e-3, func(z float64) (bool, float64) { return meets(z, RDP) })
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
	}
	hi = narrow(lo, hi, 1e-4, func(z float64) (bool, float64) { return meets(z, Auto) })
	// The check, at the accountant's own precision, stepping up by the
	// tolerance while it fails.
	for range 100 {
		a := NewAccountant(Auto)
		if err := a.Compose(eventAt(hi)); err != nil {
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

// narrow is the smallest z in [lo, hi] that meets a target, to a relative
// tol, by regula falsi (Illinois) on g(t) = log eps - log target, t = log
// z: meets(z) says whether z meets it and gives g(z), g(lo) > 0 >= g(hi)
// (+Inf where z cannot be evaluated: the step bisects). Illinois halves
// the value kept at an end that stays, so the bracket shrinks from both
// sides in a few steps, where bisection over [0.05, 1000] would take 14.
// It returns as soon as hi's epsilon is within 1e-6 of the target.
func narrow(lo, hi, tol float64, meets func(z float64) (bool, float64)) float64 {
	tl, th := math.Log(lo), math.Log(hi)
	_, fl := meets(lo)
	_, gh := meets(hi)
	fh := gh
	side := 0
	for th-tl > tol && gh < -1e-6 {
		t := (tl + th) / 2
		if !math.IsInf(fl, 0) && fl != fh {
			t = th - fh*(th-tl)/(fh-fl)
			// keep clear of the ends, so the bracket shrinks
			t = min(max(t, tl+(th-tl)/20), th-(th-tl)/20)
		}
		z := math.Exp(t)
		ok, g := meets(z)
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
	return hi
}
