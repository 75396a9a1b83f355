package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"strconv"
	"strings"

	"github.com/fedpq/fedpq/bench"
	"github.com/fedpq/fedpq/data"
	"github.com/fedpq/fedpq/model"
)

func init() {
	commands["bench"] = command{
		summary: "fedpq's trainer beside PyTorch's, same machine, same run: step times and FL rounds",
		run:     runBench,
	}
}

const benchDescription = `steps (the default): ms per SGD step of each zoo model, fedpq's native engine
(best of --threads) beside PyTorch's (torch_step.py, best of the same threads).
rounds: whole federated rounds on MNIST in both frameworks (torch_fl.py), per
seed, with test accuracy per round (mean ± sd over seeds) and seconds per
round. PyTorch's columns need a python3 that imports torch (Debian:
apt-get install python3-torch libopenblas0-pthread); without one, fedpq's
columns are printed alone.
`

func runBench(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlags("bench", "[steps|rounds] [flags]", benchDescription, stderr)
	var (
		python = fs.String("python", bench.DefaultPython, "python3 with torch for PyTorch's columns; \"none\" for fedpq alone")
		format = fs.String("format", "text", "output: text (Markdown) or json")
		// steps
		models  = fs.String("models", "mlp,mlp-wide,cnn2,corbin-cnn,ldpfl-cnn", "steps: zoo models, comma-separated (fedpq run --help lists them)")
		batch   = fs.Int("batch", 64, "examples per step (rounds: local batch, default 10)")
		steps   = fs.Int("steps", 30, "steps: steps per timed pass")
		reps    = fs.Int("reps", 5, "steps: timed passes; the best counts")
		threads = fs.String("threads", "1,2", "steps: thread counts of one trainer (PyTorch's likewise); rounds: PyTorch's threads")
		gomlx   = fs.Bool("gomlx", false, "steps: also time fedpq's GoMLX graph engine")
		// rounds
		dataDir   = fs.String("data-dir", "", "rounds: MNIST's directory (default $FEDPQ_DATA, else ./data)")
		arch      = fs.String("model", "cnn2", "rounds: cnn2 or mlp")
		clients   = fs.Int("clients", 100, "rounds: IID clients, all in every round")
		rounds    = fs.Int("rounds", 2, "rounds: rounds per run")
		epochs    = fs.Int("epochs", 2, "rounds: local epochs")
		lr        = fs.Float64("lr", 0.1, "rounds: local SGD learning rate")
		momentum  = fs.Float64("momentum", 0.5, "rounds: local SGD momentum, reset per client")
		mechanism = fs.String("mechanism", "ldpq", "rounds: clip (clipping alone) or ldpq")
		epsilon   = fs.Float64("epsilon", 1, "rounds: ldpq's eps per parameter per round")
		radius    = fs.Float64("radius", 0.05, "rounds: updates are clipped to ±radius")
		seeds     = fs.Int("seeds", 3, "rounds: runs per framework, seeds 1 to N")
	)
	operands, err := parseWithArgs(fs, args)
	if err != nil {
		return err
	}
	what := "steps"
	if len(operands) > 0 {
		what = operands[0]
	}
	if len(operands) > 1 || (what != "steps" && what != "rounds") {
		return usageError(fs, "want steps or rounds, got %q", strings.Join(operands, " "))
	}
	if *format != "text" && *format != "json" {
		return usageError(fs, "--format %q: want text or json", *format)
	}
	thr, err := positiveInts(*threads)
	if err != nil {
		return usageError(fs, "--threads: %v", err)
	}
	if what == "steps" { // settings first: finding torch takes a while
		for _, m := range strings.Split(*models, ",") {
			if model.Describe(m) == "" {
				return usageError(fs, "--models: unknown model %q (have %s)", m, strings.Join(model.Names(), ", "))
			}
		}
		if *batch < 1 || *steps < 1 || *reps < 1 {
			return usageError(fs, "--batch, --steps and --reps must be positive")
		}
	}
	var torch *bench.Torch
	if *python != "none" {
		if torch, err = bench.FindTorch(ctx, *python); err != nil {
			fmt.Fprintf(stderr, "fedpq bench: %v; printing fedpq's columns alone\n", err)
		} else if !torch.OptimisedBLAS() {
			fmt.Fprintf(stderr, "fedpq bench: warning: PyTorch calls %s, not an optimised BLAS: its dense layers run about 10x slower (apt-get install libopenblas0-pthread)\n", torch.BLAS)
		}
	}
	progress := io.Discard
	if isTerminal(stderr) {
		progress = stderr
	}
	if what == "steps" {
		o := bench.StepOptions{Models: strings.Split(*models, ","), Batch: *batch, Steps: *steps, Reps: *reps,
			Threads: thr, GoMLX: *gomlx, Torch: torch}
		rows, err := bench.Steps(ctx, o, progress)
		if err != nil {
			return err
		}
		if *format == "json" {
			return json.NewEncoder(stdout).Encode(rows)
		}
		bench.StepsMarkdown(stdout, rows, o)
		return nil
	}
	o := bench.RoundOptions{DataDir: data.Dir(*dataDir), Model: *arch, Clients: *clients, Rounds: *rounds,
		Epochs: *epochs, Batch: *batch, LR: *lr, Momentum: *momentum, Mechanism: *mechanism,
		Epsilon: *epsilon, Radius: *radius, Threads: thr[len(thr)-1], Torch: torch}
	if !flagSet(fs, "batch") {
		o.Batch = 10 // the papers' local batch
	}
	if o.Model != "cnn2" && o.Model != "mlp" {
		return usageError(fs, "--model %q: rounds compares cnn2 or mlp (the anchor's models)", o.Model)
	}
	if o.Mechanism != "clip" && o.Mechanism != "ldpq" {
		return usageError(fs, "--mechanism %q: want clip or ldpq", o.Mechanism)
	}
	if *seeds < 1 || o.Rounds < 1 || o.Clients < 1 {
		return usageError(fs, "--seeds, --rounds and --clients must be positive")
	}
	for s := range *seeds {
		o.Seeds = append(o.Seeds, uint64(s+1))
	}
	r, err := bench.Rounds(ctx, o, progress)
	if err != nil {
		return err
	}
	if *format == "json" {
		return json.NewEncoder(stdout).Encode(r)
	}
	bench.RoundsMarkdown(stdout, r)
	return nil
}

// positiveInts parses a comma-separated list of positive integers.
func positiveInts(s string) ([]int, error) {
	var out []int
	for _, f := range strings.Split(s, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || n < 1 {
			return nil, fmt.Errorf("%q is not a positive integer", f)
		}
		out = append(out, n)
	}
	return out, nil
}

// usageError reports a bad argument with the command's usage (exit status 2).
func usageError(fs *flag.FlagSet, format string, a ...any) error {
	fmt.Fprintf(fs.Output(), "fedpq: "+format+"\n", a...)
	fs.Usage()
	return errUsage
}

// flagSet reports whether the flag name was given on the command line.
func flagSet(fs *flag.FlagSet, name string) bool {
	set := false
	fs.Visit(func(f *flag.Flag) { set = set || f.Name == name })
	return set
}
