package privacy

import (
	"fmt"
	"math"
)

// This file holds the guarantee against a server that sees only the sum of
// the round's one-bit messages, per parameter: the sum that secure
// aggregation reveals, or the multiset a shuffler delivers (for one-bit
// messages the two are the same information). docs/privacy.md, "Against the
// server under secure aggregation or a shuffler", states the observer and
// the assumptions.

// maxBlanketClients bounds n so that math.Lgamma's rounding (a few ulps of
// lgamma(n), about 1e-8 in the log at n = 1e6 and 1e-7 at 1e7) stays below
// the relative margin lgammaMargin that the sums are inflated by.
const (
	maxBlanketClients = 10_000_000
	lgammaMargin      = 1e-6
)

// rrProbs are the two extreme probabilities of a +1 from an eps0-LDP one-bit
// message: qlo = 1/(e^eps0+1) and qhi = 1-qlo (mech/binary.go: P(+1|w) lies
// in [qlo, qhi] for every input w in the range).
func rrProbs(eps0 float64) (qlo, qhi float64) {
	qlo = 1 / (math.Exp(eps0) + 1)
	return qlo, 1 - qlo
}

// SecureSumEpsilon is the central epsilon, at delta, of one client's
// one-bit eps0-LDP message (ldpq, or any message whose P(+1) lies in
// [1/(e^eps0+1), e^eps0/(e^eps0+1)] for every input) against an observer
// that sees only the sum of n such independent messages, the client's
// included: a server behind secure aggregation, or behind a shuffler. The
// neighbouring relation is replacing the client's input by any other; the
// other n-1 clients' inputs are arbitrary and known to the observer. It is
// one parameter of one round; ComposeSecureSum composes it.
//
// It is the exact worst case (SecureSumExact) for n up to maxExactClients
// (10,000) and eps0 up to maxExactEpsilon (30). Above, it is the privacy
// blanket bound (SecureSumBlanket), and for n up to 4 maxExactClients the
// least of that and the exact worst case at maxExactClients, which bounds
// every larger n (the sum of more clients is the sum of fewer plus
// independent bits: a post-processing). n is limited to 1e7.
func SecureSumEpsilon(eps0 float64, n int, delta float64) (float64, error) {
	if err := checkBlanket(eps0, n, delta); err != nil {
		return 0, err
	}
	if SecureSumIsExact(eps0, n) {
		return SecureSumExact(eps0, n, delta)
	}
	blanket, err := SecureSumBlanket(eps0, n, delta)
	if err != nil || eps0 > maxExactEpsilon || n > 4*maxExactClients {
		return blanket, err
	}
	exact, err := SecureSumExact(eps0, maxExactClients, delta)
	return min(blanket, exact), err
}

// SecureSumIsExact says whether SecureSumEpsilon(eps0, n, delta) is the
// exact worst case (SecureSumExact) rather than a blanket bound.
func SecureSumIsExact(eps0 float64, n int) bool {
	return eps0 <= maxExactEpsilon && n >= 1 && n <= maxExactClients
}

// SecureSumBlanket is an upper bound on SecureSumEpsilon's epsilon, for n
// up to 1e7: the privacy blanket of Balle, Bell, Gascon and Nissim ("The
// privacy blanket of the shuffle model", CRYPTO 2019), evaluated
// numerically and not through their closed form:
//
//   - Every other client's bit, Bernoulli(p) with p in [qlo, qhi],
//     qlo = 1/(e^eps0+1), is with probability gamma = 2 qlo a fair coin and
//     otherwise Bernoulli((p-qlo)/(1-2qlo)), whatever its input. Give the
//     observer which clients drew the fair coin and the bits of those that
//     did not: these are independent of the target's input, so the sum is the
//     target's bit plus Binomial(M, 1/2) plus a known offset, with
//     M ~ Binomial(n-1, gamma). The true view is a function of this one, so
//     its hockey-stick divergence is at most this one's, for every choice
//     of the others' inputs.
//   - The target's message is a mixture of Bernoulli(qhi) and
//     Bernoulli(qlo) for every input, and the hockey-stick divergence is
//     jointly convex, so the worst pair of inputs gives Bernoulli(qhi)
//     against Bernoulli(qlo). The two orderings have the same divergence
//     (reflect the count y -> M+1-y).
//   - So delta(eps) <= sum_m P[M = m] delta_m(eps), delta_m the divergence of
//     Bernoulli(qhi) + Binomial(m, 1/2) from Bernoulli(qlo) + Binomial(m, 1/2),
//     summed over the count exactly (log-space binomials from math.Lgamma).
//
// The sums over m and the count stop where a geometric bound on the rest
// is below 1e-6 delta (over m) and 1e-16 of the partial sum (over the
// count), and that bound is added; runs of m share the largest delta_m of
// the run (delta_m decreases in m: more fair coins are a post-processing);
// the total is inflated by a relative 1e-6 for Lgamma's rounding. So
// delta(eps) is an upper bound, not an estimate. The result is the least eps with delta(eps) <= delta, found by
// bisection to a relative 1e-9 and rounded up. It is an upper bound on the
// worst case, not the worst case itself: the observer does not learn which
// clients drew fair coins. Against SecureSumExact it is 10% to 31% higher
// for n from 1,000 to 10,000 and eps0 from 0.5 to 4 (TestSecureSumBruteForce
// checks the order for small n). It is at most eps0, since the message
// alone is eps0-LDP, and for n = 1 it is ln(e^eps0 - delta (e^eps0+1)), the
// exact epsilon of one message at that delta.
//
// For n = 100,000, eps0 = 4, delta = 1e-6 it gives 0.1182, below the
// upper bound of about 0.1698 that Feldman, McMillan and Talwar ("Hiding
// among the clones", 2021/2023) compute numerically, and bracket in
// [0.1675, 0.1728], for every eps0-LDP randomizer; binary randomized
// response, the case here, amplifies more: with every other input 0 the
// exact epsilon is 0.0847 (TestSecureSumFMT), a lower bound on its worst
// case.
func SecureSumBlanket(eps0 float64, n int, delta float64) (float64, error) {
	if err := checkBlanket(eps0, n, delta); err != nil {
		return 0, err
	}
	return smallestEpsilon(func(eps float64) float64 { return secureSumDelta(eps0, n, eps, delta) }, delta, eps0), nil
}

func checkBlanket(eps0 float64, n int, delta float64) error {
	if err := checkEpsilon(eps0); err != nil {
		return err
	}
	if err := checkDelta(delta); err != nil {
		return err
	}
	if n < 1 || n > maxBlanketClients {
		return fmt.Errorf("privacy: clients %d must be in 1..%d", n, maxBlanketClients)
	}
	return nil
}

// secureSumDelta is the blanket bound on delta(eps) of SecureSumBlanket; the
// truncation of the sum over M is accounted for to 1e-6 of target.
func secureSumDelta(eps0 float64, n int, eps, target float64) float64 {
	qlo, qhi := rrProbs(eps0)
	s := blanketSum(n-1, 2*qlo, 1e-6*target, func(m int) float64 { return rrBlanketDelta(m, qlo, qhi, eps) })
	return min(1, s*(1+lgammaMargin))
}

// smallestEpsilon is the least eps in [0, hi] with delta(eps) <= target, for
// delta non-increasing in eps and delta(hi) <= target (known, not
// evaluated): bisection to a relative 1e-9, returning the upper end.
func smallestEpsilon(delta func(float64) float64, target, hi float64) float64 {
	if delta(0) <= target {
		return 0
	}
	lo := 0.0
	for hi-lo > 1e-9*hi {
		mid := lo + (hi-lo)/2
		if delta(mid) <= target {
			hi = mid
		} else {
			lo = mid
		}
	}
	return hi
}

func lgamma(x float64) float64 { v, _ := math.Lgamma(x); return v }

// logBinom is ln C(n, k).
func logBinom(n, k int) float64 {
	return lgamma(float64(n)+1) - lgamma(float64(k)+1) - lgamma(float64(n-k)+1)
}

// blanketSum is an upper bound on sum over m of P[Binomial(N, g) = m] f(m)
// for f with values in [0, 1], non-increasing in m. It walks up and down
// from the mode and stops a side once a geometric bound on that side's
// remaining mass (times f at the last m, on the upper side; times 1 on the
// lower) is below tol, and adds that bound; the ratio P[m+1]/P[m] decreases
// in m, which makes the geometric bounds valid. To save evaluations of f,
// the m are taken in runs of blanketRun(mode) and each run's mass is
// weighted by f at the run's lowest m, the largest f of the run.
func blanketSum(N int, g, tol float64, f func(m int) float64) float64 {
	if N == 0 || g <= 0 {
		return f(0)
	}
	if g >= 1 {
		return f(N)
	}
	odds := g / (1 - g)
	mode := min(N, int(float64(N+1)*g))
	run := blanketRun(mode)
	p0 := math.Exp(logBinom(N, mode) + float64(mode)*math.Log(g) + float64(N-mode)*math.Log1p(-g))
	sum := 0.0
	fm := 0.0
	for m, p := mode, p0; ; m++ {
		if (m-mode)%run == 0 {
			fm = f(m)
		}
		sum += p * fm
		if m == N {
			break
		}
		r := float64(N-m) / float64(m+1) * odds // P[m+1]/P[m], and a bound on the later ratios
		if r < 1 {
			if rest := p * r / (1 - r) * fm; rest <= tol {
				sum += rest
				break
			}
		}
		p *= r
	}
	mass, low := 0.0, mode // the mass of the run being walked, down to low
	for m, p := mode, p0; m > 0; {
		s := float64(m) / (float64(N-m+1) * odds) // P[m-1]/P[m], and a bound on the earlier ratios
		if s < 1 {
			if rest := p * s / (1 - s); rest <= tol {
				sum += rest
				break
			}
		}
		p *= s
		m--
		mass, low = mass+p, m
		if (mode-m)%run == 0 {
			sum += mass * f(m)
			mass = 0
		}
	}
	if mass > 0 {
		sum += mass * f(low)
	}
	return sum
}

// blanketRun is the length of the runs of m that blanketSum weights by one
// f: 1 + mode/4000, so that f's argument varies by at most 2.5e-4 of itself
// within a run where the mass is (the divergences here change smoothly
// with the noise count m, and the looseness this adds, under 0.1% of
// delta, is checked in TestBlanketRunLooseness).
func blanketRun(mode int) int { return 1 + mode/4000 }

// rrBlanketDelta is the hockey-stick divergence E_P[(1 - e^eps Q/P)_+] of
// P = Bernoulli(qhi) + Binomial(m, 1/2) from Q = Bernoulli(qlo) +
// Binomial(m, 1/2), for eps >= 0. With b(y) = C(m+1, y)/2^(m+1),
//
//	P(y) = b(y) 2 (qhi y + qlo (m+1-y))/(m+1),  Q(y) = b(y) 2 (qlo y + qhi (m+1-y))/(m+1),
//
// so P(y) - e^eps Q(y) = b(y) (2/(m+1)) (A y - (m+1) c), A = (qhi-qlo)(1+e^eps),
// c = e^eps qhi - qlo, positive for y above (m+1) c/A >= (m+1)/2. The terms
// are summed from there up, b(y) by its ratio, until a geometric bound on
// the rest is below 1e-16 of the sum; that bound is added.
func rrBlanketDelta(m int, qlo, qhi, eps float64) float64 {
	ee := math.Exp(eps)
	A := (qhi - qlo) * (1 + ee)
	m1 := float64(m + 1)
	B := m1 * (ee*qhi - qlo)
	k0 := max(0, int(math.Floor(B/A))) // the term at B/A is not positive; start there against rounding
	if k0 > m+1 {
		return 0
	}
	// The factor A y - B is computed as (qhi y + qlo (m+1-y)) - e^eps (qlo y
	// + qhi (m+1-y)): A and B are of order e^eps (m+1), and their
	// difference lost about e^eps ulps of it, which at eps0 = 30 moved
	// delta by 1e-3 and the epsilon below the exact one.
	factor := func(y float64) float64 { return (qhi*y + qlo*(m1-y)) - ee*(qlo*y+qhi*(m1-y)) }
	top := m1 * (qhi - ee*qlo) // the largest factor, at y = m+1
	if top <= 0 {
		return 0
	}
	logw := logBinom(m+1, k0) - m1*math.Ln2 + math.Log(2/m1)
	if logw < -700 {
		// Every term is below e^-700 (m+2) top: return that bound.
		return math.Exp(logw) * float64(m+2) * top
	}
	w := math.Exp(logw)
	sum := 0.0
	for k := k0; k <= m+1; k++ {
		sum += w * max(0, factor(float64(k)))
		if k == m+1 {
			break
		}
		w *= float64(m+1-k) / float64(k+1) // w(k+1)
		if r := float64(m-k) / float64(k+2); r < 1 {
			if rest := top * w / (1 - r); rest <= 1e-16*sum {
				return sum + rest
			}
		}
	}
	return sum
}
