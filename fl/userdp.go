package fl

import (
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"strings"

	"github.com/fedpq/fedpq/mech"
	"github.com/fedpq/fedpq/privacy"
)

// This file keeps the user-level ledger of a DP-FedAvg run
// (privacy.UserLevel): an accountant (privacy.Accountant) that composes
// each round's event for whoever gets the models, sampled as the round
// was; the server's guarantee from the rounds the most-used client took
// part in; the noise calibrated for a target epsilon; and the budget a
// run stops at.

// ErrBudget is wrapped by the error that refuses a round past the run's
// user-level budget (DPFedAvg.TargetEpsilon).
var ErrBudget = errors.New("the user-level privacy budget is spent")

// RoundEvent is what one DP-FedAvg round does with one client's data
// before any sampling, for the add/remove (or zero-out) relation: the
// Gaussian mechanism at the updates' and the count's joint multiplier z
// (central, mechanism none; Andrew et al.'s Theorem 1 makes the pair one
// Gaussian at Noise), or the L2 mechanism m's Rényi curve for a vector of
// params parameters (the model's size). It is the event the run's ledger
// composes per round, and the claim package audit's user-level audit
// tests.
func RoundEvent(m mech.Mechanism, z float64, params int) (privacy.Event, error) {
	l2, ok := m.(mech.L2)
	if !ok {
		return privacy.Gaussian{Z: z}, nil
	}
	if _, err := l2.RDP(2, params); err != nil {
		return nil, err
	}
	return privacy.RDPCurve{Name: m.Name(), MaxOrder: l2MaxOrder, Eps: func(a float64) float64 {
		e, err := l2.RDP(a, params)
		if err != nil {
			return math.Inf(1)
		}
		return e
	}}, nil
}

// l2MaxOrder is the largest Renyi order at which an L2 mechanism's curve
// is computed: pbm's costs up to a second per order, and orders above 64
// only tighten epsilons below about ln(1/delta)/64 (0.2 at delta 1e-5).
const l2MaxOrder = 64

// sampled is ev on a round drawn from online of n enrolled clients by the
// run's sampling, as the accountant takes it, and what it amplifies by:
// Poisson sampling at the run's rate, or fixed-size sampling of k of the
// online clients (replace-one: the central Gaussian's sensitivity
// doubles); ev itself where every client online takes part, or where
// mechanism states no replace-one curve.
func (c *Config) sampled(ev privacy.Event, mechanism string, n, online int) (privacy.Event, string) {
	q := c.rate(n)
	k := c.ClientsPerRound
	switch {
	case c.Sampling == "poisson" && q < 1:
		return privacy.PoissonSampled{Rate: q, Event: ev}, fmt.Sprintf("Poisson sampling at rate %.4g, the server's secret draw", q)
	case k > 0 && k < online:
		g, ok := ev.(privacy.Gaussian)
		if !ok {
			return ev, fmt.Sprintf("none: %s states its curve for add/remove only, and fixed-size sampling's relation is replace-one (use sampling: poisson)", mechanism)
		}
		return privacy.FixedSampled{M: k, N: online, Event: privacy.Gaussian{Z: g.Z / 2}},
			fmt.Sprintf("fixed-size sampling, %d of %d clients, the server's secret draw", k, online)
	}
	return ev, "none: every client online takes part in every round"
}

// PrepareDP completes a DP-FedAvg configuration for a run of n clients
// and a model of d parameters, as every party must see it: the noise
// multiplier calibrated for TargetEpsilon when none is given (the smallest
// z whose whole run meets the target at the user-level delta against
// whoever gets the models, with the sampling the run expects and every
// client online), and the mechanism's settings: Mech.Noise, and for the
// L2 mechanisms Mech.Clients, the fewest honest clients whose noise a
// round is sized for (noiseClients). The server and each client call it
// on the same configuration and get the same result; New calls it too.
func (c *Config) PrepareDP(n, d int) error {
	if !c.DP.on() {
		return nil
	}
	if c.DP.TargetEpsilon > 0 && c.DP.Noise == 0 && c.DP.Tree {
		z, err := privacy.TreeNoiseMultiplier(c.DP.TargetEpsilon, c.DP.delta(), c.Rounds, c.Rounds, 0, privacy.TreeOptions{})
		if err != nil {
			return fmt.Errorf("fl: target epsilon %v over %d rounds at delta %g: %w", c.DP.TargetEpsilon, c.Rounds, c.DP.delta(), err)
		}
		c.DP.Noise = z
	}
	if c.DP.TargetEpsilon > 0 && c.DP.Noise == 0 {
		z, err := privacy.NoiseMultiplier(c.DP.TargetEpsilon, c.DP.delta(), func(z float64) privacy.Event {
			ev, err := c.runEvent(n, d, z)
			if err != nil {
				return privacy.Gaussian{Z: 0} // refused by the accountant
			}
			return ev
		})
		if err != nil {
			return fmt.Errorf("fl: target epsilon %v over %d rounds at delta %g: %w", c.DP.TargetEpsilon, c.Rounds, c.DP.delta(), err)
		}
		c.DP.Noise = z
	}
	if c.DP.Noise > 0 && c.Mechanism != "none" {
		c.Mech.Noise = c.DP.Noise
		c.Mech.Clients = c.noiseClients(n)
	}
	return nil
}

// runEvent is the whole run at noise multiplier z, as the accountant
// expects it before it starts.
func (c *Config) runEvent(n, d int, z float64) (privacy.Event, error) {
	mc := c.Mech
	if c.Mechanism != "none" {
		mc.Noise, mc.Clients = z, c.noiseClients(n)
	}
	m, err := mech.New(c.Mechanism, mc)
	if err != nil {
		return nil, err
	}
	ev, err := RoundEvent(m, z, d)
	if err != nil {
		return nil, err
	}
	ev, _ = c.sampled(ev, c.Mechanism, n, n)
	return privacy.Composed{Event: ev, Count: c.Rounds}, nil
}

// noiseClients is how many honest clients an L2 mechanism sizes a round's
// noise for, each adding its share: the round's expected clients, under
// Poisson sampling less four standard deviations (a round has fewer with
// probability about 3e-5), less the colluders secure aggregation's graph
// is sized for. A round with more honest clients has more noise, which
// only adds privacy; one with fewer is counted as such (accountRound).
func (c *Config) noiseClients(n int) int {
	e := float64(n)
	if k := c.ClientsPerRound; k > 0 && k < n {
		e = float64(k)
	}
	low := e
	if c.Sampling == "poisson" && e < float64(n) {
		low = math.Floor(e - 4*math.Sqrt(e))
	}
	if c.SecureAggregation {
		low -= math.Floor(secureCorrupt * e)
	}
	return max(int(low), 1)
}

// accountRound composes round p's event for whoever gets the models into
// the run's accountant, and notes the round if it summed fewer honest
// clients' noise than the L2 mechanism is sized for (received uploads, less
// the colluders secure aggregation allows for).
func (e *Engine) accountRound(p *Plan, received int) error {
	if e.tree != nil {
		return nil // the tree's guarantee follows from the rounds alone (treeLevel)
	}
	if _, l2 := e.m.(mech.L2); l2 && received-e.colluders() < e.cfg.Mech.Clients {
		e.short = append(e.short, p.T)
	}
	ev, err := RoundEvent(e.m, e.cfg.DP.Noise, e.params)
	if err != nil {
		return err
	}
	ev, _ = e.cfg.sampled(ev, e.m.Name(), len(e.examples), p.online)
	return e.acct.Compose(ev)
}

// budgetSlack is how far, relatively, a run's epsilon may exceed its
// target: the accountants' own precision (an epsilon found by bisection to
// 1e-12 and rounded up), so that a noise multiplier calibrated for the
// target reaches its last round.
const budgetSlack = 1e-9

// budget refuses round t, among online clients, when it would take the
// run's user-level epsilon against whoever gets the models past
// TargetEpsilon.
func (e *Engine) budget(t, online int) error {
	target := e.cfg.DP.TargetEpsilon
	if !e.cfg.DP.on() || target == 0 {
		return nil
	}
	if e.tree != nil {
		g, err := privacy.TreeWorstCase(t, e.most()+1, 0, e.cfg.DP.Noise, e.cfg.DP.delta(), privacy.TreeOptions{})
		if err != nil {
			return err
		}
		if g.Eps > target*(1+budgetSlack) {
			return fmt.Errorf("fl: round %d would take the run's user-level epsilon to %.4g at delta %g, past its target %g: %w", t, g.Eps, e.cfg.DP.delta(), target, ErrBudget)
		}
		return nil
	}
	next := privacy.NewAccountant(privacy.Auto)
	if b, err := json.Marshal(e.acct); err != nil {
		return err
	} else if err := json.Unmarshal(b, next); err != nil {
		return err
	}
	ev, err := RoundEvent(e.m, e.cfg.DP.Noise, e.params)
	if err != nil {
		return err
	}
	ev, _ = e.cfg.sampled(ev, e.m.Name(), len(e.examples), online)
	if err := next.Compose(ev); err != nil {
		return err
	}
	// RDP first: it is never below the accountant's answer, and cheap.
	if eps, err := next.RDPEpsilon(e.cfg.DP.delta()); err == nil && eps <= target*(1+budgetSlack) {
		return nil
	}
	eps, err := next.Epsilon(e.cfg.DP.delta())
	if err != nil {
		return err
	}
	if eps > target*(1+budgetSlack) {
		return fmt.Errorf("fl: round %d would take the run's user-level epsilon to %.4g at delta %g, past its target %g: %w", t, eps, e.cfg.DP.delta(), target, ErrBudget)
	}
	return nil
}

// userLevel is the run's user-level guarantee after round t, for the
// client that took part in the most rounds.
func (e *Engine) userLevel(t int) (*privacy.UserLevel, error) {
	if e.tree != nil {
		return e.treeLevel(t)
	}
	delta := e.cfg.DP.delta()
	u := &privacy.UserLevel{Rounds: e.most(), Relation: privacy.AddRemove, NoiseMultiplier: e.cfg.DP.Noise}
	if _, l2 := e.m.(mech.L2); l2 {
		u.Relation = "zero-out: one client's update replaced by zeros, its share of the noise still added (mech.L2)"
	}
	ev, err := RoundEvent(e.m, e.cfg.DP.Noise, e.params)
	if err != nil {
		return nil, err
	}
	_, u.Amplification = e.cfg.sampled(ev, e.m.Name(), len(e.examples), len(e.examples))
	if r := e.acct.Relation(); r == privacy.ReplaceOne {
		u.Relation = r
	}
	if e.cfg.DP.Noise == 0 {
		u.Note = "no noise: clipped FedAvg guarantees nothing"
		return u, nil
	}
	if len(e.short) > 0 {
		u.Note = fmt.Sprintf("no guarantee: round %d summed fewer honest clients' noise than the %d the mechanism is sized for (%d such rounds)", e.short[0], e.cfg.Mech.Clients, len(e.short))
		return u, nil
	}
	g, err := e.acct.Guarantee(delta)
	if err != nil {
		return nil, err
	}
	u.Model = privacy.NewBound(g.Eps, delta)
	u.Accountant = fmt.Sprintf("%s: %s", g.Method, e.acct)
	if _, l2 := e.m.(mech.L2); l2 && e.cfg.SecureAggregation {
		server := privacy.NewAccountant(privacy.Auto)
		if u.Rounds > 0 {
			if err := server.Compose(privacy.Composed{Event: ev, Count: u.Rounds}); err != nil {
				return nil, err
			}
		}
		eps, err := server.Epsilon(delta)
		if err != nil {
			return nil, err
		}
		u.Server = privacy.NewBound(eps, delta)
	} else if _, l2 := e.m.(mech.L2); l2 {
		u.Note = "server: it sees each message, with 1/n of the noise (run under secure aggregation for a guarantee against it)"
	} else {
		u.Note = "server: trusted, it sees each clipped update and adds the noise"
	}
	u.Note = strings.TrimPrefix(u.Note+"; eavesdropper: a DP-FedAvg message alone carries no guarantee", "; ")
	return u, nil
}

// treeLevel is a DP-FTRL run's user-level guarantee after round t: the
// tree's worst case for a client in as many rounds as the most-sampled
// one, against whoever gets the models; none against the server, which
// adds the noise.
func (e *Engine) treeLevel(t int) (*privacy.UserLevel, error) {
	u := &privacy.UserLevel{Rounds: e.most(), Relation: privacy.AddRemove, NoiseMultiplier: e.cfg.DP.Noise,
		Amplification: "none: DP-FTRL's guarantee needs no sampling and claims none",
		Note:          "server: trusted, it sees each clipped update and adds the tree's noise; eavesdropper: a DP-FedAvg message alone carries no guarantee"}
	g, err := privacy.TreeWorstCase(t, max(u.Rounds, 1), 0, e.cfg.DP.Noise, e.cfg.DP.delta(), privacy.TreeOptions{})
	if err != nil {
		return nil, err
	}
	u.Model = privacy.NewBound(g.Eps, g.Delta)
	u.Accountant = fmt.Sprintf("DP-FTRL tree aggregation (privacy.TreeWorstCase): sensitivity %.4g clips over the released nodes for %d rounds of %d, %.4g-GDP, exact", g.Sensitivity, g.Participations, t, g.Mu)
	return u, nil
}
