package mech

import (
	"fmt"
	"math"
	"math/bits"

	"github.com/fedpq/fedpq/corr"
)

// blockRotation is a public orthonormal map of R^d onto itself, for any d,
// without padding: rotationStages rounds, each a fixed permutation of the
// coordinates, a diagonal of random signs, and the Walsh-Hadamard
// transform, normalized, on each block, the blocks being the powers of two
// of d's binary expansion, largest first (6,422 = 4096 + 2048 + 256 + 16 +
// 4 + 2). One randomized Hadamard transform of the padded vector (what
// fwht and distRotation do) spreads any vector evenly over d' = the next
// power of two coordinates, which a mechanism then sends: 8,192 for 6,422
// parameters, 28% more. Here the permutations carry each coordinate's
// share of the norm from block to block, so that after the rounds every
// coordinate mixes inputs from all over the vector; a coordinate stays in
// the small blocks of every round with probability (s/d)^3, s the size of
// the small blocks (22/6422 above: 4e-8).
//
// Privacy never depends on it: it is orthonormal (up to rounding), so it
// keeps the L2 norm, and the mechanisms that use it (pbm) clip each
// rotated coordinate anyway; it only makes the clipping rare. Its signs
// and permutations are derived from a fixed, published key and d, the
// same for every client, round and server, like distRotation's.
type blockRotation struct {
	d      int
	blocks []int                     // sizes, largest first
	perm   [rotationStages][]int32   // perm[s][i]: the coordinate that lands at i
	mult   [rotationStages][]float64 // the sign of i in round s, times the previous round's normalization of perm[s][i]
	last   []float64                 // the last round's normalization: 1/sqrt(the size of i's block)
}

// rotationStages is the number of rounds of blockRotation.
const rotationStages = 3

// newBlockRotation returns the rotation of R^d (d >= 1). Round s maps x to
// N H D_s P_s x: P_s the permutation (gathering), D_s the signs, H the
// unnormalized transform on each block, N its normalization; mult folds
// each N into the next round's gathering, last is the final N.
func newBlockRotation(d int) *blockRotation {
	r := &blockRotation{d: d, last: make([]float64, d)}
	off := 0
	for b := bits.Len(uint(d)) - 1; b >= 0; b-- {
		if d>>b&1 == 1 {
			r.blocks = append(r.blocks, 1<<b)
			inv := 1 / math.Sqrt(float64(int(1)<<b))
			for i := off; i < off+1<<b; i++ {
				r.last[i] = inv
			}
			off += 1 << b
		}
	}
	p := make([]int, d)
	signs := make([]uint64, (d+63)/64)
	for s := range rotationStages {
		src := corr.Derive(distRotationKey, "block-rotation", uint64(d), uint64(s))
		corr.Shuffle(src, p)
		src.Fill(signs)
		r.perm[s] = make([]int32, d)
		r.mult[s] = make([]float64, d)
		for i, v := range p {
			r.perm[s][i] = int32(v)
			r.mult[s][i] = 1
			if s > 0 {
				r.mult[s][i] = r.last[v]
			}
			if flipped(signs, i) {
				r.mult[s][i] = -r.mult[s][i]
			}
		}
	}
	return r
}

// apply replaces x (length d) by R x; tmp is scratch of length d.
func (r *blockRotation) apply(x, tmp []float64) {
	a, b := x, tmp
	for s := range rotationStages {
		m := r.mult[s]
		for i, j := range r.perm[s] {
			b[i] = a[j] * m[i]
		}
		r.hadamard(b)
		a, b = b, a
	}
	for i, f := range r.last {
		x[i] = a[i] * f
	}
}

// invert replaces x (length d) by R^T x, the inverse of apply up to
// rounding; tmp is scratch of length d.
func (r *blockRotation) invert(x, tmp []float64) {
	for i, f := range r.last {
		tmp[i] = x[i] * f
	}
	a, b := tmp, x
	for s := rotationStages - 1; s >= 0; s-- {
		r.hadamard(a)
		m := r.mult[s]
		for i, j := range r.perm[s] {
			b[j] = a[i] * m[i]
		}
		a, b = b, a
	}
	if rotationStages%2 == 0 {
		copy(x, a)
	}
}

// hadamard applies the unnormalized Walsh-Hadamard transform to each block
// of x.
func (r *blockRotation) hadamard(x []float64) {
	off := 0
	for _, b := range r.blocks {
		fwht(x[off : off+b])
		off += b
	}
}

// String describes the blocks, for errors and logs.
func (r *blockRotation) String() string {
	return fmt.Sprintf("blocks %v of %d coordinates, %d rounds", r.blocks, r.d, rotationStages)
}
