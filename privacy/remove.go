package privacy

import (
	"math/big"
	"sync"
)

// Poisson sampling's remove direction, for any mechanism.
//
// Run on a Poisson sample of rate q, a mechanism with outputs P (without
// the client) and Q (with it) gives M = (1-q) P + q Q or P. With L = Q/P,
// the add direction is exactly a binomial sum (Mironov, Talwar and Zhang
// 2019):
//
//	exp((a-1) D_a(M||P)) = E_P[(1-q+qL)^a] = sum_k C(a,k) (1-q)^(a-k) q^k E_P[L^k].
//
// The remove direction is exp((a-1) D_a(P||M)) = E_P[(1-q+qL)^(1-a)]. For
// a curve eps(k) that bounds both orders of the pair, E_P[L^k] =
// exp((k-1) D_k(Q||P)) and E_P[L^(1-k)] = E_Q[(P/Q)^k] = exp((k-1)
// D_k(P||Q)) are both at most exp((k-1) eps(k)), so the remove direction
// has the add direction's bound
//
//	sum_k C(a,k) (1-q)^(a-k) q^k exp((k-1) eps(k))       (eps(0) = eps(1) = 0)
//
// as soon as, for some lambda in [0, 1] and every L > 0,
//
//	psi(L) = lambda (1-q+qL)^a + (1-lambda) L (1-q+q/L)^a - (1-q+qL)^(1-a) - c (L-1) >= 0,
//
// c = psi's other terms' slope at 1 (take E_P of both sides: E_P[L-1] =
// 0, and the two sums are the add direction's expansions in E_P[L^k] and
// in E_P[L^(1-k)]). psi and its first two derivatives vanish at L = 1 for
// every lambda; removeBounded picks the lambda that zeroes the third and
// proves psi >= 0 in exact integer arithmetic: L^(a-1) (1-q+qL)^(a-1) psi,
// scaled to integer coefficients (q is a dyadic rational), is (L-1)^4
// times a polynomial whose coefficients are all nonnegative, hence
// positive on L > 0. Every (q, a) tried holds (TestRemoveCertified: a to
// 64 at q from 0.001 to 0.9, 128 at 0.1 and 0.9); one that did not would fall back to Zhu and Wang's general bound,
// as do orders above removeMaxOrder (the certificate's cost grows as a^3:
// 20 ms at 64, 0.15 s at 128).
// Without this, Zhu and Wang's bound for any curve multiplies the terms
// k >= 3 by 3, which for a mechanism with no loss at all leaves an epsilon
// of about 3 over 200 rounds at q = 0.1.

// removeBounded reports whether the remove direction of Poisson sampling
// at rate q and integer order a >= 2 is certified to have the add
// direction's bound (above). Results are cached.
func removeBounded(q float64, a int) bool {
	if a > removeMaxOrder {
		return false
	}
	key := removeKey{q, a}
	if v, ok := removeCache.Load(key); ok {
		return v.(bool)
	}
	ok := certifyRemove(q, a)
	removeCache.Store(key, ok)
	return ok
}

// removeMaxOrder is the largest order certified: L2 mechanisms' curves
// stop at 64 (fl's l2MaxOrder), and above it the certificate only
// tightens epsilons below about ln(1/delta)/64.
const removeMaxOrder = 64

type removeKey struct {
	q float64
	a int
}

var removeCache sync.Map // removeKey -> bool

// poly is a polynomial in L with integer coefficients, lowest degree
// first.
type poly []*big.Int

func (p poly) mul(r poly) poly {
	out := make(poly, len(p)+len(r)-1)
	for i := range out {
		out[i] = new(big.Int)
	}
	t := new(big.Int)
	for i, x := range p {
		if x.Sign() == 0 {
			continue
		}
		for j, y := range r {
			out[i+j].Add(out[i+j], t.Mul(x, y))
		}
	}
	return out
}

func (p poly) pow(n int) poly {
	out := poly{big.NewInt(1)}
	for range n {
		out = out.mul(p)
	}
	return out
}

// addScaled returns p + s r.
func (p poly) addScaled(s *big.Int, r poly) poly {
	out := make(poly, max(len(p), len(r)))
	for i := range out {
		out[i] = new(big.Int)
		if i < len(p) {
			out[i].Set(p[i])
		}
		if i < len(r) {
			out[i].Add(out[i], new(big.Int).Mul(s, r[i]))
		}
	}
	return out
}

// shift is L^k p.
func (p poly) shift(k int) poly {
	out := make(poly, k, k+len(p))
	for i := range out {
		out[i] = new(big.Int)
	}
	return append(out, p...)
}

// third is p's third derivative at 1.
func (p poly) third() *big.Int {
	s := new(big.Int)
	for i, x := range p {
		s.Add(s, new(big.Int).Mul(big.NewInt(int64(i*(i-1)*(i-2))), x))
	}
	return s
}

// divRoot divides p by (L - 1): the quotient and whether the remainder,
// p(1), is 0.
func (p poly) divRoot() (poly, bool) {
	n := len(p) - 1
	q := make(poly, n)
	r := new(big.Int).Set(p[n])
	for i := n - 1; i >= 0; i-- {
		q[i] = new(big.Int).Set(r)
		r.Add(r, p[i])
	}
	return q, r.Sign() == 0
}

func certifyRemove(q float64, a int) bool {
	if !(q > 0 && q < 1) || a < 2 {
		return false
	}
	qr := new(big.Rat).SetFloat64(q) // exact: q = n/D
	n, d := qr.Num(), qr.Denom()
	dn := new(big.Int).Sub(d, n)
	A := poly{dn, n} // D (1 - q + qL)
	B := poly{n, dn} // D ((1-q) L + q)
	L1 := poly{big.NewInt(-1), big.NewInt(1)}
	dPow := func(k int) *big.Int { return new(big.Int).Exp(d, big.NewInt(int64(k)), nil) }
	ak1 := A.pow(a - 1)
	// D^(2a-1) L^(a-1) (1-q+qL)^(a-1) psi, at lambda = 0 and 1:
	// lambda L^(a-1) A^(2a-1) + (1-lambda) B^a A^(a-1) - D^(2a-1) L^(a-1)
	// - (c D) D^(a-1) (L-1) L^(a-1) A^(a-1), c D = lambda a n + (1-lambda)
	// (D - a n) + (a-1) n.
	common := poly{new(big.Int).Neg(dPow(2*a - 1))}.shift(a - 1)
	tail := L1.mul(ak1).shift(a - 1) // (L-1) L^(a-1) A^(a-1)
	an := new(big.Int).Mul(big.NewInt(int64(a)), n)
	a1n := new(big.Int).Mul(big.NewInt(int64(a-1)), n)
	cd0 := new(big.Int).Add(new(big.Int).Sub(d, an), a1n) // lambda = 0
	cd1 := new(big.Int).Add(an, a1n)                      // lambda = 1
	da1 := dPow(a - 1)
	p0 := B.pow(a).mul(ak1).addScaled(big.NewInt(1), common).
		addScaled(new(big.Int).Neg(new(big.Int).Mul(cd0, da1)), tail)
	p1 := A.pow(2*a-1).shift(a-1).addScaled(big.NewInt(1), common).
		addScaled(new(big.Int).Neg(new(big.Int).Mul(cd1, da1)), tail)
	// lambda* = t0/(t0 - t1) zeroes the third derivative at 1; with the
	// fraction's signs made so that den > 0, the polynomial den
	// p(lambda*) = den p0 + t0 (p1 - p0) has integer coefficients and
	// p(lambda*)'s sign.
	t0, t1 := p0.third(), p1.third()
	den := new(big.Int).Sub(t0, t1)
	if den.Sign() < 0 {
		den.Neg(den)
		t0.Neg(t0)
	}
	if den.Sign() == 0 || t0.Sign() < 0 || t0.Cmp(den) > 0 {
		return false // lambda* is not in [0, 1]
	}
	p := p0.addScaled(new(big.Int).Sub(den, big.NewInt(1)), p0).
		addScaled(t0, p1.addScaled(big.NewInt(-1), p0))
	for range 4 {
		var zero bool
		if p, zero = p.divRoot(); !zero {
			return false
		}
	}
	positive := false
	for _, c := range p {
		if c.Sign() < 0 {
			return false
		}
		positive = positive || c.Sign() > 0
	}
	return positive
}
