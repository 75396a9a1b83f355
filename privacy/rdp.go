package privacy

import (
	"fmt"
	"math"
)

// This file holds the Renyi-DP side of the run-level accountant: each
// event's RDP curve at a fixed list of orders, composition by addition
// (Mironov 2017, Proposition 1), and the conversion to (eps, delta). It is
// the accountant for RDPCurve events and fixed-size sampling, and the
// cross-check of the PLD side.

// RDPOrders are the Renyi orders at which the RDP accountant works:
// dp_accounting's default list (1.1 to 10.9 by 0.1, 11 to 63, 128, 256,
// 512, 1024) with 64 and a few orders between 64 and 1024 added, so that
// small epsilons over many rounds find their order.
func RDPOrders() []float64 { return append([]float64(nil), rdpOrders...) }

var rdpOrders = func() []float64 {
	var out []float64
	for x := 1; x < 100; x++ {
		out = append(out, 1+float64(x)/10)
	}
	for a := 11; a <= 64; a++ {
		out = append(out, float64(a))
	}
	for _, a := range []float64{80, 96, 128, 160, 192, 256, 384, 512, 768, 1024} {
		out = append(out, a)
	}
	return out
}()

// curveOrders are rdpOrders and every integer from 2 to the largest: the
// orders at which an RDPCurve is tabulated, since the subsampling
// theorems at integer order alpha need the curve at 2..alpha.
var curveOrders = func() []float64 {
	top := int(rdpOrders[len(rdpOrders)-1])
	var out []float64
	for _, a := range rdpOrders {
		if a < 2 {
			out = append(out, a)
		}
	}
	for a := 2; a <= top; a++ {
		for _, f := range rdpOrders {
			if f > float64(a-1) && f < float64(a) && f >= 2 {
				out = append(out, f)
			}
		}
		out = append(out, float64(a))
	}
	return out
}()

// intOrders are the integers from 2 to the largest order: where a
// sampled curve is read.
var intOrders = func() []float64 {
	var out []float64
	for _, a := range curveOrders {
		if a == math.Trunc(a) {
			out = append(out, a)
		}
	}
	return out
}()

// maxIntOrder is the largest integer order the accountant uses.
var maxIntOrder = int(rdpOrders[len(rdpOrders)-1])

// logCombReal is log |C(a, i)| for real a: log Gamma(a+1) - log Gamma(i+1)
// - log Gamma(a-i+1), in absolute values (-Inf where C is 0).
func logCombReal(a, i float64) float64 {
	return lgamma(a+1) - lgamma(i+1) - lgamma(a-i+1)
}

// logErfcAny is log erfc(z) for any real z: logErfc for z >= 0, and
// directly below, where erfc is in (1, 2].
func logErfcAny(z float64) float64 {
	if z >= 0 {
		return logErfc(z)
	}
	return math.Log(math.Erfc(z))
}

// rdpGaussian is the RDP of the Gaussian mechanism with noise multiplier
// z at order a: a/(2 z^2) (Mironov 2017, Proposition 7).
func rdpGaussian(z, a float64) float64 { return a / (2 * z * z) }

// rdpPoissonGaussian is the RDP at order a of the Poisson-sampled Gaussian
// mechanism, rate q and noise multiplier z, for add/remove neighbours:
// log(A_a)/(a-1) with A_a = E_{x~N(0,z^2)}[((1-q) + q e^{(2x-1)/(2z^2)})^a],
// the larger of the two directions (Mironov, Talwar and Zhang 2019,
// Theorem 5 and Sections 3.2-3.3), computed as dp_accounting does: a
// binomial sum at integer orders, a two-sided series at fractional ones.
func rdpPoissonGaussian(q, z, a float64) float64 {
	if q == 1 {
		return rdpGaussian(z, a)
	}
	var la float64
	if a == math.Trunc(a) {
		la = logAInt(q, z, int(a))
	} else {
		la = logAFrac(q, z, a)
	}
	return max(0, la/(a-1))
}

// logAInt is log A_a at integer a: sum over i of C(a, i) (1-q)^(a-i) q^i
// e^((i^2-i)/(2 z^2)), in log space.
func logAInt(q, z float64, a int) float64 {
	lq, l1q := math.Log(q), math.Log1p(-q)
	s := math.Inf(-1)
	for i := 0; i <= a; i++ {
		fi := float64(i)
		s = logAddExp(s, logBinom(a, i)+fi*lq+float64(a-i)*l1q+(fi*fi-fi)/(2*z*z))
	}
	return s
}

// logAFrac is log A_a at fractional a: the integrals over x below and
// above z0 = z^2 ln(1/q - 1) + 1/2 expanded in two binomial series
// (Mironov, Talwar and Zhang 2019, Section 3.3), summed with the signs of
// the binomial coefficients C(a, i) (which alternate once i > a + 1) as
// tf-privacy's rdp_accountant did (dp_accounting now sums their absolute
// values, which only adds: 3% at order 1.5 in TestRDPPublished). The
// series stop, as there, once both are decreasing and their terms are
// below e^-30 of the sum; the rest is added as a geometric series at the
// last ratio, with the sum's rounding. Where the series does not converge
// in 1000 terms (small orders with large q/z) the order gets +Inf: no
// bound there.
func logAFrac(q, z, a float64) float64 {
	lq, l1q := math.Log(q), math.Log1p(-q)
	z2 := z * z
	z0 := z2*(l1q-lq) + 0.5
	var a0, a1 signedLog
	a0.l, a1.l = math.Inf(-1), math.Inf(-1)
	last0, last1 := math.Inf(-1), math.Inf(-1)
	la, _ := math.Lgamma(a + 1)
	for i := range 1000 {
		fi := float64(i)
		j := a - fi
		lgi, _ := math.Lgamma(fi + 1)
		lgj, sign := math.Lgamma(j + 1)
		coef := la - lgi - lgj
		s0 := coef + fi*lq + j*l1q + (fi*fi-fi)/(2*z2) - math.Ln2 + logErfcAny((fi-z0)/(math.Sqrt2*z))
		s1 := coef + j*lq + fi*l1q + (j*j-j)/(2*z2) - math.Ln2 + logErfcAny((z0-j)/(math.Sqrt2*z))
		a0 = a0.add(sign, s0)
		a1 = a1.add(sign, s1)
		total := logAddExp(a0.l, a1.l)
		if s0 < last0 && s1 < last1 && max(s0, s1) < total-30 {
			if a0.neg || a1.neg {
				return math.Inf(1) // cannot happen: each half is an integral of a positive function
			}
			// The terms left out, as a geometric series at the last
			// ratio, and the sum's rounding.
			r := math.Exp(max(s0-last0, s1-last1))
			rest := (math.Exp(s0-total) + math.Exp(s1-total)) * r / (1 - r)
			return total + math.Log1p(rest+1e-15*fi)
		}
		last0, last1 = s0, s1
	}
	return math.Inf(1)
}

// signedLog is a real number as its sign and the log of its magnitude.
type signedLog struct {
	neg bool
	l   float64
}

// add is x + sign e^l.
func (x signedLog) add(sign int, l float64) signedLog {
	yneg := sign < 0
	if math.IsInf(l, -1) {
		return x
	}
	if math.IsInf(x.l, -1) {
		return signedLog{yneg, l}
	}
	if x.neg == yneg {
		return signedLog{x.neg, logAddExp(x.l, l)}
	}
	// opposite signs: the larger magnitude keeps its sign
	if x.l >= l {
		return signedLog{x.neg, x.l + math.Log1p(-math.Exp(l-x.l))}
	}
	return signedLog{yneg, l + math.Log1p(-math.Exp(x.l-l))}
}

// rdpPoissonGeneral is the RDP at order a of a mechanism with RDP curve
// base (base[l] at integer order l, for l = 2..ceil(a), bounding both
// orders of the pair), Poisson-sampled at rate q, for add/remove
// neighbours: at integer a,
//
//	1/(a-1) log{ (1-q)^(a-1) (a q - q + 1) + C(a,2) q^2 (1-q)^(a-2) e^base(2)
//	             + f sum_{l=3..a} C(a,l) (1-q)^(a-l) q^l e^((l-1) base(l)) },
//
// with f = 1 where removeBounded certifies the remove direction (remove.go:
// the add direction's exact expansion then bounds both, and for the
// Gaussian's curve this is the exact rdpPoissonGaussian), else f = 3, the
// general bound of Zhu and Wang (2019, Theorem 6). At fractional a, (a-1)
// RDP(a), the cumulant generating function, is convex in a, so the line
// between the integers around a bounds it.
func rdpPoissonGeneral(q float64, base []float64, a float64) float64 {
	if q == 1 {
		return interpolateInt(func(n int) float64 { return base[n] }, a)
	}
	return interpolateInt(func(n int) float64 { return poissonGeneralInt(q, base, n) }, a)
}

func poissonGeneralInt(q float64, base []float64, a int) float64 {
	lq, l1q := math.Log(q), math.Log1p(-q)
	fa := float64(a)
	s := (fa-1)*l1q + math.Log1p((fa-1)*q)
	s = logAddExp(s, logBinom(a, 2)+2*lq+(fa-2)*l1q+base[2])
	f := math.Log(3) // log of Zhu and Wang's factor
	if a >= 3 && !math.IsInf(base[a], 1) && removeBounded(q, a) {
		f = 0
	}
	for l := 3; l <= a; l++ {
		if math.IsInf(base[l], 1) {
			return math.Inf(1)
		}
		fl := float64(l)
		s = logAddExp(s, f+logBinom(a, l)+(fa-fl)*l1q+fl*lq+(fl-1)*base[l])
	}
	return max(0, s/(fa-1))
}

// rdpFixedGeneral is the RDP at order a of a mechanism with RDP curve base
// (for replace-one neighbours) run on m of n clients drawn without
// replacement, q = m/n, for replace-one neighbours: at integer a, the
// general bound of Wang, Balle and Kasiviswanathan (2019, Theorem 9) with
// no pure-DP bound on the mechanism,
//
//	1/(a-1) log{ 1 + q^2 C(a,2) min(4 (e^base(2) - 1), 2 e^base(2))
//	             + sum_{j=3..a} 2 q^j C(a,j) e^((j-1) base(j)) },
//
// and between integers the convex interpolation of their Corollary 10;
// and never above base itself: the sampled mechanism is a mixture, over
// the same draw in both worlds, of pairs that are either equal or
// neighbours, and Renyi divergence is jointly quasi-convex (van Erven and
// Harremoes 2014, Theorem 13), which matters at high rates, where the
// factor 2 outweighs the amplification.
func rdpFixedGeneral(q float64, base []float64, a float64) float64 {
	if q == 1 {
		return interpolateInt(func(n int) float64 { return base[n] }, a)
	}
	return interpolateInt(func(n int) float64 { return fixedGeneralInt(q, base, n) }, a)
}

func fixedGeneralInt(q float64, base []float64, a int) float64 {
	lq := math.Log(q)
	e2 := base[2]
	// log(e^x - 1), without overflow for large x
	logExpm1 := func(x float64) float64 {
		if x > 1 {
			return x + math.Log1p(-math.Exp(-x))
		}
		return math.Log(math.Expm1(x))
	}
	s := logAddExp(0, 2*lq+logBinom(a, 2)+min(math.Log(4)+logExpm1(e2), math.Ln2+e2))
	for j := 3; j <= a; j++ {
		if math.IsInf(base[j], 1) {
			return math.Inf(1)
		}
		fj := float64(j)
		s = logAddExp(s, math.Ln2+fj*lq+logBinom(a, j)+(fj-1)*base[j])
	}
	return min(base[a], max(0, s/float64(a-1)))
}

// interpolateInt is f at order a >= 1, f known at integers >= 2: f(a) at
// an integer, and otherwise the chord of the convex (a-1) f(a) between
// floor(a) and ceil(a) ((a-1) f(a) is 0 at a = 1, so below 2 this is
// f(2)).
func interpolateInt(f func(int) float64, a float64) float64 {
	if a == math.Trunc(a) {
		return f(int(a))
	}
	lo, hi := math.Floor(a), math.Ceil(a)
	t := a - lo
	var clo float64
	if lo >= 2 {
		clo = (lo - 1) * f(int(lo))
	}
	chi := (hi - 1) * f(int(hi))
	if math.IsInf(chi, 1) || math.IsInf(clo, 1) {
		return math.Inf(1)
	}
	return ((1-t)*clo + t*chi) / (a - 1)
}

// pairCurve evaluates a pair's Renyi divergences, with the logs of its
// probabilities taken once: D_a(P||Q) = log(sum P^a Q^(1-a))/(a-1) for
// a > 1, over the outcomes where both are positive. It is +Inf at every
// order where P has mass that Q never gives: an outcome with Q = 0, or
// P's missing mass (unless that is float64 rounding of the sum,
// sumSlack); and symmetrically for D_a(Q||P).
type pairCurve struct {
	lp, lq       []float64
	infPQ, infQP bool
}

func newPairCurve(p, q []float64) pairCurve {
	c := pairCurve{
		infPQ: 1-sum(p) > sumSlack(len(p)),
		infQP: 1-sum(q) > sumSlack(len(q)),
	}
	for i, x := range p {
		switch {
		case x > 0 && q[i] > 0:
			c.lp = append(c.lp, math.Log(x))
			c.lq = append(c.lq, math.Log(q[i]))
		case x > 0:
			c.infPQ = true
		case q[i] > 0:
			c.infQP = true
		}
	}
	return c
}

// renyi is D_a(A||B) from the logs of A and B.
func renyi(la, lb []float64, a float64) float64 {
	if len(la) == 0 {
		return 0
	}
	top := math.Inf(-1)
	for i, x := range la {
		top = max(top, a*x+(1-a)*lb[i])
	}
	s := 0.0
	for i, x := range la {
		s += math.Exp(a*x + (1-a)*lb[i] - top)
	}
	return max(0, (top+math.Log(s))/(a-1))
}

// at is the pair's RDP at order a: the larger of D_a(P||Q) and D_a(Q||P).
func (c pairCurve) at(a float64) float64 {
	if c.infPQ || c.infQP {
		return math.Inf(1)
	}
	return max(renyi(c.lp, c.lq, a), renyi(c.lq, c.lp, a))
}

// pairRDP is the RDP of a dominating pair at order a.
func pairRDP(p Pair, a float64) float64 { return newPairCurve(p.P, p.Q).at(a) }

// baseCurve is a single mechanism's RDP at the integers 0..maxIntOrder
// (entries 0 and 1 unused).
func baseCurve(e Event) []float64 {
	f := singleRDP(e)
	out := make([]float64, maxIntOrder+1)
	for l := 2; l <= maxIntOrder; l++ {
		out[l] = f(float64(l))
	}
	return out
}

// singleRDP is a single mechanism's RDP curve.
func singleRDP(e Event) func(a float64) float64 {
	switch e := e.(type) {
	case Gaussian:
		return func(a float64) float64 { return rdpGaussian(e.Z, a) }
	case rdpTable:
		return e.at
	case Pair:
		return newPairCurve(e.P, e.Q).at
	}
	panic("privacy: singleRDP of " + eventKind(e))
}

// atomRDP is the RDP of one run of an atom at each order of orders.
func atomRDP(e Event, orders []float64) []float64 {
	out := make([]float64, len(orders))
	switch e := e.(type) {
	case PoissonSampled:
		if e.Rate == 1 {
			return atomRDP(e.Event, orders)
		}
		if g, ok := e.Event.(Gaussian); ok {
			for i, a := range orders {
				out[i] = rdpPoissonGaussian(e.Rate, g.Z, a)
			}
			return out
		}
		base := baseCurve(e.Event)
		for i, a := range orders {
			out[i] = rdpPoissonGeneral(e.Rate, base, a)
		}
	case FixedSampled:
		if e.M == e.N {
			return atomRDP(e.Event, orders)
		}
		base := baseCurve(e.Event)
		q := float64(e.M) / float64(e.N)
		for i, a := range orders {
			out[i] = rdpFixedGeneral(q, base, a)
		}
	default:
		f := singleRDP(e)
		for i, a := range orders {
			out[i] = f(a)
		}
	}
	return out
}

// rdpEpsilon is the smallest eps, over the orders, for which RDP curve rdp
// implies (eps, delta)-DP, and the order that gives it (orderEpsilon at
// each order).
func rdpEpsilon(orders, rdp []float64, delta float64) (eps, order float64) {
	eps, order = math.Inf(1), 0
	for i, a := range orders {
		if e, ok := orderEpsilon(a, rdp[i], delta); ok && e < eps {
			eps, order = e, a
		}
	}
	return max(0, eps), order
}

// orderEpsilon is the eps for which RDP r at order a implies (eps,
// delta)-DP: r + log1p(-1/a) - log(delta a)/(a-1) (Canonne, Kamath and
// Steinke 2020, Proposition 12; Asoodeh et al. 2021), or 0 where the KL
// bound delta >= sqrt(1 - e^-r) already holds. ok is false where r is
// infinite or NaN, and at orders at or below 1.01 (the formula is
// unstable there), which are not used, as in dp_accounting.
func orderEpsilon(a, r, delta float64) (eps float64, ok bool) {
	switch {
	case math.IsInf(r, 1) || math.IsNaN(r):
		return 0, false
	case delta*delta+math.Expm1(-r) > 0:
		return 0, true
	case a > 1.01:
		return r + math.Log1p(-1/a) - math.Log(delta*a)/(a-1), true
	}
	return 0, false
}

// conversion is orderEpsilon's term that does not depend on the curve (up
// to its rounding).
func conversion(a, delta float64) float64 {
	return math.Log1p(-1/a) - math.Log(delta*a)/(a-1)
}

// CurveEpsilon is the epsilon at delta, by RDP, of count runs of the
// mechanism whose curve is c: what an Accountant that composes them
// answers, for far fewer readings of c. It reads c at the accountant's
// orders (to c.MaxOrder) upwards and stops where no higher order can give
// less: a curve that grows with its order, as every Rényi divergence does,
// gives count c(a) + conversion(a') or more at any a' above a. For such a
// curve the answer is the accountant's, bit for bit; for a bound that does
// not grow, it is the least over fewer orders, never below the
// accountant's. A costly curve (pbm's, against the server, whose answer
// comes from orders near 2) is read at a dozen orders rather than a
// hundred.
func CurveEpsilon(c RDPCurve, count int, delta float64) (float64, error) {
	if err := checkDelta(delta); err != nil {
		return 0, err
	}
	if count < 1 {
		return 0, fmt.Errorf("privacy: RDP curve %q run %d times: want at least 1", c.Name, count)
	}
	orders, err := c.orders(rdpOrders)
	if err != nil {
		return 0, err
	}
	// floor[i] is the least conversion at orders[i:] (where it applies).
	floor := make([]float64, len(orders)+1)
	floor[len(orders)] = math.Inf(1)
	for i := len(orders) - 1; i >= 0; i-- {
		floor[i] = floor[i+1]
		if orders[i] > 1.01 {
			floor[i] = min(floor[i], conversion(orders[i], delta))
		}
	}
	eps := math.Inf(1)
	for i, a := range orders {
		r, err := c.at(a)
		if err != nil {
			return 0, err
		}
		total := float64(count) * r
		if e, ok := orderEpsilon(a, total, delta); ok && e < eps {
			eps = e
		}
		// A margin far above the rounding of orderEpsilon's sum.
		if total+floor[i+1] > eps+1e-9*(1+eps) {
			break
		}
	}
	if math.IsInf(eps, 1) {
		return eps, fmt.Errorf("privacy: no finite epsilon at delta %v for %d runs of %q (RDP)", delta, count, c.Name)
	}
	return max(0, eps), nil
}

// rdpDelta is the smallest delta, over the orders, for which RDP curve rdp
// implies (eps, delta)-DP: the inverse of rdpEpsilon's conversion at each
// order, delta = exp((a-1)(rdp - eps + log1p(-1/a)) - log a), and the KL
// bound sqrt(1 - e^-rdp).
func rdpDelta(orders, rdp []float64, eps float64) float64 {
	best := 0.0 // log delta; delta <= 1 always
	for i, a := range orders {
		r := rdp[i]
		if math.IsInf(r, 1) || math.IsNaN(r) {
			continue
		}
		ld := math.Inf(-1)
		if r > 0 {
			ld = 0.5 * math.Log(-math.Expm1(-r))
		}
		if a > 1.01 {
			ld = min(ld, (a-1)*(r-eps+math.Log1p(-1/a))-math.Log(a))
		}
		best = min(best, ld)
	}
	return math.Exp(best)
}
