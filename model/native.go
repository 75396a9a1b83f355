package model

import (
	"context"
	"fmt"
	"slices"
	"sync"
)

// The native engine computes training steps with fedpq's own kernels:
// every matrix product is a gemm.Mul over offset-table views (see
// nativeNet for the layouts), and every other pass (bias, ReLU, pooling,
// dropout, their gradients, the loss, the optimizer) is one loop written
// here that fuses what the GoMLX graphs run as separate ops. It follows
// the GoMLX engine's semantics exactly; only float32 rounding differs.

// nativeEvalBatch is the native engine's evaluation batch: its products
// are as efficient at 64 examples as at 256, and vgg-small's activations
// then take a quarter of the memory.
const nativeEvalBatch = 64

// nativeEngine holds the gradients, the optimizer state and the
// workspaces, all allocated once and reused by every step and every
// client.
type nativeEngine struct {
	m       *Model
	opt     Optimizer
	threads int
	grads   [][]float32        // per tensor, overwritten by each step's backward pass
	state   [][]float32        // optimizer slots, slot-major then tensor; zeroed per train call
	work    *nativeNet         // the training workspace (see net)
	eval    *nativeNet         // the evaluation workspace, built on first use
	updates []func(lo, hi int) // per tensor, the optimizer's update of elements [lo, hi)
	cur     nativeStep         // the step the updates apply
}

// nativeStep is what one optimizer step reads besides the gradients.
type nativeStep struct {
	w        [][]float32 // the weights being trained
	lrt, bc2 float32     // adam: bias-corrected step size, sqrt(1 - beta2^t)
	w0       [][]float32 // FedProx: the weights training started from
	mu       float32     // FedProx: the proximal weight, 0 for none
}

func newNativeEngine(m *Model, opt Optimizer) (*nativeEngine, error) {
	for i, st := range m.steps {
		if st.kind == dropout && (i == 0 || m.steps[i-1].kind != dense || m.steps[i-1].last) {
			return nil, fmt.Errorf("model: native engine: %s's dropout does not follow a hidden dense layer", m.arch)
		}
	}
	e := &nativeEngine{m: m, opt: opt, threads: 1}
	for _, s := range m.specs {
		e.grads = append(e.grads, make([]float32, s.Size()))
	}
	for range opt.slots() {
		for _, s := range m.specs {
			e.state = append(e.state, make([]float32, s.Size()))
		}
	}
	for i := range m.specs {
		e.updates = append(e.updates, e.updater(i))
	}
	return e, nil
}

func (e *nativeEngine) setThreads(n int) { e.threads = n }

// net returns a training workspace for minibatches of up to batch
// examples. There is one, for the largest minibatch yet: a smaller one
// uses a prefix of it and computes the same bits (every product and pass
// is per example), so the round engine's clients of all sizes share it
// rather than each size holding its own activations.
func (e *nativeEngine) net(batch int) *nativeNet {
	if e.work == nil || e.work.batch < batch {
		e.work = newNativeNet(e.m, batch, true)
	}
	e.work.threads = e.threads
	return e.work
}

func (e *nativeEngine) train(ctx context.Context, weights [][]float32, x []float32, y []int32, pl plan) ([][]float32, float64, error) {
	n := e.net(pl.batch)
	w := make([][]float32, len(weights))
	for i := range weights {
		w[i] = slices.Clone(weights[i])
	}
	for _, s := range e.state {
		clear(s)
	}
	e.cur.w, e.cur.w0, e.cur.mu = w, weights, float32(pl.mu)
	defer func() { e.cur.w0 = nil }() // the caller's weights: not kept past the call
	var lossSum float64
	examples := 0
	for step, sel := range pl.batches {
		if err := ctx.Err(); err != nil {
			return nil, 0, err
		}
		n.load(x, sel)
		for l, mask := range n.masks {
			pl.dropout(step, l, mask[:len(sel)*n.units[l]])
		}
		n.forward(w)
		lossSum += n.loss(y, sel)
		n.backward(w, e.grads)
		e.step(step)
		examples += len(sel)
	}
	return w, lossSum / float64(examples), nil
}

func (e *nativeEngine) evaluate(weights [][]float32, x []float32, y []int32, idx []int) (correct, lossSum float64, err error) {
	if e.eval == nil {
		e.eval = newNativeNet(e.m, nativeEvalBatch, false)
	}
	n := e.eval
	n.threads = e.threads
	for start := 0; start < len(idx); start += n.batch {
		sel := idx[start:min(start+n.batch, len(idx))]
		n.load(x, sel)
		n.forward(weights)
		c, l := n.score(y, sel)
		correct += c
		lossSum += l
	}
	return correct, lossSum, nil
}

// step applies the optimizer to every tensor, after a backward pass, as
// step number s (from 0) of the Train call.
func (e *nativeEngine) step(s int) {
	if e.opt.Name == "adam" {
		e.cur.lrt, e.cur.bc2 = e.opt.adamScalars(s)
	}
	for i, up := range e.updates {
		split(e.threads, len(e.grads[i]), 1, up)
	}
}

// split runs f on [0, n) cut into up to threads contiguous ranges, one
// goroutine each, and returns when all are done; cost is the work of one
// index in elements, so that small passes stay on one goroutine. With one
// part it calls f(0, n) directly: a single-threaded step starts no
// goroutine and allocates nothing.
func split(threads, n, cost int, f func(lo, hi int)) {
	// Below this many elements per part a goroutine costs more than it saves.
	const grain = 16384
	parts := min(threads, n, n*cost/grain)
	if parts <= 1 {
		f(0, n)
		return
	}
	var wg sync.WaitGroup
	for p := 1; p < parts; p++ {
		wg.Go(func() { f(p*n/parts, (p+1)*n/parts) })
	}
	f(0, n/parts)
	wg.Wait()
}
