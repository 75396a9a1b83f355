package mech

import (
	"math"
	"strings"
	"testing"

	"github.com/fedpq/fedpq/mech/lattice"
)

// TestJoPEQScalarExactEpsilon computes, from the probabilities the
// mechanism uses (prob, the law of the sent index given SDQ's index), the
// largest log-ratio between two inputs of the range under the same dither:
// inputs on a grid of 401 points of [c-r, c+r], dithers on a grid of 201
// points of the cell. It must not exceed eps (to 1e-9, the float error of
// the closed forms) and must equal the claimed Epsilon(), which is <= eps
// and attained. It also checks that each law sums to 1.
func TestJoPEQScalarExactEpsilon(t *testing.T) {
	for _, rate := range []int{1, 2, 4, 6} {
		for _, eps := range []float64{0.5, 1, 4, 10} {
			m := latNew(t, "jopeq", eps, rate, 1).(*jopeqScalar)
			for k0 := m.low; k0 <= m.low+m.span; k0++ {
				total := 0.0
				for k := range m.levels {
					total += m.prob(k, k0)
				}
				if math.Abs(total-1) > 1e-12 {
					t.Fatalf("R=%d eps=%v: law of k0=%d sums to %v", rate, eps, k0, total)
				}
			}
			worst := 0.0
			for di := range 201 {
				d := m.cell.Dither(0) + float64(di)/201*m.cell.Step
				lo, hi := int64(math.MaxInt64), int64(math.MinInt64)
				for xi := range 401 {
					k0 := m.index(-1+2*float64(xi)/400, d)
					lo, hi = min(lo, k0), max(hi, k0)
				}
				for k := range m.levels {
					for _, pair := range [][2]int64{{lo, hi}, {hi, lo}} {
						worst = max(worst, math.Log(m.prob(k, pair[0])/m.prob(k, pair[1])))
					}
				}
			}
			if worst > eps+1e-9 || math.Abs(worst-m.Epsilon()) > 1e-9 || m.Epsilon() > eps {
				t.Errorf("R=%d eps=%v: largest log-ratio %v, claimed %v", rate, eps, worst, m.Epsilon())
			}
			t.Logf("jopeq L=1 R=%d eps=%v: D=%d, exact eps %.9f, worst variance %.4g r^2", rate, eps, m.span, worst, m.Variance(0, Range{0, 1}))
		}
	}
}

// TestJoPEQNoiseMatchesLaw draws 200000 samples of the index noise and
// compares their histogram with prob: chi-square over |z| <= 6 and the
// tail beyond, 13 degrees of freedom, rejected above 34.5 (p = 0.001).
func TestJoPEQNoiseMatchesLaw(t *testing.T) {
	z, err := newIndexNoise(1.7)
	if err != nil {
		t.Fatal(err)
	}
	const n = 200000
	src := latStream(7, 0)
	count := map[int64]float64{}
	for range n {
		v := z.sample(src)
		count[min(max(v, -7), 7)]++
	}
	chi := 0.0
	for v := int64(-7); v <= 7; v++ {
		p := z.prob(v)
		if v == 7 || v == -7 {
			p = z.tail(7)
		}
		chi += (count[v] - n*p) * (count[v] - n*p) / (n * p)
	}
	if chi > 34.5 {
		t.Errorf("chi-square %v > 34.5", chi)
	}
	if v := z.variance(); math.Abs(v-2*1.7*1.7-1.0/12) > 0.05 {
		t.Errorf("variance %v, want about 2 b^2 + 1/12 = %v", v, 2*1.7*1.7+1.0/12)
	}
}

// TestJoPEQScalarUnbiasedVariance checks the exact unbiasedness (the
// endpoint decoding undoes the clamping) and the exact variance: 4000
// clients, means within 5 standard errors, variances within 15%.
func TestJoPEQScalarUnbiasedVariance(t *testing.T) {
	rg := Range{Center: 0.5, Radius: 1}
	const clients = 4000
	for _, rate := range []int{1, 2, 4} {
		for _, eps := range []float64{1, 4} {
			m := latNew(t, "jopeq", eps, rate, 1)
			mean, variance := latRun(t, m, latInputs, rg, clients)
			for i, w := range latInputs {
				want := rg.Clip(float64(w))
				v := m.(Variancer).Variance(float64(w), rg)
				if se := math.Sqrt(v / clients); math.Abs(mean[i]-want) > 5*se {
					t.Errorf("R=%d eps=%v: mean output for %v is %v, want %v within %v", rate, eps, w, mean[i], want, 5*se)
				}
				if math.Abs(variance[i]/v-1) > 0.15 {
					t.Errorf("R=%d eps=%v: variance for %v is %v, want %v", rate, eps, w, variance[i], v)
				}
			}
		}
	}
}

// TestJoPEQHexExactEpsilon computes the law of the sent point for every
// point of the input cover (a superset of the SDQ points that inputs of
// the square can reach under any dither) by convolving the exact law of
// (z1 - z2, z2 - z3), truncated at |z_i| <= T, and projecting; the
// truncated mass tau is added to the numerator, so the bound is rigorous.
// The largest log-ratio over outputs and pairs of inputs (which covers
// inputs that differ in one coordinate only, and a lone last parameter)
// must be at most Epsilon() <= eps up to 1e-9.
func TestJoPEQHexExactEpsilon(t *testing.T) {
	for _, c := range []struct {
		rate int
		eps  float64
	}{{2, 1}, {3, 1}, {3, 3}, {4, 2}} {
		m := latNew(t, "jopeq", c.eps, c.rate, 2).(*jopeqHex)
		top := int64(1)
		for m.noise.tail(top+1) > 1e-14 {
			top++
		}
		tau := 6 * m.noise.tail(top+1)
		// law of the noise point, keyed by (i, j)
		noiseLaw := map[[2]int64]float64{}
		for a := -top; a <= top; a++ {
			for b := -top; b <= top; b++ {
				for e := -top; e <= top; e++ {
					noiseLaw[[2]int64{a - b, b - e}] += m.noise.prob(a) * m.noise.prob(b) * m.noise.prob(e)
				}
			}
		}
		var laws []map[int]float64
		m.cover.Rows(func(j, lo, hi int64) {
			for i := lo; i <= hi; i++ {
				law := map[int]float64{}
				for v, p := range noiseLaw {
					idx, _ := m.ball.Index(lattice.Project(i+v[0], j+v[1], m.radius))
					law[idx] += p
				}
				laws = append(laws, law)
			}
		})
		worst := 0.0
		for _, a := range laws {
			for _, b := range laws {
				for o := range m.ball.Len() {
					worst = max(worst, math.Log((a[o]+tau)/b[o]))
				}
			}
		}
		if worst > m.Epsilon()+1e-9 || m.Epsilon() > c.eps {
			t.Errorf("R=%d eps=%v: largest log-ratio %v for the pair, claimed %v", c.rate, c.eps, worst, m.Epsilon())
		}
		t.Logf("jopeq L=2 R=%d eps=%v: step %.4f, H=%d, ball %d hops, pair log-ratio %.6f <= eps' = %.6f", c.rate, c.eps, m.hex.Step, m.sens, m.radius, worst, m.Epsilon())
	}
}

// TestJoPEQHexBiasVariance measures the clamping bias and the variance of
// the hexagonal variant (40000 clients, R = 4, eps 0.5, 1 and 4): the
// variance must not exceed the unclamped closed form by more than 15%
// (projection onto a convex set only shrinks the spread), and the bias
// must stay within the bound New designs against plus 5 standard errors.
// The numbers are logged for docs/jopeq.md.
func TestJoPEQHexBiasVariance(t *testing.T) {
	rg := Range{Center: 0, Radius: 1}
	const clients = 40000
	w := []float32{0, 0, 1, 1, -1, 0.5}
	for _, c := range []struct {
		rate int
		eps  float64
	}{{4, 0.5}, {4, 1}, {4, 4}} {
		m := latNew(t, "jopeq", c.eps, c.rate, 2).(*jopeqHex)
		mean, variance := latRun(t, m, w, rg, clients)
		v := m.unclampedVar()
		bound := m.hex.Step * m.excess(m.radius-coverHops(m.cover))
		for i := range w {
			se := math.Sqrt(v / clients)
			bias := mean[i] - float64(w[i])
			if math.Abs(bias) > bound+5*se {
				t.Errorf("R=%d eps=%v: bias %v at %v exceeds the bound %v", c.rate, c.eps, bias, w[i], bound)
			}
			if variance[i] > 1.15*v {
				t.Errorf("R=%d eps=%v: variance %v at %v exceeds the unclamped %v", c.rate, c.eps, variance[i], w[i], v)
			}
			t.Logf("jopeq L=2 R=%d eps=%v: w=%v bias %.4f (bound %.4f) variance %.4f (unclamped %.4f)", c.rate, c.eps, w[i], bias, bound, variance[i], v)
		}
	}
}

// TestJoPEQCompatSecondMoments checks what jopeq-compat is built to do:
// the total error of a parameter, in normalized units, has the target's
// variance, 8/eps^2 (Laplace 2/eps) for L = 1 and sigma^2 nu/(nu-2) per
// coordinate for L = 2, within 10% (20000 parameters, one client), at eps
// 20 (L = 1) and 10 (L = 2), where the authors' quantizer range is almost
// never overloaded (at eps 4 it is, for a few percent of the parameters,
// and the clamping lowers the variance); and that it is labelled as not
// formally private.
func TestJoPEQCompatSecondMoments(t *testing.T) {
	info, _ := Lookup("jopeq-compat")
	if info.LDP || !strings.Contains(info.Summary, "not formally eps-LDP") {
		t.Errorf("jopeq-compat is labelled LDP=%v %q", info.LDP, info.Summary)
	}
	rg := Range{Center: 0, Radius: 1}
	const n = 20000
	w := make([]float32, n)
	for i := range w {
		w[i] = float32(0.3 * math.Sin(float64(i)*0.7))
	}
	for dim, eps := range map[int]float64{1: 20, 2: 10} {
		m := latNew(t, "jopeq-compat", eps, 4, dim)
		s := Slot{Private: latStream(8, 0), Shared: latStream(8, 1)}
		payload, err := m.Encode(nil, w, rg, s)
		if err != nil {
			t.Fatal(err)
		}
		if 8*len(payload) != m.Bits(n) {
			t.Fatalf("L=%d: payload %d bytes, Bits %d", dim, len(payload), m.Bits(n))
		}
		sum, _ := m.NewSum(n, rg)
		if err := sum.Add(payload, Slot{Shared: latStream(8, 1)}); err != nil {
			t.Fatal(err)
		}
		out := make([]float64, n)
		if err := sum.Mean(out); err != nil {
			t.Fatal(err)
		}
		ss, ms := 0.0, 0.0
		for i := range w {
			ms += float64(w[i]) * float64(w[i])
			e := out[i] - float64(w[i])
			ss += e * e
		}
		scale := 3 * math.Sqrt(ms/n) // the tensor's mean is about 0
		got := ss / n / (scale * scale)
		want := 8 / (eps * eps)
		if dim == 2 {
			h := m.(*compatHex)
			want = h.sigma2 * h.nu / (h.nu - 2)
			got /= 2 // s = 3 sqrt(sum of squares / pairs): sqrt2 times the scale above
		}
		if math.Abs(got/want-1) > 0.1 {
			t.Errorf("L=%d: normalized error variance %v, want %v", dim, got, want)
		}
	}
	cfg := DefaultConfig()
	cfg.Epsilon, cfg.Rate = 50, 1
	if _, err := New("jopeq-compat", cfg); err == nil {
		t.Error("eps 50 at rate 1 accepted: the matched Laplace variance would be negative")
	}
}

func TestJoPEQRejectsBadInput(t *testing.T) {
	rg := Range{Center: 0, Radius: 1}
	for _, name := range []string{"jopeq", "jopeq-compat", "laplace+sdq"} {
		cfg := DefaultConfig()
		for _, eps := range []float64{0, -1, math.NaN(), math.Inf(1)} {
			cfg.Epsilon = eps
			if _, err := New(name, cfg); err == nil {
				t.Errorf("%s: eps %v accepted", name, eps)
			}
		}
		for _, dim := range []int{1, 2} {
			m := latNew(t, name, 1, 4, dim)
			if _, err := m.Encode(nil, []float32{0}, rg, Slot{Shared: latStream(9, 0)}); err == nil {
				t.Errorf("%s: missing private coins accepted", name)
			}
			if _, err := m.Encode(nil, []float32{float32(math.NaN())}, rg, Slot{Private: latStream(9, 1), Shared: latStream(9, 0)}); err == nil {
				t.Errorf("%s: NaN accepted", name)
			}
			sum, err := m.NewSum(5, rg)
			if err != nil {
				t.Fatal(err)
			}
			for _, p := range [][]byte{nil, {1, 2, 3}, make([]byte, 40)} {
				if err := sum.Add(p, Slot{Shared: latStream(9, 0)}); err == nil && len(p) != m.Bits(5)/8 {
					t.Errorf("%s L=%d: payload of %d bytes accepted", name, dim, len(p))
				}
			}
		}
	}
}

// FuzzJoPEQSumAdd feeds arbitrary bytes to the jopeq and jopeq-compat
// sums: no panic, and an accepted payload's mean, written back to a
// float32 model as the server does, is finite and within the mechanism's
// Support (plus float32 rounding). The seeds include a jopeq-compat header
// whose mean or scale is float32 max.
func FuzzJoPEQSumAdd(f *testing.F) {
	f.Add([]byte{0, 0, 0, 0, 0, 0, 0x80, 0x3f, 0x12}, uint8(2))
	f.Add([]byte{0xff, 0xff, 0x7f, 0x7f, 0, 0, 0, 0, 0xff}, uint8(1))
	f.Add([]byte{0, 0, 0, 0, 0xff, 0xff, 0x7f, 0x7f, 0xff}, uint8(1))
	f.Add([]byte{0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 0x7f, 0x7f, 0x33, 0x01}, uint8(2))
	rg := Range{Center: 0.1, Radius: 0.05}
	var ms []Mechanism
	for _, name := range []string{"jopeq", "jopeq-compat"} {
		for _, dim := range []int{1, 2} {
			ms = append(ms, latNew(f, name, 2, 3, dim))
		}
	}
	f.Fuzz(func(t *testing.T, payload []byte, n uint8) {
		for _, m := range ms {
			sum, err := m.NewSum(int(n), rg)
			if err != nil {
				t.Fatal(err)
			}
			if sum.Add(payload, Slot{Shared: latStream(10, 0)}) != nil {
				continue
			}
			out := make([]float64, n)
			if err := sum.Mean(out); err != nil {
				t.Fatal(err)
			}
			h, err := m.(Supporter).Support(rg)
			if err != nil {
				t.Fatal(err)
			}
			model := make([]float32, n)
			for i, v := range out {
				model[i] = float32(v)
			}
			for i, v := range model {
				if x := float64(v); math.IsNaN(x) || math.IsInf(x, 0) || math.Abs(x-rg.Center) > h*(1+1e-6) {
					t.Fatalf("%s: accepted payload writes %v to the model at %d, outside %v±%v", m.Name(), v, i, rg.Center, h)
				}
			}
		}
	})
}
