package fl

import (
	"cmp"
	"encoding/csv"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"slices"
	"strconv"
	"strings"

	"github.com/fedpq/fedpq/corr"
	"github.com/fedpq/fedpq/internal/spec"
)

// DefaultAsyncSpeed is the speed model of an asynchronous run that names
// none: the slowest 10% of the clients ten times slower than the rest
// (issue 33's heavy tail), with a lognormal jitter of sigma 0.25 per job.
const DefaultAsyncSpeed = "tail:0.1:10"

// defaultJitter is the sigma of a job's lognormal jitter where the speed
// model does not give one.
const defaultJitter = 0.25

// Speed is a simulation's model of its clients' speeds: how many virtual
// seconds client k takes to train and upload the job it starts in round t
// (an asynchronous run: from model version t-1). It drives a virtual clock,
// so that a run's timing is reproducible from its seed and independent of
// the machine. A job's time is the client's slowness s_k, fixed for the
// run, times a lognormal jitter of median 1 drawn for that job; a trace
// gives each job's time instead.
type Speed struct {
	// Kind is "" (no clock), "tail", "lognormal" or "trace".
	Kind string
	// tail: a Fraction of the clients (chosen from the run's secret) are
	// Factor times slower than the others.
	Fraction, Factor float64
	// lognormal: s_k is lognormal of median 1 and this sigma.
	Sigma float64
	// Jitter is the sigma of each job's lognormal factor (tail, lognormal).
	Jitter float64
	// Trace is each client's times, in seconds, by client id: the job
	// client k starts in round t takes Trace[k][(t-1) mod len(Trace[k])].
	Trace [][]float64
	spec  string
}

// ParseSpeed reads a speed model: "" or none (no clock), tail:F:X[:SIGMA]
// (a fraction F of the clients X times slower, each job's jitter
// lognormal with sigma SIGMA, default 0.25), lognormal:SIGMA[:JITTER]
// (each client's slowness lognormal of median 1, the jitter as tail's), or
// trace:FILE (ReadTrace).
func ParseSpeed(s string) (Speed, error) {
	if s == "" || s == "none" {
		return Speed{}, nil
	}
	if rest, ok := strings.CutPrefix(s, "trace:"); ok {
		tr, err := ReadTrace(rest)
		if err != nil {
			return Speed{}, err
		}
		return Speed{Kind: "trace", Trace: tr, spec: s}, nil
	}
	p := spec.Parse(s)
	p.Args = strings.ReplaceAll(p.Args, ":", ",") // tail:F:X:SIGMA, as the issue writes it, or tail:F,X,SIGMA
	f, err := p.Numbers()
	if err != nil {
		return Speed{}, fmt.Errorf("fl: speed %q: %w", s, err)
	}
	bad := func(why string) error {
		return fmt.Errorf("fl: speed %q: %s; want none, tail:F:X[:SIGMA], lognormal:SIGMA[:JITTER] or trace:FILE", s, why)
	}
	sp := Speed{Kind: p.Kind, Jitter: defaultJitter, spec: s}
	switch p.Kind {
	case "tail":
		if len(f) < 2 || len(f) > 3 {
			return Speed{}, bad("tail takes a fraction F, a factor X and optionally a jitter SIGMA")
		}
		sp.Fraction, sp.Factor = f[0], f[1]
		if len(f) == 3 {
			sp.Jitter = f[2]
		}
		if !(sp.Fraction >= 0 && sp.Fraction <= 1) || !(sp.Factor >= 1) || math.IsInf(sp.Factor, 0) {
			return Speed{}, bad("the fraction must be in [0, 1] and the factor finite and at least 1")
		}
	case "lognormal":
		if len(f) < 1 || len(f) > 2 {
			return Speed{}, bad("lognormal takes a sigma and optionally a jitter")
		}
		sp.Sigma = f[0]
		if len(f) == 2 {
			sp.Jitter = f[1]
		}
		if !(sp.Sigma >= 0 && sp.Sigma <= 5) {
			return Speed{}, bad("the sigma must be in [0, 5]")
		}
	default:
		return Speed{}, bad("unknown kind " + p.Kind)
	}
	if !(sp.Jitter >= 0 && sp.Jitter <= 5) {
		return Speed{}, bad("the jitter sigma must be in [0, 5]")
	}
	return sp, nil
}

// String is the model as ParseSpeed reads it.
func (s Speed) String() string {
	if s.Kind == "" {
		return "none"
	}
	return s.spec
}

// ReadTrace reads a trace file: CSV lines "client,seconds[,seconds...]",
// client ids from 0, each client's times in virtual seconds (positive and
// finite) for its successive rounds, repeated once exhausted; lines that
// start with # and a header line whose first field is "client" are
// skipped. Every client of a run needs a line (checked when the run
// starts).
func ReadTrace(path string) ([][]float64, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("fl: speed trace: %w", err)
	}
	defer f.Close()
	r := csv.NewReader(f)
	r.Comment, r.FieldsPerRecord = '#', -1
	var tr [][]float64
	for line := 1; ; line++ {
		rec, err := r.Read()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return nil, fmt.Errorf("fl: speed trace %s: %w", path, err)
		}
		if strings.TrimSpace(rec[0]) == "client" {
			continue
		}
		k, err := strconv.Atoi(strings.TrimSpace(rec[0]))
		if err != nil || k < 0 || k >= 1<<24 || len(rec) < 2 {
			return nil, fmt.Errorf("fl: speed trace %s, record %d: want client,seconds[,seconds...] with a client id from 0", path, line)
		}
		for len(tr) <= k {
			tr = append(tr, nil)
		}
		if tr[k] != nil {
			return nil, fmt.Errorf("fl: speed trace %s: client %d has two lines", path, k)
		}
		for _, s := range rec[1:] {
			v, err := strconv.ParseFloat(strings.TrimSpace(s), 64)
			if err != nil || !(v > 0) || math.IsInf(v, 0) {
				return nil, fmt.Errorf("fl: speed trace %s, client %d: %q is not a positive, finite number of seconds", path, k, s)
			}
			tr[k] = append(tr[k], v)
		}
	}
	return tr, nil
}

// clock is a run's speed model resolved for its clients.
type clock struct {
	speed  Speed
	slow   []float64 // each client's slowness s_k
	secret []byte
}

// newClock resolves s for n clients from the run's secret; nil for no
// clock.
func newClock(s Speed, secret []byte, n int) (*clock, error) {
	if s.Kind == "" {
		return nil, nil
	}
	c := &clock{speed: s, secret: secret, slow: make([]float64, n)}
	switch s.Kind {
	case "tail":
		perm := make([]int, n)
		corr.Shuffle(corr.Derive(secret, "speed-slow"), perm)
		slow := int(math.Round(s.Fraction * float64(n)))
		for i, k := range perm {
			c.slow[k] = 1
			if i < slow {
				c.slow[k] = s.Factor
			}
		}
	case "lognormal":
		src := corr.Derive(secret, "speed-slow")
		for k := range c.slow {
			c.slow[k] = math.Exp(s.Sigma * src.NormFloat64())
		}
	case "trace":
		if len(s.Trace) < n {
			return nil, fmt.Errorf("fl: speed %s has times for %d clients, the run has %d", s, len(s.Trace), n)
		}
		for k := range n {
			if len(s.Trace[k]) == 0 {
				return nil, fmt.Errorf("fl: speed %s has no line for client %d", s, k)
			}
		}
	}
	return c, nil
}

// time is how many virtual seconds client k takes for the job it starts
// in round t (asynchronous: from model version t-1): the same whoever
// asks, and whenever.
func (c *clock) time(k, t int) float64 {
	if c.speed.Kind == "trace" {
		tr := c.speed.Trace[k]
		return tr[(t-1)%len(tr)]
	}
	j := 1.0
	if c.speed.Jitter > 0 {
		j = math.Exp(c.speed.Jitter * corr.Derive(c.secret, "speed-job", uint64(k), uint64(t)).NormFloat64())
	}
	return c.slow[k] * j
}

// roundTime is how long synchronous round t among sel lasts on the clock:
// as long as its slowest client that uploads (a client that drops out is
// not waited for).
func (c *clock) roundTime(t int, sel []int, dropped []bool) float64 {
	longest := 0.0
	for pos, k := range sel {
		if !dropped[pos] {
			longest = max(longest, c.time(k, t))
		}
	}
	return longest
}

// fastest keeps, of round t's over-selected clients sel, the
// ClientsPerRound that finish first (ties: the lower id), in increasing
// order: the others are told to stop before they are paired or upload.
func (e *Engine) fastest(t int, sel []int) []int {
	k := e.cfg.ClientsPerRound
	if len(sel) <= k {
		return sel
	}
	// Each time is a stream derived afresh: drawn once, not per comparison.
	order := make([]int, len(sel))
	times := make([]float64, len(sel))
	for i, c := range sel {
		order[i], times[i] = i, e.clock.time(c, t)
	}
	slices.SortStableFunc(order, func(a, b int) int { return cmp.Compare(times[a], times[b]) })
	kept := make([]int, k)
	for i, pos := range order[:k] {
		kept[i] = sel[pos]
	}
	slices.Sort(kept)
	return kept
}
