package mech

import (
	"fmt"
	"math"
	"math/bits"
)

func init() {
	Register(Info{
		Name:    "coq",
		Summary: "CoQ-FL (LDP-FedCR): pairs share a codebook index drawn with biased coins p_x; each message alone exactly ldpq (as corbin: docs/privacy.md)",
		LDP:     true,
		New:     newCoQ,
	})
}

// coq is CoQ-FL's correlated quantizer (LDP-FedCR, Algorithms 1-3): a pair
// shares one index s of a codebook of 2^d words per parameter, word s having
// probability px^popcount(s) (1-px)^(d-popcount(s)) in index order. The
// cells of the codebook tile [0, 2^64); a client draws a private word
// uniformly inside the shared cell, V = start(s) + u*width(s)/2^64, and the
// coupling is then corbin's: the leader sends +1 iff V < T(w1), the follower
// iff its complemented word is below T(w2). Algorithm 2 as printed tests the
// wrong cell for the tie (IntCR == idx with ProbList[idx] <= P, which is
// off by one for a cumulative list); this follows its stated intent.
//
// The codebook probabilities are the widths of integer cells: K-bit
// boundaries round(2^K F(s)), K = d for px = 1/2 (then coq is corbin, bit for
// bit) and K = 32 otherwise, so each pair uses exactly K shared bits per
// parameter. Each client's marginal is P(+1|w) = (T(w)+delta)/2^64 with
// 0 <= delta <= 1 (the private part within a cell is uniform up to one
// word), so coq is eps-LDP (binq's margin covers delta) and unbiased within
// 2^-63*out.
type coq struct {
	oneBit
	d, k  uint
	start []uint64 // start[s] of each cell, in words of 2^64
	width []uint64 // width[s] of each cell
	kb    []uint64 // K-bit boundaries: cell s holds shared K-bit draws in [kb[s], kb[s+1])
	// first[t] is the cell of the least draw whose top bits are t, where
	// the search for a draw starts; shift drops the other bits.
	first []uint16
	shift uint
}

func newCoQ(c Config) (Mechanism, error) {
	if err := c.ValidateEpsilon(); err != nil {
		return nil, err
	}
	if c.SharedBits < 1 || c.SharedBits > 16 {
		return nil, fmt.Errorf("mech: coq shared bits %d must be in 1..16 (the codebook has 2^d words)", c.SharedBits)
	}
	if !(c.Px > 0 && c.Px < 1) {
		return nil, fmt.Errorf("mech: coq px %v must be in (0, 1)", c.Px)
	}
	d := uint(c.SharedBits)
	k := d
	if c.Px != 0.5 {
		k = 32
	}
	size := 1 << d
	kb := make([]uint64, size+1)
	cum := 0.0
	for s := range size {
		ones := bits.OnesCount(uint(s))
		kb[s] = uint64(math.Round(cum * math.Ldexp(1, int(k))))
		cum += math.Pow(c.Px, float64(ones)) * math.Pow(1-c.Px, float64(int(d)-ones))
	}
	kb[size] = 1 << k
	m := &coq{oneBit: oneBit{eps: c.Epsilon}, d: d, k: k, kb: kb, start: make([]uint64, size), width: make([]uint64, size)}
	for s := range size {
		w := kb[s+1] - kb[s]
		if kb[s+1] < kb[s] || w == 1<<k {
			return nil, fmt.Errorf("mech: coq px %v is too extreme for %d shared bits", c.Px, d)
		}
		m.start[s], m.width[s] = kb[s]<<(64-k), w<<(64-k)
	}
	m.shift = k - min(k, 12)
	m.first = make([]uint16, 1<<(k-m.shift))
	cell := 0
	for t := range m.first {
		for kb[cell+1] <= uint64(t)<<m.shift {
			cell++
		}
		m.first[t] = uint16(cell)
	}
	return m, nil
}

func (m *coq) Name() string       { return "coq" }
func (m *coq) Coupling() Coupling { return Paired }
func (m *coq) Alone() float64     { return 0 }

// SharedBits is the number of shared bits a pair uses for n parameters.
func (m *coq) SharedBits(n int) int { return int(m.k) * n }

// findShared returns the cell of a K-bit shared draw: a table lookup on its
// top bits, then a step or two.
func (m *coq) findShared(x uint64) int {
	c := int(m.first[x>>m.shift])
	for m.kb[c+1] <= x {
		c++
	}
	return c
}

func (m *coq) find(x uint64) int { return m.findShared(x >> (64 - m.k)) }

func (m *coq) cell(s int) (start, width uint64) { return m.start[s], m.width[s] }

func (m *coq) Encode(dst []byte, w []float32, rg Range, s Slot) ([]byte, error) {
	b, err := newBinq(m.eps, rg)
	if err != nil {
		return dst, err
	}
	if err := checkInput(w); err != nil {
		return dst, err
	}
	if s.Private == nil {
		return dst, errNoPrivate("coq")
	}
	if err := checkPartner("coq", s); err != nil || s.Role == Alone {
		return b.encode(dst, w, s.Private.Fill), err
	}
	var flip uint64
	if s.Role == Follower {
		flip = ^uint64(0)
	}
	var z [chunk]uint32
	fill := func(v []uint64) {
		s.Private.Fill(v)
		sharedFields(s.Shared, z[:len(v)], m.k)
		for i := range v {
			c := m.findShared(uint64(z[i]))
			hi, _ := bits.Mul64(v[i], m.width[c])
			v[i] = (m.start[c] + hi) ^ flip
		}
	}
	return b.encode(dst, w, fill), nil
}

func (m *coq) PairVariance(w1, w2 float64, rg Range) float64 {
	b, err := newBinq(m.eps, rg)
	if err != nil {
		return math.NaN()
	}
	return pairVariance(&b, m.cells(), w1, w2)
}

func (m *coq) cells() cells { return m }
