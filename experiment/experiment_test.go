package experiment

import (
	"context"
	"encoding/json"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/fedpq/fedpq/data"
	"github.com/fedpq/fedpq/fl"
	"github.com/fedpq/fedpq/privacy"
	"github.com/fedpq/fedpq/report"
)

func quick(t *testing.T) Config {
	c := Default()
	c.Rounds = 4
	c.Out = t.TempDir()
	return c
}

// TestRunWritesRunDirectory: a run leaves config.yaml (which loads back to
// the same configuration), metrics.jsonl with a line per round, the summary
// and the plots.
func TestRunWritesRunDirectory(t *testing.T) {
	c := quick(t)
	var seen []report.Round
	s, err := Run(context.Background(), c, func(r report.Round) { seen = append(seen, r) })
	if err != nil {
		t.Fatal(err)
	}
	if len(seen) != 4 || s.Rounds != 4 || s.EpsilonPerRound != 1 || s.UplinkBitsPerParam != 1 {
		t.Errorf("%d rounds seen, summary %+v", len(seen), s)
	}
	for _, f := range []string{"config.yaml", report.MetricsFile, report.SummaryFile, report.PlotPNGFile, report.PlotSVGFile} {
		if _, err := os.Stat(filepath.Join(c.Out, f)); err != nil {
			t.Error(err)
		}
	}
	back := Default()
	if err := Load(filepath.Join(c.Out, "config.yaml"), &back); err != nil {
		t.Fatal(err)
	}
	if want, _ := c.ResolvePartition(); back != want || back.Partition != "natural" {
		t.Errorf("config.yaml reads back as %+v, want %+v", back, want)
	}
	run, err := report.ReadRun(c.Out)
	if err != nil {
		t.Fatal(err)
	}
	if len(run.Rounds) != 4 || run.Summary == nil || run.Summary.FinalAccuracy != s.FinalAccuracy {
		t.Errorf("read back %d rounds, summary %+v", len(run.Rounds), run.Summary)
	}
}

// TestReproducible: the same configuration gives the same metrics, line for
// line apart from wall time.
func TestReproducible(t *testing.T) {
	var accs [2][]float64
	for i := range accs {
		c := quick(t)
		c.Mechanism = "ldpq"
		c.Dropout = 0.2
		c.ClientsPerRound = 10
		_, err := Run(context.Background(), c, func(r report.Round) { accs[i] = append(accs[i], *r.Accuracy, r.TrainLoss) })
		if err != nil {
			t.Fatal(err)
		}
	}
	for j := range accs[0] {
		if accs[0][j] != accs[1][j] {
			t.Fatalf("runs differ: %v vs %v", accs[0], accs[1])
		}
	}
}

func TestLoadRejectsUnknownKeys(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "x.yaml")
	os.WriteFile(path, []byte("rounds: 3\nepsilonn: 2\n"), 0o644)
	c := Default()
	if err := Load(path, &c); err == nil || !strings.Contains(err.Error(), "epsilonn") {
		t.Errorf("unknown key: %v", err)
	}
	os.WriteFile(path, []byte("rounds: 3\nepsilon: 2\n"), 0o644)
	if err := Load(path, &c); err != nil || c.Rounds != 3 || c.Epsilon != 2 || c.Model != Default().Model {
		t.Errorf("load: %v, %+v", err, c)
	}
	os.WriteFile(path, nil, 0o644)
	if err := Load(path, &c); err != nil {
		t.Errorf("empty file: %v", err)
	}
}

func TestBadConfigs(t *testing.T) {
	for i, f := range []func(*Config){
		func(c *Config) { c.Partition = "dirichlet" },
		func(c *Config) { c.Partition = "shards:0" },
		func(c *Config) { c.Partition = "iid:3" },
		func(c *Config) { c.Optimizer = "rmsprop" },
		func(c *Config) { c.LR = 0 },
		func(c *Config) { c.Range = "minmax:-1" },
		func(c *Config) { c.Model = "resnet" },
		func(c *Config) { c.Dataset = "imagenet" },
		func(c *Config) { c.Dataset = "mnist"; c.Partition = "natural"; c.DataDir = "../../shared/datasets" },
		func(c *Config) { c.Epsilon = -1 },
		func(c *Config) { c.Engine = "xla" },
		func(c *Config) { c.ProxMu = -0.01 },
		func(c *Config) { c.ProxMu = math.Inf(1) },
	} {
		c := quick(t)
		f(&c)
		if _, err := Run(context.Background(), c, nil); err == nil {
			t.Errorf("case %d accepted", i)
		}
	}
}

// TestAutoPartition: the default partition is the dataset's own clients
// for synthetic and iid for the image sets, which have none (it was
// natural for every dataset, so --dataset mnist alone failed); a
// partition that is set stays as it is.
func TestAutoPartition(t *testing.T) {
	c := Default()
	c.Dataset, c.DataDir, c.Clients = "mnist", "../../shared/datasets", 10
	su, err := NewSetup(c)
	if err != nil {
		t.Fatal(err)
	}
	if su.Config.Partition != "iid" || len(su.Clients) != 10 {
		t.Errorf("mnist: partition %q, %d clients", su.Config.Partition, len(su.Clients))
	}
	for _, tc := range []struct{ dataset, partition, want, note string }{
		{"synthetic", "auto", "natural", "partition: natural (synthetic has clients of its own)"},
		{"synthetic:0.5,0.5", "", "natural", "partition: natural (synthetic:0.5,0.5 has clients of its own)"},
		{"fashion-mnist", "auto", "iid", "partition: iid (fashion-mnist has no clients of its own)"},
		{"cifar10", "auto", "iid", "partition: iid (cifar10 has no clients of its own)"},
		{"mnist", "dirichlet:0.5", "dirichlet:0.5", ""},
		{"synthetic", "iid", "iid", ""},
	} {
		c := Default()
		c.Dataset, c.Partition = tc.dataset, tc.partition
		r, note := c.ResolvePartition()
		if r.Partition != tc.want || note != tc.note {
			t.Errorf("%s, %q: resolved to %q, %q; want %q, %q", tc.dataset, tc.partition, r.Partition, note, tc.want, tc.note)
		}
	}
}

// TestEngines: the engine key reaches the trainer. The quick start on the
// GoMLX engine ends within a point of the native engine's accuracy (they
// differ only in float32 rounding) and records its engine in config.yaml.
func TestEngines(t *testing.T) {
	acc := map[string]float64{}
	for _, e := range []string{"native", "gomlx"} {
		c := quick(t)
		c.Engine = e
		su, err := NewSetup(c)
		if err != nil {
			t.Fatal(err)
		}
		tr, err := su.Trainer()
		if err != nil {
			t.Fatal(err)
		}
		if string(tr.Engine()) != e {
			t.Errorf("engine %s: the setup's trainer is %v", e, tr.Engine())
		}
		s, err := Run(context.Background(), c, nil)
		if err != nil {
			t.Fatal(err)
		}
		acc[e] = s.FinalAccuracy
		back := Default()
		if err := Load(filepath.Join(c.Out, "config.yaml"), &back); err != nil || back.Engine != e {
			t.Errorf("%s: config.yaml has engine %q (%v)", e, back.Engine, err)
		}
	}
	if math.Abs(acc["native"]-acc["gomlx"]) > 0.01 {
		t.Errorf("final accuracy native %v, gomlx %v: more than a point apart", acc["native"], acc["gomlx"])
	}
}

// TestExperimentFiles: every file in experiments/ loads without unknown
// keys and validates, and names its run after itself. It runs from the
// repository's root, where paths in the files (a spec file) start.
func TestExperimentFiles(t *testing.T) {
	t.Chdir("..")
	files, err := filepath.Glob("experiments/*.yaml")
	if err != nil || len(files) == 0 {
		t.Fatalf("no experiment files: %v", err)
	}
	for _, f := range files {
		c := Default()
		if err := Load(f, &c); err != nil {
			t.Errorf("%s: %v", f, err)
			continue
		}
		if err := c.Validate(); err != nil {
			t.Errorf("%s: %v", f, err)
		}
		if want := strings.TrimSuffix(filepath.Base(f), ".yaml"); c.Name != want {
			t.Errorf("%s: name %q, want %q", f, c.Name, want)
		}
	}
}

// TestValidationHeldOut: the validation split is disjoint from every
// client's examples, and together they cover the training set.
func TestValidationHeldOut(t *testing.T) {
	ds := &data.Dataset{Name: "toy", Shape: []int{1}, Classes: 2}
	for i := range 1000 {
		ds.X = append(ds.X, float32(i))
		ds.Y = append(ds.Y, int32(i%2))
	}
	fed := &data.Federated{Train: ds, Test: ds}
	for _, p := range []string{"iid", "dirichlet:0.5", "shards:2"} {
		c := Default()
		c.Partition, c.Clients, c.Validation = p, 10, 0.1
		parts, val, err := partition(c, fed)
		if err != nil {
			t.Fatal(err)
		}
		seen := map[int]bool{}
		for _, v := range val {
			seen[v] = true
		}
		if len(val) != 100 {
			t.Errorf("%s: %d held out, want 100", p, len(val))
		}
		for _, part := range parts {
			for _, i := range part {
				if seen[i] {
					t.Fatalf("%s: example %d is both a client's and held out", p, i)
				}
				seen[i] = true
			}
		}
		if len(seen) != 1000 {
			t.Errorf("%s: %d of 1000 examples covered", p, len(seen))
		}
	}
	c := Default()
	c.Validation = 0.1
	if _, _, err := partition(c, &data.Federated{Train: ds, Test: ds, Natural: [][]int{{0}}}); err == nil {
		t.Error("validation with the natural partition accepted")
	}
}

// TestResume: a run interrupted after round 2 and resumed from its
// directory ends with the same metrics as an uninterrupted one.
func TestResume(t *testing.T) {
	c := quick(t)
	c.Mechanism, c.ClientsPerRound, c.Dropout = "corbin", 12, 0.1
	want, err := Run(context.Background(), c, nil)
	if err != nil {
		t.Fatal(err)
	}
	c.Out = t.TempDir()
	ctx, cancel := context.WithCancel(context.Background())
	_, err = Run(ctx, c, func(r report.Round) {
		if r.Round == 2 {
			cancel()
		}
	})
	if err == nil {
		t.Fatal("the interrupted run did not stop")
	}
	got, err := Resume(context.Background(), c.Out, nil)
	if err != nil {
		t.Fatal(err)
	}
	if got.FinalAccuracy != want.FinalAccuracy || got.Rounds != want.Rounds || got.UplinkBitsTotal != want.UplinkBitsTotal || got.EpsilonSpent != want.EpsilonSpent {
		t.Errorf("resumed %+v, uninterrupted %+v", got, want)
	}
	run, err := report.ReadRun(c.Out)
	if err != nil || len(run.Rounds) != 4 {
		t.Fatalf("metrics after resuming: %v, %d rounds", err, len(run.Rounds))
	}
	if _, err := Resume(context.Background(), t.TempDir(), nil); err == nil {
		t.Error("resuming a directory without a run accepted")
	}
}

// TestResumeAsync: an asynchronous run checkpoints at its evaluations and
// its last buffer (and every asyncCheckpointEvery), not after every buffer;
// interrupted after buffer 5 it resumes from buffer 3's checkpoint, runs
// buffers 4 and 5 again, and ends as an uninterrupted run does.
func TestResumeAsync(t *testing.T) {
	c := quick(t)
	c.Mode, c.Concurrency, c.Buffer, c.Staleness = "async", 8, 3, "poly:0.5"
	c.Rounds, c.EvalEvery = 8, 3
	want, wantRounds := finalModel(t, c)
	c.Out = t.TempDir()
	ctx, cancel := context.WithCancel(context.Background())
	_, err := Run(ctx, c, func(r report.Round) {
		if r.Round == 5 {
			cancel()
		}
	})
	if err == nil {
		t.Fatal("the interrupted run did not stop")
	}
	st, err := fl.LoadState(filepath.Join(c.Out, CheckpointFile))
	if err != nil || st.Round != 3 {
		t.Fatalf("the interrupted run's checkpoint: %v, after buffer %d, want 3", err, st.Round)
	}
	if _, err := Resume(context.Background(), c.Out, nil); err != nil {
		t.Fatal(err)
	}
	if st, err = fl.LoadState(filepath.Join(c.Out, CheckpointFile)); err != nil || fl.Hash(st.Global) != want {
		t.Fatalf("resumed run: %v, model equal %v", err, err == nil && fl.Hash(st.Global) == want)
	}
	run, err := report.ReadRun(c.Out)
	if err != nil || len(run.Rounds) != len(wantRounds) {
		t.Fatalf("metrics after resuming: %v, %d buffers, want %d", err, len(run.Rounds), len(wantRounds))
	}
	for i, r := range run.Rounds {
		if w := wantRounds[i]; r.TrainLoss != w.TrainLoss || r.Clock != w.Clock || r.Staleness != w.Staleness {
			t.Errorf("buffer %d: loss %v, clock %v, staleness %v; uninterrupted %v, %v, %v", r.Round, r.TrainLoss, r.Clock, r.Staleness, w.TrainLoss, w.Clock, w.Staleness)
		}
	}
}

// TestResumeLonger: a finished run lengthened by raising rounds in its
// config.yaml and resuming it (as docs/training.md's range table was made)
// ends with the model and metrics of a run of that length from the start:
// every round's randomness is drawn from the secret and the round's number.
func TestResumeLonger(t *testing.T) {
	c := quick(t)
	c.Mechanism, c.ClientsPerRound, c.Rounds = "corbin", 12, 4
	want, wantRounds := finalModel(t, c)
	c.Rounds, c.Out = 2, t.TempDir()
	if _, err := Run(context.Background(), c, nil); err != nil {
		t.Fatal(err)
	}
	cfg := filepath.Join(c.Out, "config.yaml")
	y, err := os.ReadFile(cfg)
	if err != nil {
		t.Fatal(err)
	}
	longer := strings.Replace(string(y), "\nrounds: 2\n", "\nrounds: 4\n", 1)
	if longer == string(y) {
		t.Fatalf("config.yaml has no rounds: 2 line:\n%s", y)
	}
	if err := os.WriteFile(cfg, []byte(longer), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := Resume(context.Background(), c.Out, nil); err != nil {
		t.Fatal(err)
	}
	st, err := fl.LoadState(filepath.Join(c.Out, CheckpointFile))
	if err != nil {
		t.Fatal(err)
	}
	run, err := report.ReadRun(c.Out)
	if err != nil {
		t.Fatal(err)
	}
	if fl.Hash(st.Global) != want || len(run.Rounds) != len(wantRounds) {
		t.Fatalf("lengthened run: %d rounds, model equal %v", len(run.Rounds), fl.Hash(st.Global) == want)
	}
	for i, r := range run.Rounds {
		w := wantRounds[i]
		if r.Accuracy == nil || w.Accuracy == nil || *r.Accuracy != *w.Accuracy || r.TrainLoss != w.TrainLoss {
			t.Errorf("round %d: accuracy %v, loss %v; the 4-round run's %v, %v", r.Round, r.Accuracy, r.TrainLoss, w.Accuracy, w.TrainLoss)
		}
	}
}

// TestResumeNotARun: resuming a directory that is not a run, or a run
// without a checkpoint, says so and what a run directory holds, not which
// file failed to open.
func TestResumeNotARun(t *testing.T) {
	empty := t.TempDir()
	noCheckpoint := t.TempDir()
	os.WriteFile(filepath.Join(noCheckpoint, "config.yaml"), []byte("rounds: 2\n"), 0o644)
	for dir, want := range map[string][]string{
		empty:                            {empty + " is not a run directory", "config.yaml, metrics.jsonl and checkpoint.gob"},
		filepath.Join(empty, "nonesuch"): {"nonesuch is not a directory"},
		noCheckpoint:                     {"has no checkpoint.gob", "--config " + filepath.Join(noCheckpoint, "config.yaml")},
	} {
		_, err := Resume(context.Background(), dir, nil)
		for _, w := range want {
			if err == nil || !strings.Contains(err.Error(), w) {
				t.Errorf("resume %s: %v, want %q", dir, err, w)
			}
		}
		if err != nil && strings.Contains(err.Error(), "no such file") {
			t.Errorf("resume %s: %v", dir, err)
		}
	}
}

// TestQuickstartAsDocumented: the README and docs/training.md quote the
// quick start's final accuracies; the same seed must give them exactly.
func TestQuickstartAsDocumented(t *testing.T) {
	for mechanism, want := range map[string]float64{"corbin": 0.7646, "ldpq": 0.7276, "none": 0.7883} {
		c := Default()
		c.Mechanism, c.Out = mechanism, t.TempDir()
		s, err := Run(context.Background(), c, nil)
		if err != nil {
			t.Fatal(err)
		}
		if math.Abs(s.FinalAccuracy-want) > 5e-5 {
			t.Errorf("quick start with %s: final accuracy %.4f, the docs say %.4f", mechanism, s.FinalAccuracy, want)
		}
		if mechanism == "corbin" {
			// The ledger the README and docs/privacy.md print.
			l := s.Privacy
			if l == nil || l.Rounds != 40 || l.Parameters != 610 || l.Server != nil || l.Partner != nil || l.Eavesdropper == nil {
				t.Fatalf("quick start's ledger %+v", l)
			}
			e := l.Eavesdropper
			for _, v := range [][3]float64{{e.ParamOptimal.Eps, 37.86, 0.005}, {e.ParamBasic.Eps, 40, 0}, {e.UploadRound.Eps, 371.6, 0.05}, {e.UploadOptimal.Eps, 1.186e4, 5}} {
				if math.Abs(v[0]-v[1]) > v[2] {
					t.Errorf("quick start's ledger: %.4g, the docs say %.4g", v[0], v[1])
				}
			}
		}
	}
	// docs/privacy.md: the same run with gaussian (eps 1, delta 1e-5).
	g, err := privacy.Account(privacy.Budget{Mechanism: "gaussian", Epsilon: 1, MechDelta: 1e-5}, 610, 40, 1e-5)
	if err != nil || math.Abs(g.Server.ParamOptimal.Eps-9.577) > 5e-4 || math.Abs(g.Server.UploadRound.Eps-53.72) > 5e-3 {
		t.Errorf("gaussian quick start's ledger %+v (%v), the docs say 9.577 and 53.72", g.Server, err)
	}
}

// TestFailedRunSaysSo: a run stopped before its last round leaves a
// summary.json that says so, and how far it got, beside the checkpoint
// it can resume from.
func TestFailedRunSaysSo(t *testing.T) {
	c := Default()
	c.Rounds, c.Out = 5, t.TempDir()
	ctx, cancel := context.WithCancel(context.Background())
	_, err := Run(ctx, c, func(r report.Round) {
		if r.Round == 2 {
			cancel()
		}
	})
	if err == nil {
		t.Fatal("a cancelled run returned no error")
	}
	b, err := os.ReadFile(filepath.Join(c.Out, report.SummaryFile))
	if err != nil {
		t.Fatal(err)
	}
	var s report.Summary
	if err := json.Unmarshal(b, &s); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(s.Error, "stopped after round 2 of 5") || !strings.Contains(s.Error, "context canceled") {
		t.Errorf("summary.json error %q", s.Error)
	}
	if _, err := os.Stat(filepath.Join(c.Out, CheckpointFile)); err != nil {
		t.Error(err)
	}
}
