package fl

import (
	"errors"

	"github.com/fedpq/fedpq/mech"
	"github.com/fedpq/fedpq/privacy"
	"github.com/fedpq/fedpq/report"
)

// account writes round p's privacy into r: the ledger of the client that
// took part in the most rounds, with what the server learns where it sees
// only a sum or a shuffle; none when the mechanism guarantees nothing.
func (e *Engine) account(r *report.Round, p *Plan) error {
	if e.ldp {
		r.Epsilon = e.cfg.Mech.Epsilon
		r.EpsilonSpent = e.spent()
		l, _, err := e.Ledger()
		if err != nil {
			return err
		}
		if e.m.Alone() > 0 { // AugCorBin: some clients quantize alone by design
			e.central(l, p)
		}
		if e.cfg.SecureAggregation || e.cfg.Shuffle {
			if err := e.hidden(l, p.T == e.cfg.Rounds); err != nil {
				return err
			}
		}
		l.User = seedUser(l)
		r.Privacy = l
	} else if _, modular := e.m.(mech.Modular); modular && e.cfg.SecureAggregation && !e.cfg.DP.on() {
		// ddgauss and skellam: no guarantee from one message, a central
		// one from the secure sum.
		l := &privacy.Ledger{Rounds: e.most(), Parameters: e.params, Delta: e.cfg.LedgerDelta}
		if err := e.hidden(l, p.T == e.cfg.Rounds); err != nil {
			return err
		}
		r.Privacy = l
	}
	if e.cfg.DP.on() && e.userRound(p) {
		u, err := e.userLevel(p.T)
		if err != nil {
			return err
		}
		if r.Privacy == nil {
			r.Privacy = &privacy.Ledger{Rounds: e.most(), Parameters: e.params, Delta: e.cfg.DP.delta()}
		}
		r.Privacy.User = u
	}
	return nil
}

// userRound reports whether round p's record states DP-FedAvg's
// user-level guarantee: the accountant's answer costs up to a second at a
// thousand rounds, so it is given where the run evaluates the model, at
// the last round, and at the round after which the budget stops the run.
func (e *Engine) userRound(p *Plan) bool {
	if p.T%e.cfg.EvalEvery == 0 || p.T == e.cfg.Rounds {
		return true
	}
	return errors.Is(e.budget(p.T+1, p.online), ErrBudget)
}

// seedUser is the user-level entry of a per-parameter LDP mechanism's
// ledger l: the whole upload composed over the rounds the most-sampled
// client took part in, against the eavesdropper and the server as l states
// them (upload_optimal), and against whoever gets the models the smaller
// of the two, which both bound (the models are computed from what the
// server sees, and from the client's messages and others' independent of
// its data). No amplification by sampling is computed for these
// mechanisms.
func seedUser(l *privacy.Ledger) *privacy.UserLevel {
	u := &privacy.UserLevel{Rounds: l.Rounds, Relation: "any change of one client's data (local DP)",
		Amplification: "none computed for per-parameter mechanisms",
		Accountant:    "the whole upload over the rounds: optimal composition (Kairouz, Oh and Viswanath), or PLD of the secure sum (docs/privacy.md)"}
	if l.Eavesdropper != nil {
		u.Eavesdropper = l.Eavesdropper.UploadOptimal
	}
	if l.Server != nil {
		u.Server = l.Server.UploadOptimal
	}
	u.Model = u.Server
	if e := u.Eavesdropper; e != nil && (u.Model == nil || e.Eps < u.Model.Eps) {
		u.Model = e
	}
	if u.Model == nil {
		u.Note = "no guarantee in the worst case against the server (docs/privacy.md)"
	}
	return u
}

// most is the number of rounds of the client that took part in the most.
func (e *Engine) most() int {
	most := 0
	for _, n := range e.joined {
		most = max(most, n)
	}
	return most
}

// spent is the per-parameter eps the most-used client has spent, by basic
// composition over the rounds it took part in.
func (e *Engine) spent() float64 { return float64(e.most()) * e.cfg.Mech.Epsilon }

// Ledger is the privacy spent by the client that took part in the most
// rounds (nil when the mechanism is not LDP), and the rounds each client
// took part in.
func (e *Engine) Ledger() (*privacy.Ledger, []int, error) {
	if !e.ldp {
		return nil, e.joined, nil
	}
	most := e.most()
	if e.ledger == nil || e.ledger.Rounds != most {
		l, err := privacy.Account(privacy.Budget{Mechanism: e.cfg.Mechanism, Epsilon: e.cfg.Mech.Epsilon, MechDelta: e.mechDelta()},
			e.params, most, e.cfg.LedgerDelta)
		if err != nil {
			return nil, e.joined, err
		}
		e.ledger = &l
	}
	l := *e.ledger // callers set its fields, never what they point to
	return &l, e.joined, nil
}

// mechDelta is the gaussian mechanism's delta per parameter per round.
func (e *Engine) mechDelta() float64 {
	if e.cfg.Mech.Delta > 0 {
		return e.cfg.Mech.Delta
	}
	return mech.DefaultConfig().Delta
}

// central adds augcorbin's user-level central bound for round p to l: the
// round's mean over the uploads received, of which those whose sender
// quantized alone make the noise.
func (e *Engine) central(l *privacy.Ledger, p *Plan) {
	if e.cfg.Weighting != "mean" {
		l.CentralNote = "the central bound is for equal weights (weighting: mean)"
		return
	}
	alone := 0
	for pos, ok := range p.got {
		if ok && p.Pairing.Partner(pos) < 0 {
			alone++
		}
	}
	if alone == 0 {
		l.CentralNote = "no client quantized alone"
		return
	}
	eps, err := privacy.AugCorBinCentral(e.cfg.Mech.Epsilon, e.cfg.LedgerDelta, alone, e.params)
	if err != nil {
		l.CentralNote = err.Error()
		return
	}
	l.Central = privacy.NewBound(eps, e.cfg.LedgerDelta)
}
