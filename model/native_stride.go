package model

import "github.com/fedpq/fedpq/model/internal/gemm"

// stridePhase is one phase of a strided convolution's input gradient: the
// input positions (y, x) with (y+pad) mod s = ry and (x+pad) mod s = rx,
// rows y0, y0+s, ... (ny of them) and columns x0, x0+s, ... (nx). Only the
// taps dy = ry + s*a (a < ka) and dx = rx + s*e (e < ke) reach them, from
// dz[o, b, i0+yy-a, j0+xx-e] for the yy-th row and xx-th column of the
// phase, so its gradient is a stride-1 convolution of the bordered dz:
//
//	out [C, B*ny*nx] = kern [C, O*ka*ke] x windows [O*ka*ke, B*ny*nx],
//
// both views over the kernel and dz, the kernel's taps and dz flipped
// through offsets.
type stridePhase struct {
	ry, rx, y0, x0, ny, nx, i0, j0, ka, ke int

	kern    gemm.Mat  // W's taps of the phase (Data: the kernel, per call)
	dense   gemm.Mat  // batch-inner: kern copied dense, [C, O*ka*ke]
	windows gemm.Mat  // over dz
	out     []float32 // [C, B*ny*nx], a part of phaseOut
}

// newPhases sets l.phases, the phases that hold input positions, and
// returns the zero border that dz needs around each plane so that every
// window of every phase lies inside it.
func (l *convOp) newPhases() int {
	type axis struct{ r, first, n, i0, taps int }
	axes := func(size, out int) ([]axis, int) {
		var as []axis
		border := 0
		for r := range l.s {
			first := ((r-l.in.pad)%l.s + l.s) % l.s
			if first >= size {
				continue
			}
			a := axis{r: r, first: first, n: (size - first + l.s - 1) / l.s, i0: (first + l.in.pad - r) / l.s}
			if r < l.k {
				a.taps = (l.k - r + l.s - 1) / l.s
			}
			border = max(border, a.taps-1-a.i0, a.i0+a.n-out)
			as = append(as, a)
		}
		return as, border
	}
	rows, qy := axes(l.in.h, l.ho)
	cols, qx := axes(l.in.w, l.wo)
	for _, y := range rows {
		for _, x := range cols {
			l.phases = append(l.phases, stridePhase{ry: y.r, rx: x.r, y0: y.first, x0: x.first, ny: y.n, nx: x.n,
				i0: y.i0, j0: x.i0, ka: y.taps, ke: x.taps})
		}
	}
	return max(qy, qx)
}

// interleave writes the phases' outputs of channels [lo, hi) into the
// input gradient. A phase's output holds example b's row yy, column xx at
// column (b*ny+yy)*nx+xx. Batch-inner it is at (yy*nx+xx)*nb+b: the
// phases' runs of nb go to their places in gradT, the input gradient
// batch-inner ([C, H, W, nb]; at stride 1 the one phase is that already),
// which is then transposed into the input gradient.
func (l *convOp) interleave(lo, hi int) {
	gs, s, nb := l.in.gs, l.s, l.nb
	h, w := l.in.h, l.in.w
	for c := lo; c < hi; c++ {
		for _, p := range l.phases {
			n := l.batch * p.ny * p.nx
			src := p.out[c*n : (c+1)*n]
			if l.bi {
				if s == 1 {
					if l.fedBI { // the previous convolution reads it as it is
						continue
					}
					gemm.Transpose(l.in.grad[c*gs[0]:], gs[1], src, nb, h*w, nb)
					continue
				}
				g := l.gradT[c*h*w*nb : (c+1)*h*w*nb]
				for yy := range p.ny {
					for xx := range p.nx {
						at := ((p.y0+s*yy)*w + p.x0 + s*xx) * nb
						copy(g[at:at+nb], src[(yy*p.nx+xx)*nb:])
					}
				}
				continue
			}
			dst := l.in.grad[c*gs[0]+p.y0*gs[2]+p.x0*gs[3]:]
			for b := range nb {
				for yy := range p.ny {
					row, sr := dst[b*gs[1]+s*yy*gs[2]:], src[(b*p.ny+yy)*p.nx:][:p.nx]
					for xx, v := range sr {
						row[s*xx*gs[3]] = v
					}
				}
			}
		}
		if l.gradT != nil && !l.fedBI {
			gemm.Transpose(l.in.grad[c*gs[0]:], gs[1], l.gradT[c*h*w*nb:], nb, h*w, nb)
		}
	}
}
