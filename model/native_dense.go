package model

import (
	"math"

	"github.com/fedpq/fedpq/model/internal/act"
	"github.com/fedpq/fedpq/model/internal/gemm"
)

// denseOp is a dense layer: Z = W X + bias, then ReLU (or sigmoid) and the
// dropout mask unless it is the last layer, written in place over the
// product.
//
// Backward, one pass turns the output gradient into dZ in place (where
// the output is positive, times the mask; an output is positive exactly
// when ReLU passed it and dropout kept it) and sums the bias gradient;
// then dW = dZ X^T and dX = W^T dZ, both views of the same buffers.
type denseOp struct {
	st      step
	in, out *edge
	batch   int
	x       gemm.Mat  // the input as [I, B]
	kern    gemm.Mat  // W [O, I] (Data: the kernel, per call)
	d       gemm.Mat  // out.grad as [O, B]
	mask    []float32 // the dropout mask after this layer, example-major, or nil

	// The current pass, for the per-unit passes.
	nb          int
	bias, gbias []float32
	fwd, bwd    func(lo, hi int)
}

func newDenseOp(st step, in, out *edge, batch int) *denseOp {
	l := &denseOp{st: st, in: in, out: out, batch: batch}
	i, o := in.feat, st.out
	switch {
	case in.c > 0: // [C, B, H, W] read as [(c, y, x), b]
		l.x = gemm.Mat{Data: in.data,
			Row: offsets(0, in.c, batch*in.h*in.w, in.h, in.w, in.w, 1),
			Col: offsets(0, batch, in.h*in.w, 1, 0, 1, 0)}
	case in.data != nil: // a dense layer's [I, B]
		l.x = gemm.Dense(in.data, i, batch, batch)
	default: // the dataset: rows are features, columns set per step
		l.x = gemm.Mat{Row: offsets(0, i, 1, 1, 0, 1, 0)}
	}
	l.kern = gemm.Dense(nil, o, i, i)
	l.d = gemm.Dense(out.grad, o, batch, batch)
	l.fwd, l.bwd = l.forwardUnits, l.backwardUnits
	return l
}

func (l *denseOp) forward(w [][]float32, nb, threads int) {
	kern, x := l.kern, l.x
	kern.Data = w[l.st.w]
	x.Col = x.Col[:nb]
	gemmMul(threads, l.out.data, l.batch, kern, x)
	l.nb, l.bias = nb, w[l.st.b]
	split(threads, l.st.out, nb, l.fwd)
}

func (l *denseOp) backward(w, g [][]float32, nb, threads int) {
	l.nb, l.gbias = nb, g[l.st.b]
	split(threads, l.st.out, nb, l.bwd)
	d, x := l.d, l.x
	d.Col = d.Col[:nb]
	x.Col = x.Col[:nb]
	gemmMul(threads, g[l.st.w], l.in.feat, d, x.T())
	if l.in.grad == nil {
		return
	}
	kernT := l.kern.T()
	kernT.Data = w[l.st.w]
	gemmMul(threads, l.in.grad, l.batch, kernT, d)
}

// forwardUnits adds the bias to units [lo, hi) and, for a hidden layer,
// applies ReLU and the dropout mask.
func (l *denseOp) forwardUnits(lo, hi int) {
	units := l.st.out
	for o := lo; o < hi; o++ {
		z, bias := l.out.data[o*l.batch:o*l.batch+l.nb], l.bias[o]
		switch {
		case l.st.last:
			for b := range z {
				z[b] += bias
			}
		case l.st.sigmoid: // New allows no dropout after it
			for b := range z {
				z[b] = act.Sigmoid(z[b] + bias)
			}
		case l.mask != nil:
			for b := range z {
				z[b] = max(z[b]+bias, 0) * l.mask[b*units+o]
			}
		default:
			for b := range z {
				z[b] = max(z[b]+bias, 0)
			}
		}
	}
}

// backwardUnits turns the output gradient of units [lo, hi) into dZ in
// place and writes their bias gradients.
func (l *denseOp) backwardUnits(lo, hi int) {
	units := l.st.out
	for o := lo; o < hi; o++ {
		d := l.out.grad[o*l.batch : o*l.batch+l.nb]
		if l.st.sigmoid {
			for b, a := range l.out.data[o*l.batch : o*l.batch+l.nb] {
				d[b] = sigmoidGrad(a, d[b])
			}
		} else if !l.st.last {
			y := l.out.data[o*l.batch:]
			for b := range d {
				if l.mask != nil {
					d[b] *= l.mask[b*units+o]
				}
				d[b] = reluPass(y[b], d[b])
			}
		}
		var sum float64
		for _, v := range d {
			sum += float64(v)
		}
		l.gbias[o] = float32(sum)
	}
}

// loss returns the summed cross-entropy of the step's logits against the
// labels of sel, and writes the gradient of its mean (the step's loss) with
// respect to the logits into their edge's gradient: (softmax - onehot)/nb.
func (n *nativeNet) loss(y []int32, sel []int) float64 {
	z, d, k := n.logits.out.data, n.logits.out.grad, n.logits.st.out
	inv := 1 / float64(len(sel))
	var sum float64
	for b, i := range sel {
		top := float64(z[b])
		for j := 1; j < k; j++ {
			top = max(top, float64(z[j*n.batch+b]))
		}
		// d holds exp(z - top) until the sum of them is known.
		var s float64
		for j := range k {
			e := math.Exp(float64(z[j*n.batch+b]) - top)
			d[j*n.batch+b] = float32(e)
			s += e
		}
		sum += top + math.Log(s) - float64(z[int(y[i])*n.batch+b])
		scale := inv / s
		for j := range k {
			p := float64(d[j*n.batch+b]) * scale
			if j == int(y[i]) {
				p -= inv
			}
			d[j*n.batch+b] = float32(p)
		}
	}
	return sum
}

// score returns the number of examples of sel whose largest logit (the
// first, on ties) is their label, and their summed cross-entropy.
func (n *nativeNet) score(y []int32, sel []int) (correct, loss float64) {
	z := n.logits.out.data
	for b, i := range sel {
		loss += n.logSumExp(b) - float64(z[int(y[i])*n.batch+b])
		top := 0
		for k := range n.logits.st.out {
			if z[k*n.batch+b] > z[top*n.batch+b] {
				top = k
			}
		}
		if top == int(y[i]) {
			correct++
		}
	}
	return correct, loss
}

// logSumExp is log(sum_k exp(z_k)) of example b's logits, in float64.
func (n *nativeNet) logSumExp(b int) float64 {
	z, k := n.logits.out.data, n.logits.st.out
	top := float64(z[b])
	for j := 1; j < k; j++ {
		top = max(top, float64(z[j*n.batch+b]))
	}
	var s float64
	for j := range k {
		s += math.Exp(float64(z[j*n.batch+b]) - top)
	}
	return top + math.Log(s)
}
