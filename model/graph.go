package model

import (
	. "github.com/gomlx/gomlx/core/graph"

	"github.com/gomlx/compute/dtypes"
	"github.com/gomlx/compute/shapes"
)

// The graphs keep activations feature-major: a dense activation is
// [features, batch] and a convolutional one [channels, batch, height,
// width] (CNHW). The Go backend's matrix multiplication wants its left
// operand contracted on its last axis and its right operand as [K, N] or
// [N, K]; it transposes anything else with a slow generic loop. In the
// feature-major layout every product of the forward and backward passes is
// already in a supported layout, except products with a transposed weight,
// and weights are small. So the backward pass is written out by hand
// (backward) rather than derived by GoMLX's autodiff, which would choose
// its own layouts; TestGradients checks it against autodiff of a reference
// model built from GoMLX's own convolution, pooling and dense ops.

// pass records what the backward pass needs of one step of the forward pass.
type pass struct {
	in      *Node // the step's input activation (feature-major)
	patches *Node // conv: the im2col matrix [k*k*C+1, B*R*Wp] (strided: [k*k*C+1, B*Ho*Wo]), last row ones
	wide    *Node // conv: the activation on the wide grid [O, B, R, Wq] (strided: [O, B, Ho, Wo])
	pooled  *Node // conv with pool: wide pooled [O, B, R/2, Wq/2]
	out     *Node // the step's output activation

	// First conv with pool (convFirstPooled): per pooling phase, the
	// patches and the products, and their maximum (before ReLU).
	phasePatches, phaseZ [4]*Node
	phaseMax             *Node
}

// forward builds the logits [classes, batch] of a feature-major batch x
// ([C, B, H, W] for the CNNs, [features, B] otherwise) from the parameter
// nodes (in Tensors order). masks holds one dropout mask per dropout layer
// (feature-major, values 0 or 1/(1-p)) when training, nil when evaluating.
// It returns the per-step record for backward. A pooling step is computed
// by the convolution before it (see convForward) and passes through here.
func (m *Model) forward(x *Node, params []*Node, masks []*Node) (*Node, []pass) {
	passes := make([]pass, len(m.steps))
	nmask := 0
	for i, st := range m.steps {
		passes[i].in = x
		switch st.kind {
		case conv:
			switch {
			case st.strides() > 1:
				x = convStrided(&passes[i], x, params[st.w], params[st.b], st)
			case i == 0 && st.pool:
				x = convFirstPooled(&passes[i], x, params[st.w], params[st.b], st)
			default:
				x = convForward(&passes[i], x, params[st.w], params[st.b], st)
			}
		case dense:
			x = flatten(x)
			passes[i].in = x
			x = Add(DotGeneral(params[st.w], []int{1}, nil, x, []int{0}, nil), Reshape(params[st.b], st.out, 1))
			if !st.last {
				x = activate(x, st)
			}
		case dropout:
			if masks != nil {
				x = Mul(x, masks[nmask])
			}
			nmask++
		}
		passes[i].out = x
	}
	return x, passes
}

// flatten turns a CNHW activation into a dense one [C*H*W, B] whose
// features are in (c, h, w) order (PyTorch's flatten of NCHW); a dense
// activation is returned as is.
func flatten(x *Node) *Node {
	if x.Rank() == 2 {
		return x
	}
	d := x.Shape().Dimensions
	c, b, hw := d[0], d[1], d[2]*d[3]
	return Reshape(TransposeAllAxes(Reshape(x, c, b, hw), 0, 2, 1), c*hw, b)
}

// unflatten is the inverse of flatten for a gradient of shape [C*H*W, B],
// given the CNHW dimensions.
func unflatten(d *Node, dims []int) *Node {
	c, b, h, w := dims[0], dims[1], dims[2], dims[3]
	return Reshape(TransposeAllAxes(Reshape(d, c, h*w, b), 0, 2, 1), c, b, h, w)
}

// convGeom is the geometry of a stride-1 k x k convolution on the "wide"
// grid. Each input plane (padded to Hp x Wp for same) is read as one flat
// row of Hp*Wp values followed by k-1 zeros; the window of kernel offset
// (dy, dx) is then the contiguous range starting at dy*Wp+dx, of length
// R*Wp, and output (y, x) sits at flat position y*Wp+x. The columns
// x >= Wo of this grid are garbage, which the forward pass slices off and
// the backward pass gives a zero gradient. In exchange, the adjoint of
// each window (col2im) is a concatenation with zero blocks, which the Go
// backend runs as block copies, where padding each window back into
// place ran a per-element loop and cost a fifth of a CNN's step.
type convGeom struct {
	c, b, k, o   int
	h, w, hp, wp int // input and padded input sizes
	ho, wo       int // output sizes
	r, wq        int // rows computed (ho, or even for pooling) and columns kept
	pad          int // zero padding per side
	flat         int // hp*wp + k - 1
	pool         bool
}

func newConvGeom(in *Node, st step) convGeom {
	d := in.Shape().Dimensions
	g := convGeom{c: d[0], b: d[1], h: d[2], w: d[3], k: st.k, o: st.out, pool: st.pool}
	if st.same {
		g.pad = st.k / 2
	}
	g.hp, g.wp = g.h+2*g.pad, g.w+2*g.pad
	g.ho, g.wo = g.hp-g.k+1, g.wp-g.k+1
	g.r, g.wq = g.ho, g.wp
	if g.pool {
		g.r = g.ho / 2 * 2
		g.wq = g.wp / 2 * 2
	}
	g.flat = g.hp*g.wp + g.k - 1
	return g
}

// activate is the hidden layer's activation of z: ReLU, or the sigmoid.
func activate(z *Node, st step) *Node {
	if st.sigmoid {
		return Sigmoid(z)
	}
	return MaxScalar(z, 0)
}

// activateGrad is the gradient of activate's input given its output y
// and the gradient d of y: d where y > 0 for ReLU, d*(1-y)*y for the
// sigmoid (PyTorch's formula and order, as the native engine's).
func activateGrad(st step, y, d *Node) *Node {
	if st.sigmoid {
		return Mul(Mul(d, OneMinus(y)), y)
	}
	return reluGrad(y, d)
}

// convForward is conv + activation (+ 2 x 2 max pooling when st.pool) of x
// [C, B, H, W] with kernel [O, C, k, k] and bias [O], lowered to im2col on
// the wide grid and one matrix product. The patch rows are the k*k windows
// in (dy, dx, c) order and a last row of ones that carries the bias
// through the product (the Go backend adds a broadcast bias with a slow
// generic iterator). Pooling runs on the wide grid, whose even width
// leaves whole windows, and the valid columns are sliced after pooling,
// on a quarter of the data.
func convForward(ps *pass, x, kernel, bias *Node, st step) *Node {
	g := newConvGeom(x, st)
	gr := x.Graph()
	zero := ScalarZero(gr, dtypes.Float32)
	if g.pad > 0 {
		x = Pad(x, zero, PadAxis{}, PadAxis{}, PadAxis{Start: g.pad, End: g.pad}, PadAxis{Start: g.pad, End: g.pad})
	}
	xf := Concatenate([]*Node{Reshape(x, g.c, g.b, g.hp*g.wp), Zeros(gr, f32(g.c, g.b, g.k-1))}, 2)
	l := g.r * g.wp
	rows := make([]*Node, 0, g.k*g.k+1)
	for dy := range g.k {
		for dx := range g.k {
			off := dy*g.wp + dx
			rows = append(rows, Reshape(Slice(xf, AxisRange(), AxisRange(), AxisRange(off, off+l)), g.c, g.b*l))
		}
	}
	rows = append(rows, Ones(gr, f32(1, g.b*l)))
	ps.patches = Concatenate(rows, 0)
	z := DotGeneral(convKernel(kernel, bias), []int{1}, nil, ps.patches, []int{0}, nil)
	a := Reshape(activate(z, st), g.o, g.b, g.r, g.wp)
	if g.wq < g.wp {
		a = Slice(a, AxisRange(), AxisRange(), AxisRange(), AxisRange(0, g.wq))
	}
	ps.wide = a
	if !g.pool {
		return Slice(a, AxisRange(), AxisRange(), AxisRange(), AxisRange(0, g.wo))
	}
	ps.pooled = ReduceMax(Reshape(a, g.o, g.b, g.r/2, 2, g.wq/2, 2), 3, 5)
	if g.wq/2 == g.wo/2 {
		return ps.pooled
	}
	return Slice(ps.pooled, AxisRange(), AxisRange(), AxisRange(), AxisRange(0, g.wo/2))
}

// convFirstPooled is convForward for a first layer followed by pooling,
// which needs no input gradient. Each of the four pooling phases (py, px)
// gets its own patches, read with stride-2 slices at exactly the output
// positions 2i+py, 2j+px that fall into pooled cell (i, j), and its own
// product z_(py,px) [O, B*h*w]. Pooling is then an element-wise maximum of
// four same-shape tensors and ReLU runs on the pooled quarter: the Go
// backend does both in fast same-shape loops, where the ReduceMax over a
// reshaped tensor and the pooling gradient's broadcasts walk generic
// iterators over the full activation (the largest of a CNN: a fifth of a
// corbin-cnn step).
func convFirstPooled(ps *pass, x, kernel, bias *Node, st step) *Node {
	g := newConvGeom(x, st)
	gr := x.Graph()
	if g.pad > 0 {
		x = Pad(x, ScalarZero(gr, dtypes.Float32), PadAxis{}, PadAxis{}, PadAxis{Start: g.pad, End: g.pad}, PadAxis{Start: g.pad, End: g.pad})
	}
	h, w := g.ho/2, g.wo/2
	wk := convKernel(kernel, bias)
	for phase := range 4 {
		ps.phasePatches[phase] = stridedPatches(x, g.k, phase/2, phase%2, 2, h, w)
		ps.phaseZ[phase] = DotGeneral(wk, []int{1}, nil, ps.phasePatches[phase], []int{0}, nil)
	}
	z := ps.phaseZ
	ps.phaseMax = Max(Max(z[0], z[1]), Max(z[2], z[3]))
	return Reshape(MaxScalar(ps.phaseMax, 0), g.o, g.b, h, w)
}

// convFirstPooledGrad returns the kernel and bias gradients of
// convFirstPooled given d, the gradient of its output: the ReLU passes d
// where the pooled maximum is positive, and the first phase (in row-major
// window order) whose product is that maximum receives it, as in
// maxPool2Grad.
func convFirstPooledGrad(ps pass, d *Node, st step) (gk, gb *Node) {
	zero := ScalarZero(d.Graph(), dtypes.Float32)
	d = Reshape(d, st.out, -1)
	d = Where(GreaterThan(ps.phaseMax, zero), d, zero)
	var full *Node
	for phase, z := range ps.phaseZ {
		// The first phase equal to the maximum takes d; later ties get 0.
		top := Equal(z, ps.phaseMax)
		dz := Where(top, d, zero)
		if phase < 3 {
			d = Where(top, zero, d)
		}
		part := DotGeneral(dz, []int{1}, nil, ps.phasePatches[phase], []int{1}, nil)
		if full == nil {
			full = part
		} else {
			full = Add(full, part)
		}
	}
	gk, gb = kernelGrads(full, st, ps.in.Shape().Dimensions[0])
	return gk, gb
}

// stridedPatches is the im2col matrix [k*k*C+1, B*h*w] of the padded x
// [C, B, Hp, Wp] for h x w outputs whose kernel offset (dy, dx) reads x at
// (y0+dy+s*i, x0+dx+s*j): rows in (dy, dx, c) order, each window one
// stride-s slice, and a last row of ones for the bias.
func stridedPatches(x *Node, k, y0, x0, s, h, w int) *Node {
	d := x.Shape().Dimensions
	c, n := d[0], d[1]*h*w
	rows := make([]*Node, 0, k*k+1)
	for dy := range k {
		for dx := range k {
			win := Slice(x, AxisRange(), AxisRange(), AxisRange(y0+dy, y0+dy+s*(h-1)+1).Stride(s), AxisRange(x0+dx, x0+dx+s*(w-1)+1).Stride(s))
			rows = append(rows, Reshape(win, c, n))
		}
	}
	rows = append(rows, Ones(x.Graph(), f32(1, n)))
	return Concatenate(rows, 0)
}

// kernelGrads splits the product full [O, k*k*C+1] of a conv's output
// gradient with its patches into the kernel gradient [O, C, k, k] and the
// bias gradient [O].
func kernelGrads(full *Node, st step, c int) (gk, gb *Node) {
	kk := st.k * st.k * c
	gk = TransposeAllAxes(Reshape(Slice(full, AxisRange(), AxisRange(0, kk)), st.out, st.k, st.k, c), 0, 3, 1, 2)
	gb = Reshape(Slice(full, AxisRange(), AxisRange(kk, kk+1)), st.out)
	return gk, gb
}

// convStrided is conv + activation of x [C, B, H, W] for a stride s > 1
// (no pooling): the window of kernel offset (dy, dx) is a stride-s slice
// of the padded input, so the patches [k*k*C+1, B*Ho*Wo] hold exactly the
// outputs' windows, and one product with convKernel gives [O, B*Ho*Wo].
func convStrided(ps *pass, x, kernel, bias *Node, st step) *Node {
	ho, wo, pad := stridedGeom(x, st)
	if pad > 0 {
		x = Pad(x, ScalarZero(x.Graph(), dtypes.Float32), PadAxis{}, PadAxis{}, PadAxis{Start: pad, End: pad}, PadAxis{Start: pad, End: pad})
	}
	ps.patches = stridedPatches(x, st.k, 0, 0, st.strides(), ho, wo)
	z := DotGeneral(convKernel(kernel, bias), []int{1}, nil, ps.patches, []int{0}, nil)
	ps.wide = Reshape(activate(z, st), st.out, x.Shape().Dimensions[1], ho, wo)
	return ps.wide
}

// stridedGeom is a strided conv's output size and padding for input x.
func stridedGeom(x *Node, st step) (ho, wo, pad int) {
	d := x.Shape().Dimensions
	if st.same {
		pad = st.k / 2
	}
	s := st.strides()
	return (d[2]+2*pad-st.k)/s + 1, (d[3]+2*pad-st.k)/s + 1, pad
}

// convStridedBackward returns the gradients of convStrided's kernel and
// bias and, unless first, of its input, given d, its output's gradient.
// Window (dy, dx)'s input gradient W[:, :, dy, dx]^T d [C, B, Ho, Wo]
// lands on the padded input's rows dy+s*i and columns dx+s*j: a Pad with
// s-1 interior zeros puts it there.
func convStridedBackward(ps pass, kernel, d *Node, st step, first bool) (gk, gb, dx *Node) {
	d = activateGrad(st, ps.wide, d)
	dd := d.Shape().Dimensions
	o, b, ho, wo := dd[0], dd[1], dd[2], dd[3]
	d = Reshape(d, o, -1)
	c := ps.in.Shape().Dimensions[0]
	gk, gb = kernelGrads(DotGeneral(d, []int{1}, nil, ps.patches, []int{1}, nil), st, c)
	if first {
		return gk, gb, nil
	}
	id := ps.in.Shape().Dimensions
	_, _, pad := stridedGeom(ps.in, st)
	hp, wp, s := id[2]+2*pad, id[3]+2*pad, st.strides()
	zero := ScalarZero(d.Graph(), dtypes.Float32)
	wt := TransposeAllAxes(kernel, 2, 3, 1, 0) // [k, k, C, O]
	var sum *Node
	for dy := range st.k {
		for dx := range st.k {
			w := Reshape(Slice(wt, AxisRange(dy, dy+1), AxisRange(dx, dx+1)), c, o)
			win := Reshape(DotGeneral(w, []int{1}, nil, d, []int{0}, nil), c, b, ho, wo)
			win = Pad(win, zero, PadAxis{}, PadAxis{},
				PadAxis{Start: dy, End: hp - dy - s*(ho-1) - 1, Interior: s - 1},
				PadAxis{Start: dx, End: wp - dx - s*(wo-1) - 1, Interior: s - 1})
			if sum == nil {
				sum = win
			} else {
				sum = Add(sum, win)
			}
		}
	}
	if pad > 0 {
		sum = Slice(sum, AxisRange(), AxisRange(), AxisRange(pad, pad+id[2]), AxisRange(pad, pad+id[3]))
	}
	return gk, gb, sum
}

// convBackward returns the gradients of the kernel and bias and, unless
// first, of the input x, given d, the gradient of convForward's output.
func convBackward(ps pass, kernel, d *Node, st step, first bool) (gk, gb, dx *Node) {
	g := newConvGeom(ps.in, st)
	gr := d.Graph()
	// widen appends n zero columns to the last axis (block copies).
	widen := func(v *Node, n int) *Node {
		if n == 0 {
			return v
		}
		dims := v.Shape().Dimensions
		return Concatenate([]*Node{v, Zeros(gr, f32(dims[0], dims[1], dims[2], n))}, 3)
	}
	if g.pool {
		d = widen(d, g.wq/2-g.wo/2)
		d = maxPool2Grad(ps.wide, ps.pooled, d) // includes the ReLU's gradient
	} else {
		d = activateGrad(st, ps.wide, widen(d, g.wp-g.wo))
	}
	d = Reshape(widen(d, g.wp-g.wq), g.o, -1) // [O, B*R*Wp]
	gk, gb = kernelGrads(DotGeneral(d, []int{1}, nil, ps.patches, []int{1}, nil), st, g.c)
	if first {
		return gk, gb, nil
	}
	// col2im: window (dy, dx)'s gradient W[:, :, dy, dx]^T d goes back to
	// flat positions off.. of the input planes.
	wt := TransposeAllAxes(kernel, 2, 3, 1, 0) // [k, k, C, O]
	l := g.r * g.wp
	var sum *Node
	for dy := range g.k {
		for dx := range g.k {
			off := dy*g.wp + dx
			w := Reshape(Slice(wt, AxisRange(dy, dy+1), AxisRange(dx, dx+1)), g.c, g.o)
			win := Reshape(DotGeneral(w, []int{1}, nil, d, []int{0}, nil), g.c, g.b, l)
			parts := []*Node{win}
			if off > 0 {
				parts = append([]*Node{Zeros(gr, f32(g.c, g.b, off))}, parts...)
			}
			if end := g.flat - off - l; end > 0 {
				parts = append(parts, Zeros(gr, f32(g.c, g.b, end)))
			}
			win = Concatenate(parts, 2)
			if sum == nil {
				sum = win
			} else {
				sum = Add(sum, win)
			}
		}
	}
	dx = Reshape(Slice(sum, AxisRange(), AxisRange(), AxisRange(0, g.hp*g.wp)), g.c, g.b, g.hp, g.wp)
	if g.pad > 0 {
		dx = Slice(dx, AxisRange(), AxisRange(), AxisRange(g.pad, g.pad+g.h), AxisRange(g.pad, g.pad+g.w))
	}
	return gk, gb, dx
}

// convKernel is a conv kernel [O, C, k, k] (OIHW) with its bias appended as
// a last column, as [O, k*k*C+1] in the (dy, dx, c) order of the patches.
func convKernel(kernel, bias *Node) *Node {
	d := kernel.Shape().Dimensions
	o, c, k := d[0], d[1], d[2]
	w := Reshape(TransposeAllAxes(kernel, 0, 2, 3, 1), o, k*k*c)
	return Concatenate([]*Node{w, Reshape(bias, o, 1)}, 1)
}

// maxPool2Grad routes the gradient d of out = 2 x 2 max pooling of x
// [C, B, H, W] (H, W even) to the first input of each window, in row-major
// order, that equals the window's maximum (PyTorch's choice), and, since x
// is a ReLU output, applies the ReLU's gradient too: a window whose maximum
// is 0 passes nothing (its out is replaced by -1, which no input equals).
// Routing to one input matters: on MNIST's blank margins the four inputs
// of a window are all equal (to the bias), and giving each the gradient
// multiplied it by up to 4 (caught by TestRefGrad). The first maximum is
// found as the minimum of the window positions (0..3) whose input ties.
func maxPool2Grad(x, out, d *Node) *Node {
	dims := x.Shape().Dimensions
	c, b, h, w := dims[0], dims[1], dims[2]/2, dims[3]/2
	gr := x.Graph()
	zero := ScalarZero(gr, dtypes.Float32)
	full := []int{c, b, h, 2, w, 2}
	up := func(v *Node) *Node {
		return BroadcastToDims(Reshape(v, c, b, h, 1, w, 1), full...)
	}
	out = Where(GreaterThan(out, zero), out, Scalar(gr, dtypes.Float32, -1))
	pos := BroadcastToDims(Const(gr, [][][][][][]float32{{{{{{0, 1}}, {{2, 3}}}}}}), full...)
	first := ReduceMin(Where(Equal(Reshape(x, full...), up(out)), pos, Scalar(gr, dtypes.Float32, 4)), 3, 5)
	g := Where(Equal(pos, up(first)), up(d), zero)
	return Reshape(g, c, b, 2*h, 2*w)
}

// reluGrad passes d where the ReLU output y is positive.
func reluGrad(y, d *Node) *Node {
	zero := ScalarZero(y.Graph(), dtypes.Float32)
	return Where(GreaterThan(y, zero), d, zero)
}

// lossGrad returns the per-example cross-entropy [B] of logits [classes, B]
// against labels y [B], and the gradient of sum_b wt_b * CE_b with respect
// to the logits: wt_b * (softmax - onehot).
func lossGrad(logits, y, wt *Node) (ce, d *Node) {
	dims := logits.Shape().Dimensions
	k, b := dims[0], dims[1]
	logp := LogSoftmax(logits, 0)
	onehot := ConvertDType(Equal(Iota(logits.Graph(), shapes.Make(dtypes.Int32, k, 1), 0), Reshape(y, 1, b)), dtypes.Float32)
	ce = Neg(ReduceSum(Mul(logp, onehot), 0))
	d = Mul(Sub(Exp(logp), onehot), Reshape(wt, 1, b))
	return ce, d
}

// backward returns the gradients of the loss, given its gradient dLogits
// with respect to the logits, in Tensors order.
func (m *Model) backward(params []*Node, masks []*Node, passes []pass, dLogits *Node) []*Node {
	grads := make([]*Node, len(m.specs))
	d := dLogits
	nmask := len(m.dropoutProbs())
	for i := len(m.steps) - 1; i >= 0; i-- {
		st, ps := m.steps[i], passes[i]
		first := i == 0
		switch st.kind {
		case dropout:
			nmask--
			d = Mul(d, masks[nmask])
		case dense:
			if !st.last {
				d = activateGrad(st, ps.out, d)
			}
			w := params[st.w]
			grads[st.w] = DotGeneral(d, []int{1}, nil, ps.in, []int{1}, nil) // [O, I]
			grads[st.b] = ReduceSum(d, 1)
			if first {
				break
			}
			// dIn = W^T d: transpose whichever is smaller, W [O, I] or d [O, B].
			o, in, b := w.Shape().Dimensions[0], w.Shape().Dimensions[1], d.Shape().Dimensions[1]
			if o*in <= o*b+in*b {
				d = DotGeneral(Transpose(w, 0, 1), []int{1}, nil, d, []int{0}, nil)
			} else {
				d = Transpose(DotGeneral(Transpose(d, 0, 1), []int{1}, nil, w, []int{0}, nil), 0, 1)
			}
			if prev := passes[i-1].out; prev.Rank() == 4 {
				d = unflatten(d, prev.Shape().Dimensions)
			}
		case conv:
			switch {
			case st.strides() > 1:
				grads[st.w], grads[st.b], d = convStridedBackward(ps, params[st.w], d, st, first)
			case first && st.pool:
				grads[st.w], grads[st.b] = convFirstPooledGrad(ps, d, st)
			default:
				grads[st.w], grads[st.b], d = convBackward(ps, params[st.w], d, st, first)
			}
		}
	}
	return grads
}

// f32 is a float32 shape.
func f32(dims ...int) shapes.Shape { return shapes.Make(dtypes.Float32, dims...) }
