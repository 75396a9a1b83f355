package model

import "github.com/fedpq/fedpq/model/internal/gemm"

// nativeNet is the native engine's workspace for minibatches of up to
// batch examples: every activation, gradient, pooling record and offset
// table of a step, allocated once and reused by every step of every Train
// call. A shorter minibatch uses a prefix of each view's columns.
//
// Layouts are chosen so that every product is one gemm.Mul of views, with
// nothing transposed or copied. A convolution's activations are
// [C, B, H, W] (channel, example, row, column), stored with the zero border
// that the consuming convolution's "same" padding needs around each plane:
// the convolution is then W [O, C*k*k] x patches [C*k*k, B*Ho*Wo], the
// kernel read in PyTorch's layout and the patches read in place through
// offsets, and its output is again [O, B, Ho, Wo]. Dense activations are
// [features, B]: a dense layer is W [O, I] x X [I, B]. A dense layer after
// a convolution reads the [C, B, H, W] activation as X [(c, y, x), b],
// which is PyTorch's flatten order; the first layer of a vector model
// reads the dataset itself, through column offsets set per step.
type nativeNet struct {
	batch   int
	nb      int // the current step's examples
	threads int
	in      *edge // the input: image models' [C, B, H, W] buffer, or a vector model's features
	first   *denseOp
	cols    []int // vector models: offsets of the step's examples in x, first.x's columns
	ops     []nativeOp
	logits  *denseOp
	masks   [][]float32 // the step's dropout masks, example-major (the plan's layout)
	units   []int       // the dropout layers' widths
}

// nativeOp is one layer (a convolution with its pooling, or a dense layer
// with its dropout) of a nativeNet.
type nativeOp interface {
	// forward computes the op's output edge from its input edge.
	forward(w [][]float32, nb, threads int)
	// backward writes the op's parameter gradients into g and, unless it
	// is the first op, its input edge's gradient, from its output edge's.
	backward(w, g [][]float32, nb, threads int)
}

// edge is the activation between two ops and, when training, the gradient
// flowing back over it.
type edge struct {
	data []float32
	grad []float32 // nil for the input and in evaluation
	feat int       // features per example
	// A convolution's output is [c, B, h+2pad, w+2pad] (c > 0). Its
	// gradient is [c, B, h, w] before a convolution and [(c, y, x), B]
	// before a dense layer; gs are its strides of c, b, y and x.
	c, h, w, pad int
	gs           [4]int
}

// newNativeNet builds m's workspace for minibatches of up to batch
// examples, with the gradients, pooling records and dropout masks of
// training when train is set.
func newNativeNet(m *Model, batch int, train bool) *nativeNet {
	n := &nativeNet{batch: batch}
	if m.image() {
		n.in = newEdge(m, -1, m.input, batch, false)
	} else {
		n.in = &edge{feat: m.Features()}
		n.cols = make([]int, batch)
	}
	in := n.in
	for i, st := range m.steps {
		switch st.kind {
		case conv:
			dims := st.outDim
			if st.pool {
				dims = m.steps[i+1].outDim
			}
			out := newEdge(m, i, dims, batch, train)
			n.ops = append(n.ops, newConvOp(st, in, out, batch, train))
			in = out
		case dense:
			out := newEdge(m, i, st.outDim, batch, train)
			op := newDenseOp(st, in, out, batch)
			if i == 0 {
				n.first = op
				op.x.Col = n.cols
			}
			n.ops = append(n.ops, op)
			n.logits = op
			in = out
		case dropout:
			if train {
				mask := make([]float32, batch*st.outDim[0])
				n.masks = append(n.masks, mask)
				n.units = append(n.units, st.outDim[0])
				n.logits.mask = mask // newNativeEngine checked that a hidden dense layer precedes
			}
		}
	}
	chainBatchInner(n.ops)
	return n
}

// newEdge allocates the output of step i (the input when i < 0) of shape
// dims ([h, w, c] or [units]), laid out for the op that reads it.
func newEdge(m *Model, i int, dims []int, batch int, train bool) *edge {
	e := &edge{feat: 1}
	for _, d := range dims {
		e.feat *= d
	}
	if len(dims) == 1 {
		e.data = make([]float32, e.feat*batch)
		if train {
			e.grad = make([]float32, e.feat*batch)
		}
		return e
	}
	e.h, e.w, e.c = dims[0], dims[1], dims[2]
	next := nextOp(m, i)
	if next.kind == conv && next.same {
		e.pad = next.k / 2
	}
	e.data = make([]float32, e.c*batch*(e.h+2*e.pad)*(e.w+2*e.pad))
	if train {
		e.grad = make([]float32, e.feat*batch)
		if next.kind == conv {
			e.gs = [4]int{batch * e.h * e.w, e.h * e.w, e.w, 1}
		} else {
			e.gs = [4]int{e.h * e.w * batch, 1, e.w * batch, batch}
		}
	}
	return e
}

// nextOp is the first convolution or dense layer after step i, which
// exists after a convolution since every model ends with a dense layer.
func nextOp(m *Model, i int) step {
	j := i + 1
	for m.steps[j].kind != conv && m.steps[j].kind != dense {
		j++
	}
	return m.steps[j]
}

// offsets enumerates base + i0*s0 + i1*s1 + i2*s2 for i0 < n0, i1 < n1,
// i2 < n2 in row-major order: the row or column table of a view.
func offsets(base, n0, s0, n1, s1, n2, s2 int) []int {
	out := make([]int, 0, n0*n1*n2)
	for i0 := range n0 {
		for i1 := range n1 {
			for i2 := range n2 {
				out = append(out, base+i0*s0+i1*s1+i2*s2)
			}
		}
	}
	return out
}

// load makes the examples sel of x the step's minibatch.
func (n *nativeNet) load(x []float32, sel []int) {
	n.nb = len(sel)
	in := n.in
	if n.first != nil {
		for b, i := range sel {
			n.cols[b] = i * in.feat
		}
		n.first.x.Data = x
		return
	}
	// HWC examples into [C, B, H, W] planes with in.pad zero borders.
	hp, wp, c := in.h+2*in.pad, in.w+2*in.pad, in.c
	for b, i := range sel {
		src := x[i*in.feat : (i+1)*in.feat]
		for ch := range c {
			plane := in.data[(ch*n.batch+b)*hp*wp:]
			for y := range in.h {
				row := plane[(y+in.pad)*wp+in.pad : (y+in.pad)*wp+in.pad+in.w]
				if c == 1 {
					copy(row, src[y*in.w:])
					continue
				}
				for x := range row {
					row[x] = src[(y*in.w+x)*c+ch]
				}
			}
		}
	}
}

// forward runs the step's forward pass.
func (n *nativeNet) forward(w [][]float32) {
	for _, op := range n.ops {
		op.forward(w, n.nb, n.threads)
	}
}

// backward writes the step's gradients into g, after loss.
func (n *nativeNet) backward(w, g [][]float32) {
	for i := len(n.ops) - 1; i >= 0; i-- {
		n.ops[i].backward(w, g, n.nb, n.threads)
	}
}

// gemmMul is gemm.MulParallel with C overwritten.
func gemmMul(threads int, c []float32, ldc int, a, b gemm.Mat) {
	gemm.MulParallel(threads, c, ldc, a, b, 1, 0)
}
