package mech

import (
	"fmt"
	"math"
	"math/bits"
	"testing"
)

// rotationMatrix returns R as rows: R[j] is row j (R x = sum_i R[j][i] x_i).
func rotationMatrix(r *blockRotation) [][]float64 {
	d := r.d
	cols := make([][]float64, d)
	tmp := make([]float64, d)
	for i := range d {
		e := make([]float64, d)
		e[i] = 1
		r.apply(e, tmp)
		cols[i] = e
	}
	rows := make([][]float64, d)
	for j := range d {
		rows[j] = make([]float64, d)
		for i := range d {
			rows[j][i] = cols[i][j]
		}
	}
	return rows
}

// TestBlockRotation: for sizes that are and are not powers of two, the
// blocks are d's binary expansion, largest first; R is orthonormal (R R^T =
// I within 1e-14, checked as a matrix for d <= 100); invert undoes apply
// and the norm is kept, to 1e-13 relative, for d = 6,422 and 100,000; two
// rotations of one size are the same; and R spreads: every unit vector,
// those of the smallest blocks included, has no rotated coordinate above
// 6/sqrt(d) at d = 6,422 (a spread vector's largest is about
// sqrt(2 ln d)/sqrt(d) = 4.2/sqrt(d)), and of a random Gaussian vector's
// rotated coordinates 0.27% +- 0.1% lie beyond 3 root mean squares.
func TestBlockRotation(t *testing.T) {
	for _, d := range []int{1, 2, 3, 7, 37, 64, 100, 6422, 100000} {
		r := newBlockRotation(d)
		sum, last := 0, math.MaxInt
		for _, b := range r.blocks {
			if bits.OnesCount(uint(b)) != 1 || b >= last {
				t.Errorf("d=%d: blocks %v", d, r.blocks)
			}
			sum, last = sum+b, b
		}
		if sum != d || len(r.blocks) != bits.OnesCount(uint(d)) {
			t.Errorf("d=%d: blocks %v", d, r.blocks)
		}
		if d <= 100 {
			R := rotationMatrix(r)
			for a := range d {
				for b := range d {
					dot := 0.0
					for i := range d {
						dot += R[a][i] * R[b][i]
					}
					want := 0.0
					if a == b {
						want = 1
					}
					if math.Abs(dot-want) > 1e-14 {
						t.Fatalf("d=%d: (R R^T)[%d][%d] = %v", d, a, b, dot)
					}
				}
			}
		}
		src := stream("rotation", uint64(d))
		x := make([]float64, d)
		var n2 float64
		for i := range x {
			x[i] = src.NormFloat64()
			n2 += x[i] * x[i]
		}
		y := append([]float64(nil), x...)
		tmp := make([]float64, d)
		r.apply(y, tmp)
		var m2 float64
		beyond := 0
		for _, v := range y {
			m2 += v * v
			if math.Abs(v) > 3*math.Sqrt(n2/float64(d)) {
				beyond++
			}
		}
		if math.Abs(m2/n2-1) > 1e-13 {
			t.Errorf("d=%d: norm^2 %v after, %v before", d, m2, n2)
		}
		if d >= 6422 {
			if f := float64(beyond) / float64(d); math.Abs(f-0.0027) > 0.001 {
				t.Errorf("d=%d: %.4f of the coordinates beyond 3 rms", d, f)
			}
		}
		r2 := newBlockRotation(d)
		z := append([]float64(nil), x...)
		r2.apply(z, tmp)
		r.invert(y, tmp)
		for i := range x {
			if math.Abs(y[i]-x[i]) > 1e-13*math.Sqrt(n2) {
				t.Fatalf("d=%d: invert(apply(x))[%d] = %v, x %v", d, i, y[i], x[i])
			}
		}
		r.apply(x, tmp)
		for i := range x {
			if x[i] != z[i] {
				t.Fatalf("d=%d: two rotations differ", d)
			}
		}
	}
	const d = 6422
	r := newBlockRotation(d)
	tmp := make([]float64, d)
	worst := 0.0
	for i := 0; i < d; i += 13 {
		for _, k := range []int{i, d - 1 - i%22} { // the last 22 are the small blocks'
			e := make([]float64, d)
			e[k] = 1
			r.apply(e, tmp)
			for _, v := range e {
				worst = max(worst, math.Abs(v)*math.Sqrt(d))
			}
		}
	}
	t.Logf("d=%d: %v; largest rotated coordinate of a unit vector: %.2f/sqrt(d)", d, r, worst)
	if worst > 6 {
		t.Errorf("a unit vector rotates to a coordinate of %.2f/sqrt(d)", worst)
	}
}

// BenchmarkRotation measures the rotations alone, per parameter: fwht on
// 8,192 coordinates (what ddgauss and skellam run for 6,422 parameters,
// and one sign pass), and blockRotation at 6,422 and 100,000.
func BenchmarkRotation(b *testing.B) {
	b.Run("fwht/8192", func(b *testing.B) {
		x := make([]float64, 8192)
		signs := distRotation(8192)
		for b.Loop() {
			for i := range x {
				if flipped(signs, i) {
					x[i] = -x[i]
				}
			}
			fwht(x)
		}
		b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/6422, "ns/param")
	})
	for _, d := range []int{6422, 100000} {
		b.Run(fmt.Sprintf("block/%d", d), func(b *testing.B) {
			r := newBlockRotation(d)
			x, tmp := make([]float64, d), make([]float64, d)
			for i := range x {
				x[i] = float64(i % 7)
			}
			for b.Loop() {
				r.apply(x, tmp)
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/float64(d), "ns/param")
		})
	}
}
