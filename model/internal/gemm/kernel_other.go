//go:build !amd64 || purego

package gemm

// runnable is the kernels this build can run: no assembly, so the portable one.
var runnable = []*kernel{&genericKernel}

// haveRunCopier says copyRuns works: not in this build.
var haveRunCopier = false

// copyRuns is the AVX-512 run copier, absent here.
func copyRuns(dst, data *float32, ks *int, nk, w int, runs *int, nruns int) {
	panic("gemm: no run copier")
}

// findRuns is findRunsGo: no assembly in this build.
func findRuns(js []int, runs []int) (nr, lo, hi int) { return findRunsGo(js, runs) }

// transpose16 is the AVX-512 transposer, absent here.
func transpose16(dst, data []float32, k0 int, js []int, kc, w int) bool { return false }

// haveDot says dotTile runs: not in this build.
var haveDot = false

// dotTile is the AVX-512 dot-product tile, absent here.
func dotTile(a, b []float32, sa int, bo *[4]int, runs []int, acc *[24 * 16]float32) {
	panic("gemm: no dot tile")
}

// dotPairs is the AVX-512 dot-product tile over block pairs, absent here.
func dotPairs(a, b []float32, sa int, bo *[4]int, pairs []int, single *[3]int, acc *[24 * 16]float32) {
	panic("gemm: no dot tile")
}

// haveConv says convPairs runs: not in this build.
var haveConv = false

// convPairs is the AVX-512 direct tile, absent here.
func convPairs(a []float32, sa int, in []float32, offs []int, bo *[8]int, c []float32, ldc int, co *[8]int) {
	panic("gemm: no direct tile")
}

// transposeBlock is the AVX-512 transposer, absent here.
func transposeBlock(dst, data []float32, offs *[16]int, kc, w int) bool { return false }
