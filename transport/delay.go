package transport

import (
	"fmt"
	"math"
	"strings"
	"time"

	"github.com/fedpq/fedpq/corr"
	"github.com/fedpq/fedpq/internal/spec"
)

// Delay is how long a client of an asynchronous run waits, after it
// trained, before it says Ready (fedpq client --delay): real stragglers on
// loopback, for tests and demos. It mirrors the simulation's speed models
// (fl.Speed) in seconds of the wall clock: fixed:S (S every task),
// lognormal:MEDIAN:SIGMA (each task's delay lognormal) or tail:F:X:S (the
// fraction F of the run's clients, chosen by id, X times slower: they wait
// X S, the others S).
type Delay struct {
	Kind             string // "" (none), "fixed", "lognormal" or "tail"
	Seconds          float64
	Sigma            float64 // lognormal
	Fraction, Factor float64 // tail
	spec             string
}

// ParseDelay reads a delay: "" or none, fixed:S, lognormal:MEDIAN:SIGMA or
// tail:F:X:S (fields also comma-separated).
func ParseDelay(s string) (Delay, error) {
	if s == "" || s == "none" {
		return Delay{}, nil
	}
	p := spec.Parse(s)
	p.Args = strings.ReplaceAll(p.Args, ":", ",")
	f, err := p.Numbers()
	bad := func(why string) error {
		return fmt.Errorf("delay %q: %s; want none, fixed:S, lognormal:MEDIAN_S:SIGMA or tail:F:X:S (a fraction F of the clients X times slower than S)", s, why)
	}
	if err != nil {
		return Delay{}, bad(err.Error())
	}
	d := Delay{Kind: p.Kind, spec: s}
	switch {
	case p.Kind == "fixed" && len(f) == 1:
		d.Seconds = f[0]
	case p.Kind == "lognormal" && len(f) == 2:
		d.Seconds, d.Sigma = f[0], f[1]
	case p.Kind == "tail" && len(f) == 3:
		d.Fraction, d.Factor, d.Seconds = f[0], f[1], f[2]
	default:
		return Delay{}, bad("unknown kind or wrong number of fields")
	}
	switch {
	case !(d.Seconds >= 0 && d.Seconds <= 86400):
		return Delay{}, bad("the seconds must be in [0, 86400]")
	case !(d.Sigma >= 0 && d.Sigma <= 5):
		return Delay{}, bad("the sigma must be in [0, 5]")
	case d.Kind == "tail" && !(d.Fraction >= 0 && d.Fraction <= 1 && d.Factor >= 1 && d.Factor <= 1000):
		return Delay{}, bad("the fraction must be in [0, 1] and the factor in [1, 1000]")
	}
	return d, nil
}

// String is the delay as ParseDelay reads it.
func (d Delay) String() string {
	if d.Kind == "" {
		return "none"
	}
	return d.spec
}

// wait is client k's (of n) delay for the task it trains from model
// version v, drawn from secret: the same for the same client and task, so
// that a run with delays is repeatable, if not to the millisecond.
func (d Delay) wait(secret []byte, k, n, v int) time.Duration {
	s := d.Seconds
	switch d.Kind {
	case "":
		return 0
	case "lognormal":
		s *= math.Exp(d.Sigma * corr.Derive(secret, "delay", uint64(k), uint64(v)).NormFloat64())
	case "tail":
		// The slowest clients are the first F n ids: with a partition
		// a-b/N, the fleet's share of them is plain from its range.
		if k < int(math.Round(d.Fraction*float64(n))) {
			s *= d.Factor
		}
	}
	return time.Duration(s * float64(time.Second))
}
