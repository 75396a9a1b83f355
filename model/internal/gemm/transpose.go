package gemm

// Transpose writes dst[j*ldd+i] = src[i*lds+j] for i < m, j < n: 16 rows
// at a time through registers with AVX-512 (the packing's 16 x 16 register
// transpose), the rest one element at a time. The native engine uses it to
// move activations between [C, B, H, W] and the example-innermost layout.
func Transpose(dst []float32, ldd int, src []float32, lds int, m, n int) {
	if m <= 0 || n <= 0 {
		return
	}
	if ldd < 0 || lds < 0 {
		panic("gemm: negative stride")
	}
	_, _ = dst[(n-1)*ldd+m-1], src[(m-1)*lds+n-1]
	i := 0
	var offs [16]int
	for ; i+16 <= m; i += 16 {
		for r := range offs {
			offs[r] = (i + r) * lds
		}
		if !transposeBlock(dst[i:], src, &offs, n, ldd) {
			break
		}
	}
	for ; i < m; i++ {
		s := src[i*lds : i*lds+n]
		for j, v := range s {
			dst[j*ldd+i] = v
		}
	}
}
