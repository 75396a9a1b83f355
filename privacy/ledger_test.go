package privacy_test

import (
	"fmt"
	"math"
	"math/big"
	"testing"

	"github.com/fedpq/fedpq/mech"
	"github.com/fedpq/fedpq/privacy"
)

func near(got, want, rel float64) bool {
	return math.Abs(got-want) <= rel*math.Abs(want)
}

// TestBasicAdvancedByHand checks both theorems at values worked by hand:
// eps = 0.1, k = 100, deltaPrime = e^-8 gives sqrt(2*100*8)*0.1 = 4 plus
// 100*0.1*(e^0.1-1) = 1.0517091807564771, below the basic 10; at eps = 1,
// k = 10, deltaPrime = 1e-5 the formula gives 32.3 and the basic 10 wins.
func TestBasicAdvancedByHand(t *testing.T) {
	if b, err := privacy.Basic(0.25, 8); err != nil || b != 2 {
		t.Errorf("Basic(0.25, 8) = %v, %v; want 2", b, err)
	}
	a, err := privacy.Advanced(0.1, 100, math.Exp(-8))
	if want := 4 + 1.0517091807564771; err != nil || !near(a, want, 1e-14) {
		t.Errorf("Advanced(0.1, 100, e^-8) = %v, %v; want %v", a, err, want)
	}
	if a, err := privacy.Advanced(1, 10, 1e-5); err != nil || a != 10 {
		t.Errorf("Advanced(1, 10, 1e-5) = %v, %v; want the basic 10", a, err)
	}
	// Large eps: e^eps overflows, the basic bound is returned.
	if a, err := privacy.Advanced(800, 3, 1e-5); err != nil || a != 2400 {
		t.Errorf("Advanced(800, 3, 1e-5) = %v, %v; want 2400", a, err)
	}
}

// rrDeltaRat is the hockey-stick divergence of k randomized responses at
// e^eps = E and e^epsTotal = F, both integers, as an exact rational: the
// sum over l of C(k,l) max(0, E^(k-l) - F E^l) / (1+E)^k.
func rrDeltaRat(k int, E, F int64) *big.Rat {
	num := new(big.Int)
	c := big.NewInt(1)
	for l := 0; l <= k; l++ {
		a := new(big.Int).Exp(big.NewInt(E), big.NewInt(int64(k-l)), nil)
		b := new(big.Int).Exp(big.NewInt(E), big.NewInt(int64(l)), nil)
		b.Mul(b, big.NewInt(F))
		if a.Cmp(b) > 0 {
			num.Add(num, new(big.Int).Mul(c, a.Sub(a, b)))
		}
		c.Mul(c, big.NewInt(int64(k-l)))
		c.Quo(c, big.NewInt(int64(l+1)))
	}
	den := new(big.Int).Exp(big.NewInt(1+E), big.NewInt(int64(k)), nil)
	return new(big.Rat).SetFrac(num, den)
}

// TestOptimalDeltaExact compares OptimalDelta with the exact rational
// delta of k-fold randomized response at e^eps in {2, 3} and integer
// e^epsTotal, for k up to 60.
func TestOptimalDeltaExact(t *testing.T) {
	for _, E := range []int64{2, 3} {
		for _, k := range []int{1, 2, 7, 10, 31, 60} {
			for _, F := range []int64{1, 2, 3, 5, 17, 1000, 1 << 40} {
				want, _ := rrDeltaRat(k, E, F).Float64()
				got, err := privacy.OptimalDelta(math.Log(float64(E)), k, math.Log(float64(F)))
				if err != nil {
					t.Fatal(err)
				}
				// e^eps and e^epsTotal are exact only to a relative 1e-16 in float64.
				if !near(got, want, 1e-11) && math.Abs(got-want) > 1e-300 {
					t.Errorf("e^eps %d, k %d, e^epsTotal %d: delta %v, exact %v", E, k, F, got, want)
				}
			}
		}
	}
}

// TestOptimalDeltaEnumerated checks OptimalDelta against the hockey-stick
// divergence of k randomized responses summed over all 2^k outputs, which
// does not group outputs by their number of flips.
func TestOptimalDeltaEnumerated(t *testing.T) {
	const k = 12
	for _, eps := range []float64{0.05, 0.7, 2} {
		p := math.Exp(eps) / (1 + math.Exp(eps))
		for _, et := range []float64{0, 0.3, 1.1, 2.3, 5} {
			want := 0.0
			for o := range 1 << k {
				px, py := 1.0, 1.0 // output o under input 0...0 and under 1...1
				for i := range k {
					if o>>i&1 == 0 {
						px, py = px*p, py*(1-p)
					} else {
						px, py = px*(1-p), py*p
					}
				}
				want += max(0, px-math.Exp(et)*py)
			}
			got, _ := privacy.OptimalDelta(eps, k, et)
			if !near(got, want, 1e-12) && math.Abs(got-want) > 1e-16 {
				t.Errorf("eps %v, epsTotal %v: delta %v, enumerated %v", eps, et, got, want)
			}
		}
	}
}

// TestOptimalKOV checks OptimalDelta on the grid epsTotal = (k-2i) eps
// against Kairouz, Oh and Viswanath's Theorem 3.3 as they state it:
// delta_i = sum_{l<i} C(k,l) (e^((k-l)eps) - e^((k-2i+l)eps)) / (1+e^eps)^k.
func TestOptimalKOV(t *testing.T) {
	for _, eps := range []float64{0.1, 1} {
		for _, k := range []int{5, 40, 301} {
			for i := 0; i <= k/2; i += 1 + k/20 {
				want := 0.0
				for l := 0; l < i; l++ {
					lc, _ := math.Lgamma(float64(k + 1))
					a, _ := math.Lgamma(float64(l + 1))
					b, _ := math.Lgamma(float64(k - l + 1))
					lc -= a + b
					want += math.Exp(lc+float64(k-l)*eps-float64(k)*math.Log1p(math.Exp(eps))) * -math.Expm1(-float64(2*i-2*l)*eps)
				}
				got, _ := privacy.OptimalDelta(eps, k, float64(k-2*i)*eps)
				if !near(got, want, 1e-9) && math.Abs(got-want) > 1e-18 {
					t.Errorf("eps %v, k %d, i %d: delta %v, KOV %v", eps, k, i, got, want)
				}
			}
		}
	}
}

// TestCompositionOrder checks Optimal <= Advanced <= Basic on a grid, that
// Optimal meets its delta and is tight (1% less does not), that it falls as
// delta grows, and that a large k stays fast and finite.
func TestCompositionOrder(t *testing.T) {
	for _, eps := range []float64{0.01, 0.1, 0.5, 1, 3, 10} {
		for _, k := range []int{1, 2, 10, 100, 1000, 100000} {
			prev := math.Inf(1)
			for _, delta := range []float64{1e-12, 1e-5, 1e-2} {
				b, _ := privacy.Basic(eps, k)
				a, _ := privacy.Advanced(eps, k, delta)
				o, err := privacy.Optimal(eps, k, delta)
				if err != nil {
					t.Fatal(err)
				}
				if !(o <= a*(1+1e-12) && a <= b) {
					t.Errorf("eps %v k %d delta %v: optimal %v, advanced %v, basic %v", eps, k, delta, o, a, b)
				}
				if o > prev {
					t.Errorf("eps %v k %d: optimal grows from %v to %v as delta grows to %v", eps, k, prev, o, delta)
				}
				prev = o
				if d, _ := privacy.OptimalDelta(eps, k, o); d > delta {
					t.Errorf("eps %v k %d delta %v: optimal %v has delta %v", eps, k, delta, o, d)
				}
				if o > 0 {
					if d, _ := privacy.OptimalDelta(eps, k, 0.99*o); d <= delta {
						t.Errorf("eps %v k %d delta %v: 0.99 x optimal %v still meets delta (%v)", eps, k, delta, o, d)
					}
				}
			}
		}
	}
	// One randomized response: delta(e') = p - e^e' (1-p), p = e/(1+e), so
	// e' = ln(e - delta (1+e)).
	if o, err := privacy.Optimal(1, 1, 1e-5); err != nil || !near(o, math.Log(math.E-1e-5*(1+math.E)), 1e-11) {
		t.Errorf("Optimal(1, 1, 1e-5) = %v, %v; want ln(e - 1e-5 (1+e))", o, err)
	}
}

// TestZCDP checks rho and the conversion at values worked by hand, and
// that the conversion is sound: the exact delta of the Gaussian mechanism
// composed over k rounds (a Gaussian of sensitivity sqrt(k) D, Balle and
// Wang's formula) at the zCDP epsilon is at most the target delta.
func TestZCDP(t *testing.T) {
	if rho, err := privacy.GaussianRho(2, 1); err != nil || rho != 0.125 {
		t.Errorf("GaussianRho(2, 1) = %v, %v; want 1/8", rho, err)
	}
	if e, err := privacy.ZCDPEpsilon(0.5, math.Exp(-8)); err != nil || !near(e, 4.5, 1e-15) {
		t.Errorf("ZCDPEpsilon(0.5, e^-8) = %v, %v; want 0.5 + 2 sqrt(4) = 4.5", e, err)
	}
	for _, sigma := range []float64{0.5, 3.7306, 30} {
		for _, k := range []int{1, 10, 1000} {
			for _, delta := range []float64{1e-9, 1e-5, 0.01} {
				rho, _ := privacy.GaussianRho(sigma, 1)
				e, err := privacy.ZCDPEpsilon(float64(k)*rho, delta)
				if err != nil {
					t.Fatal(err)
				}
				if d, _ := privacy.GaussianDelta(e, sigma, math.Sqrt(float64(k))); d > delta {
					t.Errorf("sigma %v k %d delta %v: zCDP eps %v has exact delta %v", sigma, k, delta, e, d)
				}
			}
		}
	}
}

// TestAugCorBinTheorem3 checks Eq. (5) as printed against a value computed
// independently (Python, mpmath at 50 digits) at eps = ln 3 (alpha = 2),
// delta = 1e-6, gamma = 1/2, n = 2000002, m = 1000, r = 1/2; that it scales
// with r (the error docs/privacy.md describes); and that the paper's own
// experiment (50 clients, gamma = 0.2) fails the theorem's condition.
func TestAugCorBinTheorem3(t *testing.T) {
	got, err := privacy.AugCorBinTheorem3(math.Log(3), 1e-6, 0.5, 2000002, 1000, 0.5)
	if want := 0.30221786102637415149; err != nil || !near(got, want, 1e-12) {
		t.Errorf("Theorem 3 = %v, %v; want %v", got, err, want)
	}
	if twice, _ := privacy.AugCorBinTheorem3(math.Log(3), 1e-6, 0.5, 2000002, 1000, 1); !near(twice, 2*got, 1e-15) {
		t.Errorf("Theorem 3 at r = 1 is %v, not twice %v", twice, got)
	}
	if _, err := privacy.AugCorBinTheorem3(5, 1e-5, 0.2, 50, 11_000_000, 0.05); err == nil {
		t.Error("the paper's CIFAR-10 setting (n = 50, gamma = 0.2) passed Theorem 3's condition")
	}
	for _, c := range []struct {
		eps, delta, gamma float64
		n, m              int
		r                 float64
	}{
		{0, 1e-6, 0.5, 1e6, 10, 1}, {1, 0, 0.5, 1e6, 10, 1}, {1, 1e-6, 0, 1e6, 10, 1},
		{1, 1e-6, 1.5, 1e6, 10, 1}, {1, 1e-6, 0.5, 0, 10, 1}, {1, 1e-6, 0.5, 1e6, 0, 1},
		{1, 1e-6, 0.5, 1e6, 10, 0}, {1, 1e-6, 0.5, 1e6, 10, math.NaN()}, {1, 1e-6, 0.5, 1e6, 10, 1e6},
	} {
		if _, err := privacy.AugCorBinTheorem3(c.eps, c.delta, c.gamma, c.n, c.m, c.r); err == nil {
			t.Errorf("AugCorBinTheorem3%+v accepted", c)
		}
	}
}

// TestAugCorBinCentral checks the corrected bound against a value computed
// independently (Python, mpmath, the binomial tail summed exactly): at
// eps = 1, delta = 1e-6, 20001 alone clients and m = 100, N0 = 10353 fair
// coins per parameter (m P[M < 10353] = 4.70e-7 <= delta/2 < 5.11e-7 =
// m P[M < 10354]) and eps = 1.2185558527349751339. It also checks that
// the bound falls as clients are added and the errors.
func TestAugCorBinCentral(t *testing.T) {
	got, err := privacy.AugCorBinCentral(1, 1e-6, 20001, 100)
	if want := 1.2185558527349751339; err != nil || !near(got, want, 1e-9) {
		t.Errorf("AugCorBinCentral(1, 1e-6, 20001, 100) = %v, %v; want %v", got, err, want)
	}
	prev := math.Inf(1)
	for _, alone := range []int{5000, 20001, 100000, 1000000} {
		e, err := privacy.AugCorBinCentral(1, 1e-6, alone, 100)
		if err != nil || !(e < prev) {
			t.Errorf("alone %d: %v, %v; want below %v", alone, e, err, prev)
		}
		prev = e
	}
	for _, c := range []struct {
		eps, delta float64
		alone, m   int
	}{{1, 1e-6, 10, 100}, {1, 1e-6, 1, 1}, {0, 1e-6, 1e5, 1}, {1, 1, 1e5, 1}, {1, 1e-6, 0, 1}, {1, 1e-6, 1e5, 0}, {math.Inf(1), 1e-6, 1e5, 1}} {
		if _, err := privacy.AugCorBinCentral(c.eps, c.delta, c.alone, c.m); err == nil {
			t.Errorf("AugCorBinCentral%+v accepted", c)
		}
	}
}

// TestCellEpsilon checks the partner's loss: no cells give eps; corbin's
// cells k/2^d give +Inf for every d; cells by hand at eps = ln 3; a
// boundary at qlo or qhi gives +Inf.
func TestCellEpsilon(t *testing.T) {
	for _, eps := range []float64{0.01, 1, 5} {
		if e, err := privacy.CellEpsilon(eps, nil); err != nil || !near(e, eps, 1e-12) {
			t.Errorf("CellEpsilon(%v, nil) = %v, %v; want eps", eps, e, err)
		}
		for d := 1; d <= 8; d++ {
			var b []float64
			for i := 1; i < 1<<d; i++ {
				b = append(b, float64(i)/float64(int(1)<<d))
			}
			if e, err := privacy.CellEpsilon(eps, b); err != nil || !math.IsInf(e, 1) {
				t.Errorf("corbin cells, d = %d, eps %v: %v, %v; want +Inf", d, eps, e, err)
			}
		}
	}
	// eps = ln 3: [qlo, qhi] = [1/4, 3/4]; the loss is
	// max((qhi-a)/(qlo-a), (b-qlo)/(b-qhi)) for the cell [a, b) holding it.
	for _, c := range []struct {
		bounds []float64
		ratio  float64
	}{
		{[]float64{0.9}, 13.0 / 3},     // [0, 0.9): max(0.75/0.25, 0.65/0.15)
		{[]float64{0.2}, 11},           // [0.2, 1): max(0.55/0.05, 0.75/0.25)
		{[]float64{0.1, 0.85}, 6},      // [0.1, 0.85): max(0.65/0.15, 0.6/0.1)
		{[]float64{0.1, 0.2, 0.9}, 11}, // [0.2, 0.9): max(0.55/0.05, 0.65/0.15)
	} {
		if e, err := privacy.CellEpsilon(math.Log(3), c.bounds); err != nil || !near(e, math.Log(c.ratio), 1e-13) {
			t.Errorf("cells %v: %v, %v; want ln %v", c.bounds, e, err, c.ratio)
		}
	}
	for _, b := range []float64{0.25, 0.75} {
		if e, _ := privacy.CellEpsilon(math.Log(3), []float64{0.1, b}); !math.IsInf(e, 1) {
			t.Errorf("a boundary at %v gives %v, want +Inf", b, e)
		}
	}
	for _, b := range [][]float64{{0.5, 0.4}, {0}, {1}, {0.3, 0.3}, {math.NaN()}} {
		if _, err := privacy.CellEpsilon(1, b); err == nil {
			t.Errorf("bounds %v accepted", b)
		}
	}
}

// constSource is a corr.Source whose every word is w.
type constSource uint64

func (s constSource) Uint64() uint64 { return uint64(s) }
func (s constSource) Fill(u []uint64) {
	for i := range u {
		u[i] = uint64(s)
	}
}
func (s constSource) Fill32(u []uint32) {
	for i := range u {
		u[i] = uint32(s)
	}
}

// bit encodes one parameter w with corbin (range 0±1) in the given role,
// with shared index z and every private word equal to u, and returns the
// bit sent (1 for +1).
func bit(t *testing.T, m mech.Mechanism, w float32, role mech.Role, z, u uint64) byte {
	t.Helper()
	out, err := m.Encode(nil, []float32{w}, mech.Range{Center: 0, Radius: 1},
		mech.Slot{Private: constSource(u), Shared: constSource(z), Role: role})
	if err != nil {
		t.Fatal(err)
	}
	return out[0] & 1
}

// TestCorBinPartnerFromCode derives the partner's and the server's loss
// from mech's corbin encoder itself. A client's word is V = z 2^(64-d) + u
// with z the shared index and u its private bits; the leader's bit is
// [V < T(w)], the follower's [2^64-1-V < T(w)]. Both are monotone in u,
// so the bit at the extreme u decides whether an event has probability 0
// or 1 given z. At w = c+r, T = hi > 2^63; at w = c-r, T = lo < 2^63.
//
// Partner: given z = 2^(d-1)-1 (the cell just below 2^63), a leader at c+r
// sends +1 even at the largest u, so always; at c-r it sends -1 at that u,
// so with positive probability. The follower mirrors this at
// z = 2^(d-1) with u = 0. So -1 rules out c+r: the loss is unbounded.
//
// Server: leader at w1 and follower at w2 = c (T = 2^63), shared z,
// private words their own. With w1 = c-r, for every z either the leader
// sends -1 at u = 0 (so for every u) or the follower sends -1 at the
// largest u (so for every u): (+1, +1) has probability 0. With w1 = c+r,
// z = 2^(d-1) and u = 0 both send +1, an event of positive probability
// (T(c+r) - 2^63)/2^64. Seeing (+1, +1) rules out w1 = c-r.
func TestCorBinPartnerFromCode(t *testing.T) {
	const ones = ^uint64(0)
	for _, eps := range []float64{0.1, 1, 5} {
		for _, d := range []int{1, 3, 5, 8} {
			cfg := mech.DefaultConfig()
			cfg.Epsilon, cfg.SharedBits = eps, d
			m, err := mech.New("corbin", cfg)
			if err != nil {
				t.Fatal(err)
			}
			below, above := uint64(1)<<(d-1)-1, uint64(1)<<(d-1)
			if bit(t, m, 1, mech.Leader, below, ones) != 1 || bit(t, m, -1, mech.Leader, below, ones) != 0 {
				t.Errorf("eps %v d %d: leader given z = %d is not +1 at c+r and -1 at c-r", eps, d, below)
			}
			if bit(t, m, 1, mech.Follower, above, 0) != 1 || bit(t, m, -1, mech.Follower, above, 0) != 0 {
				t.Errorf("eps %v d %d: follower given z = %d is not +1 at c+r and -1 at c-r", eps, d, above)
			}
			for z := range uint64(1) << d {
				if bit(t, m, -1, mech.Leader, z, 0) == 1 && bit(t, m, 0, mech.Follower, z, ones) == 1 {
					t.Errorf("eps %v d %d z %d: (+1, +1) is possible with w1 = c-r, w2 = c", eps, d, z)
				}
			}
			if bit(t, m, 1, mech.Leader, above, 0) != 1 || bit(t, m, 0, mech.Follower, above, 0) != 1 {
				t.Errorf("eps %v d %d: (+1, +1) is not reached with w1 = c+r, w2 = c", eps, d)
			}
		}
		for _, o := range []privacy.Observer{privacy.Server, privacy.Partner} {
			if e, err := privacy.ParameterEpsilon("corbin", eps, o); err != nil || !math.IsInf(e, 1) {
				t.Errorf("ParameterEpsilon(corbin, %v, %v) = %v, %v; the code shows +Inf", eps, o, e, err)
			}
		}
	}
}

func TestParameterEpsilon(t *testing.T) {
	for _, c := range []struct {
		name string
		o    privacy.Observer
		want float64
	}{
		{"ldpq", privacy.Server, 1}, {"ldpq", privacy.Partner, 1}, {"gaussian", privacy.Server, 1},
		{"jopeq", privacy.Server, 1}, {"corbin", privacy.Eavesdropper, 1}, {"augcorbin", privacy.Eavesdropper, 1},
		{"augcorbin", privacy.Server, math.Inf(1)}, {"coq", privacy.Partner, math.Inf(1)},
		{"cq", privacy.Eavesdropper, math.Inf(1)}, {"jopeq-compat", privacy.Eavesdropper, math.Inf(1)},
		{"clip", privacy.Server, math.Inf(1)},
	} {
		if e, err := privacy.ParameterEpsilon(c.name, 1, c.o); err != nil || e != c.want {
			t.Errorf("ParameterEpsilon(%s, 1, %v) = %v, %v; want %v", c.name, c.o, e, err, c.want)
		}
	}
	// Every registered mechanism has an answer, and no other name does.
	for _, name := range mech.Names() {
		if _, err := privacy.ParameterEpsilon(name, 1, privacy.Server); err != nil {
			t.Errorf("registered mechanism %s: %v", name, err)
		}
		info, _ := mech.Lookup(name)
		if e, _ := privacy.ParameterEpsilon(name, 1, privacy.Eavesdropper); info.LDP != !math.IsInf(e, 1) {
			t.Errorf("%s: LDP %v in mech, eavesdropper eps %v here", name, info.LDP, e)
		}
	}
	if _, err := privacy.ParameterEpsilon("nope", 1, privacy.Server); err == nil {
		t.Error("unknown mechanism accepted")
	}
	if _, err := privacy.ParameterEpsilon("ldpq", 0, privacy.Server); err == nil {
		t.Error("eps 0 accepted")
	}
	if _, err := privacy.ParameterEpsilon("ldpq", 1, privacy.Observer(7)); err == nil {
		t.Error("unknown observer accepted")
	}
}

func TestLedgerErrors(t *testing.T) {
	nan, inf := math.NaN(), math.Inf(1)
	for _, eps := range []float64{0, -1, nan, inf} {
		if _, err := privacy.Basic(eps, 1); err == nil {
			t.Errorf("Basic(%v, 1) accepted", eps)
		}
		if _, err := privacy.Advanced(eps, 1, 1e-5); err == nil {
			t.Errorf("Advanced(%v, 1, 1e-5) accepted", eps)
		}
		if _, err := privacy.Optimal(eps, 1, 1e-5); err == nil {
			t.Errorf("Optimal(%v, 1, 1e-5) accepted", eps)
		}
		if _, err := privacy.OptimalDelta(eps, 1, 1); err == nil {
			t.Errorf("OptimalDelta(%v, 1, 1) accepted", eps)
		}
		if _, err := privacy.CellEpsilon(eps, nil); err == nil {
			t.Errorf("CellEpsilon(%v) accepted", eps)
		}
		if _, err := privacy.GaussianRho(eps, 1); err == nil {
			t.Errorf("GaussianRho(sigma %v) accepted", eps)
		}
		if _, err := privacy.GaussianRho(1, eps); err == nil {
			t.Errorf("GaussianRho(sensitivity %v) accepted", eps)
		}
		if _, err := privacy.ZCDPEpsilon(eps, 1e-5); err == nil {
			t.Errorf("ZCDPEpsilon(rho %v) accepted", eps)
		}
	}
	for _, k := range []int{0, -3} {
		if _, err := privacy.Basic(1, k); err == nil {
			t.Errorf("Basic(1, %d) accepted", k)
		}
		if _, err := privacy.Optimal(1, k, 1e-5); err == nil {
			t.Errorf("Optimal(1, %d) accepted", k)
		}
		if _, err := privacy.OptimalDelta(1, k, 1); err == nil {
			t.Errorf("OptimalDelta(1, %d) accepted", k)
		}
	}
	for _, d := range []float64{0, 1, -1e-5, nan, 2} {
		if _, err := privacy.Advanced(1, 2, d); err == nil {
			t.Errorf("Advanced(1, 2, %v) accepted", d)
		}
		if _, err := privacy.Optimal(1, 2, d); err == nil {
			t.Errorf("Optimal(1, 2, %v) accepted", d)
		}
		if _, err := privacy.ZCDPEpsilon(1, d); err == nil {
			t.Errorf("ZCDPEpsilon(1, %v) accepted", d)
		}
	}
	for _, et := range []float64{-1, nan, inf} {
		if _, err := privacy.OptimalDelta(1, 2, et); err == nil {
			t.Errorf("OptimalDelta(1, 2, %v) accepted", et)
		}
	}
	if _, err := privacy.Basic(1e308, 1000); err == nil {
		t.Error("Basic overflow accepted")
	}
}

// The numbers of docs/privacy.md: one client's upload of d = 1000
// parameters (k = 1000), one parameter over 100 rounds (k = 100), and the
// whole upload over 100 rounds (k = 100000), at eps = 1 and 0.1 per
// parameter and round, composed by each theorem at delta = 1e-5.
func ExampleOptimal() {
	for _, eps := range []float64{1, 0.1} {
		for _, k := range []int{1000, 100, 100000} {
			b, _ := privacy.Basic(eps, k)
			a, _ := privacy.Advanced(eps, k, 1e-5)
			o, _ := privacy.Optimal(eps, k, 1e-5)
			fmt.Printf("eps %v, k = %6d: basic %.1f, advanced %.1f, optimal %.1f\n", eps, k, b, a, o)
		}
	}
	// Output:
	// eps 1, k =   1000: basic 1000.0, advanced 1000.0, optimal 577.8
	// eps 1, k =    100: basic 100.0, advanced 100.0, optimal 79.8
	// eps 1, k = 100000: basic 100000.0, advanced 100000.0, optimal 47403.9
	// eps 0.1, k =   1000: basic 100.0, advanced 25.7, optimal 17.8
	// eps 0.1, k =    100: basic 10.0, advanced 5.9, optimal 4.3
	// eps 0.1, k = 100000: basic 10000.0, advanced 1203.5, optimal 633.3
}

// The gaussian baseline at eps = 1, delta = 1e-5 per parameter and round,
// r = 1 (sensitivity 2), composed over 100 rounds for one parameter by
// zCDP, against basic composition (eps 100 at delta 100 * 1e-5).
func ExampleZCDPEpsilon() {
	sigma, _ := privacy.AnalyticGaussianSigma(1, 1e-5, 2)
	rho, _ := privacy.GaussianRho(sigma, 2)
	e, _ := privacy.ZCDPEpsilon(100*rho, 1e-5)
	fmt.Printf("sigma %.4f, rho %.5f per round, 100 rounds: eps %.2f at delta 1e-5\n", sigma, rho, e)
	// Output:
	// sigma 7.4613, rho 0.03593 per round, 100 rounds: eps 16.46 at delta 1e-5
}

// What the server learns from a corbin pair at eps = 1: the probability of
// the event (+1, +1) that rules out w1 <= c when w2 = c, about
// tanh(eps/2)/2 = 1/(2 alpha).
func ExampleParameterEpsilon() {
	for _, o := range []privacy.Observer{privacy.Eavesdropper, privacy.Server, privacy.Partner} {
		e, _ := privacy.ParameterEpsilon("corbin", 1, o)
		fmt.Printf("corbin, %s: %v\n", o, e)
	}
	alpha, _ := privacy.Alpha(1)
	fmt.Printf("P(+1, +1 | w1 = c+r, w2 = c) = %.4f\n", 1/(2*alpha))
	// Output:
	// corbin, eavesdropper: 1
	// corbin, server: +Inf
	// corbin, partner: +Inf
	// P(+1, +1 | w1 = c+r, w2 = c) = 0.2311
}

// AugCorBin-FL's user-level bound for one round at eps = 1, delta = 1e-5,
// m = 1000 parameters: the paper's experiment has 10 alone clients; the
// corrected bound needs thousands.
func ExampleAugCorBinCentral() {
	_, err := privacy.AugCorBinTheorem3(1, 1e-5, 0.2, 50, 1000, 1)
	fmt.Println("Theorem 3, n = 50, gamma = 0.2:", err)
	_, err = privacy.AugCorBinCentral(1, 1e-5, 10, 1000)
	fmt.Println("corrected, 10 alone:", err)
	for _, alone := range []int{10000, 100000, 1000000} {
		e, err := privacy.AugCorBinCentral(1, 1e-5, alone, 1000)
		fmt.Printf("corrected, %d alone: eps %.3g %v\n", alone, e, err)
	}
	// Output:
	// Theorem 3, n = 50, gamma = 0.2: privacy: Theorem 3's condition fails: (n gamma - 1)(1/4 - 1/(4 alpha^2)) = 1.77 < 423.7
	// corrected, 10 alone: privacy: cpSGD's condition fails: 0 fair coins per parameter (of 9 other alone clients) give N0/4 = 0 < 492.6
	// corrected, 10000 alone: eps 5.09 <nil>
	// corrected, 100000 alone: eps 1.44 <nil>
	// corrected, 1000000 alone: eps 0.437 <nil>
}
