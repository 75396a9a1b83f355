package privacy

import (
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"
)

// Method is how an Accountant composes: by privacy loss distributions
// (PLD), by Renyi DP (RDP), or Auto: PLD when every event composed so far
// has a loss distribution (Gaussian, Pair, and those Poisson-sampled),
// taking RDP's answer where it is smaller, else RDP.
type Method int

const (
	Auto Method = iota
	PLD
	RDP
)

func (m Method) String() string {
	switch m {
	case Auto:
		return "auto"
	case PLD:
		return "pld"
	case RDP:
		return "rdp"
	}
	return "Method(" + strconv.Itoa(int(m)) + ")"
}

// Relations, as Guarantee and the saved state name them.
const (
	AddRemove  = "add/remove one client"
	ReplaceOne = "replace one client"
)

// An Accountant composes the events of a run, one client's whole
// contribution, into one (eps, delta): compose each round's event as the
// run goes (counts of equal events are merged), ask Epsilon or Delta at any
// time. Its state is the list of events with their counts; JSON (Marshal,
// Unmarshal) saves and restores it exactly, so a resumed run's answers are
// the same to the bit.
//
// PLD composes dominating pairs' loss distributions on a grid (sampled.go,
// pldcompose.go) whose every step only raises delta, so that the result is
// an upper bound. With K the number of runs discretized (the unsampled
// Gaussians, merged into one, count once) and h the step, it exceeds the
// exact epsilon of the pairs by less than K h (Guarantee.Slack), and in
// practice by far less (TestPLDRounding). h is pldRho (0.5%) of a first
// estimate over K (the RDP epsilon, itself an upper bound, or a coarse PLD
// pass), finer where that is cheap; where a grid of maxBins bins cannot
// give 4 pldRho the PLD method errs and Auto answers by RDP (saying so in
// Guarantee.Note). Mass the truncations leave out (at most 1e-4 delta) is
// put at +Inf loss: counted in delta, never dropped; FFT rounding is
// covered by fftAllowance (1e-12 of delta). Auto answers with the least
// of PLD's and RDP's epsilons (both are upper bounds) and Guarantee says
// which; PLD and RDP answer by their own.
//
// The zero Accountant is empty and composes by Auto. An Accountant is not
// safe for concurrent use.
type Accountant struct {
	method   Method
	relation string
	atoms    []atom
	keys     []string    // SHA-256 of each atom's JSON, to merge equal events
	rdps     [][]float64 // each atom's RDP per run at rdpOrders, once computed
	rho      float64     // the PLD precision; 0 is pldRho
}

// NewAccountant is an empty accountant that composes by m.
func NewAccountant(m Method) *Accountant { return &Accountant{method: m} }

// Compose adds e to the run. e is checked first; a bad event, or one whose
// neighbouring relation (add/remove for PoissonSampled, replace-one for
// FixedSampled) differs from those composed before, is refused with an
// error and leaves the accountant as it was.
func (a *Accountant) Compose(e Event) error {
	atoms, err := flatten(e, 1, nil)
	if err != nil {
		return err
	}
	rel := a.relation
	for _, x := range atoms {
		r := atomRelation(x.Event)
		if r == "" {
			continue
		}
		if rel != "" && r != rel {
			return fmt.Errorf("privacy: a %s event after %s events: one run has one neighbouring relation", r, rel)
		}
		rel = r
	}
	keys := make([]string, len(atoms))
	for i, x := range atoms {
		k, err := json.Marshal(encodeEvent(x.Event))
		if err != nil {
			return err
		}
		sum := sha256.Sum256(k)
		keys[i] = string(sum[:])
	}
	for i, x := range atoms {
		if j := indexOf(a.keys, keys[i]); j >= 0 {
			if a.atoms[j].Count > math.MaxInt32-x.Count {
				return fmt.Errorf("privacy: more than %d runs of one event", math.MaxInt32)
			}
		}
	}
	for i, x := range atoms {
		if j := indexOf(a.keys, keys[i]); j >= 0 {
			a.atoms[j].Count += x.Count
		} else {
			a.atoms = append(a.atoms, x)
			a.keys = append(a.keys, keys[i])
		}
	}
	a.relation = rel
	return nil
}

func indexOf(keys []string, k string) int {
	for i, x := range keys {
		if x == k {
			return i
		}
	}
	return -1
}

func atomRelation(e Event) string {
	switch e.(type) {
	case PoissonSampled:
		return AddRemove
	case FixedSampled:
		return ReplaceOne
	}
	return ""
}

// Method is the method Epsilon and Delta use for the events composed so
// far: PLD or RDP.
func (a *Accountant) Method() Method {
	if a.method != Auto {
		return a.method
	}
	for _, x := range a.atoms {
		if !pldCapable(x.Event) {
			return RDP
		}
	}
	return PLD
}

// Relation is the neighbouring relation of the run's sampled events
// (AddRemove or ReplaceOne), or "" when none was sampled: then the
// guarantee holds for whichever relation the events' sensitivities were
// stated for.
func (a *Accountant) Relation() string { return a.relation }

// String lists the composed events, e.g. "1000 x poisson(q=0.1, gaussian(z=1))".
func (a *Accountant) String() string {
	var b strings.Builder
	for i, x := range a.atoms {
		if i > 0 {
			b.WriteString(" + ")
		}
		fmt.Fprintf(&b, "%d x %s", x.Count, describe(x.Event))
	}
	if b.Len() == 0 {
		return "nothing"
	}
	return b.String()
}

func describe(e Event) string {
	switch e := e.(type) {
	case Gaussian:
		return fmt.Sprintf("gaussian(z=%g)", e.Z)
	case rdpTable:
		return fmt.Sprintf("rdp curve %q", e.Name)
	case Pair:
		return fmt.Sprintf("pair %q (%d outcomes)", e.Name, len(e.P))
	case PoissonSampled:
		return fmt.Sprintf("poisson(q=%g, %s)", e.Rate, describe(e.Event))
	case FixedSampled:
		return fmt.Sprintf("fixed(%d of %d, %s)", e.M, e.N, describe(e.Event))
	}
	return eventKind(e)
}

// A Guarantee is an accountant's answer: the run is (Eps, Delta)-DP for
// one client, under Relation. Method is the accountant that gave Eps; for
// PLD, Slack bounds how far the grid's rounding put Eps above the exact
// epsilon of the composed pairs (at Delta less the truncated mass). Note
// says why Auto answered by RDP when every event had a loss distribution.
type Guarantee struct {
	Eps, Delta float64
	Method     Method
	Relation   string
	Slack      float64
	Note       string
}

// Precision of the PLD accountant (see Accountant).
const (
	pldRho     = 5e-3
	pldMinBins = 1 << 16
)

// Epsilon is the smallest eps for which the run so far is (eps,
// delta)-DP, as far as the accountant can tell: Guarantee(delta).Eps.
func (a *Accountant) Epsilon(delta float64) (float64, error) {
	g, err := a.Guarantee(delta)
	return g.Eps, err
}

// Guarantee is the run's guarantee at delta. An empty run is (0,
// delta)-DP. Errors: delta outside (0, 1); no finite eps at delta (an
// event with unbounded loss, or delta below the mass the PLD truncations
// set aside, 1e-4 delta); a PLD that cannot reach its precision (Auto
// then answers by RDP, with a Note).
func (a *Accountant) Guarantee(delta float64) (Guarantee, error) {
	g := Guarantee{Delta: delta, Method: a.Method(), Relation: a.relation}
	if err := checkDelta(delta); err != nil {
		return g, err
	}
	if err := a.checkMethod(); err != nil {
		return g, err
	}
	if len(a.atoms) == 0 {
		return g, nil
	}
	re, _ := rdpEpsilon(rdpOrders, a.rdp(), delta)
	if g.Method == RDP || (re == 0 && a.method == Auto) {
		g.Method, g.Eps = RDP, re
		if math.IsInf(re, 1) {
			return g, fmt.Errorf("privacy: no finite epsilon at delta %v for %s (RDP)", delta, a)
		}
		return g, nil
	}
	tail := 1e-4 * delta
	scale := re
	if math.IsInf(scale, 1) || scale == 0 {
		coarse, _, err := a.composePLD(math.NaN(), tail)
		var imprecise errPrecision
		if errors.As(err, &imprecise) && a.method == Auto && re == 0 {
			g.Method, g.Eps, g.Note = RDP, re, err.Error()
			return g, nil
		}
		if err != nil {
			return g, err
		}
		scale = max(newCurve(coarse[0]).epsilon(delta), newCurve(coarse[1]).epsilon(delta))
	}
	if math.IsInf(scale, 1) {
		return g, fmt.Errorf("privacy: no finite epsilon at delta %v for %s (PLD; its truncations set aside %.3g)", delta, a, tail)
	}
	var pe, slack float64
	if scale > 0 {
		dirs, s, err := a.composePLD(scale, tail)
		var imprecise errPrecision
		if errors.As(err, &imprecise) && a.method == Auto && !math.IsInf(re, 1) {
			g.Method, g.Eps, g.Note = RDP, re, err.Error()
			return g, nil
		}
		if err != nil {
			return g, err
		}
		pe, slack = max(newCurve(dirs[0]).epsilon(delta), newCurve(dirs[1]).epsilon(delta)), s
	}
	if a.method == Auto && re < pe {
		g.Eps, g.Method = re, RDP
		return g, nil
	}
	if math.IsInf(pe, 1) {
		return g, fmt.Errorf("privacy: no finite epsilon at delta %v for %s (PLD)", delta, a)
	}
	g.Eps, g.Slack = pe, slack
	return g, nil
}

// RDPEpsilon is the run's epsilon at delta by RDP alone: never below what
// Guarantee answers, and far cheaper than PLD, so a caller that only needs
// to know whether a bound holds can try it first.
func (a *Accountant) RDPEpsilon(delta float64) (float64, error) {
	if err := checkDelta(delta); err != nil {
		return 0, err
	}
	if len(a.atoms) == 0 {
		return 0, nil
	}
	re, _ := rdpEpsilon(rdpOrders, a.rdp(), delta)
	if math.IsInf(re, 1) {
		return re, fmt.Errorf("privacy: no finite epsilon at delta %v for %s (RDP)", delta, a)
	}
	return re, nil
}

// Delta is the smallest delta for which the run so far is (eps,
// delta)-DP as far as the accountant can tell, eps > 0: by its method, and
// for Auto the least of PLD's (where every event has a loss distribution)
// and RDP's. PLD's grid step is pldRho eps/K, so its delta is at most the
// exact delta at eps (1 - pldRho), plus its truncations (at most 1e-15)
// and fftAllowance.
func (a *Accountant) Delta(eps float64) (float64, error) {
	if err := checkEpsilon(eps); err != nil {
		return 0, err
	}
	if err := a.checkMethod(); err != nil {
		return 0, err
	}
	if len(a.atoms) == 0 {
		return 0, nil
	}
	d := rdpDelta(rdpOrders, a.rdp(), eps)
	if a.Method() == RDP {
		return d, nil
	}
	dirs, _, err := a.composePLD(eps, 1e-15)
	var imprecise errPrecision
	if errors.As(err, &imprecise) && a.method == Auto {
		return d, nil
	}
	if err != nil {
		return 0, err
	}
	pd := max(newCurve(dirs[0]).delta(eps), newCurve(dirs[1]).delta(eps))
	if a.method == PLD {
		return pd, nil
	}
	return min(d, pd), nil
}

func (a *Accountant) checkMethod() error {
	switch a.method {
	case Auto, RDP:
		return nil
	case PLD:
		for _, x := range a.atoms {
			if !pldCapable(x.Event) {
				return fmt.Errorf("privacy: the PLD accountant has no loss distribution for %s; use RDP or Auto", describe(x.Event))
			}
		}
		return nil
	}
	return fmt.Errorf("privacy: unknown accounting method %v", a.method)
}

// rdp is the run's RDP curve at rdpOrders.
func (a *Accountant) rdp() []float64 {
	total := make([]float64, len(rdpOrders))
	for len(a.rdps) < len(a.atoms) {
		a.rdps = append(a.rdps, nil)
	}
	for j, x := range a.atoms {
		if a.rdps[j] == nil {
			a.rdps[j] = atomRDP(x.Event, rdpOrders)
		}
		for i, r := range a.rdps[j] {
			total[i] += float64(x.Count) * r
		}
	}
	return total
}

// composePLD composes the atoms' loss distributions on a grid whose
// rounding adds at most pldRho scale (see Accountant); scale NaN asks for a
// coarse pass of pldMinBins bins. It returns both directions and the bound
// K h on the rounding's cost.
func (a *Accountant) composePLD(scale, tail float64) ([2]pld, float64, error) {
	k := 0
	gauss := false
	for _, x := range a.atoms {
		if _, ok := x.Event.(Gaussian); ok {
			gauss = true
		} else {
			k += x.Count
		}
	}
	if gauss {
		k++
	}
	kf := float64(k)
	coarse := math.IsNaN(scale)
	rho := a.rho
	if rho == 0 {
		rho = pldRho
	}
	h := rho * scale / kf
	if coarse {
		h = 1e-3
	}
	// A probe at a coarse step learns the composition's width, so that a
	// precision no grid can give is refused without building big grids.
	if !coarse && h < 1e-3 {
		if parts, err := pldParts(a.atoms, 1e-3, tail, true); err == nil {
			w := width(parts, tail)
			if hmin := 2.2 * w / maxBins; w/1e-3 >= 1000 && kf*hmin > 4*rho*scale {
				return [2]pld{}, 0, errPrecision{fmt.Sprintf("privacy: PLD accountant: %s needs grid step %.3g for its precision, and %d bins allow only %.3g (rounding up to %.3g on an epsilon near %.3g)", a, h, maxBins, hmin, kf*hmin, scale)}
			}
		}
	}
	resized := false
	for range 8 {
		parts, err := pldParts(a.atoms, h, tail, true)
		var tooFine errTooFine
		if errors.As(err, &tooFine) {
			h *= 2.2 * tooFine.bins / maxBins
			continue
		}
		if err != nil {
			return [2]pld{}, 0, err
		}
		bins := width(parts, tail) / h
		switch {
		case bins > maxBins/2:
			h *= 2.2 * bins / maxBins
			continue
		case !resized && (bins < pldMinBins/2 || coarse && bins > 2*pldMinBins):
			// finer costs little (or a coarse pass wants few bins);
			// once, as an atom's width shrinks with the step
			resized = true
			h *= max(bins, 1) / pldMinBins
			continue
		}
		if !coarse && kf*h > 4*rho*scale {
			return [2]pld{}, 0, errPrecision{fmt.Sprintf("privacy: PLD accountant: %s needs grid step %.3g for its precision, and %d bins allow only %.3g (rounding up to %.3g on an epsilon near %.3g)", a, rho*scale/kf, maxBins, h, kf*h, scale)}
		}
		dirs, err := composeParts(parts, tail, true)
		if errors.As(err, &tooFine) {
			h *= 2.2 * tooFine.bins / maxBins
			continue
		}
		return dirs, kf * h, err
	}
	return [2]pld{}, 0, errPrecision{fmt.Sprintf("privacy: PLD accountant: no grid fits %s in %d bins", a, maxBins)}
}

// errPrecision is a PLD that cannot reach its precision: Auto answers by
// RDP instead, PLD errs.
type errPrecision struct{ msg string }

func (e errPrecision) Error() string { return e.msg }
