package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/fedpq/fedpq/audit"
	"github.com/fedpq/fedpq/mech"
)

// userFlags are fedpq audit's flags of the user-level mode.
type userFlags struct {
	on                      *bool
	noise                   *string
	rounds, clients, params *int
	runs, modBits, trials   *int
}

// userOnly and parameterOnly are the flags of one mode of fedpq audit
// only; either given in the other mode is a usage error.
var (
	userOnly      = []string{"noise-multiplier", "rounds", "clients", "params", "runs", "mod-bits", "pbm-trials"}
	parameterOnly = []string{"epsilon", "samples", "observer", "center", "radius",
		"shared-bits", "gamma", "px", "input-bits", "budget-bits", "rate", "lattice", "mvu-cache"}
)

func userAuditFlags(fs *flag.FlagSet) userFlags {
	return userFlags{
		on:      fs.Bool("user-level", false, "audit DP-FedAvg's user-level epsilon over whole runs instead of one parameter's (docs/audit.md#user-level)"),
		noise:   fs.String("noise-multiplier", "1", "--user-level: noise multipliers z, comma-separated (the round's sum has noise of standard deviation z C)"),
		rounds:  fs.Int("rounds", 1, "--user-level: rounds R of one run; the canary takes part in every one"),
		clients: fs.Int("clients", 10, "--user-level: clients n of a round, the canary among them (the L2 mechanisms' noise is sized for n)"),
		params:  fs.Int("params", 64, "--user-level: parameters d of every client's update"),
		runs:    fs.Int("runs", 10000, "--user-level: runs of each world (the canary's update, and its zero update or absence); half pick the test, half are counted"),
		modBits: fs.Int("mod-bits", 16, "ddgauss, skellam: bits per coordinate of the modular sum (--user-level)"),
		trials:  fs.Int("pbm-trials", 1, "pbm: binomial trials per coordinate and client (--user-level)"),
	}
}

// checkAuditMode refuses a flag of the other mode.
func checkAuditMode(fs *flag.FlagSet, user bool) error {
	var err error
	fs.Visit(func(f *flag.Flag) {
		switch {
		case err != nil:
		case !user && slices.Contains(userOnly, f.Name):
			err = badValue{fmt.Errorf("--%s is a setting of the user-level audit: give --user-level", f.Name)}
		case user && slices.Contains(parameterOnly, f.Name):
			err = badValue{fmt.Errorf("--%s is a setting of the per-parameter audit, not of --user-level", f.Name)}
		}
	})
	return err
}

// userAuditCommon is what both modes of fedpq audit read.
type userAuditCommon struct {
	names        string
	alpha, delta float64
	seed         uint64
	workers      int
	format       string
	quiet        bool
}

// userAuditRow is one (mechanism, z) user-level audit.
type userAuditRow struct {
	Mechanism string  `json:"mechanism"`
	Noise     float64 `json:"noise_multiplier"`
	// Relation is the neighbouring relation audited and claimed:
	// add/remove (none) or zero-out (the L2 mechanisms).
	Relation string `json:"relation"`
	// Claim is the accountant's epsilon at delta for the rounds, by
	// ClaimMethod (pld or rdp).
	Claim       float64 `json:"claim"`
	ClaimMethod string  `json:"claim_method"`
	Lower       float64 `json:"lower_bound"`
	Exceeds     bool    `json:"exceeds_claim"`
	// Mu is the statistic's shift over its standard deviation: the
	// Gaussian privacy parameter the runs look like (sqrt(R)/z for none).
	Mu float64 `json:"mu"`
	// Event is the counted test: the statistic above the threshold
	// (more likely with the canary's update), or at most it (more likely
	// without).
	Event     string  `json:"event"`
	Threshold float64 `json:"threshold"`
	InCount   int     `json:"in_count"`
	OutCount  int     `json:"out_count"`
	Counted   int     `json:"counted"`
	Seconds   float64 `json:"seconds"`
}

// userAuditReport is the whole output of fedpq audit --user-level.
type userAuditReport struct {
	UserLevel bool           `json:"user_level"`
	Rounds    int            `json:"rounds"`
	Clients   int            `json:"clients"`
	Params    int            `json:"params"`
	Runs      int            `json:"runs"`
	Alpha     float64        `json:"alpha"`
	Delta     float64        `json:"delta"`
	Seed      uint64         `json:"seed"`
	Results   []userAuditRow `json:"results"`
}

// userAuditJob is one user-level audit: the mechanism run under run, its
// claim computed under claim (the same, but for a test's broken one).
type userAuditJob struct {
	name       string
	run, claim mech.Config
	row        *userAuditRow
}

func runUserAudit(ctx context.Context, uf userFlags, cm userAuditCommon, stdout, stderr io.Writer) error {
	switch {
	case *uf.rounds < 1:
		return badValue{fmt.Errorf("--rounds %d must be at least 1", *uf.rounds)}
	case *uf.clients < 1:
		return badValue{fmt.Errorf("--clients %d must be at least 1", *uf.clients)}
	case *uf.params < 1 || *uf.params > audit.UserMaxParams:
		return badValue{fmt.Errorf("--params %d must be in 1..%d", *uf.params, audit.UserMaxParams)}
	case *uf.trials < 1:
		return badValue{fmt.Errorf("--pbm-trials %d must be at least 1", *uf.trials)}
	case *uf.runs < 2:
		return badValue{fmt.Errorf("--runs %d must be at least 2 (half pick the test, half are counted)", *uf.runs)}
	case !(cm.alpha > 0 && cm.alpha < 1):
		return badValue{fmt.Errorf("--alpha %v must be in (0, 1)", cm.alpha)}
	case !(cm.delta > 0 && cm.delta < 1):
		return badValue{fmt.Errorf("--delta %v must be in (0, 1) for --user-level (the accountant's delta)", cm.delta)}
	}
	zs, err := parseFloats(*uf.noise)
	if err != nil {
		return badValue{fmt.Errorf("--noise-multiplier: %w", err)}
	}
	base := mech.DefaultConfig()
	base.ModBits, base.Trials, base.Clients = *uf.modBits, *uf.trials, *uf.clients
	known := userMechanisms(base)
	list := known
	if cm.names != "all" {
		list = strings.Split(cm.names, ",")
		for _, n := range list {
			if !slices.Contains(known, n) {
				return badValue{fmt.Errorf("--user-level: mechanism %q: want all or some of %s", n, strings.Join(known, ", "))}
			}
		}
	}
	o := audit.UserOptions{Rounds: *uf.rounds, Clients: *uf.clients, Params: *uf.params, Runs: *uf.runs,
		Alpha: cm.alpha, Delta: cm.delta, Seed: cm.seed, Workers: cm.workers}
	var jobs []userAuditJob
	for _, name := range list {
		for _, z := range zs {
			c := base
			c.Noise = z
			if _, err := mech.New(name, c); err != nil {
				return badValue{err}
			}
			rel := "zero-out"
			if name == "none" {
				rel = "add/remove"
			}
			jobs = append(jobs, userAuditJob{name, c, c, &userAuditRow{Mechanism: name, Noise: z, Relation: rel}})
		}
	}
	progress := func(string, int, int) {}
	if !cm.quiet && isTerminal(stderr) {
		progress = userAuditProgress(stderr)
		defer fmt.Fprint(stderr, "\r\033[K")
	}
	if err := runUserAuditJobs(ctx, jobs, o, progress); err != nil {
		return err
	}
	rep := userAuditReport{UserLevel: true, Rounds: o.Rounds, Clients: o.Clients, Params: o.Params, Runs: o.Runs,
		Alpha: o.Alpha, Delta: o.Delta, Seed: o.Seed}
	exceeded := false
	for _, j := range jobs {
		rep.Results = append(rep.Results, *j.row)
		exceeded = exceeded || j.row.Exceeds
	}
	if cm.format == "json" {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		err = enc.Encode(rep)
	} else {
		err = printUserAudit(stdout, rep)
	}
	if err == nil && exceeded {
		err = fmt.Errorf("a user-level lower bound exceeds the accountant's claim (EXCEEDS above)")
	}
	return err
}

// userMechanisms is none and every registered mechanism that c (with a
// noise multiplier) makes an L2 mechanism of DP-FedAvg.
func userMechanisms(c mech.Config) []string {
	c.Noise = 1
	out := []string{"none"}
	for _, n := range append(mech.Names(), mech.L2Names()...) {
		if m, err := mech.New(n, c); err == nil {
			if _, ok := m.(mech.L2); ok {
				out = append(out, n)
			}
		}
	}
	return out
}

// runUserAuditJobs runs the audits one after the other, each on o.Workers
// goroutines, and fills their rows; progress gets each run done.
func runUserAuditJobs(ctx context.Context, jobs []userAuditJob, o audit.UserOptions, progress func(string, int, int)) error {
	for _, j := range jobs {
		if err := ctx.Err(); err != nil {
			return err
		}
		start := time.Now()
		g, err := audit.UserClaim(j.name, j.claim, o)
		if err != nil {
			return fmt.Errorf("%s z %g: %w", j.name, j.row.Noise, err)
		}
		o.Progress = func(done, total int) { progress(j.name, done, total) }
		res, err := audit.UserLevel(j.name, j.run, o)
		if err != nil {
			return fmt.Errorf("%s z %g: %w", j.name, j.row.Noise, err)
		}
		r := j.row
		r.Claim, r.ClaimMethod = g.Eps, g.Method.String()
		r.Lower, r.Exceeds, r.Mu = res.Lower, res.Lower > g.Eps, res.Mu()
		r.Event = "at most threshold"
		if res.Above {
			r.Event = "above threshold"
		}
		r.Threshold, r.InCount, r.OutCount, r.Counted = res.Threshold, res.In, res.Out, res.Counted
		r.Seconds = time.Since(start).Seconds()
	}
	return nil
}

// userAuditProgress prints the runs done of the current audit.
func userAuditProgress(w io.Writer) func(string, int, int) {
	return func(name string, done, total int) {
		if done%256 == 0 || done == total {
			fmt.Fprintf(w, "\r\033[Kaudit --user-level %s: %d/%d runs", name, done, total)
		}
	}
}

func printUserAudit(w io.Writer, rep userAuditReport) error {
	plural := func(n int, s string) string {
		if n == 1 {
			return fmt.Sprintf("%d %s", n, s)
		}
		return fmt.Sprintf("%d %ss", n, s)
	}
	fmt.Fprintf(w, "user-level audit: %s of %s, %s; %d runs per world (%d counted); bounds hold with probability %g; delta %g, seed %d\n\n",
		plural(rep.Rounds, "round"), plural(rep.Clients, "client"), plural(rep.Params, "parameter"),
		rep.Runs, rep.Runs-rep.Runs/2, 1-rep.Alpha, rep.Delta, rep.Seed)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "mechanism\tz\trelation\tclaim (accountant)\tlower bound\tlower/claim\tverdict\tmu\tseconds")
	for _, r := range rep.Results {
		verdict := "within"
		if r.Exceeds {
			verdict = "EXCEEDS"
		}
		fmt.Fprintf(tw, "%s\t%g\t%s\t%.3f (%s)\t%.3f\t%.2f\t%s\t%.3f\t%.1f\n",
			r.Mechanism, r.Noise, r.Relation, r.Claim, r.ClaimMethod, r.Lower, r.Lower/r.Claim, verdict, r.Mu, r.Seconds)
	}
	return tw.Flush()
}
