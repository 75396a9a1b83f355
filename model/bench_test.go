package model

import (
	"context"
	"testing"
)

// benchInput is each architecture's natural input: CIFAR-10 for vgg-small,
// MNIST for the rest.
func benchInput(arch string) []int {
	if arch == "vgg-small" {
		return []int{32, 32, 3}
	}
	return []int{28, 28, 1}
}

// synthetic returns n random examples of m's input with random labels.
func synthetic(m *Model, n int, seed uint64) ([]float32, []int32) {
	f := m.Features()
	x := make([]float32, n*f)
	y := make([]int32, n)
	s := seed*0x9e3779b97f4a7c15 + 1
	next := func() uint64 { s ^= s << 13; s ^= s >> 7; s ^= s << 17; return s }
	for i := range x {
		x[i] = float32(next()>>40) / (1 << 24)
	}
	for i := range y {
		y[i] = int32(next() % uint64(m.Classes()))
	}
	return x, y
}

// BenchmarkStep measures one SGD step (batch 64) of every architecture on
// each engine, as ms/step: one Train call of one epoch over 64*steps
// examples, divided by the steps, so weight loading and reading are
// amortised as in a client's local training. native-t2 is the native
// engine with SetThreads(2); the -prox variants train with FedProx's term
// (mu 0.1), whose cost is one more pass over the weights per step.
func BenchmarkStep(b *testing.B) {
	for _, c := range []struct {
		name    string
		engine  Engine
		threads int
		mu      float64
	}{{"native", Native, 1, 0}, {"native-prox", Native, 1, 0.1}, {"native-t2", Native, 2, 0}, {"gomlx", GoMLX, 1, 0}, {"gomlx-prox", GoMLX, 1, 0.1}} {
		b.Run(c.name, func(b *testing.B) {
			for _, arch := range Names() {
				b.Run(arch, func(b *testing.B) { benchStep(b, arch, c.engine, c.threads, c.mu) })
			}
		})
	}
}

func benchStep(b *testing.B, arch string, e Engine, threads int, mu float64) {
	m, err := New(arch, benchInput(arch), 10)
	if err != nil {
		b.Fatal(err)
	}
	tr, err := m.NewTrainerOn(e, Optimizer{Name: "sgd", LR: 0.01})
	if err != nil {
		b.Fatal(err)
	}
	tr.SetThreads(threads)
	const steps = 10
	x, y := synthetic(m, 64*steps, 1)
	idx := make([]int, 64*steps)
	for i := range idx {
		idx[i] = i
	}
	w := m.Init(1)
	cfg := TrainConfig{Epochs: 1, Batch: 64, Seed: 1, ProxMu: mu}
	if _, _, err := tr.Train(context.Background(), w, x, y, idx, cfg); err != nil { // compile, allocate
		b.Fatal(err)
	}
	b.ResetTimer()
	for b.Loop() {
		if _, _, err := tr.Train(context.Background(), w, x, y, idx, cfg); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/1e6/float64(b.N*steps), "ms/step")
}

// BenchmarkCompile measures building and compiling the GoMLX engine's
// evaluation graph and training graph (batch 64).
func BenchmarkCompile(b *testing.B) {
	for _, arch := range Names() {
		b.Run(arch, func(b *testing.B) {
			m, err := New(arch, benchInput(arch), 10)
			if err != nil {
				b.Fatal(err)
			}
			for b.Loop() {
				e, err := newGoMLXEngine(m, Optimizer{Name: "sgd", LR: 0.01})
				if err != nil {
					b.Fatal(err)
				}
				if _, err := e.program(64, false); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkSwap measures swapping a client's weights in and out of the
// GoMLX engine: loading them into backend buffers and reading them back
// into fresh slices.
func BenchmarkSwap(b *testing.B) {
	for _, arch := range Names() {
		b.Run(arch, func(b *testing.B) {
			m, err := New(arch, benchInput(arch), 10)
			if err != nil {
				b.Fatal(err)
			}
			e, err := newGoMLXEngine(m, Optimizer{Name: "sgd", LR: 0.01})
			if err != nil {
				b.Fatal(err)
			}
			w := m.Init(1)
			for b.Loop() {
				if err := m.check(w); err != nil {
					b.Fatal(err)
				}
				bufs, err := e.load(w)
				if err != nil {
					b.Fatal(err)
				}
				for i, s := range m.specs {
					out := make([]float32, s.Size())
					if err := bufs[i].ToFlatData(out); err != nil {
						b.Fatal(err)
					}
				}
				finalize(bufs)
			}
			b.ReportMetric(float64(m.NumParams()), "params")
		})
	}
}
