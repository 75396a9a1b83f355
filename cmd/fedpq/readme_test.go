package main

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// readmeBlock is the fenced block of README.md that follows the first line
// containing after.
func readmeBlock(t *testing.T, after string) []string {
	t.Helper()
	b, err := os.ReadFile("../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	s := string(b)
	i := strings.Index(s, after)
	if i < 0 {
		t.Fatalf("README.md has no %q", after)
	}
	s = s[i:]
	start := strings.Index(s, "```\n")
	end := strings.Index(s[start+4:], "```")
	if start < 0 || end < 0 {
		t.Fatalf("README.md has no block after %q", after)
	}
	return strings.Split(strings.TrimSuffix(s[start+4:start+4+end], "\n"), "\n")
}

// seconds and the run directory change from run to run.
var volatile = regexp.MustCompile(`[0-9.]+ s; results in .*$`)

// TestReadme: the README's commands print what the README shows (the time
// and the run directory aside): the quick start's summary, and the server's
// line of an ldpq run under secure aggregation. The README cannot drift.
func TestReadme(t *testing.T) {
	want := readmeBlock(t, "It prints a line per round, then:")
	code, out, errOut := runCLI("run", "--out", filepath.Join(t.TempDir(), "quickstart"), "--quiet")
	if code != 0 {
		t.Fatalf("fedpq run: exit %d: %s", code, errOut)
	}
	got := strings.Split(strings.TrimSuffix(out, "\n"), "\n")
	if len(got) != len(want) {
		t.Fatalf("fedpq run printed %d lines, the README shows %d:\n%s", len(got), len(want), out)
	}
	for i := range want {
		if volatile.ReplaceAllString(got[i], "") != volatile.ReplaceAllString(want[i], "") {
			t.Errorf("line %d:\nprinted %s\nREADME  %s", i+1, got[i], want[i])
		}
	}

	line := readmeBlock(t, "fedpq run --mechanism ldpq --weighting mean --secure-aggregation\n```")[0]
	code, out, errOut = runCLI("run", "--mechanism", "ldpq", "--weighting", "mean", "--secure-aggregation", "--out", filepath.Join(t.TempDir(), "ldpq"), "--quiet")
	if code != 0 {
		t.Fatalf("fedpq run --secure-aggregation: exit %d: %s", code, errOut)
	}
	if !strings.Contains(out, line+"\n") {
		t.Errorf("the README's line\n%s\nis not in the output:\n%s", line, out)
	}
}
