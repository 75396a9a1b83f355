package privacy

import (
	"fmt"
	"math"
)

// This file holds the privacy ledger's accounting: how per-parameter,
// per-round guarantees compose over a model's parameters and over rounds,
// the user-level central bound of AugCorBin-FL, and what the correlated
// mechanisms guarantee against each observer. docs/privacy.md says which
// quantity holds for whom.

func checkCount(k int) error {
	if k < 1 {
		return fmt.Errorf("privacy: composition count %d must be at least 1", k)
	}
	return nil
}

// Basic is the k-fold composition of eps-DP mechanisms by the basic
// composition theorem: k*eps, with no delta (Dwork, McSherry, Nissim and
// Smith 2006; Dwork and Roth 2014, Theorem 3.16). It holds for any k
// mechanisms run on the same data, adaptively chosen or not, so it applies
// both to the d parameters of one upload and to the rounds a client took
// part in. It is tight for pure DP only at delta = 0: Advanced and Optimal
// trade a small delta for a much smaller epsilon.
func Basic(eps float64, k int) (float64, error) {
	if err := checkEpsilon(eps); err != nil {
		return 0, err
	}
	if err := checkCount(k); err != nil {
		return 0, err
	}
	e := float64(k) * eps
	if math.IsInf(e, 0) {
		return 0, fmt.Errorf("privacy: %d * %v overflows", k, eps)
	}
	return e, nil
}

// Advanced is the epsilon of the k-fold composition of eps-DP mechanisms
// at delta = deltaPrime by the advanced composition theorem of Dwork,
// Rothblum and Vadhan (2010, Theorem III.3; Dwork and Roth 2014, Theorem
// 3.20):
//
//	eps' = sqrt(2k ln(1/deltaPrime)) eps + k eps (e^eps - 1).
//
// It returns min(eps', k*eps): Basic's k*eps holds with delta 0, hence with
// any deltaPrime, and is the smaller of the two once eps is large against
// sqrt(ln(1/deltaPrime)/k) (for k = 10, eps = 1, deltaPrime = 1e-5 the
// formula gives 32.3). Optimal is never larger than Advanced.
func Advanced(eps float64, k int, deltaPrime float64) (float64, error) {
	basic, err := Basic(eps, k)
	if err != nil {
		return 0, err
	}
	if err := checkDelta(deltaPrime); err != nil {
		return 0, err
	}
	kf := float64(k)
	adv := math.Sqrt(2*kf*-math.Log(deltaPrime))*eps + kf*eps*math.Expm1(eps)
	return min(adv, basic), nil
}

// OptimalDelta is the exact delta at epsilon epsTotal of the k-fold
// composition of eps-DP mechanisms: the smallest delta for which every such
// composition is (epsTotal, delta)-DP. Kairouz, Oh and Viswanath (2015,
// Theorem 3.3) show that k-fold randomized response is the worst case, so
// delta is the hockey-stick divergence of k independent eps-randomized
// responses:
//
//	delta(epsTotal) = sum over l with (k-2l) eps > epsTotal of
//	                  C(k,l) (e^((k-l) eps) - e^(epsTotal + l eps)) / (1+e^eps)^k,
//
// which at epsTotal = (k-2i) eps is their delta_i. It is 0 from
// epsTotal = k*eps on. Terms are summed in log space from the largest l
// down, and the sum stops once the remaining terms are below 1e-17 of it, so
// a call costs O(sqrt(k)) terms. The log-binomials come from math.Lgamma,
// whose rounding gives a relative error of about k ln(k) 2^-53 (2e-9 at
// k = 10^6).
func OptimalDelta(eps float64, k int, epsTotal float64) (float64, error) {
	if err := checkEpsilon(eps); err != nil {
		return 0, err
	}
	if err := checkCount(k); err != nil {
		return 0, err
	}
	if !(epsTotal >= 0) || math.IsInf(epsTotal, 0) {
		return 0, fmt.Errorf("privacy: total epsilon %v must be non-negative and finite", epsTotal)
	}
	return rrDelta(eps, k, epsTotal), nil
}

// rrDelta is OptimalDelta for valid arguments. With b(l) = C(k,l) p^(k-l)
// q^l, p = e^eps/(1+e^eps), q = 1-p (the number l of flipped coordinates of
// k randomized responses), delta = sum_{l <= L} b(l) (1 - e^(epsTotal -
// (k-2l) eps)), L the largest l with (k-2l) eps > epsTotal.
func rrDelta(eps float64, k int, epsTotal float64) float64 {
	kf := float64(k)
	if epsTotal >= kf*eps {
		return 0
	}
	l := int(math.Ceil((kf-epsTotal/eps)/2)) - 1
	for l >= 0 && (kf-2*float64(l))*eps <= epsTotal {
		l--
	}
	for l+1 <= k/2 && (kf-2*float64(l+1))*eps > epsTotal {
		l++
	}
	if l < 0 {
		return 0
	}
	logp := -math.Log1p(math.Exp(-eps)) // log(e^eps/(1+e^eps))
	logq := logp - eps
	q := math.Exp(logq)
	mode := kf * q
	// b(l) for l > mode + 40 sd + 200 is below e^-300 of b(mode), and
	// mode <= L there, so those terms are far below the rounding of the sum.
	if top := mode + 40*math.Sqrt(kf*q*(1-q)) + 200; float64(l) > top {
		l = int(top)
	}
	lg := func(x float64) float64 { v, _ := math.Lgamma(x); return v }
	fl := float64(l)
	logb := lg(kf+1) - lg(fl+1) - lg(kf-fl+1) + (kf-fl)*logp + fl*logq
	sum := 0.0
	for ; l >= 0; l-- {
		fl := float64(l)
		sum += math.Exp(logb) * -math.Expm1(epsTotal-(kf-2*fl)*eps)
		// Below the mode b increases with l, so the terms left,
		// sum_{j<l} b(j), are at most l*b(l).
		if fl < mode && logb+math.Log(fl) < max(math.Log(sum), -800)-39 {
			break
		}
		logb += math.Log(fl) - math.Log(kf-fl+1) + eps // b(l-1)/b(l) = l e^eps/(k-l+1)
	}
	return min(sum, 1)
}

// Optimal is the smallest total epsilon at which every k-fold composition
// of eps-DP mechanisms is (epsilon, delta)-DP: the optimal composition
// theorem of Kairouz, Oh and Viswanath (2015, Theorem 3.3), evaluated
// through OptimalDelta, which decreases in its epsilon, by bisection to a
// relative 1e-12. It returns the upper end of the final bracket, which was
// checked, so OptimalDelta(eps, k, Optimal(eps, k, delta)) <= delta. No
// composition theorem for eps-DP mechanisms can give less; it is at most
// Advanced and Basic, and 0 when delta exceeds the total variation distance
// of the composition.
func Optimal(eps float64, k int, delta float64) (float64, error) {
	hi, err := Basic(eps, k)
	if err != nil {
		return 0, err
	}
	if err := checkDelta(delta); err != nil {
		return 0, err
	}
	if rrDelta(eps, k, 0) <= delta {
		return 0, nil
	}
	lo := 0.0
	for hi-lo > 1e-12*hi {
		mid := lo + (hi-lo)/2
		if rrDelta(eps, k, mid) <= delta {
			hi = mid
		} else {
			lo = mid
		}
	}
	return hi, nil
}

// GaussianRho is the zero-concentrated DP parameter rho = D^2/(2 sigma^2) of
// adding N(0, sigma^2) noise to a query of L2 sensitivity D (Bun and Steinke
// 2016, Proposition 1.6). The discrete Gaussian of variance parameter
// sigma^2 on a query whose sensitivity is a whole number of grid steps has
// the same rho (Canonne, Kamath and Steinke 2020), so for fedpq's gaussian
// mechanism pass the sensitivity after rounding to the grid,
// noise.DiscreteGaussian.Sensitivity(2r), and its Sigma(). zCDP composes by
// addition (Bun and Steinke 2016, Lemma 1.7): k rounds, or k parameters,
// are k*rho-zCDP. ZCDPEpsilon turns rho into (eps, delta)-DP.
func GaussianRho(sigma, sensitivity float64) (float64, error) {
	if !(sigma > 0) || math.IsInf(sigma, 0) {
		return 0, fmt.Errorf("privacy: sigma %v must be positive and finite", sigma)
	}
	if err := checkSensitivity(sensitivity); err != nil {
		return 0, err
	}
	x := sensitivity / sigma
	return x * x / 2, nil
}

// ZCDPEpsilon is the epsilon of the (eps, delta)-DP guarantee that rho-zCDP
// implies (Bun and Steinke 2016, Proposition 1.3):
//
//	eps = rho + 2 sqrt(rho ln(1/delta)).
//
// It equals min over alpha > 1 of alpha*rho + ln(1/delta)/(alpha-1), the
// conversion of Mironov (2017, Proposition 3) applied to rho-zCDP's Renyi
// curve alpha*rho, so that conversion gains nothing here. Tighter
// conversions exist (Canonne, Kamath and Steinke 2020; Asoodeh et al. 2021)
// and are not implemented.
func ZCDPEpsilon(rho, delta float64) (float64, error) {
	if !(rho > 0) || math.IsInf(rho, 0) {
		return 0, fmt.Errorf("privacy: rho %v must be positive and finite", rho)
	}
	if err := checkDelta(delta); err != nil {
		return 0, err
	}
	return rho + 2*math.Sqrt(rho*-math.Log(delta)), nil
}

// AugCorBinTheorem3 is the user-level central DP epsilon of AugCorBin-FL
// exactly as printed in CorBin-FL (Salehi et al.), Theorem 3, Eq. (5), with
// log read as the natural logarithm:
//
//	eps_u / (r alpha) = sqrt(8 m ln(1.25/delta) / ((n gamma - 1) e_p))
//	                  + 8 (ln(1.25/delta) + ln(20m/delta) ln(10/delta)) / (3 (n gamma - 1))
//	                  + 4 b_p sqrt(2m) (1.75 + 3.75/alpha^2) sqrt(ln(10/delta)) / ((n gamma - 1)(1 - delta/10) e_p),
//	e_p = 1 + 1/alpha^2,  b_p = e_p/3 + 1/alpha,  alpha = Alpha(epsP),
//
// for n clients of which a fraction gamma quantize alone, m parameters and
// r the largest radius. Its conditions are returned as errors: epsP > 0,
// delta in (0, 1), gamma in (0, 1], n >= 1, m >= 1, r > 0 finite, and the
// display before Eq. (5):
//
//	(n gamma - 1) (1/4 - 1/(4 alpha^2)) >= max(23 ln(m/delta), 2 r alpha).
//
// The statement is wrong, and this function exists only to show by how
// much (docs/privacy.md): it scales with r, which no DP guarantee can (the
// sensitivities of the cpSGD theorem it instantiates were taken in weight
// units and the noise step in counts); e_p = 1 + 1/alpha^2 stands where
// cpSGD's 4p(1-p) = 1 - 1/alpha^2 belongs; the L1 term of cpSGD's Eq. (7)
// is replaced by a product; and the condition drops a factor 10 inside the
// log. Under the paper's own neighbouring relation, removing a client
// (Eq. (1)), no epsilon holds at any delta < 1. AugCorBinCentral is the
// corrected bound; the ledger reports that one.
func AugCorBinTheorem3(epsP, delta, gamma float64, n, m int, r float64) (float64, error) {
	alpha, err := Alpha(epsP)
	if err != nil {
		return 0, err
	}
	if err := checkDelta(delta); err != nil {
		return 0, err
	}
	if !(gamma > 0 && gamma <= 1) {
		return 0, fmt.Errorf("privacy: gamma %v must be in (0, 1]", gamma)
	}
	if n < 1 || m < 1 {
		return 0, fmt.Errorf("privacy: clients %d and parameters %d must be at least 1", n, m)
	}
	if !(r > 0) || math.IsInf(r, 0) {
		return 0, fmt.Errorf("privacy: radius %v must be positive and finite", r)
	}
	N := float64(n)*gamma - 1
	a2 := alpha * alpha
	mf := float64(m)
	need := max(23*math.Log(mf/delta), 2*r*alpha)
	if have := N * (0.25 - 0.25/a2); !(have >= need) {
		return 0, fmt.Errorf("privacy: Theorem 3's condition fails: (n gamma - 1)(1/4 - 1/(4 alpha^2)) = %.4g < %.4g", have, need)
	}
	ep := 1 + 1/a2
	bp := ep/3 + 1/alpha
	l125, l10, l20m := math.Log(1.25/delta), math.Log(10/delta), math.Log(20*mf/delta)
	t1 := math.Sqrt(8 * mf * l125 / (N * ep))
	t2 := 8 * (l125 + l20m*l10) / (3 * N)
	t3 := 4 * bp * math.Sqrt(2*mf) * (1.75 + 3.75/a2) * math.Sqrt(l10) / (N * (1 - delta/10) * ep)
	return r * alpha * (t1 + t2 + t3), nil
}

// AugCorBinCentral is a user-level central DP epsilon for one round of
// AugCorBin-FL (and of any round in which some clients quantize alone with
// ldpq): the round's mean, released to an observer that sees only the mean
// (not the individual messages, which the server sees), is (eps, delta)-DP
// with respect to replacing one client's m parameters by any others in the
// ranges. It is the argument of CorBin-FL's Theorem 3, corrected:
//
//   - Take the target client's bit per parameter as f in {0,1}^m. Every
//     other client is independent of it, except its partner; condition on
//     the partner's bits, as the paper does (the partner's marginal does not
//     depend on the target's input). What remains is f plus the bits of the
//     others, N = alone-1 of them alone.
//   - An alone client's bit is Bernoulli(p) with p in [1/(e^eps+1),
//     e^eps/(e^eps+1)], not one common p, so the sum is not Binomial (the
//     paper assumes it is). Write Bernoulli(p) as a fair coin with
//     probability 2/(e^eps+1) and a p-dependent coin otherwise: per
//     parameter the sum holds Binomial(M, 1/2) noise, M ~ Binomial(N,
//     2/(e^eps+1)) independent of the data, plus independent terms.
//   - N0 is the largest count with m P[M < N0] <= delta/2 (with a relative
//     margin of 1e-6 for rounding); by the union bound every parameter has
//     M >= N0 except with probability delta/2, and Binomial(M, 1/2) noise is
//     Binomial(N0, 1/2) noise plus independent noise.
//   - On that event the release is a post-processing of the binomial
//     mechanism f + Binomial(N0, 1/2) with s = 1 and sensitivities
//     Delta_inf = 1, Delta_1 = m, Delta_2 = sqrt(m), which Agarwal et al.
//     (2018, cpSGD, Theorem 1, Eq. (7), at p = 1/2: b_p = 1/3,
//     c_p = 7 sqrt(2)/4, d_p = 2/3) make (eps, delta/2)-DP; with the
//     event's delta/2 the release is (eps, delta)-DP.
//
// With d = delta/2, under cpSGD's condition N0/4 >= max(23 ln(10m/d), 2),
// which is returned as an error when it fails, the epsilon is
//
//	eps = sqrt(8 m ln(1.25/d) / N0)
//	    + 4 (sqrt(m) c_p sqrt(ln(10/d)) + m b_p) / (N0 (1 - d/10))
//	    + (8/3) (ln(1.25/d) + ln(20m/d) ln(10/d)) / N0.
//
// The epsilon does not depend on the ranges (r), as a DP guarantee must
// not. alone is the number of clients of the round that quantized alone
// (AugCorBin's round(gamma n), plus any client left without a partner); m
// the parameters each client sent. The bound is for equal weights
// (weighting: mean): a weighted mean is not a sum of bits. Under removal of
// a client instead of replacement no bound exists (docs/privacy.md).
func AugCorBinCentral(eps, delta float64, alone, m int) (float64, error) {
	if err := checkEpsilon(eps); err != nil {
		return 0, err
	}
	if err := checkDelta(delta); err != nil {
		return 0, err
	}
	if alone < 1 || m < 1 {
		return 0, fmt.Errorf("privacy: alone clients %d and parameters %d must be at least 1", alone, m)
	}
	d := delta / 2
	n0 := fairCount(alone-1, 2*math.Exp(-eps)/(1+math.Exp(-eps)), math.Log(d)-math.Log(float64(m))-1e-6)
	mf := float64(m)
	if need := max(23*math.Log(10*mf/d), 2); !(float64(n0)/4 >= need) {
		return 0, fmt.Errorf("privacy: cpSGD's condition fails: %d fair coins per parameter (of %d other alone clients) give N0/4 = %g < %.4g",
			n0, alone-1, float64(n0)/4, need)
	}
	N0 := float64(n0)
	l125, l10, l20m := math.Log(1.25/d), math.Log(10/d), math.Log(20*mf/d)
	cp, bp := 7*math.Sqrt2/4, 1.0/3
	t1 := math.Sqrt(8 * mf * l125 / N0)
	t2 := 4 * (math.Sqrt(mf)*cp*math.Sqrt(l10) + mf*bp) / (N0 * (1 - d/10))
	t3 := 8 * (l125 + l20m*l10) / (3 * N0)
	return t1 + t2 + t3, nil
}

// fairCount is the largest n0 in [0, n] with log P[Binomial(n, f) < n0] <=
// logBudget, the lower tail summed in log space.
func fairCount(n int, f, logBudget float64) int {
	if n <= 0 || f <= 0 {
		return 0
	}
	if f >= 1 {
		return n
	}
	lratio := math.Log(f) - math.Log1p(-f)
	logpmf := float64(n) * math.Log1p(-f) // P[X = 0]
	logcum := math.Inf(-1)                // log P[X < j]
	for j := 0; j < n; j++ {
		// P[X < j+1] = P[X < j] + P[X = j]
		next := logAddExp(logcum, logpmf)
		if next > logBudget {
			return j
		}
		logcum = next
		logpmf += math.Log(float64(n-j)) - math.Log(float64(j+1)) + lratio
	}
	return n
}

func logAddExp(a, b float64) float64 {
	if a < b {
		a, b = b, a
	}
	if math.IsInf(b, -1) {
		return a
	}
	return a + math.Log1p(math.Exp(b-a))
}

// CellEpsilon is the per-parameter epsilon of a one-bit paired quantizer
// (corbin, coq) against an observer that knows the pair's shared index: a
// partner, colluding with the server or an eavesdropper. Such a quantizer
// draws its word V uniformly in the cell [a, b) of [0, 1) that the shared
// index selects, and the leader sends +1 iff V < q, the follower iff its
// word is at least 1-q, with q in [qlo, qhi] = [1/(e^eps+1),
// e^eps/(e^eps+1)] (mech/binary.go). Given the cell, P(+1) is (q-a)/(b-a)
// clamped to [0, 1] (the follower's is the mirror image, with the same
// extremes). So:
//
//   - If a cell boundary lies in [qlo, qhi], some cell gives one input
//     probability 0 or 1 and another input not: the loss is unbounded and
//     CellEpsilon returns +Inf. corbin's cells k/2^d always have 1/2 there,
//     for every eps and d >= 1.
//   - Otherwise [qlo, qhi] lies inside one cell [a, b) (the other cells
//     decide the bit alone), and the loss is
//     max(ln((qhi-a)/(qlo-a)), ln((b-qlo)/(b-qhi))) >= eps.
//
// bounds are the interior cell boundaries, strictly increasing in (0, 1);
// none gives eps, the ldpq client's loss. For coq they are its codebook's
// round(2^32 F(s))/2^32 (px != 1/2). [qlo, qhi] is widened by a relative
// 1e-15 against float64 rounding, and the code's thresholds lie inside it
// by a relative 2^-45 (binq's margin), so for the code this is an upper
// bound, exact up to that margin.
func CellEpsilon(eps float64, bounds []float64) (float64, error) {
	if err := checkEpsilon(eps); err != nil {
		return 0, err
	}
	e := math.Exp(-eps)
	qlo := e / (1 + e) * (1 - 1e-15) // widened for rounding: a loss never too small
	qhi := 1 - qlo
	a, b := 0.0, 1.0 // the cell holding [qlo, qhi], if one does
	prev := 0.0
	for i, x := range bounds {
		if !(x > prev && x < 1) {
			return 0, fmt.Errorf("privacy: cell bounds must increase strictly in (0, 1): bound %d is %v", i, x)
		}
		prev = x
		switch {
		case x < qlo:
			a = x
		case x > qhi:
			b = min(b, x)
		default:
			a = math.NaN() // a boundary in [qlo, qhi]
		}
	}
	if math.IsNaN(a) {
		return math.Inf(1), nil
	}
	return max(math.Log((qhi-a)/(qlo-a)), math.Log((b-qlo)/(b-qhi))), nil
}

// An Observer is who watches a client's round; ParameterEpsilon says what
// each is guaranteed.
type Observer int

const (
	// Eavesdropper reads one client's uplink message: the PLDP setting of
	// CorBin-FL's Eq. (3).
	Eavesdropper Observer = iota
	// Server receives every client's message, both of a pair included, but
	// not the bits a pair shares (honest but curious).
	Server
	// Partner knows the bits the client shares with its partner and sees
	// its message: the partner colluding with the server or an
	// eavesdropper.
	Partner
)

func (o Observer) String() string {
	switch o {
	case Eavesdropper:
		return "eavesdropper"
	case Server:
		return "server"
	case Partner:
		return "partner"
	}
	return fmt.Sprintf("Observer(%d)", int(o))
}

// ParameterEpsilon is the epsilon that one parameter of one client's upload
// in one round is guaranteed against observer o, for the mechanism
// registered under that name in package mech, run with budget eps. +Inf
// means no guarantee. It reads:
//
//   - ldpq, laplace, mvu, jopeq, laplace+sdq: eps for every observer; they
//     share nothing with other clients (jopeq and laplace+sdq share a dither
//     with the server, and stay eps-LDP against it). gaussian: eps, with the
//     mechanism's delta.
//   - corbin, augcorbin, coq: eps against an eavesdropper, since each
//     message alone has the ldpq distribution (CorBin-FL, Theorem 1). Against
//     a partner, +Inf: CellEpsilon, since corbin's cells have a boundary at
//     1/2. Against the server, +Inf: it sees both messages of the pair, and
//     with the partner's parameter at the center c, both clients send +1
//     with probability (T(w)-2^63)/2^64 (about tanh(eps/2)/2) when w > c
//     and never when w <= c. For augcorbin this is the paired clients' value;
//     its alone clients have eps. For coq the +Inf is proved at px = 1/2,
//     where coq is corbin; at other px the partner's value is CellEpsilon of
//     its codebook, and the server's is not analysed, so none is claimed.
//   - cq, sdq, jopeq-compat, none: +Inf; they are not LDP.
//
// It returns an error for an unknown mechanism or observer and for eps not
// positive and finite.
func ParameterEpsilon(mechanism string, eps float64, o Observer) (float64, error) {
	if err := checkEpsilon(eps); err != nil {
		return 0, err
	}
	if o < Eavesdropper || o > Partner {
		return 0, fmt.Errorf("privacy: unknown observer %v", o)
	}
	switch mechanism {
	case "ldpq", "laplace", "mvu", "jopeq", "laplace+sdq", "gaussian":
		return eps, nil
	case "corbin", "augcorbin", "coq":
		if o == Eavesdropper {
			return eps, nil
		}
		return math.Inf(1), nil
	case "cq", "sdq", "jopeq-compat", "none", "clip":
		return math.Inf(1), nil
	case "ddgauss", "skellam":
		// Their noise is a share of the central noise, calibrated for
		// the sum of a round's messages under secure aggregation: one
		// message has no per-parameter guarantee.
		return math.Inf(1), nil
	}
	return 0, fmt.Errorf("privacy: no guarantee known for mechanism %q", mechanism)
}
