package fl

import (
	"math"
	"reflect"
	"testing"

	"github.com/fedpq/fedpq/report"
	"github.com/fedpq/fedpq/robust"
)

// reference is Reddi et al.'s Algorithm 2 (and FedAvgM) for one
// coordinate, in float64, written out for the test: the pseudo-gradients
// ds of successive rounds from x, with m starting at 0 and v at tau^2.
func reference(name string, c ServerConfig, x float64, ds []float64) []float64 {
	m, v := 0.0, c.Tau*c.Tau
	var xs []float64
	for _, d := range ds {
		switch name {
		case "fedavgm":
			m = c.Beta1*m + d
			x += c.LR * m
			xs = append(xs, x)
			continue
		case "fedadagrad":
			v += d * d
		case "fedadam":
			v = c.Beta2*v + (1-c.Beta2)*d*d
		case "fedyogi":
			s := 0.0
			if v > d*d {
				s = 1
			} else if v < d*d {
				s = -1
			}
			v -= (1 - c.Beta2) * d * d * s
		}
		m = c.Beta1*m + (1-c.Beta1)*d
		x += c.LR * m / (math.Sqrt(v) + c.Tau)
		xs = append(xs, x)
	}
	return xs
}

// TestServerOptimizers: each optimizer's steps follow its update rule over
// rounds of pseudo-gradients that change sign and size, in both modes
// (weights: the estimate is the mean trained model, whose difference from
// the global model is the pseudo-gradient), to float32 rounding of the
// moments.
func TestServerOptimizers(t *testing.T) {
	ds := []float64{0.5, -0.2, 0.05, 1.5, -3, 0.001}
	for _, name := range []string{"fedavgm", "fedadam", "fedyogi", "fedadagrad"} {
		for _, perturb := range []string{"updates", "weights"} {
			c := ServerConfig{Name: name, LR: 0.3, Beta1: 0.8, Beta2: 0.95, Tau: 0.01}
			opt, err := NewServerOptimizer(c, perturb)
			if err != nil {
				t.Fatal(err)
			}
			want := reference(name, c, 0.25, ds)
			global := [][]float32{{0.25}}
			var moments [][]float32
			for r, d := range ds {
				est := [][]float64{{d}}
				if perturb == "weights" {
					est[0][0] += float64(global[0][0])
				}
				next, after := opt.Step(global, est, moments)
				if len(after) != opt.Moments() {
					t.Fatalf("%s: %d moment tensors, want %d", name, len(after), opt.Moments())
				}
				if got := next[0][0]; !(math.Abs(got-want[r]) <= 1e-5*(1+math.Abs(want[r]))) { // NaN fails too
					t.Fatalf("%s %s round %d: %v, want %v", name, perturb, r+1, got, want[r])
				}
				// The next round starts from the model as float32, as the
				// engine's does; the reference rounds nothing.
				global, moments = [][]float32{{float32(next[0][0])}}, after
			}
		}
	}
}

// TestFedAvgStep: FedAvg is the engine's update before server optimizers
// existed, bit for bit: (1-lambda) g + lambda x for weights, g + lambda x
// for updates.
func TestFedAvgStep(t *testing.T) {
	g := [][]float32{{0.1, -2, 3e-3}}
	est := [][]float64{{0.7, 1.25, -1e-4}}
	for _, perturb := range []string{"weights", "updates"} {
		opt, err := NewServerOptimizer(ServerConfig{Name: "fedavg", LR: 0.35}, perturb)
		if err != nil {
			t.Fatal(err)
		}
		next, moments := opt.Step(g, est, nil)
		if moments != nil {
			t.Error("fedavg keeps moments")
		}
		for j, w := range g[0] {
			want := float64(w) + 0.35*est[0][j]
			if perturb == "weights" {
				want = (1-0.35)*float64(w) + 0.35*est[0][j]
			}
			if next[0][j] != want {
				t.Errorf("%s: %v, want %v", perturb, next[0][j], want)
			}
		}
	}
}

func TestServerOptimizerErrors(t *testing.T) {
	for _, c := range []ServerConfig{
		{Name: "fedavg", LR: 1.5},
		{Name: "fedavg", LR: 0},
		{Name: "fedadam", LR: 0.1, Beta1: 0.9, Beta2: 1, Tau: 1e-3},
		{Name: "fedyogi", LR: 0.1, Beta1: 0.9, Beta2: 0.99, Tau: 0},
		{Name: "fedavgm", LR: 1, Beta1: 1},
		{Name: "fedadam", LR: math.Inf(1), Beta1: 0.9, Beta2: 0.99, Tau: 1e-3},
		{Name: "sgd", LR: 1},
	} {
		if _, err := NewServerOptimizer(c, "updates"); err == nil {
			t.Errorf("%+v accepted", c)
		}
	}
}

// TestStrategyLedger: the server's strategy is post-processing, so every
// round's privacy entries are the same whatever the optimizer or the
// aggregator (docs/privacy.md).
func TestStrategyLedger(t *testing.T) {
	task := fakeTask(8, 6, func(int) int { return 2 })
	var want []report.Round
	for _, s := range []struct {
		opt  string
		rule robust.Rule
	}{{"fedavg", nil}, {"fedavgm", nil}, {"fedadam", nil}, {"fedavg", robust.Median{}}} {
		cfg := baseConfig()
		cfg.Mechanism, cfg.Perturb, cfg.Weighting, cfg.Rounds = "ldpq", "updates", "mean", 3
		cfg.Server.Name, cfg.Aggregator = s.opt, s.rule
		if s.opt != "fedavg" {
			cfg.Server.LR = 0.1
		}
		_, rounds := run(t, cfg, task)
		if want == nil {
			want = rounds
			if rounds[2].Privacy == nil || rounds[2].EpsilonSpent != 3 {
				t.Fatalf("no ledger to compare: %+v", rounds[2])
			}
			continue
		}
		for i, r := range rounds {
			if !reflect.DeepEqual(r.Privacy, want[i].Privacy) || r.EpsilonSpent != want[i].EpsilonSpent {
				t.Errorf("%s %v, round %d: privacy %+v, fedavg's %+v", s.opt, s.rule, r.Round, r.Privacy, want[i].Privacy)
			}
		}
	}
}

// counting wraps a ServerOptimizer and counts its steps.
type counting struct {
	ServerOptimizer
	steps *int
}

func (c counting) Step(global [][]float32, est [][]float64, moments [][]float32) ([][]float64, [][]float32) {
	*c.steps++
	return c.ServerOptimizer.Step(global, est, moments)
}

// countingRule wraps a robust.Rule and counts its aggregations.
type countingRule struct {
	robust.Rule
	calls *int
}

func (c countingRule) Aggregate(rows [][]float32, out []float64) error {
	*c.calls++
	return c.Rule.Aggregate(rows, out)
}

// TestCustomStrategy: a caller's own robust.Rule and ServerOptimizer run
// in the engine in place of fedpq's: wrapping the median and FedAdam, they
// are called once a round, and the run ends with the built-in pair's model,
// bit for bit.
func TestCustomStrategy(t *testing.T) {
	task := fakeTask(8, 6, func(int) int { return 2 })
	cfg := baseConfig()
	cfg.Mechanism, cfg.Perturb, cfg.Weighting, cfg.Rounds = "ldpq", "updates", "mean", 4
	cfg.Server.Name, cfg.Server.LR, cfg.Aggregator = "fedadam", 0.1, robust.Median{}
	builtin, _ := run(t, cfg, task)

	opt, err := NewServerOptimizer(cfg.Server, cfg.Perturb)
	if err != nil {
		t.Fatal(err)
	}
	var steps, calls int
	cfg.Optimizer = counting{opt, &steps}
	cfg.Server = ServerConfig{} // not read
	cfg.Aggregator = countingRule{robust.Median{}, &calls}
	custom, _ := run(t, cfg, task)
	// The rule is also tried once before the first round, on a round of
	// zeros, to refuse a round too small for it (checkAggregator).
	if steps != cfg.Rounds || calls != cfg.Rounds+1 {
		t.Errorf("%d steps and %d aggregations in %d rounds", steps, calls, cfg.Rounds)
	}
	if Hash(custom.Global()) != Hash(builtin.Global()) {
		t.Error("the wrapped median and FedAdam end with another model than the built-in ones")
	}
}
