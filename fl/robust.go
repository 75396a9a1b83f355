package fl

import (
	"fmt"
	"slices"

	"github.com/fedpq/fedpq/mech"
	"github.com/fedpq/fedpq/robust"
)

// robustSum is a round aggregated by a robust.Rule: it keeps each client's
// decoded message (float32, the model's size per client: the memory the
// rules need) and hands them to the rule, in position order, at the end.
// Every client counts once: the rules ignore FedAvg's weights, which a
// client states itself.
type robustSum struct {
	rule   robust.Rule
	dec    *aggregate // decodes one upload at a time
	params int        // the model's, a row's length
	rows   []robustRow
}

type robustRow struct {
	pos int
	w   []float32 // the client's message, every tensor in turn
}

func (e *Engine) newRobust(ranges []mech.Range, slot func(int) mech.Slot) *robustSum {
	a := &aggregate{m: e.m, slot: slot, ranges: ranges}
	a.sizes = e.sizes
	for _, n := range e.sizes {
		a.dec = append(a.dec, make([]float64, n))
	}
	return &robustSum{rule: e.cfg.Aggregator, dec: a, params: e.params}
}

func (r *robustSum) add(pos int, u Upload) error {
	if err := r.dec.check(u); err != nil {
		return err
	}
	if err := r.dec.decode(pos, u); err != nil {
		return err
	}
	w := make([]float32, 0, r.params)
	for _, t := range r.dec.dec {
		for _, v := range t {
			w = append(w, float32(v))
		}
	}
	r.rows = append(r.rows, robustRow{pos, w})
	return nil
}

func (r *robustSum) count() int { return len(r.rows) }

func (r *robustSum) mean() ([][]float64, error) {
	// A server adds uploads as they arrive; the rule sees them in
	// position order, so that its ties break as the simulation's do.
	slices.SortFunc(r.rows, func(a, b robustRow) int { return a.pos - b.pos })
	rows := make([][]float32, len(r.rows))
	for i, row := range r.rows {
		rows[i] = row.w
	}
	flat := make([]float64, len(rows[0]))
	if err := r.rule.Aggregate(rows, flat); err != nil {
		return nil, err
	}
	est := make([][]float64, len(r.dec.sizes))
	for i, n := range r.dec.sizes {
		est[i], flat = flat[:n:n], flat[n:]
	}
	return est, nil
}

// checkAggregator refuses a robust rule where the server cannot see each
// client's message, where weights would be ignored silently, or where a
// full round is too small for the rule's assumptions.
func (e *Engine) checkAggregator() error {
	rule := e.cfg.Aggregator
	switch {
	case e.cfg.SecureAggregation:
		return fmt.Errorf("fl: aggregator %s needs each client's message, which secure aggregation hides from the server: use aggregator mean", rule)
	case e.cfg.Shuffle:
		return fmt.Errorf("fl: aggregator %s needs each client's message, which the shuffler unlinks: use aggregator mean", rule)
	case e.cfg.Range.Kind == "adaptive":
		return fmt.Errorf("fl: the adaptive range subtracts the noise of the mean's estimate, which aggregator %s does not make: use a fixed range", rule)
	case e.cfg.Weighting != "mean":
		return fmt.Errorf("fl: aggregator %s counts every client once: set weighting: mean (FedAvg's weights are the clients' own claims)", rule)
	}
	n := e.roundSize()
	rows := make([][]float32, n)
	for i := range rows {
		rows[i] = []float32{0}
	}
	if err := rule.Aggregate(rows, make([]float64, 1)); err != nil {
		return fmt.Errorf("fl: a round of %d clients: %w", n, err)
	}
	return nil
}
