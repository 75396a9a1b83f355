package bench

import (
	"context"
	"fmt"
	"io"
	"math"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/fedpq/fedpq/model"
)

// StepOptions is what Steps measures.
type StepOptions struct {
	Models  []string // zoo architectures
	Batch   int      // examples per step
	Steps   int      // steps per timed pass
	Reps    int      // timed passes; the best is kept
	Threads []int    // thread counts of one trainer; each figure is the best over them
	GoMLX   bool     // also time the GoMLX graph engine (single trainer, its own threads)
	Torch   *Torch   // nil: no PyTorch column
}

// StepRow is one model's ms per SGD step.
type StepRow struct {
	Model  string          `json:"model"`
	Params int             `json:"params"`
	FedPQ  map[int]float64 `json:"fedpq_ms"` // by threads
	GoMLX  float64         `json:"gomlx_ms,omitempty"`
	Torch  map[int]float64 `json:"torch_ms,omitempty"` // by threads
}

// best is the fastest figure over thread counts, and its thread count.
func best(m map[int]float64) (float64, int) {
	v, n := math.Inf(1), 0
	for k, x := range m {
		if x < v || (x == v && k < n) {
			v, n = x, k
		}
	}
	return v, n
}

// Steps times one SGD step (lr 0.01) of each model on random MNIST-shaped
// inputs (32x32x3 for vgg-small): Reps passes of one Train call over
// Batch*Steps examples after one untimed pass, the best pass divided by
// Steps, so loading and reading the weights count as in a client's local
// training. PyTorch's figures come from torch_step.py in the same call,
// after fedpq's, with the same shapes, batch and threads.
func Steps(ctx context.Context, o StepOptions, progress io.Writer) ([]StepRow, error) {
	var rows []StepRow
	for _, arch := range o.Models {
		m, err := model.New(arch, input(arch), 10)
		if err != nil {
			return nil, err
		}
		row := StepRow{Model: arch, Params: m.NumParams(), FedPQ: map[int]float64{}}
		for _, n := range o.Threads {
			tr, err := m.NewTrainerOn(model.Native, model.Optimizer{Name: "sgd", LR: 0.01})
			if err != nil {
				return nil, err
			}
			tr.SetThreads(n)
			if row.FedPQ[n], err = timeSteps(ctx, tr, o); err != nil {
				return nil, err
			}
		}
		if o.GoMLX {
			tr, err := m.NewTrainerOn(model.GoMLX, model.Optimizer{Name: "sgd", LR: 0.01})
			if err != nil {
				return nil, err
			}
			if row.GoMLX, err = timeSteps(ctx, tr, o); err != nil {
				return nil, err
			}
		}
		if progress != nil {
			v, n := best(row.FedPQ)
			fmt.Fprintf(progress, "fedpq %s: %.3g ms/step (%d threads)\n", arch, v, n)
		}
		rows = append(rows, row)
	}
	if o.Torch == nil {
		return rows, nil
	}
	var res struct {
		MS map[string]map[string]float64 `json:"ms"`
	}
	threads := make([]string, len(o.Threads))
	for i, n := range o.Threads {
		threads[i] = strconv.Itoa(n)
	}
	if progress != nil {
		fmt.Fprintf(progress, "PyTorch %s (%s): timing %s\n", o.Torch.Version, o.Torch.BLAS, strings.Join(o.Models, ", "))
	}
	if err := o.Torch.run(ctx, torchStep, "torch_step.py", &res,
		"--models", strings.Join(o.Models, ","), "--batch", strconv.Itoa(o.Batch),
		"--steps", strconv.Itoa(o.Steps), "--reps", strconv.Itoa(o.Reps), "--threads", strings.Join(threads, ",")); err != nil {
		return nil, err
	}
	for i := range rows {
		rows[i].Torch = map[int]float64{}
		for k, v := range res.MS[rows[i].Model] {
			n, _ := strconv.Atoi(k)
			rows[i].Torch[n] = v
		}
	}
	return rows, nil
}

// input is each architecture's natural input: CIFAR-10's for vgg-small,
// MNIST's for the rest.
func input(arch string) []int {
	if arch == "vgg-small" {
		return []int{32, 32, 3}
	}
	return []int{28, 28, 1}
}

// timeSteps is the best of o.Reps timed Train passes, in ms per step.
func timeSteps(ctx context.Context, tr *model.Trainer, o StepOptions) (float64, error) {
	m := tr.Model()
	n := o.Batch * o.Steps
	x, y := random(m, n)
	idx := make([]int, n)
	for i := range idx {
		idx[i] = i
	}
	w := m.Init(1)
	cfg := model.TrainConfig{Epochs: 1, Batch: o.Batch, Seed: 1}
	bestDur := time.Duration(math.MaxInt64)
	for r := range o.Reps + 1 { // the first pass compiles and warms up
		start := time.Now()
		if _, _, err := tr.Train(ctx, w, x, y, idx, cfg); err != nil {
			return 0, err
		}
		if d := time.Since(start); r > 0 && d < bestDur {
			bestDur = d
		}
	}
	return bestDur.Seconds() * 1e3 / float64(o.Steps), nil
}

// random returns n uniform examples of m's input with uniform labels.
func random(m *model.Model, n int) ([]float32, []int32) {
	x := make([]float32, n*m.Features())
	y := make([]int32, n)
	s := uint64(0x9e3779b97f4a7c15)
	next := func() uint64 { s ^= s << 13; s ^= s >> 7; s ^= s << 17; return s }
	for i := range x {
		x[i] = float32(next()>>40) / (1 << 24)
	}
	for i := range y {
		y[i] = int32(next() % uint64(m.Classes()))
	}
	return x, y
}

// StepsMarkdown lays out rows as a Markdown table: fedpq's best over its
// thread counts, PyTorch's likewise, and their ratio.
func StepsMarkdown(w io.Writer, rows []StepRow, o StepOptions) {
	head := "| model | params | fedpq ms/step |"
	rule := "|---|---:|---:|"
	if o.GoMLX {
		head += " fedpq GoMLX engine |"
		rule += "---:|"
	}
	torch := o.Torch != nil
	if torch {
		head += " PyTorch ms/step | PyTorch / fedpq |"
		rule += "---:|---:|"
	}
	fmt.Fprintln(w, head)
	fmt.Fprintln(w, rule)
	for _, r := range rows {
		v, n := best(r.FedPQ)
		fmt.Fprintf(w, "| %s | %d | %s (%d thr) |", r.Model, r.Params, ms(v), n)
		if o.GoMLX {
			fmt.Fprintf(w, " %s |", ms(r.GoMLX))
		}
		if torch {
			tv, tn := best(r.Torch)
			fmt.Fprintf(w, " %s (%d thr) | %.2fx |", ms(tv), tn, tv/v)
		}
		fmt.Fprintln(w)
	}
	threads := slices.Clone(o.Threads)
	slices.Sort(threads)
	fmt.Fprintf(w, "\nbatch %d, %d steps per pass, best of %d passes and of %v threads", o.Batch, o.Steps, o.Reps, threads)
	if torch {
		fmt.Fprintf(w, "; PyTorch %s on %s", o.Torch.Version, o.Torch.BLAS)
	}
	fmt.Fprintln(w)
}

func ms(v float64) string {
	switch {
	case v >= 100:
		return fmt.Sprintf("%.0f", v)
	case v >= 10:
		return fmt.Sprintf("%.1f", v)
	}
	return fmt.Sprintf("%.3g", v)
}
