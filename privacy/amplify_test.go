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
	// Against the exact worst case over the others' inputs, by explicit
	// convolution over every count of others at qhi, both orderings and
	// every outcome: SecureSumExact equals it (to the bisection's 1e-9),
	// and the blanket bound is at least it and within 25% for these n
	// (the gap is what the observer does not learn about who drew a fair
	// coin).
	for _, eps0 := range []float64{0.5, 1, 2, 4} {
		for _, n := range []int{1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 30, 60} {
			for _, delta := range []float64{1e-2, 1e-6} {
				blanket, err := SecureSumBlanket(eps0, n, delta)
				if err != nil {
					t.Fatal(err)
				}
				got, err := SecureSumExact(eps0, n, delta)
				if err != nil {
					t.Fatal(err)
				}
				exact := smallestEpsilon(func(e float64) float64 {
					return exactSecureSumDelta(eps0, n, e, allCounts(n))
				}, delta, eps0)
				if !(blanket >= exact*(1-1e-8) && blanket <= 1.25*exact) {
					t.Errorf("eps0 %v n %d delta %g: blanket %.6f, exact worst case %.6f", eps0, n, delta, blanket, exact)
				}
				if math.Abs(got-exact) > 2e-9*eps0 || got > blanket*(1+1e-9) {
					t.Errorf("eps0 %v n %d delta %g: SecureSumExact %.12f, by convolution %.12f, blanket %.12f", eps0, n, delta, got, exact, blanket)
				}
			}
		}
	}
}

func TestSecureSumFMT(t *testing.T) {
	// Feldman, McMillan and Talwar's numerical upper bound for every
	// eps0-LDP randomizer at n = 1e5, eps0 = 4, delta = 1e-6 is about
	// 0.1698, which their computation brackets in [0.1675, 0.1728].
	// Binary randomized response must not do worse than the bracket's top;
	// and the blanket bound must not be below the exact epsilon of one
	// configuration of the others (all inputs 0), a lower bound on the
	// worst case.
	const n, eps0, delta = 100_000, 4.0, 1e-6
	got, err := SecureSumEpsilon(eps0, n, delta) // the blanket: n > 4 maxExactClients
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
	for _, eps0 := range []float64{0.1, 1, 4, 8, 20, 30, 40} {
		// n = 1: one message alone, exact: P(+1) e^eps0/(e^eps0+1) against
		// 1/(e^eps0+1) gives delta(eps) = (e^eps0 - e^eps)/(e^eps0+1).
		one, err := SecureSumBlanket(eps0, 1, delta)
		if err != nil {
			t.Fatal(err)
		}
		want := math.Log(math.Exp(eps0) - delta*(math.Exp(eps0)+1))
		if math.Abs(one-want) > 1e-8*eps0 || one < want {
			t.Errorf("eps0 %v n 1: %.12g, want %.12g", eps0, one, want)
		}
		prev := math.Inf(1)
		for _, n := range []int{1, 2, 10, 100, 1000, 10_000, 100_000, 1_000_000} {
			e, err := SecureSumBlanket(eps0, n, delta)
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
			e, err := SecureSumBlanket(eps0, n, delta)
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
		if _, err := SecureSumBlanket(c.eps0, c.n, c.delta); err == nil {
			t.Errorf("SecureSumBlanket(%v, %d, %v): no error", c.eps0, c.n, c.delta)
		}
		if _, err := SecureSumExact(c.eps0, c.n, c.delta); err == nil {
			t.Errorf("SecureSumExact(%v, %d, %v): no error", c.eps0, c.n, c.delta)
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
	// Around a mode of 500,000 blanketSum weights runs of 126 m by one
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
		// The loss distributions compose the blanket's pair; the round's
		// own bound (exact where it can be) composes by the basic theorem.
		one, err := SecureSumBlanket(c.eps0, c.n, delta)
		if err != nil {
			t.Fatal(err)
		}
		round, _ := SecureSumEpsilon(c.eps0, c.n, delta)
		prev := 0.0
		for _, k := range []int{1, 2, 5, 20, 100} {
			up, down, err := composeSecureSum(c.eps0, c.n, k, delta, true)
			if err != nil {
				t.Fatal(err)
			}
			if k == 1 && !(up >= one*(1-1e-9) && up <= one*1.002) {
				t.Errorf("%+v k 1: %.6f, one round %.6f", c, up, one)
			}
			e, _ := SecureSumEpsilon(c.eps0, c.n, delta/float64(k))
			local, _ := Optimal(c.eps0, k, delta)
			if got, _ := ComposeSecureSum(c.eps0, c.n, k, delta); got != min(up, float64(k)*e, local) || k == 1 && got != round {
				t.Errorf("%+v k %d: ComposeSecureSum %.6f, the loss distributions' %.6f, basic %.6f, one round %.6f", c, k, got, up, float64(k)*e, round)
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
			// Basic composition of the blanket's k rounds at delta/k each.
			e, _ = SecureSumBlanket(c.eps0, c.n, delta/float64(k))
			if basic := float64(k) * e; k > 1 && up > basic {
				t.Errorf("%+v k %d: %.6f above basic composition %.6f", c, k, up, basic)
			}
			// Advanced composition: (e, delta/(2k)) rounds, delta' = delta/2.
			e, _ = SecureSumBlanket(c.eps0, c.n, delta/float64(2*k))
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

// corbinPairSum is the law of the sum of a corbin pair's two bits with d
// shared bits, the leader's P(+1) q1 and the follower's q2 (mech/corbin.go
// in the continuum: the leader's word is (Z+U)/2^d, +1 below q1; the
// follower's (Z+U')/2^d, +1 at or above 1-q2).
func corbinPairSum(d int, q1, q2 float64) []float64 {
	cells := float64(int(1) << d)
	s := make([]float64, 3)
	for z := 0.0; z < cells; z++ {
		a := min(1, max(0, cells*q1-z))
		b := min(1, max(0, z+1-cells*(1-q2)))
		s[0] += (1 - a) * (1 - b) / cells
		s[1] += (a*(1-b) + (1-a)*b) / cells
		s[2] += a * b / cells
	}
	return s
}

func TestPairBlanketDeltaExact(t *testing.T) {
	// Against explicit convolutions, the largest over the ordered pairs.
	qlo, qhi := rrProbs(1.5)
	verts := [][3]float64{{0, 1, 0}, {qlo, qhi - qlo, qlo}, {qlo, 0, qhi}, {0, 2 * qlo, qhi - qlo}}
	for _, m := range []int{0, 1, 3, 30, 500} {
		b := binomialPMF(m, 0.5)
		for _, eps := range []float64{0, 0.2, 1, 3} {
			want := 0.0
			for i, x := range verts {
				for j, z := range verts {
					if i != j {
						want = max(want, hockeyStick(convolve(x[:], b), convolve(z[:], b), eps))
					}
				}
			}
			got := pairBlanketDelta(m, verts, eps)
			// The pmf's recurrence rounds: 1e-10 relative, far inside the
			// 1e-6 margin PairedSecureSumEpsilon adds.
			if !(got >= want*(1-1e-10) && got <= want*(1+1e-9)+1e-15) {
				t.Errorf("m %d eps %v: %.17g, explicit %.17g", m, eps, got, want)
			}
		}
	}
}

func TestPairedSecureSumBruteForce(t *testing.T) {
	// The bound is at least the exact delta of corbin pairs (d = 1, 2
	// shared bits) with the target's and partner's P(+1) on a grid of
	// [qlo, qhi] (1/2, the center, included) and the alone clients'
	// inputs enumerated by their number of ones.
	for _, eps0 := range []float64{0.5, 1} {
		qlo, qhi := rrProbs(eps0)
		grid := []float64{qlo, (qlo + 0.5) / 2, 0.5, (qhi + 0.5) / 2, qhi}
		for _, alone := range []int{10, 20, 40} {
			for _, delta := range []float64{0.05, 1e-2} {
				got, err := PairedSecureSumEpsilon(eps0, alone, delta)
				if err != nil {
					t.Fatal(err)
				}
				exact := func(eps float64) float64 {
					worst := 0.0
					for j := 0; j <= alone; j++ {
						others := convolve(binomialPMF(j, qhi), binomialPMF(alone-j, qlo))
						for _, d := range []int{1, 2} {
							for _, q2 := range grid {
								for _, q1 := range grid {
									p := convolve(corbinPairSum(d, q1, q2), others)
									for _, q1b := range grid {
										q := convolve(corbinPairSum(d, q1b, q2), others)
										worst = max(worst, hockeyStick(p, q, eps))
									}
								}
							}
						}
					}
					return worst
				}
				want := smallestEpsilon(exact, delta, 64)
				t.Logf("eps0 %v alone %d delta %g: bound %.4f, corbin exact %.4f", eps0, alone, delta, got, want)
				if !(got >= want) {
					t.Errorf("eps0 %v alone %d delta %g: bound %.6f below corbin's exact %.6f", eps0, alone, delta, got, want)
				}
			}
		}
	}
}

func TestPairedSecureSumNoAlone(t *testing.T) {
	// With no alone client, a corbin pair with the partner at the center
	// has P(S = 2) = qhi - 1/2 = tanh(eps0/2)/2 at the top input and 0 at
	// the bottom: delta is that at every eps, and there is no bound.
	for _, eps0 := range []float64{0.1, 1, 4} {
		qlo, qhi := rrProbs(eps0)
		for _, d := range []int{1, 3, 8} {
			hs := hockeyStick(corbinPairSum(d, qhi, 0.5), corbinPairSum(d, qlo, 0.5), 50)
			if want := math.Tanh(eps0/2) / 2; math.Abs(hs-want) > 1e-12 {
				t.Errorf("eps0 %v d %d: delta at eps 50 is %v, want %v", eps0, d, hs, want)
			}
		}
		got, err := PairedSecureSumEpsilon(eps0, 0, 1e-6)
		if err != nil || !math.IsInf(got, 1) {
			t.Errorf("eps0 %v, no alone client: %v %v, want +Inf", eps0, got, err)
		}
	}
}

func TestPairedSecureSumShape(t *testing.T) {
	// Above the ldpq client's blanket bound among as many independent
	// clients (the pair can move the sum by 2) and close to it for many
	// clients, where the mean shift, the same for both, dominates.
	const delta = 1e-6
	for _, eps0 := range []float64{1, 4} {
		prev := math.Inf(1)
		for _, alone := range []int{1000, 10_000, 100_000} {
			got, err := PairedSecureSumEpsilon(eps0, alone, delta)
			if err != nil {
				t.Fatal(err)
			}
			ldpq, _ := SecureSumBlanket(eps0, alone+1, delta)
			if !(got >= ldpq && got <= 1.35*ldpq && got <= prev) {
				t.Errorf("eps0 %v alone %d: %.6f, ldpq %.6f, fewer alone %.6f", eps0, alone, got, ldpq, prev)
			}
			prev = got
		}
	}
	for _, c := range []struct {
		eps0  float64
		alone int
		delta float64
	}{{0, 10, 1e-6}, {1, -1, 1e-6}, {1, 10, 0}, {1, maxBlanketClients + 1, 1e-6}} {
		if _, err := PairedSecureSumEpsilon(c.eps0, c.alone, c.delta); err == nil {
			t.Errorf("%+v: no error", c)
		}
	}
}

func BenchmarkComposeSecureSum(b *testing.B) {
	for b.Loop() {
		if _, err := ComposeSecureSum(1, 1000, 100, 1e-6); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkPairedSecureSumEpsilon(b *testing.B) {
	for b.Loop() {
		if _, err := PairedSecureSumEpsilon(4, 1_000_000, 1e-6); err != nil {
			b.Fatal(err)
		}
	}
}
