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
		{[]string{"client", "--data", dir, "--clients", "0-2"}, "--clients 0-2: " + dir + " has no client-2 (2 clients' entries)"},
		{[]string{"client", "--data", dir, "--clients", "1-3", "--block", "1", "--block-size", "2"}, "--clients 3-3: " + dir + " has no client-3"},
		{[]string{"client", "--data", dir, "--clients", "0-1", "--seed", "x"}, `--seed "x"`},
	} {
		code, _, stderr := runCLI(tc.args...)
		if code != 2 || !strings.Contains(stderr, tc.says) {
			t.Errorf("%v: exit %d, want 2 saying %q; stderr:\n%s", tc.args, code, tc.says, stderr)
		}
	}
}

// TestFleetDataPaths: a fleet finds its own clients' entries in a directory
// that holds only them (a Kubernetes pod's directory of its block), with
// or without an extension; a client of its range that is missing, or named
// twice, is an error saying which.
func TestFleetDataPaths(t *testing.T) {
	dir := t.TempDir()
	for _, name := range []string{"client-3.csv", "client-4", "test.csv", "README.md"} {
		if err := os.WriteFile(filepath.Join(dir, name), nil, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	paths, err := fleetDataPaths(dir, []int{3, 4})
	if err != nil {
		t.Fatal(err)
	}
	if paths[3] != filepath.Join(dir, "client-3.csv") || paths[4] != filepath.Join(dir, "client-4") || len(paths) != 2 {
		t.Errorf("clients 3-4: %v", paths)
	}
	if _, err := fleetDataPaths(dir, []int{2, 3}); err == nil || !strings.Contains(err.Error(), "has no client-2 (2 clients' entries)") {
		t.Errorf("clients 2-3: %v, want client-2 missing", err)
	}
	if err := os.WriteFile(filepath.Join(dir, "client-3.npz"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := fleetDataPaths(dir, []int{3, 4}); err == nil || !strings.Contains(err.Error(), "client 3 is both client-3.csv and client-3.npz") {
		t.Errorf("client 3 twice: %v", err)
	}
}
