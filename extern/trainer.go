package extern

import (
	"context"
	"errors"
	"fmt"
	"math"
	"slices"
	"sync"
	"time"
	"unsafe"

	"github.com/fedpq/fedpq/extern/internal/frame"
	"github.com/fedpq/fedpq/model"
)

// Trainer trains and evaluates through one trainer process of its pool;
// it implements fl.Trainer. A process that died, hung or broke the
// protocol is replaced by a new one at the next request, so a deployed
// client can go on with its next round. A Trainer is not safe for
// concurrent use.
type Trainer struct {
	pool   *Pool
	id     int
	handed bool

	mu       sync.Mutex // held while a request (or the start) runs
	proc     *process
	hello    string // the process's name for itself
	startErr error  // a background start's failure, reported once
	datasets map[dataKey]*sent
	nextData int
	stats    Stats
}

// dataKey identifies a dataset by its examples' and labels' backing
// arrays: fedpq's datasets are never modified once loaded, but the same
// examples may come with other labels (a label-flip attacker's copy, fl's
// FlipLabels), which are then another dataset.
type dataKey struct {
	x *float32
	n int
	y *int32
}

// sent is what the process holds of one dataset.
type sent struct {
	id   string
	have []bool
}

// Stats are the trainer's counts so far.
func (t *Trainer) Stats() Stats {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.stats
}

// ensure starts the process if there is none or it broke: hello, then
// setup. t.mu is held.
func (t *Trainer) ensure() error {
	if t.proc != nil && t.proc.broken == nil {
		return nil
	}
	if t.proc != nil {
		t.proc.close(0)
		t.proc = nil
	}
	p := t.pool
	start := time.Now()
	proc, err := startProcess(t.id, &p.opts)
	if err != nil {
		return err
	}
	t.proc, t.datasets = proc, map[dataKey]*sent{}
	t.stats.Starts++
	context.AfterFunc(p.closing, func() { proc.stop("fedpq closed the trainer pool") })
	f, err := proc.readHello(p.startTimeout())
	if err != nil {
		return err
	}
	if f.H.Type != "hello" || f.H.Protocol != Protocol {
		proc.broken = &ProcessError{Trainer: proc.label(), Command: proc.command,
			Reason: fmt.Sprintf("opened with a %q message of protocol %d; fedpq speaks protocol %d and waits for a hello", f.H.Type, f.H.Protocol, Protocol)}
		proc.stop("wrong hello")
		return proc.broken
	}
	t.hello = f.H.Trainer
	h := &frame.Header{Type: "setup", Protocol: Protocol, Seed: p.spec.Seed, InputShape: p.spec.Input, Classes: p.spec.Classes, Threads: p.threads()}
	f, err = proc.request(context.Background(), p.startTimeout(), "setup", h)
	if err == nil {
		err = p.describe(t, f)
	}
	if err != nil {
		// A process without a model is of no use: the next request
		// starts another.
		proc.broken = err
		proc.stop("its setup failed")
		return err
	}
	t.stats.StartSeconds += elapsed(start)
	return nil
}

// begin waits for the trainer's start, restarting a broken process.
// t.mu is held.
func (t *Trainer) begin() error {
	if err := t.startErr; err != nil {
		t.startErr = nil
		return err
	}
	return t.ensure()
}

// Train trains the model from weights on the examples idx of (x, y) in
// the trainer process, with cfg's epochs, batch, seed, client, round and
// FedProx mu and the pool's optimizer, and returns the trained weights and the mean loss
// the trainer reports. The examples of idx that the process does not hold
// yet are sent first.
func (t *Trainer) Train(ctx context.Context, weights [][]float32, x []float32, y []int32, idx []int, cfg model.TrainConfig) ([][]float32, float64, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if err := t.begin(); err != nil {
		return nil, 0, err
	}
	if cfg.Epochs < 1 || cfg.Batch < 1 || len(idx) == 0 {
		return nil, 0, fmt.Errorf("trainer: %d epochs of batch %d on %d examples", cfg.Epochs, cfg.Batch, len(idx))
	}
	if !(cfg.ProxMu >= 0) || math.IsInf(cfg.ProxMu, 0) {
		return nil, 0, fmt.Errorf("trainer: FedProx mu %v, want a finite value >= 0", cfg.ProxMu)
	}
	start := time.Now()
	ds, err := t.send(ctx, x, y, idx)
	if err != nil {
		return nil, 0, err
	}
	o := t.pool.opts
	opt := t.pool.spec.Optimizer
	h := &frame.Header{Type: "train", Dataset: ds, Client: cfg.Client, Round: cfg.Round, Seed: cfg.Seed,
		Epochs: cfg.Epochs, Batch: cfg.Batch, Optimizer: opt.Name, LR: opt.LR, Momentum: opt.Momentum,
		WeightDecay: opt.WeightDecay, ProxMu: cfg.ProxMu, Threads: t.pool.threads()}
	body, err := t.weights(h, weights)
	if err != nil {
		return nil, 0, err
	}
	h.Arrays = []frame.Array{{Name: "indices", DType: "int32", Shape: []int{len(idx)}}}
	body = append(body, frame.I32Bytes(idx))
	f, err := t.proc.request(ctx, o.Timeout, "train", h, body...)
	if err != nil {
		return nil, 0, err
	}
	t.count(h, f, start)
	bad := func(format string, a ...any) error {
		return &ReplyError{Trainer: t.proc.label(), What: "train", Reason: fmt.Sprintf(format, a...)}
	}
	if f.H.Type != "trained" {
		t.proc.broken = bad("a %q message, want trained", f.H.Type)
		t.proc.stop("wrong reply")
		return nil, 0, t.proc.broken
	}
	if f.H.Examples != len(idx) {
		return nil, 0, bad("it trained on %d examples, but was sent %d", f.H.Examples, len(idx))
	}
	if loss := float64(f.H.Loss); !(loss >= 0 && loss <= math.MaxFloat32) {
		return nil, 0, bad("loss %v; want the mean training loss, a finite number >= 0", loss)
	}
	out, err := t.tensors(f, t.pool.specs, "train")
	if err != nil {
		return nil, 0, err
	}
	switch f.H.Result {
	case "", "weights":
	case "update":
		for i, w := range out {
			for j := range w {
				w[j] += weights[i][j]
				if v := w[j]; math.IsInf(float64(v), 0) {
					return nil, 0, bad("tensor %s[%d]: the weight plus the update is %v", t.pool.specs[i].Name, j, v)
				}
			}
		}
	default:
		return nil, 0, bad("result %q: want weights or update", f.H.Result)
	}
	return out, float64(f.H.Loss), nil
}

// Evaluate returns the accuracy and mean loss of weights on the examples
// idx of (x, y) (nil: all), computed by the trainer process.
func (t *Trainer) Evaluate(weights [][]float32, x []float32, y []int32, idx []int) (acc, loss float64, err error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if err := t.begin(); err != nil {
		return 0, 0, err
	}
	if idx == nil {
		idx = make([]int, len(y))
		for i := range idx {
			idx[i] = i
		}
	}
	if len(idx) == 0 {
		return 0, 0, errors.New("trainer: no examples to evaluate")
	}
	start := time.Now()
	ctx := context.Background()
	ds, err := t.send(ctx, x, y, idx)
	if err != nil {
		return 0, 0, err
	}
	h := &frame.Header{Type: "evaluate", Dataset: ds, Threads: t.pool.threads()}
	body, err := t.weights(h, weights)
	if err != nil {
		return 0, 0, err
	}
	h.Arrays = []frame.Array{{Name: "indices", DType: "int32", Shape: []int{len(idx)}}}
	body = append(body, frame.I32Bytes(idx))
	f, err := t.proc.request(ctx, t.pool.opts.Timeout, "evaluate", h, body...)
	if err != nil {
		return 0, 0, err
	}
	t.count(h, f, start)
	bad := func(format string, a ...any) error {
		return &ReplyError{Trainer: t.proc.label(), What: "evaluate", Reason: fmt.Sprintf(format, a...)}
	}
	switch l := float64(f.H.Loss); {
	case f.H.Type != "evaluated":
		t.proc.broken = bad("a %q message, want evaluated", f.H.Type)
		t.proc.stop("wrong reply")
		return 0, 0, t.proc.broken
	case len(f.H.Tensors)+len(f.H.Arrays) > 0:
		return 0, 0, bad("it carries arrays; an evaluation reply has none")
	case f.H.Examples != len(idx):
		return 0, 0, bad("it evaluated %d examples, but was sent %d", f.H.Examples, len(idx))
	case f.H.Correct < 0 || f.H.Correct > len(idx):
		return 0, 0, bad("%d correct of %d", f.H.Correct, len(idx))
	case math.IsNaN(l) || math.IsInf(l, 0) || l < 0:
		return 0, 0, bad("loss %v; want the mean loss, a finite number >= 0", l)
	}
	n := float64(len(idx))
	return float64(f.H.Correct) / n, float64(f.H.Loss), nil
}

// count adds a request and its reply to the stats.
func (t *Trainer) count(h *frame.Header, f *frame.Frame, start time.Time) {
	s := &t.stats
	s.Requests++
	s.Seconds += elapsed(start)
	if v := f.H.Seconds; v > 0 && !math.IsInf(v, 0) {
		s.UserSeconds += v
	}
	n, _ := h.BodySize()
	s.BytesSent += int64(n)
	s.BytesRead += int64(len(f.Body))
}

// weights sets h's tensors to the model's and returns their bytes, after
// checking that weights fit the model.
func (t *Trainer) weights(h *frame.Header, weights [][]float32) ([][]byte, error) {
	specs := t.pool.specs
	if len(weights) != len(specs) {
		return nil, fmt.Errorf("trainer: %d weight tensors for a model of %d", len(weights), len(specs))
	}
	body := make([][]byte, len(specs))
	h.Tensors = make([]frame.Array, len(specs))
	for i, s := range specs {
		if len(weights[i]) != s.Size() {
			return nil, fmt.Errorf("trainer: tensor %s has %d values, want %d (shape %v)", s.Name, len(weights[i]), s.Size(), s.Shape)
		}
		h.Tensors[i] = frame.Array{Name: s.Name, DType: "float32", Shape: s.Shape}
		body[i] = frame.F32Bytes(weights[i])
	}
	return body, nil
}

// tensors reads a reply's tensors: exactly the model's (by name, in any
// order), each of its shape, every value finite; in the model's order.
func (t *Trainer) tensors(f *frame.Frame, specs []model.TensorSpec, what string) ([][]float32, error) {
	bad := func(format string, a ...any) error {
		return &ReplyError{Trainer: t.proc.label(), What: what, Reason: fmt.Sprintf(format, a...)}
	}
	if len(f.H.Arrays) > 0 {
		return nil, bad("it carries %d arrays besides its tensors (%s...)", len(f.H.Arrays), f.H.Arrays[0].Name)
	}
	at := map[string]int{}
	off := 0
	offsets := make([]int, len(f.H.Tensors))
	for i, a := range f.H.Tensors {
		if _, dup := at[a.Name]; dup {
			return nil, bad("tensor %s twice", a.Name)
		}
		at[a.Name] = i
		offsets[i] = off
		off += 4 * a.Elems()
	}
	out := make([][]float32, len(specs))
	for i, s := range specs {
		j, ok := at[s.Name]
		if !ok {
			return nil, bad("tensor %s (shape %v) is missing", s.Name, s.Shape)
		}
		delete(at, s.Name)
		a := f.H.Tensors[j]
		if a.DType != "float32" {
			return nil, bad("tensor %s is %s, want float32", s.Name, a.DType)
		}
		if !slices.Equal(a.Shape, s.Shape) {
			return nil, bad("tensor %s has shape %v, want %v", s.Name, a.Shape, s.Shape)
		}
		w := frame.F32s(f.Body[offsets[j] : offsets[j]+4*s.Size()])
		for k, v := range w {
			if math.IsNaN(float64(v)) || math.IsInf(float64(v), 0) {
				return nil, bad("tensor %s value %d is %v", s.Name, k, v)
			}
		}
		out[i] = w
	}
	for name := range at {
		return nil, bad("tensor %s is not one of the model's %d", name, len(specs))
	}
	return out, nil
}

// send makes sure the process holds the examples idx of (x, y), sending
// those it lacks in one data message, and returns the dataset's id.
func (t *Trainer) send(ctx context.Context, x []float32, y []int32, idx []int) (string, error) {
	spec := t.pool.spec
	feat := 1
	for _, d := range spec.Input {
		feat *= d
	}
	n := len(y)
	if len(x) != n*feat || n == 0 {
		return "", fmt.Errorf("trainer: %d feature values for %d examples of shape %v", len(x), n, spec.Input)
	}
	if n > math.MaxInt32 {
		return "", fmt.Errorf("trainer: %d examples, more than the protocol's int32 indices", n)
	}
	key := dataKey{unsafe.SliceData(x), len(x), unsafe.SliceData(y)}
	ds := t.datasets[key]
	if ds == nil {
		ds = &sent{id: fmt.Sprintf("d%d", t.nextData), have: make([]bool, n)}
		t.nextData++
		t.datasets[key] = ds
	}
	var missing []int
	for _, i := range idx {
		if i < 0 || i >= n {
			return "", fmt.Errorf("trainer: example index %d out of range [0, %d)", i, n)
		}
		if !ds.have[i] {
			ds.have[i] = true // once: idx may repeat an example
			missing = append(missing, i)
		}
	}
	if len(missing) == 0 {
		return ds.id, nil
	}
	start := time.Now()
	rows := make([]float32, 0, len(missing)*feat)
	labels := make([]int, len(missing))
	for j, i := range missing {
		if y[i] < 0 || int(y[i]) >= spec.Classes {
			ds.unmark(missing)
			return "", fmt.Errorf("trainer: example %d has label %d, want [0, %d)", i, y[i], spec.Classes)
		}
		rows = append(rows, x[i*feat:(i+1)*feat]...)
		labels[j] = int(y[i])
	}
	h := &frame.Header{Type: "data", Dataset: ds.id, Size: n, InputShape: spec.Input, Arrays: []frame.Array{
		{Name: "indices", DType: "int32", Shape: []int{len(missing)}},
		{Name: "x", DType: "float32", Shape: append([]int{len(missing)}, spec.Input...)},
		{Name: "y", DType: "int32", Shape: []int{len(missing)}},
	}}
	f, err := t.proc.request(ctx, t.pool.opts.Timeout, "data", h, frame.I32Bytes(missing), frame.F32Bytes(rows), frame.I32Bytes(labels))
	if err != nil {
		ds.unmark(missing)
		return "", err
	}
	if f.H.Type != "ok" {
		ds.unmark(missing)
		t.proc.broken = &ReplyError{Trainer: t.proc.label(), What: "data", Reason: fmt.Sprintf("a %q message, want ok", f.H.Type)}
		t.proc.stop("wrong reply")
		return "", t.proc.broken
	}
	t.stats.Examples += int64(len(missing))
	t.stats.DataSeconds += elapsed(start)
	b, _ := h.BodySize()
	t.stats.BytesSent += int64(b)
	return ds.id, nil
}

func (s *sent) unmark(idx []int) {
	for _, i := range idx {
		s.have[i] = false
	}
}

// closeGrace is how long a trainer has to exit after its bye.
var closeGrace = 5 * time.Second

// close stops the trainer's process.
func (t *Trainer) close() {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.proc != nil {
		t.proc.close(closeGrace)
		t.proc = nil
	}
}
