package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"path/filepath"
	"strings"

	"github.com/fedpq/fedpq/report"
)

func init() {
	commands["plot"] = command{
		summary: "overlay the accuracy curves of run directories; print a table of them",
		run:     runPlot,
	}
}

const plotDescription = `Reads each RUN_DIR written by "fedpq run" (its metrics.jsonl and, once the
run has finished, its summary.json) and draws their test accuracy against round
in one figure, one line per run, labelled by the run's name (or directory).
Markers show the evaluation rounds. The format follows --out's extension: .png
or .svg. A run still in progress can be plotted: its rounds so far are drawn.
`

func runPlot(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlags("plot", "[flags] RUN_DIR...", plotDescription, stderr)
	var (
		out   = fs.String("out", "accuracy-compare.png", "figure to write: a .png or .svg file")
		title = fs.String("title", "", "figure title")
		table = fs.Bool("table", false, "also print the runs as a Markdown table")
	)
	dirs, err := parseWithArgs(fs, args)
	if err != nil {
		return err
	}
	if len(dirs) == 0 {
		fmt.Fprintln(stderr, "fedpq: plot needs at least one RUN_DIR")
		fs.Usage()
		return errUsage
	}
	if ext := strings.ToLower(filepath.Ext(*out)); ext != ".png" && ext != ".svg" {
		return fmt.Errorf("--out %q: want a .png or .svg file", *out)
	}
	runs := make([]*report.Run, len(dirs))
	for i, dir := range dirs {
		if runs[i], err = report.ReadRun(dir); err != nil {
			return err
		}
	}
	if err := report.PlotAccuracy(runs, *out, *title); err != nil {
		return err
	}
	fmt.Fprintln(stdout, *out)
	if *table {
		fmt.Fprintf(stdout, "\n%s", report.Table(runs))
	}
	return nil
}

// parseWithArgs is parse for commands that take operands: it returns
// them, and accepts flags after them too ("fedpq plot a b --table"), which
// the flag package alone would take for operands. After "--" everything
// is an operand.
func parseWithArgs(fs *flag.FlagSet, args []string) ([]string, error) {
	var operands []string
	for {
		if err := fs.Parse(args); err != nil {
			if errors.Is(err, flag.ErrHelp) {
				return nil, err
			}
			return nil, errUsage
		}
		rest := fs.Args()
		if consumed := len(args) - len(rest); consumed > 0 && args[consumed-1] == "--" {
			return append(operands, rest...), nil
		}
		if len(rest) == 0 {
			return operands, nil
		}
		operands = append(operands, rest[0])
		args = rest[1:]
	}
}
