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
// input gradient.
func (l *convOp) interleave(lo, hi int) {
	gs, s := l.in.gs, l.s
	for c := lo; c < hi; c++ {
		for _, p := range l.phases {
			src := p.out[c*l.batch*p.ny*p.nx:]
			for b := range l.nb {
				dst := l.in.grad[c*gs[0]+b*gs[1]+p.y0*gs[2]+p.x0*gs[3]:]
				for yy := range p.ny {
					row := dst[s*yy*gs[2]:]
					for xx, v := range src[(b*p.ny+yy)*p.nx:][:p.nx] {
						row[s*xx*gs[3]] = v
					}
				}
			}
		}
	}
}
