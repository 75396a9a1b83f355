package gemm

// genericKernel is the portable micro-kernel: a 4x4 tile held in sixteen
// scalar accumulators (as many as amd64's registers allow without spilling;
// other ISAs do at least as well).
var genericKernel = kernel{mr: 4, nr: 4, kcMax: 256, nc: 4096, mc: 64, edges: true, run: kernelGo}

// kernelGo computes a 4x4 tile; see kernel.run.
// It needs A packed (sa = 1, sp = 4): indexing by strides would cost the
// scalar loop more than packing does.
func kernelGo(k int, a []float32, off, _, _ int, b, c []float32, ldc, rows, cols int, alpha, beta float32) {
	var c00, c01, c02, c03, c10, c11, c12, c13 float32
	var c20, c21, c22, c23, c30, c31, c32, c33 float32
	a, b = a[off:off+4*k], b[:4*k]
	for p := 0; p+4 <= len(a); p += 4 {
		ap, bp := a[p:p+4:p+4], b[p:p+4:p+4]
		b0, b1, b2, b3 := bp[0], bp[1], bp[2], bp[3]
		a0 := ap[0]
		c00 += a0 * b0
		c01 += a0 * b1
		c02 += a0 * b2
		c03 += a0 * b3
		a1 := ap[1]
		c10 += a1 * b0
		c11 += a1 * b1
		c12 += a1 * b2
		c13 += a1 * b3
		a2 := ap[2]
		c20 += a2 * b0
		c21 += a2 * b1
		c22 += a2 * b2
		c23 += a2 * b3
		a3 := ap[3]
		c30 += a3 * b0
		c31 += a3 * b1
		c32 += a3 * b2
		c33 += a3 * b3
	}
	t := [16]float32{c00, c01, c02, c03, c10, c11, c12, c13, c20, c21, c22, c23, c30, c31, c32, c33}
	writeTile(c, ldc, t[:], 4, rows, cols, alpha, beta)
}
