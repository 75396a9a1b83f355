package gemm

import (
	"fmt"
	"math/rand"
	"testing"
)

// benchShapes is the zoo plus square shapes for peak speed.
var benchShapes = append([][3]int{{256, 256, 256}, {512, 512, 512}}, zoo...)

// BenchmarkMul times Mul on dense operands (and on the convolution shapes,
// with B an im2col view where the shape is one), for every kernel; run
// with -bench Mul/asm or -bench Mul/generic to pick one.
func BenchmarkMul(b *testing.B) {
	for _, k := range runnable {
		name := "generic"
		if k != &genericKernel {
			name = fmt.Sprintf("asm%dx%d", k.mr, k.nr)
		}
		b.Run(name, func(b *testing.B) {
			override = k
			defer func() { override = nil }()
			for _, s := range benchShapes {
				benchMul(b, 1, s[0], s[1], s[2])
			}
		})
	}
}

// BenchmarkMulParallel times MulParallel with two threads.
func BenchmarkMulParallel(b *testing.B) {
	for _, s := range [][3]int{{256, 256, 256}, {64, 800, 4096}, {64, 1024, 512}, {32, 1600, 9216}} {
		benchMul(b, 2, s[0], s[1], s[2])
	}
}

func benchMul(b *testing.B, threads, m, k, n int) {
	rng := rand.New(rand.NewSource(1))
	a, bm := randMat(rng, m, k, dense), randMat(rng, k, n, dense)
	c := make([]float32, m*n)
	b.Run(fmt.Sprintf("%dx%dx%d", m, k, n), func(b *testing.B) {
		for b.Loop() {
			MulParallel(threads, c, n, a, bm, 1, 0)
		}
		b.ReportMetric(2*float64(m*n*k)*float64(b.N)/b.Elapsed().Seconds()/1e9, "GFLOP/s")
	})
}
