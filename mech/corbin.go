package mech

import (
	"fmt"
	"math"
)

func init() {
	Register(Info{
		Name:    "corbin",
		Summary: "CorBin-FL: pairs share d bits/param, antithetic one-bit quantizers; each message alone exactly ldpq (eps-LDP against one-message observers, none against the server: docs/privacy.md)",
		LDP:     true,
		New:     func(c Config) (Mechanism, error) { return newCorBin("corbin", c, 0) },
	})
	Register(Info{
		Name:    "augcorbin",
		Summary: "AugCorBin-FL: a fraction gamma of clients quantize alone (ldpq), the rest as corbin pairs",
		LDP:     true,
		New: func(c Config) (Mechanism, error) {
			if !(c.Gamma >= 0 && c.Gamma <= 1) {
				return nil, fmt.Errorf("mech: augcorbin gamma %v must be in [0, 1]", c.Gamma)
			}
			return newCorBin("augcorbin", c, c.Gamma)
		},
	})
}

// corbin is CorBin-FL's correlated quantizer (Algorithm 2, with line 14
// corrected to compare with T2). A pair shares d uniform bits Z per
// parameter; each client draws 64-d private bits u and forms the word
// V = Z*2^(64-d) + u, uniform on [0, 2^64). The leader sends +1 iff V < T(w1);
// the follower uses the complemented word 2^64-1-V', with its own u', so it
// sends +1 iff V' >= 2^64 - T(w2). Z runs the two thresholds from opposite
// ends: the antithetic coupling that makes the errors cancel.
//
// Each client's output alone has exactly the ldpq distribution
// (P(+1|w) = T(w)/2^64 for every w, the top cell included), so it is eps-LDP
// and unbiased; a client without a partner is an ldpq client. The pair's
// variance is PairVariance, derived from the coupling exactly.
type corbin struct {
	oneBit
	name  string
	d     uint
	gamma float64
}

func newCorBin(name string, c Config, gamma float64) (Mechanism, error) {
	if err := c.ValidateEpsilon(); err != nil {
		return nil, err
	}
	if c.SharedBits < 1 || c.SharedBits > 32 {
		return nil, fmt.Errorf("mech: %s shared bits %d must be in 1..32", name, c.SharedBits)
	}
	return corbin{oneBit: oneBit{eps: c.Epsilon}, name: name, d: uint(c.SharedBits), gamma: gamma}, nil
}

func (m corbin) Name() string       { return m.name }
func (m corbin) Coupling() Coupling { return Paired }
func (m corbin) Alone() float64     { return m.gamma }

// SharedBits is the number of shared bits a pair uses for n parameters.
func (m corbin) SharedBits(n int) int { return int(m.d) * n }

func (m corbin) Encode(dst []byte, w []float32, rg Range, s Slot) ([]byte, error) {
	b, err := newBinq(m.eps, rg)
	if err != nil {
		return dst, err
	}
	if s.Private == nil {
		return dst, errNoPrivate(m.name)
	}
	low := func() uint32 { return uint32(s.Private.Uint64()) }
	if err := checkPartner(m.name, s); err != nil {
		return dst, err
	}
	if s.Role == Alone {
		return b.encode32(dst, w, s.Private.Fill32, low)
	}
	// V's top 32 bits: Z, then the top 32-d private bits; complemented for
	// the follower. V's low 32 bits are private either way, drawn lazily.
	d := m.d
	var flip uint32
	if s.Role == Follower {
		flip = ^uint32(0)
	}
	var z [chunk]uint32
	fill := func(v []uint32) {
		s.Private.Fill32(v)
		sharedFields(s.Shared, z[:len(v)], d)
		for i, zi := range z[:len(v)] {
			v[i] = (zi<<(32-d) | v[i]>>d) ^ flip
		}
	}
	return b.encode32(dst, w, fill, low)
}

// checkPartner validates a paired mechanism's slot: a known role, and
// shared bits unless the client is alone.
func checkPartner(name string, s Slot) error {
	switch s.Role {
	case Alone:
		return nil
	case Leader, Follower:
		if s.Shared == nil {
			return fmt.Errorf("mech: %s: a %v needs bits shared with its partner", name, s.Role)
		}
		return nil
	}
	return fmt.Errorf("mech: %s: invalid role %d", name, s.Role)
}

func (m corbin) PairVariance(w1, w2 float64, rg Range) float64 {
	b, err := newBinq(m.eps, rg)
	if err != nil {
		return math.NaN()
	}
	return pairVariance(&b, m.cells(), w1, w2)
}

func (m corbin) cells() cells { return uniformCells{k: 64 - m.d} }

// cells partitions [0, 2^64) into the cells of a shared index: cell s holds
// the words whose shared part is s.
type cells interface {
	find(x uint64) int                // the cell holding word x
	cell(s int) (start, width uint64) // width < 2^64
}

// uniformCells are corbin's 2^d equal cells of 2^k words.
type uniformCells struct{ k uint }

func (c uniformCells) find(x uint64) int                { return int(x >> c.k) }
func (c uniformCells) cell(s int) (start, width uint64) { return uint64(s) << c.k, 1 << c.k }

// pairVariance is Var[Q1(w1) + Q2(w2)] for a leader and follower whose words
// share the cell: Var1 + Var2 + 8 out^2 (P(both +1) - p1 p2).
func pairVariance(b *binq, c cells, w1, w2 float64) float64 {
	t1, t2 := b.threshold(float32(w1)), b.threshold(float32(w2))
	p1, p2 := float64(t1)*0x1p-64, float64(t2)*0x1p-64
	cov := pairBothOne(c, t1, t2) - p1*p2
	return b.variance(w1) + b.variance(w2) + 8*b.out*b.out*cov
}

// pairBothOne is P(leader +1, follower +1): the leader's word V is below t1
// and the follower's V' (same cell, own private part) is at least 2^64-t2.
// Within a cell the private part is taken as uniform.
func pairBothOne(c cells, t1, t2 uint64) float64 {
	low := -t2 // 2^64 - t2: t2 >= lo > 0
	if t1 == 0 || low >= t1 && c.find(low) != c.find(t1-1) {
		return 0
	}
	sa, sb := c.find(t1-1), c.find(low)
	below := func(s int) float64 { // mass of cell s below t1, as a probability
		st, w := c.cell(s)
		return float64(min(t1-st, w)) * 0x1p-64
	}
	above := func(s int) float64 { // mass of cell s at or above low
		st, w := c.cell(s)
		return float64(min(st+w-low, w)) * 0x1p-64
	}
	if sa == sb {
		_, w := c.cell(sa)
		return below(sa) * above(sa) / (float64(w) * 0x1p-64)
	}
	between, _ := c.cell(sb + 1)
	startA, _ := c.cell(sa)
	return below(sa) + above(sb) + float64(startA-between)*0x1p-64
}
