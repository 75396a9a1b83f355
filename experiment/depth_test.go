package experiment

import (
	"bytes"
	"context"
	"encoding/gob"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/fedpq/fedpq/fl"
	"github.com/fedpq/fedpq/internal/mechtest"
	"github.com/fedpq/fedpq/report"
)

// rawUpload is a mechtest.Raw upload of f of each weight of w.
func rawUpload(w [][]float32, f func(float32) float64) fl.Upload {
	p := make([][]byte, len(w))
	for i, t := range w {
		for _, v := range t {
			p[i] = mechtest.Append(p[i], f(v))
		}
	}
	return fl.Upload{Payloads: p, Examples: 1, Loss: 1}
}

func finite(w [][]float32) bool {
	for _, t := range w {
		for _, v := range t {
			if math.IsNaN(float64(v)) || math.IsInf(float64(v), 0) {
				return false
			}
		}
	}
	return true
}

// served is an engine of c driven round by round, as the server drives
// it, with its recorder.
func served(t *testing.T, c Config, resume bool) (*fl.Engine, *Recorder) {
	t.Helper()
	su, err := NewSetup(c)
	if err != nil {
		t.Fatal(err)
	}
	tr, err := su.Trainer()
	if err != nil {
		t.Fatal(err)
	}
	eng, err := fl.New(su.Engine, fl.Task{Model: su.Model, Trainers: []fl.Trainer{tr}, Data: su.Data, Clients: su.Clients})
	if err != nil {
		t.Fatal(err)
	}
	rec, err := NewRecorder(c, eng, resume)
	if err != nil {
		t.Fatal(err)
	}
	return eng, rec
}

// round runs round t of eng with one upload per position, records it
// and returns its report.
func round(t *testing.T, eng *fl.Engine, rec *Recorder, uploads ...func(global [][]float32) fl.Upload) report.Round {
	t.Helper()
	p, err := eng.Begin(eng.Done()+1, nil)
	if err != nil {
		t.Fatal(err)
	}
	for pos, u := range uploads {
		if err := p.Add(pos, u(p.Global)); err != nil {
			t.Fatal(err)
		}
	}
	r, err := eng.End(p)
	if err != nil {
		t.Fatal(err)
	}
	if err := rec.Round(r); err != nil {
		t.Fatalf("round %d: %v", r.Round, err)
	}
	return r
}

// TestHostileRoundsRecorded: of three clients, one sends 1e300 in every
// parameter, which overflows the float32 model: the round is discarded,
// recorded with its reason and checkpointed with the model it began with.
// Next it sends 3.4e38, which the model holds but whose evaluation is not
// finite: the round's metrics are written with nulls. The run goes on, and
// a run resumed from the checkpoint after that round reads the nulls back
// and ends as the uninterrupted one.
func TestHostileRoundsRecorded(t *testing.T) {
	c := quick(t)
	c.Mechanism, c.Perturb, c.Weighting, c.ClientsPerRound, c.Rounds = mechtest.Name, "weights", "mean", 3, 3
	eng, rec := served(t, c, false)
	init := fl.Hash(eng.Global())
	honest := func(g [][]float32) fl.Upload {
		return rawUpload(g, func(v float32) float64 { return float64(v) + 0.01 })
	}
	hostile := func(x float64) func([][]float32) fl.Upload {
		return func(g [][]float32) fl.Upload { return rawUpload(g, func(float32) float64 { return x }) }
	}

	r := round(t, eng, rec, hostile(1e300), honest, honest)
	if !strings.Contains(r.Discarded, "overflows float32") || fl.Hash(eng.Global()) != init || !finite(eng.Global()) {
		t.Errorf("round 1: discarded %q, model changed %v", r.Discarded, fl.Hash(eng.Global()) != init)
	}
	st, err := fl.LoadState(filepath.Join(c.Out, CheckpointFile))
	if err != nil || st.Round != 1 || fl.Hash(st.Global) != init {
		t.Errorf("checkpoint after the discarded round: %v, round %d", err, st.Round)
	}

	r = round(t, eng, rec, hostile(3.4e38), honest, honest)
	if r.Discarded != "" || !finite(eng.Global()) {
		t.Fatalf("round 2: discarded %q", r.Discarded)
	}
	if r.Loss == nil || !math.IsNaN(*r.Loss) && !math.IsInf(*r.Loss, 0) {
		t.Fatalf("round 2: test loss %v, want one that is not finite (the test's premise)", r.Loss)
	}
	saved := t.TempDir() // the run directory as it is after round 2
	for _, f := range []string{"config.yaml", report.MetricsFile, CheckpointFile} {
		b, err := os.ReadFile(filepath.Join(c.Out, f))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(saved, f), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}

	back := func(g [][]float32) fl.Upload { return rawUpload(g, func(float32) float64 { return 0 }) }
	r = round(t, eng, rec, back, back, back)
	if r.Discarded != "" || r.Loss == nil || math.IsNaN(*r.Loss) {
		t.Errorf("round 3, honest: discarded %q, loss %v", r.Discarded, r.Loss)
	}
	if _, err := rec.Close(); err != nil {
		t.Fatal(err)
	}
	run, err := report.ReadRun(c.Out)
	if err != nil {
		t.Fatal(err)
	}
	if len(run.Rounds) != 3 || !strings.Contains(run.Rounds[0].Discarded, "overflows float32") || run.Rounds[1].Loss == nil || !math.IsNaN(*run.Rounds[1].Loss) {
		t.Errorf("metrics read back: %+v", run.Rounds)
	}
	lines, err := os.ReadFile(filepath.Join(c.Out, report.MetricsFile))
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Contains(lines, []byte(`"loss":null`)) || !bytes.Contains(lines, []byte(`"discarded":"aggregate not applied`)) {
		t.Errorf("metrics.jsonl:\n%s", lines)
	}

	c2 := c
	c2.Out = saved
	eng2, rec2 := served(t, c2, true)
	if eng2.Done() != 2 {
		t.Fatalf("resumed after round %d, want 2", eng2.Done())
	}
	round(t, eng2, rec2, back, back, back)
	if _, err := rec2.Close(); err != nil {
		t.Fatal(err)
	}
	if fl.Hash(eng2.Global()) != fl.Hash(eng.Global()) {
		t.Error("the resumed run ends with another model")
	}
	resumed, err := os.ReadFile(filepath.Join(saved, report.MetricsFile))
	if err != nil {
		t.Fatal(err)
	}
	first := func(b []byte) []byte { return b[:bytes.LastIndexByte(b[:len(b)-1], '\n')] } // all but the last line (its wall time differs)
	if !bytes.Equal(first(resumed), first(lines)) {
		t.Errorf("the resumed run rewrote its first rounds:\n%s\nwant\n%s", first(resumed), first(lines))
	}
}

// TestResumeRefusesNonFiniteCheckpoint: a checkpoint whose model holds a
// -Inf (altered, or written by a version without the checks) is refused
// when a run resumes from it, and never written.
func TestResumeRefusesNonFiniteCheckpoint(t *testing.T) {
	c := quick(t)
	c.Rounds = 2
	if _, err := Run(context.Background(), c, nil); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(c.Out, CheckpointFile)
	st, err := fl.LoadState(path)
	if err != nil {
		t.Fatal(err)
	}
	st.Global[0][0] = float32(math.Inf(-1))
	if err := fl.SaveState(path, st); err == nil {
		t.Error("a model with -Inf was checkpointed")
	}
	var b bytes.Buffer
	if err := gob.NewEncoder(&b).Encode(st); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, b.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := Resume(context.Background(), c.Out, nil); err == nil || !strings.Contains(err.Error(), "-Inf") {
		t.Errorf("resumed from a checkpoint with -Inf: %v", err)
	}
}
