package bench

import (
	"bytes"
	"context"
	"math"
	"strings"
	"testing"
)

func TestStats(t *testing.T) {
	m, sd := stats([]float64{0.8, 0.9, 1.0})
	if math.Abs(m-0.9) > 1e-12 || math.Abs(sd-0.1) > 1e-12 {
		t.Errorf("stats = %v, %v; want 0.9, 0.1", m, sd)
	}
	if _, sd := stats([]float64{0.5}); sd != 0 {
		t.Errorf("one value: sd %v, want 0", sd)
	}
	if v, n := best(map[int]float64{1: 2.5, 2: 1.5, 4: 1.5}); v != 1.5 || n != 2 {
		t.Errorf("best = %v with %d threads, want 1.5 with 2 (the fewest threads of a tie)", v, n)
	}
}

// TestStepsWithoutTorch times two small models in fedpq alone and lays
// out the table: every figure positive, one row per model, no PyTorch
// column.
func TestStepsWithoutTorch(t *testing.T) {
	o := StepOptions{Models: []string{"linear", "mlp"}, Batch: 8, Steps: 2, Reps: 1, Threads: []int{1, 2}}
	rows, err := Steps(context.Background(), o, nil)
	if err != nil {
		t.Fatal(err)
	}
	if len(rows) != 2 {
		t.Fatalf("%d rows, want 2", len(rows))
	}
	for _, r := range rows {
		for _, n := range o.Threads {
			if !(r.FedPQ[n] > 0) {
				t.Errorf("%s with %d threads: %v ms/step", r.Model, n, r.FedPQ[n])
			}
		}
		if r.Torch != nil {
			t.Errorf("%s: a PyTorch figure without PyTorch", r.Model)
		}
	}
	var b bytes.Buffer
	StepsMarkdown(&b, rows, o)
	out := b.String()
	if !strings.Contains(out, "| linear | 7850 |") || !strings.Contains(out, "| mlp | 25818 |") || strings.Contains(out, "PyTorch") {
		t.Errorf("table:\n%s", out)
	}
}

// TestRoundsMarkdown checks the curves' table on known numbers: the means,
// the sample standard deviations, the difference with its standard error
// sqrt((sd1^2 + sd2^2)/n), and the time ratio.
func TestRoundsMarkdown(t *testing.T) {
	r := &RoundResult{
		Options: RoundOptions{Model: "cnn2", Clients: 100, Rounds: 1, Epochs: 2, Batch: 10, LR: 0.1, Momentum: 0.5,
			Mechanism: "clip", Radius: 0.05, Seeds: []uint64{1, 2}, Threads: 2},
		FedPQ: Curve{Accuracy: [][]float64{{0.80}, {0.90}}, Seconds: [][]float64{{1}, {3}}},
		Torch: &Curve{Accuracy: [][]float64{{0.70}, {0.70}}, Seconds: [][]float64{{8}, {8}}},
	}
	var b bytes.Buffer
	RoundsMarkdown(&b, r)
	out := b.String()
	// fedpq 85% ± 7.07; PyTorch 70% ± 0; difference 15 ± sqrt(50/2) = 5.
	for _, want := range []string{"| 1 | 85.00% ± 7.07 | 70.00% ± 0.00 | +15.00 ± 5.00 |", "fedpq 2.00, PyTorch 8.00 (2 threads): fedpq takes 0.25x"} {
		if !strings.Contains(out, want) {
			t.Errorf("missing %q in:\n%s", want, out)
		}
	}
}

func TestFindTorchMissing(t *testing.T) {
	if _, err := FindTorch(context.Background(), "/nonexistent/python3"); err == nil || !strings.Contains(err.Error(), "apt-get install python3-torch") {
		t.Errorf("FindTorch of a missing interpreter: %v; want an error that says how to install torch", err)
	}
}
