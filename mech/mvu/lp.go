package mvu

import (
	"errors"
	"math"
)

// errInfeasible and errUnbounded are the two ways a linear program has no
// optimum; the solver treats an infeasible decoding vector as a bad point.
var (
	errInfeasible = errors.New("mvu: linear program is infeasible")
	errUnbounded  = errors.New("mvu: linear program is unbounded")
	errStalled    = errors.New("mvu: simplex did not converge")
)

// simplex solves min c·x subject to A x = b, x >= 0, by the two-phase
// tableau simplex method.
//
// It exists next to gonum's lp.Simplex (which the tests use to check it)
// because the MVU design problem solves hundreds of these programs and
// gonum's revised simplex refactorises the basis three times per pivot,
// O(m^3) each; a tableau pivot is O(m n) and skips the many zero entries of
// this very sparse problem, which makes a solve hundreds of times faster.
//
// hint[i] may name a column that is the i-th unit vector with b[i] >= 0; such
// rows start with that column basic and need no artificial variable. Use -1
// for rows without one.
func simplex(c []float64, A [][]float64, b []float64, hint []int) (x []float64, obj float64, err error) {
	m, n := len(A), len(c)
	// Columns: n structural, then one artificial per row without a hint,
	// then the right-hand side.
	art := 0
	for i := range m {
		if hint[i] < 0 || b[i] < 0 {
			art++
		}
	}
	w := n + art + 1
	rhs := w - 1
	T := make([][]float64, m)
	basis := make([]int, m)
	next := n
	for i := range m {
		row := make([]float64, w)
		copy(row, A[i])
		row[rhs] = b[i]
		if hint[i] < 0 || b[i] < 0 {
			if b[i] < 0 {
				for k := range row {
					row[k] = -row[k]
				}
			}
			row[next] = 1
			basis[i] = next
			next++
		} else {
			basis[i] = hint[i]
		}
		T[i] = row
	}
	isArt := func(j int) bool { return j >= n && j < n+art }

	// Phase I: minimise the sum of the artificials.
	cost := make([]float64, w)
	for i := range m {
		if isArt(basis[i]) {
			for k := range w {
				if !isArt(k) {
					cost[k] -= T[i][k]
				}
			}
		}
	}
	if err := iterate(T, cost, basis, rhs, func(j int) bool { return true }); err != nil {
		return nil, 0, err
	}
	scale := 1.0
	for i := range m {
		scale = max(scale, math.Abs(b[i]))
	}
	if -cost[rhs] > 1e-9*scale {
		return nil, 0, errInfeasible
	}
	// Drive artificials at level zero out of the basis; a row where that is
	// impossible is redundant and keeps its artificial at zero.
	for i := range m {
		if !isArt(basis[i]) {
			continue
		}
		for j := range n {
			if math.Abs(T[i][j]) > 1e-9 {
				pivot(T, nil, basis, i, j)
				break
			}
		}
	}

	// Phase II: the real costs, artificials never re-enter.
	clear(cost)
	copy(cost, c)
	for i := range m {
		if cb := costOf(c, basis[i]); cb != 0 {
			for k := range w {
				cost[k] -= cb * T[i][k]
			}
		}
	}
	if err := iterate(T, cost, basis, rhs, func(j int) bool { return !isArt(j) }); err != nil {
		return nil, 0, err
	}
	x = make([]float64, n)
	for i, j := range basis {
		if j < n {
			x[j] = max(T[i][rhs], 0)
		}
	}
	for j := range n {
		obj += c[j] * x[j]
	}
	return x, obj, nil
}

func costOf(c []float64, j int) float64 {
	if j < len(c) {
		return c[j]
	}
	return 0
}

// iterate pivots until no allowed column has a negative reduced cost.
// Dantzig's rule picks the entering column; after a run of degenerate pivots
// it switches to Bland's rule, which cannot cycle.
func iterate(T [][]float64, cost []float64, basis []int, rhs int, allowed func(int) bool) error {
	m := len(T)
	tol := 1e-11
	for _, v := range cost[:rhs] {
		tol = max(tol, 1e-11*math.Abs(v))
	}
	degenerate := 0
	for range 50000 + 200*(m+rhs) {
		bland := degenerate > 50
		enter := -1
		best := -tol
		for j := range rhs {
			if cost[j] < best && allowed(j) {
				enter = j
				if bland {
					break
				}
				best = cost[j]
			}
		}
		if enter < 0 {
			return nil
		}
		leave := -1
		var ratio, piv float64
		for i := range m {
			a := T[i][enter]
			if a <= 1e-10 {
				continue
			}
			r := T[i][rhs] / a
			switch {
			case leave < 0 || r < ratio-1e-12:
			case r <= ratio+1e-12 && (bland && basis[i] < basis[leave] || !bland && a > piv):
			default:
				continue
			}
			leave, ratio, piv = i, r, a
		}
		if leave < 0 {
			return errUnbounded
		}
		if ratio <= 1e-12 {
			degenerate++
		} else {
			degenerate = 0
		}
		pivot(T, cost, basis, leave, enter)
	}
	return errStalled
}

// pivot makes column j basic in row r, updating the cost row if non-nil.
func pivot(T [][]float64, cost []float64, basis []int, r, j int) {
	prow := T[r]
	inv := 1 / prow[j]
	for k := range prow {
		prow[k] *= inv
	}
	prow[j] = 1
	// Only the nonzero entries of the pivot row matter; collect them once.
	nz := make([]int, 0, len(prow))
	for k, v := range prow {
		if v != 0 {
			nz = append(nz, k)
		}
	}
	elim := func(row []float64) {
		f := row[j]
		if f == 0 {
			return
		}
		for _, k := range nz {
			row[k] -= f * prow[k]
		}
		row[j] = 0
	}
	for i, row := range T {
		if i != r {
			elim(row)
		}
	}
	if cost != nil {
		elim(cost)
	}
	basis[r] = j
}
