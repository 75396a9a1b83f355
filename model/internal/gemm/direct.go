package gemm

import "sync"

// MulDirect is MulParallel(threads, c, ldc, a, b, 1, 0), with the same
// bits, for a convolution's forward product with few output channels: where
// A's rows are evenly spaced and its columns contiguous, k fits one k block,
// and B's columns come in groups of 8 contiguous offsets (output rows of 8,
// 16, 24), it reads B in place, 16 columns to a vector from two such
// groups, instead of packing it. Elsewhere it is MulParallel.
func MulDirect(threads int, c []float32, ldc int, a, b Mat) {
	m, k, n := check(c, ldc, a, b)
	sa, rowsOK := affine(a.Row)
	if !haveConv || m < 6 || k == 0 || k > current().kcMax || n%8 != 0 || !rowsOK || sa < 0 ||
		!contiguous(a.Col) || current() != runnable[0] {
		MulParallel(threads, c, ldc, a, b, 1, 0)
		return
	}
	// B's column groups must be contiguous, and every read in range.
	clo, chi := b.Col[0], b.Col[0]
	for j := 0; j < n; j += 8 {
		g := b.Col[j : j+8 : j+8]
		for q := 1; q < 8; q++ {
			if g[q] != g[0]+q {
				MulParallel(threads, c, ldc, a, b, 1, 0)
				return
			}
		}
		clo, chi = min(clo, g[0]), max(chi, g[7])
	}
	rlo, rhi := b.Row[0], b.Row[0]
	for _, o := range b.Row {
		rlo, rhi = min(rlo, o), max(rhi, o)
	}
	a0 := a.Row[0] + a.Col[0]
	if rlo+clo < 0 || rhi+chi >= len(b.Data) || a0 < 0 || a0+(m-1)*sa+k-1 >= len(a.Data) {
		panic("gemm: offsets out of range")
	}
	tiles := (n/8 + 7) / 8
	if w := m * n * k; threads > w/parallelMinWork {
		threads = w / parallelMinWork
	}
	threads = max(1, min(threads, tiles))
	d := directJob{c: c, ldc: ldc, a: a, b: b, m: m, n: n, sa: sa, tiles: tiles, threads: threads}
	if threads <= 1 {
		d.part(0)
		return
	}
	var wg sync.WaitGroup
	for t := 1; t < threads; t++ {
		dt := d
		wg.Go(func() { dt.part(t) })
	}
	d.part(0)
	wg.Wait()
}

// DirectPays reports whether MulDirect reads B in place for an m x k A on
// this CPU where Mul's packing would copy B element by element (AVX2, whose
// packing has no vector copier): there a caller may pad B's rows of output
// positions to a multiple of 8, for the direct product, and drop the
// padding's columns, at less cost than packing.
func DirectPays(m, k int) bool {
	return haveConv && !haveRunCopier && m >= 6 && k > 0 && k <= current().kcMax && current() == runnable[0]
}

// directJob is one MulDirect call, split by tiles of 64 columns.
type directJob struct {
	c              []float32
	ldc            int
	a, b           Mat
	m, n, sa       int
	tiles, threads int
}

// part computes the t-th share of the tiles.
func (d *directJob) part(t int) {
	t0, t1 := chunk(d.tiles, d.threads, t, 1, d.tiles)
	nb := d.n / 8
	for tile := t0; tile < t1; tile++ {
		var bo, co [8]int
		for q := range bo {
			blk := min(tile*8+q, nb-1) // past n: the last group again
			bo[q], co[q] = d.b.Col[blk*8], blk*8
		}
		for i := 0; i < d.m; i += 6 {
			i0 := min(i, d.m-6) // the last tile overlaps: same bits again
			convPairs(d.a.Data[d.a.Row[i0]+d.a.Col[0]:], d.sa, d.b.Data, d.b.Row, &bo, d.c[i0*d.ldc:], d.ldc, &co)
		}
	}
}
