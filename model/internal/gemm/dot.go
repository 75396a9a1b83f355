package gemm

import "sync"

// MulDot is MulParallel(threads, c, ldc, a, b, 1, 0) for products whose C
// is small and whose inner dimension is long, such as a convolution's
// weight gradient (output gradient x patches^T): where A's rows are evenly
// spaced and k splits into runs along which both A's columns and B's rows
// are contiguous, every element of C is a dot product computed over those
// runs 16 lanes at a time, reading A and B in place (no packing), and the
// lanes are added up at the end in a fixed order. Elsewhere (other
// layouts, no AVX-512) it is MulParallel.
//
// The result depends on the layouts only, not on threads, so it is
// bit-identical for any thread count (but not to Mul's: the lanes
// reassociate the sum).
func MulDot(threads int, c []float32, ldc int, a, b Mat) {
	m, k, n := check(c, ldc, a, b)
	if m == 0 || n == 0 {
		return
	}
	if k == 0 {
		scale(c, ldc, m, n, 0)
		return
	}
	sa, ok := affine(a.Row)
	if !haveDot || !ok || sa < 0 {
		MulParallel(threads, c, ldc, a, b, 1, 0)
		return
	}
	rp := getInts()
	defer putInts(rp)
	runs, ok := findDotRuns((*rp)[:0], a, b, m, sa)
	*rp = runs
	if !ok || len(runs)/3*8 > k { // runs under 8 long on average: pack instead
		MulParallel(threads, c, ldc, a, b, 1, 0)
		return
	}
	// Runs that are all multiples of 8 long (an output row of 8, 16 or
	// 24) go by pairs of 8-float blocks, which fill every lane.
	var single [3]int
	var pairs []int
	pp := getInts()
	*pp = (*pp)[:0]
	defer putInts(pp)
	if b8 := blocks8(runs); b8 {
		var lo [2]int
		half := false
		for r := 0; r < len(runs); r += 3 {
			for t := 0; t < runs[r+2]; t += 8 {
				if !half {
					lo, half = [2]int{runs[r] + t, runs[r+1] + t}, true
					continue
				}
				*pp = append(*pp, lo[0], lo[1], runs[r]+t, runs[r+1]+t)
				half = false
			}
		}
		if half {
			single = [3]int{1, lo[0], lo[1]}
		}
		pairs = *pp
		if len(pairs) == 0 && !half {
			pairs = nil
		}
	}
	usePairs := pairs != nil || single[0] != 0
	tiles := (n + 3) / 4
	if w := m * n * k; threads > w/parallelMinWork {
		threads = w / parallelMinWork
	}
	threads = max(1, min(threads, tiles))
	d := dotJob{c: c, ldc: ldc, a: a, b: b, m: m, n: n, sa: sa, tiles: tiles, threads: threads,
		runs: runs, pairs: pairs, single: single, usePairs: usePairs}
	if threads <= 1 {
		d.part(0)
		return
	}
	var wg sync.WaitGroup
	for t := 1; t < threads; t++ {
		dt := d // a copy, so that d itself stays on the stack
		wg.Go(func() { dt.part(t) })
	}
	d.part(0)
	wg.Wait()
}

// blocks8 reports whether every run is a multiple of 8 long.
func blocks8(runs []int) bool {
	for r := 2; r < len(runs); r += 3 {
		if runs[r]%8 != 0 {
			return false
		}
	}
	return true
}

// intBufs keeps MulDot's run lists between calls. Unlike a sync.Pool it is
// not emptied by the garbage collector, so that a training step's calls
// allocate nothing once the lists have grown.
var intBufs = make(chan *[]int, 16)

func getInts() *[]int {
	select {
	case p := <-intBufs:
		return p
	default:
		return new([]int)
	}
}

func putInts(p *[]int) {
	select {
	case intBufs <- p:
	default:
	}
}

// laneSum adds up 16 lanes pairwise, in a fixed order.
func laneSum(v []float32) float32 {
	v = v[:16]
	var s8 [8]float32
	for l := range s8 {
		s8[l] = v[l] + v[l+8]
	}
	s4 := [4]float32{s8[0] + s8[4], s8[1] + s8[5], s8[2] + s8[6], s8[3] + s8[7]}
	return (s4[0] + s4[2]) + (s4[1] + s4[3])
}

// findDotRuns appends to runs the triples (a0, b0, len) of the maximal runs
// of k along which A.Col and B.Row both step by 1, a0 being relative to
// A.Row[0] and b0 absolute. It reports false if some read of the m rows
// (A at stride sa) or of B's columns would fall outside the data.
func findDotRuns(runs []int, a, b Mat, m, sa int) ([]int, bool) {
	ac, br := a.Col, b.Row[:len(a.Col)]
	alo, ahi, blo, bhi := ac[0], ac[0], br[0], br[0]
	for p := 0; p < len(ac); {
		e := p + 1
		for e < len(ac) && ac[e] == ac[e-1]+1 && br[e] == br[e-1]+1 {
			e++
		}
		runs = append(runs, ac[p], br[p], e-p)
		alo, ahi = min(alo, ac[p]), max(ahi, ac[e-1])
		blo, bhi = min(blo, br[p]), max(bhi, br[e-1])
		p = e
	}
	clo, chi := b.Col[0], b.Col[0]
	for _, o := range b.Col {
		clo, chi = min(clo, o), max(chi, o)
	}
	r0 := a.Row[0]
	// Every row read starts in [a.Row[0], a.Row[0]+(m-1)*sa].
	top := r0 + (m-1)*sa
	ok := r0+alo >= 0 && top+ahi < len(a.Data) && blo+clo >= 0 && bhi+chi < len(b.Data)
	return runs, ok
}

// dotJob is one MulDot call, split by column tiles among threads.
type dotJob struct {
	c              []float32
	ldc            int
	a, b           Mat
	m, n, sa       int
	tiles, threads int
	runs, pairs    []int
	single         [3]int
	usePairs       bool
}

// part computes the t-th share of the column tiles.
func (d *dotJob) part(t int) {
	c, ldc, a, b, m, n, sa := d.c, d.ldc, d.a, d.b, d.m, d.n, d.sa
	tiles, threads, runs, pairs, usePairs := d.tiles, d.threads, d.runs, d.pairs, d.usePairs
	single := d.single
	var acc [24 * 16]float32
	j0, j1 := chunk(tiles, threads, t, 4, n)
	for j := j0; j < j1; j += 4 {
		var bo [4]int
		for q := range bo {
			bo[q] = b.Col[min(j+q, n-1)] // past n: a copy of the last column
		}
		step := 6
		if m < 6 {
			step = 1 // one row at a time, all six rows of the tile the same
		}
		for i := 0; i < m; i += step {
			rows, i0, tsa := 1, i, 0
			if m >= 6 {
				// The last tile overlaps the one before: its rows get
				// the same sums again.
				rows, i0, tsa = 6, min(i, m-6), sa
			}
			if usePairs {
				dotPairs(a.Data[a.Row[i0]:], b.Data, tsa, &bo, pairs, &single, &acc)
			} else {
				dotTile(a.Data[a.Row[i0]:], b.Data, tsa, &bo, runs, &acc)
			}
			for r := range rows {
				for q := range min(4, n-j) {
					c[(i0+r)*ldc+j+q] = laneSum(acc[(r*4+q)*16 : (r*4+q)*16+16])
				}
			}
		}
	}
}
