package fl

import (
	"errors"
	"fmt"

	"github.com/fedpq/fedpq/corr"
	"github.com/fedpq/fedpq/mech"
	"github.com/fedpq/fedpq/wire"
)

// shuffled is a round's aggregate behind LDP-FL's split and shuffle: a
// trusted shuffler takes every client's upload, splits it into one report
// per parameter, and delivers each parameter's reports to the server in an
// order of its own, unlinked from their clients and from the reports of
// the other parameters. The server sees, per parameter, the multiset of
// the round's reports; for a one-bit mechanism that is exactly the number
// of ones, the per-parameter sum that secure aggregation reveals.
//
// The simulation buffers the round's uploads (the shuffler's memory is
// the round's uplink), permutes each parameter's reports with the
// shuffler's own randomness, and hands the server the result as payloads
// whose i-th report of parameter j is the π_j(i)-th client's: the server
// decodes them as it would the clients' uploads.
type shuffled struct {
	m       mech.Mechanism
	width   int // bits of one parameter's report
	ranges  []mech.Range
	sizes   []int
	uploads [][][]byte
	src     func(tensor int) corr.Source // the shuffler's coins for a tensor's permutations
}

// reportWidth is the size in bits of one parameter's report, for the
// mechanisms whose payload is a fixed-width field per parameter that
// decodes on its own: a shuffler can then split an upload into reports.
// Dithered mechanisms need the link from a report to its client's dither,
// and jopeq-compat's header belongs to a whole tensor: they cannot be
// shuffled.
func reportWidth(m mech.Mechanism) (int, error) {
	w := m.Bits(1)
	linear := w >= 1 && w <= 32
	for _, n := range []int{2, 7, 8, 9, 1000} {
		linear = linear && m.Bits(n) == w*n
	}
	switch {
	case m.Coupling() == mech.Dithered:
		return 0, fmt.Errorf("%s shares a dither with the server, which must know whose report it decodes", m.Name())
	case !linear:
		return 0, fmt.Errorf("%s does not send a fixed-width field per parameter", m.Name())
	}
	return w, nil
}

// checkShuffle reports why a run cannot be shuffled: a mechanism whose
// reports cannot be split per parameter, unequal weights (the server
// cannot weigh a report it cannot link to its client), or a deployed
// server (the shuffler is a simulated trusted party).
func (e *Engine) checkShuffle() error {
	if _, err := reportWidth(e.m); err != nil {
		return fmt.Errorf("fl: shuffle: %w", err)
	}
	if e.cfg.SecureAggregation {
		return errors.New("fl: shuffle and secure aggregation are two ways to hide the clients' reports: choose one")
	}
	if e.task.Clients == nil {
		return errors.New("fl: shuffle is simulated only (fedpq run): the shuffler is a trusted party fedpq server does not have")
	}
	if e.cfg.Weighting == "examples" {
		for _, n := range e.examples {
			if n != e.examples[0] {
				return errors.New("fl: a shuffled server cannot weigh a report by its client's examples, and these clients hold different numbers: set weighting: mean")
			}
		}
	}
	return nil
}

func (e *Engine) newShuffled(t int, ranges []mech.Range) (*shuffled, error) {
	w, err := reportWidth(e.m)
	if err != nil {
		return nil, err
	}
	s := &shuffled{m: e.m, width: w, ranges: ranges, src: func(tensor int) corr.Source {
		return corr.Derive(e.secret, "shuffle", uint64(t), uint64(tensor))
	}}
	s.sizes = e.sizes
	return s, nil
}

// add checks an upload as the server would (the shuffler refuses what
// the server would, so that a bad report cannot spoil a parameter's
// multiset) and keeps it until the round ends.
func (s *shuffled) add(_ int, u Upload) error {
	if len(u.Payloads) != len(s.sizes) {
		return fmt.Errorf("upload has %d tensors, the model %d", len(u.Payloads), len(s.sizes))
	}
	for i, p := range u.Payloads {
		sum, err := s.m.NewSum(s.sizes[i], s.ranges[i])
		if err != nil {
			return err
		}
		if err := sum.Add(p, mech.Slot{}); err != nil {
			return fmt.Errorf("tensor %d: %w", i, err)
		}
	}
	s.uploads = append(s.uploads, u.Payloads)
	return nil
}

func (s *shuffled) count() int { return len(s.uploads) }

// mean shuffles each parameter's reports and decodes what the server
// receives.
func (s *shuffled) mean() ([][]float64, error) {
	est := make([][]float64, len(s.sizes))
	for i, d := range s.sizes {
		reports, err := s.shuffle(i, d)
		if err != nil {
			return nil, err
		}
		sum, err := s.m.NewSum(d, s.ranges[i])
		if err != nil {
			return nil, err
		}
		for _, p := range reports {
			if err := sum.Add(p, mech.Slot{}); err != nil {
				return nil, fmt.Errorf("tensor %d: a shuffled payload: %w", i, err) // unreachable: each report was checked
			}
		}
		est[i] = make([]float64, d)
		if err := sum.Mean(est[i]); err != nil {
			return nil, err
		}
	}
	return est, nil
}

// shuffle returns tensor i's reports as n payloads, the reports of each
// parameter in an order drawn for that parameter alone.
func (s *shuffled) shuffle(i, d int) ([][]byte, error) {
	n := len(s.uploads)
	fields := make([][]uint32, n) // fields[c][j]: client c's report of parameter j
	for c, u := range s.uploads {
		r, err := wire.NewUnpacker(u[i], d, s.width)
		if err != nil {
			return nil, err
		}
		fields[c] = make([]uint32, d)
		for j := range fields[c] {
			fields[c][j] = r.Next()
		}
	}
	perm := make([]int, n)
	src := s.src(i) // one stream for the tensor: a key per parameter would cost a key schedule each
	out := make([][]uint32, n)
	for c := range out {
		out[c] = make([]uint32, d)
	}
	for j := range d {
		for c := range perm {
			perm[c] = c
		}
		corr.Shuffle(src, perm)
		for c, from := range perm {
			out[c][j] = fields[from][j]
		}
	}
	payloads := make([][]byte, n)
	for c, f := range out {
		p := wire.NewPacker(nil, s.width)
		for _, v := range f {
			p.Put(v)
		}
		payloads[c] = p.Bytes()
	}
	return payloads, nil
}
