package fl

import (
	"context"
	"encoding/binary"
	"math"
	"reflect"
	"strings"
	"testing"

	"github.com/fedpq/fedpq/data"
	"github.com/fedpq/fedpq/mech"
	"github.com/fedpq/fedpq/model"
	"github.com/fedpq/fedpq/report"
)

// fakeModel has one tensor of dim parameters, initialised to zeros.
type fakeModel struct{ dim int }

func (m fakeModel) Tensors() []model.TensorSpec {
	return []model.TensorSpec{{Name: "w", Shape: []int{m.dim}}}
}
func (m fakeModel) Init(uint64) [][]float32 { return [][]float32{make([]float32, m.dim)} }

// fakeTrainer "trains" by returning its client's target: the mean of the
// client's examples' features (one feature per parameter). Its accuracies
// are played back in order, to drive the patience logic, or, without them,
// computed from the weights.
type fakeTrainer struct {
	dim  int
	accs []float64
	n    int
}

func (f *fakeTrainer) Train(_ context.Context, w [][]float32, x []float32, _ []int32, idx []int, _ model.TrainConfig) ([][]float32, float64, error) {
	out := make([]float32, f.dim)
	for _, i := range idx {
		for j := range out {
			out[j] += x[i*f.dim+j] / float32(len(idx))
		}
	}
	return [][]float32{out}, 0.5, nil
}

func (f *fakeTrainer) Evaluate(w [][]float32, _ []float32, _ []int32, _ []int) (float64, float64, error) {
	if f.accs == nil { // a function of the model alone: the mean weight
		var m float64
		for _, v := range w[0] {
			m += float64(v) / float64(len(w[0]))
		}
		return m, 1 - m, nil
	}
	acc := 0.5
	if f.n < len(f.accs) {
		acc = f.accs[f.n]
	}
	f.n++
	return acc, 1 - acc, nil
}

// fakeTask gives client k examples whose features are all (k+1)/clients
// times a per-coordinate ramp, so the clients' targets differ.
func fakeTask(clients, dim int, sizes func(k int) int) Task {
	ds := &data.Dataset{Name: "fake", Shape: []int{dim}, Classes: 2}
	var parts [][]int
	for k := range clients {
		var idx []int
		for range sizes(k) {
			idx = append(idx, ds.Len())
			for j := range dim {
				ds.X = append(ds.X, float32(k+1)/float32(clients)*float32(j+1)/float32(dim))
			}
			ds.Y = append(ds.Y, 0)
		}
		parts = append(parts, idx)
	}
	return Task{
		Model: fakeModel{dim}, Trainers: []Trainer{&fakeTrainer{dim: dim}, &fakeTrainer{dim: dim}},
		Data: &data.Federated{Train: ds, Test: ds}, Clients: parts,
	}
}

func baseConfig() Config {
	return Config{
		Rounds: 1, Mechanism: "none", Mech: mech.DefaultConfig(), Perturb: "weights",
		Strategy:  Strategy{Range: RangeRule{Kind: "fixed", Center: 0, Radius: 1}, Weighting: "examples", Server: DefaultServerConfig()},
		EvalEvery: 1, Epochs: 1, Batch: 1, Seed: 3, LedgerDelta: 1e-5,
	}
}

func run(t *testing.T, cfg Config, task Task) (*Engine, []report.Round) {
	t.Helper()
	e, err := New(cfg, task)
	if err != nil {
		t.Fatal(err)
	}
	var rounds []report.Round
	if err := e.Run(context.Background(), func(r report.Round) error { rounds = append(rounds, r); return nil }); err != nil {
		t.Fatal(err)
	}
	return e, rounds
}

// TestFedAvg: with no mechanism, one round gives the mean of the clients'
// targets, weighted by their examples or not.
func TestFedAvg(t *testing.T) {
	const clients, dim = 6, 5
	sizes := func(k int) int { return k + 1 }
	for _, weighting := range []string{"examples", "mean"} {
		cfg := baseConfig()
		cfg.Weighting = weighting
		e, rounds := run(t, cfg, fakeTask(clients, dim, sizes))
		for j := range dim {
			var want, total float64
			for k := range clients {
				w := 1.0
				if weighting == "examples" {
					w = float64(sizes(k))
				}
				want += w * float64(k+1) / clients * float64(j+1) / dim
				total += w
			}
			if got := float64(e.Global()[0][j]); math.Abs(got-want/total) > 1e-6 {
				t.Errorf("%s: coordinate %d = %v, want %v", weighting, j, got, want/total)
			}
		}
		r := rounds[0]
		if r.Clients != clients || r.Dropped != 0 || r.UplinkBits != clients*dim*32 || r.UplinkBitsPerParam != 32 {
			t.Errorf("%s: round stats %+v", weighting, r)
		}
	}
}

// TestGlobalLRAndUpdates: lambda mixes the estimate into the global model;
// in updates mode clients send trained minus global, and the server adds
// lambda times the mean update.
func TestGlobalLRAndUpdates(t *testing.T) {
	cfg := baseConfig()
	cfg.Server.LR = 0.5
	cfg.Rounds = 2
	cfg.Weighting = "mean"
	task := fakeTask(4, 3, func(int) int { return 2 })
	mean := func(j int) float64 { return (1 + 2 + 3 + 4) / 4.0 / 4 * float64(j+1) / 3 }
	for _, perturb := range []string{"weights", "updates"} {
		cfg.Perturb = perturb
		e, _ := run(t, cfg, task)
		for j := range 3 {
			// Both modes: g1 = m/2, g2 = g1 + (m - g1)/2 = 3m/4.
			if got, want := float64(e.Global()[0][j]), 0.75*mean(j); math.Abs(got-want) > 1e-6 {
				t.Errorf("%s: coordinate %d = %v, want %v", perturb, j, got, want)
			}
		}
	}
}

// TestReproducibleAndPrivate: a private mechanism gives the same global
// model for the same seed (whatever the workers), another with another
// seed, and an estimate within 6 standard errors of the true mean.
func TestReproducibleAndPrivate(t *testing.T) {
	const clients, dim = 40, 400
	task := fakeTask(clients, dim, func(int) int { return 1 })
	cfg := baseConfig()
	cfg.Mechanism = "corbin"
	cfg.Weighting = "mean"
	cfg.Workers = 1
	a, rounds := run(t, cfg, task)
	cfg.Workers = 2
	b, _ := run(t, cfg, task)
	cfg.Seed++
	c, _ := run(t, cfg, task)
	same, differ := true, false
	var sq float64
	for j := range dim {
		same = same && a.Global()[0][j] == b.Global()[0][j]
		differ = differ || a.Global()[0][j] != c.Global()[0][j]
		want := (clients + 1) / 2.0 / clients * float64(j+1) / dim
		d := float64(a.Global()[0][j]) - want
		sq += d * d
	}
	if !same || !differ {
		t.Errorf("same seed same model: %v; other seed other model: %v", same, differ)
	}
	// Each coordinate's estimate has variance at most alpha^2 r^2 / (2n) for pairs.
	alpha := 1 / math.Tanh(0.5)
	if mse := sq / dim; mse > 6*alpha*alpha/(2*clients) {
		t.Errorf("corbin MSE %v too large", mse)
	}
	r := rounds[0]
	if r.Epsilon != 1 || r.EpsilonSpent != 1 || r.UplinkBitsPerParam != 1 || r.SetupBytes != 20*64 {
		t.Errorf("round stats %+v", r)
	}
}

// TestSamplingDropoutPrivacy: k clients are sampled per round, dropouts are
// counted, and eps spent is the most rounds any client joined times eps.
func TestSamplingDropoutPrivacy(t *testing.T) {
	cfg := baseConfig()
	cfg.Mechanism = "ldpq"
	cfg.Rounds = 10
	cfg.ClientsPerRound = 5
	cfg.Dropout = 0.3
	e, rounds := run(t, cfg, fakeTask(20, 4, func(int) int { return 1 }))
	dropped := 0
	for _, r := range rounds {
		if r.Clients+r.Dropped != 5 {
			t.Errorf("round %d: %d clients + %d dropped, want 5", r.Round, r.Clients, r.Dropped)
		}
		dropped += r.Dropped
	}
	// 50 draws at p = 0.3: 15 expected, standard deviation 3.2.
	if dropped < 3 || dropped > 30 {
		t.Errorf("%d of 50 sampled clients dropped out at p = 0.3", dropped)
	}
	most := 0
	for _, n := range e.joined {
		most = max(most, n)
	}
	if last := rounds[len(rounds)-1]; last.EpsilonSpent != float64(most) || most < 2 {
		t.Errorf("eps spent %v, most rounds joined %d", last.EpsilonSpent, most)
	}
}

// TestPatience: after Patience evaluations without a better accuracy the
// best model comes back.
func TestPatience(t *testing.T) {
	cfg := baseConfig()
	cfg.Rounds = 5
	cfg.Patience = 2
	cfg.Workers = 1
	task := fakeTask(3, 2, func(int) int { return 1 })
	task.Trainers = []Trainer{&fakeTrainer{dim: 2, accs: []float64{0.5, 0.9, 0.8, 0.7, 0.6}}}
	_, rounds := run(t, cfg, task)
	for i, want := range []bool{false, false, false, true, false} {
		if rounds[i].Restored != want {
			t.Errorf("round %d restored = %v, want %v", i+1, rounds[i].Restored, want)
		}
	}
}

func TestRanges(t *testing.T) {
	for _, c := range []struct {
		s    string
		w    []float32
		want mech.Range
	}{
		{"minmax", []float32{-1, 0.5, 3}, mech.Range{Center: 1, Radius: 2}},
		{"minmax:1.5", []float32{-1, 3}, mech.Range{Center: 1, Radius: 3}},
		{"minmax", []float32{0, 0}, mech.Range{Center: 0, Radius: minRadius}},
		{"quantile:0.5", []float32{0, 1, 2, 3, 100}, mech.Range{Center: 2, Radius: 1}},
		{"quantile:1", []float32{0, 1, 2, 3, 100}, mech.Range{Center: 2, Radius: 98}},
	} {
		r, err := ParseRange(c.s)
		if err != nil {
			t.Fatal(err)
		}
		if got := r.of(c.w); got != c.want {
			t.Errorf("%s of %v = %+v, want %+v", c.s, c.w, got, c.want)
		}
	}
	for _, bad := range []string{"", "minmax:0", "fixed:0", "fixed:0,-1", "quantile:0", "quantile:1.5", "median", "minmax:x"} {
		if _, err := ParseRange(bad); err == nil {
			t.Errorf("range %q accepted", bad)
		}
	}
}

func TestConfigErrors(t *testing.T) {
	task := fakeTask(3, 2, func(int) int { return 1 })
	for i, f := range []func(*Config){
		func(c *Config) { c.Rounds = 0 },
		func(c *Config) { c.Dropout = 1 },
		func(c *Config) { c.Perturb = "gradients" },
		func(c *Config) { c.Weighting = "median" },
		func(c *Config) { c.Server.LR = 0 },
		func(c *Config) { c.Mechanism = "nonesuch" },
		func(c *Config) { c.Mech.Epsilon = 0; c.Mechanism = "ldpq" },
		func(c *Config) { c.EvalEvery = 0 },
		func(c *Config) { c.ProxMu = -0.01 },
		func(c *Config) { c.ProxMu = math.NaN() },
		func(c *Config) { c.ProxMu = math.Inf(1) },
	} {
		cfg := baseConfig()
		f(&cfg)
		if _, err := New(cfg, task); err == nil {
			t.Errorf("case %d accepted", i)
		}
	}
	empty := fakeTask(3, 2, func(k int) int { return k })
	if _, err := New(baseConfig(), empty); err == nil {
		t.Error("a client without examples accepted")
	}
}

// TestPatienceOnValidation: with a validation split, patience follows the
// validation accuracy (every second Evaluate), not the test accuracy.
func TestPatienceOnValidation(t *testing.T) {
	cfg := baseConfig()
	cfg.Rounds = 3
	cfg.Patience = 1
	cfg.Workers = 1
	task := fakeTask(3, 2, func(int) int { return 1 })
	// test, validation for each round: test rises, validation falls at round 2.
	ft := &fakeTrainer{dim: 2, accs: []float64{0.5, 0.9, 0.6, 0.8, 0.7, 0.95}}
	task.Trainers = []Trainer{ft}
	task.Validation = []int{0}
	_, rounds := run(t, cfg, task)
	for i, want := range []bool{false, true, false} {
		if rounds[i].Restored != want || rounds[i].ValAccuracy == nil {
			t.Errorf("round %d: restored %v (want %v), validation accuracy %v", i+1, rounds[i].Restored, want, rounds[i].ValAccuracy)
			continue
		}
		// Each round reports the test accuracy as accuracy and the
		// validation split's as val_accuracy, not one for the other.
		if test, val := *rounds[i].Accuracy, *rounds[i].ValAccuracy; test != ft.accs[2*i] || val != ft.accs[2*i+1] {
			t.Errorf("round %d: accuracy %v, validation %v", i+1, test, val)
		}
	}
}

// TestResume: a run checkpointed after round 2 and restored into a fresh
// engine ends with the same global model (hash), ledger and metrics as an
// uninterrupted run.
func TestResume(t *testing.T) {
	for _, opt := range []string{"fedavg", "fedavgm", "fedadam"} {
		t.Run(opt, func(t *testing.T) { testResume(t, opt) })
	}
}

// testResume: with server optimizer opt, whose moments the checkpoint
// carries.
func testResume(t *testing.T, opt string) {
	cfg := baseConfig()
	cfg.Mechanism = "corbin"
	cfg.Rounds = 5
	cfg.Perturb = "updates"
	cfg.ClientsPerRound = 6
	cfg.Patience = 2
	cfg.Server.Name = opt
	if opt != "fedavg" {
		cfg.Server.LR = 0.1
	}
	task := fakeTask(10, 8, func(int) int { return 2 })
	full, fullRounds := run(t, cfg, task)

	short := cfg
	short.Rounds = 2
	first, _ := run(t, short, task)
	path := t.TempDir() + "/checkpoint.gob"
	st := first.State()
	if err := SaveState(path, st); err != nil {
		t.Fatal(err)
	}
	loaded, err := LoadState(path)
	if err != nil {
		t.Fatal(err)
	}
	resumed, err := New(cfg, task)
	if err != nil {
		t.Fatal(err)
	}
	if err := resumed.Restore(loaded); err != nil {
		t.Fatal(err)
	}
	var rest []report.Round
	if err := resumed.Run(context.Background(), func(r report.Round) error { rest = append(rest, r); return nil }); err != nil {
		t.Fatal(err)
	}
	if Hash(resumed.Global()) != Hash(full.Global()) {
		t.Error("resumed run ends with another global model")
	}
	if len(rest) != 3 || rest[0].Round != 3 {
		t.Fatalf("resumed rounds %v", rest)
	}
	restored := false
	for _, r := range fullRounds {
		restored = restored || r.Restored
	}
	if !restored && opt == "fedavg" {
		t.Error("the uninterrupted run never reloaded its best model: patience is not exercised")
	}
	for i, r := range rest {
		want := fullRounds[i+2]
		if r.EpsilonSpent != want.EpsilonSpent || *r.Accuracy != *want.Accuracy || r.Restored != want.Restored || r.TrainLoss != want.TrainLoss {
			t.Errorf("round %d: resumed %+v, uninterrupted %+v", r.Round, r, want)
		}
	}
	bad := loaded
	bad.Global = [][]float32{{1}}
	if err := resumed.Restore(bad); err == nil {
		t.Error("checkpoint of another model accepted")
	}
	bad = loaded
	bad.Joined = []int{1}
	if err := resumed.Restore(bad); err == nil {
		t.Error("checkpoint of another client count accepted")
	}
	if (loaded.Moments == nil) != (opt == "fedavg") {
		t.Fatalf("%s: checkpoint moments %v", opt, loaded.Moments)
	}
	if opt != "fedavg" {
		bad = loaded
		bad.Moments = loaded.Moments[:1]
		if err := resumed.Restore(bad); err == nil {
			t.Error("checkpoint with moments of another optimizer accepted")
		}
	}
}

// TestUploadRefusedWhole: an upload with one truncated tensor is refused
// before any tensor is counted, and so is a second upload from a client.
func TestUploadRefusedWhole(t *testing.T) {
	cfg := baseConfig()
	cfg.Mechanism = "ldpq"
	e, err := New(cfg, fakeTask(2, 70, func(int) int { return 1 }))
	if err != nil {
		t.Fatal(err)
	}
	p, err := e.Begin(1, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := p.Add(0, Upload{Payloads: [][]byte{make([]byte, 8)}, Examples: 1}); err == nil || p.Received() != 0 {
		t.Errorf("truncated upload: %v, count %d", err, p.Received())
	}
	if err := p.Add(0, Upload{Payloads: [][]byte{make([]byte, 9)}, Examples: 1}); err != nil || p.Received() != 1 {
		t.Errorf("valid upload: %v, count %d", err, p.Received())
	}
	if err := p.Add(0, Upload{Payloads: [][]byte{make([]byte, 9)}, Examples: 1}); err == nil || p.Received() != 1 {
		t.Errorf("second upload from a client: %v, count %d", err, p.Received())
	}
	if err := p.Add(1, Upload{Examples: 1}); err == nil {
		t.Error("upload without tensors accepted")
	}
	if err := p.Add(2, Upload{Payloads: [][]byte{make([]byte, 9)}, Examples: 1}); err == nil {
		t.Error("upload from a position outside the round accepted")
	}
}

// twoTensors is a model of two tensors of two values.
type twoTensors struct{}

func (twoTensors) Tensors() []model.TensorSpec {
	return []model.TensorSpec{{Name: "a", Shape: []int{2}}, {Name: "b", Shape: []int{2}}}
}
func (twoTensors) Init(uint64) [][]float32 {
	return [][]float32{make([]float32, 2), make([]float32, 2)}
}

// TestBadContentRefusedWhole: an upload whose second tensor holds a NaN is
// refused with its first tensor, weighted or not, and the mean is that of
// the good uploads.
func TestBadContentRefusedWhole(t *testing.T) {
	f32 := func(v ...float32) []byte {
		var b []byte
		for _, x := range v {
			b = binary.LittleEndian.AppendUint32(b, math.Float32bits(x))
		}
		return b
	}
	for _, weighting := range []string{"mean", "examples"} {
		cfg := baseConfig()
		cfg.Weighting = weighting
		task := fakeTask(3, 2, func(k int) int { return 1 + k })
		task.Model = twoTensors{}
		e, err := New(cfg, task)
		if err != nil {
			t.Fatal(err)
		}
		p, err := e.Begin(1, nil)
		if err != nil {
			t.Fatal(err)
		}
		bad := Upload{Payloads: [][]byte{f32(100, 100), f32(1, float32(math.NaN()))}, Examples: 1}
		if err := p.Add(0, bad); err == nil || !strings.Contains(err.Error(), "tensor 1") {
			t.Errorf("%s: NaN upload: %v", weighting, err)
		}
		for pos := 1; pos < 3; pos++ {
			if err := p.Add(pos, Upload{Payloads: [][]byte{f32(1, 2), f32(3, 4)}, Examples: 1}); err != nil {
				t.Fatal(err)
			}
		}
		if _, err := e.End(p); err != nil {
			t.Fatal(err)
		}
		want := [][]float32{{1, 2}, {3, 4}}
		if g := e.Global(); !reflect.DeepEqual(g, want) {
			t.Errorf("%s: global %v after a refused upload, want %v", weighting, g, want)
		}
	}
}

// TestLedger: each round's ledger is that of the client that took part in
// the most rounds, with the guarantee of each observer.
func TestLedger(t *testing.T) {
	for _, m := range []string{"ldpq", "corbin", "augcorbin", "none"} {
		cfg := baseConfig()
		cfg.Mechanism, cfg.Rounds, cfg.ClientsPerRound = m, 4, 3
		e, rounds := run(t, cfg, fakeTask(6, 8, func(int) int { return 2 }))
		l, joined, err := e.Ledger()
		if err != nil {
			t.Fatal(err)
		}
		most := 0
		for _, n := range joined {
			most = max(most, n)
		}
		last := rounds[len(rounds)-1].Privacy
		switch {
		case m == "none":
			if l != nil || last != nil {
				t.Errorf("none: a ledger %+v", l)
			}
		case last == nil || last.Rounds != most || last.Parameters != 8 || last.Eavesdropper == nil ||
			last.Eavesdropper.ParamBasic == nil || last.Eavesdropper.ParamBasic.Eps != float64(most)*cfg.Mech.Epsilon:
			t.Errorf("%s: ledger %+v after rounds %v", m, last, joined)
		case (m == "ldpq") != (last.Server != nil):
			t.Errorf("%s: server guarantee %+v", m, last.Server)
		case (m == "augcorbin") != (last.CentralNote != ""):
			t.Errorf("%s: central note %q", m, last.CentralNote)
		}
	}
}
