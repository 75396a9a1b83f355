package fl

import (
	"context"
	"encoding/json"
	"math"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/fedpq/fedpq/corr"
	"github.com/fedpq/fedpq/model"
	"github.com/fedpq/fedpq/report"
)

// seededTrainer moves every weight toward its client's target by half the
// distance, plus a little of its training seed: what it returns depends on
// the model it starts from and on the seed, as a real trainer's does.
type seededTrainer struct{ fakeTrainer }

func (s seededTrainer) Train(ctx context.Context, w [][]float32, x []float32, y []int32, idx []int, c model.TrainConfig) ([][]float32, float64, error) {
	target, _, _ := s.fakeTrainer.Train(ctx, w, x, y, idx, c)
	noise := corr.Derive([]byte("seeded"), "train", c.Seed).Float64()
	out := make([]float32, len(w[0]))
	for j, v := range w[0] {
		out[j] = v + (target[0][j]-v)/2 + float32(noise)/100
	}
	return [][]float32{out}, 0.5, nil
}

func seededTask(clients, dim int, sizes func(int) int, workers int) Task {
	task := fakeTask(clients, dim, sizes)
	task.Trainers = nil
	for range workers {
		task.Trainers = append(task.Trainers, &seededTrainer{fakeTrainer{dim: dim}})
	}
	return task
}

// constantSpeed: every job takes one virtual second.
func constantSpeed(t testing.TB) Speed {
	sp, err := ParseSpeed("lognormal:0:0")
	if err != nil {
		t.Fatal(err)
	}
	return sp
}

// records is rounds as JSON, their wall times left out.
func records(rounds []report.Round) []string {
	var out []string
	for _, r := range rounds {
		r.Seconds = 0
		b, _ := json.Marshal(r)
		out = append(out, string(b))
	}
	return out
}

// TestAsyncEqualsSync is issue 33's key test: an asynchronous run whose
// buffer holds every client (Buffer = Concurrency = the clients) on a
// constant clock, so that every upload is fresh (staleness 0), ends with
// the synchronous run's models and records, bit for bit, for an unpaired
// and a paired mechanism, weights and updates, FedAvg's unequal weights,
// dropouts, a server optimizer and secure aggregation. A speed model
// leaves a synchronous run as it was, but for its clock.
func TestAsyncEqualsSync(t *testing.T) {
	const clients, dim = 8, 6
	for _, c := range []struct {
		name string
		set  func(*Config)
	}{
		{"none weights", func(c *Config) {}},
		{"ldpq updates dropout", func(c *Config) {
			c.Mechanism, c.Perturb, c.Dropout, c.Weighting = "ldpq", "updates", 0.25, "mean"
			c.Range = RangeRule{Kind: "minmax", Scale: 1}
		}},
		{"corbin fedadam", func(c *Config) {
			c.Mechanism, c.Perturb = "corbin", "updates"
			c.Server = ServerConfig{Name: "fedadam", LR: 0.1, Beta1: 0.9, Beta2: 0.99, Tau: 1e-3}
		}},
		{"ldpq secure", func(c *Config) {
			c.Mechanism, c.Weighting, c.SecureAggregation = "ldpq", "mean", true
		}},
	} {
		t.Run(c.name, func(t *testing.T) {
			cfg := baseConfig()
			cfg.Rounds, cfg.Workers = 4, 2
			c.set(&cfg)
			sizes := func(k int) int { return k%3 + 1 }
			plain, plainRounds := run(t, cfg, seededTask(clients, dim, sizes, 2))
			cfg.Speed = constantSpeed(t)
			sync, syncRounds := run(t, cfg, seededTask(clients, dim, sizes, 2))
			cfg.Mode, cfg.Concurrency, cfg.Buffer = "async", clients, clients
			async, asyncRounds := run(t, cfg, seededTask(clients, dim, sizes, 2))
			if !reflect.DeepEqual(sync.Global(), async.Global()) || !reflect.DeepEqual(plain.Global(), sync.Global()) {
				t.Errorf("the models differ:\nplain %v\nsync  %v\nasync %v", plain.Global(), sync.Global(), async.Global())
			}
			a, b := records(syncRounds), records(asyncRounds)
			if !reflect.DeepEqual(a, b) {
				t.Errorf("the records differ:\nsync  %v\nasync %v", a, b)
			}
			for i, r := range syncRounds {
				if r.Clock != float64(i+1) {
					t.Errorf("round %d ends at %v virtual seconds, want %d", r.Round, r.Clock, i+1)
				}
				r.Clock = 0
				if got, want := records([]report.Round{r}), records(plainRounds[i:i+1]); !reflect.DeepEqual(got, want) {
					t.Errorf("a speed model changed round %d:\n%v\n%v", r.Round, got, want)
				}
			}
		})
	}
}

// TestStalenessWeights: the weightings' values, and a buffer's estimate
// with stale uploads: w y + (1 - w) global in weights mode (FedAsync),
// w y in updates mode (FedBuff), over the FedAvg weights' sum.
func TestStalenessWeights(t *testing.T) {
	for _, c := range []struct {
		spec string
		s    int
		want float64
	}{
		{"constant", 7, 1}, {"poly:0.5", 3, 0.5}, {"poly:1", 0, 1}, {"poly:2", 1, 0.25},
		{"hinge:1:2", 2, 1}, {"hinge:1:2", 4, 1.0 / 3}, {"hinge:0.5,4", 10, 0.25},
	} {
		st, err := ParseStaleness(c.spec)
		if err != nil {
			t.Fatal(err)
		}
		if got := st.Weight(c.s); math.Abs(got-c.want) > 1e-15 {
			t.Errorf("%s at staleness %d: %v, want %v", c.spec, c.s, got, c.want)
		}
		if again, _ := ParseStaleness(st.String()); again != st {
			t.Errorf("%s reads back as %v", c.spec, again)
		}
	}
	for _, bad := range []string{"poly", "poly:-1", "hinge:1", "linear:1", "constant:1", "poly:x"} {
		if _, err := ParseStaleness(bad); err == nil {
			t.Errorf("%q accepted", bad)
		}
	}
	const clients, dim = 4, 3
	sizes := func(k int) int { return k + 1 }
	for _, perturb := range []string{"weights", "updates"} {
		cfg := baseConfig()
		cfg.Mode, cfg.Concurrency, cfg.Buffer, cfg.Perturb = "async", clients, clients, perturb
		cfg.Staleness = Staleness{Kind: "poly", A: 1}
		e, err := New(cfg, seededTask(clients, dim, sizes, 1))
		if err != nil {
			t.Fatal(err)
		}
		ids := []int{0, 1, 2, 3}
		locals := func(t int) [][][]float32 { // each client's model, as it would upload it
			var out [][][]float32
			for k := range clients {
				w := make([]float32, dim)
				for j := range w {
					w[j] = float32(k+1)/10 + float32(j+t)/100
				}
				out = append(out, [][]float32{w})
			}
			return out
		}
		bases := map[int][][]float32{0: clone(e.Global())}
		step := func(versions []int, local [][][]float32) {
			p, err := e.BeginBuffer(e.Done()+1, ids, versions)
			if err != nil {
				t.Fatal(err)
			}
			for pos := range ids {
				u := e.encodeAt(p, pos, bases[versions[pos]], clone(local[pos]), 0.5)
				if u.err != nil {
					t.Fatal(u.err)
				}
				if err := p.Add(pos, u.Upload); err != nil {
					t.Fatal(err)
				}
			}
			if _, err := e.End(p); err != nil {
				t.Fatal(err)
			}
			bases[e.Done()] = clone(e.Global())
		}
		step([]int{0, 0, 0, 0}, locals(0))
		g1 := clone(e.Global())
		l := locals(1)
		versions := []int{0, 1, 1, 0} // staleness 1, 0, 0, 1: weights 1/2, 1, 1, 1/2
		step(versions, l)
		for j := range dim {
			var num, den float64
			for k := range clients {
				n := float64(sizes(k))
				w := 1.0 / float64(1+1-versions[k])
				y := float64(l[k][0][j])
				if perturb == "updates" {
					y -= float64(bases[versions[k]][0][j])
					num += n * w * y
				} else {
					num += n * (w*y + (1-w)*float64(g1[0][j]))
				}
				den += n
			}
			want := num / den
			if perturb == "updates" {
				want += float64(g1[0][j])
			}
			if got := float64(e.Global()[0][j]); math.Abs(got-want) > 1e-6 {
				t.Errorf("%s, parameter %d: %v, want %v", perturb, j, got, want)
			}
		}
	}
}

// TestOverSelect: a round over-selects ceil(K (1 + f)) clients, keeps the
// K that finish first, and lasts as long as the slowest of them.
func TestOverSelect(t *testing.T) {
	const clients, dim, k = 40, 2, 5
	cfg := baseConfig()
	cfg.ClientsPerRound, cfg.OverSelect, cfg.Rounds = k, 1, 3
	var err error
	if cfg.Speed, err = ParseSpeed("tail:0.3:10"); err != nil {
		t.Fatal(err)
	}
	e, rounds := run(t, cfg, fakeTask(clients, dim, func(int) int { return 1 }))
	all := make([]int, clients)
	for i := range all {
		all[i] = i
	}
	prev := 0.0
	for _, r := range rounds {
		sampled := e.sample(r.Round, all)
		if len(sampled) != 2*k {
			t.Fatalf("round %d sampled %d clients, want %d", r.Round, len(sampled), 2*k)
		}
		kept := e.fastest(r.Round, sampled)
		if r.Clients != k || len(kept) != k {
			t.Errorf("round %d kept %d clients (%d aggregated), want %d", r.Round, len(kept), r.Clients, k)
		}
		slowest := 0.0
		for _, c := range kept {
			slowest = max(slowest, e.clock.time(c, r.Round))
		}
		for _, c := range sampled {
			if !contains(kept, c) && e.clock.time(c, r.Round) < slowest {
				t.Errorf("round %d left client %d out (%v s), but kept one taking %v s", r.Round, c, e.clock.time(c, r.Round), slowest)
			}
		}
		if math.Abs(r.Clock-prev-slowest) > 1e-9 {
			t.Errorf("round %d lasted %v s, its slowest kept client %v s", r.Round, r.Clock-prev, slowest)
		}
		prev = r.Clock
	}
}

// TestOversampleKept: Oversample draws ceil(K (1 + f)) clients of those
// online, the same for whoever asks; Begin keeps the K of them that
// finish first, through BeginKept; BeginKept refuses a kept set that is
// not a subset of the sample, in increasing order, of at most K. A
// deployed server (no speed model) may over-select: it begins rounds
// among any K of the sample it keeps, and Begin, which has no clock to
// rank them by, says so.
func TestOversampleKept(t *testing.T) {
	const clients, dim, k = 40, 2, 5
	cfg := baseConfig()
	cfg.ClientsPerRound, cfg.OverSelect, cfg.Rounds = k, 0.5, 3
	sim := cfg
	var err error
	if sim.Speed, err = ParseSpeed("tail:0.3:10"); err != nil {
		t.Fatal(err)
	}
	e, err := New(sim, fakeTask(clients, dim, func(int) int { return 1 }))
	if err != nil {
		t.Fatal(err)
	}
	online := []int{1, 2, 3, 5, 8, 13, 21, 34, 35, 36, 37, 38, 39}
	sample, err := e.Oversample(1, online)
	if err != nil {
		t.Fatal(err)
	}
	if len(sample) != 8 || !slices.IsSorted(sample) {
		t.Fatalf("sampled %v: want 8 clients (ceil(5 x 1.5)), increasing", sample)
	}
	for _, c := range sample {
		if !contains(online, c) {
			t.Errorf("sampled client %d, which is not online", c)
		}
	}
	again, _ := e.Oversample(1, online)
	if !slices.Equal(again, sample) || !slices.Equal(e.sample(1, online), sample) {
		t.Errorf("the sample is not the run's: %v, then %v", sample, again)
	}
	p, err := e.Begin(1, online)
	if err != nil {
		t.Fatal(err)
	}
	if want := e.fastest(1, sample); !slices.Equal(p.Clients, want) || len(want) != k {
		t.Errorf("Begin kept %v, want the %d fastest %v", p.Clients, k, want)
	}
	for _, c := range []struct {
		kept []int
		want string
	}{
		{sample[:k+1], "more than clients_per_round"},
		{[]int{sample[1], sample[0]}, "not in increasing order"},
		{[]int{0}, "its sample does not hold"},
		{[]int{4}, "its sample does not hold"},
	} {
		if _, err := e.BeginKept(1, online, c.kept); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("BeginKept(%v): %v, want an error saying %q", c.kept, err, c.want)
		}
	}
	if _, err := e.BeginKept(2, online, sample[:1]); err == nil {
		t.Error("BeginKept began round 2 before round 1")
	}

	// A deployed server: no speed model, its own kept set.
	task := fakeTask(clients, dim, func(int) int { return 1 })
	task.Clients, task.Remote = nil, clients
	srv, err := New(cfg, task)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range online {
		if err := srv.Enroll(c, 1); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := srv.Begin(1, online); err == nil || !strings.Contains(err.Error(), "no clock") {
		t.Errorf("a server's Begin over-selected with no clock: %v", err)
	}
	got, err := srv.Oversample(1, online)
	if err != nil || !slices.Equal(got, sample) {
		t.Errorf("the server sampled %v (%v); the simulation of the same seed %v", got, err, sample)
	}
	kept := []int{sample[0], sample[3], sample[7]}
	if p, err := srv.BeginKept(1, online, kept); err != nil || !slices.Equal(p.Clients, kept) {
		t.Errorf("BeginKept(%v): %v, %v", kept, p, err)
	}

	// Without over-selection the sample is the round: nothing else is kept.
	plain := baseConfig()
	plain.ClientsPerRound = k
	e, err = New(plain, fakeTask(clients, dim, func(int) int { return 1 }))
	if err != nil {
		t.Fatal(err)
	}
	sample, _ = e.Oversample(1, nil)
	if len(sample) != k {
		t.Errorf("sampled %d clients without over-selection, want %d", len(sample), k)
	}
	if _, err := e.BeginKept(1, nil, sample[:k-1]); err == nil || !strings.Contains(err.Error(), "does not over-select") {
		t.Errorf("kept part of the sample without over-selection: %v", err)
	}
	if p, err := e.BeginKept(1, nil, sample); err != nil || !slices.Equal(p.Clients, sample) {
		t.Errorf("BeginKept(the sample): %v, %v", p, err)
	}
}

func contains(s []int, x int) bool {
	for _, v := range s {
		if v == x {
			return true
		}
	}
	return false
}

func asyncConfig(t testing.TB) Config {
	cfg := baseConfig()
	cfg.Mechanism, cfg.Perturb, cfg.Weighting = "ldpq", "updates", "mean"
	cfg.Mode, cfg.Concurrency, cfg.Buffer, cfg.Rounds = "async", 10, 3, 12
	cfg.Staleness = Staleness{Kind: "poly", A: 0.5}
	return cfg
}

// TestAsyncReproducible: an asynchronous run on the default heavy-tailed
// clock ends with the same model and records on 1 worker as on 4, and
// resumed from a checkpoint halfway as uninterrupted.
func TestAsyncReproducible(t *testing.T) {
	const clients, dim = 30, 8
	cfg := asyncConfig(t)
	cfg.Workers = 1
	one, oneRounds := run(t, cfg, seededTask(clients, dim, func(int) int { return 2 }, 1))
	cfg.Workers = 4
	four, fourRounds := run(t, cfg, seededTask(clients, dim, func(int) int { return 2 }, 4))
	if !reflect.DeepEqual(one.Global(), four.Global()) || !reflect.DeepEqual(records(oneRounds), records(fourRounds)) {
		t.Errorf("1 worker and 4 differ:\n%v\n%v", records(oneRounds), records(fourRounds))
	}
	stale := false
	for i, r := range oneRounds {
		stale = stale || r.MaxStaleness > 0
		if i > 0 && !(r.Clock >= oneRounds[i-1].Clock) {
			t.Errorf("buffer %d ends at %v s, before buffer %d's %v s", r.Round, r.Clock, i, oneRounds[i-1].Clock)
		}
	}
	if !stale || oneRounds[0].Clock <= 0 {
		t.Errorf("no stale upload, or no clock: %v", records(oneRounds))
	}

	// Resume after buffer 5, through a checkpoint file.
	cfg.Workers = 2
	e, err := New(cfg, seededTask(clients, dim, func(int) int { return 2 }, 2))
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "ck")
	stop := context.Canceled
	err = e.Run(context.Background(), func(r report.Round) error {
		if r.Round == 5 {
			if err := SaveState(path, e.State()); err != nil {
				t.Fatal(err)
			}
			return stop
		}
		return nil
	})
	if err != stop {
		t.Fatal(err)
	}
	st, err := LoadState(path)
	if err != nil {
		t.Fatal(err)
	}
	// Checkpointed after the step, before the client whose upload
	// filled the buffer is replaced.
	if st.Async == nil || len(st.Async.Flight) != cfg.Concurrency-1 {
		t.Fatalf("checkpoint's clients in flight: %+v", st.Async)
	}
	r, err := New(cfg, seededTask(clients, dim, func(int) int { return 2 }, 2))
	if err != nil {
		t.Fatal(err)
	}
	if err := r.Restore(st); err != nil {
		t.Fatal(err)
	}
	var rest []report.Round
	if err := r.Run(context.Background(), func(x report.Round) error { rest = append(rest, x); return nil }); err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(r.Global(), one.Global()) || !reflect.DeepEqual(records(rest), records(oneRounds[5:])) {
		t.Errorf("the resumed run differs:\n%v\n%v", records(rest), records(oneRounds[5:]))
	}
}

// TestMaxStaleness: uploads staler than max_staleness are refused before
// they send anything: counted as refused, not aggregated, not charged.
func TestMaxStaleness(t *testing.T) {
	const clients, dim = 30, 4
	cfg := asyncConfig(t)
	cfg.MaxStaleness, cfg.Rounds = 1, 15
	var err error
	if cfg.Speed, err = ParseSpeed("tail:0.2:10:0"); err != nil {
		t.Fatal(err)
	}
	e, rounds := run(t, cfg, seededTask(clients, dim, func(int) int { return 1 }, 2))
	refused, uploads := 0, 0
	for _, r := range rounds {
		refused += r.Refused
		uploads += r.Clients
		if r.MaxStaleness > 1 {
			t.Errorf("buffer %d took an upload %d steps stale", r.Round, r.MaxStaleness)
		}
	}
	_, joined, _ := e.Ledger()
	charged := 0
	for k, n := range joined {
		charged += n
		if e.clock.slow[k] > 1 && n > 0 {
			t.Errorf("slow client %d (10 times slower, 3 buffers of uploads each time) was charged %d uploads", k, n)
		}
	}
	if refused == 0 || charged != uploads || uploads != cfg.Rounds*cfg.Buffer {
		t.Errorf("%d refused, %d uploads aggregated, %d charged", refused, uploads, charged)
	}
}

// TestAsyncSecureDropout: a secure buffer is a secure round among its
// members; a member that drops out after joining is a dropout of that
// round: a buffer that keeps enough members unmasks without them, one
// that does not is lost whole (discarded, the model unchanged), and the
// run goes on.
func TestAsyncSecureDropout(t *testing.T) {
	const clients, dim = 12, 4
	cfg := asyncConfig(t)
	cfg.Staleness = Staleness{}
	cfg.SecureAggregation, cfg.Concurrency, cfg.Buffer, cfg.Dropout, cfg.Rounds = true, 8, 6, 0.3, 8
	e, err := New(cfg, seededTask(clients, dim, func(int) int { return 1 }, 2))
	if err != nil {
		t.Fatal(err)
	}
	lost, survived := 0, 0
	before := clone(e.Global())
	err = e.Run(context.Background(), func(r report.Round) error {
		switch {
		case strings.Contains(r.Discarded, "secure aggregation"):
			lost++
			if !reflect.DeepEqual(before, e.Global()) {
				t.Errorf("lost buffer %d changed the model", r.Round)
			}
		case r.Discarded != "":
			t.Errorf("buffer %d: %s", r.Round, r.Discarded)
		case r.Dropped > 0:
			survived++
		}
		if r.Clients+r.Dropped != cfg.Buffer {
			t.Errorf("buffer %d: %d uploads and %d dropped, want %d members", r.Round, r.Clients, r.Dropped, cfg.Buffer)
		}
		before = clone(e.Global())
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if lost == 0 || survived == 0 {
		t.Errorf("%d buffers lost, %d survived a dropout: want some of each (change the seed)", lost, survived)
	}
}

// TestAsyncRefused: the combinations an asynchronous run, a speed model
// or over-selection cannot honour are refused, with what to do instead.
func TestAsyncRefused(t *testing.T) {
	const clients, dim = 10, 3
	task := seededTask(clients, dim, func(int) int { return 1 }, 1)
	tail, _ := ParseSpeed("tail:0.1:10")
	for _, c := range []struct {
		set  func(*Config, *Task)
		want string
	}{
		{func(c *Config, _ *Task) { c.Buffer = 11 }, "more than concurrency"},
		{func(c *Config, _ *Task) { c.Concurrency, c.Buffer = 11, 3 }, "more than the run's 10 clients"},
		{func(c *Config, _ *Task) { c.ClientsPerRound = 3 }, "clients_per_round and sampling are for mode sync"},
		{func(c *Config, _ *Task) { c.Mode = "later" }, "want sync or async"},
		{func(c *Config, _ *Task) { c.DP = DPFedAvg{Clip: 1}; c.Mechanism = "none" }, "DP-FedAvg with mode async"},
		{func(c *Config, _ *Task) { c.SecureAggregation = true }, "use staleness constant"},
		{func(c *Config, _ *Task) { c.Shuffle = true }, "use staleness constant"},
		{func(c *Config, _ *Task) { c.MaxStaleness = -1 }, "must not be negative"},
		{func(c *Config, t *Task) { c.Mode, c.Concurrency, c.Buffer, c.Staleness = "", 0, 0, Staleness{} }, ""},
		{func(c *Config, _ *Task) { c.Mode = "sync" }, "are for mode async"},
		{func(c *Config, _ *Task) {
			c.Mode, c.Concurrency, c.Buffer, c.Staleness, c.OverSelect = "", 0, 0, Staleness{}, 0.5
			c.ClientsPerRound = 3
		}, "needs a speed model"},
		{func(c *Config, _ *Task) {
			c.Mode, c.Concurrency, c.Buffer, c.Staleness, c.OverSelect, c.Speed = "", 0, 0, Staleness{}, 0.5, tail
		}, "set clients_per_round"},
		{func(c *Config, t *Task) { c.Speed = tail; t.Clients, t.Remote = nil, clients }, "deployed server's clients take the time"},
	} {
		cfg := asyncConfig(t)
		tk := task
		c.set(&cfg, &tk)
		_, err := New(cfg, tk)
		switch {
		case c.want == "" && err != nil:
			t.Errorf("refused: %v", err)
		case c.want != "" && (err == nil || !strings.Contains(err.Error(), c.want)):
			t.Errorf("got %v, want an error saying %q", err, c.want)
		}
	}
	cfg := baseConfig()
	e, err := New(cfg, task)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := e.BeginBuffer(1, []int{0}, []int{0}); err == nil {
		t.Error("a synchronous run began a buffer")
	}
}

// TestSpeedModel: the models' statistics over 2,000 clients: tail:F:X
// makes round(F n) clients X times slower; lognormal's slowness has median
// 1 and the normal's tail; a job's jitter has median 1; a trace plays back
// its times; bad models are refused.
func TestSpeedModel(t *testing.T) {
	const n = 2000
	secret := corr.SeedSecret(7)
	sp, err := ParseSpeed("tail:0.1:10")
	if err != nil || sp.Jitter != defaultJitter {
		t.Fatal(sp, err)
	}
	c, err := newClock(sp, secret, n)
	if err != nil {
		t.Fatal(err)
	}
	slow, below := 0, 0
	for k, s := range c.slow {
		if s == 10 {
			slow++
		}
		if c.time(k, 1) < c.slow[k] {
			below++
		}
	}
	if slow != n/10 {
		t.Errorf("%d slow clients, want %d", slow, n/10)
	}
	if math.Abs(float64(below)/n-0.5) > 0.04 {
		t.Errorf("%d of %d jobs below their client's slowness: the jitter's median is not 1", below, n)
	}
	sp, _ = ParseSpeed("lognormal:1")
	c, _ = newClock(sp, secret, n)
	above, over := 0, 0
	for _, s := range c.slow {
		if s > 1 {
			above++
		}
		if s > math.E {
			over++
		}
	}
	if math.Abs(float64(above)/n-0.5) > 0.04 || math.Abs(float64(over)/n-0.1587) > 0.03 {
		t.Errorf("lognormal:1: %d above 1, %d above e, of %d", above, over, n)
	}
	path := filepath.Join(t.TempDir(), "trace.csv")
	writeFile(t, path, "client,seconds\n# two clients\n1,3,4\n0,2\n")
	sp, err = ParseSpeed("trace:" + path)
	if err != nil {
		t.Fatal(err)
	}
	c, err = newClock(sp, secret, 2)
	if err != nil {
		t.Fatal(err)
	}
	if c.time(0, 5) != 2 || c.time(1, 1) != 3 || c.time(1, 2) != 4 || c.time(1, 3) != 3 {
		t.Errorf("trace times %v %v %v %v", c.time(0, 5), c.time(1, 1), c.time(1, 2), c.time(1, 3))
	}
	if _, err := newClock(sp, secret, 3); err == nil {
		t.Error("a trace of 2 clients accepted for 3")
	}
	for _, bad := range []string{"tail:0.1", "tail:2:10", "tail:0.1:0.5", "lognormal", "lognormal:-1", "uniform:1", "tail:0.1:10:-1", "trace:/nonexistent"} {
		if _, err := ParseSpeed(bad); err == nil {
			t.Errorf("%q accepted", bad)
		}
	}
	writeFile(t, path, "0,1,-2\n")
	if _, err := ParseSpeed("trace:" + path); err == nil {
		t.Error("a negative time accepted")
	}
}

// BenchmarkAsyncUpload is the asynchronous loop's cost per upload over the
// training and encoding it drives (fakeTrainer, mechanism none, a
// 10-parameter model): 1,000 clients, 100 in flight, buffers of 10.
func BenchmarkAsyncUpload(b *testing.B) {
	cfg := baseConfig()
	cfg.Mode, cfg.Concurrency, cfg.Buffer, cfg.Rounds, cfg.EvalEvery = "async", 100, 10, max(b.N/10, 1), 1000
	e, err := New(cfg, fakeTask(1000, 10, func(int) int { return 1 }))
	if err != nil {
		b.Fatal(err)
	}
	b.ResetTimer()
	if err := e.Run(context.Background(), nil); err != nil {
		b.Fatal(err)
	}
}

func writeFile(t *testing.T, path, s string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(s), 0o644); err != nil {
		t.Fatal(err)
	}
}
