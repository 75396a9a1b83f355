//go:build !amd64 || purego

package gemm

// runnable is the kernels this build can run: no assembly, so the portable one.
var runnable = []*kernel{&genericKernel}
