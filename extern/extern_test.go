package extern

import (
	"bufio"
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"os/exec"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/fedpq/fedpq/extern/externtest"
	"github.com/fedpq/fedpq/extern/internal/frame"
	"github.com/fedpq/fedpq/model"
)

func TestMain(m *testing.M) {
	externtest.Main()
	os.Exit(m.Run())
}

// A small dataset of 60 examples of shape [2 2 1] (an image: HWC) in 3
// classes.
var (
	input   = []int{2, 2, 1}
	classes = 3
	feat    = 4
)

func dataset(n int) ([]float32, []int32) {
	x := make([]float32, n*feat)
	for i := range x {
		x[i] = float32(i%11) / 11
	}
	y := make([]int32, n)
	for i := range y {
		y[i] = int32(i*7) % int32(classes)
	}
	return x, y
}

var spec = Spec{Seed: 12, Input: input, Classes: classes, Optimizer: model.Optimizer{Name: "sgd", LR: 0.5, Momentum: 0.5}}

// fakes are the fake trainers a test runs against: the Go one always,
// the Python one (the adapter's framing, numpy only) where
// /usr/bin/python3 has numpy.
func fakes(t *testing.T) map[string]func(mode string) string {
	out := map[string]func(string) string{"go": externtest.Command}
	if err := exec.Command("/usr/bin/python3", "-c", "import numpy").Run(); err != nil {
		if os.Getenv("CI") != "" { // CI installs Debian's python3-numpy (.ci/run)
			t.Fatalf("/usr/bin/python3 cannot import numpy: %v", err)
		}
		t.Logf("skipping the Python fake trainer: /usr/bin/python3 cannot import numpy (Debian's python3-numpy): %v", err)
		return out
	}
	out["python"] = func(mode string) string {
		return "FEDPQ_FAKE_TRAINER='" + mode + "' /usr/bin/python3 testdata/numpy_trainer.py"
	}
	return out
}

func newPool(t *testing.T, cmd string, timeout time.Duration, stderr io.Writer) *Pool {
	t.Helper()
	o := Options{Command: cmd, Timeout: timeout, Stderr: stderr}
	p, err := NewPool(o, spec)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Close() })
	return p
}

// TestTrainAndEvaluate: the trainer describes its model; two trainers of
// a pool train clients from given weights on given examples with the
// round's settings, and return what the fake computes; each process is
// sent each example once; a result does not depend on the process.
func TestTrainAndEvaluate(t *testing.T) {
	for name, cmd := range fakes(t) {
		t.Run(name, func(t *testing.T) {
			p := newPool(t, cmd(""), 30*time.Second, nil)
			specs := p.Tensors()
			if len(specs) != 2 || specs[0].Name != "w" || specs[1].Name != "b" || specs[0].Size() != classes*feat || specs[1].Size() != classes {
				t.Fatalf("tensors %v", specs)
			}
			init := p.Init(spec.Seed)
			if w, b := externtest.Init(classes, feat, spec.Seed); !slices.Equal(init[0], w) || !slices.Equal(init[1], b) {
				t.Errorf("initial values %v", init)
			}
			if p.Init(spec.Seed+1) != nil {
				t.Error("Init of another seed than the pool's: want nil")
			}
			x, y := dataset(60)
			t0, _ := p.Trainer()
			t1, _ := p.Trainer()
			idx := []int{5, 3, 9, 20, 21, 22, 40, 41, 42, 59}
			cfg := model.TrainConfig{Epochs: 2, Batch: 4, Seed: 1234567, Client: 7, Round: 3, ProxMu: 0.25}
			want := expected(init, x, y, idx, cfg)
			for i, tr := range []*Trainer{t0, t1} {
				got, loss, err := tr.Train(context.Background(), init, x, y, idx, cfg)
				if err != nil {
					t.Fatal(err)
				}
				if loss != 567 {
					t.Errorf("trainer %d: loss %v, want the seed mod 1000", i, loss)
				}
				closeTo(t, got, want)
			}
			// Half of the next client's examples are new to trainer 0.
			idx2 := []int{5, 3, 9, 20, 21, 1, 2, 4, 6, 7}
			if _, _, err := t0.Train(context.Background(), init, x, y, idx2, cfg); err != nil {
				t.Fatal(err)
			}
			if s := t0.Stats(); s.Examples != 15 || s.Requests != 2 || s.Starts != 1 || !(s.Seconds > 0) || !(s.UserSeconds > 0) {
				t.Errorf("trainer 0's stats %+v: want 15 examples sent (10, then the 5 new), 2 requests", s)
			}
			acc, loss, err := t1.Evaluate(init, x, y, nil)
			if err != nil {
				t.Fatal(err)
			}
			rows, labels := split(x, y)
			all := make([]int, 60)
			for i := range all {
				all[i] = i
			}
			correct, wantLoss := externtest.Evaluate(init[0], init[1], rows, labels, all, classes, false)
			if acc != float64(correct)/60 || math.Abs(loss-wantLoss) > 1e-9 {
				t.Errorf("evaluate: accuracy %v loss %v, want %v and %v", acc, loss, float64(correct)/60, wantLoss)
			}
			if s := p.Stats(); s.Trainers != 2 || s.Starts != 2 || s.Requests != 4 || s.Examples != 75 {
				t.Errorf("pool stats %+v: want 2 trainers, 4 requests, 75 examples sent (15, and 60 to trainer 1)", s)
			}
		})
	}
}

// expected is the fake trainer's result.
func expected(w [][]float32, x []float32, y []int32, idx []int, cfg model.TrainConfig) [][]float32 {
	rows, labels := split(x, y)
	nw, nb := externtest.Step(w[0], w[1], rows, labels, idx, classes, spec.Optimizer.LR, cfg.Epochs, cfg.ProxMu)
	return [][]float32{nw, nb}
}

func split(x []float32, y []int32) ([][]float32, []int) {
	rows := make([][]float32, len(y))
	labels := make([]int, len(y))
	for i := range rows {
		rows[i] = x[i*feat : (i+1)*feat]
		labels[i] = int(y[i])
	}
	return rows, labels
}

func closeTo(t *testing.T, got, want [][]float32) {
	t.Helper()
	for i := range want {
		for j := range want[i] {
			if d := math.Abs(float64(got[i][j] - want[i][j])); d > 1e-6 {
				t.Fatalf("tensor %d value %d: %v, want %v", i, j, got[i][j], want[i][j])
			}
		}
	}
}

// TestFaults: each way a trainer can fail gives an error that says which
// trainer, what it was doing and why: it hangs, exits (with its stderr),
// breaks the framing, speaks another version, reports its own error, or
// returns NaN, a missing, extra or misshapen tensor, a wrong example
// count or a NaN loss.
func TestFaults(t *testing.T) {
	cases := []struct {
		mode    string
		want    []string
		process bool // a ProcessError: the process is not used again
		goOnly  bool
	}{
		{"hang-start", []string{"sent no hello within 1s of its start (trainer_timeout, at least 1s for a start); stopped it"}, true, true},
		{"version", []string{"opened with a \"hello\" message of protocol 2; fedpq speaks protocol 1"}, true, false},
		{"hang-train", []string{"did not answer train within 1s (trainer_timeout); stopped it"}, true, false},
		{"crash-train", []string{"exited during train: exit status 3", "its stderr ends:", "RuntimeError: the fake trainer crashed"}, true, false},
		{"garbage", []string{"train: not a protocol frame: it starts \"epoch 1: loss 0.25", "a print to stdout?", "stopped it"}, true, false},
		{"error", []string{"its train failed:", "ValueError: the fake trainer's own error"}, false, false},
		{"nan", []string{"its train reply refused: tensor w value 3 is NaN"}, false, false},
		{"missing", []string{"its train reply refused: tensor b (shape [3]) is missing"}, false, false},
		{"extra", []string{"its train reply refused: tensor c is not one of the model's 2"}, false, false},
		{"shape", []string{"its train reply refused: tensor w has shape [4 3], want [3 4]"}, false, false},
		{"count", []string{"its train reply refused: it trained on 11 examples, but was sent 10"}, false, false},
		{"loss-nan", []string{"its train reply refused: loss NaN; want the mean training loss, a finite number >= 0"}, false, false},
	}
	x, y := dataset(60)
	idx := []int{0, 1, 2, 3, 4, 5, 6, 7, 8, 9}
	for name, cmd := range fakes(t) {
		for _, c := range cases {
			if c.goOnly && name != "go" {
				continue
			}
			t.Run(name+"/"+c.mode, func(t *testing.T) {
				if c.mode == "hang-start" {
					defer func(d time.Duration) { MinStartTimeout = d }(MinStartTimeout)
					MinStartTimeout = time.Second
				}
				var err error
				var tr *Trainer
				p, err := NewPool(Options{Command: cmd(c.mode), Timeout: time.Second}, spec)
				if err == nil {
					defer p.Close()
					tr, _ = p.Trainer()
					_, _, err = tr.Train(context.Background(), p.Init(spec.Seed), x, y, idx, model.TrainConfig{Epochs: 1, Batch: 5, Seed: 1})
				}
				if err == nil {
					t.Fatal("no error")
				}
				for _, w := range c.want {
					if !strings.Contains(err.Error(), w) {
						t.Errorf("error %q\nwant it to say %q", err, w)
					}
				}
				if !strings.Contains(err.Error(), "trainer 0 (pid ") {
					t.Errorf("error %q does not name the trainer", err)
				}
				var pe *ProcessError
				if errors.As(err, &pe) != c.process {
					t.Errorf("error %T, want a ProcessError: %v", err, c.process)
				}
			})
		}
	}
}

// TestBadCommand: a command that does not run says so, with the shell's
// words.
func TestBadCommand(t *testing.T) {
	_, err := NewPool(Options{Command: "/nonexistent/python3 trainer.py", Timeout: 5 * time.Second}, spec)
	if err == nil || !strings.Contains(err.Error(), "exited during its start: exit status 127") || !strings.Contains(err.Error(), "/nonexistent/python3") {
		t.Errorf("error %v; want the exit status and the shell's message", err)
	}
}

// TestRestart: a trainer that crashed is replaced at the next request
// (what a deployed client needs to go on), and is sent its examples again.
func TestRestart(t *testing.T) {
	for name, cmd := range fakes(t) {
		t.Run(name, func(t *testing.T) {
			p := newPool(t, cmd("crash-after=1"), 30*time.Second, nil)
			tr, _ := p.Trainer()
			x, y := dataset(60)
			idx := []int{1, 2, 3}
			cfg := model.TrainConfig{Epochs: 1, Batch: 2, Seed: 5}
			if _, _, err := tr.Train(context.Background(), p.Init(spec.Seed), x, y, idx, cfg); err == nil {
				t.Fatal("the first request: no error")
			}
			// The new process crashes at its own first train request too.
			if _, _, err := tr.Train(context.Background(), p.Init(spec.Seed), x, y, idx, cfg); err == nil || !strings.Contains(err.Error(), "exited during train") {
				t.Fatalf("the second request: %v", err)
			}
			if s := tr.Stats(); s.Starts != 2 || s.Examples != 6 {
				t.Errorf("stats %+v: want 2 starts, the 3 examples sent to each", s)
			}
			if _, _, err := tr.Evaluate(p.Init(spec.Seed), x, y, idx); err != nil {
				t.Errorf("evaluate after the crash: %v", err)
			}
		})
	}
}

// TestUpdate: a trainer may return its update instead of its weights.
func TestUpdate(t *testing.T) {
	for name, cmd := range fakes(t) {
		t.Run(name, func(t *testing.T) {
			p := newPool(t, cmd("update"), 30*time.Second, nil)
			tr, _ := p.Trainer()
			x, y := dataset(60)
			idx := []int{1, 2, 3, 30}
			cfg := model.TrainConfig{Epochs: 1, Batch: 2, Seed: 5}
			init := p.Init(spec.Seed)
			got, _, err := tr.Train(context.Background(), init, x, y, idx, cfg)
			if err != nil {
				t.Fatal(err)
			}
			closeTo(t, got, expected(init, x, y, idx, cfg))
		})
	}
}

// TestPrintsGoToStderr: what a Python trainer prints goes to stderr, which
// fedpq passes on with the trainer's number, and never into the framing.
func TestPrintsGoToStderr(t *testing.T) {
	cmd, ok := fakes(t)["python"]
	if !ok {
		t.Skip("needs /usr/bin/python3 with numpy (Debian's python3-numpy)")
	}
	var stderr bytes.Buffer // read once the pool is closed: its trainer has stopped writing
	p := newPool(t, cmd("print"), 30*time.Second, &stderr)
	tr, _ := p.Trainer()
	x, y := dataset(60)
	if _, _, err := tr.Train(context.Background(), p.Init(spec.Seed), x, y, []int{1, 2}, model.TrainConfig{Epochs: 1, Batch: 2, Seed: 5}); err != nil {
		t.Fatal(err)
	}
	p.Close()
	if !strings.Contains(stderr.String(), "trainer 0: a print to stdout, which the adapter sends to stderr\n") {
		t.Errorf("stderr %q", stderr.String())
	}
}

// TestCancel: a cancelled run stops a trainer in the middle of a request.
func TestCancel(t *testing.T) {
	p := newPool(t, externtest.Command("hang-train"), time.Hour, nil)
	tr, _ := p.Trainer()
	x, y := dataset(60)
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	_, _, err := tr.Train(ctx, p.Init(spec.Seed), x, y, []int{1}, model.TrainConfig{Epochs: 1, Batch: 1})
	if err == nil || !strings.Contains(err.Error(), "stopped during train: context deadline exceeded") {
		t.Errorf("error %v", err)
	}
}

// TestCloseKillsStragglers: a trainer that does not exit after bye is
// killed.
func TestCloseKillsStragglers(t *testing.T) {
	defer func(g time.Duration) { closeGrace = g }(closeGrace)
	closeGrace = 200 * time.Millisecond
	p, err := NewPool(Options{Command: externtest.Command("slow-exit"), Timeout: 5 * time.Second}, spec)
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	p.Close()
	if d := time.Since(start); d > 5*time.Second {
		t.Errorf("Close took %v", d)
	}
}

// TestDescribeMismatch: every process of a pool must describe the model
// the first one did.
func TestDescribeMismatch(t *testing.T) {
	mark := t.TempDir() + "/started"
	cmd := fmt.Sprintf(`if [ -e %q ]; then %s; fi; touch %q; %s`, mark, externtest.Command("other"), mark, externtest.Command(""))
	p := newPool(t, cmd, 30*time.Second, nil)
	p.Trainer()
	tr, _ := p.Trainer()
	x, y := dataset(60)
	_, _, err := tr.Train(context.Background(), p.Init(spec.Seed), x, y, []int{1}, model.TrainConfig{Epochs: 1, Batch: 1})
	if err == nil || !strings.Contains(err.Error(), "trainer 1 (pid ") || !strings.Contains(err.Error(), "it describes another model than trainer 0 did: tensor 0 is w [3 5], not w [3 4]") {
		t.Errorf("error %v", err)
	}
}

// TestFraming: a frame's magic, sizes and header are checked before its
// body is read.
func TestFraming(t *testing.T) {
	var good bytes.Buffer
	w := bufio.NewWriter(&good)
	h := &frame.Header{Type: "trained", Loss: frame.Float(math.Inf(-1)), Tensors: []frame.Array{{Name: "w", DType: "float32", Shape: []int{2}}}}
	if err := frame.Write(w, h, frame.F32Bytes([]float32{1, 2})); err != nil {
		t.Fatal(err)
	}
	f, err := frame.Read(bufio.NewReader(bytes.NewReader(good.Bytes())))
	if err != nil || !math.IsInf(float64(f.H.Loss), -1) || frame.F32s(f.Body)[1] != 2 {
		t.Fatalf("round trip: %+v, %v", f, err)
	}
	if err := frame.Write(w, h, frame.F32Bytes([]float32{1})); err == nil {
		t.Error("writing a body that is not the header's arrays: no error")
	}
	build := func(magic string, hn uint32, bn uint64, hdr string, body []byte) []byte {
		b := []byte(magic)
		b = binary.LittleEndian.AppendUint32(b, hn)
		b = binary.LittleEndian.AppendUint64(b, bn)
		return append(append(b, hdr...), body...)
	}
	headerOnly := func(h string) []byte { return build("fqtr", uint32(len(h)), 0, h, nil) }
	hdr := `{"type":"trained","tensors":[{"name":"w","dtype":"float32","shape":[2]}]}`
	for _, c := range []struct {
		name string
		b    []byte
		want string
	}{
		{"truncated prefix", []byte("fqtr\x01"), "the stream ended after"},
		{"bad magic", []byte("Traceback (most recent call last):\n"), `it starts "Traceback (most recent call last):.`},
		{"huge header", build("fqtr", 1<<30, 0, "", nil), "a header of 1073741824 bytes"},
		{"header not JSON", build("fqtr", 3, 0, "{x}", nil), "its header is not the JSON of a message"},
		{"body size", build("fqtr", uint32(len(hdr)), 4, hdr, make([]byte, 4)), "a body of 4 bytes, but its arrays take 8"},
		{"truncated body", build("fqtr", uint32(len(hdr)), 8, hdr, make([]byte, 4)), "the stream ended inside a trained message's body"},
		{"bad dtype", headerOnly(`{"type":"x","arrays":[{"name":"a","dtype":"int8","shape":[1]}]}`), `element type "int8"`},
		{"negative shape", headerOnly(`{"type":"x","arrays":[{"name":"a","dtype":"int32","shape":[-1]}]}`), "has shape [-1]"},
		{"bad loss", headerOnly(`{"type":"x","loss":"lots"}`), "want a number, nan, inf or -inf"},
	} {
		_, err := frame.Read(bufio.NewReader(bytes.NewReader(c.b)))
		if err == nil || !strings.Contains(err.Error(), c.want) || !errors.Is(err, frame.ErrFraming) {
			t.Errorf("%s: %v; want a framing error saying %q", c.name, err, c.want)
		}
	}
}

// BenchmarkTrain is a train request's round trip in steady state (the
// process holds the examples) for a model of 7,850 parameters (MNIST's
// linear model: cnn2 has 6,422) and a client of 600 examples, with the Go
// fake, whose training is a pass over the examples: fedpq's side of the
// protocol, the framing both ways and the process switches.
func BenchmarkTrain(b *testing.B) {
	sp := Spec{Seed: 1, Input: []int{28, 28, 1}, Classes: 10, Optimizer: spec.Optimizer}
	p, err := NewPool(Options{Command: externtest.Command(""), Timeout: time.Minute}, sp)
	if err != nil {
		b.Fatal(err)
	}
	defer p.Close()
	tr, _ := p.Trainer()
	n := 60000
	x, y := make([]float32, n*784), make([]int32, n)
	for i := range y {
		y[i] = int32(i % 10)
	}
	w := p.Init(1)
	idx := make([]int, 600)
	for i := range idx {
		idx[i] = i
	}
	cfg := model.TrainConfig{Epochs: 1, Batch: 10, Seed: 1}
	if _, _, err := tr.Train(context.Background(), w, x, y, idx, cfg); err != nil {
		b.Fatal(err)
	}
	b.ResetTimer()
	for range b.N {
		if _, _, err := tr.Train(context.Background(), w, x, y, idx, cfg); err != nil {
			b.Fatal(err)
		}
	}
}
