package model

import (
	"fmt"
	"math"
	"testing"

	"github.com/gomlx/compute"
	"github.com/gomlx/compute/dtypes"
	"github.com/gomlx/compute/shapes"
	. "github.com/gomlx/gomlx/core/graph"
	"github.com/gomlx/gomlx/support/exceptions"
)

// reference builds the model's logits [B, classes] from an NHWC (or [B,
// features]) batch with GoMLX's own ops: its native Convolve (with
// PyTorch's padding k/2 on every side and stride), MaxPool, dense products
// and Sigmoid, with PyTorch's flatten order. masks are feature-major, as
// the trainer feeds them.
func (m *Model) reference(x *Node, params, masks []*Node) *Node {
	nmask := 0
	act := func(z *Node, st step) *Node {
		if st.sigmoid {
			return Sigmoid(z)
		}
		return MaxScalar(z, 0)
	}
	for _, st := range m.steps {
		switch st.kind {
		case conv:
			k := TransposeAllAxes(params[st.w], 2, 3, 1, 0) // OIHW -> HWIO
			p := 0
			if st.same {
				p = st.k / 2
			}
			cb := Convolve(x, k).Strides(st.strides()).PaddingPerDim([][2]int{{p, p}, {p, p}})
			x = act(Add(cb.Done(), Reshape(params[st.b], 1, 1, 1, st.out)), st)
		case maxPool:
			x = MaxPool(x).Window(2).Strides(2).NoPadding().Done()
		case dense:
			x = denseNHWC(x, params, st)
			if !st.last {
				x = act(x, st)
			}
		case dropout:
			x = Mul(x, Transpose(masks[nmask], 0, 1))
			nmask++
		}
	}
	return x
}

// TestGradients checks the hand-written backward pass (im2col convolution,
// col2im, pooling, flatten, dropout, dense, softmax cross-entropy) against
// GoMLX's autodiff of the reference model built from GoMLX's native
// convolution and pooling, for every layer type: valid and same padding,
// one and several input channels, odd sizes under pooling, dropout,
// strided convolutions (lenet: odd sizes whose last padded row no window
// reaches), sigmoid convolutions and a sigmoid hidden dense layer.
func TestGradients(t *testing.T) {
	withArch(t, "sigmoid-mlp", []layer{{kind: dense, out: 8, sigmoid: true}, {kind: dense, out: 6}})
	for _, c := range []struct {
		arch  string
		input []int
	}{
		{"cnn2", []int{28, 28, 1}},
		{"corbin-cnn", []int{16, 16, 2}}, // 14 -> 7 -> 5 -> 2: odd pooling
		{"vgg-small", []int{8, 8, 3}},
		{"mlp", []int{6}},
		{"lenet", []int{28, 28, 1}},
		{"lenet", []int{10, 9, 2}}, // 10 -> 5 (row 13 of 14 padded unread), 9 -> 5; -> 3 -> 3
		{"sigmoid-mlp", []int{6}},
	} {
		t.Run(fmt.Sprint(c.arch, c.input), func(t *testing.T) {
			m, err := New(c.arch, c.input, 4)
			if err != nil {
				t.Fatal(err)
			}
			const batch = 5
			checkGradients(t, m, batch)
		})
	}
}

func checkGradients(t *testing.T, m *Model, batch int) {
	backend, err := goBackend()
	if err != nil {
		t.Fatal(err)
	}
	xs, ys := synthetic(m, batch, 9)
	// A blank top half, as MNIST's margins: with positive biases, every
	// pooling window there ties exactly, and the gradient must go to one
	// input of the window, not to each.
	f := m.Features()
	for i := range batch {
		clear(xs[i*f : i*f+f/2])
	}
	ws := m.Init(4)
	for _, st := range m.steps {
		if st.b >= 0 {
			for j := range ws[st.b] {
				ws[st.b][j] = 0.05 + 0.01*float32(j%5-2)
			}
		}
	}
	wt := make([]float32, batch)
	for i := range wt {
		wt[i] = float32(i+1) / 10
	}
	p := &program{batch: batch}
	p.x = make([]float32, product(m.batchShape(batch)))
	p.y = make([]int32, batch)
	p.wt = make([]float32, batch)
	p.fill(m, xs, ys, seq(batch), 1)
	copy(p.wt, wt)
	var maskData [][]float32
	for i, d := range m.dropoutShapes(batch) {
		mk := make([]float32, product(d))
		bits := make([]uint32, len(mk))
		for j := range bits {
			bits[j] = uint32(j*2654435761) ^ uint32(i)
		}
		fillMask(mk, bits, 0.5)
		maskData = append(maskData, mk)
	}

	var inputs []compute.Buffer
	add := func(flat any, shape shapes.Shape) {
		b, err := backend.BufferFromFlatData(0, flat, shape)
		if err != nil {
			t.Fatal(err)
		}
		inputs = append(inputs, b)
	}
	var g *Graph
	err = exceptions.TryCatch[error](func() {
		g = NewGraph(backend, "gradcheck")
		params := make([]*Node, len(m.specs))
		for i, s := range m.specs {
			params[i] = Parameter(g, s.Name, f32(s.Shape...))
			add(ws[i], f32(s.Shape...))
		}
		xfm := Parameter(g, "xfm", f32(m.batchShape(batch)...))
		add(p.x, f32(m.batchShape(batch)...))
		xnat := Parameter(g, "x", f32(append([]int{batch}, m.input...)...))
		add(xs, f32(append([]int{batch}, m.input...)...))
		y := Parameter(g, "y", shapes.Make(dtypes.Int32, batch))
		add(ys, shapes.Make(dtypes.Int32, batch))
		w := Parameter(g, "wt", f32(batch))
		add(wt, f32(batch))
		var masks []*Node
		for i, d := range m.dropoutShapes(batch) {
			masks = append(masks, Parameter(g, fmt.Sprintf("mask%d", i), f32(d...)))
			add(maskData[i], f32(d...))
		}
		logits, passes := m.forward(xfm, params, masks)
		ce, dLogits := lossGrad(logits, y, w)
		loss := ReduceAllSum(Mul(ce, w))
		grads := m.backward(params, masks, passes, dLogits)

		ref := m.reference(xnat, params, masks)
		refCE := Neg(ReduceSum(Mul(LogSoftmax(ref, -1), OneHot(y, m.classes, dtypes.Float32)), -1))
		refLoss := ReduceAllSum(Mul(refCE, w))
		refGrads := Gradient(refLoss, params...)
		outs := append([]*Node{loss, refLoss}, grads...)
		outs = append(outs, refGrads...)
		if err := g.Compile(outs...); err != nil {
			panic(err)
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	out, err := g.Executable().Execute(inputs, make([]bool, len(inputs)), 0)
	if err != nil {
		t.Fatal(err)
	}
	read := func(b compute.Buffer, n int) []float32 {
		v := make([]float32, n)
		if err := b.ToFlatData(v); err != nil {
			t.Fatal(err)
		}
		return v
	}
	l, rl := read(out[0], 1)[0], read(out[1], 1)[0]
	if math.Abs(float64(l-rl)) > 1e-5*math.Abs(float64(rl)) {
		t.Errorf("loss %v, reference %v", l, rl)
	}
	nt := len(m.specs)
	for i, s := range m.specs {
		got, want := read(out[2+i], s.Size()), read(out[2+nt+i], s.Size())
		var diff, norm float64
		for j := range got {
			diff = math.Max(diff, math.Abs(float64(got[j]-want[j])))
			norm = math.Max(norm, math.Abs(float64(want[j])))
		}
		if norm == 0 || diff > 1e-4*norm {
			t.Errorf("%s: max |grad - reference| = %g, max |reference| = %g", s.Name, diff, norm)
		}
	}
}

// withArch registers a test-only architecture for the rest of the test,
// given as archs used to list them (without the logits layer).
func withArch(t *testing.T, name string, layers []layer) {
	zoo[name] = specOf(name, "test only", layers)
	t.Cleanup(func() { delete(zoo, name) })
}
