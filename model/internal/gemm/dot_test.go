package gemm

import (
	"math"
	"math/rand"
	"testing"
)

// TestMulDot checks MulDot on weight-gradient layouts (A dense, B a
// transposed patch matrix) and others against a float64 reference, and that
// its result does not depend on the thread count.
func TestMulDot(t *testing.T) {
	defer func(w int) { parallelMinWork = w }(parallelMinWork)
	parallelMinWork = 1
	rng := rand.New(rand.NewSource(11))
	// Output rows of 24 and 8 go by block pairs (7 blocks: one single),
	// of 38 by runs, of 1 by Mul.
	convs := [][6]int{{3, 1, 28, 28, 5, 5}, {2, 6, 12, 12, 5, 5}, {1, 2, 11, 12, 5, 5}, {2, 2, 9, 40, 3, 3}, {1, 1, 5, 5, 5, 5}}
	for _, cv := range convs {
		p := im2col(rng, cv[0], cv[1], cv[2], cv[3], cv[4], cv[5])
		b := p.T()
		k, n := b.Rows(), b.Cols()
		for _, m := range []int{1, 3, 6, 7, 13} {
			for _, l := range []layout{dense, gather} {
				a := randMat(rng, m, k, l)
				ldc := n + 3
				var want []float32
				c0 := randData(rng, (m-1)*ldc+n)
				for _, threads := range []int{1, 2, 3, 5} {
					c := append([]float32(nil), c0...)
					MulDot(threads, c, ldc, a, b)
					if want == nil {
						want = c
						checkDot(t, a, b, c, c0, ldc)
						continue
					}
					for i := range c {
						if math.Float32bits(c[i]) != math.Float32bits(want[i]) {
							t.Fatalf("conv %v m %d %v, %d threads: C[%d] = %g, 1 thread gives %g", cv, m, l, threads, i, c[i], want[i])
						}
					}
				}
			}
		}
	}
}

// checkDot compares C = A*B with a float64 reference and checks that
// nothing past n in each row was written.
func checkDot(t *testing.T, a, b Mat, c, c0 []float32, ldc int) {
	t.Helper()
	m, k, n := a.Rows(), a.Cols(), b.Cols()
	for i := 0; i < m; i++ {
		for j := 0; j < ldc && i*ldc+j < len(c); j++ {
			if j >= n {
				if c[i*ldc+j] != c0[i*ldc+j] {
					t.Fatalf("%dx%dx%d: wrote C[%d,%d] past n", m, k, n, i, j)
				}
				continue
			}
			var s, mag float64
			for p := 0; p < k; p++ {
				x := at(a, i, p) * at(b, p, j)
				s += x
				mag += math.Abs(x)
			}
			if d := math.Abs(float64(c[i*ldc+j]) - s); !(d <= 1e-6*float64(k)*mag+1e-30) {
				t.Fatalf("%dx%dx%d: C[%d,%d] = %g, want %g", m, k, n, i, j, c[i*ldc+j], s)
			}
		}
	}
}

// TestMulDotNoAllocs: once its run lists have grown, MulDot allocates
// nothing on one thread.
func TestMulDotNoAllocs(t *testing.T) {
	rng := rand.New(rand.NewSource(3))
	b := im2col(rng, 2, 1, 28, 28, 5, 5).T()
	a := randMat(rng, 6, b.Rows(), dense)
	c := make([]float32, 6*b.Cols())
	if n := testing.AllocsPerRun(5, func() { MulDot(1, c, b.Cols(), a, b) }); n != 0 {
		t.Errorf("MulDot: %v allocations per call", n)
	}
}

// TestMulDirect checks that MulDirect gives Mul's bits on convolution
// layouts (and falls back elsewhere), for any thread count.
func TestMulDirect(t *testing.T) {
	defer func(w int) { parallelMinWork = w }(parallelMinWork)
	parallelMinWork = 1
	rng := rand.New(rand.NewSource(5))
	convs := [][6]int{{3, 1, 28, 28, 5, 5}, {2, 6, 12, 12, 5, 5}, {1, 2, 11, 12, 5, 5}, {2, 2, 9, 40, 3, 3}, {1, 12, 20, 20, 3, 3}}
	for _, cv := range convs {
		b := im2col(rng, cv[0], cv[1], cv[2], cv[3], cv[4], cv[5])
		k, n := b.Rows(), b.Cols()
		for _, m := range []int{1, 6, 7, 13} {
			for _, l := range []layout{dense, gather} {
				a := randMat(rng, m, k, l)
				ldc := n + 5
				c0 := randData(rng, (m-1)*ldc+n)
				want := append([]float32(nil), c0...)
				Mul(want, ldc, a, b, 1, 0)
				for _, threads := range []int{1, 2, 3} {
					c := append([]float32(nil), c0...)
					MulDirect(threads, c, ldc, a, b)
					for i := range c {
						if math.Float32bits(c[i]) != math.Float32bits(want[i]) {
							t.Fatalf("conv %v m %d %v, %d threads: C[%d] = %g, Mul gives %g", cv, m, l, threads, i, c[i], want[i])
						}
					}
				}
			}
		}
	}
}

// TestMulDirectNoAllocs: MulDirect allocates nothing on one thread.
func TestMulDirectNoAllocs(t *testing.T) {
	rng := rand.New(rand.NewSource(3))
	b := im2col(rng, 2, 1, 28, 28, 5, 5)
	a := randMat(rng, 6, b.Rows(), dense)
	c := make([]float32, 6*b.Cols())
	if n := testing.AllocsPerRun(5, func() { MulDirect(1, c, b.Cols(), a, b) }); n != 0 {
		t.Errorf("MulDirect: %v allocations per call", n)
	}
}
