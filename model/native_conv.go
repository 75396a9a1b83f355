package model

import (
	"math"

	"github.com/fedpq/fedpq/model/internal/act"
	"github.com/fedpq/fedpq/model/internal/gemm"
)

// noMax marks a pooling window whose maximum is not positive: its ReLU
// output is 0, so it passes no gradient (ReLU's gradient at 0 is 0).
const noMax = 4

// convOp is a k x k convolution with bias and ReLU (or sigmoid), and the
// 2 x 2 max pooling after it when there is one.
//
// Forward, one product writes the raw convolution z [O, B, Ho, Wo] and
// one pass per channel adds the bias, applies ReLU and pools, writing the
// output edge (inside its zero border) and, when pooling, the position in
// each window of its first maximum (row-major, as PyTorch; ReLU and the
// bias are monotone, so pooling after them is pooling z + bias).
//
// Backward, one pass writes dz, the gradient of z, into a buffer with a
// zero border of q = k-1-pad around each plane (the pooling's winner or
// the ReLU's positive outputs receive the output gradient, everything else
// 0) and sums the bias gradient; then dW = dz x patches^T, and the input
// gradient is the convolution of the bordered dz with the flipped kernel,
// dIn [C, B*H*W] = W' [C, O*k*k] x windows [O*k*k, B*H*W], where both
// the transpose of the kernel and the flip are only offsets. Where most
// of those windows' products would be with the border (a valid 5 x 5
// convolution of an 8 x 8 output: 2.25 times the work), it takes the
// col2im route instead (see useCol2im).
//
// A stride s > 1 is only offsets in the forward and weight-gradient
// products (the patches read every s-th window). The input gradient splits
// by the phase of the input position, (y+pad) mod s and (x+pad) mod s
// (see stridePhase): each phase is a stride-1 convolution of the bordered
// dz with the kernel taps of that phase, one product per phase, and one
// pass (interleave) writes the phases' outputs into the input gradient. It
// does the k*k/s^2 multiply-adds per input position that the gradient
// needs, where convolving dz spread s apart with zeros between would do
// k*k (4 times as many for lenet's stride 2).
//
// With few output channels and patches that neither product can read in
// place (strided, or output rows not a multiple of 8 long), the products
// run batch-inner (see useBatchInner), on transposed copies of the input,
// z and dz, and the input gradient always goes by phases (one, at stride
// 1), whose outputs the interleaving pass transposes back.
type convOp struct {
	st      step
	in, out *edge
	batch   int
	c, o, k int
	ho, wo  int // the convolution's output (before pooling)
	s       int // the stride
	q       int // dz's border

	kern    gemm.Mat // W [O, C*k*k] (Data: the kernel, per call)
	patches gemm.Mat // [C*k*k, B*Ho*Wo] over in.data
	z       []float32
	arg     []uint8 // pooling: per output, the window position of its maximum, or noMax

	dz      []float32 // [O, B, Ho+2q, Wo+2q]
	dzv     gemm.Mat  // dz's interior as [O, B*Ho*Wo]
	kernIn  gemm.Mat  // W' [C, O*k*k] (Data: the kernel, per call)
	windows gemm.Mat  // [O*k*k, B*H*W] over dz, flipped

	// Where the input's rows are not a multiple of 8 long and
	// gemm.DirectPays, the input gradient's product runs by MulDirect over
	// rows padded to wide positions (their reads fall in dz's next row, or
	// its slack), on W' copied dense, into gradWide; the padding's columns
	// are dropped. The kept columns are the same FMA chains as Mul's.
	wide        int
	kernDense   gemm.Mat // W' [C, O*k*k], dense (Data: kernDenseW)
	kernDenseW  []float32
	windowsWide gemm.Mat  // [O*k*k, B*H*wide] over dz
	gradWide    []float32 // [C, B*H*wide]

	phases   []stridePhase // stride > 1 or bi: the input gradient's phases
	phaseOut []float32     // the phases' products, [C, B*ny*nx] each (bi: [C, ny*nx*nb]), H*W per channel and example in all

	// Batch-inner products (see useBatchInner): the input, z and dz with
	// the example innermost, for the step's nb examples; the views over
	// them are rebuilt when nb changes (tabNB: the nb they are for).
	bi    bool
	xt    []float32 // [C, Hp, Wp, nb], the input with its border
	zt    []float32 // [O, Ho, Wo, nb]
	dzt   []float32 // [O, Ho+2q, Wo+2q, nb]
	gradT []float32 // stride > 1: the input gradient, [C, H, W, nb]
	tabNB int
	// A batch-inner sigmoid convolution whose output feeds another
	// (next) writes its activations straight into next.xt and reads its
	// output gradient batch-inner from next (fedBI), with no transposing
	// passes between them; xtNB is the nb that xt's border was cleared for.
	next  *convOp
	fedBI bool
	xtNB  int
	// The transposing and chained passes (method values made once: each
	// would allocate per call).
	inputBI, zBI, dzBI, chainFwd, chainBwd func(lo, hi int)

	col2im   bool
	kernCols gemm.Mat  // col2im: W^T [C*k*k, O] (Data: the kernel, per call)
	cols     []float32 // col2im: the patches' gradient [C*k*k, B*Ho*Wo]

	// The current pass, for the per-channel passes fwd, bwd and bwdIn.
	nb              int
	bias, gbias     []float32
	fwd, bwd, bwdIn func(lo, hi int)
}

func newConvOp(st step, in, out *edge, batch int, train bool) *convOp {
	l := &convOp{st: st, in: in, out: out, batch: batch, c: in.c, o: st.out, k: st.k, s: st.strides()}
	c, k, s := l.c, l.k, l.s
	hp, wp := in.h+2*in.pad, in.w+2*in.pad
	l.ho, l.wo = (hp-k)/s+1, (wp-k)/s+1
	l.kern = gemm.Dense(nil, l.o, c*k*k, c*k*k)
	l.patches = gemm.Mat{Data: in.data,
		Row: offsets(0, c, batch*hp*wp, k, wp, k, 1),
		Col: offsets(0, batch, hp*wp, l.ho, s*wp, l.wo, s)}
	l.z = make([]float32, l.o*batch*l.ho*l.wo)
	if l.bi = useBatchInner(st, l.o, l.wo); l.bi {
		l.xt = make([]float32, c*hp*wp*batch)
		l.zt = make([]float32, l.o*l.ho*l.wo*batch)
		l.patches = gemm.Mat{Data: l.xt, Row: make([]int, c*k*k), Col: make([]int, l.ho*l.wo*batch)}
		l.inputBI, l.zBI, l.dzBI = l.inputBatchInner, l.zFromBatchInner, l.dzBatchInner
		l.chainFwd, l.chainBwd = l.chainForward, l.chainBackward
	}
	l.fwd, l.bwd = l.reluForward, l.reluBackward
	if st.sigmoid {
		l.fwd, l.bwd = l.sigmoidForward, l.sigmoidBackward
	}
	if st.pool {
		l.arg = make([]uint8, l.o*batch*out.h*out.w)
		l.fwd, l.bwd = l.poolForward, l.poolBackward
	}
	if !train {
		l.batchTables(batch)
		return l
	}
	l.col2im = in.grad != nil && s == 1 && !l.bi && useCol2im(in, l.o, l.ho, l.wo)
	switch {
	case in.grad != nil && (s > 1 || l.bi):
		l.q = l.newPhases()
	case in.grad != nil && !l.col2im:
		l.q = k - 1 - in.pad
	}
	hq, wq := l.ho+2*l.q, l.wo+2*l.q
	if in.grad != nil && !l.col2im && l.phases == nil && s == 1 && in.w%8 != 0 && gemm.DirectPays(c, l.o*k*k) {
		l.wide = (in.w + 7) / 8 * 8
	}
	// The padded rows' last reads run wide-in.w-1 past dz's last plane.
	l.dz = make([]float32, l.o*batch*hq*wq+l.wide)
	l.dzv = gemm.Mat{Data: l.dz,
		Row: offsets(0, l.o, batch*hq*wq, 1, 0, 1, 0),
		Col: offsets(l.q*wq+l.q, batch, hq*wq, l.ho, wq, l.wo, 1)}
	if l.bi {
		l.dzt = make([]float32, l.o*hq*wq*batch)
		l.dzv = gemm.Mat{Data: l.dzt, Row: make([]int, l.o), Col: make([]int, l.ho*l.wo*batch)}
	}
	switch {
	case l.col2im:
		l.kernCols = gemm.Dense(nil, l.o, c*k*k, c*k*k).T()
		l.cols = make([]float32, c*k*k*batch*l.ho*l.wo)
		l.bwdIn = l.col2imRange
	case l.phases != nil:
		l.phaseOut = make([]float32, c*batch*in.h*in.w)
		at := 0
		for i := range l.phases {
			p := &l.phases[i]
			n := batch * p.ny * p.nx
			p.out = l.phaseOut[at : at+c*n]
			at += c * n
			p.kern = gemm.Mat{Row: offsets(0, c, k*k, 1, 0, 1, 0), Col: offsets(p.ry*k+p.rx, l.o, c*k*k, p.ka, s*k, p.ke, s)}
			if l.bi { // set by batchTables
				p.windows = gemm.Mat{Data: l.dzt, Row: make([]int, l.o*p.ka*p.ke), Col: make([]int, p.ny*p.nx*batch)}
				p.dense = gemm.Dense(make([]float32, c*l.o*p.ka*p.ke), c, l.o*p.ka*p.ke, l.o*p.ka*p.ke)
				continue
			}
			p.windows = gemm.Mat{Data: l.dz,
				Row: offsets(l.q*wq+l.q, l.o, batch*hq*wq, p.ka, -wq, p.ke, -1),
				Col: offsets(p.i0*wq+p.j0, batch, hq*wq, p.ny, wq, p.nx, 1)}
		}
		l.bwdIn = l.interleave
		if l.bi && s > 1 {
			l.gradT = make([]float32, c*in.h*in.w*batch)
		}
	case in.grad != nil:
		// dIn[c, b, y, x] = sum W[o, c, dy, dx] dz[o, b, y+k-1-dy-q, x+k-1-dx-q],
		// the bordered dz read at (y+k-1-dy, x+k-1-dx).
		l.kernIn = gemm.Mat{Row: offsets(0, c, k*k, 1, 0, 1, 0), Col: offsets(0, l.o, c*k*k, k, k, k, 1)}
		l.windows = gemm.Mat{Data: l.dz,
			Row: offsets((k-1)*(wq+1), l.o, batch*hq*wq, k, -wq, k, -1),
			Col: offsets(0, batch, hq*wq, in.h, wq, in.w, 1)}
		if l.wide > 0 {
			l.kernDenseW = make([]float32, c*l.o*k*k)
			l.kernDense = gemm.Dense(l.kernDenseW, c, l.o*k*k, l.o*k*k)
			l.windowsWide = gemm.Mat{Data: l.dz, Row: l.windows.Row, Col: offsets(0, batch, hq*wq, in.h, wq, l.wide, 1)}
			l.gradWide = make([]float32, c*batch*in.h*l.wide)
		}
	}
	l.batchTables(batch)
	return l
}

func (l *convOp) forward(w [][]float32, nb, threads int) {
	l.nb, l.bias = nb, w[l.st.b]
	if l.bi {
		l.forwardBatchInner(w, nb, threads)
		return
	}
	kern, patches := l.kern, l.patches
	kern.Data = w[l.st.w]
	patches.Col = patches.Col[:nb*l.ho*l.wo]
	if l.o < 16 {
		// Few output channels: read the patches in place (same bits).
		gemm.MulDirect(threads, l.z, l.batch*l.ho*l.wo, kern, patches)
	} else {
		gemmMul(threads, l.z, l.batch*l.ho*l.wo, kern, patches)
	}
	split(threads, l.o, nb*l.ho*l.wo, l.fwd)
}

func (l *convOp) backward(w, g [][]float32, nb, threads int) {
	l.nb, l.gbias = nb, g[l.st.b]
	dz, patches := l.dzv, l.patches
	switch {
	case l.next != nil:
		split(threads, l.o, nb*l.ho*l.wo, l.chainBwd)
	case l.bi:
		split(threads, l.o, nb*l.ho*l.wo, l.bwd)
		split(threads, l.o, nb*l.ho*l.wo, l.dzBI)
	default:
		split(threads, l.o, nb*l.ho*l.wo, l.bwd)
		dz.Col = dz.Col[:nb*l.ho*l.wo]
		patches.Col = patches.Col[:nb*l.ho*l.wo]
	}
	if l.o < 16 {
		// With few output channels, packing patches^T would cost more
		// than the product: dot products over output rows read it in
		// place.
		gemm.MulDot(threads, g[l.st.w], l.c*l.k*l.k, dz, patches.T())
	} else {
		gemmMul(threads, g[l.st.w], l.c*l.k*l.k, dz, patches.T())
	}
	switch {
	case l.col2im:
		kernCols := l.kernCols
		kernCols.Data = w[l.st.w]
		gemmMul(threads, l.cols, l.batch*l.ho*l.wo, kernCols, dz)
		split(threads, l.c, nb*l.ho*l.wo*l.k*l.k, l.bwdIn)
		return
	case l.in.grad == nil:
		return
	case l.phases != nil:
		for _, p := range l.phases {
			p.kern.Data = w[l.st.w]
			if l.bi {
				// The phase's taps copied dense, so that MulDirect reads
				// the windows (runs of nb) in place.
				for c, r := range p.kern.Row {
					d := p.dense.Data[c*len(p.kern.Col):]
					for j, o := range p.kern.Col {
						d[j] = p.kern.Data[r+o]
					}
				}
				gemm.MulDirect(threads, p.out, l.batch*p.ny*p.nx, p.dense, p.windows)
				continue
			}
			p.windows.Col = p.windows.Col[:nb*p.ny*p.nx]
			gemmMul(threads, p.out, l.batch*p.ny*p.nx, p.kern, p.windows)
		}
		split(threads, l.c, nb*l.in.h*l.in.w, l.bwdIn)
		return
	}
	kernIn, windows := l.kernIn, l.windows
	kernIn.Data = w[l.st.w]
	if l.wide > 0 {
		l.inputGradWide(kernIn, nb, threads)
		return
	}
	windows.Col = windows.Col[:nb*l.in.h*l.in.w]
	gemmMul(threads, l.in.grad, l.batch*l.in.h*l.in.w, kernIn, windows)
}

// inputGradWide is the input gradient's product over rows padded to
// l.wide (see convOp.wide): W' copied dense, MulDirect, the padding
// dropped.
func (l *convOp) inputGradWide(kernIn gemm.Mat, nb, threads int) {
	d := l.kernDenseW
	for i, r := range kernIn.Row {
		row := d[i*len(kernIn.Col):]
		for p, o := range kernIn.Col {
			row[p] = kernIn.Data[r+o]
		}
	}
	h, w, wide := l.in.h, l.in.w, l.wide
	ww := l.windowsWide
	ww.Col = ww.Col[:nb*h*wide]
	gemm.MulDirect(threads, l.gradWide, l.batch*h*wide, l.kernDense, ww)
	for c := range l.c {
		src, dst := l.gradWide[c*l.batch*h*wide:], l.in.grad[c*l.batch*h*w:]
		for r := range nb * h {
			copy(dst[r*w:r*w+w], src[r*wide:r*wide+w])
		}
	}
}

// reluForward writes ReLU(z + bias) of channels [lo, hi) into the output.
func (l *convOp) reluForward(lo, hi int) {
	ho, wo, out := l.ho, l.wo, l.out
	p, wn := out.pad, out.w+2*out.pad
	plane := (out.h + 2*p) * wn
	for o := lo; o < hi; o++ {
		bias := l.bias[o]
		for b := range l.nb {
			z := l.z[(o*l.batch+b)*ho*wo:]
			a := out.data[(o*l.batch+b)*plane+p*wn+p:]
			for y := range ho {
				zr, ar := z[y*wo:y*wo+wo], a[y*wn:y*wn+wo]
				for x, v := range zr {
					ar[x] = max(v+bias, 0)
				}
			}
		}
	}
}

// poolForward writes the 2 x 2 max pooling of ReLU(z + bias) of channels
// [lo, hi) into the output and each window's first maximum into arg.
func (l *convOp) poolForward(lo, hi int) {
	wo, out := l.wo, l.out
	ph, pw := out.h, out.w
	p, wn := out.pad, pw+2*out.pad
	plane := (ph + 2*p) * wn
	for o := lo; o < hi; o++ {
		bias := l.bias[o]
		for b := range l.nb {
			z := l.z[(o*l.batch+b)*l.ho*wo:]
			a := out.data[(o*l.batch+b)*plane+p*wn+p:]
			arg := l.arg[(o*l.batch+b)*ph*pw:]
			for y := range ph {
				r0, r1 := z[2*y*wo:2*y*wo+2*pw], z[(2*y+1)*wo:(2*y+1)*wo+2*pw]
				ar, gr := a[y*wn:y*wn+pw], arg[y*pw:y*pw+pw]
				for x := range ar {
					v0, v1, v2, v3 := r0[2*x]+bias, r0[2*x+1]+bias, r1[2*x]+bias, r1[2*x+1]+bias
					// Positive float32s order as their bits do as int32s,
					// and every other value (-0 included) is below them as
					// an int32. The first maximum among positive inputs is
					// all that is needed (a window without one outputs 0
					// and passes no gradient), so it is an integer maximum,
					// which compiles to compares and conditional moves: a
					// float comparison would branch on which input is
					// largest, a coin toss that branch prediction loses.
					top, at := int32(math.Float32bits(v0)), 0
					if v := int32(math.Float32bits(v1)); v > top {
						top, at = v, 1
					}
					if v := int32(math.Float32bits(v2)); v > top {
						top, at = v, 2
					}
					if v := int32(math.Float32bits(v3)); v > top {
						top, at = v, 3
					}
					if top <= 0 {
						top, at = 0, noMax
					}
					a := math.Float32frombits(uint32(top))
					if sum := v0 + v1 + v2 + v3; sum != sum {
						a = sum // a NaN input (or Inf - Inf) propagates, as in GoMLX and PyTorch
					}
					ar[x], gr[x] = a, uint8(at)
				}
			}
		}
	}
}

// reluBackward writes dz of channels [lo, hi): the output gradient where
// the output is positive, else 0; and their bias gradients.
func (l *convOp) reluBackward(lo, hi int) {
	ho, wo, out, gs := l.ho, l.wo, l.out, l.out.gs
	p, wn := out.pad, out.w+2*out.pad
	plane := (out.h + 2*p) * wn
	wq := wo + 2*l.q
	for o := lo; o < hi; o++ {
		var sum float64
		for b := range l.nb {
			a := out.data[(o*l.batch+b)*plane+p*wn+p:]
			dz := l.dz[(o*l.batch+b)*(ho+2*l.q)*wq+l.q*wq+l.q:]
			g := out.grad[o*gs[0]+b*gs[1]:]
			for y := range ho {
				ar, dr, gr := a[y*wn:y*wn+wo], dz[y*wq:y*wq+wo], g[y*gs[2]:]
				for x, v := range ar {
					d := reluPass(v, gr[x*gs[3]])
					dr[x] = d
					sum += float64(d)
				}
			}
		}
		l.gbias[o] = float32(sum)
	}
}

// sigmoidForward writes sigmoid(z + bias) of channels [lo, hi) into the
// output, one vectorized act.SigmoidRows per plane.
func (l *convOp) sigmoidForward(lo, hi int) {
	ho, wo, out := l.ho, l.wo, l.out
	p, wn := out.pad, out.w+2*out.pad
	plane := (out.h + 2*p) * wn
	for o := lo; o < hi; o++ {
		bias := l.bias[o]
		for b := range l.nb {
			z := l.z[(o*l.batch+b)*ho*wo:]
			a := out.data[(o*l.batch+b)*plane+p*wn+p:]
			act.SigmoidRows(a, wn, z, wo, ho, wo, bias)
		}
	}
}

// sigmoidBackward writes dz of channels [lo, hi), the output gradient
// times a(1-a) for the output a, and their bias gradients.
func (l *convOp) sigmoidBackward(lo, hi int) {
	ho, wo, out, gs := l.ho, l.wo, l.out, l.out.gs
	p, wn := out.pad, out.w+2*out.pad
	plane := (out.h + 2*p) * wn
	wq := wo + 2*l.q
	for o := lo; o < hi; o++ {
		var sum float64
		for b := range l.nb {
			a := out.data[(o*l.batch+b)*plane+p*wn+p:]
			dz := l.dz[(o*l.batch+b)*(ho+2*l.q)*wq+l.q*wq+l.q:]
			g := out.grad[o*gs[0]+b*gs[1]:]
			for y := range ho {
				ar, dr, gr := a[y*wn:y*wn+wo], dz[y*wq:y*wq+wo], g[y*gs[2]:]
				for x, v := range ar {
					d := sigmoidGrad(v, gr[x*gs[3]])
					dr[x] = d
					sum += float64(d)
				}
			}
		}
		l.gbias[o] = float32(sum)
	}
}

// sigmoidGrad is the gradient d of a sigmoid's output a carried to its
// input, d(1-a)a in float32 in PyTorch's order.
func sigmoidGrad(a, d float32) float32 { return d * (1 - a) * a }

// reluPass is d where the ReLU output v is positive, else 0, without a
// branch (ReLU's sign pattern is as unpredictable as pooling's winners): v
// is never negative or -0, so it is positive exactly when its bits are not
// 0, an integer test that compiles to a conditional move.
func reluPass(v, d float32) float32 {
	bits := math.Float32bits(d)
	if math.Float32bits(v) == 0 {
		bits = 0
	}
	return math.Float32frombits(bits)
}

// poolOffset[at] is the offset, from a pooling window's top-left input
// in dz, of the input that receives the window's gradient; a window
// without one (noMax) writes its zero gradient at the top left.
func (l *convOp) poolOffset() [noMax + 1]int {
	wq := l.wo + 2*l.q
	return [noMax + 1]int{0, 1, wq, wq + 1, 0}
}

// poolBackward writes dz of channels [lo, hi): each window's output
// gradient at its first maximum and 0 elsewhere (rows and columns that
// floor pooling drops are never written, so they stay 0); and their bias
// gradients. It clears the windows' rows, then stores one value per
// window at an offset looked up from its record, without branching on it.
func (l *convOp) poolBackward(lo, hi int) {
	out, gs := l.out, l.out.gs
	ph, pw := out.h, out.w
	wq := l.wo + 2*l.q
	offset := l.poolOffset()
	for o := lo; o < hi; o++ {
		var sum float64
		for b := range l.nb {
			dz := l.dz[(o*l.batch+b)*(l.ho+2*l.q)*wq+l.q*wq+l.q:]
			arg := l.arg[(o*l.batch+b)*ph*pw:]
			g := out.grad[o*gs[0]+b*gs[1]:]
			for y := range ph {
				rows := dz[2*y*wq : (2*y+1)*wq+2*pw]
				clear(rows[:2*pw])
				clear(rows[wq:])
				gr, ar := g[y*gs[2]:], arg[y*pw:y*pw+pw]
				for x, at := range ar {
					bits := math.Float32bits(gr[x*gs[3]])
					if at == noMax { // a conditional move on the integer bits
						bits = 0
					}
					d := math.Float32frombits(bits)
					rows[2*x+offset[at]] = d
					sum += float64(d)
				}
			}
		}
		l.gbias[o] = float32(sum)
	}
}
