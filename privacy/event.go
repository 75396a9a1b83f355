package privacy

import (
	"fmt"
	"math"
)

// This file holds the events of the run-level accountant (accountant.go):
// what one step of a run did with one client's data, in the manner of
// Google's dp_accounting DpEvent, as a small closed set of Go types.

// An Event describes what one step of a run did with one client's data.
// The set is closed: Gaussian, RDPCurve, Pair, Composed, Sequence,
// PoissonSampled and FixedSampled.
type Event interface{ isEvent() }

// Gaussian is the Gaussian mechanism: N(0, (Z D)^2) noise on a query of L2
// sensitivity D, so Z is the noise multiplier sigma/D. D is the sensitivity
// under the run's neighbouring relation: one client added or removed
// (PoissonSampled) or replaced (FixedSampled).
type Gaussian struct {
	Z float64
}

// RDPCurve is a mechanism known only by its Renyi-DP curve: Eps(alpha)
// bounds the Renyi divergence of order alpha > 1 between its outputs on
// neighbouring inputs, in both orders (the neighbours of the run's
// relation, as for Gaussian). The accountant evaluates it at the orders of
// RDPOrders and at every integer up to the largest, once, when it is
// composed, and keeps those values (tabulated curves are what a saved
// accountant holds). Name says what it is, for reports. MaxOrder, when
// positive, is the largest order Eps is evaluated at: a curve that is
// costly to compute (pbm's) is then +Inf above it, which is always a bound
// and costs only the tightness those orders would give (small epsilons,
// below about ln(1/delta)/MaxOrder).
type RDPCurve struct {
	Name     string
	Eps      func(alpha float64) float64
	MaxOrder float64
}

// Pair is a discrete dominating pair of a mechanism: P[i] and Q[i] are the
// probabilities of outcome i with the client's data and without it (or
// with its replacement), such that for every real eps the hockey-stick
// divergence H_{e^eps}(P||Q) bounds that of the mechanism's outputs on any
// neighbouring inputs, as in Zhu, Dong and Wang (AISTATS 2022). The exact
// law of a mechanism's outputs on two worst-case neighbours is one;
// SecureSumPair's blanket pair is another. Each of P and Q may sum to
// less than 1: the missing mass is taken to lie on an outcome the other
// never gives, which only adds to both directions' divergences (and makes
// its Renyi divergence infinite: such a pair is for the PLD accountant).
type Pair struct {
	Name string
	P, Q []float64
}

// Composed is Event run Count times, each with fresh randomness.
type Composed struct {
	Event Event
	Count int
}

// Sequence is its events run one after the other, each with fresh
// randomness.
type Sequence []Event

// PoissonSampled is Event run on a Poisson sample: each client takes part
// independently with probability Rate, and the server's choice is secret.
// Neighbours differ by adding or removing one client. Event must be a
// Gaussian, an RDPCurve or a Pair.
type PoissonSampled struct {
	Rate  float64
	Event Event
}

// FixedSampled is Event run on M clients drawn uniformly without
// replacement from N, each at most once per round, the draw secret.
// Neighbours differ by replacing one client (N is public). Event must be a
// Gaussian, an RDPCurve or a Pair, for the replace-one relation.
type FixedSampled struct {
	M, N  int
	Event Event
}

var (
	_ Event = Gaussian{}
	_ Event = RDPCurve{}
	_ Event = Pair{}
	_ Event = Composed{}
	_ Event = Sequence{}
	_ Event = PoissonSampled{}
	_ Event = FixedSampled{}
)

func (Gaussian) isEvent()       {}
func (RDPCurve) isEvent()       {}
func (Pair) isEvent()           {}
func (Composed) isEvent()       {}
func (Sequence) isEvent()       {}
func (PoissonSampled) isEvent() {}
func (FixedSampled) isEvent()   {}
func (rdpTable) isEvent()       {}

// rdpTable is an RDPCurve evaluated: Eps[i] at Orders[i]. It is what the
// accountant records for a curve; values may be +Inf.
type rdpTable struct {
	Name   string
	Orders []float64
	Eps    []float64
}

// checkNoiseMultiplier refuses Z outside (0, +Inf).
func checkNoiseMultiplier(z float64) error {
	if !(z > 0) || math.IsInf(z, 0) {
		return fmt.Errorf("privacy: noise multiplier Z %v must be positive and finite", z)
	}
	return nil
}

// checkRate refuses a sampling rate outside (0, 1].
func checkRate(q float64) error {
	if !(q > 0 && q <= 1) {
		return fmt.Errorf("privacy: sampling rate q %v must be in (0, 1]", q)
	}
	return nil
}

// tabulate evaluates c at orders (curveOrders, or intOrders where only
// the integers are read), refusing NaN, negative values and a curve that
// is not a function.
func (c RDPCurve) tabulate(orders []float64) (rdpTable, error) {
	orders, err := c.orders(orders)
	if err != nil {
		return rdpTable{}, err
	}
	t := rdpTable{Name: c.Name, Orders: orders, Eps: make([]float64, len(orders))}
	for i, a := range orders {
		if t.Eps[i], err = c.at(a); err != nil {
			return rdpTable{}, err
		}
	}
	return t, nil
}

// orders is the prefix of orders at or below c.MaxOrder, refusing a curve
// with no Eps function or a largest order below 2.
func (c RDPCurve) orders(orders []float64) ([]float64, error) {
	if c.Eps == nil {
		return nil, fmt.Errorf("privacy: RDP curve %q has no Eps function", c.Name)
	}
	if math.IsNaN(c.MaxOrder) || c.MaxOrder < 0 || c.MaxOrder > 0 && c.MaxOrder < 2 {
		return nil, fmt.Errorf("privacy: RDP curve %q: largest order %v must be at least 2 (0: every order)", c.Name, c.MaxOrder)
	}
	if c.MaxOrder > 0 {
		n := 0
		for n < len(orders) && orders[n] <= c.MaxOrder {
			n++
		}
		orders = orders[:n]
	}
	return orders, nil
}

// at is c at order a, refusing NaN and negative values (+Inf allowed).
func (c RDPCurve) at(a float64) (float64, error) {
	e := c.Eps(a)
	if math.IsNaN(e) || e < 0 {
		return 0, fmt.Errorf("privacy: RDP curve %q is %v at order %v: it must be non-negative (+Inf allowed)", c.Name, e, a)
	}
	return e, nil
}

// check validates a table restored from JSON.
func (t rdpTable) check() error {
	if len(t.Orders) == 0 || len(t.Orders) != len(t.Eps) {
		return fmt.Errorf("privacy: RDP curve %q: %d orders, %d values", t.Name, len(t.Orders), len(t.Eps))
	}
	for i, a := range t.Orders {
		if !(a > 1) || math.IsInf(a, 0) || (i > 0 && !(a > t.Orders[i-1])) {
			return fmt.Errorf("privacy: RDP curve %q: orders must be finite, above 1 and increasing (%v at %d)", t.Name, a, i)
		}
		if e := t.Eps[i]; math.IsNaN(e) || e < 0 {
			return fmt.Errorf("privacy: RDP curve %q is %v at order %v: it must be non-negative", t.Name, e, a)
		}
	}
	return nil
}

// at is the table's value at order a, or +Inf where it has none (no bound
// known there).
func (t rdpTable) at(a float64) float64 {
	lo, hi := 0, len(t.Orders)
	for lo < hi {
		mid := (lo + hi) / 2
		if t.Orders[mid] < a {
			lo = mid + 1
		} else {
			hi = mid
		}
	}
	if lo < len(t.Orders) && t.Orders[lo] == a {
		return t.Eps[lo]
	}
	return math.Inf(1)
}

// check validates a pair: equal non-zero lengths, finite non-negative
// probabilities, sums at most 1 (up to float64 rounding of the sum).
func (p Pair) check() error {
	if len(p.P) == 0 || len(p.P) != len(p.Q) {
		return fmt.Errorf("privacy: pair %q: P has %d outcomes, Q %d; both need the same number, at least 1", p.Name, len(p.P), len(p.Q))
	}
	for i := range p.P {
		for _, x := range []float64{p.P[i], p.Q[i]} {
			if !(x >= 0) || math.IsInf(x, 0) {
				return fmt.Errorf("privacy: pair %q: probability %v at outcome %d must be finite and non-negative", p.Name, x, i)
			}
		}
	}
	for _, side := range []struct {
		name string
		v    []float64
	}{{"P", p.P}, {"Q", p.Q}} {
		if s := sum(side.v); s > 1+sumSlack(len(side.v)) {
			return fmt.Errorf("privacy: pair %q: %s sums to %v, above 1", p.Name, side.name, s)
		}
	}
	return nil
}

// sumSlack bounds the float64 rounding of a sum of n probabilities whose
// exact sum is at most 1.
func sumSlack(n int) float64 { return float64(n+1) * 0x1p-53 }

func sum(v []float64) float64 {
	s := 0.0
	for _, x := range v {
		s += x
	}
	return s
}

// atom is a recorded event: a Gaussian, rdpTable or Pair, alone or sampled
// (PoissonSampled or FixedSampled of one of those), run Count times.
type atom struct {
	Event Event
	Count int
}

// flatten validates e and appends its atoms, each count multiplied by
// times, to out.
func flatten(e Event, times int, out []atom) ([]atom, error) {
	switch e := e.(type) {
	case nil:
		return nil, fmt.Errorf("privacy: nil event")
	case Gaussian:
		if err := checkNoiseMultiplier(e.Z); err != nil {
			return nil, err
		}
		return append(out, atom{e, times}), nil
	case RDPCurve:
		t, err := e.tabulate(curveOrders)
		if err != nil {
			return nil, err
		}
		return append(out, atom{t, times}), nil
	case rdpTable:
		if err := e.check(); err != nil {
			return nil, err
		}
		return append(out, atom{e, times}), nil
	case Pair:
		if err := e.check(); err != nil {
			return nil, err
		}
		return append(out, atom{e, times}), nil
	case Composed:
		if err := checkCount(e.Count); err != nil {
			return nil, err
		}
		if e.Count > math.MaxInt32/times {
			return nil, fmt.Errorf("privacy: composition count %d x %d is too large", e.Count, times)
		}
		return flatten(e.Event, times*e.Count, out)
	case Sequence:
		if len(e) == 0 {
			return nil, fmt.Errorf("privacy: empty sequence of events")
		}
		var err error
		for _, x := range e {
			if out, err = flatten(x, times, out); err != nil {
				return nil, err
			}
		}
		return out, nil
	case PoissonSampled:
		if err := checkRate(e.Rate); err != nil {
			return nil, err
		}
		inner, err := sampledInner(e.Event, "PoissonSampled", e.Rate < 1)
		if err != nil {
			return nil, err
		}
		return append(out, atom{PoissonSampled{Rate: e.Rate, Event: inner}, times}), nil
	case FixedSampled:
		if e.N < 1 || e.M < 1 || e.M > e.N {
			return nil, fmt.Errorf("privacy: fixed-size sample of M %d from N %d clients: need 1 <= M <= N", e.M, e.N)
		}
		inner, err := sampledInner(e.Event, "FixedSampled", e.M < e.N)
		if err != nil {
			return nil, err
		}
		return append(out, atom{FixedSampled{M: e.M, N: e.N, Event: inner}, times}), nil
	}
	return nil, fmt.Errorf("privacy: unknown event %T", e)
}

// sampledInner validates the event inside a sampling and tabulates a
// curve: it must be a single mechanism. A sampling that amplifies reads a
// curve at integer orders only (rdpPoissonGeneral, rdpFixedGeneral), so
// a curve is tabulated at those alone (a costly one, pbm's, at 63 orders
// up to 64 rather than 153).
func sampledInner(e Event, what string, amplifies bool) (Event, error) {
	if c, ok := e.(RDPCurve); ok && amplifies {
		t, err := c.tabulate(intOrders)
		if err != nil {
			return nil, err
		}
		return t, nil
	}
	switch e.(type) {
	case Gaussian, RDPCurve, rdpTable, Pair:
		a, err := flatten(e, 1, nil)
		if err != nil {
			return nil, err
		}
		return a[0].Event, nil
	}
	return nil, fmt.Errorf("privacy: %s of %T: the sampled event must be a Gaussian, an RDPCurve or a Pair", what, e)
}
