// Package reproduce runs the papers' experiments that fedpq can run, and
// writes for each a Markdown table with fedpq's numbers beside the paper's.
//
// Every experiment is registered by name with the paper and the figure or
// table it reproduces. Run executes one: Options.Quick gives a small version
// that takes seconds (for CI); the full version uses the paper's sizes
// where the paper states them. Each run writes <Out>/<name>.md (the table,
// the settings, the checks of the paper's qualitative claims and the gaps)
// and <Out>/<name>.json (the raw numbers).
//
// Where a paper gives its results only as a figure and the figure's values
// are not in the text available here (../shared/papers), the table says so
// instead of reading numbers off a picture nobody here can see; the paper's
// closed forms and stated claims stand in for them. No number in a "paper"
// column is invented: each is transcribed from the text or computed from a
// formula the paper states, and the table says which.
//
// This file holds the registry; one file per paper holds its
// distributed-mean-estimation experiments (the mechanisms alone, seconds),
// and train.go runs the training experiments (grids of fedpq runs,
// minutes) that ldpfl.go, corbin_train.go and jopeq_train.go define.
package reproduce

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"runtime"
	"sort"
	"strings"
	"sync"
	"time"
)

// Options control one run of an experiment.
type Options struct {
	// Quick runs a small version (seconds on 2 cores) instead of the paper's sizes.
	Quick bool
	// Out is the directory the table (<name>.md) and the raw numbers
	// (<name>.json) are written to; "" writes nothing.
	Out string
	// DataDir is the directory of the datasets (see data.Dir); the
	// training experiments read MNIST and Fashion-MNIST from it.
	DataDir string
	// Progress, if not nil, receives a line per finished step.
	Progress io.Writer
	// Seed seeds every random stream (0 means 1): the same seed gives the
	// same numbers, whatever the number of cores.
	Seed uint64
	// MVUCache is the directory of solved MVU matrices ("" for the user
	// cache, as fedpq dme uses).
	MVUCache string
}

func (o Options) seed() uint64 {
	if o.Seed == 0 {
		return 1
	}
	return o.Seed
}

func (o Options) mode() string {
	if o.Quick {
		return "quick"
	}
	return "full"
}

func (o Options) progress(format string, args ...any) {
	if o.Progress != nil {
		fmt.Fprintf(o.Progress, format+"\n", args...)
	}
}

// Check is one qualitative claim of a paper tested on fedpq's numbers.
type Check struct {
	Claim  string `json:"claim"`
	Holds  bool   `json:"holds"`
	Detail string `json:"detail"`
}

// Result is what one run of an experiment produced.
type Result struct {
	Name       string `json:"name"`
	Paper      string `json:"paper"`
	Reproduces string `json:"reproduces"`
	Mode       string `json:"mode"`
	Seed       uint64 `json:"seed"`
	// Settings describes the run in one paragraph.
	Settings string `json:"settings"`
	// Table is the Markdown table: fedpq's numbers beside the paper's.
	Table string `json:"table"`
	// Checks are the paper's qualitative claims, tested on fedpq's numbers.
	Checks []Check `json:"checks"`
	// Notes explain every gap between the paper's setting and this one.
	Notes []string `json:"notes"`
	// Rows are the raw numbers (a slice of the experiment's row type).
	Rows        any     `json:"rows"`
	WallSeconds float64 `json:"wall_seconds"`
}

// Markdown renders the result as a section of a Markdown document.
func (r *Result) Markdown() string {
	var b strings.Builder
	fmt.Fprintf(&b, "### %s: %s, %s\n\n", r.Name, r.Paper, r.Reproduces)
	fmt.Fprintf(&b, "Mode %s, seed %d, %.1f s. %s\n\n", r.Mode, r.Seed, r.WallSeconds, r.Settings)
	b.WriteString(r.Table)
	if len(r.Checks) > 0 {
		b.WriteString("\nThe paper's claims, on fedpq's numbers:\n\n")
		for _, c := range r.Checks {
			mark := "holds"
			if !c.Holds {
				mark = "DOES NOT HOLD"
			}
			fmt.Fprintf(&b, "- %s: **%s** (%s)\n", c.Claim, mark, c.Detail)
		}
	}
	if len(r.Notes) > 0 {
		b.WriteString("\nGaps and notes:\n\n")
		for _, n := range r.Notes {
			fmt.Fprintf(&b, "- %s\n", n)
		}
	}
	return b.String()
}

// Experiment is one reproducible experiment of a paper.
type Experiment struct {
	Name string
	// Paper is the paper's short name; Reproduces the figure, table or
	// claim; What one line on what runs.
	Paper, Reproduces, What string
	// QuickTime and FullTime are the measured wall times on this
	// project's 2-core machine, as shown by fedpq reproduce --list.
	QuickTime, FullTime string
	run                 func(ctx context.Context, o Options) (*Result, error)
}

// Run runs the experiment and, when o.Out is set, writes <Out>/<name>.md
// and <Out>/<name>.json.
func (e Experiment) Run(ctx context.Context, o Options) (*Result, error) {
	start := time.Now()
	r, err := e.run(ctx, o)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", e.Name, err)
	}
	r.Name, r.Paper, r.Reproduces = e.Name, e.Paper, e.Reproduces
	r.Mode, r.Seed = o.mode(), o.seed()
	r.WallSeconds = math.Round(time.Since(start).Seconds()*10) / 10
	if o.Out == "" {
		return r, nil
	}
	if err := os.MkdirAll(o.Out, 0o755); err != nil {
		return nil, err
	}
	if err := os.WriteFile(filepath.Join(o.Out, e.Name+".md"), []byte(r.Markdown()), 0o644); err != nil {
		return nil, err
	}
	js, err := json.MarshalIndent(r, "", "  ")
	if err != nil {
		return nil, err
	}
	if err := os.WriteFile(filepath.Join(o.Out, e.Name+".json"), append(js, '\n'), 0o644); err != nil {
		return nil, err
	}
	return r, nil
}

var registry = map[string]Experiment{}

func register(e Experiment) {
	if _, dup := registry[e.Name]; dup {
		panic("reproduce: experiment registered twice: " + e.Name)
	}
	registry[e.Name] = e
}

// List returns the experiments in name order.
func List() []Experiment {
	out := make([]Experiment, 0, len(registry))
	for _, e := range registry {
		out = append(out, e)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out
}

// Names returns the experiments' names in order.
func Names() []string {
	var names []string
	for _, e := range List() {
		names = append(names, e.Name)
	}
	return names
}

// ErrUnknown is returned by Lookup's callers for a name nobody registered.
var ErrUnknown = errors.New("reproduce: unknown experiment")

// Lookup returns the named experiment.
func Lookup(name string) (Experiment, error) {
	e, ok := registry[name]
	if !ok {
		return Experiment{}, fmt.Errorf("%w %q (known: %s)", ErrUnknown, name, strings.Join(Names(), ", "))
	}
	return e, nil
}

// table builds a Markdown table.
type table struct {
	head  []string
	right []bool // right-aligned columns
	rows  [][]string
}

func newTable(cols ...string) *table {
	t := &table{}
	for _, c := range cols {
		// A leading ">" marks a right-aligned (numeric) column.
		right := strings.HasPrefix(c, ">")
		t.head = append(t.head, strings.TrimPrefix(c, ">"))
		t.right = append(t.right, right)
	}
	return t
}

func (t *table) add(cells ...string) { t.rows = append(t.rows, cells) }

func (t *table) String() string {
	var b strings.Builder
	b.WriteString("| " + strings.Join(t.head, " | ") + " |\n|")
	for _, r := range t.right {
		if r {
			b.WriteString("---:|")
		} else {
			b.WriteString("---|")
		}
	}
	b.WriteString("\n")
	for _, row := range t.rows {
		cells := make([]string, len(row))
		for i, c := range row {
			if c == "" {
				c = "-"
			}
			cells[i] = strings.ReplaceAll(c, "|", `\|`)
		}
		b.WriteString("| " + strings.Join(cells, " | ") + " |\n")
	}
	return b.String()
}

// g formats a number with 4 significant digits.
func g(v float64) string { return fmt.Sprintf("%.4g", v) }

// pm formats a measurement with its standard error.
func pm(v, se float64) string { return fmt.Sprintf("%.4g ± %.2g", v, se) }

// alpha is LDP-FL's alpha(eps) = (e^eps + 1)/(e^eps - 1).
func alpha(eps float64) float64 { return (math.Exp(eps) + 1) / math.Expm1(eps) }

// linspace returns n points from a to b inclusive.
func linspace(a, b float64, n int) []float64 {
	if n == 1 {
		return []float64{(a + b) / 2}
	}
	out := make([]float64, n)
	for i := range out {
		out[i] = a + (b-a)*float64(i)/float64(n-1)
	}
	return out
}

// parallel runs f(0..n-1) on all cores and returns the first error. Each
// call must write only its own results, so the outcome does not depend on
// the number of cores.
func parallel(ctx context.Context, n int, f func(i int) error) error {
	workers := min(runtime.GOMAXPROCS(0), n)
	jobs := make(chan int)
	errs := make([]error, workers)
	var wg sync.WaitGroup
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range jobs {
				if errs[w] == nil {
					errs[w] = f(i)
				}
			}
		}()
	}
feed:
	for i := range n {
		select {
		case jobs <- i:
		case <-ctx.Done():
			break feed
		}
	}
	close(jobs)
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return err
	}
	return ctx.Err()
}

// meanStderr returns the mean of xs and its standard error.
func meanStderr(xs []float64) (mean, se float64) {
	if len(xs) == 0 {
		return math.NaN(), math.NaN()
	}
	for _, x := range xs {
		mean += x
	}
	mean /= float64(len(xs))
	if len(xs) < 2 {
		return mean, 0
	}
	var ss float64
	for _, x := range xs {
		ss += (x - mean) * (x - mean)
	}
	return mean, math.Sqrt(ss / float64(len(xs)-1) / float64(len(xs)))
}
