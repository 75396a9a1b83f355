package mech

import (
	"fmt"
	"math"

	"github.com/fedpq/fedpq/corr"
	"github.com/fedpq/fedpq/mech/lattice"
	"github.com/fedpq/fedpq/wire"
)

// latticeCode is the integer side of a quantizer of the sdq family: its
// fields, the dithers a client's stream gives, and the decode of the
// fields' and dithers' sums. latticeSum and DecodeSum share the decode,
// so a streaming mean and the mean of a secure sum agree bit for bit.
type latticeCode interface {
	fieldSpec
	Unpack(dst []uint64, payload []byte, n int) error
	// ditherLen is the number of dither coordinates of n parameters,
	// which is also the number of shared words they take.
	ditherLen(n int) int
	// addDither adds one client's dithers, drawn from src, to dsum.
	addDither(dsum []float64, src corr.Source)
	// decode writes the mean of count clients from the sums of their
	// fields and of their dithers.
	decode(dst []float64, sum []uint64, dsum []float64, count int, rg Range)
}

// latticeSum is the streaming sum of the sdq family: per-field integer
// sums, and per-coordinate sums of the dithers in the order of Add.
type latticeSum struct {
	code   latticeCode
	rg     Range
	n      int
	fields []uint64 // one payload's, kept apart until it is accepted
	sum    []uint64
	dsum   []float64
	count  int
}

func newLatticeSum(n int, rg Range, code latticeCode) (*latticeSum, error) {
	if n < 0 {
		return nil, fmt.Errorf("mech: negative tensor size %d", n)
	}
	if err := rg.Validate(); err != nil {
		return nil, err
	}
	f := code.Fields(n)
	return &latticeSum{code: code, rg: rg, n: n, fields: make([]uint64, f), sum: make([]uint64, f), dsum: make([]float64, code.ditherLen(n))}, nil
}

// Add validates the whole payload (length, padding, every index inside the
// codebook) before it draws any dither, so a rejected payload leaves both
// the sum and the dither stream untouched.
func (s *latticeSum) Add(payload []byte, sl Slot) error {
	if sl.Shared == nil {
		return fmt.Errorf("mech: a dithered sum needs the client's dither stream (Slot.Shared is nil)")
	}
	if err := s.code.Unpack(s.fields, payload, s.n); err != nil {
		return err
	}
	for i, f := range s.fields {
		s.sum[i] += f
	}
	s.code.addDither(s.dsum, sl.Shared)
	s.count++
	return nil
}

func (s *latticeSum) Count() int { return s.count }

func (s *latticeSum) Mean(dst []float64) error {
	if err := checkMean(dst, s.n, s.count); err != nil {
		return err
	}
	s.code.decode(dst, s.sum, s.dsum, s.count, s.rg)
	return nil
}

// decodeLatticeSum is DecodeSum for the sdq family: it sums the dithers of
// the slots in their order, as latticeSum.Add does, and decodes.
func decodeLatticeSum(code latticeCode, dst []float64, sum []uint64, count int, rg Range, slots []Slot) error {
	if err := rg.Validate(); err != nil {
		return err
	}
	if err := checkSum(code, dst, sum, count); err != nil {
		return err
	}
	if len(slots) != count {
		return fmt.Errorf("mech: %d slots for %d clients: a dithered sum needs every client's dither stream", len(slots), count)
	}
	for i, s := range slots {
		if s.Shared == nil {
			return fmt.Errorf("mech: slot %d has no dither stream (Slot.Shared is nil)", i)
		}
	}
	dsum := make([]float64, code.ditherLen(len(dst)))
	for _, s := range slots {
		code.addDither(dsum, s.Shared)
	}
	code.decode(dst, sum, dsum, count, rg)
	return nil
}

// checkFieldBuf checks Unpack's size and buffer.
func checkFieldBuf(m fieldSpec, dst []uint64, n int) error {
	if n < 0 {
		return fmt.Errorf("mech: negative tensor size %d", n)
	}
	if want := m.Fields(n); len(dst) != want {
		return fmt.Errorf("mech: field buffer has length %d, want %d for %d parameters", len(dst), want, n)
	}
	return nil
}

// unpackCodes checks that payload holds exactly fields codes of width bits,
// zero-padded, each below limit, and hands each to put.
func unpackCodes(payload []byte, fields, width int, limit uint64, put func(i int, f uint32)) error {
	u, err := wire.NewUnpacker(payload, fields, width)
	if err != nil {
		return fmt.Errorf("mech: %w", err)
	}
	for i := range fields {
		f := u.Next()
		if uint64(f) >= limit {
			return fmt.Errorf("mech: field %d is %d, outside the codebook of %d points", i, f, limit)
		}
		put(i, f)
	}
	return nil
}

// addScalarDither adds one dither per coordinate of dsum.
func addScalarDither(dsum []float64, cell lattice.Scalar, src corr.Source) {
	d := newWordReader(src, len(dsum))
	for i := range dsum {
		dsum[i] += cell.Dither(d.next())
	}
}

// addHexDither adds one two-word dither per pair of coordinates of dsum.
func addHexDither(dsum []float64, hex lattice.Hex, src corr.Source) {
	d := newWordReader(src, len(dsum))
	for i := 0; i < len(dsum); i += 2 {
		dx, dy := hex.Dither(d.next(), d.next())
		dsum[i] += dx
		dsum[i+1] += dy
	}
}

// hexFields gives the points of a hexagonal codebook as integer fields:
// their lattice coordinates (i, j) shifted to start at 0. A point is
// linear in (i, j), so the sum of count clients' fields is the sum of
// their points, where the codebook's numbering (row by row) is not.
type hexFields struct {
	code   *lattice.HexCode
	i0, j0 int64  // the codebook's smallest i and j
	levels uint64 // one more than its largest shifted coordinate
}

func newHexFields(code *lattice.HexCode) hexFields {
	i0, i1, j0, j1 := int64(math.MaxInt64), int64(math.MinInt64), int64(math.MaxInt64), int64(math.MinInt64)
	code.Rows(func(j, lo, hi int64) {
		i0, i1, j0, j1 = min(i0, lo), max(i1, hi), min(j0, j), max(j1, j)
	})
	return hexFields{code: code, i0: i0, j0: j0, levels: uint64(max(i1-i0, j1-j0)) + 1}
}

// unpack checks a payload of n parameters, one codebook index of width
// bits per pair, and writes each pair's shifted (i, j).
func (h hexFields) unpack(dst []uint64, payload []byte, n, width int) error {
	return unpackCodes(payload, latticeFields(n, 2), width, uint64(h.code.Len()), func(p int, f uint32) {
		i, j := h.code.At(int(f))
		dst[2*p], dst[2*p+1] = uint64(i-h.i0), uint64(j-h.j0)
	})
}

// decode writes c + r(mean point - mean dither) for count clients whose
// shifted coordinates sum to sum and dithers to dsum; the partner of an
// odd last parameter is dropped.
func (h hexFields) decode(dst []float64, sum []uint64, dsum []float64, count int, rg Range, hex lattice.Hex) {
	inv, cnt := 1/float64(count), int64(count)
	for p := 0; 2*p < len(dst); p++ {
		x, y := hex.Point(int64(sum[2*p])+cnt*h.i0, int64(sum[2*p+1])+cnt*h.j0)
		dst[2*p] = rg.Center + rg.Radius*((x-dsum[2*p])*inv)
		if 2*p+1 < len(dst) {
			dst[2*p+1] = rg.Center + rg.Radius*((y-dsum[2*p+1])*inv)
		}
	}
}
