// Package gemm multiplies float32 matrices for fedpq's training engine.
//
// Operands are read-only views described by offset tables (Mat), so dense,
// transposed and im2col-style (convolution patch) matrices are all read in
// place, without being materialised by the caller.
//
// The algorithm is the Goto/BLIS one: B is packed into kc x nr panels and a
// register-blocked micro-kernel computes one mr x nr tile of C at a time
// from mr rows of A. Packing is where the offset tables are read: it copies
// contiguous runs (a dense row, a row of convolution output positions) as
// vectors and transposes transposed operands in 16x16 register blocks. A is
// packed only when its offsets are not affine: a dense or transposed dense A
// is read in place by the kernel, at its strides.
//
// On amd64 the micro-kernel is assembly chosen at run time (AVX-512: 6x64,
// with masked edges and narrower loops for thin tiles; AVX2+FMA: 6x16);
// elsewhere, or with the purego build tag, it is plain Go (2x4). README.md
// has measured speeds.
//
// Results are deterministic: every element of C is one chain of
// multiply-adds over k in order (fused in the assembly kernels), split into
// k blocks that depend on k alone, and written out with the same rounding
// by every path, so MulParallel agrees with Mul bit for bit whatever the
// thread count.
package gemm

import (
	"fmt"
	"sync"
	"unsafe"
)

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
//
// As in BLAS, alpha == 0 (or an empty inner dimension) only scales C by
// beta and does not read A or B.
func Mul(c []float32, ldc int, a, b Mat, alpha, beta float32) {
	m, k, n := check(c, ldc, a, b)
	mul(c, ldc, a, b, alpha, beta, m, k, n)
}

// MulParallel is Mul split over up to threads goroutines (by blocks of C's
// columns, or rows when C is narrow); threads <= 1 is Mul.
//
// Each goroutine computes whole elements of C with the same arithmetic as
// Mul, so the result is bit-identical to Mul's for any thread count.
func MulParallel(threads int, c []float32, ldc int, a, b Mat, alpha, beta float32) {
	m, k, n := check(c, ldc, a, b)
	ker := current()
	if w := m * n * max(k, 1); threads > w/parallelMinWork {
		threads = w / parallelMinWork
	}
	// Split C's columns in whole panels when there are enough of them (each
	// goroutine then packs only its share of B), else its rows. The chunk
	// boundaries do not affect any element's value, only who computes it.
	colParts, rowParts := (n+ker.nr-1)/ker.nr, (m+ker.mr-1)/ker.mr
	byCols := colParts >= threads || colParts >= rowParts
	if byCols {
		threads = min(threads, colParts)
	} else {
		threads = min(threads, rowParts)
	}
	if threads <= 1 {
		mul(c, ldc, a, b, alpha, beta, m, k, n)
		return
	}
	part := func(t int) {
		if byCols {
			j0, j1 := chunk(colParts, threads, t, ker.nr, n)
			bt := Mat{Data: b.Data, Row: b.Row, Col: b.Col[j0:j1]}
			mul(c[j0:], ldc, a, bt, alpha, beta, m, k, j1-j0)
		} else {
			i0, i1 := chunk(rowParts, threads, t, ker.mr, m)
			at := Mat{Data: a.Data, Row: a.Row[i0:i1], Col: a.Col}
			mul(c[i0*ldc:], ldc, at, b, alpha, beta, i1-i0, k, n)
		}
	}
	var wg sync.WaitGroup
	wg.Add(threads - 1)
	for t := 1; t < threads; t++ {
		go func() {
			defer wg.Done()
			part(t)
		}()
	}
	part(0)
	wg.Wait()
}

// parallelMinWork is the least number of multiply-adds worth a goroutine
// (below about a million, starting one costs more than it saves). A
// variable so that tests can split small problems.
var parallelMinWork = 1 << 20

// chunk is the t-th of threads nearly equal ranges of parts units of size
// unit, clipped to total.
func chunk(parts, threads, t, unit, total int) (lo, hi int) {
	lo = min(parts*t/threads*unit, total)
	hi = min(parts*(t+1)/threads*unit, total)
	return lo, hi
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

// kernel describes a micro-kernel: it computes an mr x nr tile of C from mr
// rows of A and a packed B panel (k steps of nr values).
type kernel struct {
	mr, nr int
	// kcMax bounds the k block so that an A panel (mr*kc) stays in L1 and
	// the packed B block (kc*nc) in L2; mc bounds the packed A block.
	kcMax, nc, mc int
	// strided says run reads A in place at any strides (else A must be
	// packed: sa = 1, sp = mr).
	strided bool
	// edges says run writes partial tiles itself (else it is given full
	// ones only, and gemm copies partial ones out of a scratch tile).
	edges bool
	// run computes C[i*ldc+j] = alpha*tile[i][j] (+ beta*C[i*ldc+j] unless
	// beta == 0) for i < rows, j < cols, where tile = A*B over k steps, A
	// element (i, p) being a[off+i*sa+p*sp]; c must hold those elements.
	run func(k int, a []float32, off, sa, sp int, b, c []float32, ldc, rows, cols int, alpha, beta float32)
}

// checkA panics unless the rows x k strided A panel at off lies in a
// (the assembly kernels cannot check their reads).
func checkA(a []float32, off, sa, sp, rows, k int) {
	lo, hi := off, off
	for _, d := range []int{(rows - 1) * sa, (k - 1) * sp} {
		if d < 0 {
			lo += d
		} else {
			hi += d
		}
	}
	if lo < 0 || hi >= len(a) {
		panic("gemm: A panel out of range")
	}
}

// mul is Mul after the shape check.
func mul(c []float32, ldc int, a, b Mat, alpha, beta float32, m, k, n int) {
	if m == 0 || n == 0 {
		return
	}
	if k == 0 || alpha == 0 {
		scale(c, ldc, m, n, beta)
		return
	}
	ker := current()
	ws := getWorkspace(ker, k)
	gemm(ws, ker, c, ldc, a, b, alpha, beta, m, k, n)
	workspaces.Put(ws)
}

// scale sets C = beta*C (C = 0 when beta == 0, even over NaNs).
func scale(c []float32, ldc, m, n int, beta float32) {
	for i := 0; i < m; i++ {
		row := c[i*ldc : i*ldc+n]
		if beta == 0 {
			clear(row)
		} else if beta != 1 {
			for j := range row {
				row[j] *= beta
			}
		}
	}
}

// kcBlock is the k block size: k split into nearly equal blocks of at most
// kcMax. It depends on k only, so every element of C sees the same blocks
// however the rest of the problem is split.
func kcBlock(k, kcMax int) int {
	nb := (k + kcMax - 1) / kcMax
	return (k + nb - 1) / nb
}

// gemm computes C = alpha*A*B + beta*C for the m x k A and k x n B.
func gemm(ws *workspace, ker *kernel, c []float32, ldc int, a, b Mat, alpha, beta float32, m, k, n int) {
	mr, nr := ker.mr, ker.nr
	kc := kcBlock(k, ker.kcMax)
	// When A is a panel or two, each B panel is used once or twice right
	// after it is packed: pack fewer at a time, so that they are still in
	// L1 (16 KiB of them) when the kernel reads them.
	nc := ker.nc
	if m <= 2*mr {
		nc = max(nr, min(nc, 4096/kc/nr*nr))
	}
	// held is the (pc, ic) block ws.a holds packed, if any: with one k
	// block and one row block (a few rows of A, as in a convolution's
	// input gradient) every column block reuses it.
	held := [2]int{-1, -1}
	for jc := 0; jc < n; jc += nc {
		ncur := min(nc, n-jc)
		for pc := 0; pc < k; pc += kc {
			kcur := min(kc, k-pc)
			// Later k blocks accumulate onto the earlier ones.
			bet := beta
			if pc > 0 {
				bet = 1
			}
			pack(ws.b, b.Data, b.Row[pc:pc+kcur], b.Col[jc:jc+ncur], nr, ws.runs)
			// A is read in place where its offsets are affine (dense or
			// transposed dense): packing it would only transpose it.
			sp, colAffine := affine(a.Col[pc : pc+kcur])
			for ic := 0; ic < m; ic += ker.mc {
				mcur := min(ker.mc, m-ic)
				sa, rowAffine := affine(a.Row[ic : ic+mcur])
				inPlace := ker.strided && colAffine && rowAffine
				if !inPlace && held != [2]int{pc, ic} {
					pack(ws.a, a.Data, a.Col[pc:pc+kcur], a.Row[ic:ic+mcur], mr, ws.runs)
					held = [2]int{pc, ic}
				}
				// The A panel (mr*kcur) stays in L1 while the B block streams
				// from L2 past it.
				for ir := 0; ir < mcur; ir += mr {
					rows := min(mr, mcur-ir)
					ad, aoff, asa, asp := ws.a, ir*kcur, 1, mr
					if inPlace {
						if rows == mr {
							ad, aoff, asa, asp = a.Data, a.Row[ic+ir]+a.Col[pc], sa, sp
						} else {
							// The kernel reads mr rows: pack the last few.
							pack(ws.a, a.Data, a.Col[pc:pc+kcur], a.Row[ic+ir:ic+mcur], mr, ws.runs)
							aoff, held = 0, [2]int{-1, -1}
						}
					}
					for jr := 0; jr < ncur; jr += nr {
						bp := ws.b[jr*kcur : (jr+nr)*kcur]
						cols := min(nr, ncur-jr)
						off := (ic+ir)*ldc + jc + jr
						if ker.edges || rows == mr && cols == nr {
							ker.run(kcur, ad, aoff, asa, asp, bp, c[off:], ldc, rows, cols, alpha, bet)
						} else {
							ker.run(kcur, ad, aoff, asa, asp, bp, ws.tile, nr, mr, nr, 1, 0)
							writeTile(c[off:], ldc, ws.tile, nr, rows, cols, alpha, bet)
						}
					}
				}
			}
		}
	}
}

// affine reports whether offs[i] == offs[0]+i*step for all i, and step.
func affine(offs []int) (step int, ok bool) {
	if len(offs) < 2 {
		return 0, true
	}
	o0, step := offs[0], offs[1]-offs[0]
	for i, o := range offs {
		if o != o0+i*step {
			return 0, false
		}
	}
	return step, true
}

// writeTile stores C = alpha*tile + beta*C for a rows x cols tile. It
// rounds exactly as the assembly kernels' own write-out does (alpha*t and
// beta*c each rounded, then added), so that every tile gives the same bits
// whichever way it is written.
func writeTile(c []float32, ldc int, tile []float32, ldt, rows, cols int, alpha, beta float32) {
	for i := 0; i < rows; i++ {
		ci := c[i*ldc : i*ldc+cols]
		ti := tile[i*ldt : i*ldt+cols]
		for j, t := range ti {
			v := float32(alpha * t)
			if beta != 0 {
				v += float32(beta * ci[j])
			}
			ci[j] = v
		}
	}
}

// pack writes the panels of the matrix element(p, j) = data[ks[p]+js[j]]
// (p < len(ks), j < len(js)) into dst: panel q holds columns q*w..q*w+w-1,
// as len(ks) steps of w values. For B, ks is B's Row (the k range) and js
// its Col; for A, ks is A's Col and js its Row. The padding of a partial
// panel is left as it was: the kernels compute junk there and never store
// it. runs is scratch space for 3*w ints.
func pack(dst, data []float32, ks, js []int, w int, runs []int) {
	kc := len(ks)
	kContig := contiguous(ks)
	klo, khi := ks[0], ks[0]
	for _, kp := range ks {
		klo, khi = min(klo, kp), max(khi, kp)
	}
	for j0 := 0; j0 < len(js); j0 += w {
		panel := dst[j0*kc : (j0+w)*kc]
		packPanel(panel, data, ks, js[j0:min(j0+w, len(js))], w, kContig, klo, khi, runs)
	}
}

// contiguous reports whether offs[i] == offs[0]+i for all i.
func contiguous(offs []int) bool {
	if len(offs) == 0 {
		return true
	}
	o0 := offs[0]
	for i, o := range offs {
		if o != o0+i {
			return false
		}
	}
	return true
}

// packPanel is one panel of pack: dst[p*w+j] = data[ks[p]+js[j]]. kContig
// says ks is contiguous, and klo and khi are its least and greatest.
func packPanel(dst, data []float32, ks, js []int, w int, kContig bool, klo, khi int, runs []int) {
	// Split js into runs of contiguous offsets: one for dense B, a row of
	// output positions each for an im2col panel.
	nj := len(js)
	nr, lo, hi := findRuns(js, runs)
	switch {
	case haveRunCopier && nj >= 2*nr:
		// The assembly reads data[ks[p]+lo .. ks[p]+hi]: check that here.
		if klo+lo < 0 || khi+hi >= len(data) || len(dst) < (len(ks)-1)*w+nj {
			panic("gemm: offsets out of range")
		}
		// The copier takes one run down all rows, so give it rows by the
		// 8 KiB (stride w) that stay in L1 until the next run fills them
		// in.
		step := max(1, 2048/w)
		for p := 0; p < len(ks); p += step {
			copyRuns(&dst[p*w], &data[0], &ks[p], min(step, len(ks)-p), w, &runs[0], nr)
		}
	case nr == 1:
		// Rows of the panel are contiguous in data (dense B, transposed
		// dense A): copy them.
		j0 := js[0]
		for p, kp := range ks {
			copy(dst[p*w:p*w+nj], data[kp+j0:kp+j0+nj])
		}
	case kContig:
		// Columns of the panel are contiguous (dense A, transposed dense
		// B): read each one sequentially, writing with stride w.
		k0, kc := ks[0], len(ks)
		if w%16 == 0 && transpose16(dst, data, k0, js[:min(16, nj)], kc, w) {
			for j0 := 16; j0 < nj; j0 += 16 {
				transpose16(dst[j0:], data, k0, js[j0:min(j0+16, nj)], kc, w)
			}
			return
		}
		for j, o := range js {
			src := data[k0+o : k0+o+kc]
			d := dst[j:]
			for p, v := range src {
				d[p*w] = v
			}
		}
	default:
		for p, kp := range ks {
			d := dst[p*w : p*w+nj]
			for j, o := range js {
				d[j] = data[kp+o]
			}
		}
	}
}

// findRunsGo is the portable findRuns.
func findRunsGo(js []int, runs []int) (nr, lo, hi int) {
	lo, hi = js[0], js[0]
	for j := 0; j < len(js); {
		e := j + 1
		for e < len(js) && js[e] == js[e-1]+1 {
			e++
		}
		runs[3*nr], runs[3*nr+1], runs[3*nr+2] = j, js[j], e-j
		nr++
		lo, hi = min(lo, js[j]), max(hi, js[e-1])
		j = e
	}
	return nr, lo, hi
}

// workspace holds one call's packing buffers.
type workspace struct {
	a, b, tile []float32
	runs       []int
	// The slices above are carved out of buf at 64-byte alignment, so that
	// the kernels' vector loads never split cache lines.
	buf []float32
}

var workspaces sync.Pool

// getWorkspace returns buffers big enough for ker and a k of at most k
// (only the block size kcBlock(k) matters). Buffers are reused across calls
// through a sync.Pool; the caller puts it back.
func getWorkspace(ker *kernel, k int) *workspace {
	kc := kcBlock(k, ker.kcMax)
	na := (ker.mc + ker.mr - 1) / ker.mr * ker.mr * kc
	nb := (ker.nc + ker.nr - 1) / ker.nr * ker.nr * kc
	nt := ker.mr * ker.nr
	const align = 16 // floats per 64 bytes
	up := func(x int) int { return (x + align - 1) / align * align }
	need := up(na) + up(nb) + up(nt) + align
	ws, _ := workspaces.Get().(*workspace)
	if ws == nil {
		ws = new(workspace)
	}
	if cap(ws.buf) < need {
		ws.buf = make([]float32, need)
	}
	buf := ws.buf[:need]
	skip := int(uintptr(unsafe.Pointer(&buf[0]))/4) % align
	buf = buf[(align-skip)%align:]
	ws.a, buf = buf[:na], buf[up(na):]
	ws.b, buf = buf[:nb], buf[up(nb):]
	ws.tile = buf[:nt]
	if w := 3 * max(ker.mr, ker.nr); len(ws.runs) < w {
		ws.runs = make([]int, w)
	}
	return ws
}
