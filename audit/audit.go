// Package audit bounds a mechanism's privacy from below, from its outputs
// alone: it tests a claimed epsilon instead of trusting its derivation.
//
// Epsilon is the black-box audit of Jagielski, Ullman and Oprea, "Auditing
// differentially private machine learning: how private is private SGD?"
// (NeurIPS 2020): encode two neighbouring inputs many times, decode each
// message as the server does, and turn the counts of each output event into
// a certified privacy loss with Clopper–Pearson intervals (Clopper and
// Pearson, Biometrika 1934).
//
// The observer is one message of one parameter. The server's view of a
// corbin pair (both messages, whose joint loss docs/privacy.md shows to be
// unbounded) is out of scope for now.
package audit

import (
	"errors"
	"fmt"
	"math"
	"sort"

	"gonum.org/v1/gonum/stat/distuv"

	"github.com/fedpq/fedpq/corr"
	"github.com/fedpq/fedpq/mech"
)

// Result is the outcome of an audit.
type Result struct {
	// Lower is the certified lower bound on epsilon (0 when nothing is
	// certified).
	Lower float64
	// Bins is the number of output events tested.
	Bins int
	// Samples is the number of messages per input (n).
	Samples int
}

// maxExact is the largest number of distinct decoded values for which
// every value is its own event; beyond it the outputs are binned.
const maxExact = 64

// quantileBins is the number of equal-mass bins of a continuous output.
const quantileBins = 32

// Epsilon returns a lower bound on the per-parameter epsilon of one message
// of m under rg: with probability at least 1-alpha over the audit's coins,
// the true epsilon (at the given delta) is at least Lower. A mechanism whose
// Lower exceeds its claim is broken, with that confidence.
//
// It encodes w0 and w1 (the range ends are the worst case of the quantizers)
// n times each, every message with fresh coins as a lone client would get
// them (Role Alone, a group of one, its own dither), decodes each with
// NewSum(1, rg) as the server does, and counts the decoded values in events
// B. For every B and both directions it bounds P0(B) from below and P1(B)
// from above, and certifies eps >= ln((P0lo(B) - delta) / P1hi(B)), which
// (eps, delta)-DP forbids to exceed eps. The events are fixed before the
// counted samples are drawn, from a separate pilot sample of n per input:
// each distinct value (plus one event for any value the pilot missed) when
// the pilot shows at most 64, else 32 equal-mass bins. Each of the 2·Bins
// probabilities gets a two-sided Clopper–Pearson interval of confidence
// 1-alpha/(2·Bins), so by the union bound all hold at once with probability
// at least 1-alpha.
//
// Assumptions: the mechanism's randomness comes only from its Slot (so seed
// fixes the audit), and the message of one parameter is its whole output.
// A lower bound is only as strong as the events tested: Lower far below a
// claim does not show the claim is tight.
func Epsilon(m mech.Mechanism, rg mech.Range, w0, w1 float64, n int, alpha, delta float64, seed uint64) (Result, error) {
	if n < 1 {
		return Result{}, fmt.Errorf("audit: %d samples", n)
	}
	if !(alpha > 0 && alpha < 1) {
		return Result{}, fmt.Errorf("audit: alpha %v must be in (0, 1)", alpha)
	}
	if !(delta >= 0 && delta < 1) {
		return Result{}, fmt.Errorf("audit: delta %v must be in [0, 1)", delta)
	}
	if err := rg.Validate(); err != nil {
		return Result{}, err
	}
	secret := corr.SeedSecret(seed)
	var pilot, main [2][]float64
	for b, w := range [2]float64{w0, w1} {
		var err error
		if pilot[b], err = sample(m, rg, w, n, secret, "audit pilot", uint64(b)); err != nil {
			return Result{}, err
		}
		if main[b], err = sample(m, rg, w, n, secret, "audit", uint64(b)); err != nil {
			return Result{}, err
		}
	}
	event, bins := events(append(append([]float64(nil), pilot[0]...), pilot[1]...))
	var count [2][]int
	for b := range main {
		count[b] = make([]int, bins)
		for _, v := range main[b] {
			count[b][event(v)]++
		}
	}
	tail := alpha / (4 * float64(bins)) // each side of a 1-alpha/(2 bins) interval
	lower := 0.0
	for k := range bins {
		for _, d := range [][2]int{{0, 1}, {1, 0}} {
			lo := cpLower(count[d[0]][k], n, tail) - delta
			hi := cpUpper(count[d[1]][k], n, tail)
			if lo > 0 {
				lower = max(lower, math.Log(lo/hi))
			}
		}
	}
	return Result{Lower: lower, Bins: bins, Samples: n}, nil
}

// sample encodes w n times, with the coins of a lone client derived from
// secret, purpose, side and index, and returns the decoded values.
func sample(m mech.Mechanism, rg mech.Range, w float64, n int, secret []byte, purpose string, side uint64) ([]float64, error) {
	out := make([]float64, n)
	in := []float32{float32(w)}
	mean := make([]float64, 1)
	var payload []byte
	for i := range out {
		slot := func() mech.Slot {
			s := mech.Slot{Private: corr.Derive(secret, purpose+" private", side, uint64(i)), Role: mech.Alone}
			switch m.Coupling() {
			case mech.Paired, mech.Grouped, mech.Dithered:
				s.Shared = corr.Derive(secret, purpose+" shared", side, uint64(i))
			}
			if m.Coupling() == mech.Grouped {
				s.Size = 1
			}
			return s
		}
		var err error
		if payload, err = m.Encode(payload[:0], in, rg, slot()); err != nil {
			return nil, fmt.Errorf("audit: %s encode: %w", m.Name(), err)
		}
		sum, err := m.NewSum(1, rg)
		if err != nil {
			return nil, fmt.Errorf("audit: %s: %w", m.Name(), err)
		}
		// The server's slot replays the same shared stream (the dither).
		if err := sum.Add(payload, slot()); err != nil {
			return nil, fmt.Errorf("audit: %s decode: %w", m.Name(), err)
		}
		if err := sum.Mean(mean); err != nil {
			return nil, fmt.Errorf("audit: %s mean: %w", m.Name(), err)
		}
		if math.IsNaN(mean[0]) {
			return nil, errors.New("audit: " + m.Name() + " decoded NaN")
		}
		out[i] = mean[0]
	}
	return out, nil
}

// events returns the map from a decoded value to its event index, and the
// number of events, chosen from the pilot values alone.
func events(pilot []float64) (func(float64) int, int) {
	distinct := map[float64]int{}
	for _, v := range pilot {
		if _, ok := distinct[v]; !ok {
			if len(distinct) == maxExact {
				distinct = nil
				break
			}
			distinct[v] = len(distinct)
		}
	}
	if distinct != nil {
		other := len(distinct) // values the pilot never showed
		return func(v float64) int {
			if k, ok := distinct[v]; ok {
				return k
			}
			return other
		}, other + 1
	}
	sort.Float64s(pilot)
	// Upper edges of equal-mass bins; bin k holds (edge[k-1], edge[k]].
	var edges []float64
	for k := 1; k < quantileBins; k++ {
		e := pilot[k*len(pilot)/quantileBins-1]
		if len(edges) == 0 || e > edges[len(edges)-1] {
			edges = append(edges, e)
		}
	}
	return func(v float64) int { return sort.SearchFloat64s(edges, v) }, len(edges) + 1
}

// cpLower is the one-sided Clopper–Pearson lower bound, at level tail, of a
// probability seen k times in n trials.
func cpLower(k, n int, tail float64) float64 {
	if k == 0 {
		return 0
	}
	return distuv.Beta{Alpha: float64(k), Beta: float64(n - k + 1)}.Quantile(tail)
}

// cpUpper is the one-sided Clopper–Pearson upper bound, at level tail.
func cpUpper(k, n int, tail float64) float64 {
	if k == n {
		return 1
	}
	return distuv.Beta{Alpha: float64(k + 1), Beta: float64(n - k)}.Quantile(1 - tail)
}
