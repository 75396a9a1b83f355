package mech

import (
	"fmt"
	"math"
	"os"
	"path/filepath"

	"github.com/fedpq/fedpq/mech/mvu"
	"github.com/fedpq/fedpq/wire"
)

func init() {
	Register(Info{
		Name:    "mvu",
		Summary: "MVU (Chaudhuri et al. 2022): eps-LDP unbiased BudgetBits-bit randomizer from a solved sampling matrix",
		LDP:     true,
		New:     newMVU,
	})
}

// mvuMech is the MVU mechanism. For a parameter w clipped to [c-r, c+r] and
// x = (w - c + r) / 2r in [0, 1]:
//
//  1. x is rounded without bias to level i or i+1 of t_i = i/(B_in-1),
//     B_in = 2^InputBits: up with probability floor(f 2^64)/2^64,
//     f = x(B_in-1) - i;
//  2. symbol j is drawn with probability n_ij / 2^64 from the solved integer
//     matrix (package mvu) and sent in BudgetBits bits;
//  3. the server decodes c - r + 2r a_j.
//
// Guarantee: every column of the integer matrix has max/min <= e^eps, proved
// exactly by mvu.Verify, so the symbol is eps-LDP with respect to w (the
// rounding step only mixes rows). The decoded value is unbiased for the
// clipped w up to 2r(2^-64 + mvu.MaxBias). Coins come from Slot.Private only.
type mvuMech struct {
	m    *mvu.Matrix
	bits int
}

// mvuCacheDir is the default cache of solved matrices, "" (no disk cache)
// where the system has no user cache directory.
func mvuCacheDir() string {
	d, err := os.UserCacheDir()
	if err != nil {
		return ""
	}
	return filepath.Join(d, "fedpq", "mvu")
}

func newMVU(c Config) (Mechanism, error) {
	if err := c.ValidateEpsilon(); err != nil {
		return nil, err
	}
	dir := c.CacheDir
	if dir == "" {
		dir = mvuCacheDir()
	}
	m, err := mvu.Load(dir, mvu.Params{InputBits: c.InputBits, BudgetBits: c.BudgetBits, Epsilon: c.Epsilon})
	if err != nil {
		return nil, fmt.Errorf("mech: mvu: %w", err)
	}
	return &mvuMech{m: m, bits: c.BudgetBits}, nil
}

func (*mvuMech) Name() string       { return "mvu" }
func (*mvuMech) Coupling() Coupling { return Independent }
func (*mvuMech) Alone() float64     { return 0 }
func (q *mvuMech) Bits(n int) int   { return q.bits * n }

// level maps a clipped parameter to x in [0, 1] and then to the lower level
// l, the fraction f in [0, 1) toward level l+1, and the 64-bit threshold
// below which a uniform word rounds up.
func (q *mvuMech) level(w float64, rg Range) (l int, f float64, th uint64) {
	x := (rg.Clip(w) - (rg.Center - rg.Radius)) / (2 * rg.Radius)
	y := min(max(x, 0), 1) * float64(q.m.Levels()-1)
	l = int(y)
	if l == q.m.Levels()-1 {
		return l, 0, 0
	}
	f = y - float64(l)
	return l, f, uint64(f * 0x1p64) // f < 1, so f 2^64 < 2^64
}

func (q *mvuMech) Encode(dst []byte, w []float32, rg Range, s Slot) ([]byte, error) {
	if err := rg.Validate(); err != nil {
		return dst, err
	}
	if err := checkInput(w); err != nil {
		return dst, err
	}
	if s.Private == nil {
		return dst, fmt.Errorf("mech: mvu needs the client's private coins (Slot.Private is nil)")
	}
	p := wire.NewPacker(dst, q.bits)
	var coins [512]uint64 // two words per parameter: rounding, then sampling
	for len(w) > 0 {
		k := min(len(w), len(coins)/2)
		s.Private.Fill(coins[:2*k])
		for i, v := range w[:k] {
			l, _, th := q.level(float64(v), rg)
			if coins[2*i] < th {
				l++
			}
			p.Put(uint32(q.m.Sample(l, coins[2*i+1])))
		}
		w = w[k:]
	}
	return p.Bytes(), nil
}

// Variance is Var[Q(w)] exactly for the integer matrix: with the rounding
// mixing levels l and l+1 with weights 1-f and f,
// (2r)^2 (E[a_J^2] - E[a_J]^2).
func (q *mvuMech) Variance(w float64, rg Range) float64 {
	l, f, th := q.level(w, rg)
	pu := float64(th) * 0x1p-64
	mean, second := q.m.Moments(l)
	if f > 0 {
		m1, s1 := q.m.Moments(l + 1)
		mean = (1-pu)*mean + pu*m1
		second = (1-pu)*second + pu*s1
	}
	return 4 * rg.Radius * rg.Radius * math.Max(second-mean*mean, 0)
}

func (q *mvuMech) NewSum(n int, rg Range) (Sum, error) {
	if n < 0 {
		return nil, fmt.Errorf("mech: negative tensor size %d", n)
	}
	if err := rg.Validate(); err != nil {
		return nil, err
	}
	values := make([]float64, len(q.m.Values))
	for j, a := range q.m.Values {
		values[j] = rg.Center - rg.Radius + 2*rg.Radius*a
	}
	return &mvuSum{q: q, values: values, meanSum: meanSum{sum: make([]float64, n)}}, nil
}

// mvuSum accumulates the decoded value c - r + 2r a_j per coordinate;
// memory is n floats whatever the number of clients.
type mvuSum struct {
	q      *mvuMech
	values []float64 // decoded value of each symbol
	meanSum
}

func (s *mvuSum) Add(payload []byte, _ Slot) error {
	u, err := wire.NewUnpacker(payload, len(s.sum), s.q.bits)
	if err != nil {
		return fmt.Errorf("mech: mvu: %w", err)
	}
	syms := make([]uint32, len(s.sum))
	for i := range syms {
		j := u.Next()
		if !s.q.m.Possible(int(j)) {
			return fmt.Errorf("mech: mvu: parameter %d has symbol %d, which the mechanism never sends", i, j)
		}
		syms[i] = j
	}
	for i, j := range syms {
		s.sum[i] += s.values[j]
	}
	s.count++
	return nil
}

// Support is the largest |2a_j - 1| r over the symbols' values a_j in
// units of the range (which an unbiased design places beyond [0, 1]).
func (q *mvuMech) Support(rg Range) (float64, error) {
	if err := rg.Validate(); err != nil {
		return 0, err
	}
	h := 0.0
	for _, a := range q.m.Values {
		h = max(h, math.Abs(2*a-1))
	}
	return h * rg.Radius, nil
}
