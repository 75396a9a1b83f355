package mech

import (
	"fmt"
	"math"

	"github.com/fedpq/fedpq/corr"
	"github.com/fedpq/fedpq/mech/lattice"
	"github.com/fedpq/fedpq/wire"
)

func init() {
	Register(Info{
		Name:    "sdq",
		Summary: "subtractive dithered lattice quantization (scalar or hexagonal), Rate bits per parameter, no privacy",
		New: func(c Config) (Mechanism, error) {
			rate, dim, err := latticeConfig(c, "sdq")
			if err != nil {
				return nil, err
			}
			return newSDQ(rate, dim)
		},
	})
}

// latticeConfig reads and checks Rate and Lattice, the settings of the
// sdq family. A scalar field is Rate bits, a hexagonal one 2*Rate bits, and
// wire fields hold at most 32 bits; a hexagonal codebook needs at least 7
// points (a lattice point and its six neighbours), so Rate >= 2 there.
func latticeConfig(c Config, name string) (rate, dim int, err error) {
	switch c.Lattice {
	case 1:
		if c.Rate < 1 || c.Rate > 32 {
			return 0, 0, fmt.Errorf("mech: %s: rate %d bits per parameter must be in 1..32 for the scalar lattice", name, c.Rate)
		}
	case 2:
		if c.Rate < 2 || c.Rate > 16 {
			return 0, 0, fmt.Errorf("mech: %s: rate %d bits per parameter must be in 2..16 for the hexagonal lattice", name, c.Rate)
		}
	default:
		return 0, 0, fmt.Errorf("mech: %s: lattice dimension %d must be 1 (scalar) or 2 (hexagonal)", name, c.Lattice)
	}
	return c.Rate, c.Lattice, nil
}

// sdq is subtractive dithered quantization without privacy.
//
// Every parameter is clipped to the public range (c, r) and normalized to
// u = (w - c)/r in [-1, 1]. The client draws a dither d uniform on the
// basic cell of the lattice from the stream it shares with the server
// (Slot.Shared), sends the codebook index of Q(u + d), the lattice point
// nearest u + d, and the server outputs c + r (Q(u + d) - d) after drawing
// the same d.
//
// The codebook depends only on the public range and the rate, so nothing
// about the data is sent besides the indices, and it holds every point
// that Q(u + d) can be, so the quantizer is never overloaded:
//
//   - L = 1: the 2^Rate points -1 + k*Delta, k = 0..2^Rate-1, with
//     Delta = 2/(2^Rate - 1): the ends of the range are lattice points, and
//     u + d lies within Delta/2 of [-1, 1], so its nearest point is one of
//     them. One index of Rate bits per parameter.
//   - L = 2: parameters are taken in pairs (w[2i], w[2i+1]) (an odd last
//     parameter is paired with the center, and its partner dropped by the
//     server), the lattice is the hexagonal lattice with minimum distance
//     Delta centered at (0, 0), and the codebook is every lattice point
//     within the square [-1, 1]^2 plus twice the hexagonal cell
//     (lattice.HexCover): exactly the points Q(u + d) can be. Delta is the
//     smallest step whose codebook has at most 4^Rate points
//     (lattice.HexCoverStep). One index of 2*Rate bits per pair.
//
// Output distribution: y = w + r*e with e uniform on the basic cell and
// independent of w (the theorem of Zamir and Feder, which holds because
// nothing is overloaded). So y is unbiased, with per-coordinate variance
// r^2 Delta^2/12 (L = 1) or r^2 * 5 Delta^2/72 (L = 2), the cells' second
// moments, whatever w is. No privacy: the server learns u to within a cell.
type sdq struct {
	rate, dim int
	scalar    lattice.Scalar   // L = 1, in normalized units
	hex       lattice.Hex      // L = 2, in normalized units
	code      *lattice.HexCode // L = 2 codebook
	hexf      hexFields        // L = 2: the codebook's points as integer fields
}

func newSDQ(rate, dim int) (*sdq, error) {
	m := &sdq{rate: rate, dim: dim}
	if dim == 1 {
		m.scalar = lattice.Scalar{Step: 2 / (float64(uint64(1)<<rate) - 1)}
		return m, nil
	}
	step, err := lattice.HexCoverStep(1, 1<<(2*rate))
	if err != nil {
		return nil, fmt.Errorf("mech: sdq: %w", err)
	}
	m.hex = lattice.Hex{Step: step}
	if m.code, err = lattice.HexCover(step, 1); err != nil {
		return nil, fmt.Errorf("mech: sdq: %w", err)
	}
	m.hexf = newHexFields(m.code)
	return m, nil
}

func (m *sdq) Name() string       { return "sdq" }
func (m *sdq) Coupling() Coupling { return Dithered }
func (m *sdq) Alone() float64     { return 0 }

// Bits is the payload's size: one field of Rate bits per parameter (L = 1)
// or 2*Rate bits per pair (L = 2), zero-padded to whole bytes.
func (m *sdq) Bits(n int) int { return 8 * wire.PackedLen(latticeFields(n, m.dim), m.rate*m.dim) }

// Variance is the per-parameter variance of the server's output, the
// second moment of the cell in value units; it does not depend on w.
func (m *sdq) Variance(_ float64, rg Range) float64 {
	if m.dim == 1 {
		return rg.Radius * rg.Radius * m.scalar.SecondMoment()
	}
	return rg.Radius * rg.Radius * m.hex.SecondMoment()
}

func (m *sdq) Encode(dst []byte, w []float32, rg Range, s Slot) ([]byte, error) {
	if err := checkDithered(w, rg, s); err != nil {
		return dst, err
	}
	return m.encode(dst, len(w), func(i int) float64 { return normalize(w[i], rg) }, s.Shared)
}

// encode appends the SDQ indices of the n normalized values u(0..n-1),
// each in [-1, 1], drawing the dither from shared.
func (m *sdq) encode(dst []byte, n int, u func(int) float64, shared corr.Source) ([]byte, error) {
	p := wire.NewPacker(dst, m.rate*m.dim)
	d := newWordReader(shared, m.dim*latticeFields(n, m.dim))
	if m.dim == 1 {
		top := int64(1)<<m.rate - 1
		for i := range n {
			k := m.scalar.Nearest(u(i) + 1 + m.scalar.Dither(d.next()))
			p.Put(uint32(min(max(k, 0), top))) // the clamp only acts on ties at the ends
		}
		return p.Bytes(), nil
	}
	for i := 0; i < n; i += 2 {
		u1, u2 := u(i), 0.0
		if i+1 < n {
			u2 = u(i + 1)
		}
		dx, dy := m.hex.Dither(d.next(), d.next())
		a, b := m.hex.Nearest(u1+dx, u2+dy)
		idx, ok := m.code.Index(a, b)
		if !ok {
			return dst, fmt.Errorf("mech: sdq: internal error: point (%d, %d) outside the codebook", a, b)
		}
		p.Put(uint32(idx))
	}
	return p.Bytes(), nil
}

func (m *sdq) NewSum(n int, rg Range) (Sum, error) { return newLatticeSum(n, rg, m) }

// Fields is one index per parameter (L = 1), or the two lattice
// coordinates of each pair's point (L = 2), in which the point is linear
// where its codebook index is not.
func (m *sdq) Fields(n int) int    { return m.dim * latticeFields(n, m.dim) }
func (m *sdq) ditherLen(n int) int { return m.Fields(n) }

// Levels is 2^Rate (L = 1), or the span of the codebook's coordinates.
func (m *sdq) Levels() uint64 {
	if m.dim == 1 {
		return uint64(1) << m.rate
	}
	return m.hexf.levels
}

func (m *sdq) Unpack(dst []uint64, payload []byte, n int) error {
	if err := checkFieldBuf(m, dst, n); err != nil {
		return err
	}
	if m.dim == 1 {
		return unpackCodes(payload, n, m.rate, uint64(1)<<m.rate, func(i int, f uint32) { dst[i] = uint64(f) })
	}
	return m.hexf.unpack(dst, payload, n, 2*m.rate)
}

func (m *sdq) addDither(dsum []float64, src corr.Source) {
	if m.dim == 1 {
		addScalarDither(dsum, m.scalar, src)
		return
	}
	addHexDither(dsum, m.hex, src)
}

// decode is c + r(mean point - mean dither): for L = 1 the point of
// index k is -1 + k Delta, so count clients' points sum to
// Delta*(sum k) - count.
func (m *sdq) decode(dst []float64, sum []uint64, dsum []float64, count int, rg Range) {
	if m.dim == 2 {
		m.hexf.decode(dst, sum, dsum, count, rg, m.hex)
		return
	}
	inv := 1 / float64(count)
	for i := range dst {
		dst[i] = rg.Center + rg.Radius*((m.scalar.Point(int64(sum[i]))-dsum[i])*inv-1)
	}
}

func (m *sdq) DecodeSum(dst []float64, sum []uint64, count int, rg Range, slots []Slot) error {
	return decodeLatticeSum(m, dst, sum, count, rg, slots)
}

// latticeFields is the number of fields of n parameters: one per
// parameter, or one per pair.
func latticeFields(n, dim int) int { return (n + dim - 1) / dim }

// normalize clips v to the range and maps it to [-1, 1]. The clamp acts
// when the radius is below an ulp of the center: c ± r then rounds to a
// neighbour of c, more than r away, and an unclamped u outside [-1, 1]
// would reach lattice points the privacy analysis does not cover.
func normalize(v float32, rg Range) float64 {
	return min(max((rg.Clip(float64(v))-rg.Center)/rg.Radius, -1), 1)
}

// checkDithered is the common validation of a Dithered Encode.
func checkDithered(w []float32, rg Range, s Slot) error {
	if err := rg.Validate(); err != nil {
		return err
	}
	if s.Shared == nil {
		return fmt.Errorf("mech: a dithered mechanism needs the dither stream it shares with the server (Slot.Shared is nil)")
	}
	return checkInput(w)
}

// wordReader hands out exactly total words of a source, fetched in chunks
// with Fill, so that a client and the server consume a shared stream
// identically (and no more than the tensor needs, leaving the rest to the
// next tensor).
type wordReader struct {
	src  corr.Source
	left int
	buf  [256]uint64
	pos  int
	have int
}

func newWordReader(src corr.Source, total int) *wordReader {
	return &wordReader{src: src, left: total}
}

func (r *wordReader) next() uint64 {
	if r.pos == r.have {
		r.have = min(r.left, len(r.buf))
		r.left -= r.have
		r.src.Fill(r.buf[:r.have])
		r.pos = 0
	}
	v := r.buf[r.pos]
	r.pos++
	return v
}

// hexReach is the largest coordinate, in absolute value, of a point of
// code minus a dither: the points' largest coordinate plus the hexagonal
// cell's circumradius Step/sqrt3.
func hexReach(code *lattice.HexCode, hex lattice.Hex) float64 {
	h := 0.0
	code.Rows(func(j, lo, hi int64) {
		for _, i := range []int64{lo, hi} {
			x, y := hex.Point(i, j)
			h = max(h, math.Abs(x), math.Abs(y))
		}
	})
	return h + hex.Step/math.Sqrt(3)
}

// Support is r times the reach of the decoder in normalized units:
// 1 + Delta/2 for L = 1 (the points span [-1, 1]), hexReach for L = 2.
// The codebook is finite, so this bounds every output by construction.
func (m *sdq) Support(rg Range) (float64, error) {
	if err := rg.Validate(); err != nil {
		return 0, err
	}
	if m.dim == 1 {
		return rg.Radius * (1 + m.scalar.Step/2), nil
	}
	return rg.Radius * hexReach(m.code, m.hex), nil
}
