package report

import (
	"encoding/json"
	"math"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
)

func ptr(v float64) *float64 { return &v }

// sampleRounds returns n rounds evaluated every `every` rounds, with
// accuracy rising from base.
func sampleRounds(n, every int, base float64) []Round {
	rs := make([]Round, n)
	for i := range rs {
		rs[i] = Round{
			Round: i + 1, TrainLoss: 2 / float64(i+1), Clients: 10, Dropped: i % 2,
			UplinkBits: 10 * 1000, UplinkBitsPerParam: 1, SetupBytes: 64 * 5,
			Epsilon: 0.5, EpsilonSpent: 0.5 * float64(i+1), Seconds: 0.25 * float64(i+1),
		}
		if (i+1)%every == 0 || i == n-1 {
			rs[i].Accuracy = ptr(base + 0.3*(1-math.Exp(-float64(i)/5)))
			rs[i].Loss = ptr(1 / float64(i+1))
		}
	}
	rs[n/2].Restored = true
	return rs
}

func sampleSummary(name string, rs []Round) Summary {
	return Summary{
		Name: name, Mechanism: "corbin", Dataset: "synthetic", Model: "logreg",
		Rounds: len(rs), FinalAccuracy: *rs[len(rs)-1].Accuracy, BestAccuracy: *rs[len(rs)-1].Accuracy, BestRound: len(rs),
		UplinkBitsTotal: 10000 * int64(len(rs)), UplinkBitsPerParam: 1, EpsilonPerRound: 0.5, EpsilonSpent: 0.5 * float64(len(rs)),
		Seconds: 0.25 * float64(len(rs)), Seed: 7,
	}
}

func writeRun(t *testing.T, dir, name string, rs []Round) Summary {
	t.Helper()
	w, err := Create(dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range rs {
		if err := w.Round(r); err != nil {
			t.Fatal(err)
		}
	}
	s := sampleSummary(name, rs)
	if err := w.Close(s); err != nil {
		t.Fatal(err)
	}
	return s
}

func TestRoundTrip(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "nested", "run1")
	rs := sampleRounds(12, 3, 0.5)
	s := writeRun(t, dir, "run1", rs)
	run, err := ReadRun(dir)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(run.Rounds, rs) {
		t.Errorf("rounds read back differ:\n got %+v\nwant %+v", run.Rounds, rs)
	}
	if run.Summary == nil || !reflect.DeepEqual(*run.Summary, s) {
		t.Errorf("summary read back %+v, want %+v", run.Summary, s)
	}
	if run.Name() != "run1" || run.Dir != dir {
		t.Errorf("Name %q Dir %q", run.Name(), run.Dir)
	}
	for _, f := range []string{PlotPNGFile, PlotSVGFile} {
		if st, err := os.Stat(filepath.Join(dir, f)); err != nil || st.Size() < 1000 {
			t.Errorf("%s: %v (size %v)", f, err, st)
		}
	}
	// Rounds without evaluation carry no accuracy key at all, so readers
	// in other languages see "not evaluated", not zero.
	b, _ := os.ReadFile(filepath.Join(dir, MetricsFile))
	first := strings.SplitN(string(b), "\n", 2)[0]
	if strings.Contains(first, "accuracy") || strings.Contains(first, `"loss"`) || strings.Contains(first, "restored") {
		t.Errorf("unevaluated round has accuracy, loss or restored: %s", first)
	}
	var m map[string]any
	if err := json.Unmarshal([]byte(first), &m); err != nil || m["uplink_bits_per_param"] != 1.0 || m["epsilon_spent"] != 0.5 {
		t.Errorf("first line %s: %v", first, err)
	}
}

// TestFlushedPerRound reads the directory while the Writer is still open,
// as a crashed run (or `fedpq plot` on a run in progress) would.
func TestFlushedPerRound(t *testing.T) {
	dir := t.TempDir()
	w, err := Create(dir)
	if err != nil {
		t.Fatal(err)
	}
	rs := sampleRounds(4, 2, 0.2)
	for i, r := range rs {
		if err := w.Round(r); err != nil {
			t.Fatal(err)
		}
		run, err := ReadRun(dir)
		if err != nil {
			t.Fatal(err)
		}
		if len(run.Rounds) != i+1 || run.Rounds[i].Round != r.Round {
			t.Fatalf("after round %d, read %d rounds", r.Round, len(run.Rounds))
		}
		if run.Summary != nil {
			t.Fatal("summary before Close")
		}
	}
	if err := w.Close(sampleSummary("x", rs)); err != nil {
		t.Fatal(err)
	}
	if err := w.Close(sampleSummary("x", rs)); err == nil {
		t.Error("second Close succeeded")
	}
	if err := w.Round(Round{Round: 9}); err == nil {
		t.Error("Round after Close succeeded")
	}
}

func TestWriterRefusesBadRounds(t *testing.T) {
	w, err := Create(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	if err := w.Round(Round{Round: 3}); err != nil {
		t.Fatal(err)
	}
	if err := w.Round(Round{Round: 3}); err == nil || !strings.Contains(err.Error(), "must increase") {
		t.Errorf("repeated round: %v", err)
	}
	if err := w.Round(Round{Round: 4, Accuracy: ptr(0.5)}); err != nil {
		t.Errorf("a good round after refused ones: %v", err)
	}
}

// TestCloseWithoutEvaluation: a run that never evaluated still gets its
// summary, and no plot (there is nothing to draw).
func TestCloseWithoutEvaluation(t *testing.T) {
	dir := t.TempDir()
	w, err := Create(dir)
	if err != nil {
		t.Fatal(err)
	}
	if err := w.Round(Round{Round: 1, TrainLoss: 1}); err != nil {
		t.Fatal(err)
	}
	if err := w.Close(Summary{Name: "short", Rounds: 1}); err != nil {
		t.Fatal(err)
	}
	run, err := ReadRun(dir)
	if err != nil || run.Summary == nil || run.Summary.Name != "short" {
		t.Fatalf("%+v, %v", run, err)
	}
	if _, err := os.Stat(filepath.Join(dir, PlotPNGFile)); !os.IsNotExist(err) {
		t.Errorf("plot of a run without accuracy: %v", err)
	}
}

func TestReadRunErrors(t *testing.T) {
	good := `{"round":1,"train_loss":1}`
	for _, tc := range []struct {
		name, metrics, summary string
		want                   []string // substrings of the error
	}{
		{"malformed line", good + "\n\n{\"round\":2,\n", "", []string{MetricsFile + ":3:"}},
		{"wrong type", good + "\n" + `{"round":"two"}` + "\n", "", []string{MetricsFile + ":2:", "round"}},
		{"not increasing", good + "\n" + good + "\n", "", []string{MetricsFile + ":2:", "must increase"}},
		{"malformed summary", good + "\n", "{", []string{SummaryFile}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			if err := os.WriteFile(filepath.Join(dir, MetricsFile), []byte(tc.metrics), 0o644); err != nil {
				t.Fatal(err)
			}
			if tc.summary != "" {
				if err := os.WriteFile(filepath.Join(dir, SummaryFile), []byte(tc.summary), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			_, err := ReadRun(dir)
			if err == nil {
				t.Fatal("no error")
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q lacks %q", err, w)
				}
			}
			if !strings.Contains(err.Error(), dir) {
				t.Errorf("error %q does not name the directory", err)
			}
		})
	}
	dir := t.TempDir()
	_, err := ReadRun(dir)
	if err == nil || !strings.Contains(err.Error(), "not a run directory") || !strings.Contains(err.Error(), dir) {
		t.Errorf("directory without %s: %v", MetricsFile, err)
	}
}

// TestReadRunInProgress: an empty metrics.jsonl and no summary is a run
// that has just started, not an error; unknown fields (a newer writer) are
// ignored.
func TestReadRunInProgress(t *testing.T) {
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, MetricsFile), []byte(`{"round":1,"accuracy":0.25,"future_field":3}`+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	run, err := ReadRun(dir)
	if err != nil {
		t.Fatal(err)
	}
	if run.Summary != nil || len(run.Rounds) != 1 || *run.Rounds[0].Accuracy != 0.25 || run.Name() != filepath.Base(dir) {
		t.Errorf("%+v", run)
	}
}

// TestNonFiniteAsNull: NaN and infinite metrics, which JSON cannot carry,
// are written as null and read back as NaN; the plot and the table leave
// them out, and a summary with them is written too.
func TestNonFiniteAsNull(t *testing.T) {
	dir := t.TempDir()
	w, err := Create(dir)
	if err != nil {
		t.Fatal(err)
	}
	rs := []Round{
		{Round: 1, Accuracy: ptr(0.5), Loss: ptr(1), TrainLoss: 2, Seconds: 1},
		{Round: 2, Accuracy: ptr(math.NaN()), Loss: ptr(math.Inf(1)), TrainLoss: math.NaN(), EpsilonSpent: math.Inf(1), Seconds: 2, Discarded: "not finite"},
		{Round: 3, TrainLoss: math.Inf(-1), Seconds: 3},
		{Round: 4, Accuracy: ptr(0.25), Loss: ptr(math.NaN()), TrainLoss: 1, Seconds: 4},
	}
	for _, r := range rs {
		if err := w.Round(r); err != nil {
			t.Fatalf("round %d: %v", r.Round, err)
		}
	}
	b, err := os.ReadFile(filepath.Join(dir, MetricsFile))
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(string(b)), "\n")
	for _, want := range []string{`"accuracy":null`, `"loss":null`, `"train_loss":null`, `"epsilon_spent":null`, `"discarded":"not finite"`} {
		if !strings.Contains(lines[1], want) {
			t.Errorf("round 2 %s lacks %s", lines[1], want)
		}
	}
	if strings.Contains(lines[2], "accuracy") || strings.Contains(lines[2], `"loss"`) {
		t.Errorf("round 3 was not evaluated, yet %s", lines[2])
	}
	s := Summary{Name: "diverged", Rounds: 4, FinalAccuracy: math.NaN(), BestAccuracy: 0.5, BestRound: 1, Seconds: math.Inf(1)}
	if err := w.Close(s); err != nil {
		t.Fatal(err)
	}
	run, err := ReadRun(dir)
	if err != nil {
		t.Fatal(err)
	}
	if len(run.Rounds) != 4 {
		t.Fatalf("read back %d rounds", len(run.Rounds))
	}
	same := func(a, b float64) bool {
		return a == b || math.IsNaN(a) && math.IsNaN(b) || math.IsInf(a, 0) && math.IsNaN(b)
	}
	for i, got := range run.Rounds {
		want := rs[i]
		if !same(want.TrainLoss, got.TrainLoss) || !same(want.EpsilonSpent, got.EpsilonSpent) || got.Seconds != want.Seconds || got.Discarded != want.Discarded {
			t.Errorf("round %d read back as %+v, want %+v", want.Round, got, want)
		}
		for _, f := range [][2]*float64{{want.Accuracy, got.Accuracy}, {want.Loss, got.Loss}} {
			if (f[0] == nil) != (f[1] == nil) || f[0] != nil && !same(*f[0], *f[1]) {
				t.Errorf("round %d: accuracy or loss %v read back as %v", want.Round, f[0], f[1])
			}
		}
	}
	if got := run.Summary; got == nil || !math.IsNaN(got.FinalAccuracy) || !math.IsNaN(got.Seconds) || got.BestAccuracy != 0.5 {
		t.Errorf("summary read back as %+v", got)
	}
	if _, err := os.Stat(filepath.Join(dir, PlotPNGFile)); err != nil {
		t.Errorf("no plot of the finite accuracies: %v", err)
	}
	run.Summary = nil // a run in progress: the table reads its rounds
	tab := Table([]*Run{run})
	if !strings.Contains(tab, "| 0.2500 | 0.5000 (round 1) |") {
		t.Errorf("table of a run with a NaN accuracy:\n%s", tab)
	}
}
