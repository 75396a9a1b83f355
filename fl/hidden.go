package fl

import (
	"fmt"
	"math"

	"github.com/fedpq/fedpq/mech"
	"github.com/fedpq/fedpq/privacy"
)

// hidden replaces the server's entry of l, when the server sees the
// round's messages only through secure aggregation or a shuffler: per
// parameter, the sum (or multiset) of at least e.minSum one-bit messages,
// of which at least e.minAlone were sent by clients without a partner.
//
// For ldpq the other clients' messages are the noise
// (privacy.SecureSumEpsilon: the exact worst case over their inputs up to
// 10,000 clients, the privacy blanket above); for the paired mechanisms
// only the clients quantizing alone are (privacy.PairedSecureSumEpsilon,
// a privacy blanket), and with none there is no guarantee in the worst
// case. Other mechanisms keep their local guarantee against the server,
// which the sum can only improve: the amplification is computed for
// one-bit messages only.
//
// Each round's bounds compose by basic composition at delta/k (ldpq: at
// most the local guarantee composed; a pair's local guarantee does not
// hold against the sum); the last round's, which the summary reports, by
// privacy-loss-distribution composition (privacy.ComposeSecureSum; paired:
// basic), which takes about a second each and is much tighter. Every
// entry carries its delta; one that does not exist is nil with a note.
func (e *Engine) hidden(l *privacy.Ledger, last bool) error {
	how, by := "only the sum", "secure aggregation"
	if e.cfg.Shuffle {
		how, by = "only the multiset", "a shuffler"
	}
	eps, d, k, delta := e.cfg.Mech.Epsilon, e.params, e.most(), e.cfg.LedgerDelta
	if e.minSum < 1 || e.minAlone < 0 {
		l.ServerView = fmt.Sprintf("%s of the clients' messages (%s); how many is not known (a checkpoint that does not record it), so its bound is the local one", how, by)
		return nil
	}
	// Clients colluding with the server subtract their own messages from
	// the sum: the noise is the honest clients' only. The target is one of
	// them, so at least one message is left.
	c := e.colluders()
	honest, honestAlone := max(e.minSum-c, 1), max(e.minAlone-c, 0)
	colluding := ""
	if e.cfg.SecureAggregation {
		colluding = fmt.Sprintf("; up to %d of a round's %d clients (%g%%, as the protocol's graph is sized for) may collude with the server and subtract their own messages", c, e.roundSize(), 100*secureCorrupt)
	}
	// What the sum hides is computed for the one-bit randomized responses,
	// sent alone (ldpq) or by pairs (corbin, augcorbin, coq), and for the
	// distributed noise of the modular mechanisms (ddgauss, skellam).
	response, rr := e.m.(mech.RandomizedResponse)
	_, modular := e.m.(mech.Modular)
	alone := rr && e.m.Coupling() == mech.Independent
	if rr {
		eps = response.ResponseEpsilon() // each bit's, which the bounds below amplify
	}
	switch {
	case modular:
		return e.distributed(l)
	case alone:
		bound := "privacy blanket"
		if privacy.SecureSumIsExact(eps, honest) {
			bound = "exact worst case over the others' inputs"
		}
		l.ServerView = fmt.Sprintf("%s of at least %d clients' one-bit messages per parameter%s (%s; %s, of %d honest clients' messages)", how, e.minSum, colluding, by, bound, honest)
	case rr && e.m.Coupling() == mech.Paired:
		l.ServerView = fmt.Sprintf("%s of at least %d clients' one-bit messages per parameter, %d of them from clients without a partner%s (%s; privacy blanket of %d honest clients without a partner)", how, e.minSum, e.minAlone, colluding, by, honestAlone)
	default:
		l.ServerView = fmt.Sprintf("%s of at least %d clients' messages per parameter (%s; its amplification is computed for one-bit messages only, so the bound is the local one)", how, e.minSum, by)
		return nil
	}
	if k == 0 {
		return nil
	}
	// round is the one-round bound at delta; composed, that of n
	// compositions at delta (+Inf: none).
	round := func(delta float64) (float64, error) {
		if alone {
			return privacy.SecureSumEpsilon(eps, honest, delta)
		}
		return privacy.PairedSecureSumEpsilon(eps, honestAlone, delta)
	}
	composed := func(n int) (float64, error) {
		if last && alone {
			return privacy.ComposeSecureSum(eps, honest, n, delta)
		}
		r, err := round(delta / float64(n))
		if err != nil || math.IsInf(r, 1) || !alone {
			// A pair's local guarantee does not hold against an
			// observer of the sum, which holds both its messages.
			return float64(n) * r, err
		}
		local, err := privacy.Optimal(eps, n, delta)
		return min(float64(n)*r, local), err
	}
	r, err := round(delta)
	if err != nil {
		return err
	}
	if math.IsInf(r, 1) {
		l.Server = nil
		l.ServerView += "; a pair's two messages are both in the sum, and too few clients quantize alone to hide them at this delta (docs/privacy.md)"
		return nil
	}
	s := &privacy.Spent{}
	s.Set("param_round", r, delta, "")
	// Composed at delta: basic composition of the round's bound at
	// delta/n, or (ldpq, last round) privacy-loss-distribution
	// composition. A paired round's bound at delta/n can be +Inf where its
	// bound at delta is finite (too few clients alone): then none.
	for _, c := range []struct {
		n    int
		name string
	}{{k, "param_optimal"}, {d, "upload_round"}, {k * d, "upload_optimal"}} {
		v, err := composed(c.n)
		if err != nil {
			return err
		}
		why := ""
		if math.IsInf(v, 1) {
			why = fmt.Sprintf("no epsilon at delta %g by basic composition, since the round has none at delta/%d (too few clients quantize alone; docs/privacy.md)", delta, c.n)
		}
		s.Set(c.name, v, delta, why)
	}
	// Basic and advanced composition of the per-parameter, per-round
	// (r, delta) bound: they hold at k delta and at (k+1) delta (k the
	// number composed), not at the ledger's delta; each entry says so.
	for _, c := range []struct {
		n               int
		basic, advanced string
	}{{k, "param_basic", "param_advanced"}, {k * d, "upload_basic", "upload_advanced"}} {
		nf := float64(c.n)
		s.Set(c.basic, nf*r, nf*delta, "")
		a, err := privacy.AdvancedBound(r, delta, c.n, delta)
		if err != nil {
			return err
		}
		s.Set(c.advanced, a.Eps, a.Delta, "")
	}
	l.Server = s
	return nil
}

// colluders is how many of a round's clients the ledger lets collude with
// the server under secure aggregation: floor(secureCorrupt n) of the most
// clients a round selects, the fraction the sparse graph is sized for
// (fl/secure.go; the complete graph of smaller rounds tolerates more, and
// the ledger assumes the same fraction). 0 behind the trusted shuffler.
func (e *Engine) colluders() int {
	if !e.cfg.SecureAggregation {
		return 0
	}
	return int(math.Floor(secureCorrupt * float64(e.roundSize())))
}

// roundSize is the most clients a round selects (sample), or an
// asynchronous buffer holds.
func (e *Engine) roundSize() int {
	if e.cfg.async() {
		return e.cfg.Buffer
	}
	n := len(e.joined)
	if k := e.cfg.ClientsPerRound; k > 0 && k < n {
		n = k
	}
	return n
}

// distributed is the server's entry of ddgauss and skellam: calibrated
// (mech) to Epsilon at the mechanism's Delta for one tensor's sum in one
// round, when the noise of all Mech.Clients clients is in it; a round's
// whole upload and the rounds compose by the basic theorem, so their
// deltas add (tensors × rounds × Delta). A round that summed fewer clients
// than the noise was calibrated for has less noise, and voids the bound.
func (e *Engine) distributed(l *privacy.Ledger) error {
	tensors, k := len(e.specs), e.most()
	delta := e.cfg.Mech.Delta
	if delta == 0 {
		delta = mech.DefaultConfig().Delta
	}
	n := max(e.cfg.Mech.Clients, 1)
	l.ServerView = fmt.Sprintf("only the sum of at least %d clients' messages per coordinate (secure aggregation; %s's central noise, calibrated per tensor at delta %g for %d clients; basic composition over the %d tensors and the rounds, so the deltas add)",
		e.minSum, e.cfg.Mechanism, delta, n, tensors)
	if e.minSum < n {
		l.Server = nil
		l.ServerView += fmt.Sprintf("; a round summed %d, so part of the noise is missing", e.minSum)
		return nil
	}
	eps := e.cfg.Mech.Epsilon
	t, kf := float64(tensors), float64(k)
	s := &privacy.Spent{}
	s.Set("param_round", eps, delta, "")
	s.Set("upload_round", t*eps, t*delta, "")
	for _, name := range []string{"param_basic", "param_advanced", "param_optimal"} {
		s.Set(name, kf*eps, kf*delta, "")
	}
	for _, name := range []string{"upload_basic", "upload_advanced", "upload_optimal"} {
		s.Set(name, kf*t*eps, kf*t*delta, "")
	}
	l.Server = s
	return nil
}
