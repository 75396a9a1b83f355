package fl

import (
	"context"
	"math"
	"testing"

	"github.com/fedpq/fedpq/corr"
	"github.com/fedpq/fedpq/mech"
	"github.com/fedpq/fedpq/report"
)

// decodedMean encodes the input w of each of n lone clients with m under
// rg and returns the server's decoded mean.
func decodedMean(t *testing.T, m mech.Mechanism, w []float32, rg mech.Range, n int, seed uint64) []float64 {
	t.Helper()
	sum, err := m.NewSum(len(w), rg)
	if err != nil {
		t.Fatal(err)
	}
	for k := range n {
		src := corr.Derive([]byte("adaptive test"), "client", seed, uint64(k))
		p, err := m.Encode(nil, w, rg, mech.Slot{Private: src})
		if err != nil {
			t.Fatal(err)
		}
		if err := sum.Add(p, mech.Slot{}); err != nil {
			t.Fatal(err)
		}
	}
	est := make([]float64, len(w))
	if err := sum.Mean(est); err != nil {
		t.Fatal(err)
	}
	return est
}

func TestAdaptiveParse(t *testing.T) {
	for s, want := range map[string]RangeRule{
		"adaptive":             {Kind: "adaptive", Radius: 0.05, Scale: 3, Growth: 1.5},
		"adaptive:0.1":         {Kind: "adaptive", Radius: 0.1, Scale: 3, Growth: 1.5},
		"adaptive:0.1,2":       {Kind: "adaptive", Radius: 0.1, Scale: 2, Growth: 1.5},
		"adaptive:0.1,2,1.25":  {Kind: "adaptive", Radius: 0.1, Scale: 2, Growth: 1.25},
		"adaptive:0.01, 4, 2 ": {Kind: "adaptive", Radius: 0.01, Scale: 4, Growth: 2},
	} {
		got, err := ParseRange(s)
		if err != nil || got != want {
			t.Errorf("ParseRange(%q) = %+v, %v; want %+v", s, got, err, want)
			continue
		}
		if again, err := ParseRange(got.String()); err != nil || again != got {
			t.Errorf("%q: String %q reads back as %+v, %v", s, got.String(), again, err)
		}
	}
	for _, bad := range []string{"adaptive:0", "adaptive:-1", "adaptive:0.05,0", "adaptive:0.05,3,1", "adaptive:0.05,3,0.5", "adaptive:1,2,3,4", "adaptive:1e308", "adaptive:x"} {
		if r, err := ParseRange(bad); err == nil {
			t.Errorf("range %q accepted as %+v", bad, r)
		}
	}
}

// TestAdaptiveRefused: an adaptive range clips updates, and needs a
// mechanism whose mean has a variance: weights, and cq, are refused.
func TestAdaptiveRefused(t *testing.T) {
	task := fakeTask(4, 3, func(int) int { return 1 })
	cfg := baseConfig()
	cfg.Range, _ = ParseRange("adaptive")
	cfg.Mechanism = "ldpq"
	if _, err := New(cfg, task); err == nil {
		t.Error("adaptive range with perturb weights accepted")
	}
	cfg.Perturb = "updates"
	if _, err := New(cfg, task); err != nil {
		t.Errorf("adaptive range with ldpq on updates: %v", err)
	}
	cfg.Mechanism = "cq"
	if _, err := New(cfg, task); err == nil {
		t.Error("adaptive range with cq (grouped) accepted")
	}
}

// TestAdaptiveBoundedUnderHugeEstimates: however large (or NaN) the
// estimates, a radius grows by at most G a round and never leaves [R0/10,
// 10 R0]; an estimate of zeros shrinks it by G a round down to R0/10.
func TestAdaptiveBoundedUnderHugeEstimates(t *testing.T) {
	cfg := baseConfig()
	cfg.Mechanism, cfg.Perturb = "ldpq", "updates"
	cfg.Mech.Epsilon = 0.1
	cfg.Range, _ = ParseRange("adaptive:0.05,3,1.5")
	e, err := New(cfg, fakeTask(4, 64, func(int) int { return 1 }))
	if err != nil {
		t.Fatal(err)
	}
	const r0, g = 0.05, 1.5
	huge := make([]float64, 64)
	for j := range huge {
		huge[j] = 1e30 * float64(1-2*(j%2)) // far beyond any support: what no honest round sends
	}
	zero := make([]float64, 64)
	step := func(est []float64) (before, after float64) {
		before = e.radii[0]
		ranges, err := e.ranges()
		if err != nil {
			t.Fatal(err)
		}
		if err := e.adapt([][]float64{est}, ranges, 4, 4); err != nil {
			t.Fatal(err)
		}
		return before, e.radii[0]
	}
	for round := range 12 {
		before, after := step(huge)
		if want := min(before*g, 10*r0); math.Abs(after-want) > 1e-15 {
			t.Errorf("round %d: radius %v after %v, want %v (at most G = %v times, at most 10 R0)", round+1, after, before, want, g)
		}
	}
	for round := range 12 {
		before, after := step(zero)
		if want := max(before/g, r0/10); math.Abs(after-want) > 1e-15 {
			t.Errorf("zeros, round %d: radius %v after %v, want %v", round+1, after, before, want)
		}
	}
	rule := cfg.Range
	for _, target := range []float64{math.NaN(), math.Inf(1), math.MaxFloat64} {
		if got := rule.next(0.05, target); math.Abs(got-0.05*g) > 1e-15 {
			t.Errorf("next(0.05, %v) = %v, want %v", target, got, 0.05*g)
		}
	}
}

// TestAdaptiveConverges: when the noise is small next to the spread, the
// radius goes to K times the clients' true mean update's RMS. Every
// round, 100 ldpq clients at eps 1 send the same update (RMS s = 0.004 over
// 4,096 coordinates) under the current radius; the radius starts at 0.05,
// first above the target and then below it (R0 = 0.004), and must end
// within 5% of K s = 0.012 in both cases. Without the variance subtracted
// it settles 25% higher, at 0.015 (measured), where 3 times the raw RMS,
// sqrt(s^2 + (2.16 r)^2/100), equals r.
func TestAdaptiveConverges(t *testing.T) {
	m, err := mech.New("ldpq", mech.Config{Epsilon: 1})
	if err != nil {
		t.Fatal(err)
	}
	const dim, n, s = 4096, 100, 0.004
	w := make([]float32, dim)
	for j := range w { // a ramp with RMS s: sqrt(3) s (2u - 1) over u uniform on the coordinates
		w[j] = float32(math.Sqrt(3) * s * (2*(float64(j)+0.5)/dim - 1))
	}
	for _, spec := range []string{"adaptive:0.05,3,1.5", "adaptive:0.004,3,1.5"} {
		rule, err := ParseRange(spec)
		if err != nil {
			t.Fatal(err)
		}
		r := rule.Radius
		for round := range 25 {
			rg := mech.Range{Radius: r}
			est := decodedMean(t, m, w, rg, n, uint64(round))
			sp, err := spread(m, est, rg, n, n)
			if err != nil {
				t.Fatal(err)
			}
			r = rule.next(r, rule.Scale*sp)
		}
		if want := 3 * s; math.Abs(r-want) > 0.05*want {
			t.Errorf("%s: radius %v after 25 rounds, want %v ± 5%%", spec, r, want)
		}
	}
}

// TestSpreadOfPureNoise: a decoded mean of clients that all send 0 (eps
// 0.1, 30 clients: a raw RMS of 0.18 at r = 0.05) has no spread, in 19 of
// 20 draws at least (the margin lets about 1 in 40 through, by chance).
func TestSpreadOfPureNoise(t *testing.T) {
	m, err := mech.New("ldpq", mech.Config{Epsilon: 0.1})
	if err != nil {
		t.Fatal(err)
	}
	rg := mech.Range{Radius: 0.05}
	some := 0
	for seed := range 20 {
		est := decodedMean(t, m, make([]float32, 4096), rg, 30, uint64(seed))
		s, err := spread(m, est, rg, 30, 30)
		if err != nil {
			t.Fatal(err)
		}
		if s > 0 {
			some++
		}
	}
	if some > 1 {
		t.Errorf("pure noise gave a spread in %d of 20 draws", some)
	}
}

// TestRangeRunaway reproduces issue 23's divergence on a small scale: with
// ldpq at eps 0.1, updates and range minmax, each round's range comes from
// the last noisy estimate, whose extremes are several times the radius
// (a client's message is ±alpha r, alpha = 20), so the range widens by more
// than 5 times a round (8 to 9 here: 0.001 to 48 in five rounds). The adaptive
// range, on the same run, moves by at most G = 1.5 a round and stays in its
// band.
func TestRangeRunaway(t *testing.T) {
	radii := func(spec string) []float64 {
		cfg := baseConfig()
		cfg.Mechanism, cfg.Perturb, cfg.Rounds = "ldpq", "updates", 6
		cfg.Mech.Epsilon = 0.1
		var err error
		if cfg.Range, err = ParseRange(spec); err != nil {
			t.Fatal(err)
		}
		e, err := New(cfg, fakeTask(30, 50, func(int) int { return 1 }))
		if err != nil {
			t.Fatal(err)
		}
		var out []float64
		err = e.Run(context.Background(), func(r report.Round) error {
			out = append(out, r.RangeRadius[0])
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
		return out
	}
	mm := radii("minmax")
	for i := 2; i < len(mm); i++ { // round 1's range is the weights'; round 2's the first estimate's
		if mm[i] < 5*mm[i-1] {
			t.Errorf("minmax: radius %v after %v: the runaway this test reproduces is gone", mm[i], mm[i-1])
		}
	}
	ad := radii("adaptive:0.05,3,1.5")
	for i, r := range ad {
		if r < 0.005 || r > 0.5 || i > 0 && (r > 1.5*ad[i-1]*(1+1e-12) || r < ad[i-1]/1.5*(1-1e-12)) {
			t.Errorf("adaptive: round %d radius %v after %v", i+1, r, ad[max(i-1, 0)])
		}
	}
}

// TestAdaptiveResume: the radii are part of the checkpoint, so a run
// restored after round 2 ends as the uninterrupted one (same model and
// radii); radii outside the band, of another count, or in a run whose
// range is not adaptive are refused.
func TestAdaptiveResume(t *testing.T) {
	cfg := baseConfig()
	cfg.Mechanism, cfg.Perturb, cfg.Rounds = "corbin", "updates", 4
	cfg.Range, _ = ParseRange("adaptive:0.2,3,1.5")
	task := fakeTask(8, 16, func(int) int { return 2 })
	full, _ := run(t, cfg, task)
	short := cfg
	short.Rounds = 2
	first, _ := run(t, short, task)
	st := first.State()
	if st.Radii[0] == 0.2 {
		t.Fatal("the radius did not move in two rounds: the test would not see it lost")
	}
	resumed, err := New(cfg, task)
	if err != nil {
		t.Fatal(err)
	}
	if err := resumed.Restore(st); err != nil {
		t.Fatal(err)
	}
	if err := resumed.Run(context.Background(), nil); err != nil {
		t.Fatal(err)
	}
	if Hash(resumed.Global()) != Hash(full.Global()) || resumed.radii[0] != full.radii[0] {
		t.Errorf("resumed run ends with radius %v, uninterrupted %v (or another model)", resumed.radii, full.radii)
	}
	for name, radii := range map[string][]float64{"above the band": {2.0001}, "below it": {0.0199}, "NaN": {math.NaN()}, "none": nil, "two": {0.2, 0.2}} {
		bad := st
		bad.Radii = radii
		if err := resumed.Restore(bad); err == nil {
			t.Errorf("checkpoint with radii %s (%v) accepted", name, radii)
		}
	}
	fixed := cfg
	fixed.Range = RangeRule{Kind: "fixed", Radius: 0.2}
	other, err := New(fixed, task)
	if err != nil {
		t.Fatal(err)
	}
	if err := other.Restore(st); err == nil {
		t.Error("a fixed-range run accepted a checkpoint with adaptive radii")
	}
}
