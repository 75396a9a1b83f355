package gemm

import "testing"

// TestTranspose checks Transpose against the definition on every path
// (AVX-512 where the CPU has it, and Go), for shapes around the 16-row
// blocks, with strides wider than the shape, and that it writes nothing
// else.
func TestTranspose(t *testing.T) {
	for _, asm := range []bool{true, false} {
		saved := haveRunCopier
		haveRunCopier = haveRunCopier && asm
		for _, mn := range [][2]int{{1, 1}, {7, 64}, {16, 16}, {17, 3}, {49, 64}, {64, 196}, {196, 64}, {33, 1}} {
			m, n := mn[0], mn[1]
			lds, ldd := n+3, m+5
			src := make([]float32, m*lds)
			for i := range src {
				src[i] = float32(i + 1)
			}
			dst := make([]float32, n*ldd)
			Transpose(dst, ldd, src, lds, m, n)
			for j := range n {
				for i := range ldd {
					want := float32(0)
					if i < m {
						want = src[i*lds+j]
					}
					if got := dst[j*ldd+i]; got != want {
						t.Fatalf("asm %v, %d x %d: dst[%d, %d] = %v, want %v", haveRunCopier, m, n, j, i, got, want)
					}
				}
			}
		}
		haveRunCopier = saved
	}
}
