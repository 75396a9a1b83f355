package mech

import (
	"encoding/binary"
	"math"
	"math/big"
	"sort"
	"testing"

	"github.com/fedpq/fedpq/corr"
	"github.com/fedpq/fedpq/privacy"
)

var testEps = []float64{0.01, 0.1, 0.5, 1, 2, 5, 10, 20, 40}

// alpha is LDP-FL's alpha(eps) = (e^eps+1)/(e^eps-1).
func alpha(eps float64) float64 {
	a, err := privacy.Alpha(eps)
	if err != nil {
		panic(err)
	}
	return a
}

// TestBinqExactEpsilon checks, with exact rationals, that the thresholds the
// one-bit quantizers use give an eps-LDP mechanism for every input on a fine
// grid (and beyond the range), and that the guarantee is tight: the extreme
// ratio is e^eps to within 1e-9. The +1 in the numerators covers coq, whose
// marginal is (T+delta)/2^64 with delta in [0, 1].
func TestBinqExactEpsilon(t *testing.T) {
	for _, eps := range testEps {
		for _, rg := range []Range{{0, 1}, {0.3, 0.075}, {-2, 1e-3}} {
			b, err := newBinq(eps, rg)
			if err != nil {
				t.Fatal(err)
			}
			minT, maxT := ^uint64(0), uint64(0)
			prev := uint64(0)
			const grid = 20001
			for i := range grid + 200 {
				w := rg.Center - 1.01*rg.Radius + 2.02*rg.Radius*float64(i)/grid
				tw := b.threshold(float32(w))
				if tw < prev {
					t.Fatalf("eps %v %v: T not monotone at w=%v", eps, rg, w)
				}
				prev = tw
				minT, maxT = min(minT, tw), max(maxT, tw)
			}
			if minT != b.lo || maxT != b.hi {
				t.Errorf("eps %v %v: thresholds span [%d, %d], want [%d, %d]", eps, rg, minT, maxT, b.lo, b.hi)
			}
			// P(+1) ratio, and P(-1) ratio, worst case over inputs.
			if !ratioAtMost(new(big.Int).Add(u64(maxT), big.NewInt(1)), u64(minT), eps) {
				t.Errorf("eps %v: P(+1) ratio exceeds e^eps", eps)
			}
			if !ratioAtMost(new(big.Int).Sub(two64, u64(minT)), new(big.Int).Sub(two64, u64(maxT+1)), eps) {
				t.Errorf("eps %v: P(-1) ratio exceeds e^eps", eps)
			}
			if eps <= 20 {
				tight := float64(maxT) / float64(minT)
				if tight < math.Exp(eps)*(1-1e-9) {
					t.Errorf("eps %v: extreme ratio %.15g is looser than e^eps %.15g", eps, tight, math.Exp(eps))
				}
			}
			if a := b.out / rg.Radius; math.Abs(a/alpha(eps)-1) > 1e-9 {
				t.Errorf("eps %v: effective alpha %v, want %v", eps, a, alpha(eps))
			}
		}
	}
}

// TestLDPQUnbiasedVariance samples ldpq at several inputs (the range ends
// included) and compares mean and variance with w and alpha^2 r^2 - (w-c)^2
// (checkMeanVar: 5 standard errors).
func TestLDPQUnbiasedVariance(t *testing.T) {
	const n = 200000
	rg := Range{Center: 0.1, Radius: 0.5}
	for _, eps := range []float64{0.5, 1, 5} {
		m, _ := New("ldpq", Config{Epsilon: eps})
		for k, w := range []float64{-0.4, -0.1, 0.1, 0.35, 0.6} {
			payload, err := m.Encode(nil, constVec(n, float32(w)), rg, Slot{Private: stream("ldpq", uint64(k))})
			if err != nil {
				t.Fatal(err)
			}
			b, _ := newBinq(eps, rg)
			x := make([]float64, n)
			for i, one := range decodeBits(t, payload, n) {
				x[i] = b.c - b.out
				if one {
					x[i] = b.c + b.out
				}
			}
			want := m.(Variancer).Variance(w, rg)
			wc := rg.Clip(float64(float32(w))) - rg.Center
			closed := alpha(eps)*alpha(eps)*rg.Radius*rg.Radius - wc*wc
			within(t, "closed-form variance", want, closed, 1e-9*closed)
			checkMeanVar(t, "ldpq", x, rg.Center+wc, want)
		}
	}
}

// pairOutputs encodes w1 (leader) and w2 (follower) n times with shared bits
// and returns each client's bits.
func pairOutputs(t *testing.T, m Mechanism, n int, w1, w2 float32, rg Range, seed uint64) (a, b []bool) {
	t.Helper()
	lead := Slot{Private: stream("lead", seed), Shared: stream("shared", seed), Role: Leader}
	foll := Slot{Private: stream("foll", seed), Shared: stream("shared", seed), Role: Follower}
	pa, err := m.Encode(nil, constVec(n, w1), rg, lead)
	if err != nil {
		t.Fatal(err)
	}
	pb, err := m.Encode(nil, constVec(n, w2), rg, foll)
	if err != nil {
		t.Fatal(err)
	}
	return decodeBits(t, pa, n), decodeBits(t, pb, n)
}

// chiSquareBinary is the chi-square statistic of k ones in n draws against
// probability p (one degree of freedom).
func chiSquareBinary(k, n int, p float64) float64 {
	e1, e0 := p*float64(n), (1-p)*float64(n)
	d1, d0 := float64(k)-e1, float64(n-k)-e0
	return d1*d1/e1 + d0*d0/e0
}

// TestPairedMarginalsAreLDPQ checks that each client of a corbin, augcorbin
// and coq pair, leader and follower, has the ldpq marginal P(+1|w) = T(w)/2^64
// (chi-square with 1 degree of freedom below 15.1, p = 1e-4 per case, fixed
// seed), at inputs that hit the top cell, the bottom cell and cell edges.
func TestPairedMarginalsAreLDPQ(t *testing.T) {
	const n = 100000
	rg := Range{Center: 0, Radius: 1}
	for _, name := range []string{"corbin", "augcorbin", "coq"} {
		for _, c := range []Config{{Epsilon: 1, SharedBits: 1, Px: 0.5, Gamma: 0.2}, {Epsilon: 0.5, SharedBits: 5, Px: 0.3, Gamma: 0.2}, {Epsilon: 5, SharedBits: 3, Px: 0.8, Gamma: 0.2}} {
			m, err := New(name, c)
			if err != nil {
				t.Fatal(err)
			}
			b, _ := newBinq(c.Epsilon, rg)
			for k, ws := range [][2]float32{{1, 1}, {-1, -1}, {1, -1}, {0.25, 0.7}, {0, 0}} {
				a, f := pairOutputs(t, m, n, ws[0], ws[1], rg, uint64(k))
				for who, out := range [][]bool{a, f} {
					ones := 0
					for _, o := range out {
						if o {
							ones++
						}
					}
					p := b.p1(float64(ws[who]))
					if chi := chiSquareBinary(ones, n, p); chi > 15.1 {
						t.Errorf("%s %+v w=%v client %d: %d ones of %d, p=%.5f, chi2=%.1f", name, c, ws, who, ones, n, p, chi)
					}
				}
			}
		}
	}
}

// TestPairVariance compares the sampled variance of Q1+Q2 with PairVariance
// derived from the coupling, for corbin and coq at several d, eps and inputs
// (the top cell included): the count of (+1, +1) pairs against the
// coupling's P11 (5 binomial standard errors), the pair's mean and variance
// (checkMeanVar), and that a pair is never worse than two independent clients.
func TestPairVariance(t *testing.T) {
	const n = 100000
	rg := Range{Center: 0.2, Radius: 0.5}
	for _, name := range []string{"corbin", "coq"} {
		for _, c := range []Config{{Epsilon: 0.5, SharedBits: 5, Px: 0.5}, {Epsilon: 2, SharedBits: 3, Px: 0.5}, {Epsilon: 1, SharedBits: 4, Px: 0.3}, {Epsilon: 8, SharedBits: 2, Px: 0.5}} {
			if name == "corbin" && c.Px != 0.5 {
				continue
			}
			m, _ := New(name, c)
			b, _ := newBinq(c.Epsilon, rg)
			for k, ws := range [][2]float32{{0.7, 0.7}, {0.2, 0.2}, {-0.3, 0.7}, {0.45, 0.05}, {-0.3, -0.1}} {
				a, f := pairOutputs(t, m, n, ws[0], ws[1], rg, 100+uint64(k))
				// The coupling: the count of (+1, +1) is Binomial(n, P11).
				p11 := pairBothOne(m.(cellser).cells(), b.threshold(ws[0]), b.threshold(ws[1]))
				both := 0
				for i := range a {
					if a[i] && f[i] {
						both++
					}
				}
				if d := math.Abs(float64(both) - n*p11); d > 5*math.Sqrt(n*p11*(1-p11))+1 {
					t.Errorf("%s %+v %v: %d of %d pairs sent (+1, +1), want %.1f", name, c, ws, both, n, n*p11)
				}
				x := make([]float64, n)
				for i := range x {
					for _, one := range []bool{a[i], f[i]} {
						if one {
							x[i] += b.c + b.out
						} else {
							x[i] += b.c - b.out
						}
					}
				}
				want := m.(PairVariancer).PairVariance(float64(ws[0]), float64(ws[1]), rg)
				indep := b.variance(float64(ws[0])) + b.variance(float64(ws[1]))
				if want > indep*(1+1e-12) {
					t.Errorf("%s %+v %v: pair variance %v above independent %v", name, c, ws, want, indep)
				}
				if want > 1e-4*b.out*b.out {
					checkMeanVar(t, name+" pair", x, float64(ws[0])+float64(ws[1]), want)
				} else { // (+1, +1) is too rare for a sample variance; the count above covers it
					mean, _ := meanVar(x)
					within(t, name+" pair mean", mean, float64(ws[0])+float64(ws[1]), 5*math.Sqrt(want/n)+1e-9)
				}
			}
		}
	}
}

// TestCorBinHalvesVariance checks the closed form against CoQ-FL's claim:
// at w1 + w2 = 2c the pair's variance is at most 2^-d * 2 out^2 plus the
// independent cells' share, far below the 2 alpha^2 r^2 of two ldpq clients,
// and at the worst inputs it never exceeds alpha^2 r^2 (half) as d grows.
func TestCorBinHalvesVariance(t *testing.T) {
	rg := Range{Center: 0, Radius: 1}
	m, _ := New("corbin", Config{Epsilon: 1, SharedBits: 12})
	pv := m.(PairVariancer)
	a2 := alpha(1) * alpha(1)
	if v := pv.PairVariance(0.5, -0.5, rg); v > 1e-3*a2 {
		t.Errorf("antithetic inputs: pair variance %v, want ~0", v)
	}
	worst := 0.0
	for i := range 201 {
		w := -1 + float64(i)/100
		worst = max(worst, pv.PairVariance(w, w, rg))
	}
	if worst > a2*(1+1e-3) {
		t.Errorf("worst pair variance %v exceeds alpha^2 r^2 = %v", worst, a2)
	}
}

// TestCoQHalfIsCorBin: with px = 1/2 the codebook is uniform and K = d, so
// coq's cells must be corbin's exactly, and so must its pair variance.
func TestCoQHalfIsCorBin(t *testing.T) {
	rg := Range{Center: 0, Radius: 0.3}
	for _, d := range []int{1, 5, 9} {
		c := Config{Epsilon: 1, SharedBits: d, Px: 0.5}
		cb, _ := New("corbin", c)
		cq, _ := New("coq", c)
		a, b := cb.(cellser).cells(), cq.(cellser).cells()
		for s := range 1 << d {
			as, aw := a.cell(s)
			bs, bw := b.cell(s)
			if as != bs || aw != bw || b.find(bs) != s || b.find(bs+bw-1) != s {
				t.Fatalf("d=%d cell %d: coq (%d, %d), corbin (%d, %d)", d, s, bs, bw, as, aw)
			}
		}
		for _, ws := range [][2]float64{{0.3, 0.3}, {-0.1, 0.25}, {0, 0}} {
			if x, y := cb.(PairVariancer).PairVariance(ws[0], ws[1], rg), cq.(PairVariancer).PairVariance(ws[0], ws[1], rg); x != y {
				t.Errorf("d=%d %v: pair variance coq %v, corbin %v", d, ws, y, x)
			}
		}
	}
}

// TestCoQExactMarginal computes, with big integers, the exact probability
// that a coq client sends +1 — summing over the cells of the codebook and,
// within the straddled cell, counting the private words u with
// start + floor(u*width/2^64) < T — and checks it is T/2^64 + delta with
// 0 <= delta <= 2^-64, which TestBinqExactEpsilon shows is eps-LDP.
func TestCoQExactMarginal(t *testing.T) {
	for _, c := range []Config{{Epsilon: 1, SharedBits: 4, Px: 0.3}, {Epsilon: 0.2, SharedBits: 7, Px: 0.9}, {Epsilon: 3, SharedBits: 2, Px: 0.5}} {
		mm, _ := New("coq", c)
		m := mm.(*coq)
		b, _ := newBinq(c.Epsilon, Range{0, 1})
		for i := range 401 {
			T := b.threshold(float32(-1 + float64(i)/200))
			ones := new(big.Int) // 2^128 * P(+1)
			for s := range m.width {
				st, wd := m.cell(s)
				switch {
				case st+wd-1 < T && st+wd != 0 || st+wd == 0 && false:
					ones.Add(ones, new(big.Int).Mul(u64(wd), two64))
				case st < T:
					// #{u : floor(u*wd/2^64) < t} = ceil(t*2^64/wd)
					num := new(big.Int).Mul(u64(T-st), two64)
					q, r := new(big.Int).QuoRem(num, u64(wd), new(big.Int))
					if r.Sign() != 0 {
						q.Add(q, big.NewInt(1))
					}
					ones.Add(ones, q.Mul(q, u64(wd)))
				}
			}
			// delta*2^128 = ones - T*2^64, must be in [0, 2^64].
			delta := new(big.Int).Sub(ones, new(big.Int).Mul(u64(T), two64))
			if delta.Sign() < 0 || delta.Cmp(two64) > 0 {
				t.Fatalf("%+v T=%d: exact P(+1)*2^128 - T*2^64 = %v, outside [0, 2^64]", c, T, delta)
			}
		}
	}
}

// TestBitSumMatchesNaive adds 600 random payloads (crossing the 255-payload
// flush) and compares the mean with a direct decode.
func TestBitSumMatchesNaive(t *testing.T) {
	const n, clients = 77, 600
	s, _ := newBitSum(n, -2, 3)
	src := stream("bitsum")
	want := make([]float64, n)
	for range clients {
		p := make([]byte, (n+7)/8)
		src.Read(p)
		p[len(p)-1] &= 1<<(n%8) - 1
		if err := s.Add(p, Slot{}); err != nil {
			t.Fatal(err)
		}
		for i := range n {
			want[i] += map[bool]float64{false: -2, true: 3}[p[i/8]>>(i%8)&1 == 1] / clients
		}
	}
	got := make([]float64, n)
	if err := s.Mean(got); err != nil {
		t.Fatal(err)
	}
	for i := range got {
		within(t, "bit mean", got[i], want[i], 1e-12)
	}
}

// TestBinaryErrors checks that bad input gives errors, not panics.
func TestBinaryErrors(t *testing.T) {
	for _, name := range []string{"ldpq", "corbin", "augcorbin", "coq"} {
		if _, err := New(name, Config{Epsilon: 0, SharedBits: 5, Px: 0.5}); err == nil {
			t.Errorf("%s: eps 0 accepted", name)
		}
		if _, err := New(name, Config{Epsilon: math.Inf(1), SharedBits: 5, Px: 0.5}); err == nil {
			t.Errorf("%s: eps +Inf accepted", name)
		}
		m, err := New(name, Config{Epsilon: 1, SharedBits: 5, Px: 0.5, Gamma: 0.2})
		if err != nil {
			t.Fatal(err)
		}
		slot := Slot{Private: stream("e"), Shared: stream("f"), Role: Leader}
		if _, err := m.Encode(nil, []float32{0, float32(math.NaN())}, Range{0, 1}, slot); err == nil {
			t.Errorf("%s: NaN accepted", name)
		}
		if _, err := m.Encode(nil, []float32{float32(math.Inf(-1))}, Range{0, 1}, slot); err == nil {
			t.Errorf("%s: -Inf accepted", name)
		}
		if _, err := m.Encode(nil, []float32{0}, Range{0, 0}, slot); err == nil {
			t.Errorf("%s: r = 0 accepted", name)
		}
		if _, err := m.Encode(nil, []float32{0}, Range{0, -1}, slot); err == nil {
			t.Errorf("%s: r < 0 accepted", name)
		}
		if m.Coupling() == Paired {
			if _, err := m.Encode(nil, []float32{0}, Range{0, 1}, Slot{Private: stream("e"), Role: Follower}); err == nil {
				t.Errorf("%s: follower without shared bits accepted", name)
			}
		}
		sum, err := m.NewSum(10, Range{0, 1})
		if err != nil {
			t.Fatal(err)
		}
		for _, bad := range [][]byte{nil, {0}, {0, 0, 0}, {0xff, 0xff}} {
			if err := sum.Add(bad, Slot{}); err == nil {
				t.Errorf("%s: payload %x accepted for 10 parameters", name, bad)
			}
		}
		if sum.Count() != 0 {
			t.Errorf("%s: rejected payloads were counted", name)
		}
		if err := sum.Mean(make([]float64, 10)); err == nil {
			t.Errorf("%s: mean of nothing accepted", name)
		}
	}
	for _, c := range []Config{{Epsilon: 1, SharedBits: 0, Px: 0.5}, {Epsilon: 1, SharedBits: 33, Px: 0.5}} {
		if _, err := New("corbin", c); err == nil {
			t.Errorf("corbin %+v accepted", c)
		}
	}
	for _, c := range []Config{{Epsilon: 1, SharedBits: 5, Px: 0}, {Epsilon: 1, SharedBits: 5, Px: 1}, {Epsilon: 1, SharedBits: 17, Px: 0.5}} {
		if _, err := New("coq", c); err == nil {
			t.Errorf("coq %+v accepted", c)
		}
	}
	if _, err := New("augcorbin", Config{Epsilon: 1, SharedBits: 5, Gamma: 1.5}); err == nil {
		t.Error("augcorbin gamma 1.5 accepted")
	}
	if _, err := New("nonesuch", Config{}); err == nil {
		t.Error("unknown mechanism accepted")
	}
}

// TestCQStratified checks cq's unbiasedness and its O(1/n^2) error: with
// 100 clients whose inputs are close, the mean's MSE must be under a tenth of
// independent stochastic rounding's (r^2 - (w-c)^2)/n.
func TestCQStratified(t *testing.T) {
	const clients, dim = 100, 2000
	rg := Range{Center: 0, Radius: 1}
	m, _ := New("cq", Config{})
	sum, _ := m.NewSum(dim, rg)
	src := stream("cq-inputs")
	truth := make([]float64, dim)
	perm := make([]int, clients)
	corr.Shuffle(stream("cq-perm"), perm)
	for i := range clients {
		w := make([]float32, dim)
		for j := range w {
			w[j] = float32(0.3 + 0.05*(src.Float64()-0.5))
			truth[j] += float64(w[j]) / clients
		}
		p, err := m.Encode(nil, w, rg, Slot{Private: stream("cq-private", uint64(i)), Shared: stream("cq-group"), Index: perm[i], Size: clients})
		if err != nil {
			t.Fatal(err)
		}
		if err := sum.Add(p, Slot{}); err != nil {
			t.Fatal(err)
		}
	}
	est := make([]float64, dim)
	sum.Mean(est)
	mse, bias := 0.0, 0.0
	for j := range est {
		mse += (est[j] - truth[j]) * (est[j] - truth[j]) / dim
		bias += (est[j] - truth[j]) / dim
	}
	indep := (1 - 0.3*0.3) / clients
	if mse > indep/10 {
		t.Errorf("cq MSE %.3g, want below a tenth of independent rounding's %.3g", mse, indep)
	}
	within(t, "cq bias", bias, 0, 5*math.Sqrt(mse/dim))
}

// FuzzBitSumAdd: any bytes are either rejected or counted; never a panic,
// and a rejected payload leaves the sum as it was.
func FuzzBitSumAdd(f *testing.F) {
	f.Add([]byte{0xff, 0x03}, 10)
	f.Add([]byte{0xff, 0x07}, 10)
	f.Add([]byte{}, 0)
	f.Fuzz(func(t *testing.T, payload []byte, n int) {
		if n < 0 || n > 1<<14 {
			return
		}
		m, _ := New("ldpq", Config{Epsilon: 1})
		s, err := m.NewSum(n, Range{0, 1})
		if err != nil {
			t.Fatal(err)
		}
		err = s.Add(payload, Slot{})
		if (err == nil) != (s.Count() == 1) {
			t.Fatalf("Add returned %v with count %d", err, s.Count())
		}
	})
}

// TestSharedFields: fields are read least significant first across word
// boundaries, and a batch consumes exactly ceil(n*k/64) words.
func TestSharedFields(t *testing.T) {
	for _, k := range []uint{1, 3, 5, 7, 13, 31, 32} {
		for _, n := range []int{1, 63, 64, 200, chunk} {
			words := make([]uint64, (n*int(k)+63)/64+1)
			stream("fields").Fill(words)
			var raw []byte
			for _, w := range words {
				raw = binary.LittleEndian.AppendUint64(raw, w)
			}
			src, _ := corr.NewBytes(raw)
			z := make([]uint32, n)
			sharedFields(src, z, k)
			if src.Remaining() != 8 {
				t.Fatalf("k=%d n=%d: %d bytes left, want one word", k, n, src.Remaining())
			}
			for i, v := range z {
				var want uint32
				for b := range k {
					pos := uint(i)*k + b
					want |= uint32(words[pos/64]>>(pos%64)&1) << b
				}
				if v != want {
					t.Fatalf("k=%d n=%d field %d: %x, want %x", k, n, i, v, want)
				}
			}
		}
	}
}

// fixedSource returns the same words forever: it forces ties.
type fixedSource struct {
	hi32  uint32
	low64 uint64
}

func (f fixedSource) Uint64() uint64 { return f.low64 }
func (f fixedSource) Fill(u []uint64) {
	for i := range u {
		u[i] = f.low64
	}
}
func (f fixedSource) Fill32(u []uint32) {
	for i := range u {
		u[i] = f.hi32
	}
}

// TestTieBreak forces the 2^-32 event in which the top half of the random
// word equals the top half of T, and checks the low half decides: the bit is
// [V < T] for the full 64-bit V.
func TestTieBreak(t *testing.T) {
	rg := Range{Center: 0, Radius: 1}
	b, _ := newBinq(1, rg)
	w := float32(0.3)
	T := b.threshold(w)
	m, _ := New("ldpq", Config{Epsilon: 1})
	for _, c := range []struct {
		low  uint64
		want byte
	}{{T&0xffffffff - 1, 1}, {T & 0xffffffff, 0}, {T&0xffffffff + 1, 0}} {
		p, err := m.Encode(nil, []float32{w}, rg, Slot{Private: fixedSource{hi32: uint32(T >> 32), low64: c.low}})
		if err != nil {
			t.Fatal(err)
		}
		if p[0] != c.want {
			t.Errorf("V = %x:%x, T = %x: bit %d, want %d", T>>32, c.low, T, p[0], c.want)
		}
	}
}

// TestCoQFind: the table-driven cell lookup agrees with a binary search, at
// every cell boundary and at random draws.
func TestCoQFind(t *testing.T) {
	for _, c := range []Config{{Epsilon: 1, SharedBits: 3, Px: 0.3}, {Epsilon: 1, SharedBits: 11, Px: 0.9}, {Epsilon: 1, SharedBits: 16, Px: 0.45}, {Epsilon: 1, SharedBits: 14, Px: 0.5}} {
		mm, err := New("coq", c)
		if err != nil {
			t.Fatal(err)
		}
		m := mm.(*coq)
		search := func(x uint64) int { // the last cell starting at or below x
			return sort.Search(len(m.width), func(s int) bool { return m.kb[s+1] > x })
		}
		src := stream("coq-find")
		xs := []uint64{0, 1<<m.k - 1}
		for s := range m.width {
			xs = append(xs, m.kb[s], m.kb[s+1]-1)
		}
		for range 20000 {
			xs = append(xs, src.Uint64()>>(64-m.k))
		}
		for _, x := range xs {
			if x >= 1<<m.k {
				continue
			}
			if got, want := m.findShared(x), search(x); got != want {
				t.Fatalf("%+v: cell of %d is %d, want %d", c, x, got, want)
			}
		}
	}
}

// TestRandomizedResponse: exactly the one-bit mechanisms say they send
// each bit by randomized response, and at the eps they were made with
// (the eps TestBinqExactEpsilon checks their thresholds against), which
// package fl amplifies under secure aggregation and the shuffler.
func TestRandomizedResponse(t *testing.T) {
	want := map[string]bool{"ldpq": true, "corbin": true, "augcorbin": true, "coq": true}
	for _, name := range Names() {
		c := DefaultConfig()
		c.Epsilon = 0.7
		m, err := New(name, c)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		rr, ok := m.(RandomizedResponse)
		if ok != want[name] {
			t.Errorf("%s: RandomizedResponse %v, want %v", name, ok, want[name])
			continue
		}
		if ok && rr.ResponseEpsilon() != c.Epsilon {
			t.Errorf("%s: ResponseEpsilon %v, want %v", name, rr.ResponseEpsilon(), c.Epsilon)
		}
	}
}
