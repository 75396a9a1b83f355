package privacy

import (
	"fmt"
	"math"
)

// This file holds the exact worst case of SecureSumEpsilon's setting: one
// client's eps0 randomized-response bit among n, seen through the sum.
// docs/privacy.md, "The exact worst case for one-bit messages", holds the
// proof.

// maxExactClients and maxExactEpsilon bound where SecureSumExact runs. It
// costs O(n^2): about 3 ms at n = 1,000, 17 ms at 2,000, 85 ms at 5,000
// and 0.3 s at 10,000 (BenchmarkSecureSumExact, on a shared 2-core
// machine). eps0 up to 30 (1/(e^eps0+1) down to 1e-13) is the range its
// tests cover; at 30 no client of 10,000 draws a fair coin but with
// probability 2e-9, and every bound is within 1e-6 of eps0 anyway.
const (
	maxExactClients = 10_000
	maxExactEpsilon = 30.0
	// exactMargin is the relative amount by which the computed tail
	// probabilities are moved against the result (P up, Q down): far
	// above their error (TestTwoBinomials: a few 1e-15 of each entry,
	// and the truncation, below exactMargin/10), so the epsilon is an
	// upper bound on the exact one.
	exactMargin = 1e-10
)

// SecureSumExact is the exact worst-case epsilon, at delta, of SecureSumEpsilon's
// setting: one client's eps0 randomized-response bit (P(+1) qhi or qlo =
// 1/(e^eps0+1) by its input, the extremes of every eps0-LDP one-bit
// message: ldpq) against an observer of the sum of n independent such
// bits, its own included, the other n-1 clients' P(+1) anywhere in [qlo,
// qhi] by their inputs, which the observer may know or choose. The
// neighbouring relation is replacing the client's input by any other. It
// is one parameter of one round.
//
// The worst case over the others is at a vertex of [qlo, qhi]^(n-1) (the
// hockey-stick divergence is convex in each other client's P(+1)), where
// only the number j of others at qhi matters; reflecting the count swaps
// the two orderings of the target's inputs; and the sum's likelihood ratio
// increases with it (Poisson-binomial counts are log-concave), so
//
//	e^eps = max over j in 0..n-1 and s in 1..n of (P_j[S >= s] - delta) / Q_j[S >= s],
//
// P_j, Q_j the law of the sum with the target at qhi, qlo and j others at
// qhi, n-1-j at qlo. docs/privacy.md proves each step. The law of the
// others' count, Binomial(j, qhi) + Binomial(n-1-j, qlo), comes from
// twoBinomials in O(n) per j, so a call costs O(n^2). The tails are moved
// by a relative exactMargin against the result, so it is an upper bound
// (by about 2 exactMargin at most). It is at most eps0, and for n = 1
// ln(e^eps0 - delta (e^eps0+1)).
//
// n is limited to maxExactClients and eps0 to maxExactEpsilon; above
// them SecureSumEpsilon falls back to the privacy blanket.
func SecureSumExact(eps0 float64, n int, delta float64) (float64, error) {
	if err := checkEpsilon(eps0); err != nil {
		return 0, err
	}
	if err := checkDelta(delta); err != nil {
		return 0, err
	}
	if n < 1 || n > maxExactClients {
		return 0, fmt.Errorf("privacy: exact secure sum: clients %d must be in 1..%d", n, maxExactClients)
	}
	if eps0 > maxExactEpsilon {
		return 0, fmt.Errorf("privacy: exact secure sum: epsilon %v must be at most %v", eps0, maxExactEpsilon)
	}
	qlo, qhi := rrProbs(eps0)
	return min(exactEpsilon(qlo, qhi, n, delta), eps0), nil
}

// exactEpsilon is SecureSumExact for the probabilities qlo < qhi = 1-qlo.
func exactEpsilon(qlo, qhi float64, n int, delta float64) float64 {
	// The tails are computed to within 2 floor absolute: a relative
	// exactMargin/10 of any P above delta and of its Q, which is at least
	// (qlo/qhi) P (the bit alone is eps0-DP).
	floor := max(exactMargin*delta*(qlo/qhi)/20, 0x1p-1000)
	best := 1.0 // the largest (P - delta)/Q seen: e^eps
	exactTails(qlo, qhi, n, floor, func(p, q []float64) {
		for s := range p {
			if x := p[s]*(1+exactMargin) - delta; x > best*q[s]*(1-exactMargin) {
				best = x / (q[s] * (1 - exactMargin))
			}
		}
	})
	return math.Log(best)
}

// exactWorstDelta is the exact worst-case delta at eps of SecureSumExact's
// setting, max over j and s of P_j[S >= s] - e^eps Q_j[S >= s], without
// the margin: for tests.
func exactWorstDelta(qlo, qhi float64, n int, eps float64) float64 {
	ee := math.Exp(eps)
	worst := 0.0
	exactTails(qlo, qhi, n, 0x1p-1000, func(p, q []float64) {
		for s := range p {
			worst = max(worst, p[s]-ee*q[s])
		}
	})
	return worst
}

// exactTails calls f, for each j in 0..n-1 in turn, with P_j[S >= s] and
// Q_j[S >= s] for s in a window of 0..n (p[i], q[i] for the same s), each
// within 2 floor (and rounding) of its value; below the window both are 1
// and beyond it both 0, to that precision. The slices are reused.
func exactTails(qlo, qhi float64, n int, floor float64, f func(p, q []float64)) {
	N := n - 1
	tb := newTwoBinomials(N, qlo, qhi)
	r := make([]float64, N+1)
	tail := make([]float64, N+2) // tail[s] = P[R >= s]
	p, q := make([]float64, n+1), make([]float64, n+1)
	for j := 0; j <= N; j++ {
		lo, hi := tb.law(r, j, floor)
		tail[hi+1] = 0
		for s := hi; s >= lo; s-- {
			tail[s] = tail[s+1] + r[s]
		}
		// S = X + R, X the target's bit: P[S >= s] = P[X=1] P[R >= s-1] + P[X=0] P[R >= s].
		for s := lo + 1; s <= hi+1; s++ {
			p[s], q[s] = qhi*tail[s-1]+qlo*tail[s], qlo*tail[s-1]+qhi*tail[s]
		}
		f(p[lo+1:hi+2], q[lo+1:hi+2])
	}
}

// twoBinomials computes the law of Binomial(j, qhi) + Binomial(N-j, qlo),
// qhi = 1-qlo, for any j. Its generating function
// G(z) = (qlo + qhi z)^j (qhi + qlo z)^(N-j) has
//
//	G'(z) (qlo + qhi z)(qhi + qlo z) = G(z) (j qhi (qhi + qlo z) + (N-j) qlo (qlo + qhi z)),
//
// which for the coefficients reads, with a = qlo qhi,
//
//	a (s+1) r(s+1) = c(s) r(s) + a (N-s+1) r(s-1),   c(s) = qhi^2 (j-s) + qlo^2 (N-j-s).
//
// c decreases in s. Where c(s) >= 0 the recurrence gives r(s+1) upward
// from r(-1) = 0, r(0) = 1, and where c(s) < 0 it gives r(s-1) downward
// from r(N+1) = 0, r(N) = 1, each as a sum of positive terms, so every
// value has a relative rounding error of a few ulps per step (the values
// are rescaled by 2^-+500 to stay in range). Each direction keeps the
// ratios of consecutive values, which do not depend on the scale; r is
// then built from the mode outward with them and normalized. Entries below
// about 1e-308 of the mode come out 0 or subnormal.
type twoBinomials struct {
	N           int
	lo2, hi2    float64
	qlo, qhi    float64
	upC, up     []float64 // 1/(a (s+1)) and (N-s+1)/(s+1)
	downC, down []float64 // 1/(a (N-t+1)) and (t+1)/(N-t+1)
	rho, irho   []float64 // scratch: r(s+1)/r(s) and r(s)/r(s+1), where needed
}

func newTwoBinomials(N int, qlo, qhi float64) *twoBinomials {
	a := qlo * qhi
	tb := &twoBinomials{N: N, lo2: qlo * qlo, hi2: qhi * qhi, qlo: qlo, qhi: qhi,
		upC: make([]float64, N+1), up: make([]float64, N+1),
		downC: make([]float64, N+1), down: make([]float64, N+1),
		rho: make([]float64, N), irho: make([]float64, N)}
	for s := 0; s <= N; s++ {
		tb.upC[s] = 1 / (a * float64(s+1))
		tb.up[s] = float64(N-s+1) / float64(s+1)
		tb.downC[s] = 1 / (a * float64(N-s+1))
		tb.down[s] = float64(s+1) / float64(N-s+1)
	}
	return tb
}

const (
	scaleHi = 0x1p500
	scaleLo = 0x1p-500
)

// law sets r[lo..hi], r of length N+1, to the law for j, relative to its
// value at start (about its mode) and normalized over lo..hi. The law
// outside holds at most floor of that value on each side (floor >=
// 2^-1000), and r is not set there.
func (tb *twoBinomials) law(r []float64, j int, floor float64) (lo, hi int) {
	N, rho, irho := tb.N, tb.rho, tb.irho
	if N == 0 {
		r[0] = 1
		return 0, 0
	}
	hi2, lo2 := tb.hi2, tb.lo2
	// The law is built outward from start, the integer part of its mean,
	// within 1 of its mode (Darroch 1964): upward it needs rho(s) =
	// r(s+1)/r(s) for s >= start, downward irho(s) = r(s)/r(s+1) for
	// s < start.
	start := min(N, int(float64(j)*tb.qhi+float64(N-j)*tb.qlo))
	s := 0
	// r(s+1) = (c(s) r(s) + a (N-s+1) r(s-1)) / (a (s+1)).
	for x0, x1 := 0.0, 1.0; s < N; s++ {
		cs := hi2*float64(j-s) + lo2*float64(N-j-s)
		if cs < 0 {
			break
		}
		x2 := cs*tb.upC[s]*x1 + tb.up[s]*x0
		if s >= start {
			rho[s] = x2 / x1
		} else {
			irho[s] = x1 / x2
		}
		x0, x1 = x1, x2
		if x1 > scaleHi || x1 < scaleLo {
			f := scaleLo
			if x1 < scaleLo {
				f = scaleHi
			}
			x0, x1 = x0*f, x1*f
		}
	}
	// r(t-1) = (a (t+1) r(t+1) - c(t) r(t)) / (a (N-t+1)), down to t = s+1.
	for t, y0, y1 := N, 0.0, 1.0; t > s; t-- {
		ct := hi2*float64(j-t) + lo2*float64(N-j-t)
		y2 := -ct*tb.downC[t]*y1 + tb.down[t]*y0
		if t-1 >= start {
			rho[t-1] = y1 / y2
		} else {
			irho[t-1] = y2 / y1
		}
		y0, y1 = y1, y2
		if y1 > scaleHi || y1 < scaleLo {
			f := scaleLo
			if y1 < scaleLo {
				f = scaleHi
			}
			y0, y1 = y0*f, y1*f
		}
	}
	// From start outward, until a geometric bound on the rest of the side
	// is below floor (the ratios fall away from the mode: the law is
	// log-concave).
	r[start] = 1
	sum := 1.0
	for hi = start; hi < N; hi++ {
		if x := rho[hi]; r[hi] < floor && x < 1 && r[hi]*x < floor*(1-x) {
			break
		}
		r[hi+1] = r[hi] * rho[hi]
		sum += r[hi+1]
	}
	for lo = start; lo > 0; lo-- {
		if x := irho[lo-1]; r[lo] < floor && x < 1 && r[lo]*x < floor*(1-x) {
			break
		}
		r[lo-1] = r[lo] * irho[lo-1]
		sum += r[lo-1]
	}
	inv := 1 / sum
	for t := lo; t <= hi; t++ {
		r[t] *= inv
	}
	return lo, hi
}
