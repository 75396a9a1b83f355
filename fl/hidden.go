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
// For ldpq the other clients' messages are a privacy blanket
// (privacy.SecureSumEpsilon); for the paired mechanisms only the clients
// quantizing alone are (privacy.PairedSecureSumEpsilon), and with none
// there is no guarantee in the worst case. Other mechanisms keep their
// local guarantee against the server, which the sum can only improve: the
// amplification is computed for one-bit messages only.
//
// Each round's bounds compose by basic composition at delta/k; the last
// round's, which the summary reports, by privacy-loss-distribution
// composition (privacy.ComposeSecureSum; paired: basic), which takes about
// a second each and is much tighter.
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
	switch e.cfg.Mechanism {
	case "ddgauss", "skellam":
		return e.distributed(l)
	case "ldpq":
		l.ServerView = fmt.Sprintf("%s of at least %d clients' one-bit messages per parameter (%s; privacy blanket)", how, e.minSum, by)
	case "corbin", "coq", "augcorbin":
		l.ServerView = fmt.Sprintf("%s of at least %d clients' one-bit messages per parameter, %d of them from clients without a partner (%s; privacy blanket of those)", how, e.minSum, e.minAlone, by)
	default:
		l.ServerView = fmt.Sprintf("%s of at least %d clients' messages per parameter (%s; its amplification is computed for one-bit messages only, so the bound is the local one)", how, e.minSum, by)
		return nil
	}
	if k == 0 {
		return nil
	}
	// round is the one-round bound at delta; composed, that of n
	// compositions at delta.
	round := func(delta float64) (float64, error) {
		if e.cfg.Mechanism == "ldpq" {
			return privacy.SecureSumEpsilon(eps, e.minSum, delta)
		}
		return privacy.PairedSecureSumEpsilon(eps, e.minAlone, delta)
	}
	composed := func(n int) (float64, error) {
		if last && e.cfg.Mechanism == "ldpq" {
			return privacy.ComposeSecureSum(eps, e.minSum, n, delta)
		}
		r, err := round(delta / float64(n))
		if err != nil || math.IsInf(r, 1) {
			return r, err
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
	s := privacy.Spent{ParamRound: r}
	for _, c := range []struct {
		n   int
		dst *float64
	}{{k, &s.ParamOptimal}, {d, &s.UploadRound}, {k * d, &s.UploadOptimal}} {
		if *c.dst, err = composed(c.n); err != nil {
			return err
		}
	}
	// Basic and advanced composition of the per-parameter, per-round
	// (r, delta) bound: they hold at k delta and at delta + k delta (k the
	// number composed), not at the ledger's delta; docs/privacy.md.
	s.ParamBasic, s.UploadBasic = float64(k)*r, float64(k)*float64(d)*r
	if s.ParamAdvanced, err = privacy.Advanced(r, k, delta); err != nil {
		return err
	}
	if s.UploadAdvanced, err = privacy.Advanced(r, k*d, delta); err != nil {
		return err
	}
	l.Server = &s
	return nil
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
	t := float64(tensors) * eps
	l.Server = &privacy.Spent{
		ParamRound: eps, ParamBasic: float64(k) * eps, ParamAdvanced: float64(k) * eps, ParamOptimal: float64(k) * eps,
		UploadRound: t, UploadBasic: float64(k) * t, UploadAdvanced: float64(k) * t, UploadOptimal: float64(k) * t,
	}
	return nil
}
