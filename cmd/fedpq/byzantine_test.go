package main

import (
	"strings"
	"testing"
)

// TestByzantineFlags: a bad attack given to fedpq client, and settings of
// fedpq run that cannot be carried out, are refused before anything runs,
// with what is wanted.
func TestByzantineFlags(t *testing.T) {
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"client", "--partition", "0/2", "--byzantine", "flip"}, `fl: byzantine "flip": want sign-flip, scale:S, label-flip, constant or extreme (empty: none)`},
		{[]string{"run", "--byzantine", "scale:x"}, `fl: byzantine "scale:x": want scale:S with S a finite number other than 0, such as scale:100`},
		{[]string{"run", "--byzantine", "sign-flip", "--byzantine-fraction", "0.5"}, "fl: byzantine fraction 0.5 must be in [0, 0.5)"},
		{[]string{"run", "--byzantine-fraction", "0.2"}, "fl: byzantine fraction 0.2 without an attack"},
		{[]string{"run", "--byzantine", "extreme", "--byzantine-fraction", "0.2", "--mechanism", "laplace"}, "fl: byzantine extreme: mech: laplace has no extreme message"},
	} {
		code, _, stderr := runCLI(c.args...)
		if code == 0 || !strings.Contains(stderr, c.want) {
			t.Errorf("fedpq %s: exit %d: %s\nwant %s", strings.Join(c.args, " "), code, stderr, c.want)
		}
	}
	// A run under attack says so.
	code, stdout, stderr := runCLI("run", "--rounds", "1", "--clients", "10", "--byzantine", "label-flip", "--byzantine-fraction", "0.2", "--out", t.TempDir(), "--quiet")
	if want := "  Byzantine: 2 of 10 clients attack (label-flip; docs/security.md)\n"; code != 0 || !strings.Contains(stdout, want) {
		t.Errorf("exit %d, stdout lacks %q:\n%s%s", code, want, stdout, stderr)
	}
}
