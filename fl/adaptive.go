package fl

import (
	"fmt"
	"math"

	"github.com/fedpq/fedpq/mech"
)

// adaptiveDefaults are R0, K and G of a bare "adaptive": ±0.05 is the fixed
// range issue 23 measured stable on MNIST; K = 3 puts a Gaussian spread's
// 99.7% inside the range; 1.5 lets a radius cover its band's factor 100 in
// about a dozen rounds.
var adaptiveDefaults = [3]float64{0.05, 3, 1.5}

// adaptiveSpan bounds an adaptive radius to [R0/adaptiveSpan, R0 adaptiveSpan].
const adaptiveSpan = 10

func (r RangeRule) validateAdaptive() error {
	switch {
	case !(r.Radius > 0) || math.IsInf(r.Radius*adaptiveSpan, 0):
		return fmt.Errorf("fl: adaptive range's first radius %v must be positive and finite", r.Radius)
	case !(r.Scale > 0) || math.IsInf(r.Scale, 0):
		return fmt.Errorf("fl: adaptive range's multiple K %v must be positive and finite", r.Scale)
	case !(r.Growth > 1) || math.IsInf(r.Growth, 0):
		return fmt.Errorf("fl: adaptive range's growth G %v must be above 1 and finite", r.Growth)
	}
	return nil
}

// next is the radius after cur when the round's target is target: target
// moved into [cur/G, cur G], then into [R0/adaptiveSpan, R0 adaptiveSpan].
// A NaN target counts as the largest: it still moves cur by at most G.
func (r RangeRule) next(cur, target float64) float64 {
	lo, hi := max(cur/r.Growth, r.Radius/adaptiveSpan), min(cur*r.Growth, r.Radius*adaptiveSpan)
	switch {
	case !(target <= hi): // NaN too
		return hi
	case target < lo:
		return lo
	}
	return target
}

// spread is the denoised RMS of one tensor's estimate est, decoded under rg
// from n uploads of which alone had no partner in the sum: with q_j =
// est_j^2 - v_j (v_j the mechanism's variance of the mean at input est_j),
// sqrt(max(mean(q) - evidence sd(q)/sqrt(d), 0)) over the tensor's d
// coordinates. The margin makes a spread that the noise's own fluctuation
// could explain count as none: pure noise then gives 0, not the RMS of
// its chance excess, in all but about 2% of tensors and rounds. A tensor of
// one value has no sd to judge by, and no spread.
func spread(m mech.Mechanism, est []float64, rg mech.Range, n, alone int) (float64, error) {
	var sum, sq float64
	for _, x := range est {
		v, err := mech.MeanVariance(m, x, rg, n, alone)
		if err != nil {
			return 0, err
		}
		q := x*x - v
		sum += q
		sq += q * q
	}
	d := float64(len(est))
	if d < 2 {
		return 0, nil
	}
	mean := sum / d
	sd := math.Sqrt(max(sq/d-mean*mean, 0) * d / (d - 1))
	return math.Sqrt(max(mean-evidence*sd/math.Sqrt(d), 0)), nil
}

// evidence is how many standard errors the mean of est^2 - v must exceed 0
// by to count as spread: one-sided, about 2.3% of pure-noise tensors pass.
const evidence = 2

// adapt moves each tensor's radius after a round whose estimate est was
// applied, decoded under ranges from n uploads, alone of them without a
// partner in the sum.
//
// The adaptive range (range: adaptive:R0,K,G) clips updates to ±r per
// tensor, with r chosen from what the server already sees, so that it
// spends no privacy: r is a function of the decoded means, which are
// functions of the clients' messages, each already charged in the ledger;
// post-processing keeps every client's guarantee, whoever sees the radius.
//
// Round 1 uses r = R0. After each round whose estimate was applied, a
// tensor's target is K times the denoised RMS of its estimate,
//
//	s^2 = mean_j (est_j^2 - v_j),   target = K sqrt(max(s^2, 0)),
//
// where v_j is the variance the mechanism adds to coordinate j of a mean of
// the round's n uploads (mech.MeanVariance, with the clients' inputs taken
// to be est_j, the pairs and lone clients as they were). E[est_j^2] is
// m_j^2 + v_j for the clients' true mean m_j, so s^2 estimates the spread of
// the true mean update, not of the noise: the rule minmax follows from the
// noisy estimate (max |est| is about alpha r / sqrt(n) times a few, for a
// one-bit mechanism's alpha = (e^eps+1)/(e^eps-1), 20 at eps 0.1) turns a
// range into a wider one every round; this one subtracts that part.
//
// It cannot run away, whatever the estimates: the next radius is the target
// moved into [r/G, r G] and then into [R0/10, 10 R0]. So a radius changes by
// at most the factor G a round and never leaves a hundredfold band around
// R0, and neither a huge noisy estimate nor a hostile client (whose effect
// on a mean is bounded by the mechanism's support anyway) can push it out.
func (e *Engine) adapt(est [][]float64, ranges []mech.Range, n, alone int) error {
	rule := e.cfg.Range
	for i, t := range est {
		s, err := spread(e.m, t, ranges[i], n, alone)
		if err != nil {
			return fmt.Errorf("fl: adaptive range of tensor %s: %w", e.specs[i].Name, err)
		}
		e.radii[i] = rule.next(e.radii[i], rule.Scale*s)
	}
	return nil
}

// checkAdaptive refuses an adaptive range where it cannot work: it clips
// updates (around 0), and needs the mechanism's variance of a mean.
func (e *Engine) checkAdaptive() error {
	if e.cfg.Perturb != "updates" {
		return fmt.Errorf("fl: range %v clips updates; with perturb %s use fixed, minmax or quantile", e.cfg.Range, e.cfg.Perturb)
	}
	if _, err := mech.MeanVariance(e.m, 0, mech.Range{Radius: e.cfg.Range.Radius}, 2, 0); err != nil {
		return fmt.Errorf("fl: range %v needs the noise of a decoded mean: %w", e.cfg.Range, err)
	}
	return nil
}

// checkRadii reports a checkpoint's adaptive radii that this run could not
// have reached: one per tensor, each in [R0/adaptiveSpan, R0 adaptiveSpan];
// none when the range is not adaptive.
func (e *Engine) checkRadii(radii []float64) error {
	if e.radii == nil {
		if radii != nil {
			return fmt.Errorf("fl: checkpoint has adaptive radii, the run's range is %v", e.cfg.Range)
		}
		return nil
	}
	if len(radii) != len(e.specs) {
		return fmt.Errorf("fl: checkpoint has %d adaptive radii, the model %d tensors", len(radii), len(e.specs))
	}
	r0 := e.cfg.Range.Radius
	for i, r := range radii {
		if !(r >= r0/adaptiveSpan && r <= r0*adaptiveSpan) {
			return fmt.Errorf("fl: checkpoint's adaptive radius of tensor %s is %v, outside [%g, %g]", e.specs[i].Name, r, r0/adaptiveSpan, r0*adaptiveSpan)
		}
	}
	return nil
}
