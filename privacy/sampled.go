package privacy

import (
	"fmt"
	"math"
	"sort"
)

// This file discretizes one run of each event of the run-level accountant
// into a privacy loss distribution on pld.go's grid, in each direction:
// remove (P = the output law with the client, Q without) and add (the
// reverse). Both matter: neighbours differ by the client in one direction
// or the other, and every round of a run is in the same one, so each
// direction composes on its own and the answer is the worse of the two
// (as dp_accounting's PLD accountant does).
//
// The grid keeps the result an upper bound by "connecting the dots"
// (Doroshenko, Ghazi, Kamath, Kumar and Manurangsi 2022, as dp_accounting
// does): the mass P and the Q-mass Q of the losses in [ih, (i+1)h) are
// split between the two ends, a at ih and b at (i+1)h, so that a + b = P
// and a e^-ih + b e^-(i+1)h = Q. delta(eps) = E_P[(1 - e^eps e^-L)_+] is an
// expectation of a convex function of e^-L, and the split keeps the mean
// of e^-L while spreading it, so by Jensen's inequality it can only raise
// delta, at every real eps. The split pair (P', Q'), with Q' = P' e^-L, is
// then again a dominating pair (Zhu, Dong and Wang 2022), and dominating
// pairs compose. Moving all of the bin's mass to (i+1)h (rounding up)
// dominates the split in turn, so the split's composition is never above
// rounding up's, whose composed loss is the true one moved up by less
// than h per run: K runs cost at most K h in epsilon. In practice the
// split costs far less (TestPLDRounding).

const (
	removeDir = 0
	addDir    = 1
)

// maxBins bounds every grid the accountant builds (2^22 float64s and the
// FFT's complex coefficients: about 100 MB at the peak).
const maxBins = 1 << 22

// errTooFine reports a grid that would need more than maxBins bins; the
// accountant coarsens its step and tries again.
type errTooFine struct{ bins float64 }

func (e errTooFine) Error() string {
	return fmt.Sprintf("privacy: the loss distribution needs %.3g bins, above %d", e.bins, maxBins)
}

// phi is the standard normal CDF.
func phi(x float64) float64 { return 0.5 * math.Erfc(-x/math.Sqrt2) }

// lossLaw is a continuous loss distribution L = log(P/Q) by its CDF and
// survival function under P, F(l) = P[L <= l] and S(l) = P[L > l], and
// under Q, FQ and SQ (each accurate in its own tail), on (lo, hi)
// (infinite ends allowed), with no mass at +Inf.
type lossLaw struct {
	F, S, FQ, SQ func(l float64) float64
	lo, hi       float64
}

// gaussianLaw is the loss of the Gaussian mechanism with mu = D/sigma:
// N(mu^2/2, mu^2) under P and N(-mu^2/2, mu^2) under Q (the same in both
// directions).
func gaussianLaw(mu float64) lossLaw {
	m := mu * mu / 2
	return lossLaw{
		F:  func(l float64) float64 { return phi((l - m) / mu) },
		S:  func(l float64) float64 { return phi((m - l) / mu) },
		FQ: func(l float64) float64 { return phi((l + m) / mu) },
		SQ: func(l float64) float64 { return phi((-m - l) / mu) },
		lo: math.Inf(-1), hi: math.Inf(1),
	}
}

// sampledGaussianLaw is the loss of the Poisson-sampled Gaussian (rate q <
// 1, noise multiplier z, sensitivity 1). With P = (1-q) N(0, z^2) + q
// N(1, z^2) and Q = N(0, z^2), the loss at outcome x is
// log(1 - q + q e^((2x-1)/(2z^2))), increasing in x from log(1-q):
//
//   - remove, x ~ P: P[L <= l] = F_P(x(l)), x(l) = z^2 log((e^l - 1 + q)/q) + 1/2;
//   - add, loss log(Q/P) = -that, x ~ Q, below -log(1-q):
//     P[L <= l] = P_Q[x >= x'(l)], x'(l) = z^2 log((e^-l - 1 + q)/q) + 1/2.
func sampledGaussianLaw(q, z float64, dir int) lossLaw {
	inv := func(l float64) float64 { return z*z*math.Log((math.Expm1(l)+q)/q) + 0.5 }
	lq := math.Log1p(-q)
	// the mixture's CDF and survival function in x, and N(0, z^2)'s
	fm := func(x float64) float64 { return (1-q)*phi(x/z) + q*phi((x-1)/z) }
	sm := func(x float64) float64 { return (1-q)*phi(-x/z) + q*phi((1-x)/z) }
	f0 := func(x float64) float64 { return phi(x / z) }
	s0 := func(x float64) float64 { return phi(-x / z) }
	if dir == removeDir {
		// L <= l iff x <= inv(l), for l above log(1-q)
		below := func(c func(float64) float64, l float64) float64 {
			if l <= lq {
				return 0
			}
			return c(inv(l))
		}
		above := func(c func(float64) float64, l float64) float64 {
			if l <= lq {
				return 1
			}
			return c(inv(l))
		}
		return lossLaw{
			F:  func(l float64) float64 { return below(fm, l) },
			S:  func(l float64) float64 { return above(sm, l) },
			FQ: func(l float64) float64 { return below(f0, l) },
			SQ: func(l float64) float64 { return above(s0, l) },
			lo: lq, hi: math.Inf(1),
		}
	}
	// add: P = N(0, z^2), Q = the mixture; L <= l iff x >= inv(-l), for l
	// below -log(1-q)
	below := func(c func(float64) float64, l float64) float64 {
		if l >= -lq {
			return 1
		}
		return c(inv(-l))
	}
	above := func(c func(float64) float64, l float64) float64 {
		if l >= -lq {
			return 0
		}
		return c(inv(-l))
	}
	return lossLaw{
		F:  func(l float64) float64 { return below(s0, l) },
		S:  func(l float64) float64 { return above(f0, l) },
		FQ: func(l float64) float64 { return below(sm, l) },
		SQ: func(l float64) float64 { return above(fm, l) },
		lo: math.Inf(-1), hi: -lq,
	}
}

// quantile is a loss l with F(l) <= t (lower) or S(l) <= t (upper), close
// to the largest (smallest) such: an exponential search from 0 and a
// bisection.
func (d lossLaw) quantile(t float64, upper bool) float64 {
	tail, dir := d.F, -1.0
	if upper {
		tail, dir = d.S, 1
	}
	// in has tail(in) > t, out has tail(out) <= t, out beyond in.
	var in, out float64
	if tail(0) > t {
		for step := 1.0; ; step *= 2 {
			out = dir * step
			if math.IsInf(out, 0) {
				return out
			}
			if tail(out) <= t {
				break
			}
			in = out
		}
	} else {
		for step := 1.0; ; step *= 2 {
			in = -dir * step
			if math.IsInf(in, 0) {
				return out
			}
			if tail(in) > t {
				break
			}
			out = in
		}
	}
	for range 200 {
		mid := in + (out-in)/2
		if mid == in || mid == out {
			break
		}
		if tail(mid) <= t {
			out = mid
		} else {
			in = mid
		}
	}
	return out
}

// grid discretizes d on step h: split between the ends of each bin (up)
// or rounded down. Mass at most tail/2 below the lowest kept loss goes up
// to it (up) or is dropped; at most tail/2 above the highest goes to +Inf
// (up) or down to it.
func (d lossLaw) grid(h, tail float64, up bool) (pld, error) {
	a := max(d.lo, d.quantile(tail/2, false))
	b := min(d.hi, d.quantile(tail/2, true))
	ia, ib := math.Floor(a/h), math.Ceil(b/h)
	if ib-ia+1 > maxBins {
		return pld{}, errTooFine{ib - ia + 1}
	}
	lo, n := int(ia), int(ib-ia)+1
	// mass between two edges, from the CDF below the median and the
	// survival function above, where each is accurate
	between := func(F, S func(float64) float64, x, y float64) float64 {
		if fx := F(x); fx < 0.5 {
			return max(0, F(y)-fx)
		}
		return max(0, S(x)-S(y))
	}
	mass := make([]float64, n)
	for i := 0; i+1 < n; i++ {
		x, y := float64(lo+i)*h, float64(lo+i+1)*h
		m := between(d.F, d.S, x, y)
		if !up {
			mass[i] += m
			continue
		}
		ma, mb := split(m, between(d.FQ, d.SQ, x, y), x, h)
		mass[i] += ma
		mass[i+1] += mb
	}
	below, above := d.F(ia*h), d.S(ib*h)
	var inf float64
	if up {
		mass[0] += below
		inf = above
	} else {
		mass[n-1] += above
	}
	return pld{h: h, off: lo, mass: mass, inf: inf}.trim(0, up), nil
}

// split is the connect-the-dots split of P-mass m and Q-mass mq of the
// losses in [l, l+h): a at l and b at l+h with a + b = m and
// a e^-l + b e^-(l+h) = mq, clamped to [0, m] against rounding.
func split(m, mq, l, h float64) (a, b float64) {
	if m == 0 {
		return 0, 0
	}
	r := mq / m * math.Exp(l) // in [e^-h, 1]
	b = min(m, max(0, m*(1-r)/-math.Expm1(-h)))
	return m - b, b
}

// pairPLD is the loss distribution of a pair (P, Q) in direction dir,
// Poisson-sampled at rate q (q = 1: not sampled). The missing masses are
// completed as Pair says; sampling at rate q gives the pair
// (q P + (1-q) Q, Q) for remove and (Q, q P + (1-q) Q) for add (Zhu, Dong
// and Wang 2022, Theorem 11: the remove direction by advanced joint
// convexity; the add direction because a pair that dominates for every
// real eps dominates the reversed order too, H_a(A||B) = 1 - a +
// a H_{1/a}(B||A)). With L = log(P/Q) at an outcome, the remove loss is
// log(1 - q + q e^L), distributed as the mixture (q of P's law of L, 1-q of
// Q's), and the add loss is -log(1 - q + q e^L), distributed as Q's law of
// L: an outcome P never gives (L = -Inf) has add loss -log(1-q), and one Q
// never gives has no Q-mass, so it counts in remove's +Inf mass only. That
// is why a Pair carries Q and not only P's law of L: Q's law is P's times
// e^-L only where the losses are exact. Outcomes whose loss is +Inf put their mass at +Inf;
// the others are split between the ends of their bin (up) or rounded
// down; tails of at most tail/2 are moved in as in lossLaw.grid.
func pairPLD(p Pair, q float64, dir int, h, tail float64, up bool) (pld, error) {
	P := append(append([]float64(nil), p.P...), max(0, 1-sum(p.P)), 0)
	Q := append(append([]float64(nil), p.Q...), 0, max(0, 1-sum(p.Q)))
	if q < 1 {
		for i := range P {
			P[i] = q*P[i] + (1-q)*Q[i]
		}
	}
	if dir == addDir {
		P, Q = Q, P
	}
	// Each outcome falls in the bin [ih, (i+1)h) of its loss.
	type bin struct {
		i     int
		m, mq float64
	}
	var bins []bin
	var inf float64
	for i, x := range P {
		if x == 0 {
			continue
		}
		if Q[i] == 0 {
			inf += x
			continue
		}
		k := math.Floor((math.Log(x) - math.Log(Q[i])) / h)
		if math.Abs(k) > 1<<52 {
			return pld{}, errTooFine{math.Abs(k)}
		}
		bins = append(bins, bin{int(k), x, Q[i]})
	}
	if len(bins) == 0 {
		return pld{h: h, mass: []float64{0}, inf: inf}, nil
	}
	sort.Slice(bins, func(a, b int) bool { return bins[a].i < bins[b].i })
	// Tails: at most tail/2 each side, the low one up to the lowest bin
	// kept (rounded up), the high one to +Inf.
	lo, hi := 0, len(bins)-1
	var low, high float64
	for lo < hi && low+bins[lo].m <= tail/2 {
		low += bins[lo].m
		lo++
	}
	for hi > lo && high+bins[hi].m <= tail/2 {
		high += bins[hi].m
		hi--
	}
	span := float64(bins[hi].i) - float64(bins[lo].i) + 2
	if span > maxBins {
		return pld{}, errTooFine{span}
	}
	out := pld{h: h, off: bins[lo].i, mass: make([]float64, int(span)), inf: inf}
	if up {
		out.mass[0] += low
		out.inf += high
	} else {
		out.mass[len(out.mass)-2] += high
	}
	// Merge each bin's outcomes, then split it.
	for j := lo; j <= hi; {
		b := bins[j]
		for j++; j <= hi && bins[j].i == b.i; j++ {
			b.m += bins[j].m
			b.mq += bins[j].mq
		}
		k := b.i - out.off
		if !up {
			out.mass[k] += b.m
			continue
		}
		ma, mb := split(b.m, b.mq, float64(b.i)*h, h)
		out.mass[k] += ma
		out.mass[k+1] += mb
	}
	return out.trim(0, up), nil
}

// onePLD is the loss distribution of one run of a PLD-capable atom
// (Gaussian, Pair, or either Poisson-sampled) in direction dir.
func onePLD(e Event, dir int, h, tail float64, up bool) (pld, error) {
	switch e := e.(type) {
	case Gaussian:
		return gaussianLaw(1/e.Z).grid(h, tail, up)
	case Pair:
		return pairPLD(e, 1, dir, h, tail, up)
	case PoissonSampled:
		switch in := e.Event.(type) {
		case Gaussian:
			if e.Rate == 1 {
				return gaussianLaw(1/in.Z).grid(h, tail, up)
			}
			return sampledGaussianLaw(e.Rate, in.Z, dir).grid(h, tail, up)
		case Pair:
			return pairPLD(in, e.Rate, dir, h, tail, up)
		}
	}
	return pld{}, fmt.Errorf("privacy: no loss distribution for %s events", eventKind(e))
}

// pldCapable says whether the PLD accountant handles atom e.
func pldCapable(e Event) bool {
	switch e := e.(type) {
	case Gaussian, Pair:
		return true
	case PoissonSampled:
		switch e.Event.(type) {
		case Gaussian, Pair:
			return true
		}
	}
	return false
}

// SecureSumPair is the blanket pair of SecureSumBlanket (one client's
// eps0-LDP bit among n, seen through their sum, one parameter and one
// round) as a Pair, so that an Accountant can compose it with other events
// and sample it. Its losses are split between the points of a grid of step
// sd/1024, sd the loss's standard deviation at the most likely noise
// count (sampled.go's split, which gives again a dominating pair), and
// mass at most 1e-16 in the tails is moved up to the lowest loss kept or
// to +Inf (an outcome Q never gives), as blanketPLD does. The pair is
// symmetric, like the blanket's. It has some ten thousand outcomes.
func SecureSumPair(eps0 float64, n int) (Pair, error) {
	if err := checkBlanket(eps0, n, 0.5); err != nil {
		return Pair{}, err
	}
	_, sd := blanketLossMoments(eps0, n)
	h := sd / 1024
	if n == 1 || !(h > 0) {
		qlo, qhi := rrProbs(eps0)
		return Pair{Name: fmt.Sprintf("randomized response eps0=%g", eps0), P: []float64{qhi, qlo}, Q: []float64{qlo, qhi}}, nil
	}
	g := blanketPLD(eps0, n, h, 1e-16, roundSplit)
	if len(g.mass) > maxBins {
		return Pair{}, errTooFine{float64(len(g.mass))}
	}
	p := Pair{Name: fmt.Sprintf("secure sum blanket eps0=%g n=%d", eps0, n)}
	for i, m := range g.mass {
		if m > 0 {
			p.P = append(p.P, m)
			p.Q = append(p.Q, m*math.Exp(-float64(g.off+i)*h))
		}
	}
	if g.inf > 0 {
		p.P = append(p.P, g.inf)
		p.Q = append(p.Q, 0)
	}
	// The binomial weights' rounding can leave the sums a relative 1e-11
	// above 1; a pair's probabilities sum to at most 1.
	if s := max(sum(p.P), sum(p.Q)); s > 1 {
		for i := range p.P {
			p.P[i] /= s
			p.Q[i] /= s
		}
	}
	return p, nil
}
