package fl

import (
	"fmt"

	"github.com/fedpq/fedpq/mech"
)

// roundSum is where a round's uploads go: the streaming aggregate, or,
// under secure aggregation, the masked sum.
type roundSum interface {
	// add takes the upload of the client at position pos, whole or not at
	// all.
	add(pos int, u Upload) error
	count() int
	// mean is the estimate of the (weighted) mean upload.
	mean() ([][]float64, error)
}

// aggregate is the server's side of a round: one streaming Sum per tensor
// when every upload weighs the same, or, for FedAvg with unequal clients, a
// weighted sum of each upload decoded on its own. Either way memory is the
// size of the model, whatever the number of clients.
type aggregate struct {
	m        mech.Mechanism
	slot     func(pos int) mech.Slot // the server's slot of a client, afresh
	ranges   []mech.Range
	sizes    []int
	sums     []mech.Sum // equal weights
	weighted bool
	acc      [][]float64 // weighted: sum of weight * decoded upload
	dec      [][]float64 // weighted, robust: one upload decoded, reused
	total    float64     // weighted: sum of weights
	n        int
	// stale is each position's staleness weight w (an asynchronous
	// buffer's, staleness.go), nil where every upload weighs 1; rest is
	// the weight sum of n (1 - w) its uploads leave to neutral, the
	// current model in weights mode (nil: 0, in updates mode).
	stale      []float64
	rest       float64
	neutral    [][]float32
	byExamples bool // weighted: each upload weighs its examples (FedAvg), else 1
}

// newAggregate is the streaming aggregate of the clients sel, each
// decoded with its server slot. stale, when not nil, weighs each
// position's upload y as w y + (1 - w) neutral (staleWeights).
func (e *Engine) newAggregate(ranges []mech.Range, sel []int, slot func(int) mech.Slot, stale []float64) (*aggregate, error) {
	a := &aggregate{m: e.m, slot: slot, ranges: ranges, byExamples: e.cfg.Weighting == "examples"}
	a.sizes = e.sizes
	if stale != nil {
		a.weighted, a.stale = true, stale
		if e.cfg.Perturb == "weights" {
			a.neutral = e.global
		}
	}
	if e.cfg.Weighting == "examples" {
		for _, k := range sel {
			if e.examples[k] != e.examples[sel[0]] {
				a.weighted = true
				break
			}
		}
	}
	if a.weighted {
		for _, n := range a.sizes {
			a.acc = append(a.acc, make([]float64, n))
			a.dec = append(a.dec, make([]float64, n))
		}
		return a, nil
	}
	for i, n := range a.sizes {
		s, err := e.m.NewSum(n, ranges[i])
		if err != nil {
			return nil, err
		}
		a.sums = append(a.sums, s)
	}
	return a, nil
}

// add decodes one upload into the aggregate. Every tensor's length is
// checked before any is added, so a truncated or oversized upload is
// refused whole rather than half counted.
func (a *aggregate) add(pos int, u Upload) error {
	if err := a.check(u); err != nil {
		return err
	}
	if !a.weighted {
		// A Sum refuses a bad payload whole; so that the upload is refused
		// whole too, every tensor is first decoded on its own, with a slot
		// of its own: a dithered client's stream runs on from one tensor
		// to the next, and the sums must read it from its start.
		if err := a.decode(pos, u); err != nil {
			return err
		}
		slot := a.slot(pos)
		for i, p := range u.Payloads {
			if err := a.sums[i].Add(p, slot); err != nil {
				return fmt.Errorf("tensor %d: %w", i, err) // unreachable: checked above
			}
		}
		a.n++
		return nil
	}
	if err := a.decode(pos, u); err != nil {
		return err
	}
	w := 1.0
	if a.byExamples {
		w = float64(u.Examples)
	}
	a.total += w
	if a.stale != nil {
		a.rest += w * (1 - a.stale[pos])
		w *= a.stale[pos]
	}
	for i, d := range a.dec { // added only once every tensor decoded
		for j, v := range d {
			a.acc[i][j] += w * v
		}
	}
	a.n++
	return nil
}

// check refuses an upload whose tensors are not the model's or whose
// payloads are not the mechanism's size for them.
func (a *aggregate) check(u Upload) error {
	if len(u.Payloads) != len(a.sizes) {
		return fmt.Errorf("upload has %d tensors, the model %d", len(u.Payloads), len(a.sizes))
	}
	for i, p := range u.Payloads {
		if want := (a.m.Bits(a.sizes[i]) + 7) / 8; len(p) != want {
			return fmt.Errorf("tensor %d: payload of %d bytes, want %d", i, len(p), want)
		}
	}
	return nil
}

// decode decodes the upload of the client at pos on its own, tensor by
// tensor, refusing it whole if any tensor fails, and writes into a.dec,
// where there is one, what that client's message says of each parameter.
func (a *aggregate) decode(pos int, u Upload) error {
	slot := a.slot(pos)
	for i, p := range u.Payloads {
		s, err := a.m.NewSum(a.sizes[i], a.ranges[i])
		if err != nil {
			return err
		}
		if err := s.Add(p, slot); err != nil {
			return fmt.Errorf("tensor %d: %w", i, err)
		}
		if a.dec != nil {
			if err := s.Mean(a.dec[i]); err != nil {
				return err
			}
		}
	}
	return nil
}

func (a *aggregate) count() int { return a.n }

// addShare adds the server's share of an L2 mechanism's noise (topUp) to
// the sums, not counted as an upload.
func (a *aggregate) addShare(payload []byte) error {
	if a.weighted || len(a.sums) != 1 {
		return fmt.Errorf("fl: a share of the noise goes to one unweighted sum, not %d", len(a.sums))
	}
	return a.sums[0].Add(payload, mech.Slot{})
}

func (a *aggregate) mean() ([][]float64, error) {
	est := make([][]float64, len(a.sizes))
	for i, n := range a.sizes {
		est[i] = make([]float64, n)
		if a.weighted {
			for j, v := range a.acc[i] {
				if a.neutral != nil {
					v += a.rest * float64(a.neutral[i][j])
				}
				est[i][j] = v / a.total
			}
			continue
		}
		if err := a.sums[i].Mean(est[i]); err != nil {
			return nil, err
		}
	}
	return est, nil
}
