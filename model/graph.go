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
	patches *Node // conv: the im2col matrix [k*k*C+1, B*Ho*Wo], last row ones
	out     *Node // the step's output activation (after ReLU, pooling or dropout)
}

// forward builds the logits [classes, batch] of a feature-major batch x
// ([C, B, H, W] for the CNNs, [features, B] otherwise) from the parameter
// nodes (in Tensors order). masks holds one dropout mask per dropout layer
// (feature-major, values 0 or 1/(1-p)) when training, nil when evaluating.
// It returns the per-step record for backward.
func (m *Model) forward(x *Node, params []*Node, masks []*Node) (*Node, []pass) {
	passes := make([]pass, len(m.steps))
	nmask := 0
	for i, st := range m.steps {
		passes[i].in = x
		switch st.kind {
		case conv:
			passes[i].patches = im2col(x, st.k, st.same)
			x = convForward(passes[i].patches, params[st.w], params[st.b], x.Shape().Dimensions[1], st.outDim)
		case maxPool:
			x = maxPool2(x)
		case dense:
			x = flatten(x)
			passes[i].in = x
			w := params[st.w]
			x = Add(DotGeneral(w, []int{1}, nil, x, []int{0}, nil), Reshape(params[st.b], st.out, 1))
			if !st.last {
				x = MaxScalar(x, 0)
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

// im2col lowers a stride-1 k x k convolution of x [C, B, H, W] to a matrix:
// the k*k shifted windows of x, each [C, B*Ho*Wo], stacked in (dy, dx, c)
// row order, and a last row of ones that carries the bias through the
// same product (the Go backend adds a broadcast bias with a slow generic
// iterator; a row of the concatenation is free). With same, x is first
// zero-padded by k/2 on each side (k odd).
func im2col(x *Node, k int, same bool) *Node {
	if same {
		p := k / 2
		x = Pad(x, ScalarZero(x.Graph(), x.DType()), PadAxis{}, PadAxis{}, PadAxis{Start: p, End: p}, PadAxis{Start: p, End: p})
	}
	d := x.Shape().Dimensions
	c, b, h, w := d[0], d[1], d[2], d[3]
	ho, wo := h-k+1, w-k+1
	n := b * ho * wo
	rows := make([]*Node, 0, k*k+1)
	for dy := range k {
		for dx := range k {
			win := x
			if k > 1 {
				win = Slice(x, AxisRange(), AxisRange(), AxisRange(dy, dy+ho), AxisRange(dx, dx+wo))
			}
			rows = append(rows, Reshape(win, c, n))
		}
	}
	rows = append(rows, Ones(x.Graph(), f32(1, n)))
	return Concatenate(rows, 0)
}

// convKernel is a conv kernel [O, C, k, k] (OIHW) with its bias appended as
// a last column, as [O, k*k*C+1] in the (dy, dx, c) order of im2col.
func convKernel(kernel, bias *Node) *Node {
	d := kernel.Shape().Dimensions
	o, c, k := d[0], d[1], d[2]
	w := Reshape(TransposeAllAxes(kernel, 0, 2, 3, 1), o, k*k*c)
	return Concatenate([]*Node{w, Reshape(bias, o, 1)}, 1)
}

// convForward multiplies the kernel by the patches and applies ReLU,
// giving the CNHW activation of shape outDim (without batch) and batch b.
func convForward(patches, kernel, bias *Node, b int, outDim []int) *Node {
	z := DotGeneral(convKernel(kernel, bias), []int{1}, nil, patches, []int{0}, nil)
	return Reshape(MaxScalar(z, 0), outDim[2], b, outDim[0], outDim[1])
}

// maxPool2 is 2 x 2 max pooling with stride 2 of x [C, B, H, W], dropping
// a last odd row or column (PyTorch's floor mode), as a reshape and a
// ReduceMax.
func maxPool2(x *Node) *Node {
	d := x.Shape().Dimensions
	c, b, h, w := d[0], d[1], d[2]/2, d[3]/2
	if d[2]%2 != 0 || d[3]%2 != 0 {
		x = Slice(x, AxisRange(), AxisRange(), AxisRange(0, 2*h), AxisRange(0, 2*w))
	}
	return ReduceMax(Reshape(x, c, b, h, 2, w, 2), 3, 5)
}

// maxPool2Grad routes the gradient d of out = maxPool2(x) to the inputs
// that were the maximum of their window, and, since x is a ReLU output,
// applies the ReLU's gradient too: a window whose maximum is 0 passes
// nothing (its out is replaced by -1, which no input equals), which saves
// a pass over the large unpooled tensor. Where two inputs of a window tie
// for a positive maximum, both get the gradient (ties between distinct
// positive float activations are rare; PyTorch picks one).
func maxPool2Grad(x, out, d *Node) *Node {
	dims := x.Shape().Dimensions
	c, b, h, w := dims[0], dims[1], dims[2]/2, dims[3]/2
	zero := ScalarZero(x.Graph(), dtypes.Float32)
	up := func(v *Node) *Node {
		return BroadcastToDims(Reshape(v, c, b, h, 1, w, 1), c, b, h, 2, w, 2)
	}
	out = Where(GreaterThan(out, zero), out, Scalar(x.Graph(), dtypes.Float32, -1))
	xe := x
	if dims[2]%2 != 0 || dims[3]%2 != 0 {
		xe = Slice(x, AxisRange(), AxisRange(), AxisRange(0, 2*h), AxisRange(0, 2*w))
	}
	g := Where(Equal(Reshape(xe, c, b, h, 2, w, 2), up(out)), up(d), zero)
	g = Reshape(g, c, b, 2*h, 2*w)
	if dims[2]%2 != 0 || dims[3]%2 != 0 {
		g = Pad(g, zero, PadAxis{}, PadAxis{}, PadAxis{End: dims[2] - 2*h}, PadAxis{End: dims[3] - 2*w})
	}
	return g
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
	reluDone := false
	for i := len(m.steps) - 1; i >= 0; i-- {
		st, ps := m.steps[i], passes[i]
		first := i == 0
		pooled := reluDone // the next step was a pooling that applied this step's ReLU
		reluDone = false
		switch st.kind {
		case dropout:
			nmask--
			d = Mul(d, masks[nmask])
		case maxPool:
			d = maxPool2Grad(ps.in, ps.out, d)
			reluDone = true // maxPool2Grad applied the preceding conv's ReLU
		case dense:
			if !st.last {
				d = reluGrad(ps.out, d)
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
			if prev := m.steps[i-1]; prev.kind != dense && len(prev.outDim) == 3 {
				od := prev.outDim
				d = unflatten(d, []int{od[2], b, od[0], od[1]})
			}
		case conv:
			d = Reshape(d, st.out, -1) // [O, B*Ho*Wo]
			if !pooled {
				d = reluGrad(Reshape(ps.out, st.out, -1), d)
			}
			gk := DotGeneral(d, []int{1}, nil, ps.patches, []int{1}, nil) // [O, k*k*C+1]
			o, k := st.out, st.k
			c := st.in[2]
			grads[st.w] = TransposeAllAxes(Reshape(Slice(gk, AxisRange(), AxisRange(0, k*k*c)), o, k, k, c), 0, 3, 1, 2)
			grads[st.b] = Reshape(Slice(gk, AxisRange(), AxisRange(k*k*c, k*k*c+1)), o)
			if first {
				break
			}
			// The patches' gradient W^T d [k*k*C, N], folded back (col2im).
			wt := Reshape(TransposeAllAxes(params[st.w], 2, 3, 1, 0), k*k*c, o)
			dp := DotGeneral(wt, []int{1}, nil, d, []int{0}, nil)
			d = col2im(dp, ps.in.Shape().Dimensions, k, st.same)
		}
	}
	return grads
}

// col2im is the adjoint of im2col (without its ones row): it sums each
// window's gradient rows back onto the input positions they were read
// from, giving the gradient of x [C, B, H, W] (of the padded x, cropped,
// for same).
func col2im(dp *Node, xdims []int, k int, same bool) *Node {
	c, b, h, w := xdims[0], xdims[1], xdims[2], xdims[3]
	p := 0
	if same {
		p = k / 2
	}
	hp, wp := h+2*p, w+2*p
	ho, wo := hp-k+1, wp-k+1
	zero := ScalarZero(dp.Graph(), dtypes.Float32)
	var sum *Node
	for dy := range k {
		for dx := range k {
			r := (dy*k + dx) * c
			win := Reshape(Slice(dp, AxisRange(r, r+c), AxisRange()), c, b, ho, wo)
			win = Pad(win, zero, PadAxis{}, PadAxis{}, PadAxis{Start: dy, End: hp - ho - dy}, PadAxis{Start: dx, End: wp - wo - dx})
			if sum == nil {
				sum = win
			} else {
				sum = Add(sum, win)
			}
		}
	}
	if p > 0 {
		sum = Slice(sum, AxisRange(), AxisRange(), AxisRange(p, p+h), AxisRange(p, p+w))
	}
	return sum
}

// f32 is a float32 shape.
func f32(dims ...int) shapes.Shape { return shapes.Make(dtypes.Float32, dims...) }
