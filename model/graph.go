package model

import (
	. "github.com/gomlx/gomlx/core/graph"

	"github.com/gomlx/compute/dtypes"
	"github.com/gomlx/compute/shapes"
)

// forward builds the logits [batch, classes] of a batch x [batch, features...]
// from the parameter nodes params (in Tensors order). masks holds one
// dropout mask per dropout layer ([batch, units], values 0 or 1/(1-p)) when
// training, nil when evaluating (dropout is then the identity).
func (m *Model) forward(x *Node, params []*Node, masks []*Node) *Node {
	batch := x.Shape().Dimensions[0]
	nmask := 0
	for _, st := range m.steps {
		switch st.kind {
		case conv:
			x = convLayer(x, params[st.w], params[st.b], st.k, st.same)
		case maxPool:
			x = maxPool2(x)
		case dense:
			if x.Rank() != 2 {
				if x.Rank() == 4 {
					x = TransposeAllAxes(x, 0, 3, 1, 2) // flatten in (c, h, w) order
				}
				x = Reshape(x, batch, -1)
			}
			x = Add(Einsum("bi,oi->bo", x, params[st.w]), Reshape(params[st.b], 1, st.out))
			if !st.last {
				x = MaxScalar(x, 0)
			}
		case dropout:
			if masks != nil {
				x = Mul(x, masks[nmask])
			}
			nmask++
		}
	}
	return x
}

// dropoutShapes are the shapes of the dropout masks of a training batch.
func (m *Model) dropoutShapes(batch int) [][]int {
	var out [][]int
	for _, st := range m.steps {
		if st.kind == dropout {
			out = append(out, append([]int{batch}, st.outDim...))
		}
	}
	return out
}

// convLayer is a stride-1 k x k convolution of x [B, H, W, C] with kernel
// [k, k, C, O] and bias [O], then ReLU, lowered to im2col + one matrix
// multiplication: the k*k shifted windows of x are concatenated along the
// channel axis into patches [B, Ho, Wo, k*k*C], whose (dy, dx, c) order is
// the row-major order of the HWIO kernel, so the kernel reshaped to
// [k*k*C, O] multiplies them directly. Its gradient is the gradient of
// slices and a concatenation (pads and sums) and two matrix products, all of
// which the Go backend runs far faster than its direct convolution loop.
// With same, x is first zero-padded by k/2 on each side (k odd).
func convLayer(x, kernel, bias *Node, k int, same bool) *Node {
	dims := x.Shape().Dimensions
	b, c := dims[0], dims[3]
	if same {
		zero := ScalarZero(x.Graph(), x.DType())
		p := k / 2
		x = Pad(x, zero, PadAxis{}, PadAxis{Start: p, End: p}, PadAxis{Start: p, End: p}, PadAxis{})
		dims = x.Shape().Dimensions
	}
	h, w := dims[1], dims[2]
	ho, wo := h-k+1, w-k+1
	o := kernel.Shape().Dimensions[0]
	var patches *Node
	if k == 1 {
		patches = x
	} else {
		windows := make([]*Node, 0, k*k)
		for dy := range k {
			for dx := range k {
				windows = append(windows, Slice(x, AxisRange(), AxisRange(dy, dy+ho), AxisRange(dx, dx+wo), AxisRange()))
			}
		}
		patches = Concatenate(windows, 3)
	}
	y := MatMul(Reshape(patches, b*ho*wo, k*k*c), Reshape(TransposeAllAxes(kernel, 2, 3, 1, 0), k*k*c, o))
	y = Add(y, Reshape(bias, 1, o))
	return Reshape(MaxScalar(y, 0), b, ho, wo, o)
}

// maxPool2 is 2 x 2 max pooling with stride 2 of x [B, H, W, C], dropping a
// last odd row or column (PyTorch's floor mode). It is a reshape and a
// ReduceMax rather than the backend's ReduceWindow, whose gradient
// (SelectAndScatter) is a slow generic loop on the Go backend. Where two
// inputs of a window tie for the maximum, the gradient goes to both (after
// a ReLU a tie is almost always between zeros, whose gradient ReLU stops).
func maxPool2(x *Node) *Node {
	d := x.Shape().Dimensions
	b, h, w, c := d[0], d[1]/2, d[2]/2, d[3]
	if d[1]%2 != 0 || d[2]%2 != 0 {
		x = Slice(x, AxisRange(), AxisRange(0, 2*h), AxisRange(0, 2*w), AxisRange())
	}
	return ReduceMax(Reshape(x, b, h, 2, w, 2, c), 2, 4)
}

// crossEntropy is the per-example cross-entropy [batch] of logits against
// labels y [batch] (int32).
func crossEntropy(logits, y *Node, classes int) *Node {
	logp := LogSoftmax(logits, -1)
	return Neg(ReduceSum(Mul(logp, OneHot(y, classes, dtypes.Float32)), -1))
}

// f32 is a float32 shape.
func f32(dims ...int) shapes.Shape { return shapes.Make(dtypes.Float32, dims...) }
