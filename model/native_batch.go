package model

import (
	"github.com/fedpq/fedpq/model/internal/act"
	"github.com/fedpq/fedpq/model/internal/gemm"
)

// useBatchInner reports whether a convolution computes its products with
// the example innermost ("batch-inner"): [C, Hp, Wp, nb] input, [O, Ho,
// Wo, nb] output and dz, copied from and to the engine's [C, B, H, W]
// edges by transposing passes. Its patches then read runs of nb contiguous
// floats whatever the stride and output width, so the forward product
// reads them in place (gemm.MulDirect), the weight gradient is dot
// products over runs of nb (gemm.MulDot), and the input gradient's
// windows pack by runs of nb. In the [C, B, H, W] layout a strided
// convolution's patches are gathered element by element, and rows of 7
// (lenet's 7 x 7 outputs) fill neither MulDirect's groups of 8 nor
// MulDot's blocks, so both fall back to packing, once for the forward
// product and again, transposed, for the weight gradient.
//
// It is used where that happens with few output channels (with 16 or
// more, packing is a small part of a product) and without pooling: in the
// zoo, lenet's three convolutions. Between two such convolutions, after a
// sigmoid, nothing is transposed (see convOp.next): in lenet only the
// first input, the last output and its gradient are.
func useBatchInner(st step, o, wo int) bool {
	return o < 16 && !st.pool && (st.strides() > 1 || wo%8 != 0)
}

// fill writes base + i0*s0 + i1*s1 + i2*s2 for i0 < n0, i1 < n1, i2 < n2
// into dst in row-major order, as offsets does, without allocating.
func fill(dst []int, base, n0, s0, n1, s1, n2, s2 int) []int {
	dst = dst[:0]
	for i0 := range n0 {
		for i1 := range n1 {
			for i2 := range n2 {
				dst = append(dst, base+i0*s0+i1*s1+i2*s2)
			}
		}
	}
	return dst
}

// batchTables sets a batch-inner convolution's views for minibatches of nb
// examples: the example stride of xt, zt and dzt is nb, so that the
// products see nb examples and compute the same for any workspace size.
func (l *convOp) batchTables(nb int) {
	if !l.bi || l.tabNB == nb {
		return
	}
	l.tabNB = nb
	k, s := l.k, l.s
	hp, wp := l.in.h+2*l.in.pad, l.in.w+2*l.in.pad
	l.patches.Row = fill(l.patches.Row, 0, l.c, hp*wp*nb, k, wp*nb, k, nb)
	l.patches.Col = fill(l.patches.Col, 0, l.ho, s*wp*nb, l.wo, s*nb, nb, 1)
	if l.dzt == nil {
		return
	}
	clear(l.dzt) // the chained pass writes only the interior
	hq, wq := l.ho+2*l.q, l.wo+2*l.q
	l.dzv.Row = fill(l.dzv.Row, 0, l.o, hq*wq*nb, 1, 0, 1, 0)
	l.dzv.Col = fill(l.dzv.Col, (l.q*wq+l.q)*nb, l.ho, wq*nb, l.wo, nb, nb, 1)
	for i := range l.phases {
		p := &l.phases[i]
		p.windows.Row = fill(p.windows.Row, (l.q*wq+l.q)*nb, l.o, hq*wq*nb, p.ka, -wq*nb, p.ke, -nb)
		p.windows.Col = fill(p.windows.Col, (p.i0*wq+p.j0)*nb, p.ny, wq*nb, p.nx, nb, nb, 1)
	}
}

// forwardBatchInner is forward for a batch-inner convolution: the input
// into xt, zt = W x patches, zt into z, then the activation as in the
// [C, B, H, W] layout.
func (l *convOp) forwardBatchInner(w [][]float32, nb, threads int) {
	l.batchTables(nb)
	hp, wp := l.in.h+2*l.in.pad, l.in.w+2*l.in.pad
	if !l.fedBI {
		split(threads, l.c, nb*hp*wp, l.inputBI)
	}
	kern := l.kern
	kern.Data = w[l.st.w]
	gemm.MulDirect(threads, l.zt, l.ho*l.wo*nb, kern, l.patches)
	if l.next != nil {
		if l.next.xtNB != nb { // the chained pass writes only the interior
			clear(l.next.xt)
			l.next.xtNB = nb
		}
		split(threads, l.o, nb*l.ho*l.wo, l.chainFwd)
		return
	}
	split(threads, l.o, nb*l.ho*l.wo, l.zBI)
	split(threads, l.o, nb*l.ho*l.wo, l.fwd)
}

// chainBatchInner links each batch-inner sigmoid convolution of ops to the
// batch-inner convolution that reads its output, if any.
func chainBatchInner(ops []nativeOp) {
	for i := 0; i+1 < len(ops); i++ {
		a, ok := ops[i].(*convOp)
		b, okb := ops[i+1].(*convOp)
		if ok && okb && a.bi && b.bi && a.st.sigmoid && a.out == b.in {
			a.next, b.fedBI = b, true
		}
	}
}

// chainForward writes sigmoid(zt + bias) of channels [lo, hi) into the
// interior of next.xt: rows of wo*nb floats on both sides.
func (l *convOp) chainForward(lo, hi int) {
	nb, p := l.nb, l.out.pad
	hp, wp := l.out.h+2*p, l.out.w+2*p
	for o := lo; o < hi; o++ {
		act.SigmoidRows(l.next.xt[o*hp*wp*nb+(p*wp+p)*nb:], wp*nb, l.zt[o*l.ho*l.wo*nb:], l.wo*nb, l.ho, l.wo*nb, l.bias[o])
	}
}

// chainBackward writes dzt's interior of channels [lo, hi), the output
// gradient (next's input gradient, batch-inner) times a(1-a) for the
// output a (in next.xt), and their bias gradients.
func (l *convOp) chainBackward(lo, hi int) {
	nb, p := l.nb, l.out.pad
	hp, wp := l.out.h+2*p, l.out.w+2*p
	hq, wq := l.ho+2*l.q, l.wo+2*l.q
	w := l.wo * nb
	for o := lo; o < hi; o++ {
		// Four partial sums: one chain of float64 adds would take their
		// latency per element.
		var sum [4]float64
		g := l.next.gradIn(o)
		for y := range l.ho {
			a := l.next.xt[o*hp*wp*nb+((p+y)*wp+p)*nb:][:w]
			gr := g[y*w:][:w]
			d := l.dzt[o*hq*wq*nb+((l.q+y)*wq+l.q)*nb:][:w]
			for i, v := range a {
				dv := sigmoidGrad(v, gr[i])
				d[i] = dv
				sum[i%4] += float64(dv)
			}
		}
		l.gbias[o] = float32((sum[0] + sum[1]) + (sum[2] + sum[3]))
	}
}

// gradIn is channel c of the input gradient of a convolution fed
// batch-inner, [H, W, nb]: the one phase's output at stride 1, else gradT.
func (l *convOp) gradIn(c int) []float32 {
	hw := l.in.h * l.in.w
	if l.s == 1 {
		return l.phases[0].out[c*l.batch*hw:][:hw*l.nb]
	}
	return l.gradT[c*hw*l.nb:][:hw*l.nb]
}

// inputBatchInner copies the input planes (with their zero borders) of
// channels [lo, hi) into xt.
func (l *convOp) inputBatchInner(lo, hi int) {
	plane := (l.in.h + 2*l.in.pad) * (l.in.w + 2*l.in.pad)
	for c := lo; c < hi; c++ {
		gemm.Transpose(l.xt[c*plane*l.nb:], l.nb, l.in.data[c*l.batch*plane:], plane, l.nb, plane)
	}
}

// zFromBatchInner copies zt of channels [lo, hi) into z.
func (l *convOp) zFromBatchInner(lo, hi int) {
	plane := l.ho * l.wo
	for o := lo; o < hi; o++ {
		gemm.Transpose(l.z[o*l.batch*plane:], plane, l.zt[o*plane*l.nb:], l.nb, plane, l.nb)
	}
}

// dzBatchInner copies dz (with its zero border) of channels [lo, hi)
// into dzt.
func (l *convOp) dzBatchInner(lo, hi int) {
	plane := (l.ho + 2*l.q) * (l.wo + 2*l.q)
	for o := lo; o < hi; o++ {
		gemm.Transpose(l.dzt[o*plane*l.nb:], l.nb, l.dz[o*l.batch*plane:], plane, l.nb, plane)
	}
}
