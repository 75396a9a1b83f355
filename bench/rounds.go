package bench

import (
	"context"
	"fmt"
	"io"
	"math"
	"os"
	"strconv"

	"github.com/fedpq/fedpq/experiment"
	"github.com/fedpq/fedpq/report"
)

// RoundOptions is the federated setting Rounds runs in both frameworks:
// MNIST split IID over Clients, every client training Epochs local epochs
// of SGD (batch Batch, learning rate LR, momentum Momentum reset per
// client) from the global model, its update clipped to ±Radius and sent
// through Mechanism (clip: clipping alone; ldpq: LDP-FL's one-bit
// quantizer at Epsilon), the server adding the mean update. This is
// experiments/mnist-ldpq.yaml and the anchor torch_fl.py.
type RoundOptions struct {
	DataDir   string
	Model     string // cnn2 or mlp (the anchor's models)
	Clients   int
	Rounds    int
	Epochs    int
	Batch     int
	LR        float64
	Momentum  float64
	Mechanism string // clip or ldpq
	Epsilon   float64
	Radius    float64
	Seeds     []uint64
	Threads   int    // PyTorch's intra-op threads
	Torch     *Torch // nil: fedpq alone
}

// Curve is one framework's runs: per seed, the test accuracy and the wall
// seconds of each round.
type Curve struct {
	Accuracy [][]float64 `json:"accuracy"`
	Seconds  [][]float64 `json:"seconds"`
}

// RoundResult is both frameworks' runs of one setting.
type RoundResult struct {
	Options RoundOptions `json:"-"`
	FedPQ   Curve        `json:"fedpq"`
	Torch   *Curve       `json:"torch,omitempty"`
}

// Rounds runs the setting with every seed in fedpq (in process, all cores)
// and, with o.Torch, in PyTorch (torch_fl.py, He initialisation as fedpq's),
// one run after another so that neither slows the other. Each framework
// draws its own initial model, partition and batches from the seed: the
// runs agree in distribution, not run by run, so the curves are compared
// by their means over seeds against the seed-to-seed spread.
func Rounds(ctx context.Context, o RoundOptions, progress io.Writer) (*RoundResult, error) {
	res := &RoundResult{Options: o}
	dir, err := os.MkdirTemp("", "fedpq-bench-rounds-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(dir)
	for _, seed := range o.Seeds {
		acc, secs, err := fedpqRun(ctx, o, seed, fmt.Sprintf("%s/seed%d", dir, seed))
		if err != nil {
			return nil, err
		}
		res.FedPQ.Accuracy = append(res.FedPQ.Accuracy, acc)
		res.FedPQ.Seconds = append(res.FedPQ.Seconds, secs)
		if progress != nil {
			fmt.Fprintf(progress, "fedpq seed %d: accuracy %v, %.3g s/round\n", seed, acc, mean(secs))
		}
	}
	if o.Torch == nil {
		return res, nil
	}
	res.Torch = &Curve{}
	for _, seed := range o.Seeds {
		var out struct {
			Accuracy []float64 `json:"accuracy"`
			Seconds  []float64 `json:"seconds_per_round"`
		}
		f := func(v float64) string { return strconv.FormatFloat(v, 'g', -1, 64) }
		if err := o.Torch.run(ctx, torchFL, "torch_fl.py", &out,
			"--data-dir", o.DataDir, "--clients", strconv.Itoa(o.Clients), "--rounds", strconv.Itoa(o.Rounds),
			"--model", o.Model, "--mechanism", o.Mechanism, "--epsilon", f(o.Epsilon), "--radius", f(o.Radius),
			"--epochs", strconv.Itoa(o.Epochs), "--batch", strconv.Itoa(o.Batch), "--lr", f(o.LR),
			"--momentum", f(o.Momentum), "--init", "he", "--threads", strconv.Itoa(o.Threads),
			"--seed", strconv.FormatUint(seed, 10)); err != nil {
			return nil, err
		}
		res.Torch.Accuracy = append(res.Torch.Accuracy, out.Accuracy)
		res.Torch.Seconds = append(res.Torch.Seconds, out.Seconds)
		if progress != nil {
			fmt.Fprintf(progress, "PyTorch seed %d: accuracy %v, %.3g s/round\n", seed, out.Accuracy, mean(out.Seconds))
		}
	}
	return res, nil
}

// fedpqRun runs the setting once and returns each round's test accuracy
// and wall seconds (the engine's, without loading the data, as the
// anchor's).
func fedpqRun(ctx context.Context, o RoundOptions, seed uint64, out string) (acc, secs []float64, err error) {
	c := experiment.Default()
	c.Name, c.Out = "bench", out
	c.Dataset, c.DataDir, c.Partition = "mnist", o.DataDir, "iid"
	c.Clients, c.Rounds, c.Model = o.Clients, o.Rounds, o.Model
	c.Optimizer, c.LR, c.Momentum, c.Epochs, c.Batch = "sgd", o.LR, o.Momentum, o.Epochs, o.Batch
	c.Mechanism, c.Epsilon = o.Mechanism, o.Epsilon
	c.Range = fmt.Sprintf("fixed:0,%g", o.Radius)
	c.Perturb, c.Seed = "updates", seed
	prev := 0.0
	_, err = experiment.Run(ctx, c, func(r report.Round) {
		acc = append(acc, *r.Accuracy)
		secs = append(secs, r.Seconds-prev)
		prev = r.Seconds
	})
	return acc, secs, err
}

// RoundsMarkdown lays out the result: per round, each framework's mean
// test accuracy ± its standard deviation over seeds, and the difference of
// the means with its standard error; then seconds per round.
func RoundsMarkdown(w io.Writer, r *RoundResult) {
	o := r.Options
	fmt.Fprintf(w, "MNIST, %s, %d IID clients, %d local epochs of batch %d, SGD lr %g momentum %g, %s at ±%g",
		o.Model, o.Clients, o.Epochs, o.Batch, o.LR, o.Momentum, o.Mechanism, o.Radius)
	if o.Mechanism == "ldpq" {
		fmt.Fprintf(w, ", eps %g", o.Epsilon)
	}
	fmt.Fprintf(w, "; %d seeds (%v), test accuracy mean ± sd over seeds\n\n", len(o.Seeds), o.Seeds)
	if r.Torch == nil {
		fmt.Fprintln(w, "| round | fedpq |")
		fmt.Fprintln(w, "|---:|---:|")
	} else {
		fmt.Fprintln(w, "| round | fedpq | PyTorch | fedpq - PyTorch |")
		fmt.Fprintln(w, "|---:|---:|---:|---:|")
	}
	for t := range o.Rounds {
		fm, fs := stats(column(r.FedPQ.Accuracy, t))
		fmt.Fprintf(w, "| %d | %.2f%% ± %.2f |", t+1, 100*fm, 100*fs)
		if r.Torch != nil {
			tm, ts := stats(column(r.Torch.Accuracy, t))
			se := math.Sqrt((fs*fs + ts*ts) / float64(len(o.Seeds)))
			fmt.Fprintf(w, " %.2f%% ± %.2f | %+.2f ± %.2f |", 100*tm, 100*ts, 100*(fm-tm), 100*se)
		}
		fmt.Fprintln(w)
	}
	fs := mean(flat(r.FedPQ.Seconds))
	fmt.Fprintf(w, "\nseconds per round: fedpq %.2f", fs)
	if r.Torch != nil {
		ts := mean(flat(r.Torch.Seconds))
		fmt.Fprintf(w, ", PyTorch %.2f (%d threads): fedpq takes %.2fx PyTorch's time", ts, o.Threads, fs/ts)
	}
	fmt.Fprintln(w)
}

func column(runs [][]float64, t int) []float64 {
	var c []float64
	for _, r := range runs {
		if t < len(r) {
			c = append(c, r[t])
		}
	}
	return c
}

func flat(runs [][]float64) []float64 {
	var f []float64
	for _, r := range runs {
		f = append(f, r...)
	}
	return f
}

func mean(v []float64) float64 {
	s := 0.0
	for _, x := range v {
		s += x
	}
	return s / float64(len(v))
}

// stats is the mean and the sample standard deviation (0 for one value).
func stats(v []float64) (m, sd float64) {
	m = mean(v)
	if len(v) < 2 {
		return m, 0
	}
	for _, x := range v {
		sd += (x - m) * (x - m)
	}
	return m, math.Sqrt(sd / float64(len(v)-1))
}
