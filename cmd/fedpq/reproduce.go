package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"path/filepath"
	"slices"
	"strings"
	"text/tabwriter"

	"github.com/fedpq/fedpq/data"
	"github.com/fedpq/fedpq/reproduce"
)

func init() {
	commands["reproduce"] = command{
		summary: "run a paper's experiment: fedpq's numbers beside the paper's, as Markdown",
		run:     runReproduce,
	}
}

const reproduceDescription = `Runs experiments of the papers fedpq implements and prints, for each, a
Markdown table with fedpq's numbers beside the paper's, the paper's claims
tested on fedpq's numbers, and every gap between the paper's setting and
this one. Each writes DIR/NAME.md (the same text) and DIR/NAME.json (the raw
numbers); a training experiment also keeps each of its runs' directories in
DIR/NAME/ (fedpq plot draws them). NAME is one of the experiments --list
shows, or all.

The distributed-mean-estimation experiments (corbin-mse, coq-variance,
mvu-dme, jopeq-snr) need no data and take seconds. The training experiments
(LDP-FL Table 1, CorBin-FL's accuracy experiments, JoPEQ Table I) read MNIST
or Fashion-MNIST from --data-dir and take minutes each in full mode (--list
shows the measured times). --quick runs small sizes (seconds; for CI). The
same --seed gives the same numbers. A claim that does not hold is reported,
not an error.

  fedpq reproduce --list
  fedpq reproduce --quick --data-dir ../shared/datasets all
  fedpq reproduce --out results corbin-mse coq-variance
  fedpq reproduce --data-dir ../shared/datasets ldpfl-mnist
`

func runReproduce(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlags("reproduce", "[flags] NAME... | all\n       fedpq reproduce --list", reproduceDescription, stderr)
	var (
		list     = fs.Bool("list", false, "list the experiments: name, paper, what they reproduce, measured wall time")
		quick    = fs.Bool("quick", false, "small sizes (seconds) instead of the papers' sizes")
		out      = fs.String("out", filepath.Join("runs", "reproduce"), "directory for NAME.md and NAME.json")
		dataDir  = fs.String("data-dir", "", "directory of the dataset files (default $FEDPQ_DATA, else ./data); the training experiments read MNIST and Fashion-MNIST from it")
		seed     = fs.Uint64("seed", 1, "seed of every random stream (same seed, same numbers)")
		mvuCache = fs.String("mvu-cache", "", "mvu: directory of solved matrices (default: the user cache)")
		quiet    = fs.Bool("quiet", false, "no progress on stderr")
	)
	// Names and flags may come in any order: parse, take a name, repeat.
	var names []string
	for rest := args; ; {
		if err := fs.Parse(rest); err != nil {
			if errors.Is(err, flag.ErrHelp) {
				return err
			}
			return errUsage
		}
		if fs.NArg() == 0 {
			break
		}
		names = append(names, fs.Arg(0))
		rest = fs.Args()[1:]
	}
	if *list {
		if len(names) > 0 {
			fmt.Fprintf(stderr, "fedpq: --list takes no experiment names (got %q)\n", names[0])
			fs.Usage()
			return errUsage
		}
		return listExperiments(stdout)
	}
	if len(names) == 0 {
		fmt.Fprintln(stderr, "fedpq: name an experiment, or all (fedpq reproduce --list shows them)")
		fs.Usage()
		return errUsage
	}
	var exps []reproduce.Experiment
	for _, n := range names {
		if n == "all" {
			exps = append(exps, reproduce.List()...)
			continue
		}
		e, err := reproduce.Lookup(n)
		if err != nil {
			return badValue{fmt.Errorf("unknown experiment %q; known: all, %s", n, strings.Join(reproduce.Names(), ", "))}
		}
		exps = append(exps, e)
	}
	// Each experiment once, in the order first named.
	var seen []string
	exps = slices.DeleteFunc(exps, func(e reproduce.Experiment) bool {
		dup := slices.Contains(seen, e.Name)
		seen = append(seen, e.Name)
		return dup
	})
	o := reproduce.Options{Quick: *quick, Out: *out, DataDir: data.Dir(*dataDir), Seed: *seed, MVUCache: *mvuCache}
	if !*quiet {
		o.Progress = stderr
	}
	for i, e := range exps {
		r, err := e.Run(ctx, o)
		if err != nil {
			return err
		}
		if i > 0 {
			fmt.Fprintln(stdout)
		}
		fmt.Fprint(stdout, r.Markdown())
		if !*quiet {
			fmt.Fprintf(stderr, "%s: %.1f s; wrote %s and %s\n", e.Name, r.WallSeconds,
				filepath.Join(*out, e.Name+".md"), filepath.Join(*out, e.Name+".json"))
		}
	}
	return nil
}

func listExperiments(w io.Writer) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "NAME\tPAPER\tQUICK\tFULL\tREPRODUCES")
	for _, e := range reproduce.List() {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\n", e.Name, e.Paper, e.QuickTime, e.FullTime, e.Reproduces)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	fmt.Fprintln(w)
	for _, e := range reproduce.List() {
		fmt.Fprintf(w, "%s: %s\n", e.Name, e.What)
	}
	fmt.Fprint(w, "\nWall times are measured on this project's 2-core machine; the training\nexperiments' full times ran one after another beside other work.\ndocs/reproduction.md has the full tables and what each leaves out.\n")
	return nil
}
