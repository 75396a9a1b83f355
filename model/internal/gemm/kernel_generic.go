package gemm

// genericKernel is the portable micro-kernel: a 2x4 tile held in eight
// scalar accumulators. Larger tiles measure slower in Go on amd64 (4x4 at
// 4 GFLOP/s against 6.8 on Zen 4): the compiler schedules all the products
// before the sums and spills what does not fit in X0-X14, and eight
// independent add chains already cover the adder's latency.
var genericKernel = kernel{mr: 2, nr: 4, kcMax: 256, nc: 4096, mc: 64, edges: true, run: kernelGo}

// kernelGo computes a 2x4 tile; see kernel.run. It needs A packed (sa = 1,
// sp = 2): indexing by strides would cost the scalar loop more than
// packing does.
func kernelGo(k int, a []float32, off, _, _ int, b, c []float32, ldc, rows, cols int, alpha, beta float32) {
	var c00, c01, c02, c03, c10, c11, c12, c13 float32
	a, b = a[off:off+2*k], b[:4*k]
	for p := 0; p < k; p++ {
		ap, bp := a[2*p:2*p+2:2*p+2], b[4*p:4*p+4:4*p+4]
		a0, a1 := ap[0], ap[1]
		// b's values are loaded inside the multiplications, which leaves
		// the compiler registers enough not to spill.
		c00 += a0 * bp[0]
		c10 += a1 * bp[0]
		c01 += a0 * bp[1]
		c11 += a1 * bp[1]
		c02 += a0 * bp[2]
		c12 += a1 * bp[2]
		c03 += a0 * bp[3]
		c13 += a1 * bp[3]
	}
	t := [8]float32{c00, c01, c02, c03, c10, c11, c12, c13}
	writeTile(c, ldc, t[:], 4, rows, cols, alpha, beta)
}
