package robust

import (
	"cmp"
	"fmt"
	"math"
	"slices"
	"strconv"
	"sync"
)

// Krum is Blanchard et al.'s rule: each message is scored by the sum of
// its squared distances to its n-f-2 nearest other messages, and the
// message with the least score is the output (the lower index on a tie).
// With at most F Byzantine messages among n > 2F+2, the output is an
// honest message or one close to the honest ones. It outputs one client's
// message, so it keeps one client's noise: under LDP, n times the
// variance of the mean.
type Krum struct {
	F int
}

func (k Krum) String() string { return "krum:" + strconv.Itoa(k.F) }

func (k Krum) validate() error { return validateF("krum", k.F) }

func (k Krum) Aggregate(rows [][]float32, out []float64) error {
	if err := k.validate(); err != nil {
		return err
	}
	return MultiKrum{F: k.F, M: 1}.aggregate("krum", rows, out)
}

// MultiKrum is Blanchard et al.'s Multi-Krum: the mean of the M messages
// with the least Krum scores (computed once, over all n messages; ties
// to the lower index). M = 1 is Krum; M = n is the mean. Needs n > 2F+2
// and M <= n.
type MultiKrum struct {
	F, M int
}

func (k MultiKrum) String() string {
	return "multi-krum:" + strconv.Itoa(k.F) + "," + strconv.Itoa(k.M)
}

func (k MultiKrum) validate() error {
	if k.M < 1 {
		return fmt.Errorf("robust: multi-krum: M = %d must be at least 1 (the messages averaged)", k.M)
	}
	return validateF("multi-krum", k.F)
}

func (k MultiKrum) Aggregate(rows [][]float32, out []float64) error {
	if err := k.validate(); err != nil {
		return err
	}
	return k.aggregate("multi-krum", rows, out)
}

// aggregate is Multi-Krum, valid k, under the rule's name.
func (k MultiKrum) aggregate(name string, rows [][]float32, out []float64) error {
	if err := checkShape(rows, len(out)); err != nil {
		return err
	}
	n := len(rows)
	if n <= 2*k.F+2 {
		return fmt.Errorf("robust: %s with f = %d needs more than 2f+2 = %d messages, got %d", name, k.F, 2*k.F+2, n)
	}
	if k.M > n {
		return fmt.Errorf("robust: %s: M = %d is more than the %d messages", name, k.M, n)
	}
	dist, err := distances(rows)
	if err != nil {
		return err
	}
	nb := newNeighbours(dist, n)
	in := make([]bool, n)
	order := make([]int, n)
	for i := range in {
		in[i], order[i] = true, i
	}
	score := make([]float64, n)
	for i := range score {
		score[i] = nb.score(i, in, n-k.F-2)
	}
	slices.SortStableFunc(order, func(a, b int) int { return cmp.Compare(score[a], score[b]) })
	sel := order[:k.M]
	slices.Sort(sel) // the mean adds the rows in index order
	return meanOf(rows, sel, out)
}

// Bulyan is El Mhamdi et al.'s rule: theta = n-2F messages are chosen by
// Krum, one at a time (each time over the messages not yet chosen, with
// max(1, m-F-2) neighbours among the m left), and then, per coordinate,
// the beta = theta-2F chosen values closest to their median are averaged.
// Values tied at the last place share it equally, so the output does not
// depend on the order of equal values. Needs n >= 4F+3.
type Bulyan struct {
	F int
}

func (b Bulyan) String() string { return "bulyan:" + strconv.Itoa(b.F) }

func (b Bulyan) validate() error { return validateF("bulyan", b.F) }

func (b Bulyan) Aggregate(rows [][]float32, out []float64) error {
	if err := b.validate(); err != nil {
		return err
	}
	if err := checkShape(rows, len(out)); err != nil {
		return err
	}
	n := len(rows)
	if n < 4*b.F+3 {
		return fmt.Errorf("robust: bulyan with f = %d needs at least 4f+3 = %d messages, got %d", b.F, 4*b.F+3, n)
	}
	dist, err := distances(rows)
	if err != nil {
		return err
	}
	sel := bulyanSelect(dist, n, n-2*b.F, b.F)
	chosen := make([][]float32, len(sel))
	for i, k := range sel {
		chosen[i] = rows[k]
	}
	beta := n - 4*b.F
	return columns(chosen, out, func(col []uint32) float64 { return closestMean(col, beta) })
}

// bulyanSelect returns, in index order, the theta messages chosen by
// repeated Krum.
func bulyanSelect(dist []float64, n, theta, f int) []int {
	nb := newNeighbours(dist, n)
	left := make([]bool, n)
	for i := range left {
		left[i] = true
	}
	sel := make([]int, 0, theta)
	for m := n; len(sel) < theta; m-- {
		best, bestScore := -1, math.Inf(1)
		for i := range n {
			if !left[i] {
				continue
			}
			if s := nb.score(i, left, min(max(m-f-2, 1), m-1)); best < 0 || s < bestScore {
				best, bestScore = i, s
			}
		}
		sel = append(sel, best)
		left[best] = false
	}
	slices.Sort(sel)
	return sel
}

// closestMean is the mean of the beta values of col (keys) closest to
// their median; it sorts col. Values at the last distance that does not
// fit whole share the places left equally.
func closestMean(col []uint32, beta int) float64 {
	slices.Sort(col)
	n := len(col)
	med := value(col[n/2])
	lo, hi := n/2-1, n/2 // the next candidates below and above
	if n%2 == 0 {
		med = (value(col[n/2-1]) + med) / 2
	}
	var sum float64
	taken := 0
	for taken < beta {
		dl, dh := math.Inf(1), math.Inf(1)
		if lo >= 0 {
			dl = med - value(col[lo])
		}
		if hi < n {
			dh = value(col[hi]) - med
		}
		if dl != dh {
			if dl < dh {
				sum += value(col[lo])
				lo--
			} else {
				sum += value(col[hi])
				hi++
			}
			taken++
			continue
		}
		// A tie at distance dl: the runs of equal values on both sides.
		cl, ch := run(col, lo, -1), run(col, hi, 1)
		tied := float64(cl)*value(col[lo]) + float64(ch)*value(col[hi])
		if taken+cl+ch <= beta {
			sum += tied
			taken += cl + ch
			lo, hi = lo-cl, hi+ch
			continue
		}
		sum += float64(beta-taken) * tied / float64(cl+ch)
		break
	}
	return sum / float64(beta)
}

// run counts the keys equal to col[i] from i in direction step.
func run(col []uint32, i, step int) int {
	c := 0
	for j := i; j >= 0 && j < len(col) && col[j] == col[i]; j += step {
		c++
	}
	return c
}

// neighbours holds, for each row, the other rows from the nearest to the
// farthest (ties by index), so that a score within any subset of the rows
// costs one pass over a row's list instead of a sort.
type neighbours struct {
	n    int
	dist []float64
	near [][]int
}

func newNeighbours(dist []float64, n int) neighbours {
	near := make([][]int, n)
	for i := range near {
		for k := range n {
			if k != i {
				near[i] = append(near[i], k)
			}
		}
		slices.SortStableFunc(near[i], func(a, b int) int { return cmp.Compare(dist[i*n+a], dist[i*n+b]) })
	}
	return neighbours{n, dist, near}
}

// score is row i's Krum score among the rows marked in: the sum of its
// count smallest squared distances to them, added from the smallest.
func (nb neighbours) score(i int, in []bool, count int) float64 {
	var s float64
	for _, k := range nb.near[i] {
		if count == 0 {
			break
		}
		if in[k] {
			s += nb.dist[i*nb.n+k]
			count--
		}
	}
	return s
}

// distances returns the n x n matrix of squared Euclidean distances
// between the rows, in float64: a float32 difference is exact in float64,
// and a sum of 2^31 squares of them stays below 2^31 * (2^129)^2, far
// from overflow. Pairs are shared out by their first row; each pair's
// sum runs over the coordinates in the same blocks, in the same order,
// whichever goroutine computes it, so the result is deterministic.
func distances(rows [][]float32) ([]float64, error) {
	n := len(rows)
	dist := make([]float64, n*n)
	var wg sync.WaitGroup
	workers := max(1, min(parallelism(), n-1))
	for w := range workers {
		wg.Go(func() {
			for lo := 0; lo < len(rows[0]); lo += blockSize {
				hi := min(len(rows[0]), lo+blockSize)
				for i := w; i < n; i += workers {
					a, k := rows[i][lo:hi], i+1
					for ; k+4 <= n; k += 4 {
						s0, s1, s2, s3 := sqdist4(a, rows[k][lo:hi], rows[k+1][lo:hi], rows[k+2][lo:hi], rows[k+3][lo:hi])
						dist[i*n+k] += s0
						dist[i*n+k+1] += s1
						dist[i*n+k+2] += s2
						dist[i*n+k+3] += s3
					}
					for ; k < n; k++ {
						dist[i*n+k] += sqdist(a, rows[k][lo:hi])
					}
				}
			}
		})
	}
	wg.Wait()
	for i := range n {
		for k := i + 1; k < n; k++ {
			v := dist[i*n+k]
			if math.IsNaN(v) || math.IsInf(v, 0) {
				return nil, nonFinite(rows)
			}
			dist[k*n+i] = v
		}
	}
	return dist, nil
}

// sqdist is the squared distance between a and b in float64, in four
// running sums to keep the floating-point units busy.
func sqdist(a, b []float32) float64 {
	b = b[:len(a)]
	var s0, s1, s2, s3 float64
	i := 0
	for ; i+4 <= len(a); i += 4 {
		d0 := float64(a[i]) - float64(b[i])
		d1 := float64(a[i+1]) - float64(b[i+1])
		d2 := float64(a[i+2]) - float64(b[i+2])
		d3 := float64(a[i+3]) - float64(b[i+3])
		s0 += d0 * d0
		s1 += d1 * d1
		s2 += d2 * d2
		s3 += d3 * d3
	}
	for ; i < len(a); i++ {
		d := float64(a[i]) - float64(b[i])
		s0 += d * d
	}
	return (s0 + s1) + (s2 + s3)
}

// sqdist4 is sqdist of a to each of b0..b3, reading a once for the four.
func sqdist4(a, b0, b1, b2, b3 []float32) (s0, s1, s2, s3 float64) {
	b0, b1, b2, b3 = b0[:len(a)], b1[:len(a)], b2[:len(a)], b3[:len(a)]
	for i, x := range a {
		v := float64(x)
		d0 := v - float64(b0[i])
		d1 := v - float64(b1[i])
		d2 := v - float64(b2[i])
		d3 := v - float64(b3[i])
		s0 += d0 * d0
		s1 += d1 * d1
		s2 += d2 * d2
		s3 += d3 * d3
	}
	return s0, s1, s2, s3
}

// meanOf writes the mean of the rows sel (in that order) into out.
func meanOf(rows [][]float32, sel []int, out []float64) error {
	chosen := make([][]float32, len(sel))
	for i, k := range sel {
		chosen[i] = rows[k]
	}
	return Mean{}.Aggregate(chosen, out)
}

func validateF(name string, f int) error {
	if f < 0 {
		return fmt.Errorf("robust: %s: F = %d must be at least 0 (the Byzantine clients tolerated)", name, f)
	}
	return nil
}
