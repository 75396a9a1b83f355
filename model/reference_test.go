package model

import (
	"math"
	"testing"
)

// These tests check cnn2 against an independent plain-loop implementation:
// the forward pass exactly, and the hand-written gradients against central
// finite differences. With positive biases MNIST's blank windows make the
// four pooling positions tie exactly, which is where a gradient routed to
// every tied position instead of the first (as PyTorch does) showed up.

// refCNN2 is a plain-loop cnn2 (PyTorch layouts) for one HWC image: the
// logits.
func refCNN2(w [][]float32, img []float32) []float64 {
	conv := func(in [][]float64, c, h, wd int, k []float32, b []float32, o int) ([][]float64, int, int) {
		ho, wo := h-4, wd-4
		out := make([][]float64, o)
		for oc := range o {
			out[oc] = make([]float64, ho*wo)
			for y := range ho {
				for x := range wo {
					s := float64(b[oc])
					for ic := range c {
						for dy := range 5 {
							for dx := range 5 {
								s += float64(k[((oc*c+ic)*5+dy)*5+dx]) * in[ic][(y+dy)*wd+x+dx]
							}
						}
					}
					out[oc][y*wo+x] = math.Max(s, 0)
				}
			}
		}
		return out, ho, wo
	}
	pool := func(in [][]float64, h, wd int) ([][]float64, int, int) {
		out := make([][]float64, len(in))
		for c := range in {
			out[c] = make([]float64, (h/2)*(wd/2))
			for y := range h / 2 {
				for x := range wd / 2 {
					m := math.Inf(-1)
					for dy := range 2 {
						for dx := range 2 {
							m = math.Max(m, in[c][(2*y+dy)*wd+2*x+dx])
						}
					}
					out[c][y*(wd/2)+x] = m
				}
			}
		}
		return out, h / 2, wd / 2
	}
	in := [][]float64{make([]float64, 784)}
	for i := range 784 {
		in[0][i] = float64(img[i])
	}
	a, h, wd := conv(in, 1, 28, 28, w[0], w[1], 6)
	a, h, wd = pool(a, h, wd)
	a, h, wd = conv(a, 6, h, wd, w[2], w[3], 6)
	a, _, _ = pool(a, h, wd)
	var flat []float64
	for c := range a {
		flat = append(flat, a[c]...)
	}
	dense := func(x []float64, k, b []float32, o int, relu bool) []float64 {
		out := make([]float64, o)
		for i := range o {
			s := float64(b[i])
			for j := range x {
				s += float64(k[i*len(x)+j]) * x[j]
			}
			if relu {
				s = math.Max(s, 0)
			}
			out[i] = s
		}
		return out
	}
	f := dense(flat, w[4], w[5], 50, true)
	return dense(f, w[6], w[7], 10, false)
}

// refLoss is the reference's mean cross-entropy over the examples of x, y.
func refLoss(w [][]float32, x []float32, y []int32) float64 {
	loss := 0.0
	for i := range y {
		z := refCNN2(w, x[i*784:(i+1)*784])
		mx := math.Inf(-1)
		for _, v := range z {
			mx = math.Max(mx, v)
		}
		s := 0.0
		for _, v := range z {
			s += math.Exp(v - mx)
		}
		loss += (mx + math.Log(s) - z[y[i]]) / float64(len(y))
	}
	return loss
}

// TestRefCNN2 compares the model's loss with the reference's on 64 images.
func TestRefCNN2(t *testing.T) {
	x, y := mnist(t, "t10k", 64)
	m, _ := New("cnn2", []int{28, 28, 1}, 10)
	w := m.Init(3)
	for i := range w {
		for j := range w[i] {
			if len(w[i]) <= 50 { // biases: nonzero to test them too
				w[i][j] = 0.01 * float32(j%7)
			}
		}
	}
	tr, _ := m.NewTrainer(Optimizer{Name: "sgd", LR: 0.1})
	_, loss, err := tr.Evaluate(w, x, y, nil)
	if err != nil {
		t.Fatal(err)
	}
	if ref := refLoss(w, x, y); math.Abs(loss-ref) > 1e-5 {
		t.Errorf("model loss %.6f, reference %.6f", loss, ref)
	}
}

// TestRefGrad compares one SGD step (lr 1, one batch of 64) with central
// finite differences (h = 1e-6, the float32 steps actually taken) of the
// reference loss, within 2% + 2e-4.
func TestRefGrad(t *testing.T) {
	x, y := mnist(t, "t10k", 64)
	m, _ := New("cnn2", []int{28, 28, 1}, 10)
	w := m.Init(3)
	for i, s := range m.Tensors() { // nonzero biases: no ReLU kink sits exactly at a blank window
		if len(s.Shape) == 1 {
			for j := range w[i] {
				w[i][j] = 0.05 + 0.01*float32(j%3)
			}
		}
	}
	lossOf := func(w [][]float32) float64 { return refLoss(w, x, y) }
	tr, _ := m.NewTrainer(Optimizer{Name: "sgd", LR: 1})
	idx := make([]int, 64)
	for i := range idx {
		idx[i] = i
	}
	w2, _, err := tr.Train(t.Context(), w, x, y, idx, TrainConfig{Epochs: 1, Batch: 64, Seed: 1})
	if err != nil {
		t.Fatal(err)
	}
	for ti, s := range m.Tensors() {
		for _, j := range []int{0, 1, len(w[ti]) / 2, len(w[ti]) - 1} {
			g := float64(w[ti][j] - w2[ti][j])
			orig := w[ti][j]
			h := float32(1e-6) // small: the loss has ReLU and pooling kinks
			w[ti][j] = orig + h
			up := float64(w[ti][j])
			lp := lossOf(w)
			w[ti][j] = orig - h
			down := float64(w[ti][j])
			lm := lossOf(w)
			w[ti][j] = orig
			fd := (lp - lm) / (up - down)
			if math.Abs(g-fd) > 0.02*math.Abs(fd)+2e-4 {
				t.Errorf("%-12s [%d] model gradient %+.5f, finite difference %+.5f", s.Name, j, g, fd)
			}
		}
	}
}
