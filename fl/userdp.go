package fl

import (
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"strings"

	"github.com/fedpq/fedpq/corr"
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
	return roundEvent(m, z, params, l2MaxOrder)
}

// roundEvent is RoundEvent with an L2 mechanism's curve computed up to
// order maxOrder.
func roundEvent(m mech.Mechanism, z float64, params, maxOrder int) (privacy.Event, error) {
	l2, ok := m.(mech.L2)
	if !ok {
		return privacy.Gaussian{Z: z}, nil
	}
	if _, err := l2.RDP(2, params); err != nil {
		return nil, err
	}
	return privacy.RDPCurve{Name: m.Name(), MaxOrder: float64(maxOrder), Eps: func(a float64) float64 {
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

// searchOrder is the largest order PrepareDP's search computes an L2
// curve to, for a target eps at delta: the order that gives a run's
// epsilon is near 1 + 2 ln(1/delta)/eps or below (a Gaussian's curve over
// 200 Poisson-sampled rounds at eps 8, 3 and 1 needs orders 8, 8 and 24),
// and twice that, at least 12, leaves room; PrepareDP checks the answer
// at every order to l2MaxOrder. pbm's curve costs about linearly in its
// orders, so the search is 3 to 5 times faster at eps 3 to 8.
func searchOrder(eps, delta float64) int {
	a := math.Ceil(2 * (1 + 2*math.Log(1/delta)/eps))
	return int(min(max(a, 12), l2MaxOrder))
}

// replaceEvent is RoundEvent for the replacement of one client's data by
// another's, fixed-size sampling's relation: the Gaussian at half the
// multiplier (the sensitivity doubles), or a mech.Replacer's curve; ok is
// false for a mechanism that states none (pbm).
func replaceEvent(m mech.Mechanism, z float64, params, maxOrder int) (ev privacy.Event, ok bool, err error) {
	if _, l2 := m.(mech.L2); !l2 {
		return privacy.Gaussian{Z: z / 2}, true, nil
	}
	r, ok := m.(mech.Replacer)
	if !ok {
		return nil, false, nil
	}
	if _, err := r.ReplaceRDP(2, params); err != nil {
		return nil, false, err
	}
	return privacy.RDPCurve{Name: m.Name() + ", replace-one", MaxOrder: float64(maxOrder), Eps: func(a float64) float64 {
		e, err := r.ReplaceRDP(a, params)
		if err != nil {
			return math.Inf(1)
		}
		return e
	}}, true, nil
}

// sampledRound is what one round drawn from online of n enrolled clients
// does with one client's data, as the accountant takes it, and what it
// amplifies by: Poisson sampling at the run's rate (add/remove), or
// fixed-size sampling of k of the online clients (replace-one:
// replaceEvent); the round's own event where every client online takes
// part, or where the mechanism states no replace-one curve. An L2 curve is
// computed up to maxOrder.
func (c *Config) sampledRound(m mech.Mechanism, z float64, params, n, online, maxOrder int) (privacy.Event, string, error) {
	ev, err := roundEvent(m, z, params, maxOrder)
	if err != nil {
		return nil, "", err
	}
	q := c.rate(n)
	k := c.ClientsPerRound
	switch {
	case c.Sampling == "poisson" && q < 1:
		return privacy.PoissonSampled{Rate: q, Event: ev}, fmt.Sprintf("Poisson sampling at rate %.4g, the server's secret draw", q), nil
	case k > 0 && k < online:
		rev, ok, err := replaceEvent(m, z, params, maxOrder)
		if err != nil {
			return nil, "", err
		}
		if !ok {
			return ev, fmt.Sprintf("none: %s states its curve for zero-out only, and fixed-size sampling's relation is replace-one (use sampling: poisson)", m.Name()), nil
		}
		return privacy.FixedSampled{M: k, N: online, Event: rev},
			fmt.Sprintf("fixed-size sampling, %d of %d clients, the server's secret draw", k, online), nil
	}
	return ev, "none: every client online takes part in every round", nil
}

// PrepareDP completes a DP-FedAvg configuration for a run of n clients
// and a model of d parameters, as every party must see it: the noise
// multiplier calibrated for TargetEpsilon when none is given (the smallest
// z whose whole run meets the target at the user-level delta against
// whoever gets the models, with the sampling the run expects and every
// client online), and the mechanism's settings: Mech.Noise, and for the
// L2 mechanisms Mech.Clients, the honest shares of those a round's sum
// carries (noiseClients). The server and each client call it
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
		z, err := c.calibrate(n, c.Encoded([]int{d})[0])
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

// calibrate is the noise multiplier for TargetEpsilon (PrepareDP). An L2
// mechanism's curve is searched up to searchOrder and the answer checked
// at every order to l2MaxOrder (one mechanism for both readings, so the
// low orders are computed once): where the orders above the search's
// change its epsilon, or the search fails, it runs again over all of them.
func (c *Config) calibrate(n, d int) (float64, error) {
	delta := c.modelDelta(n)
	search := func(maxOrder int) (float64, error) {
		return privacy.NoiseMultiplier(c.DP.TargetEpsilon, delta, func(z float64) privacy.Event {
			m, err := c.runMech(n, z)
			if err != nil {
				return privacy.Gaussian{Z: 0} // refused by the accountant
			}
			ev, err := c.runEvent(m, n, d, z, maxOrder)
			if err != nil {
				return privacy.Gaussian{Z: 0}
			}
			return ev
		})
	}
	top := searchOrder(c.DP.TargetEpsilon, delta)
	if c.Mechanism == "none" || top == l2MaxOrder {
		return search(l2MaxOrder)
	}
	z, err := search(top)
	if err != nil { // out of reach at these orders, perhaps not at all
		return search(l2MaxOrder)
	}
	m, err := c.runMech(n, z)
	if err != nil {
		return 0, err
	}
	epsAt := func(maxOrder int) (float64, error) {
		ev, err := c.runEvent(m, n, d, z, maxOrder)
		if err != nil {
			return 0, err
		}
		a := privacy.NewAccountant(privacy.Auto)
		if err := a.Compose(ev); err != nil {
			return 0, err
		}
		return a.Epsilon(delta)
	}
	part, err := epsAt(top)
	if err != nil {
		return 0, err
	}
	all, err := epsAt(l2MaxOrder)
	if err != nil {
		return 0, err
	}
	if all < part {
		return search(l2MaxOrder)
	}
	return z, nil
}

// runMech is the run's mechanism at noise multiplier z, its noise sized as
// PrepareDP sizes it.
func (c *Config) runMech(n int, z float64) (mech.Mechanism, error) {
	mc := c.Mech
	if c.Mechanism != "none" {
		mc.Noise, mc.Clients = z, c.noiseClients(n)
	}
	return mech.New(c.Mechanism, mc)
}

// runEvent is the whole run of m, runMech's at z, as the accountant
// expects it before it starts, an L2 curve computed up to maxOrder.
func (c *Config) runEvent(m mech.Mechanism, n, d int, z float64, maxOrder int) (privacy.Event, error) {
	ev, _, err := c.sampledRound(m, z, d, n, n, maxOrder)
	if err != nil {
		return nil, err
	}
	return privacy.Composed{Event: ev, Count: c.Rounds}, nil
}

// The noise of an L2 mechanism's round. Each client adds a share of the
// noise, and a round's sum is made to carry the same H shares whoever took
// part: the server adds the shares of the clients the round lacks
// (topUp: zero vectors encoded with the server's own coins). So the
// distribution a client's update is hidden in does not depend on whether
// that client, or any other, was sampled: the round is the central
// mechanism at noise multiplier z, the zero-out of a client is its
// add/remove, and Poisson sampling amplifies it as it does the central
// Gaussian. H is the round's expected size under fixed-size or no
// sampling (a round never has more), and under Poisson sampling a count
// that more clients reach in a run with probability tail: such a round
// carries more noise than the others, and the guarantee against whoever
// gets the models pays for it in delta, (1 + e^eps) tail (the run and the
// ideal one that always carries H shares differ only when a round has
// more than H clients, on either neighbour). tailShare of the user-level
// delta is set aside for it, at epsilons up to the target (or
// tailEpsilon without one); at a larger epsilon the ledger states the
// larger delta. Of the H shares, floor(secureCorrupt H) may come from
// clients colluding with the server under secure aggregation, who need
// not add theirs: the mechanism's noise is sized for the others
// (Mech.Clients = H less those).
const (
	tailShare   = 1e-3
	tailEpsilon = 20
)

// noiseShares is H and tail (0 where no round can have more than H
// clients) for a run of n clients (see above).
func (c *Config) noiseShares(n int) (h int, tail float64) {
	q := c.rate(n)
	if q >= 1 {
		return n, 0
	}
	k := c.ClientsPerRound
	if c.Sampling != "poisson" {
		return k, 0
	}
	capEps := float64(tailEpsilon)
	if c.DP.TargetEpsilon > 0 {
		capEps = c.DP.TargetEpsilon * (1 + 1e-6)
	}
	// The largest per-round tail probability allowed, in logs; log(1 +
	// e^x) = x + log1p(e^-x) does not overflow.
	limit := math.Log(tailShare*c.DP.delta()) - math.Log(float64(max(c.Rounds, 1))) - capEps - math.Log1p(math.Exp(-capEps))
	return privacy.BinomialQuantile(n, k, q, limit)
}

// noiseClients is Mech.Clients: the honest shares of a round's H (see
// above).
func (c *Config) noiseClients(n int) int {
	h, _ := c.noiseShares(n)
	if c.SecureAggregation {
		h -= int(math.Floor(secureCorrupt * float64(h)))
	}
	return max(h, 1)
}

// modelDelta is the delta at which the accountant reads the epsilon
// against whoever gets the models: the user-level delta, less tailShare
// of it where an L2 mechanism's round can sample more than H clients.
func (c *Config) modelDelta(n int) float64 {
	if c.Mechanism != "none" && !c.DP.Tree {
		if _, tail := c.noiseShares(n); tail > 0 {
			return c.DP.delta() * (1 - tailShare)
		}
	}
	return c.DP.delta()
}

// modelDelta is Config.modelDelta for the engine's run, from the tail
// New computed once.
func (e *Engine) modelDelta() float64 {
	if e.tail > 0 {
		return e.cfg.DP.delta() * (1 - tailShare)
	}
	return e.cfg.DP.delta()
}

// topUp adds to round p's sum the shares of the noise of the clients it
// lacks, H less the uploads received, each a zero vector encoded by the
// L2 mechanism with the server's coins for the round; it returns how many.
func (e *Engine) topUp(p *Plan, received int) (int, error) {
	if _, l2 := e.m.(mech.L2); !l2 || e.shares <= received || received == 0 {
		return 0, nil
	}
	k := e.shares - received
	zero := make([]float32, e.sizes[0])
	rg := p.Ranges[0]
	var payload []byte
	for j := range k {
		src := corr.Derive(e.secret, "dp-shares", uint64(p.T), uint64(j))
		var err error
		if payload, err = e.m.Encode(payload[:0], zero, rg, mech.Slot{Private: src}); err != nil {
			return 0, fmt.Errorf("fl: the server's share of the noise: %w", err)
		}
		sum, ok := p.agg.(shareSum)
		if !ok {
			return 0, fmt.Errorf("fl: a %T takes no share of the noise", p.agg)
		}
		if err := sum.addShare(payload); err != nil {
			return 0, fmt.Errorf("fl: the server's share of the noise: %w", err)
		}
	}
	return k, nil
}

// shareSum is a round sum that takes the server's shares of an L2
// mechanism's noise (topUp).
type shareSum interface {
	addShare(payload []byte) error
}

// accountRound composes round p's event for whoever gets the models into
// the run's accountant.
func (e *Engine) accountRound(p *Plan) error {
	if e.tree != nil {
		return nil // the tree's guarantee follows from the rounds alone (treeLevel)
	}
	ev, _, err := e.cfg.sampledRound(e.m, e.cfg.DP.Noise, e.sizes[0], len(e.examples), p.online, l2MaxOrder)
	if err != nil {
		return err
	}
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
	ev, _, err := e.cfg.sampledRound(e.m, e.cfg.DP.Noise, e.sizes[0], len(e.examples), online, l2MaxOrder)
	if err != nil {
		return err
	}
	if err := next.Compose(ev); err != nil {
		return err
	}
	// RDP first: it is never below the accountant's answer, and cheap.
	delta := e.modelDelta()
	if eps, err := next.RDPEpsilon(delta); err == nil && eps <= target*(1+budgetSlack) {
		return nil
	}
	eps, err := next.Epsilon(delta)
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
		u.Relation = "add/remove: each round's sum carries the same shares of the noise whoever takes part, the server adding the missing clients'; against the server, zero-out: one client's update replaced by zeros, its share of the noise still added (mech.L2)"
	}
	_, amp, err := e.cfg.sampledRound(e.m, e.cfg.DP.Noise, e.sizes[0], len(e.examples), len(e.examples), l2MaxOrder)
	if err != nil {
		return nil, err
	}
	u.Amplification = amp
	replace := e.acct.Relation() == privacy.ReplaceOne
	if replace {
		u.Relation = privacy.ReplaceOne
		if _, l2 := e.m.(mech.L2); l2 {
			u.Relation = "replace-one: fixed-size sampling; each round's sum carries the same shares of the noise whoever takes part, the server adding the missing clients'; against the server too, one client's update replaced by another (mech.Replacer)"
		}
	}
	if e.cfg.DP.Noise == 0 {
		u.Note = "no noise: clipped FedAvg guarantees nothing"
		return u, nil
	}
	dm := e.modelDelta()
	g, err := e.acct.Guarantee(dm)
	if err != nil {
		return nil, err
	}
	// The rounds that sampled more than H clients (noiseShares), paid in
	// delta.
	if _, l2 := e.m.(mech.L2); l2 && e.tail > 0 {
		dm = min(1, dm+(1+math.Exp(g.Eps))*float64(t)*e.tail)
	}
	u.Model = privacy.NewBound(g.Eps, dm)
	u.Accountant = fmt.Sprintf("%s: %s", g.Method, e.acct)
	switch _, l2 := e.m.(mech.L2); {
	case l2 && e.cfg.SecureAggregation:
		server, err := e.serverLevel(u.Rounds, delta, replace)
		if err != nil {
			return nil, err
		}
		if server == nil {
			u.Note = fmt.Sprintf("server: no guarantee, a round summed %d uploads, of which up to %d may be colluders'", e.minSum, e.colluders())
		}
		u.Server = server
	case l2:
		u.Note = "server: it sees each message, with 1/n of the noise (run under secure aggregation for a guarantee against it)"
	default:
		u.Note = "server: trusted, it sees each clipped update and adds the noise"
	}
	u.Note = strings.TrimPrefix(u.Note+"; eavesdropper: a DP-FedAvg message alone carries no guarantee", "; ")
	return u, nil
}

// serverLevel is the guarantee against the server under secure
// aggregation for a client in rounds rounds: no amplification (the server
// knows whom it sampled), and in each round only the honest clients'
// shares of the noise, at least the fewest uploads any round summed less
// the colluders (the server's own shares, topUp's, hide nothing from it).
// It is nil when no honest share is left. replace states it for the
// replacement of one client's update (the run's relation under fixed-size
// sampling) rather than its zero-out.
func (e *Engine) serverLevel(rounds int, delta float64, replace bool) (*privacy.Bound, error) {
	honest := e.minSum - e.colluders()
	if honest < 1 {
		return nil, nil
	}
	l2 := e.m.(mech.L2)
	sum := l2.SumRDP
	if replace {
		r, ok := e.m.(mech.Replacer)
		if !ok {
			return nil, fmt.Errorf("fl: %s states no replace-one curve, but the run's relation is replace-one", e.m.Name())
		}
		sum = r.SumReplaceRDP
	}
	if _, err := sum(2, e.sizes[0], honest); err != nil {
		return nil, err
	}
	ev := privacy.RDPCurve{Name: fmt.Sprintf("%s, %d honest shares", e.m.Name(), honest), MaxOrder: l2MaxOrder, Eps: func(a float64) float64 {
		r, err := sum(a, e.sizes[0], honest)
		if err != nil {
			return math.Inf(1)
		}
		return r
	}}
	if rounds == 0 {
		return privacy.NewBound(0, delta), nil
	}
	// The curve is read only at the orders near the answer's (about 2 for
	// pbm here): at 600 clients a round each of its orders takes seconds.
	eps, err := privacy.CurveEpsilon(ev, rounds, delta)
	if err != nil {
		return nil, err
	}
	return privacy.NewBound(eps, delta), nil
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
