package model

import (
	"math"

	"github.com/fedpq/fedpq/model/internal/gemm"
)

// noMax marks a pooling window whose maximum is not positive: its ReLU
// output is 0, so it passes no gradient (ReLU's gradient at 0 is 0).
const noMax = 4

// convOp is a k x k stride-1 convolution with bias and ReLU, and the 2 x 2
// max pooling after it when there is one.
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
// the transpose of the kernel and the flip are only offsets.
type convOp struct {
	st      step
	in, out *edge
	batch   int
	c, o, k int
	ho, wo  int // the convolution's output (before pooling)
	q       int // dz's border

	kern    gemm.Mat // W [O, C*k*k] (Data: the kernel, per call)
	patches gemm.Mat // [C*k*k, B*Ho*Wo] over in.data
	z       []float32
	arg     []uint8 // pooling: per output, the window position of its maximum, or noMax

	dz      []float32 // [O, B, Ho+2q, Wo+2q]
	dzv     gemm.Mat  // dz's interior as [O, B*Ho*Wo]
	kernT   gemm.Mat  // W' [C, O*k*k] (Data: the kernel, per call)
	windows gemm.Mat  // [O*k*k, B*H*W] over dz, flipped

	// The current pass, for the per-channel passes fwd and bwd.
	nb          int
	bias, gbias []float32
	fwd, bwd    func(lo, hi int)
}

func newConvOp(st step, in, out *edge, batch int, train bool) *convOp {
	l := &convOp{st: st, in: in, out: out, batch: batch, c: in.c, o: st.out, k: st.k}
	c, k := l.c, l.k
	hp, wp := in.h+2*in.pad, in.w+2*in.pad
	l.ho, l.wo = hp-k+1, wp-k+1
	l.kern = gemm.Dense(nil, l.o, c*k*k, c*k*k)
	l.patches = gemm.Mat{Data: in.data,
		Row: offsets(0, c, batch*hp*wp, k, wp, k, 1),
		Col: offsets(0, batch, hp*wp, l.ho, wp, l.wo, 1)}
	l.z = make([]float32, l.o*batch*l.ho*l.wo)
	l.fwd, l.bwd = l.reluForward, l.reluBackward
	if st.pool {
		l.arg = make([]uint8, l.o*batch*out.h*out.w)
		l.fwd, l.bwd = l.poolForward, l.poolBackward
	}
	if !train {
		return l
	}
	if in.grad != nil {
		l.q = k - 1 - in.pad
	}
	hq, wq := l.ho+2*l.q, l.wo+2*l.q
	l.dz = make([]float32, l.o*batch*hq*wq)
	l.dzv = gemm.Mat{Data: l.dz,
		Row: offsets(0, l.o, batch*hq*wq, 1, 0, 1, 0),
		Col: offsets(l.q*wq+l.q, batch, hq*wq, l.ho, wq, l.wo, 1)}
	if in.grad != nil {
		// dIn[c, b, y, x] = sum W[o, c, dy, dx] dz[o, b, y+k-1-dy-q, x+k-1-dx-q],
		// the bordered dz read at (y+k-1-dy, x+k-1-dx).
		l.kernT = gemm.Mat{Row: offsets(0, c, k*k, 1, 0, 1, 0), Col: offsets(0, l.o, c*k*k, k, k, k, 1)}
		l.windows = gemm.Mat{Data: l.dz,
			Row: offsets((k-1)*(wq+1), l.o, batch*hq*wq, k, -wq, k, -1),
			Col: offsets(0, batch, hq*wq, in.h, wq, in.w, 1)}
	}
	return l
}

func (l *convOp) forward(w [][]float32, nb, threads int) {
	kern, patches := l.kern, l.patches
	kern.Data = w[l.st.w]
	patches.Col = patches.Col[:nb*l.ho*l.wo]
	gemmMul(threads, l.z, l.batch*l.ho*l.wo, kern, patches)
	l.nb, l.bias = nb, w[l.st.b]
	split(threads, l.o, nb*l.ho*l.wo, l.fwd)
}

func (l *convOp) backward(w, g [][]float32, nb, threads int) {
	l.nb, l.gbias = nb, g[l.st.b]
	split(threads, l.o, nb*l.ho*l.wo, l.bwd)
	dz, patches := l.dzv, l.patches
	dz.Col = dz.Col[:nb*l.ho*l.wo]
	patches.Col = patches.Col[:nb*l.ho*l.wo]
	gemmMul(threads, g[l.st.w], l.c*l.k*l.k, dz, patches.T())
	if l.in.grad == nil {
		return
	}
	kernT, windows := l.kernT, l.windows
	kernT.Data = w[l.st.w]
	windows.Col = windows.Col[:nb*l.in.h*l.in.w]
	gemmMul(threads, l.in.grad, l.batch*l.in.h*l.in.w, kernT, windows)
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
					// Branch-free, since which input is largest is a coin
					// toss that a branch predictor loses: the maxima compile
					// to MINSS sequences and the integer tests to
					// conditional moves. Comparing bits is comparing values
					// here, as -0 and +0 only differ when the maximum is not
					// positive, and then at is noMax; a = max(m, 0) is +0
					// exactly when m is not positive.
					v0, v1, v2, v3 := r0[2*x]+bias, r0[2*x+1]+bias, r1[2*x]+bias, r1[2*x+1]+bias
					m := max(max(v0, v1), max(v2, v3))
					top, a := math.Float32bits(m), max(m, 0)
					at := 3
					if math.Float32bits(v2) == top {
						at = 2
					}
					if math.Float32bits(v1) == top {
						at = 1
					}
					if math.Float32bits(v0) == top {
						at = 0
					}
					if math.Float32bits(a) == 0 {
						at = noMax
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

// route[at] is the share of a pooling window's output gradient that each
// of its four inputs receives, at being the window's record in arg.
var route = [noMax + 1][4]float32{{1, 0, 0, 0}, {0, 1, 0, 0}, {0, 0, 1, 0}, {0, 0, 0, 1}, {}}

// poolBackward writes dz of channels [lo, hi): each window's output
// gradient at its first maximum and 0 elsewhere (rows and columns that
// floor pooling drops are never written, so they stay 0); and their bias
// gradients. It multiplies by route rather than branching on the winner.
func (l *convOp) poolBackward(lo, hi int) {
	out, gs := l.out, l.out.gs
	ph, pw := out.h, out.w
	wq := l.wo + 2*l.q
	for o := lo; o < hi; o++ {
		var sum float64
		for b := range l.nb {
			dz := l.dz[(o*l.batch+b)*(l.ho+2*l.q)*wq+l.q*wq+l.q:]
			arg := l.arg[(o*l.batch+b)*ph*pw:]
			g := out.grad[o*gs[0]+b*gs[1]:]
			for y := range ph {
				d0, d1 := dz[2*y*wq:2*y*wq+2*pw], dz[(2*y+1)*wq:(2*y+1)*wq+2*pw]
				gr, ar := g[y*gs[2]:], arg[y*pw:y*pw+pw]
				for x, at := range ar {
					d, r := gr[x*gs[3]], &route[at]
					d0[2*x], d0[2*x+1], d1[2*x], d1[2*x+1] = d*r[0], d*r[1], d*r[2], d*r[3]
					sum += float64(d * (r[0] + r[1] + r[2] + r[3]))
				}
			}
		}
		l.gbias[o] = float32(sum)
	}
}
