package lattice

import (
	"fmt"
	"math"
	"sort"
)

// HexCode numbers the points of the hexagonal lattice inside a bounded
// region that is convex along every row (every set of points with the same
// j), so that a quantizer output fits in ceil(log2 Len()) bits: the points
// are numbered row by row, j ascending, and i ascending within a row.
// It stores two numbers per row, not one per point.
type HexCode struct {
	j0    int64   // first row
	lo    []int64 // lo[r]: smallest i of row j0+r
	start []int   // start[r]: index of the first point of row j0+r; start[rows] = Len
}

// newHexCode builds the code of rows j0..j1, row j holding i in
// rowRange(j). Empty rows are only allowed at the ends (the region is
// convex), and are dropped.
func newHexCode(j0, j1 int64, rowRange func(j int64) (lo, hi int64)) (*HexCode, error) {
	c := &HexCode{start: []int{0}}
	for j := j0; j <= j1; j++ {
		lo, hi := rowRange(j)
		if lo > hi {
			if len(c.lo) == 0 {
				continue
			}
			break // the region is over: it is convex, so later rows are empty too
		}
		if len(c.lo) == 0 {
			c.j0 = j
		}
		c.lo = append(c.lo, lo)
		c.start = append(c.start, c.start[len(c.start)-1]+int(hi-lo+1))
	}
	if len(c.lo) == 0 {
		return nil, fmt.Errorf("lattice: empty region")
	}
	return c, nil
}

// Len is the number of points.
func (c *HexCode) Len() int { return c.start[len(c.start)-1] }

// Index returns the number of lattice point (i, j), and false if the point
// is outside the region.
func (c *HexCode) Index(i, j int64) (int, bool) {
	r := j - c.j0
	if r < 0 || r >= int64(len(c.lo)) {
		return 0, false
	}
	k := i - c.lo[r]
	if k < 0 || k >= int64(c.start[r+1]-c.start[r]) {
		return 0, false
	}
	return c.start[r] + int(k), true
}

// At returns the lattice point numbered idx, 0 <= idx < Len().
func (c *HexCode) At(idx int) (i, j int64) {
	r := sort.Search(len(c.lo), func(r int) bool { return c.start[r+1] > idx })
	return c.lo[r] + int64(idx-c.start[r]), c.j0 + int64(r)
}

// Rows calls f for every row of the region with its i range; it is how
// callers compute extremes (largest hop count, coordinate spans) in time
// proportional to the number of rows.
func (c *HexCode) Rows(f func(j, lo, hi int64)) {
	for r, lo := range c.lo {
		f(c.j0+int64(r), lo, lo+int64(c.start[r+1]-c.start[r])-1)
	}
}

// coverTol widens the cover region by a relative 1e-9 so that lattice
// points lying exactly on its boundary, which a tie in Nearest can return,
// are inside despite rounding.
const coverTol = 1e-9

// HexCover returns the code of every point that Nearest can return for
// x + d, where x is in the square [-half, half]^2 and d in the basic cell of
// Hex{step}: a point p is such an output iff p - x lies in the cell for
// some x, iff p lies in the square plus the cell doubled (Minkowski sum;
// the cell is centrally symmetric). That sum is a convex octagon with facet
// normals at 0, 60, 90, 120, 180, 240, 270, 300 degrees:
//
//	|x| <= half + step
//	|y| <= half + 2 step/sqrt3
//	|x| + sqrt3 |y| <= half (1 + sqrt3) + 2 step
//
// (the square's support function plus the doubled hexagon's, whose
// inradius is step and circumradius 2 step/sqrt3). Points on the boundary
// are included.
func HexCover(step, half float64) (*HexCode, error) {
	if !(step > 0) || !(half > 0) || math.IsInf(step, 0) || math.IsInf(half, 0) {
		return nil, fmt.Errorf("lattice: cover of step %v and half-width %v", step, half)
	}
	tol := coverTol * (half + step)
	ymax := half + 2*step/sqrt3 + tol
	jmax := int64(math.Floor(ymax / (step * sqrt3 / 2)))
	if jmax > 1<<26 {
		return nil, fmt.Errorf("lattice: cover of half-width %v at step %v has too many rows", half, step)
	}
	return newHexCode(-jmax, jmax, func(j int64) (int64, int64) {
		y := math.Abs(step * sqrt3 / 2 * float64(j))
		xmax := min(half+step, half*(1+sqrt3)+2*step-sqrt3*y) + tol
		if xmax < 0 {
			return 1, 0
		}
		// x = step*(i + j/2), so i ranges over [-xmax/step - j/2, xmax/step - j/2].
		lo := int64(math.Ceil(-xmax/step - float64(j)/2))
		hi := int64(math.Floor(xmax/step - float64(j)/2))
		return lo, hi
	})
}

// HexCoverStep returns the smallest step found by bisection for which
// HexCover(step, half) has at most maxPoints points: the finest hexagonal
// quantizer of the square [-half, half]^2 that is never overloaded by a
// dither and fits in log2(maxPoints) bits. As the step grows the cover
// tends to the center and its six neighbours, so maxPoints must be at
// least 7.
func HexCoverStep(half float64, maxPoints int) (float64, error) {
	if maxPoints < 7 {
		return 0, fmt.Errorf("lattice: a hexagonal cover needs at least 7 points, not %d", maxPoints)
	}
	return HexCoverStepFunc(half, func(c *HexCode) bool { return c.Len() <= maxPoints })
}

// HexCoverStepFunc returns the smallest step found by bisection whose
// HexCover(step, half) satisfies ok, which must hold for large steps (where
// the cover is the center and its six neighbours). Properties such as the
// number of points are not exactly monotone in the step, so bisection may
// miss a slightly smaller step; the step returned always satisfies ok.
func HexCoverStepFunc(half float64, ok func(*HexCode) bool) (float64, error) {
	fits := func(step float64) bool {
		c, err := HexCover(step, half)
		return err == nil && ok(c)
	}
	hi := half
	for !fits(hi) {
		hi *= 2
		if hi > half*(1<<40) {
			return 0, fmt.Errorf("lattice: no hexagonal cover of half-width %v satisfies the condition", half)
		}
	}
	lo := hi / 2
	for fits(lo) {
		hi, lo = lo, lo/2
		if lo < half*0x1p-40 {
			return 0, fmt.Errorf("lattice: hexagonal cover step of half-width %v underflows", half)
		}
	}
	for range 60 {
		mid := (lo + hi) / 2
		if fits(mid) {
			hi = mid
		} else {
			lo = mid
		}
	}
	return hi, nil
}

// HexBall returns the code of the points at most m hops from the origin:
// 1 + 3m(m+1) points, a hexagon.
func HexBall(m int64) (*HexCode, error) {
	if m < 0 || m > 1<<26 {
		return nil, fmt.Errorf("lattice: hexagonal ball of radius %d", m)
	}
	return newHexCode(-m, m, func(j int64) (int64, int64) {
		// |i| <= m and |i+j| <= m.
		return max(-m, -m-j), min(m, m-j)
	})
}

// BallRadius is the largest m whose HexBall has at most maxPoints points,
// or -1 if maxPoints < 1.
func BallRadius(maxPoints int) int64 {
	m := int64(-1)
	for 1+3*(m+1)*(m+2) <= int64(maxPoints) {
		m++
	}
	return m
}

// Project maps a lattice point to the ball of radius m: points inside are
// kept; a point at h > m hops is scaled by m/h in cube coordinates and
// rounded to a lattice point, which is at exactly m hops. It depends on the
// point alone, so applying it to a private output is post-processing.
func Project(i, j, m int64) (int64, int64) {
	h := Hops(i, j)
	if h <= m {
		return i, j
	}
	f := float64(m) / float64(h)
	a, b, c := float64(i)*f, float64(j)*f, float64(-i-j)*f
	ra, rb, rc := math.Round(a), math.Round(b), math.Round(c)
	da, db, dc := math.Abs(ra-a), math.Abs(rb-b), math.Abs(rc-c)
	switch {
	case da >= db && da >= dc:
		ra = -rb - rc
	case db >= dc:
		rb = -ra - rc
	}
	return int64(ra), int64(rb)
}
