package fl

import (
	"fmt"
	"math"
	"sort"

	"github.com/fedpq/fedpq/internal/spec"
	"github.com/fedpq/fedpq/mech"
)

// RangeRule says how each round's clipping range (c, r) of a tensor is
// chosen. The range is public: the server announces it with the model.
type RangeRule struct {
	// Kind is "minmax" (c and r from the min and max of the reference: the
	// global weights, as the reimplementations of LDP-FL and CorBin-FL do,
	// or in updates mode the last estimated update, the weights in round 1), "fixed" (Center and
	// Radius for every tensor, as LDP-FL's paper does: (0, 0.075) on MNIST)
	// or "quantile" (c the median of the reference, r the Quantile of
	// |reference - c|), or "adaptive" (updates only: c = 0 and each
	// tensor's r follows the denoised spread of the last estimated update,
	// within bounds: adaptive.go).
	Kind           string
	Center, Radius float64 // fixed; adaptive: Radius is the first round's
	Quantile       float64
	Scale          float64 // the radius of minmax and quantile is multiplied by this; adaptive: K, the multiple of the spread
	Growth         float64 // adaptive: the most the radius may grow, or shrink, in one round
}

// minRadius keeps a tensor whose reference is constant (biases start at
// zero) encodable.
const minRadius = 1e-3

// ParseRange reads minmax, minmax:SCALE, fixed:C,R, quantile:Q,
// quantile:Q,SCALE, or adaptive[:R0[,K[,G]]] (defaults 0.05, 3 and 1.5).
func ParseRange(s string) (RangeRule, error) {
	p := spec.Parse(s)
	nums, err := p.Numbers()
	if err != nil {
		return RangeRule{}, fmt.Errorf("fl: range %q: %w", s, err)
	}
	kind := p.Kind
	r := RangeRule{Kind: kind, Scale: 1}
	switch {
	case kind == "minmax" && len(nums) <= 1:
		if len(nums) == 1 {
			r.Scale = nums[0]
		}
	case kind == "fixed" && len(nums) == 2:
		r.Center, r.Radius = nums[0], nums[1]
	case kind == "quantile" && (len(nums) == 1 || len(nums) == 2):
		r.Quantile = nums[0]
		if len(nums) == 2 {
			r.Scale = nums[1]
		}
	case kind == "adaptive" && len(nums) <= 3:
		r.Radius, r.Scale, r.Growth = adaptiveDefaults[0], adaptiveDefaults[1], adaptiveDefaults[2]
		given := []*float64{&r.Radius, &r.Scale, &r.Growth}
		for i, v := range nums {
			*given[i] = v
		}
	default:
		return RangeRule{}, fmt.Errorf("fl: range %q: want minmax, minmax:SCALE, fixed:C,R, quantile:Q, quantile:Q,SCALE or adaptive[:R0[,K[,G]]]", s)
	}
	return r, r.validate()
}

func (r RangeRule) String() string {
	switch r.Kind {
	case "fixed":
		return fmt.Sprintf("fixed:%g,%g", r.Center, r.Radius)
	case "quantile":
		return fmt.Sprintf("quantile:%g,%g", r.Quantile, r.Scale)
	case "adaptive":
		return fmt.Sprintf("adaptive:%g,%g,%g", r.Radius, r.Scale, r.Growth)
	}
	return fmt.Sprintf("minmax:%g", r.Scale)
}

func (r RangeRule) validate() error {
	switch r.Kind {
	case "fixed":
		return mech.Range{Center: r.Center, Radius: r.Radius}.Validate()
	case "minmax", "quantile":
		if !(r.Scale > 0) || math.IsInf(r.Scale, 0) {
			return fmt.Errorf("fl: range scale %v must be positive", r.Scale)
		}
		if r.Kind == "quantile" && !(r.Quantile > 0 && r.Quantile <= 1) {
			return fmt.Errorf("fl: range quantile %v must be in (0, 1]", r.Quantile)
		}
		return nil
	case "adaptive":
		return r.validateAdaptive()
	}
	return fmt.Errorf("fl: range kind %q: want minmax, fixed, quantile or adaptive", r.Kind)
}

// ranges returns this round's range of every tensor.
func (e *Engine) ranges() ([]mech.Range, error) {
	if e.cfg.DP.on() {
		c := mech.Range{Radius: e.clip}
		if err := c.Validate(); err != nil {
			return nil, fmt.Errorf("clip: %w", err)
		}
		switch {
		case e.cfg.DP.Quantile > 0 && e.m.Name() == "none":
			return []mech.Range{c, indicatorRange}, nil
		case e.cfg.DP.Quantile > 0:
			zu, err := e.updateNoise()
			if err != nil {
				return nil, err
			}
			z := e.cfg.DP.Noise
			c.Radius = e.clip * zu / z // the vector's bound C'
			return []mech.Range{c, {Radius: c.Radius * z / (2 * e.quantileNoise())}}, nil
		}
		return []mech.Range{c}, nil
	}
	rule := e.cfg.Range
	ref := e.global
	if e.cfg.Perturb == "updates" && e.prevUpd != nil {
		// The last estimated update; before there is one, the weights
		// themselves: an update seldom spans more than they do.
		ref = e.prevUpd
	}
	out := make([]mech.Range, len(e.specs))
	for i := range out {
		switch rule.Kind {
		case "fixed":
			out[i] = mech.Range{Center: rule.Center, Radius: rule.Radius}
		case "adaptive":
			out[i] = mech.Range{Radius: e.radii[i]}
		default:
			out[i] = rule.of(ref[i])
		}
		if err := out[i].Validate(); err != nil {
			return nil, fmt.Errorf("tensor %s: %w", e.specs[i].Name, err)
		}
	}
	return out, nil
}

// of is the range a minmax or quantile rule gives for one tensor.
func (r RangeRule) of(w []float32) mech.Range {
	var c, rad float64
	if r.Kind == "minmax" {
		lo, hi := math.Inf(1), math.Inf(-1)
		for _, v := range w {
			lo, hi = min(lo, float64(v)), max(hi, float64(v))
		}
		c, rad = (hi+lo)/2, (hi-lo)/2
	} else {
		s := make([]float64, len(w))
		for i, v := range w {
			s[i] = float64(v)
		}
		sort.Float64s(s)
		c = s[len(s)/2]
		for i, v := range s {
			s[i] = math.Abs(v - c)
		}
		sort.Float64s(s)
		rad = s[min(len(s)-1, int(math.Ceil(r.Quantile*float64(len(s))))-1)]
	}
	return mech.Range{Center: c, Radius: max(rad*r.Scale, minRadius)}
}
