package model

import (
	"context"
	"fmt"
	"math"
	"testing"
)

// oneStepGradient is the gradient the Trainer takes on the batch (x, y): the
// difference of the weights before and after one SGD step of rate 1.
func oneStepGradient(t *testing.T, m *Model, w [][]float32, x []float32, y []int32) [][]float32 {
	t.Helper()
	tr, err := m.NewTrainer(Optimizer{Name: "sgd", LR: 1})
	if err != nil {
		t.Fatal(err)
	}
	w2, _, err := tr.Train(context.Background(), w, x, y, seq(len(y)), TrainConfig{Epochs: 1, Batch: len(y), Seed: 1})
	if err != nil {
		t.Fatal(err)
	}
	for i := range w2 {
		for j := range w2[i] {
			w2[i][j] = w[i][j] - w2[i][j]
		}
	}
	return w2
}

func oneHot(y []int32, classes int) []float64 {
	p := make([]float64, len(y)*classes)
	for i, c := range y {
		p[i*classes+int(c)] = 1
	}
	return p
}

// TestInverter checks the inversion objective against the Trainer and
// against finite differences:
//   - with the Trainer's own gradient of a batch as the target, D at that
//     batch and its labels is 0 up to float32 rounding (below 1e-6 of
//     ||g||^2): the attack's forward graph is the trained model, layouts,
//     padding, pooling ties and ReLU at 0 included;
//   - the gradient of D along random directions of x and of the label
//     logits agrees with central differences (float64, h = 1e-5) to 2%:
//     the second derivatives GoMLX derives are right.
func TestInverter(t *testing.T) {
	for _, c := range []struct {
		arch  string
		input []int
	}{
		{"linear", []int{28, 28, 1}},
		{"mlp", []int{28, 28, 1}},
		{"cnn2", []int{28, 28, 1}},
		{"cnn2", []int{16, 16, 3}},
		{"lenet", []int{28, 28, 1}},
		{"lenet", []int{10, 9, 2}}, // odd sizes under stride 2
	} {
		t.Run(c.arch, func(t *testing.T) {
			m, err := New(c.arch, c.input, 10)
			if err != nil {
				t.Fatal(err)
			}
			const batch = 3
			x32, y := synthetic(m, batch, 5)
			f := m.Features()
			clear(x32[:f/2]) // a blank region, as MNIST's margins: ReLU at 0 and pooling ties
			w := m.Init(2)
			g := oneStepGradient(t, m, w, x32, y)
			x := f64s(x32)
			var norm float64
			for _, t := range g {
				for _, v := range t {
					norm += float64(v) * float64(v)
				}
			}

			known, err := m.NewInverter(batch, false)
			if err != nil {
				t.Fatal(err)
			}
			if err := known.SetTarget(w, g); err != nil {
				t.Fatal(err)
			}
			gx := make([]float64, len(x))
			d, err := known.Match(x, oneHot(y, 10), gx, nil)
			if err != nil {
				t.Fatal(err)
			}
			if d > 1e-6*norm {
				t.Errorf("D at the true batch %.3g, ||g||^2 %.3g", d, norm)
			}

			// Finite differences, away from the optimum: a target from another batch.
			x2, y2 := synthetic(m, batch, 6)
			learn, err := m.NewInverter(batch, true)
			if err != nil {
				t.Fatal(err)
			}
			if err := learn.SetTarget(w, oneStepGradient(t, m, w, x2, y2)); err != nil {
				t.Fatal(err)
			}
			logits := make([]float64, batch*10)
			for i := range logits {
				logits[i] = float64(i%7) * 0.3
			}
			gy := make([]float64, len(logits))
			if _, err := learn.Match(x, logits, gx, gy); err != nil {
				t.Fatal(err)
			}
			dir := func(v []float64, seed uint64) []float64 {
				u, _ := synthetic(m, 1, seed)
				out := make([]float64, len(v))
				for i := range out {
					out[i] = float64(u[i%len(u)]) - 0.5
				}
				return out
			}
			for _, p := range []struct {
				name    string
				v, grad []float64
			}{{"x", x, gx}, {"labels", logits, gy}} {
				u := dir(p.v, 7)
				if p.name == "x" {
					clear(u[:f/2]) // keep the blank region on its kinks
				}
				var want float64
				for i := range u {
					want += u[i] * p.grad[i]
				}
				const h = 1e-5
				at := func(s float64) float64 {
					moved := append([]float64(nil), p.v...)
					for i := range moved {
						moved[i] += s * u[i]
					}
					xs, ls := x, logits
					if p.name == "x" {
						xs = moved
					} else {
						ls = moved
					}
					d, err := learn.Match(xs, ls, make([]float64, len(x)), make([]float64, len(logits)))
					if err != nil {
						t.Fatal(err)
					}
					return d
				}
				got := (at(h) - at(-h)) / (2 * h)
				if math.Abs(got-want) > 0.02*math.Abs(want) {
					t.Errorf("dD/d%s along u: finite difference %.5g, autodiff %.5g", p.name, got, want)
				}
			}
		})
	}
}

// TestInverterErrors: shapes that do not fit are refused, not run.
func TestInverterErrors(t *testing.T) {
	m, _ := New("linear", []int{4}, 3)
	v, err := m.NewInverter(2, true)
	if err != nil {
		t.Fatal(err)
	}
	x, y := make([]float64, 8), make([]float64, 6)
	if _, err := v.Match(x, y, x, y); err == nil {
		t.Error("Match before SetTarget accepted")
	}
	w := m.Init(1)
	if err := v.SetTarget(w, w[:1]); err == nil {
		t.Error("a target with a tensor missing accepted")
	}
	if err := v.SetTarget(w, w); err != nil {
		t.Fatal(err)
	}
	if _, err := v.Match(x[:4], y, x[:4], y); err == nil {
		t.Error("a short batch accepted")
	}
	if _, err := v.Match(x, y, x, y[:3]); err == nil {
		t.Error("a short label gradient accepted")
	}
	if _, err := m.NewInverter(0, false); err == nil {
		t.Error("batch 0 accepted")
	}
}

func f64s(v []float32) []float64 {
	out := make([]float64, len(v))
	for i, x := range v {
		out[i] = float64(x)
	}
	return out
}

// BenchmarkInverterMatch times one evaluation of the inversion objective
// and its gradient (what every L-BFGS step of an attack pays), per
// architecture and batch, on MNIST-shaped inputs.
func BenchmarkInverterMatch(b *testing.B) {
	for _, arch := range []string{"linear", "cnn2", "lenet"} {
		for _, batch := range []int{1, 8} {
			m, err := New(arch, []int{28, 28, 1}, 10)
			if err != nil {
				b.Skip(err)
			}
			b.Run(fmt.Sprintf("%s/batch%d", arch, batch), func(b *testing.B) {
				x32, y := synthetic(m, batch, 1)
				w := m.Init(1)
				v, err := m.NewInverter(batch, true)
				if err != nil {
					b.Fatal(err)
				}
				if err := v.SetTarget(w, w); err != nil {
					b.Fatal(err)
				}
				x, labels := f64s(x32), oneHot(y, 10)
				gx, gy := make([]float64, len(x)), make([]float64, len(labels))
				for b.Loop() {
					if _, err := v.Match(x, labels, gx, gy); err != nil {
						b.Fatal(err)
					}
				}
			})
		}
	}
}
