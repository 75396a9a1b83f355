//go:build !amd64 || purego

package gemm

// runnable is the kernels this build can run: no assembly, so the portable one.
var runnable = []*kernel{&genericKernel}

// packRuns is the AVX-512 run copier, absent here.
var packRuns func(dst, data *float32, ks *int, nk, w int, runs *int, nruns int)
