//go:build !purego

package gemm

import "golang.org/x/sys/cpu"

// The assembly micro-kernels. Each computes C = alpha*A*B (+ beta*C unless
// beta == 0) for one full tile, A packed as k steps of 6 values and B as k
// steps of 64 (AVX-512) or 16 (AVX2) values; ldc is in elements.
//
//go:noescape
func kernelAVX512(k int, a, b, c *float32, ldc int, alpha, beta float32)

//go:noescape
func kernelAVX2(k int, a, b, c *float32, ldc int, alpha, beta float32)

// The block sizes were measured on Zen 4 (32 KiB L1d, 1 MiB L2): kc*mr
// floats of A stay in L1, kc*nc floats of packed B fill half of L2.
var (
	avx512Kernel = kernel{mr: 6, nr: 64, kcMax: 256, nc: 512, mc: 96, run: runAVX512}
	avx2Kernel   = kernel{mr: 6, nr: 16, kcMax: 256, nc: 512, mc: 96, run: runAVX2}
)

// runnable is the kernels this CPU can run, fastest first.
var runnable = func() []*kernel {
	var ks []*kernel
	if cpu.X86.HasAVX512F {
		ks = append(ks, &avx512Kernel)
	}
	if cpu.X86.HasAVX2 && cpu.X86.HasFMA {
		ks = append(ks, &avx2Kernel)
	}
	return append(ks, &genericKernel)
}()

func runAVX512(k int, a, b, c []float32, ldc int, alpha, beta float32) {
	// Bounds checks the assembly cannot do.
	_, _, _ = a[6*k-1], b[64*k-1], c[5*ldc+63]
	kernelAVX512(k, &a[0], &b[0], &c[0], ldc, alpha, beta)
}

func runAVX2(k int, a, b, c []float32, ldc int, alpha, beta float32) {
	_, _, _ = a[6*k-1], b[16*k-1], c[5*ldc+15]
	kernelAVX2(k, &a[0], &b[0], &c[0], ldc, alpha, beta)
}
