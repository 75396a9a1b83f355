package privacy

import (
	"encoding/json"
	"fmt"
	"math"
	"strings"
	"testing"
)

// gdpEpsilonRef is the exact epsilon at delta of mu-GDP, the Gaussian
// mechanism with sensitivity/sigma = mu: the least eps with
// Phi(-eps/mu + mu/2) - e^eps Phi(-eps/mu - mu/2) <= delta (GaussianDelta,
// in log space), by bisection to a relative 1e-12.
func gdpEpsilonRef(mu, delta float64) float64 {
	lo, hi := 0.0, mu*mu/2+40*mu+1
	for hi-lo > 1e-12*hi {
		mid := lo + (hi-lo)/2
		if d, _ := GaussianDelta(mid, 1/mu, 1); d <= delta {
			hi = mid
		} else {
			lo = mid
		}
	}
	return hi
}

// partsEps is the epsilon at delta of composed parts, rounded up (split)
// or down, with the truncation budget the accountant uses.
func partsEps(t *testing.T, parts []pldPart, delta float64, up bool) float64 {
	t.Helper()
	width(parts, 1e-4*delta)
	d, err := composeParts(parts, 1e-4*delta, up)
	if err != nil {
		t.Fatal(err)
	}
	return max(newCurve(d[0]).epsilon(delta), newCurve(d[1]).epsilon(delta))
}

func atomsEps(t *testing.T, atoms []atom, h, delta float64, up bool) float64 {
	t.Helper()
	parts, err := pldParts(atoms, h, 1e-4*delta, up)
	if err != nil {
		t.Fatal(err)
	}
	return partsEps(t, parts, delta, up)
}

func mustCompose(t *testing.T, m Method, events ...Event) *Accountant {
	t.Helper()
	a := NewAccountant(m)
	for _, e := range events {
		if err := a.Compose(e); err != nil {
			t.Fatal(err)
		}
	}
	return a
}

func mustGuarantee(t *testing.T, a *Accountant, delta float64) Guarantee {
	t.Helper()
	g, err := a.Guarantee(delta)
	if err != nil {
		t.Fatal(err)
	}
	return g
}

// TestGaussianGDP checks that T runs of the Gaussian mechanism with noise
// multiplier Z, exactly mu-GDP with mu = sqrt(T)/Z, give the closed form's
// epsilon to 0.1%, and never less: through the accountant (which merges
// the T Gaussians into one) and through the FFT composition of T
// one-round distributions on the accountant's grid.
func TestGaussianGDP(t *testing.T) {
	for _, c := range []struct {
		z     float64
		T     int
		delta float64
	}{{1, 1, 1e-5}, {2, 10, 1e-5}, {0.8, 100, 1e-3}, {10, 1000, 1e-5}, {5, 1000, 1e-6}, {30, 1000, 1e-8}, {50, 1000, 0.01}} {
		mu := math.Sqrt(float64(c.T)) / c.z
		want := gdpEpsilonRef(mu, c.delta)
		g := mustGuarantee(t, mustCompose(t, PLD, Composed{Gaussian{c.z}, c.T}), c.delta)
		if !(g.Eps >= want*(1-1e-9) && g.Eps <= want*(1+1e-3)) {
			t.Errorf("%+v: accountant %.8g, closed form %.8g", c, g.Eps, want)
		}
		h := pldRho * want / float64(c.T)
		one, err := gaussianLaw(1/c.z).grid(h, 1e-4*c.delta/float64(4*c.T), true)
		if err != nil {
			t.Fatal(err)
		}
		fft := partsEps(t, []pldPart{{one: [2]pld{one, one}, count: c.T, sym: true}}, c.delta, true)
		if !(fft >= want*(1-1e-9) && fft <= want*(1+1e-3)) {
			t.Errorf("%+v: FFT composition %.8g, closed form %.8g", c, fft, want)
		}
		t.Logf("Z %v T %d delta %v: closed form %.6f, accountant %+.2e, FFT of T rounds %+.2e (relative)", c.z, c.T, c.delta, want, g.Eps/want-1, fft/want-1)
	}
}

// dpAccountingOrders is dp_accounting's DEFAULT_RDP_ORDERS.
func dpAccountingOrders() []float64 {
	var o []float64
	for x := 1; x < 100; x++ {
		o = append(o, 1+float64(x)/10)
	}
	for a := 11; a < 64; a++ {
		o = append(o, float64(a))
	}
	return append(o, 128, 256, 512, 1024)
}

// TestPublishedSampledGaussian checks the accountant against published
// test values of the Poisson-sampled Gaussian:
//
//   - tensorflow/privacy, tensorflow_privacy/privacy/analysis/
//     compute_dp_sgd_privacy_test.py (at 03035d5d),
//     test_compute_dp_sgd_example_privacy: 1.2 epochs, z 0.7 (0.35 with
//     microbatching), delta 1e-5, q 0.01 (120 steps) or no sampling (2
//     steps), by dp_accounting's RDP accountant (its default orders) and
//     PLD accountant (grid step 1e-4: pessimistic by at most steps x 1e-4).
//     Sampled, dp_accounting's optimal orders are fractional, where it
//     sums the series' absolute values (TestRDPPublished): that series
//     (logAFracAbs) reproduces its figures to 1e-7, and ours, exact to
//     quadrature, is at most those;
//   - google/differential-privacy, python/dp_accounting/dp_accounting/pld/
//     pld_privacy_accountant_test.py (at d986e7ff): q 0.2, z 0.5 and no
//     sampling, z sqrt(3), 3 steps: delta at eps 1 and eps at that delta,
//     to 1e-3.
func TestPublishedSampledGaussian(t *testing.T) {
	for _, c := range []struct {
		z, q     float64
		steps    int
		rdp, pld float64
	}{
		{0.7, 0.01, 120, 3.2392676, 2.4612381},
		{0.35, 0.01, 120, 22.6248601, 18.6977407},
		{0.7, 1, 2, 10.8602036, 10.1224946},
		{0.35, 1, 2, 26.2880374, 24.7160779},
	} {
		var e Event = Gaussian{c.z}
		if c.q < 1 {
			e = PoissonSampled{Rate: c.q, Event: e}
		}
		e = Composed{e, c.steps}
		orders := dpAccountingOrders()
		rdp := atomRDP(flattenOne(t, e).Event, orders)
		theirs := make([]float64, len(orders))
		for i, a := range orders {
			rdp[i] *= float64(c.steps)
			theirs[i] = rdp[i]
			if c.q < 1 && a != math.Trunc(a) {
				theirs[i] = float64(c.steps) * logAFracAbs(c.q, c.z, a) / (a - 1)
			}
		}
		got, _ := rdpEpsilon(orders, rdp, 1e-5)
		as, _ := rdpEpsilon(orders, theirs, 1e-5)
		if math.Abs(as-c.rdp) > 1e-7 || got > as {
			t.Errorf("%+v: RDP eps %.9g, with dp_accounting's series %.9g, tf-privacy %.9g", c, got, as, c.rdp)
		}
		g := mustGuarantee(t, mustCompose(t, PLD, e), 1e-5)
		if tol := float64(c.steps) * 1e-4; math.Abs(g.Eps-c.pld) > tol {
			t.Errorf("%+v: PLD eps %.9g, tf-privacy %.9g (+- %v)", c, g.Eps, c.pld, tol)
		}
		t.Logf("z %v q %v %d steps: RDP %.7f (with dp_accounting's series %.7f; tf-privacy %.7f), PLD %.7f (tf-privacy %.7f, difference %+.1e, our slack bound %.2g)", c.z, c.q, c.steps,
			got, as, c.rdp, g.Eps, c.pld, g.Eps-c.pld, g.Slack)
	}
	for _, c := range []struct {
		e     Event
		delta float64
	}{
		{Composed{PoissonSampled{Rate: 0.2, Event: Gaussian{0.5}}, 3}, 0.15594},
		{Composed{Gaussian{math.Sqrt(3)}, 3}, 0.126936},
	} {
		a := mustCompose(t, PLD, c.e)
		d, err := a.Delta(1)
		if err != nil || math.Abs(d-c.delta) > 1e-3 {
			t.Errorf("%v: delta(1) %v %v, dp_accounting %v", a, d, err, c.delta)
		}
		if e := mustGuarantee(t, a, c.delta).Eps; math.Abs(e-1) > 1e-3 {
			t.Errorf("%v: eps(%v) %v, dp_accounting 1", a, c.delta, e)
		}
	}
}

// logAFracAbs is logAFrac as dp_accounting computes it now
// (rdp_privacy_accountant.py, _compute_log_a_frac): the series' absolute
// values summed, no margin.
func logAFracAbs(q, z, a float64) float64 {
	lq, l1q := math.Log(q), math.Log1p(-q)
	z0 := z*z*(l1q-lq) + 0.5
	a0, a1 := math.Inf(-1), math.Inf(-1)
	last0, last1 := math.Inf(-1), math.Inf(-1)
	for i := range 1000 {
		fi := float64(i)
		coef := logCombReal(a, fi)
		j := a - fi
		s0 := coef + fi*lq + j*l1q + (fi*fi-fi)/(2*z*z) - math.Ln2 + logErfcAny((fi-z0)/(math.Sqrt2*z))
		s1 := coef + j*lq + fi*l1q + (j*j-j)/(2*z*z) - math.Ln2 + logErfcAny((z0-j)/(math.Sqrt2*z))
		a0, a1 = logAddExp(a0, s0), logAddExp(a1, s1)
		total := logAddExp(a0, a1)
		if s0 < last0 && s1 < last1 && max(s0, s1) < total-30 {
			return total
		}
		last0, last1 = s0, s1
	}
	return math.Inf(1)
}

func flattenOne(t *testing.T, e Event) atom {
	t.Helper()
	a, err := flatten(e, 1, nil)
	if err != nil || len(a) != 1 {
		t.Fatalf("%v: %v atoms, %v", e, len(a), err)
	}
	return a[0]
}

// TestPLDRounding checks the grid's pessimism: the connect-the-dots split
// (an upper bound) is never below rounding down (a lower bound), at the
// accountant's step and at a quarter of it, and the two are at most K h
// apart, the bound the accountant reports as Slack.
func TestPLDRounding(t *testing.T) {
	rr, _ := SecureSumPair(1, 1)
	blanket, err := SecureSumPair(1, 100)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name  string
		e     Event
		k     int
		delta float64
	}{
		{"sampled gaussian q 0.1 z 1", PoissonSampled{Rate: 0.1, Event: Gaussian{1}}, 200, 1e-5},
		{"sampled gaussian q 0.01 z 0.7", PoissonSampled{Rate: 0.01, Event: Gaussian{0.7}}, 120, 1e-5},
		{"sampled randomized response q 0.05", PoissonSampled{Rate: 0.05, Event: rr}, 200, 1e-6},
		{"sampled secure-sum blanket q 0.3", PoissonSampled{Rate: 0.3, Event: blanket}, 30, 1e-6},
		{"gaussian z 2", Gaussian{2}, 1, 1e-5},
	} {
		atoms := []atom{{c.e, c.k}}
		g := mustGuarantee(t, mustCompose(t, PLD, Composed{c.e, c.k}), c.delta)
		h := pldRho * g.Eps / float64(c.k)
		up, down := atomsEps(t, atoms, h, c.delta, true), atomsEps(t, atoms, h, c.delta, false)
		up4, down4 := atomsEps(t, atoms, h/4, c.delta, true), atomsEps(t, atoms, h/4, c.delta, false)
		if lo, hi := max(down, down4), min(up, up4); lo > hi*(1+1e-9) {
			t.Errorf("%s: rounded down %.8g (h/4: %.8g) above split %.8g (h/4: %.8g)", c.name, down, down4, up, up4)
		}
		if kh := float64(c.k) * h; up-down > kh*(1+1e-6) {
			t.Errorf("%s: split %.8g and rounded down %.8g more than K h = %.3g apart", c.name, up, down, kh)
		}
		t.Logf("%s x %d: split %.6f, rounded down %.6f (K h %.2g); at h/4 %.6f, %.6f", c.name, c.k, up, down, float64(c.k)*h, up4, down4)
	}
}

// TestPLDBelowRDP checks that the PLD accountant never gives more than the
// RDP accountant on the same events, beyond its rounding bound Slack.
func TestPLDBelowRDP(t *testing.T) {
	rr, _ := SecureSumPair(1, 1)
	for _, c := range []struct {
		name   string
		events []Event
		delta  float64
	}{
		{"DP-FedAvg q 0.1 z 1 x 1000", []Event{Composed{PoissonSampled{Rate: 0.1, Event: Gaussian{1}}, 1000}}, 1e-5},
		{"q 0.01 z 1.1 x 3000", []Event{Composed{PoissonSampled{Rate: 0.01, Event: Gaussian{1.1}}, 3000}}, 1e-5},
		{"q 0.001 z 0.8 x 1000", []Event{Composed{PoissonSampled{Rate: 0.001, Event: Gaussian{0.8}}, 1000}}, 1e-6},
		{"q 0.5 z 3 x 50", []Event{Composed{PoissonSampled{Rate: 0.5, Event: Gaussian{3}}, 50}}, 1e-5},
		{"gaussian z 10 x 100", []Event{Composed{Gaussian{10}, 100}}, 1e-6},
		{"sampled and not", []Event{Composed{PoissonSampled{Rate: 0.1, Event: Gaussian{1}}, 100}, Composed{Gaussian{5}, 10}}, 1e-5},
		{"randomized response eps0 1 x 20", []Event{Composed{rr, 20}}, 1e-6},
		{"sampled randomized response", []Event{Composed{PoissonSampled{Rate: 0.1, Event: rr}, 100}}, 1e-6},
	} {
		g := mustGuarantee(t, mustCompose(t, PLD, c.events...), c.delta)
		r := mustGuarantee(t, mustCompose(t, RDP, c.events...), c.delta)
		if g.Eps > r.Eps+g.Slack {
			t.Errorf("%s: PLD %.6g above RDP %.6g by more than its slack %.2g", c.name, g.Eps, r.Eps, g.Slack)
		}
		t.Logf("%s: PLD %.4f, RDP %.4f (PLD %.1f%% below; slack %.2g)", c.name, g.Eps, r.Eps, 100*(1-g.Eps/r.Eps), g.Slack)
	}
}

// TestRandomizedResponsePair checks a Pair through the accountant against
// an exact answer: k runs of eps0-randomized response, whose delta at any
// eps is OptimalDelta's (Kairouz, Oh and Viswanath).
func TestRandomizedResponsePair(t *testing.T) {
	rr, _ := SecureSumPair(1, 1)
	for _, k := range []int{1, 10, 100} {
		a := mustCompose(t, PLD, Composed{rr, k})
		for _, delta := range []float64{1e-3, 1e-6} {
			g := mustGuarantee(t, a, delta)
			want, _ := Optimal(1, k, delta)
			if !(g.Eps >= want*(1-1e-9) && g.Eps <= want+g.Slack) {
				t.Errorf("k %d delta %v: %.8g, exact %.8g (slack %.2g)", k, delta, g.Eps, want, g.Slack)
			}
		}
		for _, eps := range []float64{0.5, float64(k) / 3} {
			d, err := a.Delta(eps)
			want, _ := OptimalDelta(1, k, eps)
			if err != nil || d < want*(1-1e-9) || d > want*1.01+1e-12 {
				t.Errorf("k %d eps %v: delta %.8g %v, exact %.8g", k, eps, d, err, want)
			}
		}
	}
}

// TestSecureSumPairComposed checks that the secure-sum blanket pair, as a
// Pair event, composes to what ComposeSecureSum's own loss distributions
// give (between its rounded-down and rounded-up results), and that
// sampling it only helps.
func TestSecureSumPairComposed(t *testing.T) {
	for _, c := range []struct {
		eps0 float64
		n, k int
	}{{1, 100, 1}, {1, 1000, 10}, {4, 10_000, 2}} {
		p, err := SecureSumPair(c.eps0, c.n)
		if err != nil {
			t.Fatal(err)
		}
		up, down, err := composeSecureSum(c.eps0, c.n, c.k, 1e-6, true)
		if err != nil {
			t.Fatal(err)
		}
		g := mustGuarantee(t, mustCompose(t, PLD, Composed{p, c.k}), 1e-6)
		if !(g.Eps >= down*(1-1e-9) && g.Eps <= up+g.Slack) {
			t.Errorf("%+v: %.6f, ComposeSecureSum's grids %.6f (down) to %.6f (up)", c, g.Eps, down, up)
		}
		s := mustGuarantee(t, mustCompose(t, PLD, Composed{PoissonSampled{Rate: 0.3, Event: p}, c.k}), 1e-6)
		if s.Eps > g.Eps {
			t.Errorf("%+v: sampled at 0.3 %.6f, above unsampled %.6f", c, s.Eps, g.Eps)
		}
		t.Logf("eps0 %v n %d k %d: %d outcomes; %.6f (ComposeSecureSum %.6f..%.6f); sampled at 0.3: %.6f", c.eps0, c.n, c.k, len(p.P), g.Eps, down, up, s.Eps)
	}
}

// TestRoundByRound checks that composing one round at a time is the same
// accountant, to the bit, as composing the run at once, in any order.
func TestRoundByRound(t *testing.T) {
	e := PoissonSampled{Rate: 0.1, Event: Gaussian{1}}
	a := NewAccountant(Auto)
	for i := range 300 {
		if err := a.Compose(e); err != nil {
			t.Fatal(err)
		}
		if i%100 == 0 {
			if err := a.Compose(Gaussian{4}); err != nil {
				t.Fatal(err)
			}
		}
	}
	b := mustCompose(t, Auto, Composed{Gaussian{4}, 3}, Composed{e, 300})
	ea, _ := a.Epsilon(1e-5)
	eb, _ := b.Epsilon(1e-5)
	if ea != eb || a.String() != "300 x poisson(q=0.1, gaussian(z=1)) + 3 x gaussian(z=4)" {
		t.Errorf("round by round: %v (%s); at once: %v (%s)", ea, a, eb, b)
	}
}

// TestAccountantJSON checks that a saved and restored accountant answers
// the same to the bit, and saves to the same bytes.
func TestAccountantJSON(t *testing.T) {
	rr, _ := SecureSumPair(2, 1)
	curve := RDPCurve{Name: "skellam-like", Eps: func(a float64) float64 {
		if a > 100 {
			return math.Inf(1)
		}
		return a/(2*9) + a*a*1e-6
	}}
	for _, c := range []struct {
		m      Method
		events []Event
	}{
		{Auto, []Event{Composed{PoissonSampled{Rate: 0.1, Event: Gaussian{1}}, 100}, Gaussian{3}, Composed{PoissonSampled{Rate: 0.05, Event: rr}, 10}}},
		{Auto, []Event{Composed{curve, 20}, Composed{PoissonSampled{Rate: 0.2, Event: curve}, 30}}},
		{RDP, []Event{Composed{FixedSampled{M: 10, N: 100, Event: Gaussian{2}}, 5}, Composed{FixedSampled{M: 10, N: 100, Event: curve}, 7}}},
	} {
		a := mustCompose(t, c.m, c.events...)
		b1, err := json.Marshal(a)
		if err != nil {
			t.Fatal(err)
		}
		var b Accountant
		if err := json.Unmarshal(b1, &b); err != nil {
			t.Fatal(err)
		}
		b2, _ := json.Marshal(&b)
		ga, ea := a.Guarantee(1e-5)
		gb, eb := b.Guarantee(1e-5)
		da, _ := a.Delta(ga.Eps)
		db, _ := b.Delta(gb.Eps)
		if string(b1) != string(b2) || ga != gb || ea != nil || eb != nil || da != db {
			t.Errorf("%s: saved %d bytes, again %d (same: %v); %+v %v against %+v %v; delta %v, %v",
				a, len(b1), len(b2), string(b1) == string(b2), ga, ea, gb, eb, da, db)
		}
		t.Logf("%s: %d bytes, %+v", a, len(b1), ga)
	}
	for _, bad := range []struct{ js, want string }{
		{`{"format":"other","method":"auto","events":[]}`, "format"},
		{`{"format":"fedpq-accountant/1","method":"best","events":[]}`, "method"},
		{`{"format":"fedpq-accountant/1","method":"auto","events":[{"count":0,"event":{"kind":"gaussian","z":1}}]}`, "count 0"},
		{`{"format":"fedpq-accountant/1","method":"auto","events":[{"count":1,"event":{"kind":"laplace","z":1}}]}`, "laplace"},
		{`{"format":"fedpq-accountant/1","method":"auto","events":[{"count":1,"event":{"kind":"gaussian","z":-1}}]}`, "noise multiplier Z -1"},
		{`{"format":"fedpq-accountant/1","method":"auto","relation":"replace one client","events":[{"count":1,"event":{"kind":"poisson","rate":0.1,"event":{"kind":"gaussian","z":1}}}]}`, "relation"},
		{`{"format":"fedpq-accountant/1","method":"auto","events":[{"count":1,"event":{"kind":"poisson","rate":0.1}}]}`, "missing event"},
		{`[1,2]`, "saved accountant"},
	} {
		var a Accountant
		if err := json.Unmarshal([]byte(bad.js), &a); err == nil || !strings.Contains(err.Error(), bad.want) {
			t.Errorf("%s: %v, want an error with %q", bad.js, err, bad.want)
		}
	}
}

// TestAccountantErrors checks that bad events and settings are refused
// with errors that name them, and that a refused event leaves the
// accountant as it was.
func TestAccountantErrors(t *testing.T) {
	nan := math.NaN()
	g := Gaussian{1}
	for _, c := range []struct {
		e    Event
		want string
	}{
		{Gaussian{0}, "noise multiplier Z 0"},
		{Gaussian{-1}, "noise multiplier Z -1"},
		{Gaussian{nan}, "noise multiplier Z NaN"},
		{Gaussian{math.Inf(1)}, "noise multiplier Z +Inf"},
		{PoissonSampled{Rate: 0, Event: g}, "sampling rate q 0"},
		{PoissonSampled{Rate: 1.5, Event: g}, "sampling rate q 1.5"},
		{PoissonSampled{Rate: nan, Event: g}, "sampling rate q NaN"},
		{PoissonSampled{Rate: 0.1, Event: Composed{g, 2}}, "must be a Gaussian, an RDPCurve or a Pair"},
		{PoissonSampled{Rate: 0.1, Event: PoissonSampled{Rate: 0.1, Event: g}}, "must be a Gaussian"},
		{FixedSampled{M: 0, N: 10, Event: g}, "M 0 from N 10"},
		{FixedSampled{M: 11, N: 10, Event: g}, "M 11 from N 10"},
		{Composed{g, 0}, "composition count 0"},
		{Composed{g, -3}, "composition count -3"},
		{Sequence{}, "empty sequence"},
		{nil, "nil event"},
		{Sequence{g, nil}, "nil event"},
		{RDPCurve{Name: "c"}, `"c" has no Eps`},
		{RDPCurve{Name: "c", Eps: func(float64) float64 { return nan }}, `"c" is NaN at order 1.1`},
		{RDPCurve{Name: "c", Eps: func(a float64) float64 {
			if a > 6 {
				return -1
			}
			return a
		}}, `"c" is -1 at order 6.1`},
		{Pair{Name: "p", P: []float64{1}, Q: []float64{0.5, 0.5}}, `"p": P has 1 outcomes, Q 2`},
		{Pair{Name: "p", P: []float64{-0.1, 1}, Q: []float64{0.5, 0.5}}, "probability -0.1 at outcome 0"},
		{Pair{Name: "p", P: []float64{0.7, 0.7}, Q: []float64{0.5, 0.5}}, "P sums to 1.4"},
		{Pair{Name: "p"}, "at least 1"},
	} {
		a := mustCompose(t, Auto, Composed{g, 5})
		before, _ := json.Marshal(a)
		err := a.Compose(c.e)
		after, _ := json.Marshal(a)
		if err == nil || !strings.Contains(err.Error(), c.want) || string(before) != string(after) {
			t.Errorf("%#v: %v, want an error with %q (state unchanged: %v)", c.e, err, c.want, string(before) == string(after))
		}
	}
	// one run, one neighbouring relation
	a := mustCompose(t, Auto, PoissonSampled{Rate: 0.1, Event: g})
	if err := a.Compose(Sequence{g, FixedSampled{M: 1, N: 10, Event: g}}); err == nil || !strings.Contains(err.Error(), ReplaceOne) || !strings.Contains(err.Error(), AddRemove) || a.String() != "1 x poisson(q=0.1, gaussian(z=1))" {
		t.Errorf("mixed relations: %v; %s", err, a)
	}
	if a.Relation() != AddRemove {
		t.Errorf("relation %q", a.Relation())
	}
	for _, delta := range []float64{0, 1, -1, nan} {
		if _, err := a.Epsilon(delta); err == nil || !strings.Contains(err.Error(), "delta") {
			t.Errorf("delta %v: %v", delta, err)
		}
	}
	for _, eps := range []float64{0, -1, nan, math.Inf(1)} {
		if _, err := a.Delta(eps); err == nil || !strings.Contains(err.Error(), "epsilon") {
			t.Errorf("eps %v: %v", eps, err)
		}
	}
	curve := RDPCurve{Name: "c", Eps: func(a float64) float64 { return a / 8 }}
	if _, err := mustCompose(t, PLD, curve).Epsilon(1e-5); err == nil || !strings.Contains(err.Error(), "no loss distribution") {
		t.Errorf("PLD of an RDP curve: %v", err)
	}
	if _, err := mustCompose(t, Method(7), g).Epsilon(1e-5); err == nil || !strings.Contains(err.Error(), "Method(7)") {
		t.Errorf("unknown method: %v", err)
	}
	// a pair with an outcome only P gives: no epsilon below its mass
	leaky := Pair{Name: "leaky", P: []float64{0.5, 0.5}, Q: []float64{1, 0}}
	if _, err := mustCompose(t, Auto, leaky).Epsilon(1e-5); err == nil || !strings.Contains(err.Error(), "no finite epsilon") {
		t.Errorf("leaky pair: %v", err)
	}
	if e, err := mustCompose(t, Auto, leaky).Epsilon(0.6); err != nil || e != 0 {
		t.Errorf("leaky pair at delta 0.6: %v %v, want 0", e, err)
	}
	// nothing composed: nothing spent
	if e, err := NewAccountant(Auto).Epsilon(1e-5); e != 0 || err != nil {
		t.Errorf("empty: %v %v", e, err)
	}
	if d, err := NewAccountant(Auto).Delta(1); d != 0 || err != nil {
		t.Errorf("empty: %v %v", d, err)
	}
	// a run too long for the grid's precision: PLD errs, Auto answers by
	// RDP and says why
	long := Composed{PoissonSampled{Rate: 0.001, Event: Gaussian{1}}, 1_000_000}
	if _, err := mustCompose(t, PLD, long).Epsilon(1e-5); err == nil || !strings.Contains(err.Error(), "precision") {
		t.Errorf("a million rounds by PLD: %v", err)
	}
	g2 := mustGuarantee(t, mustCompose(t, Auto, long), 1e-5)
	r := mustGuarantee(t, mustCompose(t, RDP, long), 1e-5)
	if g2.Method != RDP || g2.Eps != r.Eps || !strings.Contains(g2.Note, "precision") {
		t.Errorf("a million rounds by Auto: %+v, RDP %v", g2, r.Eps)
	}
}

// TestNoiseMultiplier checks calibration: the answer meets the target and
// 3e-4 less does not; for unsampled Gaussians it is the analytic Gaussian's
// sigma; an RDP-only run calibrates by RDP; and an unreachable target is
// refused with the smallest epsilon reachable.
func TestNoiseMultiplier(t *testing.T) {
	for _, c := range []struct {
		name  string
		eps   float64
		delta float64
		run   func(z float64) Event
		tol   float64
	}{
		{"DP-FedAvg q 0.1 x 1000", 5, 1e-5, func(z float64) Event { return Composed{PoissonSampled{Rate: 0.1, Event: Gaussian{z}}, 1000} }, 3e-4},
		{"gaussian x 100", 2, 1e-6, func(z float64) Event { return Composed{Gaussian{z}, 100} }, 3e-4},
		{"rdp curve, sampled, x 500", 1, 1e-6, func(z float64) Event {
			return Composed{PoissonSampled{Rate: 0.05, Event: RDPCurve{Name: "skellam-like", Eps: func(a float64) float64 { return a/(2*z*z) + a/(z*z*z*z*100) }}}, 500}
		}, 3e-3},
	} {
		z, err := NoiseMultiplier(c.eps, c.delta, c.run)
		if err != nil {
			t.Fatal(err)
		}
		at := mustGuarantee(t, mustCompose(t, Auto, c.run(z)), c.delta)
		below := mustGuarantee(t, mustCompose(t, Auto, c.run(z*(1-c.tol))), c.delta)
		if !(at.Eps <= c.eps && below.Eps > c.eps) {
			t.Errorf("%s: z %v gives %v (%v), %v less gives %v", c.name, z, at.Eps, at.Method, c.tol, below.Eps)
		}
		t.Logf("%s: target %v at %v: z %.6f (eps %.6f by %v)", c.name, c.eps, c.delta, z, at.Eps, at.Method)
	}
	z, _ := NoiseMultiplier(2, 1e-6, func(z float64) Event { return Composed{Gaussian{z}, 100} })
	if s, _ := AnalyticGaussianSigma(2, 1e-6, 1); math.Abs(z/10/s-1) > 3e-4 {
		t.Errorf("100 Gaussians: z/10 = %v, analytic Gaussian sigma %v", z/10, s)
	}
	// a fixed part the noise cannot reduce
	run := func(z float64) Event {
		return Sequence{Composed{PoissonSampled{Rate: 0.1, Event: Gaussian{z}}, 100}, RDPCurve{Name: "fixed", Eps: func(a float64) float64 { return a / 2 }}}
	}
	reach, _ := mustCompose(t, Auto, run(MaxNoiseMultiplier)).Epsilon(1e-5)
	_, err := NoiseMultiplier(1, 1e-5, run)
	if err == nil || !strings.Contains(err.Error(), "target epsilon 1 ") || !strings.Contains(err.Error(), fmt.Sprintf("%.6g", reach)) {
		t.Errorf("unreachable: %v, want the reachable %.6g", err, reach)
	}
	for _, bad := range []struct {
		eps, delta float64
		run        func(float64) Event
		want       string
	}{
		{0, 1e-5, run, "target epsilon 0"},
		{-1, 1e-5, run, "target epsilon -1"},
		{math.NaN(), 1e-5, run, "target epsilon NaN"},
		{math.Inf(1), 1e-5, run, "target epsilon +Inf"},
		{1, 0, run, "delta 0"},
		{1, 1, run, "delta 1"},
		{1, 1e-5, nil, "event function"},
		{1, 1e-5, func(z float64) Event { return Gaussian{-z} }, "noise multiplier Z -1000"},
	} {
		if _, err := NoiseMultiplier(bad.eps, bad.delta, bad.run); err == nil || !strings.Contains(err.Error(), bad.want) {
			t.Errorf("eps %v delta %v: %v, want an error with %q", bad.eps, bad.delta, err, bad.want)
		}
	}
}

// BenchmarkDPFedAvgRun composes a 1,000-round run of the Poisson-sampled
// Gaussian (q 0.1, z 1) round by round and reads epsilon at delta 1e-5.
func BenchmarkDPFedAvgRun(b *testing.B) {
	e := PoissonSampled{Rate: 0.1, Event: Gaussian{1}}
	for range b.N {
		a := NewAccountant(Auto)
		for range 1000 {
			if err := a.Compose(e); err != nil {
				b.Fatal(err)
			}
		}
		if _, err := a.Epsilon(1e-5); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkNoiseMultiplier calibrates z for that run to eps 5.
func BenchmarkNoiseMultiplier(b *testing.B) {
	for range b.N {
		if _, err := NoiseMultiplier(5, 1e-5, func(z float64) Event { return Composed{PoissonSampled{Rate: 0.1, Event: Gaussian{z}}, 1000} }); err != nil {
			b.Fatal(err)
		}
	}
}

// TestSampledPairExact checks Poisson sampling of a Pair, in both
// directions, against an exact computation: k runs of randomized response
// sampled at rate q are, with P' = q P + (1-q) Q, binomial counts under
// both laws, so delta(eps) is a finite sum (the larger of the remove and
// add directions).
func TestSampledPairExact(t *testing.T) {
	exact := func(p, q float64, k int, eps float64) float64 {
		// delta of Binomial(k, p) against Binomial(k, q), both directions
		d := func(a, b float64) float64 {
			s := 0.0
			for j := 0; j <= k; j++ {
				lc := logBinom(k, j)
				pa := math.Exp(lc + float64(j)*math.Log(a) + float64(k-j)*math.Log1p(-a))
				pb := math.Exp(lc + float64(j)*math.Log(b) + float64(k-j)*math.Log1p(-b))
				s += max(0, pa-math.Exp(eps)*pb)
			}
			return s
		}
		return max(d(p, q), d(q, p))
	}
	for _, c := range []struct {
		eps0, q float64
		k       int
	}{{2, 0.1, 10}, {4, 0.05, 40}, {1, 0.5, 25}} {
		rr, _ := SecureSumPair(c.eps0, 1)
		p1 := c.q*rr.P[0] + (1-c.q)*rr.Q[0]
		a := mustCompose(t, PLD, Composed{PoissonSampled{Rate: c.q, Event: rr}, c.k})
		for _, eps := range []float64{0.1, 0.5, 1, 2} {
			want := exact(p1, rr.Q[0], c.k, eps)
			got, err := a.Delta(eps)
			if err != nil || got < want*(1-1e-9)-1e-15 || got > want*1.01+1e-12 {
				t.Errorf("%+v eps %v: delta %.10g %v, exact %.10g", c, eps, got, err, want)
			}
		}
		g := mustGuarantee(t, a, 1e-3)
		if d := exact(p1, rr.Q[0], c.k, g.Eps); d > 1e-3*(1+1e-9) {
			t.Errorf("%+v: eps %.8g at delta 1e-3 has exact delta %.8g", c, g.Eps, d)
		}
	}
}

// directPower is the k-fold composition of p by direct convolution (no
// FFT, no truncation beyond 1e-30), for TestFFTRounding.
func directPower(p pld, k int) pld {
	conv := func(p, q pld) pld {
		out := make([]float64, len(p.mass)+len(q.mass)-1)
		for i, x := range p.mass {
			if x != 0 {
				for j, y := range q.mass {
					out[i+j] += x * y
				}
			}
		}
		return pld{h: p.h, off: p.off + q.off, mass: out, inf: p.inf + q.inf}.trim(1e-30, true)
	}
	acc, have := pld{}, false
	for base := p; ; base = conv(base, base) {
		if k&1 == 1 {
			if have {
				acc = conv(acc, base)
			} else {
				acc, have = base, true
			}
		}
		if k >>= 1; k == 0 {
			return acc
		}
	}
}

// TestFFTRounding checks the FFT power in its Chernoff window against
// direct convolution: delta(eps), less the +Inf mass each sets aside, is
// never more than 5e-14 below (fftAllowance is 20 times that; above only
// adds), for distributions with light and heavy tails, in both
// directions.
func TestFFTRounding(t *testing.T) {
	for _, c := range []struct {
		e    Event
		k    int
		h    float64
		epss []float64
	}{
		{PoissonSampled{Rate: 0.001, Event: Gaussian{0.8}}, 1000, 1e-3, []float64{0.1, 0.3, 0.5, 1}},
		{PoissonSampled{Rate: 0.1, Event: Gaussian{1}}, 1000, 5e-3, []float64{10, 20, 25, 30}},
		{Gaussian{20}, 500, 1e-3, []float64{2, 5, 6.5}},
	} {
		for dir := range 2 {
			one, err := onePLD(c.e, dir, c.h, 1e-14, true)
			if err != nil {
				t.Fatal(err)
			}
			fft, err := one.selfCompose(c.k, 1e-14, true)
			if err != nil {
				t.Fatal(err)
			}
			d := directPower(one, c.k)
			worst, above := 0.0, 0.0
			for _, eps := range c.epss {
				df, dd := newCurve(fft).delta(eps)-fft.inf, newCurve(d).delta(eps)-d.inf
				worst, above = max(worst, dd-df), max(above, df-dd)
				if dd-df > 5e-14 {
					t.Errorf("%s x %d, direction %d, eps %v: FFT power %.12g (%d bins), direct %.12g (%d bins)", describe(c.e), c.k, dir, eps, df, len(fft.mass), dd, len(d.mass))
				}
			}
			t.Logf("%s x %d, direction %d: %d bins, FFT delta below direct by at most %.2g (above by at most %.2g)", describe(c.e), c.k, dir, len(fft.mass), worst, above)
		}
	}
}
