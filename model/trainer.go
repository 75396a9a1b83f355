package model

import (
	"context"
	"errors"
	"fmt"
	"math"
	"sync"

	"github.com/gomlx/compute"
	"github.com/gomlx/compute/dtypes"
	"github.com/gomlx/compute/gobackend"
	"github.com/gomlx/compute/shapes"
	. "github.com/gomlx/gomlx/core/graph"
	"github.com/gomlx/gomlx/support/exceptions"

	"github.com/fedpq/fedpq/corr"
)

// Optimizer configures local training. Name is "sgd" (with optional
// heavy-ball Momentum, PyTorch's convention: v = m*v + g, w -= LR*v) or
// "adam" (betas 0.9 and 0.999, epsilon 1e-8, bias-corrected as in
// PyTorch). WeightDecay adds WeightDecay*w to every gradient (L2, PyTorch's
// weight_decay, not AdamW's decoupled decay).
type Optimizer struct {
	Name                      string
	LR, Momentum, WeightDecay float64
}

func (o Optimizer) validate() error {
	switch o.Name {
	case "sgd", "adam":
	default:
		return fmt.Errorf("model: unknown optimizer %q (want sgd or adam)", o.Name)
	}
	if !(o.LR > 0) || math.IsInf(o.LR, 0) {
		return fmt.Errorf("model: learning rate %v, want a finite positive value", o.LR)
	}
	if !(o.Momentum >= 0 && o.Momentum < 1) {
		return fmt.Errorf("model: momentum %v, want [0, 1)", o.Momentum)
	}
	if o.Momentum != 0 && o.Name == "adam" {
		return fmt.Errorf("model: adam takes no momentum (its betas are fixed)")
	}
	if !(o.WeightDecay >= 0) || math.IsInf(o.WeightDecay, 0) {
		return fmt.Errorf("model: weight decay %v, want a finite value >= 0", o.WeightDecay)
	}
	return nil
}

// adamScalars are Adam's step-dependent scalars for step s (from 0) of a
// Train call: the bias-corrected step size lr/(1-beta1^t) and
// sqrt(1-beta2^t), t = s+1, PyTorch's bias corrections, computed in
// float64 so that both engines use the same float32 values.
func (o Optimizer) adamScalars(s int) (lrt, bc2 float32) {
	t := float64(s + 1)
	return float32(o.LR / (1 - math.Pow(adamBeta1, t))), float32(math.Sqrt(1 - math.Pow(adamBeta2, t)))
}

// slots is the number of optimizer state tensors per parameter tensor.
func (o Optimizer) slots() int {
	switch {
	case o.Name == "adam":
		return 2 // first and second moments
	case o.Momentum > 0:
		return 1 // velocity
	}
	return 0
}

const (
	adamBeta1 = 0.9
	adamBeta2 = 0.999
	adamEps   = 1e-8
	// evalBatch is the batch of the evaluation graph: large enough that the
	// matrix products are efficient, small enough that activations of the
	// largest model stay a few tens of MB.
	evalBatch = 256
)

// TrainConfig is one client's local training: Epochs passes over its
// examples in minibatches of Batch, shuffled per epoch, with the shuffle and
// dropout drawn from streams derived from Seed (which the caller makes
// distinct per client and round).
type TrainConfig struct {
	Epochs, Batch int
	Seed          uint64
	// Client and Round say whose training this is. fedpq's engines ignore
	// them; an external trainer (package extern) passes them on to the
	// user's code.
	Client, Round int
	// ProxMu is FedProx's proximal weight mu (Li et al., "Federated
	// Optimization in Heterogeneous Networks", 2020): local training
	// minimizes the loss plus (mu/2) ||w - w0||^2, w0 the weights Train
	// starts from (a round's global model), which keeps a client whose
	// data differ from the others' from drifting far from the global
	// model. Every step's gradient gains mu (w - w0) before weight decay,
	// momentum or Adam see it, as when PyTorch's FedProx implementations
	// add the term to the loss. The loss Train reports is the data loss
	// alone. 0 is plain training, bit for bit.
	ProxMu float64
}

// goBackend is the process's Go backend, configured to run the ops of a
// graph one after another ("ops_sequential"; each matrix product still
// uses every core). In its default mode the backend runs independent ops
// concurrently on its worker pool, and a large matrix product then waits
// on the same pool for helpers (workerspool.Pool.Saturate): when as many
// products as the pool has slots are ready together, as the col2im of a
// convolution makes them, every slot waits and the step deadlocks
// (compute v0.1.6). Sequential ops cannot deadlock, and concurrent
// Trainers in different goroutines each run their own ops.
var goBackend = sync.OnceValues(func() (compute.Backend, error) {
	return gobackend.New("ops_sequential")
})

// Engine selects how a Trainer computes. Both engines train the same
// models with the same semantics (a step's loss is the mean over its
// examples, pooling routes the gradient to the first maximum, the plan's
// dropout masks, PyTorch's optimizers); they differ in float32 rounding
// only, which the tests bound.
type Engine string

const (
	Native Engine = "native" // fedpq's own kernels (model/internal/gemm): the default, fastest on CPUs
	GoMLX  Engine = "gomlx"  // GoMLX graphs on its pure-Go backend: the reference, and the path to XLA/GPUs
)

// defaultEngine is NewTrainer's engine. It is a variable only so that the
// package's tests can run their behavioural tests on each engine.
var defaultEngine = Native

// Trainer trains and evaluates one model with one optimizer on one
// engine. It validates every input and result itself, so the engines only
// compute. Weights are arguments of each call, so one Trainer serves any
// number of clients; it keeps what it prepared (compiled graphs,
// workspaces) between calls. A Trainer is not safe for concurrent use: use
// one per worker goroutine.
type Trainer struct {
	m    *Model
	opt  Optimizer
	kind Engine
	eng  engine
}

// engine computes for a Trainer, on inputs the Trainer has validated.
type engine interface {
	// train runs the steps of pl from weights and returns the new weights
	// (fresh slices) and the mean loss over all the examples of all steps.
	train(ctx context.Context, weights [][]float32, x []float32, y []int32, pl plan) ([][]float32, float64, error)
	// evaluate returns the number of correct predictions and the summed
	// cross-entropy over the examples idx.
	evaluate(weights [][]float32, x []float32, y []int32, idx []int) (correct, loss float64, err error)
	// setThreads sets the goroutines one step may use.
	setThreads(n int)
}

// NewTrainer returns a Trainer for m with optimizer opt on the native
// engine.
func (m *Model) NewTrainer(opt Optimizer) (*Trainer, error) {
	return m.NewTrainerOn(defaultEngine, opt)
}

// NewTrainerOn returns a Trainer for m with optimizer opt on engine e.
func (m *Model) NewTrainerOn(e Engine, opt Optimizer) (*Trainer, error) {
	if err := opt.validate(); err != nil {
		return nil, err
	}
	t := &Trainer{m: m, opt: opt, kind: e}
	var err error
	switch e {
	case Native:
		t.eng, err = newNativeEngine(m, opt)
	case GoMLX:
		t.eng, err = newGoMLXEngine(m, opt)
	default:
		err = fmt.Errorf("model: unknown engine %q (want %q or %q)", e, Native, GoMLX)
	}
	if err != nil {
		return nil, err
	}
	return t, nil
}

// SetThreads sets how many goroutines one training step may use (n < 1
// means 1). The native engine splits its matrix products and element-wise
// passes over them; its default is 1 because the round engine already
// trains one client per core. The GoMLX engine ignores it (its backend
// decides).
func (t *Trainer) SetThreads(n int) { t.eng.setThreads(max(n, 1)) }

// Engine is the trainer's engine.
func (t *Trainer) Engine() Engine { return t.kind }

// Model is the trainer's model.
func (t *Trainer) Model() *Model { return t.m }

// gomlxEngine holds compiled training and evaluation graphs of one model
// and optimizer, and the input buffers they read. Weights are inputs of
// the graphs, so one engine serves any number of clients without
// recompiling.
type gomlxEngine struct {
	m        *Model
	opt      Optimizer
	backend  compute.Backend
	programs map[trainKey]*program // training graphs
	eval     *program
}

// trainKey tells training graphs apart: by batch size, and whether the
// graph adds FedProx's proximal term (a separate graph, so that training
// without it runs exactly the graph it always did).
type trainKey struct {
	batch int
	prox  bool
}

// program is one compiled graph and its reusable, host-shared input buffers.
type program struct {
	g     *Graph
	batch int
	x     []float32   // the batch, feature-major (see Model.batchShape)
	y     []int32     // [batch]
	wt    []float32   // per-example weight of the loss (0 for padding)
	masks [][]float32 // dropout masks (training only)
	in    []compute.Buffer
	fixed int // index in in of the first data buffer (x); params and state come before
	prox  int // index in in of FedProx's mu, followed by w0 (prox graphs only)
}

// newGoMLXEngine compiles the evaluation graph now and a training graph
// per batch size on first use (each is then cached: clients only swap
// weights).
func newGoMLXEngine(m *Model, opt Optimizer) (*gomlxEngine, error) {
	b, err := goBackend()
	if err != nil {
		return nil, err
	}
	t := &gomlxEngine{m: m, opt: opt, backend: b, programs: map[trainKey]*program{}}
	if t.eval, err = t.build(evalBatch, false, false); err != nil {
		return nil, err
	}
	return t, nil
}

// setThreads is a no-op: the Go backend sizes its own worker pool.
func (t *gomlxEngine) setThreads(int) {}

// build compiles a training (train) or evaluation graph for a batch size,
// with FedProx's proximal term if prox.
//
// Training inputs: the parameters, the optimizer state (slots per
// parameter), for adam two scalars (the bias-corrected step size and
// sqrt(1-beta2^t)), with prox FedProx's mu and the weights training
// started from (w0), then x, y, the loss weights and the dropout masks.
// Outputs: the new parameters, the new state and the step's loss. The
// loss is sum_i wt_i * CE_i, with wt_i = 1/(examples in the batch) for real
// examples and 0 for padding, so a short last batch is a mean over its own
// examples, as in PyTorch without drop_last, at the price of computing the
// padded rows.
//
// Evaluation inputs: the parameters, x, y, wt (1 or 0); outputs: the
// weighted sum of cross-entropies and the weighted count of correct
// predictions.
func (t *gomlxEngine) build(batch int, train, prox bool) (p *program, err error) {
	m := t.m
	p = &program{batch: batch}
	kind := "evaluation"
	if train {
		kind = "training"
	}
	err = exceptions.TryCatch[error](func() {
		g := NewGraph(t.backend, fmt.Sprintf("%s-%s-%d", m.arch, kind, batch))
		params := make([]*Node, len(m.specs))
		for i, s := range m.specs {
			params[i] = Parameter(g, s.Name, f32(s.Shape...))
		}
		slots := 0
		var state []*Node
		var lrt, bc2, mu *Node
		var w0 []*Node
		if train {
			slots = t.opt.slots()
			for k := range slots {
				for _, s := range m.specs {
					state = append(state, Parameter(g, fmt.Sprintf("%s/slot%d", s.Name, k), f32(s.Shape...)))
				}
			}
			if t.opt.Name == "adam" {
				lrt = Parameter(g, "adam/lr_t", f32())
				bc2 = Parameter(g, "adam/bc2", f32())
			}
			if prox {
				p.prox = g.NumParameters()
				mu = Parameter(g, "prox/mu", f32())
				for _, s := range m.specs {
					w0 = append(w0, Parameter(g, s.Name+"/start", f32(s.Shape...)))
				}
			}
		}
		p.fixed = g.NumParameters()
		x := Parameter(g, "x", f32(m.batchShape(batch)...))
		y := Parameter(g, "y", shapes.Make(dtypes.Int32, batch))
		wt := Parameter(g, "wt", f32(batch))
		var masks []*Node
		if train {
			for i, d := range m.dropoutShapes(batch) {
				masks = append(masks, Parameter(g, fmt.Sprintf("dropout%d", i), f32(d...)))
			}
		}
		logits, passes := m.forward(x, params, masks)
		ce, dLogits := lossGrad(logits, y, wt)
		loss := ReduceAllSum(Mul(ce, wt))
		var outs []*Node
		if train {
			grads := m.backward(params, masks, passes, dLogits)
			if prox {
				for i, w := range params {
					grads[i] = Add(grads[i], Mul(mu, Sub(w, w0[i])))
				}
			}
			outs = t.update(params, grads, state, lrt, bc2)
			outs = append(outs, loss)
		} else {
			correct := ConvertDType(Equal(ArgMax(logits, 0, dtypes.Int32), y), dtypes.Float32)
			outs = []*Node{loss, ReduceAllSum(Mul(correct, wt))}
		}
		if err := g.Compile(outs...); err != nil {
			panic(err)
		}
		p.g = g
	})
	if err != nil {
		return nil, fmt.Errorf("model: building the %s graph of %s: %w", kind, m.arch, err)
	}
	// Host-shared data buffers: written in place before each step, never donated.
	newShared := func(shape shapes.Shape) (compute.Buffer, any, error) {
		return t.backend.NewSharedBuffer(0, shape)
	}
	p.in = make([]compute.Buffer, p.g.NumParameters())
	buf, flat, err := newShared(f32(m.batchShape(batch)...))
	if err != nil {
		return nil, err
	}
	p.in[p.fixed], p.x = buf, flat.([]float32)
	if buf, flat, err = newShared(shapes.Make(dtypes.Int32, batch)); err != nil {
		return nil, err
	}
	p.in[p.fixed+1], p.y = buf, flat.([]int32)
	if buf, flat, err = newShared(f32(batch)); err != nil {
		return nil, err
	}
	p.in[p.fixed+2], p.wt = buf, flat.([]float32)
	if train {
		for i, d := range m.dropoutShapes(batch) {
			if buf, flat, err = newShared(f32(d...)); err != nil {
				return nil, err
			}
			p.in[p.fixed+3+i] = buf
			p.masks = append(p.masks, flat.([]float32))
		}
	}
	return p, nil
}

// update builds the optimizer step: the new parameters followed by the new
// state, in the order of the state inputs.
func (t *gomlxEngine) update(params, grads, state []*Node, lrt, bc2 *Node) []*Node {
	o := t.opt
	n := len(params)
	newP := make([]*Node, n)
	newS := make([]*Node, len(state))
	for i, w := range params {
		g := grads[i]
		if o.WeightDecay > 0 {
			g = Add(g, MulScalar(w, o.WeightDecay))
		}
		switch {
		case o.Name == "adam":
			mo := Add(MulScalar(state[i], adamBeta1), MulScalar(g, 1-adamBeta1))
			v := Add(MulScalar(state[n+i], adamBeta2), MulScalar(Square(g), 1-adamBeta2))
			// PyTorch: w -= lr/(1-b1^t) * m / (sqrt(v)/sqrt(1-b2^t) + eps).
			denom := AddScalar(Div(Sqrt(v), bc2), adamEps)
			newP[i] = Sub(w, Mul(lrt, Div(mo, denom)))
			newS[i], newS[n+i] = mo, v
		case o.Momentum > 0:
			v := Add(MulScalar(state[i], o.Momentum), g)
			newP[i] = Sub(w, MulScalar(v, o.LR))
			newS[i] = v
		default:
			newP[i] = Sub(w, MulScalar(g, o.LR))
		}
	}
	return append(newP, newS...)
}

// program returns the training program for a batch size, with FedProx's
// term if prox, compiling it on first use.
func (t *gomlxEngine) program(batch int, prox bool) (*program, error) {
	k := trainKey{batch, prox}
	if p, ok := t.programs[k]; ok {
		return p, nil
	}
	p, err := t.build(batch, true, prox)
	if err != nil {
		return nil, err
	}
	t.programs[k] = p
	return p, nil
}

// checkData validates the dataset and the selected examples, and returns
// the number of examples in x.
func (t *Trainer) checkData(x []float32, y []int32, idx []int) (int, error) {
	feat := t.m.Features()
	if len(x)%feat != 0 {
		return 0, fmt.Errorf("model: %d feature values is not a multiple of %d (input %v)", len(x), feat, t.m.input)
	}
	n := len(x) / feat
	if len(y) != n {
		return 0, fmt.Errorf("model: %d labels for %d examples", len(y), n)
	}
	for _, i := range idx {
		if i < 0 || i >= n {
			return 0, fmt.Errorf("model: example index %d out of range [0, %d)", i, n)
		}
		if y[i] < 0 || int(y[i]) >= t.m.classes {
			return 0, fmt.Errorf("model: example %d has label %d, want [0, %d)", i, y[i], t.m.classes)
		}
		if j := nonFinite(x[i*feat : (i+1)*feat]); j >= 0 {
			return 0, fmt.Errorf("model: example %d has a feature %v", i, x[i*feat+j])
		}
	}
	return n, nil
}

// load copies weights into new device buffers (the Go backend's "device"
// is host memory, so this is one copy).
func (t *gomlxEngine) load(weights [][]float32) ([]compute.Buffer, error) {
	bufs := make([]compute.Buffer, len(weights))
	for i, w := range weights {
		b, err := t.backend.BufferFromFlatData(0, w, f32(t.m.specs[i].Shape...))
		if err != nil {
			finalize(bufs[:i])
			return nil, err
		}
		bufs[i] = b
	}
	return bufs, nil
}

// zeros returns k zero-filled buffers per parameter tensor.
func (t *gomlxEngine) zeros(k int) ([]compute.Buffer, error) {
	var bufs []compute.Buffer
	for range k {
		for _, s := range t.m.specs {
			b, err := t.backend.BufferFromFlatData(0, make([]float32, s.Size()), f32(s.Shape...))
			if err != nil {
				finalize(bufs)
				return nil, err
			}
			bufs = append(bufs, b)
		}
	}
	return bufs, nil
}

func finalize(bufs []compute.Buffer) {
	for _, b := range bufs {
		if b != nil {
			_ = b.Finalize()
		}
	}
}

// fill writes the examples sel of (x, y) into p's data buffers in the
// graphs' feature-major layout, with loss weight w each, and zeroes the
// padding columns.
func (p *program) fill(m *Model, x []float32, y []int32, sel []int, w float32) {
	feat, b := m.Features(), p.batch
	if len(sel) < b {
		clear(p.x)
		clear(p.y)
		clear(p.wt)
	}
	if m.image() {
		// [C, B, H, W] from HWC examples.
		hw, c := m.input[0]*m.input[1], m.input[2]
		for j, i := range sel {
			src := x[i*feat : (i+1)*feat]
			if c == 1 {
				copy(p.x[j*hw:(j+1)*hw], src)
				continue
			}
			for ch := range c {
				dst := p.x[(ch*b+j)*hw : (ch*b+j+1)*hw]
				for q := range dst {
					dst[q] = src[q*c+ch]
				}
			}
		}
	} else {
		// [features, B].
		for j, i := range sel {
			for f, v := range x[i*feat : (i+1)*feat] {
				p.x[f*b+j] = v
			}
		}
	}
	for j, i := range sel {
		p.y[j] = y[i]
		p.wt[j] = w
	}
}

// execute runs p on its inputs, donating those marked, and converts a
// backend panic into an error.
func (p *program) execute(donate []bool) (out []compute.Buffer, err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("model: executing %s: %v", p.g.Name(), r)
		}
	}()
	return p.g.Executable().Execute(p.in, donate, 0)
}

func scalar(b compute.Buffer) (float64, error) {
	v := make([]float32, 1)
	if err := b.ToFlatData(v); err != nil {
		return 0, err
	}
	return float64(v[0]), nil
}

// Train runs local training of the model from weights on the examples idx
// of (x, y) and returns the new weights (fresh slices, in Tensors order)
// and the mean training loss over all steps (each step's mean weighted by
// its examples). The optimizer state starts from zero on every call, so
// one client's training never leaks into the next. x holds every example's
// features back to back (example i is x[i*F:(i+1)*F], F = Features(),
// images HWC); y their labels. Each epoch visits idx in an order shuffled
// by the stream Derive(SeedSecret(cfg.Seed), "model shuffle"), in
// minibatches of cfg.Batch; a last, shorter minibatch's loss is the mean
// over its own examples, as in PyTorch without drop_last. Dropout masks
// come from the stream "model dropout". The same inputs on the same engine
// give bit-for-bit the same outputs.
func (t *Trainer) Train(ctx context.Context, weights [][]float32, x []float32, y []int32, idx []int, cfg TrainConfig) ([][]float32, float64, error) {
	if cfg.Epochs <= 0 || cfg.Batch <= 0 {
		return nil, 0, fmt.Errorf("model: %d epochs of batch %d, both must be positive", cfg.Epochs, cfg.Batch)
	}
	if len(idx) == 0 {
		return nil, 0, errors.New("model: no training examples")
	}
	if !(cfg.ProxMu >= 0) || math.IsInf(cfg.ProxMu, 0) {
		return nil, 0, fmt.Errorf("model: FedProx mu %v, want a finite value >= 0", cfg.ProxMu)
	}
	pl := t.m.newPlan(idx, cfg)
	pl.mu = cfg.ProxMu
	return t.run(ctx, weights, x, y, pl)
}

// plan is local training step by step: the examples of each minibatch and
// the dropout masks. Train draws it from the seed; the golden tests give
// PyTorch's.
type plan struct {
	batch   int     // the largest minibatch: what the engine prepares for
	batches [][]int // each step's examples, indices into x
	// dropout fills the mask of dropout layer l (forward order) for step s:
	// mask[j*units+u] for example j of the step and unit u, 0 or 1/(1-p).
	dropout func(s, l int, mask []float32)
	// mu is FedProx's proximal weight (TrainConfig.ProxMu): each step's
	// gradient gains mu (w - w0), w0 the weights training starts from.
	mu float64
}

// newPlan draws Train's minibatches and dropout masks from cfg.Seed.
func (m *Model) newPlan(idx []int, cfg TrainConfig) plan {
	secret := corr.SeedSecret(cfg.Seed)
	shuffle := corr.Derive(secret, "model shuffle")
	drop := corr.Derive(secret, "model dropout")
	probs := m.dropoutProbs()
	perm := make([]int, len(idx))
	steps := (len(idx) + cfg.Batch - 1) / cfg.Batch
	p := plan{batch: min(cfg.Batch, len(idx)), batches: make([][]int, 0, cfg.Epochs*steps)}
	for range cfg.Epochs {
		corr.Shuffle(shuffle, perm)
		for start := 0; start < len(perm); start += cfg.Batch {
			sel := make([]int, 0, min(cfg.Batch, len(perm)-start))
			for _, j := range perm[start:min(start+cfg.Batch, len(perm))] {
				sel = append(sel, idx[j])
			}
			p.batches = append(p.batches, sel)
		}
	}
	var bits []uint32
	// Masks are drawn in step order, each layer in turn, as training asks.
	p.dropout = func(_, l int, mask []float32) {
		if cap(bits) < len(mask) {
			bits = make([]uint32, len(mask))
		}
		bits = bits[:len(mask)]
		drop.Fill32(bits)
		fillMask(mask, bits, probs[l])
	}
	return p
}

// run trains from weights through the steps of pl on the trainer's
// engine, after validating every input, and reports a result that is not
// finite as divergence.
func (t *Trainer) run(ctx context.Context, weights [][]float32, x []float32, y []int32, pl plan) ([][]float32, float64, error) {
	if err := t.m.check(weights); err != nil {
		return nil, 0, err
	}
	var all []int
	for _, b := range pl.batches {
		if len(b) == 0 || len(b) > pl.batch {
			return nil, 0, fmt.Errorf("model: a minibatch of %d examples, want 1 to %d", len(b), pl.batch)
		}
		all = append(all, b...)
	}
	if _, err := t.checkData(x, y, all); err != nil {
		return nil, 0, err
	}
	res, loss, err := t.eng.train(ctx, weights, x, y, pl)
	if err != nil {
		return nil, 0, err
	}
	if err := t.m.check(res); err != nil {
		return nil, 0, fmt.Errorf("model: training diverged: %w", err)
	}
	return res, loss, nil
}

// train runs pl on the compiled training graph of its batch size.
func (t *gomlxEngine) train(ctx context.Context, weights [][]float32, x []float32, y []int32, pl plan) ([][]float32, float64, error) {
	prox := pl.mu != 0
	p, err := t.program(pl.batch, prox)
	if err != nil {
		return nil, 0, err
	}
	nt := len(t.m.specs)
	params, err := t.load(weights)
	if err != nil {
		return nil, 0, err
	}
	state, err := t.zeros(t.opt.slots())
	if err != nil {
		finalize(params)
		return nil, 0, err
	}
	live := append(params, state...) // the buffers this call owns
	defer func() { finalize(live) }()
	if prox {
		start, err := t.proxInputs(weights, pl.mu)
		if err != nil {
			return nil, 0, err
		}
		defer finalize(start)
		copy(p.in[p.prox:], start)
	}
	donate := make([]bool, len(p.in))
	for i := range len(live) {
		donate[i] = true
	}
	adam := t.opt.Name == "adam"
	var scalars []compute.Buffer
	if adam {
		scalars = make([]compute.Buffer, 2)
		defer func() { finalize(scalars) }()
	}
	units := t.m.dropoutUnits()
	var mask []float32
	var lossSum float64
	for step, sel := range pl.batches {
		if err := ctx.Err(); err != nil {
			return nil, 0, err
		}
		p.fill(t.m, x, y, sel, 1/float32(len(sel)))
		for l, fm := range p.masks {
			// The plan's masks are example-major, the graph's feature-major.
			u := units[l]
			mask = append(mask[:0], make([]float32, len(sel)*u)...)
			pl.dropout(step, l, mask)
			clear(fm)
			for j := range sel {
				for k, v := range mask[j*u : (j+1)*u] {
					fm[k*p.batch+j] = v
				}
			}
		}
		copy(p.in, live)
		if adam {
			lrt, bc2 := t.opt.adamScalars(step)
			finalize(scalars)
			scalars = scalars[:0]
			for _, v := range []float32{lrt, bc2} {
				b, err := t.backend.BufferFromFlatData(0, []float32{v}, f32())
				if err != nil {
					return nil, 0, err
				}
				scalars = append(scalars, b)
			}
			copy(p.in[len(live):], scalars)
		}
		out, err := p.execute(donate)
		for i := range live {
			live[i] = nil // donated: the backend owns (and may have reused) them
		}
		if err != nil {
			return nil, 0, err
		}
		copy(live, out[:len(live)])
		l, err := scalar(out[len(live)])
		_ = out[len(live)].Finalize()
		if err != nil {
			return nil, 0, err
		}
		lossSum += l * float64(len(sel))
	}
	res := make([][]float32, nt)
	for i, s := range t.m.specs {
		res[i] = make([]float32, s.Size())
		if err := live[i].ToFlatData(res[i]); err != nil {
			return nil, 0, err
		}
	}
	examples := 0
	for _, sel := range pl.batches {
		examples += len(sel)
	}
	return res, lossSum / float64(examples), nil
}

// proxInputs returns a prox graph's inputs for FedProx with weight mu from
// the weights w0: mu as a scalar buffer, then w0's buffers. They are not
// donated, so every step reads them.
func (t *gomlxEngine) proxInputs(w0 [][]float32, mu float64) ([]compute.Buffer, error) {
	b, err := t.backend.BufferFromFlatData(0, []float32{float32(mu)}, f32())
	if err != nil {
		return nil, err
	}
	start, err := t.load(w0)
	if err != nil {
		finalize([]compute.Buffer{b})
		return nil, err
	}
	return append([]compute.Buffer{b}, start...), nil
}

// fillMask sets mask[j] to 0 with probability p and to 1/(1-p) otherwise
// (inverted dropout, so evaluation needs no rescaling), from 32 random bits
// per unit.
func fillMask(mask []float32, bits []uint32, p float64) {
	cut := uint32(math.Round(p * (1 << 32)))
	keep := float32(1 / (1 - p))
	for j, b := range bits {
		if b < cut {
			mask[j] = 0
		} else {
			mask[j] = keep
		}
	}
}

// dropoutUnits lists the dropout layers' widths in forward order.
func (m *Model) dropoutUnits() []int {
	var out []int
	for _, st := range m.steps {
		if st.kind == dropout {
			out = append(out, st.outDim[0])
		}
	}
	return out
}

// dropoutProbs lists the dropout layers' probabilities in forward order.
func (m *Model) dropoutProbs() []float64 {
	var out []float64
	for _, st := range m.steps {
		if st.kind == dropout {
			out = append(out, st.p)
		}
	}
	return out
}

// Evaluate returns the accuracy and the mean cross-entropy of weights on
// the examples idx of (x, y) (nil idx: all examples).
func (t *Trainer) Evaluate(weights [][]float32, x []float32, y []int32, idx []int) (acc, loss float64, err error) {
	if err := t.m.check(weights); err != nil {
		return 0, 0, err
	}
	if idx == nil {
		feat := t.m.Features()
		if len(x)%feat != 0 {
			return 0, 0, fmt.Errorf("model: %d feature values is not a multiple of %d", len(x), feat)
		}
		idx = make([]int, len(x)/feat)
		for i := range idx {
			idx[i] = i
		}
	}
	if len(idx) == 0 {
		return 0, 0, errors.New("model: no examples to evaluate")
	}
	if _, err := t.checkData(x, y, idx); err != nil {
		return 0, 0, err
	}
	correct, lossSum, err := t.eng.evaluate(weights, x, y, idx)
	if err != nil {
		return 0, 0, err
	}
	n := float64(len(idx))
	return correct / n, lossSum / n, nil
}

// evaluate runs the evaluation graph on batches of evalBatch, the last one
// padded and masked.
func (t *gomlxEngine) evaluate(weights [][]float32, x []float32, y []int32, idx []int) (correct, lossSum float64, err error) {
	params, err := t.load(weights)
	if err != nil {
		return 0, 0, err
	}
	defer finalize(params)
	p := t.eval
	copy(p.in, params)
	donate := make([]bool, len(p.in))
	for start := 0; start < len(idx); start += p.batch {
		sel := idx[start:min(start+p.batch, len(idx))]
		p.fill(t.m, x, y, sel, 1)
		out, err := p.execute(donate)
		if err != nil {
			return 0, 0, err
		}
		l, err1 := scalar(out[0])
		c, err2 := scalar(out[1])
		finalize(out)
		if err := errors.Join(err1, err2); err != nil {
			return 0, 0, err
		}
		lossSum += l
		correct += c
	}
	return correct, lossSum, nil
}
