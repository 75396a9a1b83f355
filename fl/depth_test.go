package fl

import (
	"bytes"
	"context"
	"encoding/gob"
	"fmt"
	"math"
	"strings"
	"testing"

	"github.com/fedpq/fedpq/internal/mechtest"
	"github.com/fedpq/fedpq/report"
)

// raw is a mechtest.Raw payload of n copies of v.
func raw(n int, v float64) []byte {
	var b []byte
	for range n {
		b = mechtest.Append(b, v)
	}
	return b
}

// finiteModel reports a NaN or Inf in w.
func finiteModel(w [][]float32) error {
	for i, t := range w {
		for j, v := range t {
			if math.IsNaN(float64(v)) || math.IsInf(float64(v), 0) {
				return fmt.Errorf("tensor %d[%d] = %v", i, j, v)
			}
		}
	}
	return nil
}

// TestDiscardedRound: a round whose aggregate is not finite, or makes a
// model or update that overflows float32, is discarded with its reason;
// the model stays as it was, the clients are charged their privacy, the
// state can be checkpointed, and the next round, honest, is applied.
func TestDiscardedRound(t *testing.T) {
	const dim = 4
	for _, tc := range []struct {
		name    string
		perturb string
		lambda  float64
		hostile float64 // every value of client 0's upload; clients 1 and 2 send 0.5
		want    string  // in the reason
	}{
		{"model overflows float32", "weights", 1, 1e300, "overflows float32"},
		{"update overflows float32", "updates", 0.1, 3e39, "beyond float32"}, // the model, 1e38, would fit
		{"NaN aggregate", "weights", 1, math.NaN(), "NaN"},
		{"infinite aggregate", "updates", 1, math.Inf(-1), "-Inf"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := baseConfig()
			cfg.Mechanism, cfg.Perturb, cfg.Server.LR, cfg.Weighting, cfg.Rounds = mechtest.Name, tc.perturb, tc.lambda, "mean", 2
			e, err := New(cfg, fakeTask(3, dim, func(int) int { return 1 }))
			if err != nil {
				t.Fatal(err)
			}
			before := clone(e.Global())
			p, err := e.Begin(1, nil)
			if err != nil {
				t.Fatal(err)
			}
			for pos, v := range []float64{tc.hostile, 0.5, 0.5} {
				if err := p.Add(pos, Upload{Payloads: [][]byte{raw(dim, v)}, Examples: 1, Loss: 1}); err != nil {
					t.Fatal(err)
				}
			}
			r, err := e.End(p)
			if err != nil {
				t.Fatal(err)
			}
			if !strings.Contains(r.Discarded, tc.want) || r.Clients != 3 || r.Accuracy == nil {
				t.Errorf("round 1: discarded %q (want %q), %d clients, accuracy %v", r.Discarded, tc.want, r.Clients, r.Accuracy)
			}
			if err := finiteModel(e.Global()); err != nil || Hash(e.Global()) != Hash(before) {
				t.Errorf("model after a discarded round: %v, %v (was %v)", e.Global(), err, before)
			}
			if _, joined, _ := e.Ledger(); joined[0] != 1 || joined[1] != 1 {
				t.Errorf("a discarded round's clients were not charged: %v", joined)
			}
			path := t.TempDir() + "/checkpoint.gob"
			if err := SaveState(path, e.State()); err != nil {
				t.Errorf("checkpoint after a discarded round: %v", err)
			}

			p, err = e.Begin(2, nil)
			if err != nil {
				t.Fatal(err)
			}
			for pos := range 3 {
				if err := p.Add(pos, Upload{Payloads: [][]byte{raw(dim, 0.5)}, Examples: 1, Loss: 1}); err != nil {
					t.Fatal(err)
				}
			}
			if r, err = e.End(p); err != nil || r.Discarded != "" {
				t.Fatalf("honest round 2: %v, discarded %q", err, r.Discarded)
			}
			want := float32(0.5 * tc.lambda)
			if g := e.Global()[0]; g[0] != want || g[dim-1] != want {
				t.Errorf("after the honest round 2 the model is %v, want %v", g, want)
			}
		})
	}
}

// TestLossRefused: a training loss that is NaN, infinite, negative or
// beyond float32 (which the trainer computes in) is refused with its
// upload; the largest float32 is not.
func TestLossRefused(t *testing.T) {
	cfg := baseConfig()
	e, err := New(cfg, fakeTask(2, 2, func(int) int { return 1 }))
	if err != nil {
		t.Fatal(err)
	}
	p, err := e.Begin(1, nil)
	if err != nil {
		t.Fatal(err)
	}
	good := [][]byte{make([]byte, 8)}
	for _, l := range []float64{math.NaN(), math.Inf(1), math.Inf(-1), -1e-300, 1.7e308, math.MaxFloat64, math.Nextafter(math.MaxFloat32, math.Inf(1))} {
		if err := p.Add(0, Upload{Payloads: good, Examples: 1, Loss: l}); err == nil || !strings.Contains(err.Error(), "training loss") || p.Received() != 0 {
			t.Errorf("loss %v: %v, %d received", l, err, p.Received())
		}
	}
	for pos, l := range []float64{0, math.MaxFloat32} {
		if err := p.Add(pos, Upload{Payloads: good, Examples: 1, Loss: l}); err != nil {
			t.Errorf("loss %v refused: %v", l, err)
		}
	}
	r, err := e.End(p)
	if err != nil || r.TrainLoss != math.MaxFloat32/2 {
		t.Errorf("round: %v, train loss %v", err, r.TrainLoss)
	}
}

// resumable runs two rounds of a five-round run with patience and
// updates, so that every part of its State is set.
func resumable(t testing.TB) (Config, Task, State) {
	cfg := baseConfig()
	cfg.Rounds, cfg.Perturb, cfg.Patience = 5, "updates", 1
	cfg.Range = RangeRule{Kind: "minmax", Scale: 1}
	task := fakeTask(3, 3, func(int) int { return 2 })
	e, err := New(cfg, task)
	if err != nil {
		t.Fatal(err)
	}
	e.cfg.Rounds = 2
	if err := e.Run(context.Background(), nil); err != nil {
		t.Fatal(err)
	}
	st := e.State()
	if st.PrevUpd == nil || st.Best == nil {
		t.Fatalf("state of the short run lacks a part: %+v", st)
	}
	return cfg, task, st
}

// TestRestoreRefusesNonFinite: a checkpoint with a NaN or Inf anywhere, or
// whose counts cannot be, is neither written nor restored, and a refused
// one leaves the engine as it was.
func TestRestoreRefusesNonFinite(t *testing.T) {
	cfg, task, good := resumable(t)
	deep := func(s State) State {
		s.Global, s.PrevUpd, s.Best, s.Joined = clone(s.Global), clone(s.PrevUpd), clone(s.Best), append([]int(nil), s.Joined...)
		return s
	}
	for name, f := range map[string]func(*State){
		"-Inf in the model":      func(s *State) { s.Global[0][1] = float32(math.Inf(-1)) },
		"NaN in the last update": func(s *State) { s.PrevUpd[0][0] = float32(math.NaN()) },
		"+Inf in the best model": func(s *State) { s.Best[0][2] = float32(math.Inf(1)) },
		"NaN best accuracy":      func(s *State) { s.BestAcc = math.NaN() },
		"+Inf best accuracy":     func(s *State) { s.BestAcc = math.Inf(1) },
		"NaN wall time":          func(s *State) { s.Seconds = math.NaN() },
	} {
		bad := deep(good)
		f(&bad)
		if err := SaveState(t.TempDir()+"/c.gob", bad); err == nil {
			t.Errorf("%s: checkpointed", name)
		}
		e, err := New(cfg, task)
		if err != nil {
			t.Fatal(err)
		}
		init := Hash(e.Global())
		if err := e.Restore(bad); err == nil {
			t.Errorf("%s: restored", name)
		}
		if e.Done() != 0 || Hash(e.Global()) != init {
			t.Errorf("%s: a refused checkpoint changed the engine", name)
		}
	}
	for name, f := range map[string]func(*State){
		"a client in more rounds than done": func(s *State) { s.Joined[1] = s.Round + 1 },
		"negative rounds of a client":       func(s *State) { s.Joined[0] = -1 },
		"negative evaluations since best":   func(s *State) { s.Since = -1 },
	} {
		bad := deep(good)
		f(&bad)
		e, err := New(cfg, task)
		if err != nil {
			t.Fatal(err)
		}
		if err := e.Restore(bad); err == nil {
			t.Errorf("%s: restored", name)
		}
	}
	e, err := New(cfg, task)
	if err != nil {
		t.Fatal(err)
	}
	if err := e.Restore(good); err != nil {
		t.Fatalf("the good checkpoint: %v", err)
	}
}

// FuzzRestore: whatever bytes a checkpoint holds, decoding and restoring
// it never panics; a State that is restored is finite and fits the model,
// and the run goes on from it to its end (or to a clear error).
func FuzzRestore(f *testing.F) {
	cfg, task, good := resumable(f)
	enc := func(s State) []byte {
		var b bytes.Buffer
		if err := gob.NewEncoder(&b).Encode(s); err != nil {
			f.Fatal(err)
		}
		return b.Bytes()
	}
	f.Add(enc(good))
	inf := good
	inf.Global = [][]float32{{float32(math.Inf(-1)), float32(math.Inf(-1)), float32(math.Inf(-1))}}
	f.Add(enc(inf))
	nan := good
	nan.BestAcc = math.NaN()
	f.Add(enc(nan))
	f.Add(enc(State{}))
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, b []byte) {
		s, err := readState(bytes.NewReader(b))
		if err != nil {
			return
		}
		e, err := New(cfg, task)
		if err != nil {
			t.Fatal(err)
		}
		if err := e.Restore(s); err != nil {
			return
		}
		st := e.State()
		if err := st.finite(); err != nil {
			t.Fatalf("restored a state that is not finite: %v", err)
		}
		for _, w := range [][][]float32{st.Global, st.PrevUpd, st.Best} {
			if w != nil {
				if err := e.checkShapes(w); err != nil {
					t.Fatalf("restored a state that does not fit: %v", err)
				}
			}
		}
		err = e.Run(context.Background(), func(r report.Round) error {
			if err := finiteModel(e.Global()); err != nil {
				t.Fatalf("round %d made the model not finite: %v", r.Round, err)
			}
			return nil
		})
		if err != nil {
			return // a clear error (a range from a huge model, say) is fine
		}
		if err := SaveState(t.TempDir()+"/c.gob", e.State()); err != nil {
			t.Fatalf("a run resumed from a restored state cannot be checkpointed: %v", err)
		}
	})
}
