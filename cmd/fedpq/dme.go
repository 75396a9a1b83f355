package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"strings"
	"text/tabwriter"

	"github.com/fedpq/fedpq/dme"
	"github.com/fedpq/fedpq/mech"
)

func init() {
	commands["dme"] = command{
		summary: "distributed mean estimation: compare mechanisms on synthetic vectors",
		run:     runDME,
	}
}

const dmeDescription = `Each trial is one round: every client draws a vector from --input, encodes it
with the mechanism (pairing, key agreement and shared bits included), and the
server decodes and averages the messages. The estimate is compared with the
true mean of the clients' vectors. With --mechanism all, every mechanism runs
on the same inputs and seed.
`

func runDME(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlags("dme", "[flags]", dmeDescription, stderr)
	def := mech.DefaultConfig()
	var (
		name     = fs.String("mechanism", "all", "mechanism name, or all (see fedpq mechanisms)")
		clients  = fs.Int("clients", 100, "number of clients")
		dim      = fs.Int("dim", 1000, "parameters per client")
		trials   = fs.Int("trials", 10, "independent rounds")
		input    = fs.String("input", "uniform", "client values: const:V, uniform (over the clipping range), uniform:A,B or normal:MU,SIGMA")
		center   = fs.Float64("center", 0, "clipping range center c")
		radius   = fs.Float64("radius", 1, "clipping range radius r: values are clipped to [c-r, c+r]")
		seed     = fs.Uint64("seed", 1, "seed of every random stream (same seed, same numbers)")
		transfer = fs.Bool("transfer", false, "paired mechanisms: the leader sends its shared bits sealed (the papers' protocol) instead of both deriving them")
		workers  = fs.Int("workers", 0, "clients encoded in parallel (0: all cores)")
		format   = fs.String("format", "text", "output: text or json")
		quiet    = fs.Bool("quiet", false, "no progress on stderr")
		c        = def
	)
	fs.Float64Var(&c.Epsilon, "epsilon", def.Epsilon, "privacy budget per parameter per round")
	fs.Float64Var(&c.Delta, "delta", def.Delta, "gaussian: delta")
	mechConfigFlags(fs, &c)
	if err := parse(fs, args); err != nil {
		return err
	}
	if *format != "text" && *format != "json" {
		return badValue{fmt.Errorf("--format %q: want text or json", *format)}
	}
	in, err := dme.ParseInput(*input)
	if err != nil {
		return badValue{err}
	}
	names := []string{*name}
	if *name == "all" {
		names = mech.Names()
	} else if _, ok := mech.Lookup(*name); !ok {
		return badValue{fmt.Errorf("unknown mechanism %q; known: all, %s", *name, strings.Join(mech.Names(), ", "))}
	}
	// Settings a mechanism or the range refuses are the user's to fix
	// (exit status 2), not a failure of the run.
	if *clients < 1 || *dim < 1 || *trials < 1 {
		return badValue{fmt.Errorf("--clients (%d), --dim (%d) and --trials (%d) must be at least 1", *clients, *dim, *trials)}
	}
	if err := (mech.Range{Center: *center, Radius: *radius}).Validate(); err != nil {
		return badValue{err}
	}
	if *name != "all" {
		if _, err := mech.New(*name, c); err != nil {
			return badValue{err}
		}
	}
	// ddgauss and skellam calibrate their noise for the clients that add it,
	// as the round engine does; left at 0 each client would add it all.
	c.Clients = *clients
	showProgress := !*quiet && isTerminal(stderr)
	var results []*dme.Result
	for _, n := range names {
		cfg := dme.Config{
			Mechanism: n, Mech: c, Clients: *clients, Dim: *dim, Trials: *trials,
			Input: in, Range: mech.Range{Center: *center, Radius: *radius},
			Seed: *seed, Transfer: *transfer, Workers: *workers,
		}
		var progress func(int)
		if showProgress {
			progress = func(done int) { fmt.Fprintf(stderr, "\r%-12s trial %d/%d", n, done, *trials) }
		}
		r, err := dme.Run(ctx, cfg, progress)
		if showProgress {
			fmt.Fprint(stderr, "\r\033[K")
		}
		if err != nil {
			return fmt.Errorf("%s: %w", n, err)
		}
		results = append(results, r)
	}
	if *format == "json" {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		if len(results) == 1 && *name != "all" {
			return enc.Encode(results[0])
		}
		return enc.Encode(results)
	}
	return printDME(stdout, results)
}

func printDME(w io.Writer, results []*dme.Result) error {
	r0 := results[0]
	fmt.Fprintf(w, "DME: %d clients, %d parameters, %d trials, input %s, range %g±%g, epsilon %g, seed %d\n\n",
		r0.Clients, r0.Dim, r0.Trials, r0.Input, r0.Center, r0.Radius, r0.Epsilon, r0.Seed)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "mechanism\tLDP\tbits/param\tsetup B/pair\tMSE\t±stderr\tMSE theory\tbias\tencode Mparams/s\tdecode Mparams/s\t")
	for _, r := range results {
		ldp := "no"
		if r.LDP {
			ldp = "yes"
		}
		theory := "-"
		if r.MSETheory != nil {
			theory = fmt.Sprintf("%.4g", *r.MSETheory)
		}
		fmt.Fprintf(tw, "%s\t%s\t%g\t%g\t%.4g\t%.2g\t%s\t%+.2g\t%.0f\t%.0f\t\n",
			r.Mechanism, ldp, r.UplinkBitsPerParam, r.SharedSetupBytesPerPair, r.MSE, r.MSEStderr, theory, r.Bias, r.EncodeMParamsPerS, r.DecodeMParamsPerS)
	}
	return tw.Flush()
}

// isTerminal reports whether w is a terminal, where progress is shown.
func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	if !ok {
		return false
	}
	st, err := f.Stat()
	return err == nil && st.Mode()&os.ModeCharDevice != 0
}
