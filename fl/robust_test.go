package fl

import (
	"math"
	"strings"
	"testing"

	"github.com/fedpq/fedpq/robust"
)

// outlierTask is fakeTask with 7 clients, the last of which sends 50 for
// every parameter: the honest clients' targets are (k+1)/7 times a ramp.
func outlierTask(dim int) Task {
	task := fakeTask(7, dim, func(int) int { return 1 })
	for j := range dim {
		task.Data.Train.X[6*dim+j] = 50
	}
	return task
}

// TestRobustAggregators: with no mechanism, one round of each rule lands
// on an honest client's value, (4/7) ramp for those that take the middle,
// where the mean goes to the outlier; the norm bound gives its exact
// scaled mean.
func TestRobustAggregators(t *testing.T) {
	const dim = 4
	ramp := func(j int) float64 { return float64(j+1) / dim }
	for _, spec := range []string{"mean", "median", "trimmed-mean:0.2", "krum:1", "multi-krum:1,1", "bulyan:1", "norm-bounded:1"} {
		rule, err := robust.Parse(spec)
		if err != nil {
			t.Fatal(err)
		}
		cfg := baseConfig()
		cfg.Weighting = "mean"
		cfg.Range.Radius = 100
		cfg.Aggregator = rule
		e, rounds := run(t, cfg, outlierTask(dim))
		if rounds[0].Clients != 7 || rounds[0].Discarded != "" {
			t.Fatalf("%s: round %+v", spec, rounds[0])
		}
		for j := range dim {
			want := 4.0 / 7 * ramp(j)
			switch spec {
			case "mean":
				want = (21.0/7*ramp(j) + 50) / 7 // 1..6 sevenths, and 50
			case "bulyan:1":
				// Repeated Krum keeps the values 3, 4, 2, 5 and 1 (ties
				// to the lower position); the 3 closest to their median
				// 3 are 2, 3 and 4.
				want = 3.0 / 7 * ramp(j)
			case "norm-bounded:1":
				want = 0
				for k := range 7 {
					row, norm := make([]float64, dim), 0.0
					for i := range dim {
						row[i] = float64(k+1) / 7 * ramp(i)
						if k == 6 {
							row[i] = 50
						}
						norm += row[i] * row[i]
					}
					want += row[j] * min(1, 1/math.Sqrt(norm)) / 7
				}
			}
			if got := float64(e.Global()[0][j]); math.Abs(got-want) > 1e-6 {
				t.Errorf("%s: coordinate %d = %v, want %v", spec, j, got, want)
			}
		}
	}
}

// TestRobustRefusals: a rule that needs each client's message is refused
// where the server does not see it, with FedAvg's weights, and where a
// full round is too small for it.
func TestRobustRefusals(t *testing.T) {
	krum := func(f int) robust.Rule { return robust.Krum{F: f} }
	for _, c := range []struct {
		set  func(*Config)
		want string
	}{
		{func(c *Config) { c.SecureAggregation, c.Mechanism = true, "ldpq" }, "secure aggregation"},
		{func(c *Config) { c.Shuffle, c.Mechanism = true, "ldpq" }, "shuffler"},
		{func(c *Config) { c.Weighting = "examples" }, "weighting: mean"},
		{func(c *Config) {
			c.Range, c.Perturb = RangeRule{Kind: "adaptive", Radius: 0.05, Scale: 3, Growth: 1.5}, "updates"
		}, "adaptive range"},
		{func(c *Config) { c.Aggregator = krum(3) }, "a round of 7 clients"},
	} {
		cfg := baseConfig()
		cfg.Weighting, cfg.Aggregator = "mean", krum(1)
		c.set(&cfg)
		_, err := New(cfg, outlierTask(2))
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("error %v, want one naming %q", err, c.want)
		}
	}
}

// TestRobustRoundTooSmall: a round whose uploads are too few for the rule
// is discarded, the model unchanged, and the run goes on.
func TestRobustRoundTooSmall(t *testing.T) {
	cfg := baseConfig()
	cfg.Weighting, cfg.Aggregator, cfg.Range.Radius = "mean", robust.Krum{F: 1}, 100
	e, err := New(cfg, outlierTask(2))
	if err != nil {
		t.Fatal(err)
	}
	p, err := e.Begin(1, nil)
	if err != nil {
		t.Fatal(err)
	}
	for pos := range 3 {
		slot, err := p.Pairing.ClientSlot(pos, 2)
		if err != nil {
			t.Fatal(err)
		}
		payloads, err := Encode(e.m, cfg.Perturb, p.Global, [][]float32{{1, 1}}, p.Ranges, slot)
		if err != nil {
			t.Fatal(err)
		}
		if err := p.Add(pos, Upload{Payloads: payloads, Examples: 1}); err != nil {
			t.Fatal(err)
		}
	}
	r, err := e.End(p)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(r.Discarded, "krum") || e.Global()[0][0] != 0 {
		t.Errorf("round of 3 uploads under krum:1: discarded %q, model %v", r.Discarded, e.Global())
	}
}
