package gemm

import (
	"fmt"
	"math"
	"math/rand"
	"testing"
)

// kernels runs f once per micro-kernel this machine and build can run.
func kernels(t *testing.T, f func(t *testing.T)) {
	names := map[*kernel]string{&genericKernel: "generic"}
	for _, k := range runnable {
		name := names[k]
		if name == "" {
			name = fmt.Sprintf("asm%dx%d", k.mr, k.nr)
		}
		t.Run(name, func(t *testing.T) {
			// The portable kernel runs with the portable packing.
			defer func(h bool) { override, haveRunCopier = nil, h }(haveRunCopier)
			override = k
			if k == &genericKernel {
				haveRunCopier = false
			}
			f(t)
		})
	}
}

// layout is how a test operand's offsets are built.
type layout int

const (
	dense      layout = iota // row-major, stride > cols sometimes
	transposed               // the transpose of a row-major matrix
	gather                   // random offsets
	layouts
)

func (l layout) String() string { return [...]string{"dense", "transposed", "gather"}[l] }

// randMat is a random rows x cols matrix with the given layout.
func randMat(rng *rand.Rand, rows, cols int, l layout) Mat {
	switch l {
	case transposed:
		stride := rows + rng.Intn(3)
		return Dense(randData(rng, cols*stride), cols, rows, stride).T()
	case gather:
		// Offsets are random, with some contiguous runs so that the
		// packers' run detection is exercised.
		n := rows*3 + cols*3 + 10
		m := Mat{Data: randData(rng, 2*n), Row: make([]int, rows), Col: make([]int, cols)}
		for _, offs := range [][]int{m.Row, m.Col} {
			for i := range offs {
				if i > 0 && rng.Intn(3) > 0 {
					offs[i] = offs[i-1] + 1
				} else {
					offs[i] = rng.Intn(n - len(offs))
				}
			}
		}
		return m
	}
	stride := cols + rng.Intn(3)
	return Dense(randData(rng, rows*stride), rows, cols, stride)
}

func randData(rng *rand.Rand, n int) []float32 {
	d := make([]float32, n)
	for i := range d {
		d[i] = float32(rng.NormFloat64())
	}
	return d
}

// im2col is the patch matrix of a random image batch (nb images, ch
// channels, h x w) for a kh x kw stride-1 convolution: Row enumerates
// (c, dy, dx) and Col (b, y, x), as the training engine builds it.
func im2col(rng *rand.Rand, nb, ch, h, w, kh, kw int) Mat {
	oh, ow := h-kh+1, w-kw+1
	m := Mat{Data: randData(rng, nb*ch*h*w)}
	for c := 0; c < ch; c++ {
		for dy := 0; dy < kh; dy++ {
			for dx := 0; dx < kw; dx++ {
				m.Row = append(m.Row, c*h*w+dy*w+dx)
			}
		}
	}
	for b := 0; b < nb; b++ {
		for y := 0; y < oh; y++ {
			for x := 0; x < ow; x++ {
				m.Col = append(m.Col, b*ch*h*w+y*w+x)
			}
		}
	}
	return m
}

// at is element (i, j) of m.
func at(m Mat, i, j int) float64 { return float64(m.Data[m.Row[i]+m.Col[j]]) }

// check runs Mul and compares it with a float64 reference, within a
// relative 1e-5*k of the magnitudes involved.
func checkMul(t *testing.T, a, b Mat, alpha, beta float32, ldc int, nanC bool) {
	t.Helper()
	m, k, n := a.Rows(), a.Cols(), b.Cols()
	rng := rand.New(rand.NewSource(int64(m*1000003 + k*1009 + n)))
	c := randData(rng, max(0, (m-1)*ldc+n))
	if nanC {
		for i := range c {
			c[i] = float32(math.NaN())
		}
	}
	c0 := append([]float32(nil), c...)
	Mul(c, ldc, a, b, alpha, beta)
	// The reference reads A's rows and B's columns into contiguous float64
	// vectors first, to keep its triple loop cheap.
	as := make([][]float64, m)
	for i := range as {
		as[i] = make([]float64, k)
		for p := range as[i] {
			as[i][p] = at(a, i, p)
		}
	}
	bs := make([][]float64, n)
	for j := range bs {
		bs[j] = make([]float64, k)
		for p := range bs[j] {
			bs[j][p] = at(b, p, j)
		}
	}
	for i := 0; i < m; i++ {
		for j := 0; j < n; j++ {
			var s, mag float64
			ai, bj := as[i], bs[j]
			for p, x := range ai {
				s += x * bj[p]
				mag += math.Abs(x * bj[p])
			}
			want := float64(alpha) * s
			mag *= math.Abs(float64(alpha))
			if beta != 0 {
				want += float64(beta) * float64(c0[i*ldc+j])
				mag += math.Abs(float64(beta) * float64(c0[i*ldc+j]))
			}
			got := float64(c[i*ldc+j])
			if d := math.Abs(got - want); !(d <= 1e-5*float64(max(k, 1))*mag+1e-30) {
				t.Fatalf("%dx%dx%d alpha %g beta %g ldc %d: C[%d,%d] = %g, want %g", m, k, n, alpha, beta, ldc, i, j, got, want)
			}
		}
		// Mul must not write between rows (ldc > n).
		if i < m-1 {
			for j := n; j < ldc; j++ {
				if x, y := c[i*ldc+j], c0[i*ldc+j]; x != y && !(x != x && y != y) {
					t.Fatalf("%dx%dx%d: wrote C[%d,%d] past n", m, k, n, i, j)
				}
			}
		}
	}
}

// testShapes checks Mul over m, k, n for all layouts of A and B and a few
// alpha, beta.
func testShapes(t *testing.T, shapes [][3]int) {
	rng := rand.New(rand.NewSource(1))
	for _, s := range shapes {
		m, k, n := s[0], s[1], s[2]
		for la := range layouts {
			for lb := range layouts {
				a, b := randMat(rng, m, k, la), randMat(rng, k, n, lb)
				ab := [][2]float32{{1, 0}, {-0.5, 1}, {2, -1.5}, {1, 1}}[rng.Intn(4)]
				ldc := n + rng.Intn(3)
				checkMul(t, a, b, ab[0], ab[1], ldc, ab[1] == 0)
				if t.Failed() {
					t.Logf("layouts A %v B %v", la, lb)
					return
				}
			}
		}
	}
}

func TestMulSmall(t *testing.T) {
	// Every size 1..70 in each dimension (covering every partial tile of
	// every kernel), with the other two dimensions drawn at random.
	rng := rand.New(rand.NewSource(2))
	var shapes [][3]int
	for d := 1; d <= 70; d++ {
		shapes = append(shapes,
			[3]int{d, 1 + rng.Intn(70), 1 + rng.Intn(70)},
			[3]int{1 + rng.Intn(70), d, 1 + rng.Intn(70)},
			[3]int{1 + rng.Intn(70), 1 + rng.Intn(70), d})
	}
	kernels(t, func(t *testing.T) { testShapes(t, shapes) })
}

func TestMulRandom(t *testing.T) {
	// Larger random shapes: several k blocks, several A and B blocks.
	rng := rand.New(rand.NewSource(3))
	var shapes [][3]int
	for range 10 {
		shapes = append(shapes, [3]int{1 + rng.Intn(150), 1 + rng.Intn(600), 1 + rng.Intn(600)})
	}
	if testing.Short() {
		shapes = shapes[:4]
	}
	kernels(t, func(t *testing.T) { testShapes(t, shapes) })
}

// zoo is the shapes (m, k, n) that fedpq's small CNNs and MLPs multiply in a
// training step with batch 64.
var zoo = [][3]int{
	{64, 784, 32}, {32, 64, 784}, {64, 784, 128}, {128, 64, 784}, {64, 1600, 128},
	{128, 64, 1600}, {64, 1024, 512}, {512, 64, 1024}, {64, 512, 10}, {64, 10, 512},
	{6, 25, 36864}, {6, 150, 4096}, {32, 9, 43264}, {64, 288, 7744}, {32, 25, 36864},
	{64, 800, 4096}, {64, 4096, 800}, {32, 1600, 9216},
}

func TestMulZoo(t *testing.T) {
	if testing.Short() {
		t.Skip("slow float64 reference")
	}
	kernels(t, func(t *testing.T) {
		rng := rand.New(rand.NewSource(4))
		for _, s := range zoo {
			m, k, n := s[0], s[1], s[2]
			// Keep the float64 reference affordable: check a column
			// slice of B when n is large (the tiles are the same).
			n = min(n, 700)
			checkMul(t, randMat(rng, m, k, dense), randMat(rng, k, n, dense), 1, 0, n, false)
			checkMul(t, randMat(rng, k, m, dense).T(), randMat(rng, k, n, transposed), 0.5, 1, n+1, false)
		}
	})
}

func TestMulConv(t *testing.T) {
	// Convolutions through im2col offset tables: forward (weights x
	// patches), weight gradient (output gradient x patches^T) and input
	// gradient in patch space (weights^T x output gradient).
	kernels(t, func(t *testing.T) {
		rng := rand.New(rand.NewSource(5))
		for _, c := range []struct{ nb, ch, h, w, kh, kw, out int }{
			{2, 1, 28, 28, 5, 5, 6}, {2, 6, 14, 14, 5, 5, 16}, {1, 3, 12, 13, 3, 3, 32}, {3, 2, 7, 9, 1, 3, 5},
		} {
			x := im2col(rng, c.nb, c.ch, c.h, c.w, c.kh, c.kw)
			ckk, pos := x.Rows(), x.Cols()
			w := randMat(rng, c.out, ckk, dense)
			dy := randMat(rng, c.out, pos, dense)
			checkMul(t, w, x, 1, 0, pos, true)
			checkMul(t, dy, x.T(), 1, 1, ckk, false)
			checkMul(t, w.T(), dy, 1, 0, pos, false)
		}
	})
}

func TestMulEdges(t *testing.T) {
	// Empty and single-element dimensions, including k == 0 (C = beta*C)
	// and alpha == 0 (A and B not read, so NaNs in them do not show).
	kernels(t, func(t *testing.T) {
		rng := rand.New(rand.NewSource(6))
		for _, m := range []int{0, 1, 2, 7, 65} {
			for _, k := range []int{0, 1, 2, 9} {
				for _, n := range []int{0, 1, 2, 70} {
					for la := range layouts {
						a, b := randMat(rng, m, k, la), randMat(rng, k, n, (la+1)%layouts)
						for _, ab := range [][2]float32{{1, 0}, {1, 1}, {0, 2}, {0, 0}, {-1, 0.5}} {
							checkMul(t, a, b, ab[0], ab[1], n+1, ab[1] == 0)
						}
					}
				}
			}
		}
		nan := float32(math.NaN())
		a := Dense([]float32{nan, nan}, 1, 2, 2)
		c := []float32{3}
		Mul(c, 1, a, a.T(), 0, 2)
		if c[0] != 6 {
			t.Errorf("alpha 0: C = %v, want 6", c[0])
		}
	})
}

func TestMulPanics(t *testing.T) {
	for _, f := range []func(){
		func() { Mul(make([]float32, 9), 3, Dense(nil, 3, 2, 2), Dense(nil, 3, 3, 3), 1, 0) },
		func() { Mul(make([]float32, 9), 2, Dense(nil, 3, 2, 2), Dense(nil, 2, 3, 3), 1, 0) },
		func() { Mul(make([]float32, 8), 3, Dense(nil, 3, 2, 2), Dense(nil, 2, 3, 3), 1, 0) },
	} {
		func() {
			defer func() {
				if recover() == nil {
					t.Error("no panic")
				}
			}()
			f()
		}()
	}
}

func TestMulParallelBitIdentical(t *testing.T) {
	defer func(w int) { parallelMinWork = w }(parallelMinWork)
	parallelMinWork = 1
	kernels(t, func(t *testing.T) {
		rng := rand.New(rand.NewSource(7))
		shapes := [][3]int{{64, 784, 32}, {6, 25, 700}, {130, 300, 200}, {64, 512, 10}, {200, 70, 9}, {1, 5, 1000}, {1000, 3, 1}}
		for _, s := range shapes {
			m, k, n := s[0], s[1], s[2]
			for _, l := range []layout{dense, transposed, gather} {
				a, b := randMat(rng, m, k, l), randMat(rng, k, n, dense)
				c0 := randData(rng, m*n)
				want := append([]float32(nil), c0...)
				Mul(want, n, a, b, 1.5, 0.5)
				for _, threads := range []int{-1, 0, 1, 2, 3, 5} {
					got := append([]float32(nil), c0...)
					MulParallel(threads, got, n, a, b, 1.5, 0.5)
					for i := range got {
						if math.Float32bits(got[i]) != math.Float32bits(want[i]) {
							t.Fatalf("%dx%dx%d %v, %d threads: C[%d] = %g, Mul gives %g", m, k, n, l, threads, i, got[i], want[i])
						}
					}
				}
			}
		}
	})
}

func TestMulNoAllocs(t *testing.T) {
	rng := rand.New(rand.NewSource(8))
	a, b := randMat(rng, 70, 300, dense), im2col(rng, 2, 3, 12, 12, 5, 5)
	a.Col = a.Col[:b.Rows()]
	c := make([]float32, 70*b.Cols())
	Mul(c, b.Cols(), a, b, 1, 0) // fill the pool
	if n := testing.AllocsPerRun(10, func() { Mul(c, b.Cols(), a, b, 1, 0) }); n != 0 {
		t.Errorf("Mul allocates %v times per call", n)
	}
}

func TestDense(t *testing.T) {
	m := Dense(make([]float32, 20), 3, 4, 6)
	if fmt.Sprint(m.Row, m.Col, m.Rows(), m.Cols(), m.T().Rows()) != "[0 6 12] [0 1 2 3] 3 4 4" {
		t.Errorf("Dense: %v %v", m.Row, m.Col)
	}
}

func TestFindRuns(t *testing.T) {
	// The assembly run finder against the portable one, on every length
	// and on runs of every length.
	rng := rand.New(rand.NewSource(9))
	for n := 1; n <= 64; n++ {
		for range 20 {
			js := make([]int, n)
			for i := range js {
				if i > 0 && rng.Intn(4) > 0 {
					js[i] = js[i-1] + 1
				} else {
					js[i] = rng.Intn(1000) - 100
				}
			}
			r1, r2 := make([]int, 3*64), make([]int, 3*64)
			n1, lo1, hi1 := findRuns(js, r1)
			n2, lo2, hi2 := findRunsGo(js, r2)
			if n1 != n2 || lo1 != lo2 || hi1 != hi2 || fmt.Sprint(r1[:3*n1]) != fmt.Sprint(r2[:3*n2]) {
				t.Fatalf("findRuns(%v) = %d %d %d %v, want %d %d %d %v", js, n1, lo1, hi1, r1[:3*n1], n2, lo2, hi2, r2[:3*n2])
			}
		}
	}
}
