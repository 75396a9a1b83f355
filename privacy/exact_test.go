package privacy

import (
	"math"
	"math/big"
	"math/rand/v2"
	"strconv"
	"testing"
)

// ratSumLaw is the exact law of the sum of independent Bernoulli(ps[i]).
func ratSumLaw(ps []*big.Rat) []*big.Rat {
	law := []*big.Rat{big.NewRat(1, 1)}
	one := big.NewRat(1, 1)
	for _, p := range ps {
		q := new(big.Rat).Sub(one, p)
		next := make([]*big.Rat, len(law)+1)
		for i := range next {
			next[i] = new(big.Rat)
		}
		for i, x := range law {
			next[i].Add(next[i], new(big.Rat).Mul(x, q))
			next[i+1].Add(next[i+1], new(big.Rat).Mul(x, p))
		}
		law = next
	}
	return law
}

// ratHockey is sum over outcomes of (P - F Q)_+, exactly.
func ratHockey(p, q []*big.Rat, f *big.Rat) *big.Rat {
	d := new(big.Rat)
	for i := range p {
		x := new(big.Rat).Sub(p[i], new(big.Rat).Mul(f, q[i]))
		if x.Sign() > 0 {
			d.Add(d, x)
		}
	}
	return d
}

// ratDelta is the hockey-stick divergence at F, both orderings, of the sum
// of n bits with the target's P(+1) t1 against t2 and the others' ps:
// every outcome summed, no structure assumed.
func ratDelta(t1, t2 *big.Rat, ps []*big.Rat, f *big.Rat) *big.Rat {
	p := ratSumLaw(append([]*big.Rat{t1}, ps...))
	q := ratSumLaw(append([]*big.Rat{t2}, ps...))
	a, b := ratHockey(p, q, f), ratHockey(q, p, f)
	if a.Cmp(b) < 0 {
		return b
	}
	return a
}

// ratVertexDelta is the largest ratDelta over the 2^(n-1) vertices of the
// others' box [qlo, qhi]^(n-1), the target at qhi against qlo.
func ratVertexDelta(qlo, qhi *big.Rat, n int, f *big.Rat) *big.Rat {
	worst := new(big.Rat)
	for mask := range 1 << (n - 1) {
		ps := make([]*big.Rat, n-1)
		for i := range ps {
			ps[i] = qlo
			if mask>>i&1 == 1 {
				ps[i] = qhi
			}
		}
		if d := ratDelta(qhi, qlo, ps, f); d.Cmp(worst) > 0 {
			worst = d
		}
	}
	return worst
}

func ratOf(x float64) *big.Rat { return new(big.Rat).SetFloat64(x) }

// TestSecureSumExactBruteForce checks the exact worst case in exact
// arithmetic, for probabilities that are exact binary fractions (qlo =
// 1/4, 1/8, 3/8) and n up to 8:
//   - at every vertex of the others' box, and at random points inside it
//     and random target probabilities inside [qlo, qhi], the divergence,
//     summed over every outcome in both orderings, is at most the largest
//     over the vertices (the reduction to vertices);
//   - exactWorstDelta, which searches only the count j of others at qhi and
//     the upper tails of the sum, equals that largest value to 1e-13;
//   - exactEpsilon's epsilon holds (the exact delta at it is at most delta)
//     and is tight (at an epsilon 1e-8 smaller it is above delta).
func TestSecureSumExactBruteForce(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for _, qlo := range []float64{0.25, 0.125, 0.375} {
		qhi := 1 - qlo
		rlo, rhi := ratOf(qlo), ratOf(qhi)
		inside := func() *big.Rat { // a random point of [qlo, qhi], on a grid of 64
			k := rng.IntN(65)
			x := new(big.Rat).Sub(rhi, rlo)
			x.Mul(x, big.NewRat(int64(k), 64))
			return x.Add(x, rlo)
		}
		for n := 1; n <= 8; n++ {
			for _, eps := range []float64{0, 0.05, 0.3, 0.6 * math.Log(qhi/qlo)} {
				f := ratOf(math.Exp(eps))
				want := ratVertexDelta(rlo, rhi, n, f)
				for range 10 {
					ps := make([]*big.Rat, n-1)
					for i := range ps {
						ps[i] = inside()
					}
					if d := ratDelta(inside(), inside(), ps, f); d.Cmp(want) > 0 {
						t.Fatalf("qlo %v n %d eps %v: an inner point has delta %s above the vertices' %s", qlo, n, eps, d.FloatString(12), want.FloatString(12))
					}
				}
				w, _ := want.Float64()
				if got := exactWorstDelta(qlo, qhi, n, eps); math.Abs(got-w) > 1e-13*w+1e-300 {
					t.Errorf("qlo %v n %d eps %v: exactWorstDelta %.17g, by enumeration %.17g", qlo, n, eps, got, w)
				}
			}
			for _, delta := range []float64{0.1, 1e-2, 1e-3} {
				e := exactEpsilon(qlo, qhi, n, delta)
				if at := ratVertexDelta(rlo, rhi, n, ratOf(math.Exp(e))); at.Cmp(ratOf(delta)) > 0 {
					t.Errorf("qlo %v n %d delta %v: eps %.12g has exact delta %s", qlo, n, delta, e, at.FloatString(15))
				}
				if e > 1e-8 {
					if below := ratVertexDelta(rlo, rhi, n, ratOf(math.Exp(e-1e-8))); below.Cmp(ratOf(delta)) <= 0 {
						t.Errorf("qlo %v n %d delta %v: eps %.12g is not tight: at eps-1e-8 delta %s", qlo, n, delta, e, below.FloatString(15))
					}
				}
			}
		}
	}
}

// TestTwoBinomials: the law of Binomial(j, qhi) + Binomial(N-j, qlo) from
// the recurrence against exact rationals, entry by entry (relative error
// below 1e-13) where it is computed, and the mass it leaves out (below
// 2^-1000 on each side); at qlo = 2^-10 and 2^-40 (eps0 = 6.9, 27.7) the
// recurrences rescale, several times.
func TestTwoBinomials(t *testing.T) {
	for _, qlo := range []float64{0.25, 0.125, 0x1p-10, 0x1p-40} {
		qhi := 1 - qlo
		rlo, rhi := ratOf(qlo), ratOf(qhi)
		worst := 0.0
		for _, N := range []int{1, 2, 7, 60, 120} {
			if N > 60 && qlo < 0.1 {
				continue // 60 already spans 2^-600 for them; exact rationals grow with 1/qlo
			}
			tb := newTwoBinomials(N, qlo, qhi)
			r := make([]float64, N+1)
			for _, j := range []int{0, 1, N / 3, N / 2, N - 1, N} {
				ps := make([]*big.Rat, N)
				for i := range ps {
					ps[i] = rlo
					if i < j {
						ps[i] = rhi
					}
				}
				exact := ratSumLaw(ps)
				lo, hi := tb.law(r, j, 0x1p-1000)
				left := new(big.Rat)
				for s, x := range exact {
					if s < lo || s > hi {
						left.Add(left, x)
						continue
					}
					w, _ := x.Float64()
					e := math.Abs(r[s]-w) / w
					worst = max(worst, e)
					if e > 1e-13 {
						t.Errorf("qlo %v N %d j %d s %d: %.17g, exact %.17g", qlo, N, j, s, r[s], w)
					}
				}
				if l, _ := left.Float64(); l > 0x1p-999 {
					t.Errorf("qlo %v N %d j %d: %g left out of [%d, %d]", qlo, N, j, l, lo, hi)
				}
			}
		}
		t.Logf("qlo %v: largest relative error %.3g", qlo, worst)
	}
}

// TestSecureSumExactLarge: at n = 2,000 (where every count cannot be
// enumerated) the divergence of each of a few counts j of others at qhi,
// from exactTails, against the explicit convolution of two binomials
// (math.Lgamma, every outcome, both orderings); and the exact epsilon is
// at most the blanket bound, at least the exact epsilon of those counts.
func TestSecureSumExactLarge(t *testing.T) {
	const n, eps0, delta = 2000, 1.0, 1e-6
	qlo, qhi := rrProbs(eps0)
	exact, err := SecureSumExact(eps0, n, delta)
	if err != nil {
		t.Fatal(err)
	}
	blanket, _ := SecureSumBlanket(eps0, n, delta)
	if !(exact < blanket) {
		t.Errorf("exact %.6f, blanket %.6f", exact, blanket)
	}
	eps := exact * 0.9
	ee := math.Exp(eps)
	perJ := make([]float64, n)
	j := 0
	exactTails(qlo, qhi, n, 0x1p-1000, func(p, q []float64) {
		for s := range p {
			perJ[j] = max(perJ[j], p[s]-ee*q[s])
		}
		j++
	})
	for _, j := range []int{0, 1, 1000, 1998, 1999} {
		want := exactSecureSumDelta(eps0, n, eps, []int{j, n - 1 - j})
		got := max(perJ[j], perJ[n-1-j])
		if math.Abs(got-want) > 1e-9*want {
			t.Errorf("j %d: %.12g, by convolution %.12g", j, got, want)
		}
		// The count's own epsilon is at most the worst case's.
		if e := smallestEpsilon(func(e float64) float64 { return exactSecureSumDelta(eps0, n, e, []int{j}) }, delta, eps0); e > exact {
			t.Errorf("j %d: eps %.8f above the worst case's %.8f", j, e, exact)
		}
	}
}

// TestSecureSumEpsilonCutoff: SecureSumEpsilon is the exact worst case up
// to maxExactClients and, just above, the least of the blanket and the
// exact value at the cutoff, so it does not grow with n there.
func TestSecureSumEpsilonCutoff(t *testing.T) {
	const eps0, delta = 1.0, 1e-6
	at, _ := SecureSumEpsilon(eps0, maxExactClients, delta)
	exact, _ := SecureSumExact(eps0, maxExactClients, delta)
	above, _ := SecureSumEpsilon(eps0, maxExactClients+1, delta)
	blanket, _ := SecureSumBlanket(eps0, maxExactClients+1, delta)
	if at != exact || above != min(exact, blanket) || above > at || !(exact < blanket) {
		t.Errorf("n %d: %v (exact %v); n %d: %v (blanket %v)", maxExactClients, at, exact, maxExactClients+1, above, blanket)
	}
	if _, err := SecureSumExact(eps0, maxExactClients+1, delta); err == nil {
		t.Error("SecureSumExact above maxExactClients: no error")
	}
	if _, err := SecureSumExact(maxExactEpsilon*1.01, 10, delta); err == nil {
		t.Error("SecureSumExact above maxExactEpsilon: no error")
	}
}

func BenchmarkSecureSumExact(b *testing.B) {
	for _, n := range []int{1000, 2000, 5000, 10_000} {
		b.Run(strconv.Itoa(n), func(b *testing.B) {
			for b.Loop() {
				if _, err := SecureSumExact(1, n, 1e-6); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
