//go:build !purego

package gemm

import "golang.org/x/sys/cpu"

// The assembly micro-kernels: see kernel.run. A's strides sa, sp and ldc
// are in elements. The AVX2 kernel writes full 6x16 tiles only.
//
//go:noescape
func kernelAVX512(k int, a *float32, sa, sp int, b, c *float32, ldc, rows, cols int, alpha, beta float32)

//go:noescape
func kernelAVX2(k int, a *float32, sa, sp int, b, c *float32, ldc int, alpha, beta float32)

// packRunsAVX512 is copyRuns in AVX-512.
//
//go:noescape
func packRunsAVX512(dst, data *float32, ks *int, nk, w int, runs *int, nruns int)

// findRunsAVX512 is findRuns in AVX-512.
//
//go:noescape
func findRunsAVX512(js *int, nj int, runs *int) (nr, lo, hi int)

// transposeAVX512 is transpose16 in AVX-512.
//
//go:noescape
func transposeAVX512(dst, data *float32, offs *int, kc, w int)

// The block sizes were measured on Zen 4 (32 KiB L1d, 1 MiB L2): kc*mr
// floats of A stay in L1, kc*nc floats of packed B fill half of L2.
var (
	avx512Kernel = kernel{mr: 6, nr: 64, kcMax: 256, nc: 512, mc: 96, strided: true, edges: true, run: runAVX512}
	avx2Kernel   = kernel{mr: 6, nr: 16, kcMax: 256, nc: 512, mc: 96, strided: true, run: runAVX2}
)

// runnable is the kernels this CPU can run, fastest first.
var runnable = func() []*kernel {
	var ks []*kernel
	if hasAVX512 {
		ks = append(ks, &avx512Kernel)
	}
	if cpu.X86.HasAVX2 && cpu.X86.HasFMA {
		ks = append(ks, &avx2Kernel)
	}
	return append(ks, &genericKernel)
}()

// hasAVX512 says the AVX-512 code can run (it also uses BMI1 and BMI2).
var hasAVX512 = cpu.X86.HasAVX512F && cpu.X86.HasBMI1 && cpu.X86.HasBMI2

// haveRunCopier says the AVX-512 packing routines (copyRuns and those of
// findRuns and transpose16) run; a variable so that tests can check the pure-Go
// packing too.
var haveRunCopier = hasAVX512

// copyRuns copies runs of floats for packPanel: for each p < nk, the runs
// (dj, src, len) (nruns triples) of data[ks[p]+src:] to dst[p*w+dj:].
// Offsets are not checked. (A plain function, not a variable, so that
// escape analysis sees the assembly's noescape and runs stays on the
// stack.)
func copyRuns(dst, data *float32, ks *int, nk, w int, runs *int, nruns int) {
	packRunsAVX512(dst, data, ks, nk, w, runs, nruns)
}

// findRuns splits js (1 <= len(js) <= 64) into runs of contiguous offsets,
// writing triples (dj, js[dj], len) to runs; it returns their number and
// the least and greatest offset.
func findRuns(js []int, runs []int) (nr, lo, hi int) {
	if haveRunCopier {
		_ = runs[3*len(js)-1]
		return findRunsAVX512(&js[0], len(js), &runs[0])
	}
	return findRunsGo(js, runs)
}

// transpose16 packs the transposes of up to 16 columns, each contiguous:
// dst[p*w+i] = data[k0+js[i]+p] for i < len(js), p < kc. It reports false,
// doing nothing, where there is no assembly for it.
func transpose16(dst, data []float32, k0 int, js []int, kc, w int) bool {
	if !haveRunCopier || w%16 != 0 {
		return false
	}
	var offs [16]int
	for i := range offs {
		// Columns past len(js) repeat the first: their lanes are padding.
		o := k0 + js[0]
		if i < len(js) {
			o = k0 + js[i]
		}
		if o < 0 || o+kc > len(data) {
			panic("gemm: offsets out of range")
		}
		offs[i] = o
	}
	_ = dst[(kc-1)*w+15]
	transposeAVX512(&dst[0], &data[0], &offs[0], kc, w)
	return true
}

func runAVX512(k int, a []float32, off, sa, sp int, b, c []float32, ldc, rows, cols int, alpha, beta float32) {
	// Bounds checks the assembly cannot do.
	checkA(a, off, sa, sp, 6, k)
	_, _ = b[64*k-1], c[(rows-1)*ldc+cols-1]
	kernelAVX512(k, &a[off], sa, sp, &b[0], &c[0], ldc, rows, cols, alpha, beta)
}

func runAVX2(k int, a []float32, off, sa, sp int, b, c []float32, ldc, rows, cols int, alpha, beta float32) {
	if rows != 6 || cols != 16 {
		panic("gemm: partial tile for the AVX2 kernel")
	}
	checkA(a, off, sa, sp, 6, k)
	_, _ = b[16*k-1], c[5*ldc+15]
	kernelAVX2(k, &a[off], sa, sp, &b[0], &c[0], ldc, alpha, beta)
}

// dotTileAVX512 is dotTile in AVX-512.
//
//go:noescape
func dotTileAVX512(a, b *float32, sa int, bo *int, runs *int, nruns int, acc *float32)

// haveDot says dotTile runs; a variable so that tests can turn it off.
var haveDot = hasAVX512

// dotTile accumulates the 6x4 tile of lane sums described at
// dotTileAVX512 into acc (24*16 floats). Offsets are checked by the caller.
func dotTile(a, b []float32, sa int, bo *[4]int, runs []int, acc *[24 * 16]float32) {
	dotTileAVX512(&a[0], &b[0], sa, &bo[0], &runs[0], len(runs)/3, &acc[0])
}

// dotPairsAVX512 is dotPairs in AVX-512.
//
//go:noescape
func dotPairsAVX512(a, b *float32, sa int, bo *int, pairs *int, npairs int, acc *float32, single *int)

// dotPairs is dotTile over pairs of 8-float blocks (see dotPairsAVX512):
// pairs holds quadruples (alo, blo, ahi, bhi); single, if single[0] != 0,
// one last block (single[1], single[2]). Offsets are checked by the caller.
func dotPairs(a, b []float32, sa int, bo *[4]int, pairs []int, single *[3]int, acc *[24 * 16]float32) {
	p := pairs
	if len(p) == 0 {
		p = single[:] // any valid pointer: npairs is 0
	}
	dotPairsAVX512(&a[0], &b[0], sa, &bo[0], &p[0], len(pairs)/4, &acc[0], &single[0])
}

// convPairsAVX512 is convPairs in AVX-512.
//
//go:noescape
func convPairsAVX512(a *float32, sa int, in *float32, offs *int, k int, bo *int, c *float32, ldc int, co *int)

// convPairsAVX2 is convPairs' 6x16 tile of two blocks in AVX2 with FMA.
//
//go:noescape
func convPairsAVX2(a *float32, sa int, in *float32, offs *int, k int, bo *int, c *float32, ldc int, co *int)

// haveConv says convPairs runs: in AVX-512, or in AVX2 with FMA (whose
// kernel, the fastest such a CPU runs, MulDirect then matches).
var haveConv = hasAVX512 || cpu.X86.HasAVX2 && cpu.X86.HasFMA

// convPairs computes a 6x64 tile (see convPairsAVX512): in AVX2, as four
// tiles of two blocks each, the same bits. Offsets are checked by the
// caller.
func convPairs(a []float32, sa int, in []float32, offs []int, bo *[8]int, c []float32, ldc int, co *[8]int) {
	if hasAVX512 {
		convPairsAVX512(&a[0], sa, &in[0], &offs[0], len(offs), &bo[0], &c[0], ldc, &co[0])
		return
	}
	for v := 0; v < len(bo); v += 2 {
		convPairsAVX2(&a[0], sa, &in[0], &offs[0], len(offs), &bo[v], &c[0], ldc, &co[v])
	}
}

// transposeBlock is transposeAVX512, dst[p*w+i] = data[offs[i]+p] for
// i < 16, p < kc, where the CPU runs it; elsewhere it reports false, doing
// nothing. Offsets are checked by the caller.
func transposeBlock(dst, data []float32, offs *[16]int, kc, w int) bool {
	if !haveRunCopier {
		return false
	}
	transposeAVX512(&dst[0], &data[0], &offs[0], kc, w)
	return true
}
