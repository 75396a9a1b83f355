package model

// col2imAdd is what adding one element of the patches' gradient back into
// the input gradient costs, in the multiply-adds of a matrix product that
// take the same time (measured: 0.7-0.8 ns against 0.011 ns per
// multiply-add, single-threaded on Zen 4).
const col2imAdd = 35

// useCol2im reports whether the input gradient of a convolution with o
// output channels, from input edge in to an ho x wo output, is cheaper by
// col2im than as the convolution of the bordered dz with the flipped
// kernel. That convolution computes k*k products for each of the H*W
// input positions, the col2im product for each of the Ho*Wo output ones,
// and then adds each of them back once: per (c, dy, dx) and example, the
// first costs o*H*W multiply-adds, the second o*Ho*Wo + col2imAdd*Ho*Wo.
// In the zoo only ldpfl-cnn's second convolution (8 x 8 outputs of 12 x
// 12 inputs, 64 channels) passes, and saves about 40% of its backward
// pass. Only valid convolutions are considered: "same" ones have Ho*Wo =
// H*W, so the bordered route always wins.
func useCol2im(in *edge, o, ho, wo int) bool {
	return in.pad == 0 && o*in.h*in.w > (o+col2imAdd)*ho*wo
}

// col2imRange adds the patches' gradient cols [(c, dy, dx), (b, y, x)]
// into the input gradient of channels [lo, hi): dIn[c, b, y+dy, x+dx] +=
// cols[(c, dy, dx), (b, y, x)]. Each channel's plane stays in cache while
// its k*k rows of cols stream past it.
func (l *convOp) col2imRange(lo, hi int) {
	h, w, k, ho, wo := l.in.h, l.in.w, l.k, l.ho, l.wo
	plane, n := l.batch*h*w, l.batch*ho*wo
	for c := lo; c < hi; c++ {
		din := l.in.grad[c*plane : c*plane+l.nb*h*w]
		clear(din)
		for dy := range k {
			for dx := range k {
				src := l.cols[((c*k+dy)*k+dx)*n:]
				for b := range l.nb {
					for y := range ho {
						dr := din[b*h*w+(y+dy)*w+dx:][:wo]
						for x, v := range src[(b*ho+y)*wo:][:wo] {
							dr[x] += v
						}
					}
				}
			}
		}
	}
}
