package gemm

import (
	"fmt"
	"math/rand"
	"testing"
)

// benchCase is a product as the training engine forms it: dense operands
// (possibly transposed) for the MLP layers, im2col views for convolutions.
type benchCase struct {
	m, k, n int
	// a and b are "N" (dense), "T" (transposed dense) or "im2col".
	a, b string
	// conv is nb, ch, h, w, kh, kw of the image batch behind an im2col
	// operand.
	conv [6]int
}

func (c benchCase) String() string {
	s := fmt.Sprintf("%dx%dx%d", c.m, c.k, c.n)
	if c.a != "N" || c.b != "N" {
		s += "_" + c.a + c.b
	}
	return s
}

var benchCases = []benchCase{
	{m: 256, k: 256, n: 256, a: "N", b: "N"},
	{m: 512, k: 512, n: 512, a: "N", b: "N"},
	// MLP layers, batch 64: forward, weight and input gradients.
	{m: 64, k: 784, n: 32, a: "N", b: "N"},
	{m: 32, k: 64, n: 784, a: "T", b: "N"},
	{m: 64, k: 784, n: 128, a: "N", b: "N"},
	{m: 128, k: 64, n: 784, a: "T", b: "N"},
	{m: 64, k: 1600, n: 128, a: "N", b: "N"},
	{m: 128, k: 64, n: 1600, a: "T", b: "N"},
	{m: 64, k: 1024, n: 512, a: "N", b: "N"},
	{m: 512, k: 64, n: 1024, a: "T", b: "N"},
	{m: 64, k: 512, n: 10, a: "N", b: "N"},
	{m: 64, k: 10, n: 512, a: "N", b: "T"},
	// Input gradients of dense layers as dY * W^T, W stored in x out.
	{m: 64, k: 32, n: 784, a: "N", b: "T"},
	{m: 64, k: 128, n: 1600, a: "N", b: "T"},
	{m: 64, k: 512, n: 1024, a: "N", b: "T"},
	// Convolutions, batch 64: weights x patches.
	{m: 6, k: 25, n: 36864, a: "N", b: "im2col", conv: [6]int{64, 1, 28, 28, 5, 5}},
	{m: 6, k: 150, n: 4096, a: "N", b: "im2col", conv: [6]int{64, 6, 12, 12, 5, 5}},
	{m: 32, k: 9, n: 43264, a: "N", b: "im2col", conv: [6]int{64, 1, 28, 28, 3, 3}},
	{m: 64, k: 288, n: 7744, a: "N", b: "im2col", conv: [6]int{64, 32, 13, 13, 3, 3}},
	{m: 32, k: 25, n: 36864, a: "N", b: "im2col", conv: [6]int{64, 1, 28, 28, 5, 5}},
	{m: 64, k: 800, n: 4096, a: "N", b: "im2col", conv: [6]int{64, 32, 12, 12, 5, 5}},
	// Weight gradient: output gradient x patches^T.
	{m: 64, k: 4096, n: 800, a: "N", b: "im2colT", conv: [6]int{64, 32, 12, 12, 5, 5}},
	// cnn2's weight gradients (6 output channels) and col2im input gradient.
	{m: 6, k: 36864, n: 25, a: "N", b: "im2colT", conv: [6]int{64, 1, 28, 28, 5, 5}},
	{m: 6, k: 4096, n: 150, a: "N", b: "im2colT", conv: [6]int{64, 6, 12, 12, 5, 5}},
	{m: 150, k: 6, n: 4096, a: "T", b: "N"},
	// Input gradient as a full convolution of the padded output gradient.
	{m: 32, k: 1600, n: 9216, a: "N", b: "im2col", conv: [6]int{64, 64, 16, 16, 5, 5}},
}

// operand builds a rows x cols operand of the given kind.
func operand(rng *rand.Rand, rows, cols int, kind string, conv [6]int) Mat {
	switch kind {
	case "T":
		return randMat(rng, cols, rows, dense).T()
	case "im2col", "im2colT":
		x := im2col(rng, conv[0], conv[1], conv[2], conv[3], conv[4], conv[5])
		if kind == "im2colT" {
			x = x.T()
		}
		if x.Rows() != rows || x.Cols() != cols {
			panic(fmt.Sprintf("im2col %v is %dx%d, not %dx%d", conv, x.Rows(), x.Cols(), rows, cols))
		}
		return x
	}
	return randMat(rng, rows, cols, dense)
}

func (c benchCase) flops() float64 { return 2 * float64(c.m*c.n*c.k) }

// benchOperands builds a case's A, B and C.
func benchOperands(bc benchCase) (a, b Mat, c []float32) {
	rng := rand.New(rand.NewSource(1))
	a, b = operand(rng, bc.m, bc.k, bc.a, bc.conv), operand(rng, bc.k, bc.n, bc.b, bc.conv)
	return a, b, make([]float32, bc.m*bc.n)
}

// kernelName names k in benchmarks and tables.
func kernelName(k *kernel) string {
	if k == &genericKernel {
		return fmt.Sprintf("generic%dx%d", k.mr, k.nr)
	}
	return fmt.Sprintf("asm%dx%d", k.mr, k.nr)
}

// withKernel runs f with Mul using kernel k, and with the pure-Go packing
// when k is the portable kernel, as in the purego build.
func withKernel(k *kernel, f func()) {
	defer func(h bool) { override, haveRunCopier = nil, h }(haveRunCopier)
	override = k
	haveRunCopier = haveRunCopier && k != &genericKernel
	f()
}

// BenchmarkMul times Mul for every kernel this machine runs; pick one with
// -bench Mul/asm or -bench Mul/generic.
func BenchmarkMul(b *testing.B) {
	for _, k := range runnable {
		b.Run(kernelName(k), func(b *testing.B) {
			withKernel(k, func() {
				for _, c := range benchCases {
					benchMul(b, 1, c)
				}
			})
		})
	}
}

// parallelCase says whether the MulParallel benchmark and table have bc.
func parallelCase(bc benchCase) bool {
	switch bc.String() {
	case "256x256x256", "64x1024x512", "64x800x4096_Nim2col", "32x1600x9216_Nim2col":
		return true
	}
	return false
}

// BenchmarkMulParallel times MulParallel with two threads.
func BenchmarkMulParallel(b *testing.B) {
	for _, c := range benchCases {
		if parallelCase(c) {
			benchMul(b, 2, c)
		}
	}
}

func benchMul(b *testing.B, threads int, bc benchCase) {
	a, bm, c := benchOperands(bc)
	b.Run(bc.String(), func(b *testing.B) {
		for b.Loop() {
			MulParallel(threads, c, bc.n, a, bm, 1, 0)
		}
		b.ReportMetric(bc.flops()*float64(b.N)/b.Elapsed().Seconds()/1e9, "GFLOP/s")
	})
}

// BenchmarkMulDot runs MulDot (one thread) on the weight-gradient cases.
func BenchmarkMulDot(b *testing.B) {
	for _, bc := range benchCases {
		if bc.b != "im2colT" {
			continue
		}
		a, bm, c := benchOperands(bc)
		b.Run(bc.String(), func(b *testing.B) {
			for b.Loop() {
				MulDot(1, c, bc.n, a, bm)
			}
			b.ReportMetric(bc.flops()*float64(b.N)/b.Elapsed().Seconds()/1e9, "GFLOP/s")
		})
	}
}

// BenchmarkMulDirect runs MulDirect (one thread) on the forward
// convolution cases.
func BenchmarkMulDirect(b *testing.B) {
	for _, bc := range benchCases {
		if bc.b != "im2col" || bc.m > 12 {
			continue
		}
		a, bm, c := benchOperands(bc)
		b.Run(bc.String(), func(b *testing.B) {
			for b.Loop() {
				MulDirect(1, c, bc.n, a, bm)
			}
			b.ReportMetric(bc.flops()*float64(b.N)/b.Elapsed().Seconds()/1e9, "GFLOP/s")
		})
	}
}
