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
