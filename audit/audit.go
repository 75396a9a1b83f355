// Package audit bounds a mechanism's privacy from below, from its outputs
// alone: it tests a claimed epsilon instead of trusting its derivation.
//
// Audit is the black-box audit of Jagielski, Ullman and Oprea, "Auditing
// differentially private machine learning: how private is private SGD?"
// (NeurIPS 2020): encode two neighbouring inputs many times, decode each
// message as the server does, and turn the counts of each output event into
// a certified privacy loss with Clopper–Pearson intervals (Clopper and
// Pearson, Biometrika 1934). Nasr, Song, Thakurta, Papernot and Carlini,
// "Adversary instantiation: lower bounds for differentially private machine
// learning" (IEEE S&P 2021), show such bounds meet the claim only when the
// inputs and events are the worst case; so Audit tries several pairs of
// inputs (Neighbours) and reports the largest bound, and a bound below a
// claim does not show the claim is tight.
//
// Two observers are audited: one message (Message), the observer of the
// per-parameter LDP claim, and the server's view of both messages of a pair
// (Pair), for which docs/privacy.md derives that corbin has no epsilon.
//
// UserLevel audits DP-FedAvg's user-level guarantee instead (user.go): a
// canary client's worst-case clipped update over whole runs of R rounds,
// as the server sees the rounds' decoded sums, against UserClaim, the
// run accountant's epsilon for the same rounds.
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

// Observer is who sees the audited client's upload.
type Observer int

const (
	// Message sees one message of the client: an eavesdropper on its
	// uplink, against whom the registry's LDP claim holds (CorBin-FL's
	// Eq. (3)). A Paired mechanism's client is audited in a pair, leader
	// or follower by a fair coin, with shared bits the observer does not
	// know.
	Message Observer = iota
	// Pair is the server's view of a Paired mechanism: both messages of a
	// pair, each decoded as the server decodes it, the audited client's
	// first. Its partner's input is held at the range's center, where
	// docs/privacy.md shows corbin's joint output reveals the sign of
	// w - c. The shared bits, and with them who leads (a coin from the
	// pair's secret), stay hidden, as from an honest-but-curious server.
	Pair
)

func (o Observer) String() string {
	switch o {
	case Message:
		return "message"
	case Pair:
		return "pair"
	}
	return fmt.Sprintf("Observer(%d)", int(o))
}

// Applies reports whether o is an observer of m: Pair needs a Paired
// mechanism, since the others' clients share nothing with each other.
func (o Observer) Applies(m mech.Mechanism) bool {
	return o == Message || o == Pair && m.Coupling() == mech.Paired
}

// Inputs is one pair of neighbouring inputs of the audited parameter: for
// per-parameter LDP any two values are neighbours.
type Inputs struct {
	W0, W1 float64
	// Why names the pair: "range ends", "interior", "grid N: ...".
	Why string
}

// Neighbours returns the inputs audited under rg: the range's ends (the
// worst case of the one-bit and randomized-rounding quantizers, whose
// probabilities are affine in the input); interior pairs c±r/2, (c, c+r/2)
// and (c, c+r/8), which catch a mechanism that leaks away from the ends; and
// for each grid of n >= 2 equally spaced points on [c-r, c+r] (an input
// grid or scalar lattice; ConfigGrids), a grid point next to the center
// against the next grid point and against the boundary of its cell halfway
// between them, where rounding changes its output.
func Neighbours(rg mech.Range, grids ...int) []Inputs {
	c, r := rg.Center, rg.Radius
	ins := []Inputs{
		{c - r, c + r, "range ends"},
		{c - r/2, c + r/2, "interior"},
		{c, c + r/2, "interior"},
		{c, c + r/8, "interior"},
	}
	for _, n := range grids {
		if n < 2 {
			continue
		}
		h := 2 * r / float64(n-1)
		g := c - r + float64((n-1)/2)*h
		ins = append(ins,
			Inputs{g, g + h, fmt.Sprintf("grid %d: adjacent points", n)},
			Inputs{g, g + h/2, fmt.Sprintf("grid %d: cell boundary", n)})
	}
	return ins
}

// ConfigGrids is the scalar grids the registered mechanisms quantize to
// under c, as point counts on the range: mvu's 2^InputBits input levels,
// sdq's 2^Rate lattice points, and jopeq's D+1 = 2^Rate-2 points (its span D
// is 2^Rate-3 in every measured case, mech/jopeq.go). laplace+sdq's lattice
// lies on a wider range, so its cells are not among them; a user's
// mechanism with another grid passes its own to Neighbours.
func ConfigGrids(c mech.Config) []int {
	var g []int
	add := func(bits int, minus int) {
		if bits >= 1 && bits <= 16 {
			if n := 1<<bits - minus; n >= 2 {
				g = append(g, n)
			}
		}
	}
	add(c.InputBits, 0)
	add(c.Rate, 0)
	add(c.Rate, 2)
	sort.Ints(g)
	return compact(g)
}

func compact(s []int) []int {
	out := s[:0]
	for i, v := range s {
		if i == 0 || v != s[i-1] {
			out = append(out, v)
		}
	}
	return out
}

// Options sets an audit.
type Options struct {
	Observer Observer
	// Samples is the number of views counted per input of each pair (as
	// many again are drawn for the pilot that picks the events).
	Samples int
	// Alpha is the audit's error: the bound holds with probability at
	// least 1-Alpha over its coins, for all pairs at once.
	Alpha float64
	// Delta is the delta of the (eps, delta) claim audited. An eps-DP
	// mechanism is (eps, delta)-DP for every delta, so auditing it at a
	// positive delta is sound and costs at most ln(p/(p-delta)) on an
	// event of mass p.
	Delta float64
	// Seed fixes every coin of the audit.
	Seed uint64
	// Progress, if set, is called after each pair with the pairs done.
	Progress func(done int)
}

// Result is the outcome of an audit.
type Result struct {
	// Lower is the certified lower bound on epsilon (0 when nothing is
	// certified).
	Lower float64
	// Inputs is the pair that gave Lower (the first pair if none did).
	Inputs Inputs
	// Events is the number of output events tested on that pair.
	Events int
	// Samples is the number of views counted per input.
	Samples int
}

// Audit returns a lower bound on the per-parameter epsilon of m under rg
// against observer o.Observer: with probability at least 1-o.Alpha over the
// audit's coins, the true epsilon (at o.Delta) is at least Lower. A
// mechanism whose Lower exceeds its claim is broken, with that confidence.
//
// For each pair of ins it encodes W0 and W1 o.Samples times each, every
// view with fresh coins (derived from o.Seed), decodes each message with
// NewSum(1, rg) as the server does, with the server's slot (the dither of
// a Dithered mechanism, nothing otherwise), and counts the decoded values
// in events B. For every B and both directions it bounds P0(B) from below
// and P1(B) from above and certifies eps >= ln((P0lo(B) - delta) /
// P1hi(B)), which (eps, delta)-DP forbids to exceed eps. The events are
// fixed before the counted samples are drawn, from a pilot of o.Samples
// views per input: for one message each distinct value (plus one event for
// values the pilot missed) when the pilot shows at most 64, else 32
// equal-mass bins; for a pair, the same per message with 8 values or bins,
// and the events are their products. Each probability gets a two-sided
// Clopper–Pearson interval of confidence 1-Alpha/(2·Bins·len(ins)), so by
// the union bound all hold at once with probability at least 1-Alpha.
//
// Assumptions: the mechanism's randomness comes only from its Slot (so
// the seed fixes the audit) and the message of one parameter is its whole
// output; the audit sees one parameter of one round.
func Audit(m mech.Mechanism, rg mech.Range, ins []Inputs, o Options) (Result, error) {
	switch {
	case o.Samples < 1:
		return Result{}, fmt.Errorf("audit: %d samples", o.Samples)
	case !(o.Alpha > 0 && o.Alpha < 1):
		return Result{}, fmt.Errorf("audit: alpha %v must be in (0, 1)", o.Alpha)
	case !(o.Delta >= 0 && o.Delta < 1):
		return Result{}, fmt.Errorf("audit: delta %v must be in [0, 1)", o.Delta)
	case len(ins) == 0:
		return Result{}, errors.New("audit: no inputs")
	case !o.Observer.Applies(m):
		return Result{}, fmt.Errorf("audit: observer %v does not apply to %s (%v)", o.Observer, m.Name(), m.Coupling())
	}
	if err := rg.Validate(); err != nil {
		return Result{}, err
	}
	best := Result{Inputs: ins[0], Samples: o.Samples}
	for p, in := range ins {
		lower, events, err := pairBound(m, rg, in, uint64(p), o, o.Alpha/float64(len(ins)))
		if err != nil {
			return Result{}, err
		}
		if p == 0 || lower > best.Lower {
			best.Lower, best.Inputs, best.Events = lower, in, events
		}
		if o.Progress != nil {
			o.Progress(p + 1)
		}
	}
	return best, nil
}

// pairBound is the bound certified at level alpha by one pair of inputs.
func pairBound(m mech.Mechanism, rg mech.Range, in Inputs, p uint64, o Options, alpha float64) (float64, int, error) {
	secret := corr.SeedSecret(o.Seed)
	dim := 1
	if o.Observer == Pair {
		dim = 2
	}
	var pilot, main [2][][]float64
	for b, w := range [2]float64{in.W0, in.W1} {
		var err error
		if pilot[b], err = sample(m, rg, w, o.Observer, o.Samples, secret, "audit pilot", p, uint64(b)); err != nil {
			return 0, 0, err
		}
		if main[b], err = sample(m, rg, w, o.Observer, o.Samples, secret, "audit", p, uint64(b)); err != nil {
			return 0, 0, err
		}
	}
	// Events are products of per-message cells, chosen from the pilot.
	exact, bins := maxExact, quantileBins
	if dim == 2 {
		exact, bins = pairExact, pairBins
	}
	axes := make([]func(float64) int, dim)
	size := make([]int, dim)
	ordered := false
	for k := range dim {
		var vals []float64
		for b := range pilot {
			vals = append(vals, pilot[b][k]...)
		}
		axes[k], size[k], ordered = cells(vals, exact, bins)
	}
	total := 1
	for _, s := range size {
		total *= s
	}
	var count [2][]int
	for b := range main {
		count[b] = make([]int, total)
		for i := range main[b][0] {
			e := 0
			for k := range dim {
				e = e*size[k] + axes[k](main[b][k][i])
			}
			count[b][e]++
		}
	}
	sets := [][2][]int{{count[0], count[1]}}[:0]
	for e := range total {
		sets = append(sets, [2][]int{{count[0][e]}, {count[1][e]}})
	}
	if dim == 1 && ordered {
		// The half-lines below and above each edge: the events of a
		// location family's monotone likelihood ratio (gaussian, laplace).
		for j := 1; j < total; j++ {
			var below, above [2][]int
			for b := range count {
				below[b] = count[b][:j]
				above[b] = count[b][j:]
			}
			sets = append(sets, below, above)
		}
	}
	tail := alpha / (4 * float64(len(sets))) // each side of a 1-alpha/(2 sets) interval
	lower := 0.0
	for _, set := range sets {
		var k [2]int
		for b := range set {
			for _, c := range set[b] {
				k[b] += c
			}
		}
		for _, d := range [][2]int{{0, 1}, {1, 0}} {
			lower = max(lower, epsFrom(k[d[0]], k[d[1]], o.Samples, tail, o.Delta))
		}
	}
	return lower, len(sets), nil
}

// maxExact and quantileBins size the events of one message: every value its
// own event up to maxExact distinct values, else quantileBins equal-mass
// bins. pairExact and pairBins are the same per message of a pair, so that
// their product stays near 64 events.
const (
	maxExact     = 64
	quantileBins = 32
	pairExact    = 8
	pairBins     = 8
)

// sample draws n views of the client with input w: views[k][i] is message
// k's decoded value in view i (k = 0 the audited client, 1 its partner).
// The coins are those of a client as fl's round gives them (mech.Slot),
// derived from secret, purpose, pair, side and index.
func sample(m mech.Mechanism, rg mech.Range, w float64, o Observer, n int, secret []byte, purpose string, p, side uint64) ([][]float64, error) {
	views := [][]float64{make([]float64, n)}
	if o == Pair {
		views = append(views, make([]float64, n))
	}
	in := []float32{float32(w)}
	partner := []float32{float32(rg.Center)}
	var payload []byte
	for i := range n {
		id := func(who string) corr.Source { return corr.Derive(secret, purpose+" "+who, p, side, uint64(i)) }
		// The slot of one client; shared derives the same stream each
		// call, so a partner and the server can replay it.
		slot := func(who string, role mech.Role) mech.Slot {
			s := mech.Slot{Private: id(who + " private"), Role: role}
			switch m.Coupling() {
			case mech.Paired:
				s.Shared = id("pair shared")
			case mech.Grouped:
				s.Shared, s.Size = id("group shared"), 1
			case mech.Dithered:
				s.Shared = id(who + " dither")
			}
			return s
		}
		// A pair's leader is a fair coin from its shared secret, which
		// the observer does not know (corr.Pair.Leader).
		role, other := mech.Alone, mech.Alone
		if m.Coupling() == mech.Paired {
			role, other = mech.Leader, mech.Follower
			if id("role").Uint64()&1 == 1 {
				role, other = other, role
			}
		}
		var err error
		if payload, views[0][i], err = view(m, rg, in, payload, slot("client", role), serverSlot(m, id, "client")); err != nil {
			return nil, err
		}
		if o == Pair {
			if payload, views[1][i], err = view(m, rg, partner, payload, slot("partner", other), serverSlot(m, id, "partner")); err != nil {
				return nil, err
			}
		}
	}
	return views, nil
}

// serverSlot is what the server knows of a client's coins, as
// fl.Pairing.ServerSlot gives it: the dither of a Dithered mechanism.
func serverSlot(m mech.Mechanism, id func(string) corr.Source, who string) mech.Slot {
	if m.Coupling() == mech.Dithered {
		return mech.Slot{Shared: id(who + " dither")}
	}
	return mech.Slot{}
}

// view encodes in with the client's slot and decodes the message as the
// server does, reusing buf for the payload.
func view(m mech.Mechanism, rg mech.Range, in []float32, buf []byte, client, server mech.Slot) ([]byte, float64, error) {
	payload, err := m.Encode(buf[:0], in, rg, client)
	if err != nil {
		return payload, 0, fmt.Errorf("audit: %s encode: %w", m.Name(), err)
	}
	sum, err := m.NewSum(1, rg)
	if err != nil {
		return payload, 0, fmt.Errorf("audit: %s: %w", m.Name(), err)
	}
	if err := sum.Add(payload, server); err != nil {
		return payload, 0, fmt.Errorf("audit: %s decode: %w", m.Name(), err)
	}
	mean := make([]float64, 1)
	if err := sum.Mean(mean); err != nil {
		return payload, 0, fmt.Errorf("audit: %s mean: %w", m.Name(), err)
	}
	if math.IsNaN(mean[0]) {
		return payload, 0, errors.New("audit: " + m.Name() + " decoded NaN")
	}
	return payload, mean[0], nil
}

// cells returns the map from a decoded value to its cell index, the number
// of cells, and whether they are intervals in order, chosen from the pilot
// values alone: each distinct value (and one cell for the others) if there
// are at most exact, else bins equal-mass intervals, with the outer two
// split further at masses 1/(2 bins), 1/(4 bins), ... while the pilot holds
// 20 values beyond them, so that the half-lines reach into the tails.
func cells(pilot []float64, exact, bins int) (func(float64) int, int, bool) {
	distinct := map[float64]int{}
	for _, v := range pilot {
		if _, ok := distinct[v]; !ok {
			if len(distinct) == exact {
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
		}, other + 1, false
	}
	sort.Float64s(pilot)
	n := len(pilot)
	// Upper edges of the intervals; cell k holds (edge[k-1], edge[k]].
	var at []int // indices into the sorted pilot
	for m := n / (2 * bins); m >= 20; m /= 2 {
		at = append(at, m-1, n-m-1)
	}
	for k := 1; k < bins; k++ {
		at = append(at, k*n/bins-1)
	}
	sort.Ints(at)
	var edges []float64
	for _, i := range at {
		if e := pilot[i]; len(edges) == 0 || e > edges[len(edges)-1] {
			edges = append(edges, e)
		}
	}
	return func(v float64) int { return sort.SearchFloat64s(edges, v) }, len(edges) + 1, true
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
