package mech

import (
	"fmt"
	"math"
	"runtime"
	"slices"
	"sort"
	"sync"
)

// This file holds pbm's accounting: a rigorous bound, computed
// numerically, on the Renyi divergence of one round's sum for the zero-out
// of one client.
//
// One coordinate. The server sees Z = Y + W, Y ~ Binomial(m, 1/2 + beta)
// the target's trials (beta = theta y/c, |beta| <= theta, 0 once zeroed
// out) and W the other clients' (n-1) m trials, independent Bernoullis of
// probabilities q_i in [1/2 - theta, 1/2 + theta] that the server may know
// or choose. Write P_beta for the law of Z. Its exponentiated divergences
//
//	F(beta) = sum_z P_beta(z)^alpha P_0(z)^(1-alpha)    (the order (x, 0))
//	R(beta) = sum_z P_0(z)^alpha P_beta(z)^(1-alpha)    (the order (0, x))
//
// are e^((alpha-1) D_alpha) of the two orders, for any real alpha > 1.
//
//  1. Vertices. (p, q) -> p^alpha q^(1-alpha) is jointly convex, and P_beta,
//     P_0 are both affine in each q_i, so F and R are convex in each q_i and
//     their largest value over [1/2-theta, 1/2+theta]^((n-1)m) is at a
//     vertex; the trials are exchangeable, so only the number j of them at
//     1/2+theta matters: W_j = Binomial(j, 1/2+theta) + Binomial(N-j,
//     1/2-theta), N = (n-1) m, j = 0..N. (privacy.SecureSumExact uses the
//     same reduction for one-bit messages.)
//  2. Monotone in |beta|. For 0 <= b < b', each trial of bias 1/2+b is the
//     mixture of one of bias 1/2+b' (weight b/b') and a fair one, so P_b
//     is a mixture over J ~ Binomial(m, b/b') of the laws P^(J) with J of
//     the target's trials at 1/2+b' and m-J fair. F and R are convex in
//     P_beta (P_0 fixed), so F(b) <= sum_J w_J F(P^(J)), and F(P^(J))
//     grows with J: moving one trial's bias up from 0, the derivative of
//     the convex F is alpha sum_z L(z)^(alpha-1) (W'(z-1) - W'(z)) >= 0,
//     W' the law of the rest, because L = P^(J)/P_0 increases with z
//     (binomials of higher bias have a monotone likelihood ratio, and
//     convolving both with the log-concave law of a sum of Bernoullis
//     keeps it); for R the derivative is (1-alpha) times a sum of
//     (1/L)^alpha differences, >= 0 as well. So F(b) <= F(b'), R(b) <=
//     R(b'). The same argument with the trials' biases mixed between any
//     b_a < b_b bounds F and R between two biases by the Bernstein
//     polynomial sum_J Binomial(m, t)(J) F_J, F_J with J trials at b_b and
//     m-J at b_a: a chord for m = 1; it grows with t.
//  3. Near zero. With L = P_beta/P_0 = 1 + x, x = sum_{k>=1} (2 beta)^k
//     rho_k(Z), rho_k(z) = E[e_k(s) | Z = z] (e_k the elementary symmetric
//     polynomials of the target's trials as +-1, under P_0), E[x] = 0, and
//     for beta <= beta1, |x(z)| <= (beta/beta1) X(z), X(z) = sum_k
//     (2 beta1)^k |rho_k(z)|. Taylor's theorem for (1+x)^alpha and
//     (1+x)^(1-alpha) then gives F - 1, R - 1 <= C(alpha,2) (beta/beta1)^2
//     E[X^2 G(X)], G(X) = max((1+X)^(alpha-2), (1-X)^(-alpha-1)), so
//     D_alpha/beta^2 <= (alpha/2) E[X^2 G(X)]/beta1^2 on (0, beta1]
//     (taylor); G is near 1 for the z that carry the law.
//  4. The vector. The coordinates are independent, so the divergence of
//     the sum is the sum over coordinates of each's, at most
//     s sum_j beta_j^2 with s = sup_{0 < beta <= theta} max(D_F, D_R)/beta^2
//     (the worst case of each coordinate; beta and -beta are mirror images
//     of each other's vertices j and N-j). pbm's encoder keeps
//     sum_j beta_j^2 at most U = (theta C/c)^2, since the rotated vector
//     has norm at most C, so RDP = s U.
//
// slope computes s: the laws P_beta and P_0 at each vertex exactly (a
// three-term recurrence from the generating function of W_j, from its mode
// outward, every step a sum of positive terms), the exponentiated sums at
// a geometric grid of beta from theta/16 up with the Bernstein bound (2)
// between grid points (on pbmSubSteps sub-steps, the bound at each
// sub-step's right end over the square of its left end), the Taylor bound
// (3) below the grid, both refined (intervals split, the Taylor interval
// shrunk) until the bound is within pbmTol of the largest value seen. The
// law of W_j is cut where the rest is below 2^-1000 on each side, and the
// cut mass enters the sums through its largest likelihood ratio; every
// sum is raised by a relative pbmMargin, far above its rounding.
//
// Cost: each evaluation of a target law sums over the (n-1) m + 1
// vertices and the n m + 1 values of the sum, and an order takes 20 to 140
// of them (with the vertex laws kept for N <= pbmCacheCoins): on a shared
// 2-core machine 20 to 90 ms per order for 100 clients of one trial, 0.15
// to 0.45 s of two. slope keeps each order's result.

// pbmAccount holds the accounting of pbm for n clients, m trials and a
// bias theta.
type pbmAccount struct {
	n, m   int
	theta  float64
	lo, hi float64 // 1/2 -+ theta
	N      int     // the others' trials
	fair   []float64

	vonce    sync.Once
	vertices []pbmVertex // cached where N <= pbmCacheCoins

	mu     sync.Mutex
	slopes map[float64][2]float64 // alpha -> (largest value seen, bound)
}

const (
	// pbmFloor is the mass of a vertex law left out on each side.
	pbmFloor = 0x1p-1000
	// pbmMargin is the relative margin on every computed excess: its
	// rounding is below 1e-9 of it (the terms are nonnegative, x is
	// computed from P - P_0 directly, and at the smallest grid point the
	// cancellation in (1+x)^alpha - 1 - alpha x costs about
	// 2^-52/((alpha-1) |x|) of it, |x| about 2 beta sqrt(m/n)).
	pbmMargin = 1e-8
	// pbmTol is the refinement's target: the bound within this fraction
	// of the largest value it has seen.
	pbmTol = 1e-3
	// pbmSubSteps is the number of sub-steps of each grid interval.
	pbmSubSteps = 512
	// pbmMaxRounds bounds the refinement.
	pbmMaxRounds = 14
	// pbmMaxExponent is the largest alpha ln(ratio) the sums allow
	// before they would overflow; beyond it RDP is +Inf (no bound).
	pbmMaxExponent = 650.0
)

// pbmVertex is one vertex's law of the others' trials, r[t-lo] for t in
// [lo, hi], and the law P_0 of the sum, q[z-lo] for z in [lo, hi+m].
type pbmVertex struct {
	lo, hi int
	r, q   []float64
}

// pbmCacheCoins is the largest N whose vertex laws are kept (about 16 N^2
// bytes).
const pbmCacheCoins = 1024

// vertex returns vertex j's laws, from the cache or computed into the
// scratch v (whose slices it reuses).
func (a *pbmAccount) vertex(j int, v *pbmVertex, rho []float64) *pbmVertex {
	if a.N <= pbmCacheCoins {
		a.vonce.Do(func() {
			a.vertices = make([]pbmVertex, a.N+1)
			scratch := make([]float64, max(a.N, 1))
			for k := range a.vertices {
				a.computeVertex(k, &a.vertices[k], scratch)
				a.vertices[k].r = slices.Clip(a.vertices[k].r)
				a.vertices[k].q = slices.Clip(a.vertices[k].q)
			}
		})
		return &a.vertices[j]
	}
	a.computeVertex(j, v, rho)
	return v
}

// computeVertex sets v to vertex j's laws.
func (a *pbmAccount) computeVertex(j int, v *pbmVertex, rho []float64) {
	full := make([]float64, a.N+1)
	v.lo, v.hi = a.vertexLaw(full, rho, j)
	v.r = append(v.r[:0], full[v.lo:v.hi+1]...)
	v.q = v.q[:0]
	for z := v.lo; z <= v.hi+a.m; z++ {
		s := 0.0
		for y, f := range a.fair {
			if t := z - y; t >= v.lo && t <= v.hi {
				s += f * full[t]
			}
		}
		v.q = append(v.q, s)
	}
}

func newPBMAccount(n, m int, theta float64) *pbmAccount {
	a := &pbmAccount{n: n, m: m, theta: theta, lo: 0.5 - theta, hi: 0.5 + theta, N: (n - 1) * m,
		slopes: map[float64][2]float64{}}
	a.fair = binomialLaw(m, 0.5)
	return a
}

// binomialLaw is Binomial(m, p)'s law.
func binomialLaw(m int, p float64) []float64 {
	out := make([]float64, m+1)
	out[0] = 1
	for i := 1; i <= m; i++ {
		for k := i; k >= 1; k-- {
			out[k] = out[k]*(1-p) + out[k-1]*p
		}
		out[0] *= 1 - p
	}
	return out
}

// lawDelta is A - Binomial(m, 1/2), A the law of the sum of J trials of
// probability 1/2+bb and m-J of 1/2+ba, computed without cancellation:
// A(y) = 2^-m sum_i C(J,i) C(m-J,y-i) g_i(y), g_i the product of the
// trials' ratios 1 +- 2b to a fair trial, and Binomial(m, 1/2)(y) the same
// sum with g = 1 (Vandermonde), so the difference is the sum with g - 1 =
// expm1(ln g).
func lawDelta(m, J int, ba, bb float64) []float64 {
	upA, dnA := math.Log1p(2*ba), math.Log1p(-2*ba)
	upB, dnB := math.Log1p(2*bb), math.Log1p(-2*bb)
	out := make([]float64, m+1)
	scale := math.Ldexp(1, -m)
	for y := 0; y <= m; y++ {
		for i := max(0, y-(m-J)); i <= min(J, y); i++ {
			e := float64(i)*upB + float64(J-i)*dnB + float64(y-i)*upA + float64(m-J-y+i)*dnA
			out[y] += scale * binomCoef(J, i) * binomCoef(m-J, y-i) * math.Expm1(e)
		}
	}
	return out
}

// vertexLaw sets r[lo..hi] (r of length N+1) to the law of W_j normalized
// over that window, the mass outside at most pbmFloor on each side; rho is
// scratch of length N.
func (a *pbmAccount) vertexLaw(r, rho []float64, j int) (lo, hi int) {
	N := a.N
	if N == 0 {
		r[0] = 1
		return 0, 0
	}
	ql, qh := a.lo, a.hi
	c := ql * qh
	cs := func(s int) float64 { return qh*qh*float64(j-s) + ql*ql*float64(N-j-s) }
	// c (s+1) r(s+1) = cs(s) r(s) + c (N-s+1) r(s-1): upward while cs >= 0,
	// giving rho(s) = r(s+1)/r(s); downward from the top where cs < 0.
	s := 0
	for x0, x1 := 0.0, 1.0; s < N; s++ {
		k := cs(s)
		if k < 0 {
			break
		}
		x2 := (k*x1 + c*float64(N-s+1)*x0) / (c * float64(s+1))
		rho[s] = x2 / x1
		x0, x1 = x1, x2
		if x1 > 0x1p500 || x1 < 0x1p-500 {
			f := 0x1p-500
			if x1 < 0x1p-500 {
				f = 0x1p500
			}
			x0, x1 = x0*f, x1*f
		}
	}
	// c (N-t+1) r(t-1) = c (t+1) r(t+1) - cs(t) r(t), cs(t) < 0.
	for t, y0, y1 := N, 0.0, 1.0; t > s; t-- {
		y2 := (c*float64(t+1)*y0 - cs(t)*y1) / (c * float64(N-t+1))
		rho[t-1] = y1 / y2
		y0, y1 = y1, y2
		if y1 > 0x1p500 || y1 < 0x1p-500 {
			f := 0x1p-500
			if y1 < 0x1p-500 {
				f = 0x1p500
			}
			y0, y1 = y0*f, y1*f
		}
	}
	// From the mode outward (the law is log-concave: rho falls), until a
	// geometric bound on the rest is below pbmFloor times the mode's value.
	start := 0
	for start < N && rho[start] > 1 {
		start++
	}
	r[start] = 1
	sum := 1.0
	for hi = start; hi < N; hi++ {
		if x := rho[hi]; r[hi] < pbmFloor && x < 1 && r[hi]*x < pbmFloor*(1-x) {
			break
		}
		r[hi+1] = r[hi] * rho[hi]
		sum += r[hi+1]
	}
	for lo = start; lo > 0; lo-- {
		if x := 1 / rho[lo-1]; r[lo] < pbmFloor && x < 1 && r[lo]*x < pbmFloor*(1-x) {
			break
		}
		r[lo-1] = r[lo] / rho[lo-1]
		sum += r[lo-1]
	}
	inv := 1 / sum
	for t := lo; t <= hi; t++ {
		r[t] *= inv
	}
	return lo, hi
}

// ratios returns the largest P/P_0 and P_0/P over the target's trials'
// count for the target law fair + delta: the largest likelihood ratios of
// the sums.
func (a *pbmAccount) ratios(delta []float64) (up, down float64) {
	for y, f := range a.fair {
		r := 1 + delta[y]/f
		up, down = max(up, r), max(down, 1/r)
	}
	return up, down
}

// evalLaws returns, for each target law fair + deltas[i], the largest over
// the vertices of the excesses F - 1 and R - 1 at order alpha (F and R the
// exponentiated sums, see the top of the file), each raised by a relative
// pbmMargin and the bound on the cut mass; +Inf where they would overflow.
//
// With x = P/P_0 - 1 per z, sum_z P_0 x = 0 (both laws have mass 1), so
// F - 1 = sum_z P_0 ((1+x)^alpha - 1 - alpha x) and R - 1 = sum_z P_0
// ((1+x)^(1-alpha) - 1 - (1-alpha) x), sums of terms >= 0 (Bernoulli's
// inequality) of order x^2: computed so, with P - P_0 convolved from
// lawDelta, they keep their relative precision however small beta is.
func (a *pbmAccount) evalLaws(alpha float64, deltas [][]float64) (fwd, rev []float64) {
	L := len(deltas)
	fwd, rev = make([]float64, L), make([]float64, L)
	tailF, tailR := make([]float64, L), make([]float64, L)
	cut := make([]float64, L)
	skip := make([]bool, L)
	W := float64(a.N + a.m + 1)
	for i, delta := range deltas {
		up, down := a.ratios(delta)
		ef, er := alpha*math.Log(up), (alpha-1)*math.Log(down)
		if ef > pbmMaxExponent || er > pbmMaxExponent {
			fwd[i], rev[i], skip[i] = math.Inf(1), math.Inf(1), true
			continue
		}
		// The vertex laws leave out at most pbmFloor per side; P_0 below
		// cut is skipped, at most W cut in all: each adds its mass times
		// the largest term, up^alpha or down^(alpha-1), here at most
		// 2^-100 in all.
		cut[i] = 0x1p-100 / (W * math.Exp(max(ef, er)))
		tailF[i] = 2*pbmFloor*math.Exp(ef) + 0x1p-100
		tailR[i] = 2*pbmFloor*math.Exp(er) + 0x1p-100
	}
	workers := max(1, min(runtime.GOMAXPROCS(0), a.N+1))
	var mu sync.Mutex
	var wg sync.WaitGroup
	next := make(chan int, a.N+1)
	for j := 0; j <= a.N; j++ {
		next <- j
	}
	close(next)
	for range workers {
		wg.Go(func() {
			var scratch pbmVertex
			rho := make([]float64, max(a.N, 1))
			bf, br := make([]float64, L), make([]float64, L)
			for j := range next {
				v := a.vertex(j, &scratch, rho)
				for i, delta := range deltas {
					if skip[i] {
						continue
					}
					// Only where P_0 is at least cut[i]: the rest adds at
					// most its mass (below W cut) times the largest ratio.
					z0, z1 := 0, len(v.q)-1
					for z0 < z1 && v.q[z0] < cut[i] {
						z0++
					}
					for z1 > z0 && v.q[z1] < cut[i] {
						z1--
					}
					var sf, sr float64
					for z := z0; z <= z1; z++ {
						if v.q[z] == 0 {
							continue
						}
						d := 0.0
						for y, w := range delta {
							if t := z - y; t >= 0 && t < len(v.r) {
								d += w * v.r[t]
							}
						}
						// E = (1+x)^alpha - 1, and (1+x)^(1-alpha) - 1 =
						// (x - E)/(1 + E) unless 1 + E is small.
						x := d / v.q[z]
						l := math.Log1p(x)
						e := math.Expm1(alpha * l)
						er := (x - e) / (1 + e)
						if e < -0.5 {
							er = math.Expm1((1 - alpha) * l)
						}
						sf += v.q[z] * max(0, e-alpha*x)
						sr += v.q[z] * max(0, er-(1-alpha)*x)
					}
					bf[i], br[i] = max(bf[i], sf), max(br[i], sr)
				}
			}
			mu.Lock()
			for i := range L {
				fwd[i], rev[i] = max(fwd[i], bf[i]), max(rev[i], br[i])
			}
			mu.Unlock()
		})
	}
	wg.Wait()
	for i := range L {
		if !skip[i] {
			fwd[i] = fwd[i]*(1+pbmMargin) + tailF[i]
			rev[i] = rev[i]*(1+pbmMargin) + tailR[i]
		}
	}
	return fwd, rev
}

// convolve sets out[lo..hi+len(A)-1] to A * r[lo..hi].
func convolve(out, A, r []float64, lo, hi int) {
	for z := lo; z <= hi+len(A)-1; z++ {
		out[z] = 0
	}
	for y, w := range A {
		for t := lo; t <= hi; t++ {
			out[t+y] += w * r[t]
		}
	}
}

func binomCoef(n, k int) float64 {
	v := 1.0
	for i := range k {
		v = v * float64(n-i) / float64(i+1)
	}
	return v
}

// krawtchouk returns e[y][k], e_k of m +-1 trials with y of them +1: the
// coefficient of t^k in (1+t)^y (1-t)^(m-y).
func krawtchouk(m int) [][]float64 {
	e := make([][]float64, m+1)
	for y := 0; y <= m; y++ {
		poly := []float64{1}
		for i := range m {
			sgn := 1.0
			if i >= y {
				sgn = -1
			}
			next := make([]float64, len(poly)+1)
			for k, v := range poly {
				next[k] += v
				next[k+1] += sgn * v
			}
			poly = next
		}
		e[y] = poly
	}
	return e
}

// taylor is the bound (3) on sup D/beta^2 over (0, beta1]: for beta <=
// beta1, |x(z)| <= (beta/beta1) X(z), X(z) = sum_k (2 beta1)^k |rho_k(z)|,
// and Taylor's remainder for (1+x)^alpha and (1+x)^(1-alpha) is
// C(alpha,2) x^2 times (1+xi)^(alpha-2) or (1+xi)^(-alpha-1), |xi| <= X(z),
// so both excesses are at most C(alpha,2) (beta/beta1)^2 E[X^2 G(X)], G(X)
// = max((1+X)^(alpha-2), (1-X)^(-alpha-1)), and D/beta^2 <= (alpha/2)
// E[X^2 G(X)]/beta1^2, the largest over the vertices. (|rho_k| <= C(m,k),
// so X <= (1+2 beta1)^m - 1, which bounds the cut mass's terms.)
func (a *pbmAccount) taylor(alpha, beta1 float64) float64 {
	m := a.m
	e := krawtchouk(m)
	pw := make([]float64, m+1)
	for k := range pw {
		pw[k] = math.Pow(2*beta1, float64(k))
	}
	g := func(x float64) float64 {
		if x >= 1 {
			return math.Inf(1)
		}
		return max(math.Pow(1+x, alpha-2), math.Pow(1-x, -alpha-1))
	}
	xmax := math.Pow(1+2*beta1, float64(m)) - 1
	best := 0.0
	var scratch pbmVertex
	rho := make([]float64, max(a.N, 1))
	rk := make([]float64, m+1)
	for j := 0; j <= a.N; j++ {
		v := a.vertex(j, &scratch, rho)
		var s float64
		for z, q := range v.q {
			if q == 0 {
				continue
			}
			clear(rk)
			for y, f := range a.fair {
				if t := z - y; t >= 0 && t < len(v.r) {
					w := f * v.r[t] / q
					for k := 1; k <= m; k++ {
						rk[k] += w * e[y][k]
					}
				}
			}
			x := 0.0
			for k := 1; k <= m; k++ {
				x += pw[k] * math.Abs(rk[k])
			}
			s += q * x * x * g(x)
		}
		best = max(best, s)
	}
	best = best*(1+pbmMargin) + 4*pbmFloor*xmax*xmax*g(xmax)
	return alpha / 2 * best / (beta1 * beta1)
}

// slope returns s (see the top of the file) at order alpha, and the
// largest value of max(D_F, D_R)/beta^2 it evaluated (a lower bound on the
// exact supremum).
func (a *pbmAccount) slope(alpha float64) (seen, bound float64) {
	a.mu.Lock()
	if v, ok := a.slopes[alpha]; ok {
		a.mu.Unlock()
		return v[0], v[1]
	}
	a.mu.Unlock()
	seen, bound = a.computeSlope(alpha)
	a.mu.Lock()
	a.slopes[alpha] = [2]float64{seen, bound}
	a.mu.Unlock()
	return seen, bound
}

// pbmPoint is a grid point: the excesses F - 1 and R - 1 at beta.
type pbmPoint struct {
	beta, fwd, rev float64
}

func (a *pbmAccount) computeSlope(alpha float64) (seen, bound float64) {
	m, theta := a.m, a.theta
	beta1 := theta / 16
	var betas []float64
	for b := beta1; b < theta; b *= 2 {
		betas = append(betas, b)
	}
	betas = append(betas, theta)
	points := map[float64]pbmPoint{}
	mids := map[[2]float64][2][]float64{} // interior Bernstein values, J = 1..m-1
	ratio := func(beta, excess float64) float64 {
		return math.Log1p(excess) / ((alpha - 1) * beta * beta)
	}
	for range pbmMaxRounds {
		// Evaluate what is missing, in one pass over the vertices.
		sort.Float64s(betas)
		var laws [][]float64
		type job struct {
			point bool
			beta  float64
			key   [2]float64
			J     int
			index int
		}
		var jobs []job
		for i, b := range betas {
			if _, ok := points[b]; !ok {
				jobs = append(jobs, job{point: true, beta: b, index: len(laws)})
				laws = append(laws, lawDelta(m, m, 0, b))
			}
			if i > 0 && m > 1 {
				key := [2]float64{betas[i-1], b}
				if _, ok := mids[key]; !ok {
					for J := 1; J < m; J++ {
						jobs = append(jobs, job{key: key, J: J, index: len(laws)})
						laws = append(laws, lawDelta(m, J, key[0], key[1]))
					}
				}
			}
		}
		if len(laws) > 0 {
			fwd, rev := a.evalLaws(alpha, laws)
			for _, jb := range jobs {
				if jb.point {
					points[jb.beta] = pbmPoint{jb.beta, fwd[jb.index], rev[jb.index]}
					continue
				}
				v := mids[jb.key]
				if v[0] == nil {
					v = [2][]float64{make([]float64, m-1), make([]float64, m-1)}
				}
				v[0][jb.J-1], v[1][jb.J-1] = fwd[jb.index], rev[jb.index]
				mids[jb.key] = v
			}
		}
		seen = 0
		for _, b := range betas {
			p := points[b]
			seen = max(seen, ratio(b, p.fwd), ratio(b, p.rev))
		}
		target := seen * (1 + pbmTol)
		T := a.taylor(alpha, betas[0])
		bound = T
		var split []float64
		for i := 1; i < len(betas); i++ {
			ba, bb := betas[i-1], betas[i]
			pa, pb := points[ba], points[bb]
			mid := mids[[2]float64{ba, bb}]
			v := 0.0
			for dir := range 2 {
				F := make([]float64, m+1)
				if dir == 0 {
					F[0], F[m] = pa.fwd, pb.fwd
				} else {
					F[0], F[m] = pa.rev, pb.rev
				}
				for J := 1; J < m; J++ {
					F[J] = mid[dir][J-1]
				}
				v = max(v, bernsteinBound(alpha, ba, bb, F))
			}
			bound = max(bound, v)
			if v > target {
				split = append(split, math.Sqrt(ba*bb))
			}
		}
		if bound <= target || math.IsInf(bound, 1) {
			break
		}
		if T > target {
			betas = append(betas, betas[0]/4)
		}
		betas = append(betas, split...)
	}
	return seen, bound
}

// bernsteinBound is the bound (2) on D/beta^2 over [ba, bb] given the
// excesses F_J - 1 (J trials at bb, m-J at ba): the Bernstein weights sum
// to 1, so the polynomial's excess is theirs.
func bernsteinBound(alpha, ba, bb float64, F []float64) float64 {
	m := len(F) - 1
	best := 0.0
	for s := range pbmSubSteps {
		ta, tb := float64(s)/pbmSubSteps, float64(s+1)/pbmSubSteps
		var bern float64
		for J, f := range F {
			bern += binomCoef(m, J) * math.Pow(tb, float64(J)) * math.Pow(1-tb, float64(m-J)) * f
		}
		b := ba + ta*(bb-ba)
		best = max(best, math.Log1p(bern)/((alpha-1)*b*b))
	}
	return best
}

// errPBMAccount says why the accounting cannot run.
func errPBMAccount(n, m int) error {
	return fmt.Errorf("mech: pbm: %d clients of %d trials: the accounting enumerates (clients-1) trials = %d laws, at most %d", n, m, (n-1)*m, pbmMaxCoins)
}
