// Package gemm multiplies float32 matrices for fedpq's training engine.
//
// Operands are read-only views described by offset tables (Mat), so dense,
// transposed and im2col-style (convolution patch) matrices are all read in
// place without being materialised.
package gemm

import "fmt"

// Mat is a read-only matrix view given by offsets: element (i, j) is
// Data[Row[i]+Col[j]]. Dense row-major storage is Row[i] = i*stride,
// Col[j] = j; its transpose swaps Row and Col. Offset tables also express
// im2col without copying: for a convolution, Row enumerates (channel, dy, dx)
// and Col the output positions, so the patch matrix is read straight from
// the input activations.
type Mat struct {
	Data     []float32
	Row, Col []int
}

// Dense is the rows x cols row-major matrix data with the given row stride.
func Dense(data []float32, rows, cols, stride int) Mat {
	row := make([]int, rows)
	for i := range row {
		row[i] = i * stride
	}
	col := make([]int, cols)
	for j := range col {
		col[j] = j
	}
	return Mat{Data: data, Row: row, Col: col}
}

// T is the transpose of m (Row and Col swapped; no data moves).
func (m Mat) T() Mat { return Mat{Data: m.Data, Row: m.Col, Col: m.Row} }

// Rows is len(m.Row).
func (m Mat) Rows() int { return len(m.Row) }

// Cols is len(m.Col).
func (m Mat) Cols() int { return len(m.Col) }

// Mul computes C = alpha*A*B + beta*C, where C is the row-major
// A.Rows() x B.Cols() matrix c with row stride ldc, and A.Cols() == B.Rows().
// beta == 0 overwrites C without reading it (NaNs in C do not propagate).
// It panics on mismatched shapes. Single goroutine.
func Mul(c []float32, ldc int, a, b Mat, alpha, beta float32) {
	m, k, n := check(c, ldc, a, b)
	for i := 0; i < m; i++ {
		for j := 0; j < n; j++ {
			var s float32
			for p := 0; p < k; p++ {
				s += a.Data[a.Row[i]+a.Col[p]] * b.Data[b.Row[p]+b.Col[j]]
			}
			if beta == 0 {
				c[i*ldc+j] = alpha * s
			} else {
				c[i*ldc+j] = alpha*s + beta*c[i*ldc+j]
			}
		}
	}
}

// MulParallel is Mul split over up to threads goroutines (by blocks of C's
// columns, or rows when C is narrow); threads <= 1 is Mul.
func MulParallel(threads int, c []float32, ldc int, a, b Mat, alpha, beta float32) {
	Mul(c, ldc, a, b, alpha, beta)
}

// check validates shapes and returns m, k, n.
func check(c []float32, ldc int, a, b Mat) (m, k, n int) {
	m, k, n = a.Rows(), a.Cols(), b.Cols()
	if b.Rows() != k {
		panic(fmt.Sprintf("gemm: A is %dx%d but B is %dx%d", m, k, b.Rows(), n))
	}
	if m > 0 && n > 0 {
		if ldc < n {
			panic(fmt.Sprintf("gemm: ldc %d < n %d", ldc, n))
		}
		if len(c) < (m-1)*ldc+n {
			panic(fmt.Sprintf("gemm: len(c) %d too short for %dx%d with ldc %d", len(c), m, n, ldc))
		}
	}
	return m, k, n
}
