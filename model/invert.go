package model

import (
	"fmt"

	"github.com/gomlx/compute"
	"github.com/gomlx/compute/dtypes"
	"github.com/gomlx/compute/shapes"
	. "github.com/gomlx/gomlx/core/graph"
	"github.com/gomlx/gomlx/support/exceptions"
)

// Inverter is the objective of a gradient-inversion attack (DLG: Zhu, Liu
// and Han, "Deep leakage from gradients", NeurIPS 2019; iDLG: Zhao, Mopuri
// and Bilen, 2020) on one model at fixed weights: for a guessed batch x
// with guessed labels, the squared distance
//
//	D = sum over tensors t of ||grad_t L(x, labels) - target_t||^2
//
// between the guess's gradient of the mean cross-entropy L and an observed
// gradient, and D's gradient with respect to x and the labels. That is a
// second derivative of the model, which GoMLX's autodiff derives from a
// forward graph written only with ops whose own derivatives it knows: the
// convolution is im2col from strided slices and one product (autodiff of
// GoMLX's ConvGeneral cannot be differentiated again in v0.28.8), the max
// pooling the maximum of four strided slices. Dropout is the identity: the
// attacker does not know the client's masks.
//
// It computes in float64: the attack's optimizer (L-BFGS) line-searches on
// differences of D that float32 rounding would swamp near a match.
//
// An Inverter is not safe for concurrent use.
type Inverter struct {
	m       *Model
	batch   int
	learn   bool // labels are logits to learn (DLG), not given probabilities (iDLG)
	backend compute.Backend
	g       *Graph
	in      []compute.Buffer // weights, target (nil before SetTarget), then x and labels (shared)
	keep    []bool           // donate none of in: every Match reuses them
	x, y    []float64        // host views of the shared x and label buffers
}

// NewInverter compiles the objective for batches of batch examples. With
// learnLabels the labels Match takes are logits, softmax-ed into soft labels
// and learnt with the images (DLG); without, they are the probabilities of
// each class, usually one-hot labels inferred beforehand (iDLG), and Match
// returns no gradient for them.
func (m *Model) NewInverter(batch int, learnLabels bool) (*Inverter, error) {
	if batch < 1 {
		return nil, fmt.Errorf("model: inverter batch %d", batch)
	}
	b, err := goBackend()
	if err != nil {
		return nil, err
	}
	v := &Inverter{m: m, batch: batch, learn: learnLabels, backend: b}
	xshape := append([]int{batch}, m.input...)
	if !m.image() {
		xshape = []int{batch, m.Features()}
	}
	err = exceptions.TryCatch[error](func() {
		g := NewGraph(b, fmt.Sprintf("%s-inversion-%d", m.arch, batch))
		params := make([]*Node, len(m.specs))
		target := make([]*Node, len(m.specs))
		for i, s := range m.specs {
			params[i] = Parameter(g, s.Name, f64(s.Shape...))
		}
		for i, s := range m.specs {
			target[i] = Parameter(g, s.Name+"/target", f64(s.Shape...))
		}
		x := Parameter(g, "x", f64(xshape...))
		labels := Parameter(g, "labels", f64(batch, m.classes))
		probs := labels
		if learnLabels {
			probs = Softmax(labels, -1)
		}
		logits := m.differentiable(x, params)
		ce := DivScalar(Neg(ReduceAllSum(Mul(probs, LogSoftmax(logits, -1)))), float64(batch))
		grads := Gradient(ce, params...)
		var dist *Node
		for i, gr := range grads {
			d := ReduceAllSum(Square(Sub(gr, target[i])))
			if dist == nil {
				dist = d
			} else {
				dist = Add(dist, d)
			}
		}
		outs := []*Node{dist}
		if learnLabels {
			outs = append(outs, Gradient(dist, x, labels)...)
		} else {
			outs = append(outs, Gradient(dist, x)...)
		}
		if err := g.Compile(outs...); err != nil {
			panic(err)
		}
		v.g = g
	})
	if err != nil {
		return nil, fmt.Errorf("model: building the inversion graph of %s: %w", m.arch, err)
	}
	v.in = make([]compute.Buffer, v.g.NumParameters())
	v.keep = make([]bool, len(v.in))
	buf, flat, err := b.NewSharedBuffer(0, f64(xshape...))
	if err != nil {
		return nil, err
	}
	v.in[2*len(m.specs)], v.x = buf, flat.([]float64)
	if buf, flat, err = b.NewSharedBuffer(0, f64(batch, m.classes)); err != nil {
		return nil, err
	}
	v.in[2*len(m.specs)+1], v.y = buf, flat.([]float64)
	return v, nil
}

// differentiable builds the logits [B, classes] of an NHWC (or [B,
// features]) batch from ops whose derivatives GoMLX can differentiate
// again; the layouts are PyTorch's (kernels OIHW, flatten in CHW order).
func (m *Model) differentiable(x *Node, params []*Node) *Node {
	act := func(st step, x *Node) *Node {
		if st.sigmoid {
			return Sigmoid(x)
		}
		// PyTorch's ReLU, whose derivative at 0 is 0 (MaxScalar's is 1).
		zero := ScalarZero(x.Graph(), x.DType())
		return Where(GreaterThan(x, zero), x, zero)
	}
	for _, st := range m.steps {
		switch st.kind {
		case conv:
			x = act(st, Add(im2colConv(x, params[st.w], st), Reshape(params[st.b], 1, 1, 1, st.out)))
		case maxPool:
			d := x.Shape().Dimensions
			h, w := d[1]/2, d[2]/2
			at := func(i, j int) *Node {
				return Slice(x, AxisRange(), AxisRange(i, i+2*h-1).Stride(2), AxisRange(j, j+2*w-1).Stride(2), AxisRange())
			}
			// Max passes a tie's gradient to its first operand: to the
			// first maximum in row-major order, as PyTorch does.
			x = Max(Max(at(0, 0), at(0, 1)), Max(at(1, 0), at(1, 1)))
		case dense:
			x = denseNHWC(x, params, st)
			if !st.last {
				x = act(st, x)
			}
		}
	}
	return x
}

// denseNHWC is a dense layer's product and bias for an example-major batch
// ([B, features], or NHWC flattened as PyTorch flattens NCHW).
func denseNHWC(x *Node, params []*Node, st step) *Node {
	if x.Rank() == 4 {
		x = TransposeAllAxes(x, 0, 3, 1, 2) // NHWC -> NCHW
	}
	x = Reshape(x, x.Shape().Dimensions[0], -1)
	return Add(Einsum("bi,oi->bo", x, params[st.w]), Reshape(params[st.b], 1, st.out))
}

// im2colConv is the convolution of an NHWC batch with an OIHW kernel:
// every kernel offset's strided slice of the (padded) input, concatenated
// along channels into patches [B, Ho, Wo, k*k*C], times the kernel.
func im2colConv(x, kernel *Node, st step) *Node {
	k, s := st.k, st.strides()
	if st.same {
		p := compute.PadAxis{Start: k / 2, End: k / 2}
		x = Pad(x, ScalarZero(x.Graph(), x.DType()), compute.PadAxis{}, p, p, compute.PadAxis{})
	}
	d := x.Shape().Dimensions
	ho, wo := (d[1]-k)/s+1, (d[2]-k)/s+1
	cols := make([]*Node, 0, k*k)
	for i := range k {
		for j := range k {
			cols = append(cols, Slice(x, AxisRange(),
				AxisRange(i, i+(ho-1)*s+1).Stride(s), AxisRange(j, j+(wo-1)*s+1).Stride(s), AxisRange()))
		}
	}
	patches := Concatenate(cols, 3) // (i, j, c) order
	kk := Reshape(TransposeAllAxes(kernel, 0, 2, 3, 1), st.out, -1)
	return Einsum("bhwi,oi->bhwo", patches, kk)
}

// SetTarget fixes the model's weights and the observed gradient (both in
// Tensors order) for the following Match calls.
func (v *Inverter) SetTarget(weights, target [][]float32) error {
	n := len(v.m.specs)
	if len(weights) != n || len(target) != n {
		return fmt.Errorf("model: %d weight and %d target tensors, the model has %d", len(weights), len(target), n)
	}
	for i, s := range v.m.specs {
		for _, t := range [][]float32{weights[i], target[i]} {
			if len(t) != s.Size() {
				return fmt.Errorf("model: tensor %s has %d values, want %d", s.Name, len(t), s.Size())
			}
		}
	}
	for i, s := range v.m.specs {
		for k, t := range [][]float32{weights[i], target[i]} {
			w := make([]float64, len(t))
			for j, x := range t {
				w[j] = float64(x)
			}
			b, err := v.backend.BufferFromFlatData(0, w, f64(s.Shape...))
			if err != nil {
				return err
			}
			if old := v.in[k*n+i]; old != nil {
				_ = old.Finalize()
			}
			v.in[k*n+i] = b
		}
	}
	return nil
}

// Match returns D at the guess (x, labels) and writes its gradient with
// respect to x into gx and, when labels are learnt, with respect to them
// into glabels. x holds the batch's examples back to back, as package data
// lays them out (images HWC); labels is [batch, classes], row-major.
func (v *Inverter) Match(x, labels, gx, glabels []float64) (dist float64, err error) {
	if v.in[0] == nil {
		return 0, fmt.Errorf("model: Match before SetTarget")
	}
	f := v.m.Features()
	if len(x) != v.batch*f || len(gx) != len(x) || len(labels) != v.batch*v.m.classes {
		return 0, fmt.Errorf("model: Match of %d inputs (%d gradient) and %d labels, want %d and %d",
			len(x), len(gx), len(labels), v.batch*f, v.batch*v.m.classes)
	}
	if v.learn && len(glabels) != len(labels) {
		return 0, fmt.Errorf("model: label gradient has %d values, want %d", len(glabels), len(labels))
	}
	copy(v.x, x)
	copy(v.y, labels)
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("model: executing %s: %v", v.g.Name(), r)
		}
	}()
	out, err := v.g.Executable().Execute(v.in, v.keep, 0)
	if err != nil {
		return 0, err
	}
	defer finalize(out)
	d := make([]float64, 1)
	if err := out[0].ToFlatData(d); err != nil {
		return 0, err
	}
	if err := out[1].ToFlatData(gx); err != nil {
		return 0, err
	}
	if v.learn {
		if err := out[2].ToFlatData(glabels); err != nil {
			return 0, err
		}
	}
	return d[0], nil
}

// f64 is a float64 shape.
func f64(dims ...int) shapes.Shape { return shapes.Make(dtypes.Float64, dims...) }
