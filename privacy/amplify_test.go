package privacy

import (
	"math"
	"testing"
)

// binomialPMF is the full pmf of Binomial(N, p), from math.Lgamma.
func binomialPMF(N int, p float64) []float64 {
	out := make([]float64, N+1)
	for k := range out {
		out[k] = math.Exp(logBinom(N, k) + float64(k)*math.Log(p) + float64(N-k)*math.Log1p(-p))
	}
	return out
}

// convolve is the distribution of the sum of two independent counts.
func convolve(a, b []float64) []float64 {
	s := make([]float64, len(a)+len(b)-1)
	for i, x := range a {
		for k, y := range b {
			s[i+k] += x * y
		}
	}
	return s
}

// hockeyStick is E_P[(1 - e^eps Q/P)_+] for distributions on 0..len-1.
func hockeyStick(p, q []float64, eps float64) float64 {
	d, ee := 0.0, math.Exp(eps)
	for i := range max(len(p), len(q)) {
		var pi, qi float64
		if i < len(p) {
			pi = p[i]
		}
		if i < len(q) {
			qi = q[i]
		}
		d += max(0, pi-ee*qi)
	}
	return d
}

// exactSecureSumDelta is the exact worst-case delta(eps) of one eps0
// randomized response among n, seen through the sum: the others' inputs
// are enumerated by their number of ones j (only j matters), both
// orderings of the target's inputs are taken.
func exactSecureSumDelta(eps0 float64, n int, eps float64, js []int) float64 {
	qlo, qhi := rrProbs(eps0)
	worst := 0.0
	for _, j := range js {
		others := convolve(binomialPMF(j, qhi), binomialPMF(n-1-j, qlo))
		p := convolve([]float64{qlo, qhi}, others)
		q := convolve([]float64{qhi, qlo}, others)
		worst = max(worst, hockeyStick(p, q, eps), hockeyStick(q, p, eps))
	}
	return worst
}

func allCounts(n int) []int {
	js := make([]int, n)
	for j := range js {
		js[j] = j
	}
	return js
}

func TestRRBlanketDeltaExact(t *testing.T) {
	// Against the explicit distributions of Bernoulli(q) + Binomial(m, 1/2),
	// in both orderings (they agree: the reflection y -> m+1-y).
	for _, eps0 := range []float64{0.3, 1, 4} {
		qlo, qhi := rrProbs(eps0)
		for _, m := range []int{0, 1, 2, 7, 40, 300} {
			b := binomialPMF(m, 0.5)
			p := convolve([]float64{qlo, qhi}, b)
			q := convolve([]float64{qhi, qlo}, b)
			for _, eps := range []float64{0, 0.01, 0.1, 0.5, eps0 / 2, eps0} {
				got := rrBlanketDelta(m, qlo, qhi, eps)
				for _, want := range []float64{hockeyStick(p, q, eps), hockeyStick(q, p, eps)} {
					if !(got >= want*(1-1e-12)-1e-15 && got <= want*(1+1e-9)+1e-15) {
						t.Errorf("eps0 %v m %d eps %v: delta_m %.17g, explicit %.17g", eps0, m, eps, got, want)
					}
				}
			}
		}
	}
}

func TestBlanketSumBoundsTheRest(t *testing.T) {
	// blanketSum is the full sum plus at most tol on each side, never less.
	f := func(m int) float64 { return 1 / (1 + float64(m)) }
	for _, N := range []int{0, 1, 5, 100, 3000} {
		for _, g := range []float64{0.01, 0.2, 0.9} {
			full := 0.0
			for m, p := range binomialPMF(N, g) {
				full += p * f(m)
			}
			for _, tol := range []float64{1e-3, 1e-12} {
				got := blanketSum(N, g, tol, f)
				if !(got >= full*(1-1e-12) && got <= full*(1+1e-12)+2*tol) {
					t.Errorf("N %d g %v tol %g: %.17g, full sum %.17g", N, g, tol, got, full)
				}
			}
		}
	}
}

func TestSecureSumBruteForce(t *testing.T) {
	// The blanket bound is at least the exact worst case over the others'
	// inputs, and close to it: within 25% for these n (the gap is what the
	// observer does not learn about who drew a fair coin).
	for _, eps0 := range []float64{0.5, 1, 2, 4} {
		for _, n := range []int{1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 30, 60} {
			for _, delta := range []float64{1e-2, 1e-6} {
				got, err := SecureSumEpsilon(eps0, n, delta)
				if err != nil {
					t.Fatal(err)
				}
				exact := smallestEpsilon(func(e float64) float64 {
					return exactSecureSumDelta(eps0, n, e, allCounts(n))
				}, delta, eps0)
				if !(got >= exact*(1-1e-8) && got <= 1.25*exact) {
					t.Errorf("eps0 %v n %d delta %g: blanket %.6f, exact worst case %.6f", eps0, n, delta, got, exact)
				}
			}
		}
	}
}

func TestSecureSumFMT(t *testing.T) {
	// Feldman, McMillan and Talwar's numerical bound for any eps0-LDP
	// randomizer at n = 1e5, eps0 = 4, delta = 1e-6 is 0.1728 (their lower
	// bound, for a worst-case randomizer, 0.1675). Binary randomized
	// response must not do worse; and the blanket bound must not be below
	// the exact epsilon of one configuration of the others (all inputs 0),
	// a lower bound on the worst case.
	const n, eps0, delta = 100_000, 4.0, 1e-6
	got, err := SecureSumEpsilon(eps0, n, delta)
	if err != nil {
		t.Fatal(err)
	}
	qlo, qhi := rrProbs(eps0)
	others := binomialPMF(n-1, qlo)
	p := convolve([]float64{qlo, qhi}, others)
	q := convolve([]float64{qhi, qlo}, others)
	lower := smallestEpsilon(func(e float64) float64 { return max(hockeyStick(p, q, e), hockeyStick(q, p, e)) }, delta, eps0)
	t.Logf("n %d eps0 %v delta %g: blanket %.6f, exact with the others' inputs 0: %.6f", n, eps0, delta, got, lower)
	if !(got <= 0.1728 && got >= lower) {
		t.Errorf("blanket %.6f, want in [%.6f, 0.1728]", got, lower)
	}
}

func TestSecureSumShape(t *testing.T) {
	const delta = 1e-6
	for _, eps0 := range []float64{0.1, 1, 4, 8} {
		// n = 1: one message alone, exact: P(+1) e^eps0/(e^eps0+1) against
		// 1/(e^eps0+1) gives delta(eps) = (e^eps0 - e^eps)/(e^eps0+1).
		one, err := SecureSumEpsilon(eps0, 1, delta)
		if err != nil {
			t.Fatal(err)
		}
		want := math.Log(math.Exp(eps0) - delta*(math.Exp(eps0)+1))
		if math.Abs(one-want) > 1e-8*eps0 || one < want {
			t.Errorf("eps0 %v n 1: %.12g, want %.12g", eps0, one, want)
		}
		prev := math.Inf(1)
		for _, n := range []int{1, 2, 10, 100, 1000, 10_000, 100_000, 1_000_000} {
			e, err := SecureSumEpsilon(eps0, n, delta)
			if err != nil {
				t.Fatal(err)
			}
			if e > prev || e > eps0 {
				t.Errorf("eps0 %v n %d: %v, above n's predecessor %v or eps0", eps0, n, e, prev)
			}
			prev = e
		}
	}
	for _, n := range []int{10, 1000, 100_000} {
		prev := 0.0
		for _, eps0 := range []float64{0.1, 0.5, 1, 2, 4, 6} {
			e, err := SecureSumEpsilon(eps0, n, delta)
			if err != nil {
				t.Fatal(err)
			}
			if e < prev {
				t.Errorf("n %d eps0 %v: %v below the smaller eps0's %v", n, eps0, e, prev)
			}
			prev = e
		}
	}
}

func TestSecureSumErrors(t *testing.T) {
	for _, c := range []struct {
		eps0  float64
		n     int
		delta float64
	}{
		{0, 10, 1e-6}, {math.Inf(1), 10, 1e-6}, {math.NaN(), 10, 1e-6},
		{1, 0, 1e-6}, {1, maxBlanketClients + 1, 1e-6},
		{1, 10, 0}, {1, 10, 1}, {1, 10, math.NaN()},
	} {
		if _, err := SecureSumEpsilon(c.eps0, c.n, c.delta); err == nil {
			t.Errorf("SecureSumEpsilon(%v, %d, %v): no error", c.eps0, c.n, c.delta)
		}
	}
}

func BenchmarkSecureSumEpsilon(b *testing.B) {
	for b.Loop() {
		if _, err := SecureSumEpsilon(4, 1_000_000, 1e-6); err != nil {
			b.Fatal(err)
		}
	}
}

func TestBlanketRunLooseness(t *testing.T) {
	// Around a mode of 500,000 blanketSum weights runs of 26 m by one
	// divergence; against the sum with every m's own it is never lower and
	// at most 0.1% higher.
	const N, g = 1_000_000, 0.5
	qlo, qhi := rrProbs(1)
	for _, eps := range []float64{0.002, 0.004} {
		f := func(m int) float64 { return rrBlanketDelta(m, qlo, qhi, eps) }
		got := blanketSum(N, g, 1e-15, f)
		full, mass := 0.0, 0.0
		for m := N/2 - 5000; m <= N/2+5000; m++ { // +-10 sd
			p := math.Exp(logBinom(N, m) + float64(N)*math.Log(g))
			full += p * f(m)
			mass += p
		}
		t.Logf("eps %v: runs %.10g, every m %.10g, ratio %.6f", eps, got, full, got/full)
		if !(got >= full && got <= full*1.001) {
			t.Errorf("eps %v: %.10g, every m: %.10g (mass %.15f)", eps, got, full, mass)
		}
	}
}

func TestComposeSecureSum(t *testing.T) {
	const delta = 1e-6
	for _, c := range []struct {
		eps0 float64
		n    int
	}{{1, 1000}, {4, 10_000}} {
		one, err := SecureSumEpsilon(c.eps0, c.n, delta)
		if err != nil {
			t.Fatal(err)
		}
		prev := 0.0
		for _, k := range []int{1, 2, 5, 20, 100} {
			up, down, err := composeSecureSum(c.eps0, c.n, k, delta, true)
			if err != nil {
				t.Fatal(err)
			}
			if k == 1 && !(up >= one*(1-1e-9) && up <= one*1.002) {
				t.Errorf("%+v k 1: %.6f, one round %.6f", c, up, one)
			}
			if got, _ := ComposeSecureSum(c.eps0, c.n, k, delta); got > up || k == 1 && got != one {
				t.Errorf("%+v k %d: ComposeSecureSum %.6f, the loss distributions' %.6f, one round %.6f", c, k, got, up, one)
			}
			// The grid's cost: rounding down instead of up moves it by
			// under 0.5%.
			if !(down <= up && up <= down*1.005) {
				t.Errorf("%+v k %d: rounded up %.6f, down %.6f", c, k, up, down)
			}
			if up < prev {
				t.Errorf("%+v k %d: %.6f below k-1's %.6f", c, k, up, prev)
			}
			prev = up
			// Basic composition of k rounds at delta/k each.
			e, _ := SecureSumEpsilon(c.eps0, c.n, delta/float64(k))
			if basic := float64(k) * e; k > 1 && up > basic {
				t.Errorf("%+v k %d: %.6f above basic composition %.6f", c, k, up, basic)
			}
			// Advanced composition: (e, delta/(2k)) rounds, delta' = delta/2.
			e, _ = SecureSumEpsilon(c.eps0, c.n, delta/float64(2*k))
			adv, _ := Advanced(e, k, delta/2)
			if up > adv {
				t.Errorf("%+v k %d: %.6f above advanced composition %.6f", c, k, up, adv)
			}
			t.Logf("eps0 %v n %d k %d: %.6f (rounded down %.6f; basic %.6f, advanced %.6f)", c.eps0, c.n, k, up, down, float64(k)*one, adv)
		}
	}
	// One client alone: the local guarantee, composed optimally.
	got, err := ComposeSecureSum(1, 1, 10, delta)
	want, _ := Optimal(1, 10, delta)
	if err != nil || got != want {
		t.Errorf("n 1: %v %v, want Optimal's %v", got, err, want)
	}
	if _, err := ComposeSecureSum(1, 10, 0, delta); err == nil {
		t.Error("k 0: no error")
	}
}
