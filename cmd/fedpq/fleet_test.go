package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestFleetFlags: a fleet's range of clients is checked before anything
// connects: a range that runs backwards or past the run's clients or the
// directory's, --clients without a directory, each a usage error that
// says what is wrong.
func TestFleetFlags(t *testing.T) {
	dir := t.TempDir()
	for _, name := range []string{"client-0.csv", "client-1.csv", "test.csv"} {
		if err := os.WriteFile(filepath.Join(dir, name), nil, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	for _, tc := range []struct {
		args []string
		says string
	}{
		{[]string{"client", "--partition", "5-3/8"}, `--partition "5-3": want A-B with 0 <= A <= B`},
		{[]string{"client", "--partition", "0-8/8"}, `--partition "0-8/8": clients up to 8 of 8 (they are numbered 0 to 7)`},
		{[]string{"client", "--partition", "0-x/8"}, `--partition "0-x"`},
		{[]string{"client", "--clients", "0-3"}, "--clients A-B goes with --data DIR"},
		{[]string{"client", "--data", dir, "--clients", "0-2"}, "--clients 0-2: " + dir + " holds clients 0 to 1"},
		{[]string{"client", "--data", dir, "--clients", "0-1", "--seed", "x"}, `--seed "x"`},
	} {
		code, _, stderr := runCLI(tc.args...)
		if code != 2 || !strings.Contains(stderr, tc.says) {
			t.Errorf("%v: exit %d, want 2 saying %q; stderr:\n%s", tc.args, code, tc.says, stderr)
		}
	}
}
