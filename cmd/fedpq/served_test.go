package main

import (
	"strings"
	"testing"

	"github.com/fedpq/fedpq/experiment"
	"github.com/fedpq/fedpq/report"
)

// TestServerFlags: fedpq server --help offers no flag for the settings of
// the simulation alone, and each given as a flag is refused with why, not
// taken silently; the run settings a server applies are still offered.
func TestServerFlags(t *testing.T) {
	_, _, help := runCLI("server", "-h")
	for key := range notServed {
		name := strings.ReplaceAll(key, "_", "-")
		if offers(help, name) {
			t.Errorf("fedpq server --help offers -%s", name)
		}
		for _, arg := range [][]string{{"--" + name, "1"}, {"-" + name + "=1"}} {
			code, _, stderr := runCLI(append([]string{"server"}, arg...)...)
			if code != 2 || !strings.Contains(stderr, "--"+name+": not a server setting: it "+notServed[key]) {
				t.Errorf("fedpq server %v: exit %d: %s", arg, code, stderr)
			}
		}
	}
	for _, name := range []string{"listen", "tls-cert", "grace", "max-wait", "mechanism", "epsilon", "secure-aggregation", "test-data", "out"} {
		if !offers(help, name) {
			t.Errorf("fedpq server --help lacks -%s", name)
		}
	}
}

// offers reports whether a --help lists the flag -name (a bool flag's line
// ends at its name).
func offers(help, name string) bool {
	return strings.Contains(help, "\n  -"+name+" ") || strings.Contains(help, "\n  -"+name+"\n")
}

// TestAsyncFlags: fedpq server offers the asynchronous run's settings and
// fedpq client its --delay, which it checks before connecting.
func TestAsyncFlags(t *testing.T) {
	_, _, help := runCLI("server", "-h")
	for _, name := range []string{"mode", "concurrency", "buffer", "staleness", "max-staleness"} {
		if !offers(help, name) {
			t.Errorf("fedpq server --help lacks -%s", name)
		}
	}
	_, _, help = runCLI("client", "-h")
	if !offers(help, "delay") {
		t.Error("fedpq client --help lacks -delay")
	}
	code, _, stderr := runCLI("client", "--partition", "0/2", "--delay", "tail:2:10:1")
	if code != 2 || !strings.Contains(stderr, `delay "tail:2:10:1": the fraction must be in [0, 1]`) {
		t.Errorf("fedpq client --delay tail:2:10:1: exit %d: %s", code, stderr)
	}
}

// TestServerOverSelect: fedpq server offers --over-select (a deployed
// server keeps the first of a round's sample to finish), needs no speed
// model for it, and refuses it, with why, where it cannot hold: without
// clients_per_round, with poisson sampling, with DP-FedAvg, in mode async;
// fedpq run still needs a speed model to rank its clients by.
func TestServerOverSelect(t *testing.T) {
	_, _, help := runCLI("server", "-h")
	if !offers(help, "over-select") {
		t.Error("fedpq server --help lacks -over-select")
	}
	dir := t.TempDir()
	for _, c := range []struct {
		args []string
		code int
		want string
	}{
		{[]string{"server", "--over-select", "0.5"}, 2, "set clients_per_round"},
		{[]string{"server", "--over-select", "0.5", "--clients-per-round", "3", "--sampling", "poisson"}, 2, "does not go with poisson sampling"},
		{[]string{"server", "--over-select", "0.5", "--mode", "async", "--concurrency", "2", "--buffer", "1"}, 2, "over_select is for mode sync"},
		{[]string{"server", "--over-select", "0.5", "--clients-per-round", "3", "--mechanism", "none", "--weighting", "mean", "--clip", "1",
			"--token", "t", "--listen", "127.0.0.1:0"}, 1, "DP-FedAvg's amplification by sampling would not hold"},
		{[]string{"run", "--over-select", "0.5", "--clients-per-round", "3", "--rounds", "1"}, 1, "in a simulation needs a speed model"},
	} {
		code, _, stderr := runCLI(append(c.args, "--out", dir)...)
		if code != c.code || !strings.Contains(stderr, c.want) {
			t.Errorf("fedpq %v: exit %d, want %d and an error saying %q: %s", c.args, code, c.code, c.want, stderr)
		}
	}
}

// TestSummaryOverSelectCut: a run's summary says how many over-selected
// clients were cut, and only where some were.
func TestSummaryOverSelectCut(t *testing.T) {
	c := experiment.Default()
	c.ClientsPerRound, c.OverSelect = 4, 0.5
	for _, cut := range []int64{0, 10} {
		var b strings.Builder
		if err := printSummary(&b, "text", c, &report.Summary{Cut: cut}); err != nil {
			t.Fatal(err)
		}
		want := "over-selection: 10 clients given the model and cut, not among a round's first 4 to finish"
		if got := strings.Contains(b.String(), want); got != (cut > 0) {
			t.Errorf("cut %d: the summary says %q: has %q = %v, want %v", cut, b.String(), want, got, cut > 0)
		}
	}
}
