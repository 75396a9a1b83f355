package main

import (
	"strings"
	"testing"
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
