package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"text/tabwriter"
	"time"

	"github.com/fedpq/fedpq/audit"
	"github.com/fedpq/fedpq/mech"
)

func init() {
	commands["audit"] = command{
		summary: "black-box lower bound on each mechanism's eps from its outputs, against its claim",
		run:     runAudit,
	}
}

const auditDescription = `Tests each mechanism's privacy claim from its outputs alone (docs/audit.md).
For pairs of neighbouring inputs of one parameter (the range's ends, interior
pairs, and points and cell boundaries of the mechanisms' grids) it encodes
each input --samples times, decodes every message as the server does, and
turns the counts of output events into a lower bound on epsilon that holds
with probability 1-alpha (Clopper-Pearson intervals, union bound over every
event and pair). A mechanism registered with mech.Register is audited by
name, with no other change.

Observers: message is one client's message (an eavesdropper; the registry's
LDP claim is against it); pair is the server's view of both messages of a
paired mechanism (corbin, augcorbin, coq), with the partner's input at the
center, where docs/privacy.md shows there is no epsilon: its bound grows with
--samples. A message bound above its claim is reported as EXCEEDS and the
command exits with status 1.

With --user-level it audits DP-FedAvg's user-level guarantee instead (docs/
audit.md#user-level): a canary client whose clipped update has the largest
norm, over --rounds rounds of --clients clients, against its zero update (the
L2 mechanisms ddgauss, skellam, pbm, whose clients add the noise under secure
aggregation) or its absence (none: the server adds Gaussian noise to the
sum). The observer sees each round's decoded sum; the test is the projection
of their total on the canary's direction, its threshold chosen on half of
--runs runs per world and counted on the other half. The lower bound (a
Clopper-Pearson bound, probability 1-alpha) is printed beside the
accountant's epsilon for the same rounds at --delta; a bound above it is
EXCEEDS, and the command exits with status 1.

Examples:
  fedpq audit                                     # every mechanism at eps 1 and 4
  fedpq audit --mechanism ldpq,corbin --epsilon 0.5,2 --samples 50000
  fedpq audit --mechanism corbin --observer pair --format json
  fedpq audit --user-level                        # none, ddgauss, pbm, skellam at z = 1
  fedpq audit --user-level --mechanism none,pbm --noise-multiplier 0.5,1 --rounds 4 --runs 100000
`

// auditRow is one (mechanism, eps, observer) audit.
type auditRow struct {
	Mechanism string  `json:"mechanism"`
	Epsilon   float64 `json:"epsilon"`
	Observer  string  `json:"observer"`
	// Claim is the registry's per-message eps (null: not LDP). It is the
	// claim against an observer of one message; no mechanism claims it
	// against the server's view of a pair.
	Claim   *float64 `json:"claim"`
	Lower   float64  `json:"lower_bound"`
	Exceeds bool     `json:"exceeds_claim"`
	W0      float64  `json:"w0"`
	W1      float64  `json:"w1"`
	Inputs  string   `json:"inputs"`
	Events  int      `json:"events"`
	Pairs   int      `json:"input_pairs"`
	Samples int      `json:"samples"`
	Views   int      `json:"views"`
	Seconds float64  `json:"seconds"`
}

// auditReport is the whole output of fedpq audit.
type auditReport struct {
	Samples int        `json:"samples"`
	Alpha   float64    `json:"alpha"`
	Delta   float64    `json:"delta"`
	Seed    uint64     `json:"seed"`
	Center  float64    `json:"center"`
	Radius  float64    `json:"radius"`
	Results []auditRow `json:"results"`
}

// auditJob is one audit to run; its row is filled in place.
type auditJob struct {
	m   mech.Mechanism
	o   audit.Observer
	row *auditRow
}

func runAudit(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlags("audit", "[flags]", auditDescription, stderr)
	def := mech.DefaultConfig()
	var (
		names    = fs.String("mechanism", "all", "mechanisms to audit, comma-separated, or all (see fedpq mechanisms; --user-level: none, ddgauss, pbm, skellam)")
		epsList  = fs.String("epsilon", "1,4", "privacy budgets per parameter to audit, comma-separated")
		samples  = fs.Int("samples", 10000, "views per input of each pair of inputs (as many again for the pilot that picks the events)")
		alpha    = fs.Float64("alpha", 0.05, "error of the audit: every bound holds with probability 1-alpha")
		observer = fs.String("observer", "all", "message (one client's message), pair (the server's view of a paired mechanism's two messages), or all")
		center   = fs.Float64("center", 0, "clipping range center c")
		radius   = fs.Float64("radius", 1, "clipping range radius r")
		seed     = fs.Uint64("seed", 1, "seed of every coin of the audit (same seed, same bounds)")
		workers  = fs.Int("workers", 0, "audits run in parallel (0: all cores); --user-level: runs of one audit at once")
		format   = fs.String("format", "table", "output: table or json")
		quiet    = fs.Bool("quiet", false, "no progress on stderr")
		c        = def
	)
	fs.Float64Var(&c.Delta, "delta", def.Delta, "the delta of (eps, delta) audited, and gaussian's delta")
	mechConfigFlags(fs, &c)
	uf := userAuditFlags(fs)
	if err := parse(fs, args); err != nil {
		return err
	}
	if *format != "table" && *format != "json" {
		return badValue{fmt.Errorf("--format %q: want table or json", *format)}
	}
	if err := checkAuditMode(fs, *uf.on); err != nil {
		return err
	}
	if *uf.on {
		return runUserAudit(ctx, uf, userAuditCommon{names: *names, alpha: *alpha, delta: c.Delta, seed: *seed,
			workers: *workers, format: *format, quiet: *quiet}, stdout, stderr)
	}
	var observers []audit.Observer
	switch *observer {
	case "message":
		observers = []audit.Observer{audit.Message}
	case "pair":
		observers = []audit.Observer{audit.Pair}
	case "all":
		observers = []audit.Observer{audit.Message, audit.Pair}
	default:
		return badValue{fmt.Errorf("--observer %q: want message, pair or all", *observer)}
	}
	if *samples < 1 {
		return badValue{fmt.Errorf("--samples %d must be at least 1", *samples)}
	}
	if !(*alpha > 0 && *alpha < 1) {
		return badValue{fmt.Errorf("--alpha %v must be in (0, 1)", *alpha)}
	}
	if !(c.Delta >= 0 && c.Delta < 1) {
		return badValue{fmt.Errorf("--delta %v must be in [0, 1)", c.Delta)}
	}
	rg := mech.Range{Center: *center, Radius: *radius}
	if err := rg.Validate(); err != nil {
		return badValue{err}
	}
	epsilons, err := parseFloats(*epsList)
	if err != nil {
		return badValue{fmt.Errorf("--epsilon: %w", err)}
	}
	list := mech.Names()
	if *names != "all" {
		list = strings.Split(*names, ",")
		for _, n := range list {
			if _, ok := mech.Lookup(n); !ok {
				return badValue{fmt.Errorf("unknown mechanism %q; known: all, %s", n, strings.Join(mech.Names(), ", "))}
			}
		}
	}
	ins := audit.Neighbours(rg, audit.ConfigGrids(c)...)
	var jobs []auditJob
	for _, name := range list {
		info, _ := mech.Lookup(name)
		for _, eps := range epsilons {
			cfg := c
			cfg.Epsilon = eps
			m, err := mech.New(name, cfg)
			if err != nil {
				return badValue{err}
			}
			for _, o := range observers {
				if !o.Applies(m) {
					continue // pair: only paired clients share bits
				}
				row := &auditRow{Mechanism: name, Epsilon: eps, Observer: o.String(), Samples: *samples, Pairs: len(ins)}
				if info.LDP {
					row.Claim = &eps
				}
				jobs = append(jobs, auditJob{m, o, row})
			}
		}
	}
	if len(jobs) == 0 {
		return badValue{fmt.Errorf("--observer pair: none of %s is paired (the paired mechanisms say \"paired\" in fedpq mechanisms)", *names)}
	}
	progress := func(int) {}
	if !*quiet && isTerminal(stderr) {
		progress = auditProgress(stderr, len(jobs)*len(ins))
		defer fmt.Fprint(stderr, "\r\033[K")
	}
	opts := audit.Options{Samples: *samples, Alpha: *alpha, Delta: c.Delta, Seed: *seed}
	if err := runAuditJobs(ctx, jobs, rg, ins, opts, *workers, progress); err != nil {
		return err
	}
	rep := auditReport{Samples: *samples, Alpha: *alpha, Delta: c.Delta, Seed: *seed, Center: *center, Radius: *radius}
	exceeded := false
	for _, j := range jobs {
		rep.Results = append(rep.Results, *j.row)
		exceeded = exceeded || j.row.Exceeds
	}
	if *format == "json" {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		err = enc.Encode(rep)
	} else {
		err = printAudit(stdout, rep)
	}
	if err == nil && exceeded {
		err = fmt.Errorf("a message's lower bound exceeds its mechanism's claim (EXCEEDS above)")
	}
	return err
}

// runAuditJobs runs the audits on workers goroutines; progress gets each
// pair of inputs done (one at a time).
func runAuditJobs(ctx context.Context, jobs []auditJob, rg mech.Range, ins []audit.Inputs, opts audit.Options, workers int, progress func(int)) error {
	if workers <= 0 {
		workers = runtime.GOMAXPROCS(0)
	}
	var (
		next, done atomic.Int64
		mu         sync.Mutex
		first      error
		wg         sync.WaitGroup
	)
	for range min(workers, len(jobs)) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				i := int(next.Add(1) - 1)
				if i >= len(jobs) || ctx.Err() != nil {
					return
				}
				j := jobs[i]
				o := opts
				o.Observer = j.o
				o.Progress = func(int) {
					n := done.Add(1)
					mu.Lock()
					progress(int(n))
					mu.Unlock()
				}
				start := time.Now()
				res, err := audit.Audit(j.m, rg, ins, o)
				if err != nil {
					mu.Lock()
					if first == nil {
						first = fmt.Errorf("%s eps %g %v: %w", j.row.Mechanism, j.row.Epsilon, j.o, err)
					}
					mu.Unlock()
					next.Store(int64(len(jobs)))
					return
				}
				r := j.row
				r.Seconds = time.Since(start).Seconds()
				r.Lower, r.W0, r.W1, r.Inputs, r.Events = res.Lower, res.Inputs.W0, res.Inputs.W1, res.Inputs.Why, res.Events
				r.Views = 4 * len(ins) * opts.Samples // pilot and counted, two inputs
				r.Exceeds = j.o == audit.Message && r.Claim != nil && r.Lower > *r.Claim
			}
		}()
	}
	wg.Wait()
	if first != nil {
		return first
	}
	return ctx.Err()
}

// auditProgress prints the pairs done of total and an ETA from the rate
// so far.
func auditProgress(w io.Writer, total int) func(int) {
	start := time.Now()
	return func(done int) {
		el := time.Since(start)
		eta := time.Duration(float64(el) / float64(done) * float64(total-done)).Round(time.Second)
		fmt.Fprintf(w, "\r\033[Kaudit: %d/%d input pairs, %s elapsed, ETA %s", done, total, el.Round(time.Second), eta)
	}
}

func printAudit(w io.Writer, rep auditReport) error {
	fmt.Fprintf(w, "audit: %d views per input, %d input pairs, alpha %g, delta %g, range %g±%g, seed %d\n\n",
		rep.Samples, rep.Results[0].Pairs, rep.Alpha, rep.Delta, rep.Center, rep.Radius, rep.Seed)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "mechanism\teps\tobserver\tclaim\tlower bound\tverdict\tinputs\tseconds")
	for _, r := range rep.Results {
		claim, verdict := "none", "no claim"
		if r.Claim != nil {
			claim = strconv.FormatFloat(*r.Claim, 'g', -1, 64)
			switch {
			case r.Exceeds:
				verdict = "EXCEEDS"
			case r.Observer == audit.Pair.String() && r.Lower > *r.Claim:
				verdict = "above (no server claim)"
			default:
				verdict = "within"
			}
		}
		fmt.Fprintf(tw, "%s\t%g\t%s\t%s\t%.3f\t%s\t%g, %g (%s)\t%.1f\n",
			r.Mechanism, r.Epsilon, r.Observer, claim, r.Lower, verdict, r.W0, r.W1, r.Inputs, r.Seconds)
	}
	return tw.Flush()
}

// parseFloats parses a comma-separated list of positive finite numbers.
func parseFloats(s string) ([]float64, error) {
	var out []float64
	for _, f := range strings.Split(s, ",") {
		v, err := strconv.ParseFloat(strings.TrimSpace(f), 64)
		if err != nil || !(v > 0) || v > 1e300 {
			return nil, fmt.Errorf("%q is not a positive number", f)
		}
		if !slices.Contains(out, v) {
			out = append(out, v)
		}
	}
	return out, nil
}

// mechConfigFlags defines the mechanisms' settings (all but epsilon and
// delta) on fs, as fedpq dme and fedpq audit take them.
func mechConfigFlags(fs *flag.FlagSet, c *mech.Config) {
	def := mech.DefaultConfig()
	fs.IntVar(&c.SharedBits, "shared-bits", def.SharedBits, "corbin, augcorbin, coq: shared random bits per parameter (d)")
	fs.Float64Var(&c.Gamma, "gamma", def.Gamma, "augcorbin: fraction of clients that quantize alone")
	fs.Float64Var(&c.Px, "px", def.Px, "coq: bias of the shared coins")
	fs.IntVar(&c.InputBits, "input-bits", def.InputBits, "mvu: input resolution in bits")
	fs.IntVar(&c.BudgetBits, "budget-bits", def.BudgetBits, "mvu: bits per parameter sent")
	fs.IntVar(&c.Rate, "rate", def.Rate, "sdq, jopeq, laplace+sdq: bits per parameter")
	fs.IntVar(&c.Lattice, "lattice", def.Lattice, "sdq, jopeq, laplace+sdq: 1 scalar, 2 hexagonal")
	fs.StringVar(&c.CacheDir, "mvu-cache", def.CacheDir, "mvu: directory of solved matrices (default: the user cache)")
}
