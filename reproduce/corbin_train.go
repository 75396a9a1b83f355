package reproduce

import (
	"context"
	"fmt"
	"math"
	"strings"

	"github.com/fedpq/fedpq/experiment"
)

// CorBin-FL's accuracy experiments: Experiment 2 (shared bits d, Fig. 2(a)),
// 3 (dropout, Fig. 2(b)), 4 (number of clients, Fig. 2(c)) and 7 (MNIST at
// eps = 0.5, Fig. 3(c)). The paper gives their results only as figures, so
// the tables hold fedpq's numbers and the checks test the claims its text
// makes about them.
//
// Experiments 2 to 4 run the paper's CIFAR-10 ResNet18 setting, which
// cannot run here (no CIFAR-10, and a ResNet18 round would take hours on
// 2 cores); fedpq runs them on MNIST with JoPEQ's MLP. Experiment 7 is
// MNIST in the paper too. Every run uses the paper's protocol where this
// machine allows it: IID clients, batch 64 (32 in Experiment 4), d = 5
// shared bits, a 20% validation split of the training set that judges the
// checkpoint reload with patience 5, and every client in every round.

func init() {
	for _, e := range []struct {
		name, reproduces, what, quick, full string
		spec                                trainSpec
	}{
		{"corbin-bits", "Experiment 2 (Fig. 2(a)): accuracy against the shared bits per parameter d",
			"MNIST, 50 clients, MLP, eps 1: corbin with d = 1, 3, 5, 7 against ldpq (no shared bits), 3 seeds", "5 s", "1.6 min", corbinBits()},
		{"corbin-dropout", "Experiment 3 (Fig. 2(b)): accuracy against the dropout probability",
			"MNIST, 50 clients, MLP, eps 1: corbin and ldpq with clients dropping out with probability 0, 0.1, 0.3, 0.5, 3 seeds", "8 s", "1.4 min", corbinDropout()},
		{"corbin-clients", "Experiment 4 (Fig. 2(c)): accuracy against the number of clients",
			"MNIST, 50 to 500 clients, MLP, batch 32, eps 5: corbin, ldpq and no privacy", "6 s", "42 s", corbinClients()},
		{"corbin-mnist", "Experiment 7 (Fig. 3(c)): MNIST at eps = 0.5, CorBin-FL against LDP-FL and vanilla FL",
			"MNIST, 50 clients, cnn2, eps 0.5: corbin, ldpq and no privacy", "2 s", "2.0 min", corbinMNIST()},
	} {
		spec, name := e.spec, e.name
		register(Experiment{
			Name: name, Paper: "CorBin-FL", Reproduces: e.reproduces, What: e.what,
			QuickTime: e.quick, FullTime: e.full,
			run: func(ctx context.Context, o Options) (*Result, error) { return spec.run(ctx, o, name) },
		})
	}
}

// corbinBase is the common setting; quick: 6 of the 50 clients per round
// (three pairs), two rounds, logistic regression.
func corbinBase(quick bool) experiment.Config {
	c := experiment.Default()
	c.Dataset, c.Partition, c.Clients, c.Rounds = "mnist", "iid", 50, 10
	c.Model, c.Optimizer, c.LR, c.Momentum, c.Epochs, c.Batch = "mlp", "sgd", 0.1, 0.5, 1, 64
	c.Mechanism, c.Epsilon, c.SharedBits = "corbin", 1, 5
	c.Perturb, c.Range = "updates", "fixed:0,0.05"
	c.Validation, c.Patience = 0.2, 5
	if quick {
		c.Model, c.Rounds, c.ClientsPerRound = "linear", 2, 6
	}
	return c
}

func corbinSettings(c experiment.Config, what string) string {
	return fmt.Sprintf("MNIST, %d clients (IID, 80%% of the training set; the other 20%% is the server's validation split, which judges the checkpoint reload with patience %d), %s every round, model %s, "+
		"local SGD (lr %g, momentum %g, batch %d, %d epoch), updates clipped to ±0.05 (fixed range), global learning rate %g, %d rounds. %s",
		c.Clients, c.Patience, clientsPerRound(c), c.Model, c.LR, c.Momentum, c.Batch, c.Epochs, c.GlobalLR, c.Rounds, what)
}

// corbinNotes are the gaps common to the four experiments.
var corbinNotes = []string{
	"CorBin-FL gives these results only as figures; their values are not in the text available here (papers/corbin-fl-common-randomness.txt), so the table has no paper column and the checks test the claims the text makes.",
	"Range and update: the paper perturbs the weights with each layer's min/max range of the previous round and grid-searches the global learning rate lambda over 0.1..1.0 per mechanism. fedpq perturbs updates clipped to a fixed ±0.05 with lambda = 1: docs/training.md measured that weights with min/max ranges diverge under strong privacy at lambda = 1, and a ten-point grid per cell is ten times the compute.",
	"Data: the paper splits all samples 80/20 into training and test sets; fedpq keeps MNIST's own 60,000/10,000 split and holds out 20% of the training set for validation, as the paper does.",
}

func corbinBits() trainSpec {
	return trainSpec{
		cells: func(quick bool) []cell {
			base := corbinBase(quick)
			ldpq := base
			ldpq.Mechanism = "ldpq"
			cells := []cell{{"ldpq (LDP-FL)", "no shared bits", math.NaN(), ldpq}}
			for _, d := range []int{1, 3, 5, 7} {
				c := base
				c.SharedBits = d
				cells = append(cells, cell{"corbin", fmt.Sprintf("d = %d", d), math.NaN(), c})
			}
			return cells
		},
		seeds: 3, // the MLP runs are cheap
		settings: func(quick bool) string {
			return corbinSettings(corbinBase(quick), "corbin at eps = 1 with d shared bits per parameter, against ldpq at eps = 1 (the paper's Experiment 2 has eps = 1 and d in {3, 5, 7}; d = 1 is added to show the trend).")
		},
		checks: func(t trainTable) []Check {
			ldpq := t.acc("ldpq (LDP-FL)", "no shared bits")
			var gains []string
			above := true
			for _, d := range []int{3, 5, 7} {
				a := t.acc("corbin", fmt.Sprintf("d = %d", d))
				gains = append(gains, fmt.Sprintf("d = %d: %s", d, t.diff("corbin", fmt.Sprintf("d = %d", d), "ldpq (LDP-FL)", "no shared bits")))
				above = above && a > ldpq
			}
			d5, d7 := t.acc("corbin", "d = 5"), t.acc("corbin", "d = 7")
			return []Check{
				check("Sec. V: CorBin-FL is more accurate than LDP-FL at every d in {3, 5, 7} (mean over the seeds)", above,
					"mean accuracy minus ldpq's, points ± standard error over the seeds: %s", strings.Join(gains, "; ")),
				check("Sec. V: the gains saturate at d = 5 (d = 7 no better than d = 5 by more than 0.5 points)", d7-d5 <= 0.005,
					"d = 7 minus d = 5: %s points", t.diff("corbin", "d = 7", "corbin", "d = 5")),
			}
		},
		notes: append([]string{"The paper runs Experiment 2 on CIFAR-10 with ResNet18 and 50 clients; fedpq on MNIST with JoPEQ's MLP (25,818 parameters), 3 seeds."}, corbinNotes...),
	}
}

var dropouts = []float64{0, 0.1, 0.3, 0.5}

func corbinDropout() trainSpec {
	return trainSpec{
		cells: func(quick bool) []cell {
			var cells []cell
			for _, m := range []string{"corbin", "ldpq"} {
				for _, p := range dropouts {
					c := corbinBase(quick)
					c.Mechanism, c.Dropout = m, p
					cells = append(cells, cell{m, fmt.Sprintf("p = %g", p), math.NaN(), c})
				}
			}
			return cells
		},
		seeds: 3, // the MLP runs are cheap
		settings: func(quick bool) string {
			return corbinSettings(corbinBase(quick), "Each sampled client drops out before uploading with probability p; its partner, unaware, is then an exact ldpq client, and the server divides by the uploads it received. eps = 1, d = 5.")
		},
		checks: func(t trainTable) []Check {
			p0, p5 := t.acc("corbin", "p = 0"), t.acc("corbin", "p = 0.5")
			var gaps []string
			above := true
			for _, p := range dropouts {
				col := fmt.Sprintf("p = %g", p)
				a, b := t.acc("corbin", col), t.acc("ldpq", col)
				gaps = append(gaps, fmt.Sprintf("p = %g: %s", p, t.diff("corbin", col, "ldpq", col)))
				above = above && a > b
			}
			return []Check{
				check("Sec. V: accuracy does not fall significantly at dropout p = 0.5 (within 2 points of p = 0)", p0-p5 <= 0.02,
					"corbin at p = 0: %s, at p = 0.5: %s; difference %s points", percent(p0), percent(p5), t.diff("corbin", "p = 0.5", "corbin", "p = 0")),
				check("CorBin-FL stays above LDP-FL under dropout (not a claim of the paper; its Fig. 2(b) shows CorBin-FL only)", above,
					"corbin minus ldpq, points (± standard error over the seeds, if several): %s", strings.Join(gaps, "; ")),
			}
		},
		notes: append([]string{
			"The paper runs Experiment 3 on CIFAR-10 with ResNet18 and 50 clients, without stating the probabilities it tried beyond p = 0.5; fedpq on MNIST with the MLP, 3 seeds.",
			"The authors' code divides the sum by the number of sampled clients, which shrinks the aggregate under dropout; fedpq divides by the uploads received (papers/NOTES.md).",
		}, corbinNotes...),
	}
}

var clientCounts = []int{50, 100, 200, 500}

func corbinClients() trainSpec {
	cfg := func(quick bool, m string, n int) experiment.Config {
		c := corbinBase(quick)
		c.Mechanism, c.Clients, c.Epsilon, c.Batch = m, n, 5, 32
		if quick {
			c.ClientsPerRound = n / 10
		}
		return c
	}
	return trainSpec{
		cells: func(quick bool) []cell {
			var cells []cell
			for _, m := range []string{"none", "ldpq", "corbin"} {
				for _, n := range clientCounts {
					if quick && n > 100 {
						continue
					}
					cells = append(cells, cell{m, fmt.Sprintf("n = %d", n), math.NaN(), cfg(quick, m, n)})
				}
			}
			return cells
		},
		settings: func(quick bool) string {
			c := cfg(quick, "corbin", 50)
			return corbinSettings(c, "n clients share the training set (fewer examples each as n grows); corbin and ldpq at eps = 5, d = 5; none is federated averaging of float32 updates, unclipped. The settings above are n = 50's.")
		},
		checks: func(t trainTable) []Check {
			var gaps []string
			above := true
			for _, n := range clientCounts {
				col := fmt.Sprintf("n = %d", n)
				a, b := t.acc("corbin", col), t.acc("ldpq", col)
				if math.IsNaN(a) {
					continue
				}
				gaps = append(gaps, fmt.Sprintf("n = %d: %s", n, t.diff("corbin", col, "ldpq", col)))
				above = above && a > b
			}
			return []Check{check("Sec. V: CorBin-FL outperforms LDP-FL at every number of clients from 50 to 500", above,
				"corbin minus ldpq, points: %s", strings.Join(gaps, "; "))}
		},
		notes: append([]string{"The paper's Experiment 4 does not name its dataset and model beyond the batch size 32 (its Experiments 1 to 3 are CIFAR-10 with ResNet18); fedpq on MNIST with the MLP, one seed per cell."}, corbinNotes...),
	}
}

func corbinMNIST() trainSpec {
	cfg := func(quick bool, m string) experiment.Config {
		c := corbinBase(quick)
		c.Mechanism, c.Epsilon = m, 0.5
		if !quick {
			c.Model = "cnn2"
		}
		return c
	}
	return trainSpec{
		cells: func(quick bool) []cell {
			var cells []cell
			for _, m := range []string{"none", "ldpq", "corbin"} {
				row := map[string]string{"none": "vanilla FL (none)", "ldpq": "LDP-FL (ldpq)", "corbin": "CorBin-FL (corbin)"}[m]
				cells = append(cells, cell{row, "MNIST, eps 0.5", math.NaN(), cfg(quick, m)})
			}
			return cells
		},
		settings: func(quick bool) string {
			return corbinSettings(cfg(quick, "corbin"), "corbin and ldpq at eps = 0.5, d = 5; vanilla FL is federated averaging of float32 updates, unclipped.")
		},
		checks: func(t trainTable) []Check {
			col := "MNIST, eps 0.5"
			none, ldpq, corbin := t.acc("vanilla FL (none)", col), t.acc("LDP-FL (ldpq)", col), t.acc("CorBin-FL (corbin)", col)
			return []Check{
				check("Exp. 7: CorBin-FL is more accurate than LDP-FL at eps = 0.5", corbin > ldpq,
					"corbin %s, ldpq %s", percent(corbin), percent(ldpq)),
				check("Exp. 7: CorBin-FL is within 1.5% of vanilla FL at eps = 0.5", none-corbin < 0.015,
					"vanilla FL %s, corbin %s: %.2f points below", percent(none), percent(corbin), 100*(none-corbin)),
			}
		},
		notes: append([]string{"Model: the paper uses a \"two-layer VGG\"; fedpq has its code's MNIST CNN as `corbin-cnn` (225,034 parameters), but one run of it would take about 25 minutes on this project's 2 cores (7,500 steps of 64 at models.md's 193 ms per step); the table uses `cnn2` (a two-layer CNN, 6,422 parameters), one seed per cell."}, corbinNotes...),
	}
}
