package main

import (
	"image/png"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/fedpq/fedpq/report"
)

// writeTestRun writes a finished run of 10 rounds, evaluated every other
// round, into dir.
func writeTestRun(t *testing.T, dir, name string, acc float64) {
	t.Helper()
	w, err := report.Create(dir)
	if err != nil {
		t.Fatal(err)
	}
	for i := 1; i <= 10; i++ {
		r := report.Round{Round: i, Clients: 5, UplinkBitsPerParam: 1, Epsilon: 1, EpsilonSpent: float64(i), Seconds: float64(i)}
		if i%2 == 0 {
			a := acc + 0.02*float64(i)
			r.Accuracy = &a
		}
		if err := w.Round(r); err != nil {
			t.Fatal(err)
		}
	}
	err = w.Close(report.Summary{Name: name, Mechanism: "ldpq", Dataset: "synthetic", Model: "logreg",
		Rounds: 10, FinalAccuracy: acc + 0.2, BestAccuracy: acc + 0.2, BestRound: 10, UplinkBitsPerParam: 1, EpsilonSpent: 10, Seconds: 10})
	if err != nil {
		t.Fatal(err)
	}
}

func TestPlotCommand(t *testing.T) {
	tmp := t.TempDir()
	a, b := filepath.Join(tmp, "a"), filepath.Join(tmp, "b")
	writeTestRun(t, a, "eps-one", 0.5)
	writeTestRun(t, b, "eps-two", 0.6)
	out := filepath.Join(tmp, "cmp.png")
	// Flags after the run directories are flags too.
	code, stdout, stderr := runCLI("plot", "--out", out, a, b, "--table", "--title", "two runs")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	if !strings.HasPrefix(stdout, out+"\n") {
		t.Errorf("stdout does not start with the path written:\n%s", stdout)
	}
	for _, want := range []string{"| run | mechanism |", "| eps-one | ldpq | synthetic | logreg | 10 | 0.7000 | 0.7000 (round 10) | 1 | 10 | 10.0 |", "| eps-two |"} {
		if !strings.Contains(stdout, want) {
			t.Errorf("table lacks %q:\n%s", want, stdout)
		}
	}
	f, err := os.Open(out)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	cfg, err := png.DecodeConfig(f)
	if err != nil || cfg.Width < 500 || cfg.Height < 300 {
		t.Errorf("%s: %+v, %v", out, cfg, err)
	}

	svg := filepath.Join(tmp, "cmp.svg")
	if code, stdout, stderr := runCLI("plot", "--out", svg, a, b); code != 0 || strings.Contains(stdout, "|") {
		t.Fatalf("svg without --table: exit %d, stdout %q, stderr %s", code, stdout, stderr)
	}
	s, err := os.ReadFile(svg)
	if err != nil || !strings.Contains(string(s), ">eps-one</text>") || !strings.Contains(string(s), ">eps-two</text>") {
		t.Errorf("%s lacks the runs' labels (%v)", svg, err)
	}
}

// TestPlotDefaultOut: without --out the figure is ./accuracy-compare.png.
func TestPlotDefaultOut(t *testing.T) {
	run := filepath.Join(t.TempDir(), "r")
	writeTestRun(t, run, "r", 0.3)
	t.Chdir(t.TempDir())
	if code, stdout, stderr := runCLI("plot", run); code != 0 || stdout != "accuracy-compare.png\n" {
		t.Fatalf("exit %d, stdout %q: %s", code, stdout, stderr)
	}
	if _, err := os.Stat("accuracy-compare.png"); err != nil {
		t.Error(err)
	}
}

func TestPlotErrors(t *testing.T) {
	tmp := t.TempDir()
	good := filepath.Join(tmp, "good")
	writeTestRun(t, good, "good", 0.5)
	bad := filepath.Join(tmp, "bad")
	if err := os.MkdirAll(bad, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(bad, report.MetricsFile), []byte(`{"round":1}`+"\n{oops\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	empty := t.TempDir()
	out := filepath.Join(tmp, "x.png")
	for _, tc := range []struct {
		args []string
		code int
		want string // in stderr
	}{
		{[]string{"plot"}, 2, "at least one RUN_DIR"},
		{[]string{"plot", "--nonesuch", good}, 2, "nonesuch"},
		{[]string{"plot", "--out"}, 2, "flag needs an argument"},
		{[]string{"plot", "-h"}, 0, "Usage: fedpq plot"},
		{[]string{"plot", "--out", filepath.Join(tmp, "x.pdf"), good}, 1, ".png or .svg"},
		{[]string{"plot", "--out", out, good, empty}, 1, "not a run directory"},
		{[]string{"plot", "--out", out, good, bad}, 1, filepath.Join(bad, report.MetricsFile) + ":2:"},
	} {
		code, _, stderr := runCLI(tc.args...)
		if code != tc.code || !strings.Contains(stderr, tc.want) {
			t.Errorf("%v: exit %d (want %d), stderr lacks %q:\n%s", tc.args, code, tc.code, tc.want, stderr)
		}
	}
	if _, err := os.Stat(out); !os.IsNotExist(err) {
		t.Errorf("a failed plot wrote %s", out)
	}
}

// TestPlotDoubleDash: after "--" a name that looks like a flag is a run
// directory.
func TestPlotDoubleDash(t *testing.T) {
	tmp := t.TempDir()
	t.Chdir(tmp)
	writeTestRun(t, "-odd", "odd", 0.5)
	if code, _, stderr := runCLI("plot", "--out", "o.svg", "--", "-odd"); code != 0 {
		t.Fatalf("exit %d: %s", code, stderr)
	}
}
