package audit

import (
	"fmt"
	"math"
	"runtime"
	"sort"
	"sync"
	"sync/atomic"

	"github.com/fedpq/fedpq/corr"
	"github.com/fedpq/fedpq/fl"
	"github.com/fedpq/fedpq/mech"
	"github.com/fedpq/fedpq/privacy"
)

// This file holds the user-level audit of DP-FedAvg (fl.DPFedAvg): one
// client's whole contribution to R rounds, seen as the server sees it
// behind secure aggregation (the L2 mechanisms) or as whoever gets the
// model sees the server's noisy sum (central, mechanism none).

// UserOptions sets a user-level audit (UserLevel, UserClaim).
type UserOptions struct {
	// Rounds is R, the rounds of one run: the canary takes part in every
	// one.
	Rounds int
	// Clients is n, the clients of a round, the canary among them.
	Clients int
	// Params is d, the length of every client's vector.
	Params int
	// Clip is the L2 bound C of a client's vector (0: 1). The bound on
	// epsilon does not depend on it; it is there to be the engine's.
	Clip float64
	// Runs is the number of runs of each world: the first half picks the
	// test (its threshold and side), the second half is counted. At
	// least 2.
	Runs int
	// Alpha is the audit's error: the bound holds with probability at
	// least 1-Alpha over its coins.
	Alpha float64
	// Delta is the delta of the (eps, delta) claim, and of the bound.
	Delta float64
	// Seed fixes every coin of the audit.
	Seed uint64
	// Workers is the number of runs computed at once (0: GOMAXPROCS);
	// the result does not depend on it.
	Workers int
	// Progress, if set, is called after each run with the runs done and
	// their total (both worlds), from one goroutine at a time.
	Progress func(done, total int)
}

// UserResult is the outcome of a user-level audit.
type UserResult struct {
	// Lower is the certified lower bound on the run's epsilon at Delta
	// (0 when nothing is certified).
	Lower float64
	// Threshold and Above are the test the pilot half chose: the event
	// "the statistic is above Threshold" (Above) or "at most Threshold",
	// with the canary's vector ("in") in the first case, with its zero
	// vector or without it ("out") in the second, as the more likely
	// world.
	Threshold float64
	Above     bool
	// In and Out are the counted runs of each world in the event, of
	// Counted per world.
	In, Out, Counted int
	// Shift is the mean statistic of the in world less that of the out
	// world, and SD the out world's standard deviation, over every run:
	// Shift/SD is the mu of the Gaussian the runs look like (sqrt(R)/z
	// for the central Gaussian).
	Shift, SD float64
	// Canary is the canary's vector, of L2 norm Clip (at most).
	Canary []float32
}

// Mu is Shift/SD: the Gaussian privacy parameter mu of the statistic.
func (r UserResult) Mu() float64 { return r.Shift / r.SD }

// UserLevel returns a lower bound on the user-level epsilon of R rounds
// of DP-FedAvg with mechanism name under c, from the outputs alone: with
// probability at least 1-o.Alpha over the audit's coins, the run is not
// (eps, o.Delta)-DP for any eps below Lower. A Lower above the claim
// (UserClaim) shows, at that confidence, that the claim is false.
//
// The mechanism is none (central DP-FedAvg: the clients send their
// clipped vectors as float32, the server sums them with none's Sum and
// adds N(0, (z C)^2) to each coordinate of the sum by fl.AddServerNoise,
// the code of the round engine, z = c.Noise) or an L2 mechanism
// (mech.L2: ddgauss, skellam, pbm, with c.Noise = z; c.Clients is the
// clients its noise is sized for, 0 meaning o.Clients), whose clients'
// encodings are unpacked into fields and summed, and the exact sum
// decoded by DecodeSum, as the round engine decodes a secure sum: the
// server sees only that sum.
//
// A run is R rounds of n = o.Clients clients, each round with fresh coins:
// n-1 others with fixed vectors, and the canary. In the "in" world the
// canary's vector is x, of L2 norm C; in the "out" world it is the zero
// vector (the zero-out relation the L2 mechanisms state: the canary
// still adds its share of the noise) or, for the central Gaussian, the
// canary is absent (add/remove, the relation of its claim). The observer
// sees each round's decoded sum; the statistic is the sum over the rounds
// of their projections on x/||x||, the likelihood ratio test of the
// Gaussian, and so the most powerful one for the central mechanism (its
// R rounds are then exactly a Gaussian of mu = sqrt(R)/z).
//
// The canary's vector and the others' are the worst cases the
// mechanisms' accounting states:
//
//   - none: x = C e_1, the others zero (the Gaussian's loss depends on
//     ||x|| alone, and the others' vectors add a constant);
//   - ddgauss, skellam: x spread evenly over every coordinate of the
//     rotated space (x = +-C e_1, which H D/sqrt(d') maps to +-C/sqrt(d')
//     on each of the d' coordinates): the rotated vector's L1 norm, which
//     their accounting charges besides its L2 norm (Delta1 = Bound
//     min(sqrt(d'), Bound), mech/distdp_l2.go), is then the largest, and no
//     coordinate of the sum nears the modular range (the canary along one
//     rotated coordinate, sc in the scaled units, wraps skellam's 16-bit
//     sum of 2 clients in about 1% of rounds at z = 1); the others zero,
//     their noise not depending on their data;
//   - pbm: x spread evenly over the fewest rotated coordinates that the
//     norm C reaches at pbm's clip c = k C/sqrt(d), k = mech.PBMClip, min(2,
//     (z/2) sqrt(m d/n)): ceil(d/k^2) coordinates, each with the
//     largest bias, theta (or nearly), the rest with none (the accounting
//     bounds the divergence per squared bias over every bias up to theta,
//     and pbm.go finds the coordinates at the clip costing most at high
//     orders); the others equal to x, their trials at 1/2 + theta on those
//     coordinates, a vertex of the accounting's worst case over the
//     others' biases.
//
// x is found through the server's own decoder (the difference of two
// DecodeSum calls whose field sums differ by one on the chosen rotated
// coordinates), so the audit needs no access to the rotation.
//
// The test is chosen on the pilot half of each world's runs: the
// threshold and side that give the largest bound on the pilot's counts.
// On the other half it certifies eps >= ln((Pin_lo - delta)/Pout_hi)
// (Above; the mirror image otherwise), each one-sided Clopper–Pearson
// bound at level Alpha/2, so both hold with probability 1-Alpha.
func UserLevel(name string, c mech.Config, o UserOptions) (UserResult, error) {
	a, err := newUserAudit(name, c, o)
	if err != nil {
		return UserResult{}, err
	}
	return a.audit()
}

// UserClaim is the accountant's guarantee for what UserLevel audits: R
// compositions of one round's event (fl.RoundEvent: the Gaussian at z =
// c.Noise for none, the L2 mechanism's Rényi curve for a vector of d
// parameters otherwise), composed by privacy.NewAccountant(privacy.Auto),
// at o.Delta. It is the claim of fl's user-level ledger for a run of R
// rounds in which the client takes part in every round (no sampling).
func UserClaim(name string, c mech.Config, o UserOptions) (privacy.Guarantee, error) {
	a, err := newUserAudit(name, c, o)
	if err != nil {
		return privacy.Guarantee{}, err
	}
	ev, err := fl.RoundEvent(a.m, a.z, a.d)
	if err != nil {
		return privacy.Guarantee{}, fmt.Errorf("audit: %s: %w", name, err)
	}
	acc := privacy.NewAccountant(privacy.Auto)
	if err := acc.Compose(privacy.Composed{Event: ev, Count: a.o.Rounds}); err != nil {
		return privacy.Guarantee{}, fmt.Errorf("audit: %s: %w", name, err)
	}
	g, err := acc.Guarantee(a.o.Delta)
	if err != nil {
		return g, fmt.Errorf("audit: %s: %w", name, err)
	}
	return g, nil
}

// UserMaxParams bounds UserOptions.Params.
const UserMaxParams = 1 << 20

// userAudit is one user-level audit, set up.
type userAudit struct {
	o       UserOptions
	m       mech.Mechanism
	integer mech.Integer // nil for the central Gaussian
	central bool
	z       float64
	d       int
	rg      mech.Range
	canary  []float32 // x
	unit    []float64 // x/||x||
	other   []float32 // the others' vector
	secret  []byte
}

func newUserAudit(name string, c mech.Config, o UserOptions) (*userAudit, error) {
	if o.Clip == 0 {
		o.Clip = 1
	}
	switch {
	case o.Rounds < 1:
		return nil, fmt.Errorf("audit: %d rounds: want at least 1", o.Rounds)
	case o.Clients < 1:
		return nil, fmt.Errorf("audit: %d clients: want at least 1", o.Clients)
	case o.Params < 1 || o.Params > UserMaxParams:
		return nil, fmt.Errorf("audit: %d parameters: want 1 to %d", o.Params, UserMaxParams)
	case !(o.Clip > 0) || math.IsInf(o.Clip, 0):
		return nil, fmt.Errorf("audit: clip %v must be positive and finite", o.Clip)
	case o.Runs < 2:
		return nil, fmt.Errorf("audit: %d runs per world: want at least 2 (half pick the test, half are counted)", o.Runs)
	case !(o.Alpha > 0 && o.Alpha < 1):
		return nil, fmt.Errorf("audit: alpha %v must be in (0, 1)", o.Alpha)
	case !(o.Delta > 0 && o.Delta < 1):
		return nil, fmt.Errorf("audit: delta %v must be in (0, 1)", o.Delta)
	case !(c.Noise > 0) || math.IsInf(c.Noise, 0):
		return nil, fmt.Errorf("audit: noise multiplier %v must be positive and finite", c.Noise)
	}
	if c.Clients == 0 {
		c.Clients = o.Clients
	}
	m, err := mech.New(name, c)
	if err != nil {
		return nil, fmt.Errorf("audit: %w", err)
	}
	a := &userAudit{o: o, m: m, z: c.Noise, d: o.Params, rg: mech.Range{Radius: o.Clip}, secret: corr.SeedSecret(o.Seed)}
	if name == "none" {
		a.central = true
	} else {
		_, l2 := m.(mech.L2)
		in, integer := m.(mech.Integer)
		if !l2 || !integer || m.Coupling() != mech.Independent {
			return nil, fmt.Errorf("audit: %s is not an L2 mechanism of DP-FedAvg (none, or ddgauss, skellam or pbm with a noise multiplier)", name)
		}
		a.integer = in
	}
	if err := a.vectors(name, c); err != nil {
		return nil, err
	}
	return a, nil
}

// vectors sets the canary's vector and the others' (see UserLevel).
func (a *userAudit) vectors(name string, c mech.Config) error {
	d := a.d
	var x []float64
	switch {
	case a.central:
		x = make([]float64, d)
		x[0] = 1
	case name == "pbm":
		m := c.Trials
		if m == 0 {
			m = 1
		}
		k := mech.PBMClip(c.Noise, c.Clients, m, d)
		j := min(d, int(math.Ceil(float64(d)/(k*k)*(1-1e-9))))
		var err error
		if x, err = a.rotated(j); err != nil {
			return err
		}
	default:
		var err error
		if x, err = a.rotated(a.integer.Fields(d)); err != nil {
			return err
		}
	}
	norm := 0.0
	for _, v := range x {
		norm += v * v
	}
	norm = math.Sqrt(norm)
	if !(norm > 0) || math.IsInf(norm, 0) {
		return fmt.Errorf("audit: %s: the canary's direction has norm %v", name, norm)
	}
	a.canary = make([]float32, d)
	for i, v := range x {
		a.canary[i] = float32(v / norm * a.o.Clip)
	}
	for l2norm(a.canary) > a.o.Clip { // float32 rounding, as fl's clipUpdate
		for i := range a.canary {
			a.canary[i] = math.Nextafter32(a.canary[i], 0)
		}
	}
	n := l2norm(a.canary)
	a.unit = make([]float64, d)
	for i, v := range a.canary {
		a.unit[i] = float64(v) / n
	}
	a.other = make([]float32, d)
	if name == "pbm" {
		copy(a.other, a.canary)
	}
	return nil
}

// rotated is the direction, in the input's space, of the first j
// coordinates of the mechanism's rotated space: the difference of the
// server's decoding of two field sums of two clients that differ by one
// on those fields (the fields are the rotated coordinates, and decoding
// is affine in them until its clamp, far beyond one step).
func (a *userAudit) rotated(j int) ([]float64, error) {
	f := a.integer.Fields(a.d)
	base := make([]uint64, f)
	for i := range base {
		base[i] = a.integer.Levels() - 1
	}
	step := append([]uint64(nil), base...)
	for i := range min(j, f) {
		step[i]++
	}
	x0, x1 := make([]float64, a.d), make([]float64, a.d)
	if err := a.integer.DecodeSum(x0, base, 2, a.rg, nil); err != nil {
		return nil, fmt.Errorf("audit: %s: %w", a.m.Name(), err)
	}
	if err := a.integer.DecodeSum(x1, step, 2, a.rg, nil); err != nil {
		return nil, fmt.Errorf("audit: %s: %w", a.m.Name(), err)
	}
	for i := range x1 {
		x1[i] -= x0[i]
	}
	return x1, nil
}

func l2norm(v []float32) float64 {
	s := 0.0
	for _, x := range v {
		s += float64(x) * float64(x)
	}
	return math.Sqrt(s)
}

// userScratch is one worker's buffers.
type userScratch struct {
	payload []byte
	fields  []uint64
	acc     []uint64
	dst     []float64
}

// run is the statistic of run i of world w (0 out, 1 in): the sum over
// the rounds of the decoded sum's projection on the canary's direction.
func (a *userAudit) run(w, i int, s *userScratch) (float64, error) {
	if s.dst == nil {
		s.dst = make([]float64, a.d)
		if a.integer != nil {
			f := a.integer.Fields(a.d)
			s.fields, s.acc = make([]uint64, f), make([]uint64, f)
		}
	}
	t := 0.0
	for r := range a.o.Rounds {
		if err := a.round(w, i, r, s); err != nil {
			return 0, err
		}
		for j, v := range s.dst {
			t += v * a.unit[j]
		}
	}
	return t, nil
}

// round leaves in s.dst the decoded sum of round r of run i of world w.
func (a *userAudit) round(w, i, r int, s *userScratch) error {
	n := a.o.Clients
	slot := func(k int) mech.Slot {
		return mech.Slot{Private: corr.Derive(a.secret, "user audit client", uint64(w), uint64(i), uint64(r), uint64(k))}
	}
	input := func(k int) []float32 {
		switch {
		case k > 0:
			return a.other
		case w == 1:
			return a.canary
		}
		return make([]float32, a.d) // zero-out
	}
	if a.central {
		sum, err := a.m.NewSum(a.d, a.rg)
		if err != nil {
			return err
		}
		for k := range n {
			if k == 0 && w == 0 {
				continue // add/remove: the canary is absent
			}
			var err error
			// none uses no coins: its slot is left empty.
			if s.payload, err = a.m.Encode(s.payload[:0], input(k), a.rg, mech.Slot{}); err != nil {
				return fmt.Errorf("audit: none encode: %w", err)
			}
			if err := sum.Add(s.payload, mech.Slot{}); err != nil {
				return fmt.Errorf("audit: none decode: %w", err)
			}
		}
		clear(s.dst)
		if c := sum.Count(); c > 0 {
			if err := sum.Mean(s.dst); err != nil {
				return fmt.Errorf("audit: none mean: %w", err)
			}
			for j := range s.dst {
				s.dst[j] *= float64(c)
			}
		}
		fl.AddServerNoise(s.dst, a.z*a.o.Clip, corr.Derive(a.secret, "user audit server noise", uint64(w), uint64(i), uint64(r)))
		return nil
	}
	clear(s.acc)
	for k := range n {
		var err error
		if s.payload, err = a.m.Encode(s.payload[:0], input(k), a.rg, slot(k)); err != nil {
			return fmt.Errorf("audit: %s encode: %w", a.m.Name(), err)
		}
		if err := a.integer.Unpack(s.fields, s.payload, a.d); err != nil {
			return fmt.Errorf("audit: %s unpack: %w", a.m.Name(), err)
		}
		for j, f := range s.fields {
			s.acc[j] += f
		}
	}
	if err := a.integer.DecodeSum(s.dst, s.acc, n, a.rg, nil); err != nil {
		return fmt.Errorf("audit: %s decode: %w", a.m.Name(), err)
	}
	for j := range s.dst {
		s.dst[j] *= float64(n)
	}
	return nil
}

// audit runs both worlds and certifies the bound.
func (a *userAudit) audit() (UserResult, error) {
	runs := a.o.Runs
	stat := [2][]float64{make([]float64, runs), make([]float64, runs)}
	workers := a.o.Workers
	if workers <= 0 {
		workers = runtime.GOMAXPROCS(0)
	}
	total := 2 * runs
	var (
		next, done atomic.Int64
		mu         sync.Mutex
		first      error
		wg         sync.WaitGroup
	)
	for range min(workers, total) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var s userScratch
			for {
				k := int(next.Add(1) - 1)
				if k >= total {
					return
				}
				w, i := k%2, k/2
				t, err := a.run(w, i, &s)
				if err != nil {
					mu.Lock()
					if first == nil {
						first = err
					}
					mu.Unlock()
					next.Store(int64(total))
					return
				}
				stat[w][i] = t
				if a.o.Progress != nil {
					d := done.Add(1)
					mu.Lock()
					a.o.Progress(int(d), total)
					mu.Unlock()
				}
			}
		}()
	}
	wg.Wait()
	if first != nil {
		return UserResult{}, first
	}
	res := UserResult{Canary: a.canary}
	res.Shift, res.SD = shiftSD(stat[1], stat[0])
	pilot := runs / 2
	tail := a.o.Alpha / 2
	t, above, _ := bestTest(stat[1][:pilot], stat[0][:pilot], tail, a.o.Delta)
	res.Threshold, res.Above = t, above
	in, out := stat[1][pilot:], stat[0][pilot:]
	res.Counted = len(in)
	res.In, res.Out = countAbove(in, t), countAbove(out, t)
	if above {
		res.Lower = max(0, epsFrom(res.In, res.Out, res.Counted, tail, a.o.Delta))
	} else {
		res.Lower = max(0, epsFrom(res.Counted-res.Out, res.Counted-res.In, res.Counted, tail, a.o.Delta))
	}
	return res, nil
}

// shiftSD is mean(in) - mean(out) and the standard deviation of out.
func shiftSD(in, out []float64) (float64, float64) {
	mean := func(v []float64) float64 {
		s := 0.0
		for _, x := range v {
			s += x
		}
		return s / float64(len(v))
	}
	mo := mean(out)
	v := 0.0
	for _, x := range out {
		v += (x - mo) * (x - mo)
	}
	return mean(in) - mo, math.Sqrt(v / float64(max(1, len(out)-1)))
}

func countAbove(v []float64, t float64) int {
	k := 0
	for _, x := range v {
		if x > t {
			k++
		}
	}
	return k
}

// bestTest is the threshold and side whose event gives the largest bound
// on the pilot's counts (in the in world's runs, out the out world's, as
// many of each), and that bound. The thresholds tried are the pooled
// pilot's values at ranks 0..63 from each end and at ranks growing by 3%
// from there: the bound lives in the tails.
func bestTest(in, out []float64, tail, delta float64) (float64, bool, float64) {
	n := len(in)
	pool := append(append([]float64(nil), in...), out...)
	sort.Float64s(pool)
	si := append([]float64(nil), in...)
	so := append([]float64(nil), out...)
	sort.Float64s(si)
	sort.Float64s(so)
	above := func(s []float64, t float64) int {
		return len(s) - sort.Search(len(s), func(i int) bool { return s[i] > t })
	}
	var ranks []int
	for r := 0; r < len(pool); {
		ranks = append(ranks, r, len(pool)-1-r)
		if r < 64 {
			r++
		} else {
			r = max(r+1, r*103/100)
		}
	}
	best, bestT, bestAbove := math.Inf(-1), pool[len(pool)/2], true
	for _, r := range ranks {
		t := pool[r]
		ki, ko := above(si, t), above(so, t)
		if e := epsFrom(ki, ko, n, tail, delta); e > best {
			best, bestT, bestAbove = e, t, true
		}
		if e := epsFrom(n-ko, n-ki, n, tail, delta); e > best {
			best, bestT, bestAbove = e, t, false
		}
	}
	return bestT, bestAbove, best
}

// epsFrom is the epsilon an event certifies when it happened k0 times in
// n runs of one world and k1 times in n of the other: ln((P0lo - delta) /
// P1hi), one-sided Clopper–Pearson bounds at level tail; -Inf when P0lo is
// at most delta.
func epsFrom(k0, k1, n int, tail, delta float64) float64 {
	lo := cpLower(k0, n, tail) - delta
	if !(lo > 0) {
		return math.Inf(-1)
	}
	return math.Log(lo / cpUpper(k1, n, tail))
}
