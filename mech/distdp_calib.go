package mech

import (
	"fmt"
	"math"

	"github.com/fedpq/fedpq/mech/noise"
)

// distParams is the calibration of ddgauss or skellam for one padded size
// d', n clients, b bits and a target (eps, delta). Every quantity but nu
// is in the scaled integer units of the clients' vectors; nu and sc make
// it independent of the range and of d: for a tensor of d parameters under
// radius r, C = r sqrt(d) and the scale is s = sc/C.
//
// Given nu, the central noise standard deviation in units of C (so a
// client's local standard deviation is sigma_l = nu C/sqrt(n)):
//
//   - the scale follows Kairouz et al.'s heuristic (Sec. 4.2 and 4.4; TFF's
//     _heuristic_scale_factor, rho = 1): k standard deviations of the sum,
//     modelled as subgaussian with the signal of n aligned clients spread
//     over d' coordinates, the noise and the rounding, fill half the
//     modular range,
//     2^b = 2k sqrt(s^2 (C^2 n^2/d' + n sigma_l^2) + n/4), so
//     sc = s C = sqrt(2^(2b) - n k^2) / (2k sqrt(n^2/d' + nu^2)),
//     with k = 4 (ddgauss) or 3 (skellam), TFF's defaults;
//   - a client's rounded vector has L2 norm at most Bound (Kairouz et al.,
//     Theorem 2 with beta = exp(-1/2); TFF's rounded_l2_norm_bound):
//     Bound = min(sc + sqrt(d'), sqrt(sc^2 + d'/4 + sqrt(2 ln(1/beta)) (sc + sqrt(d')/2))),
//     enforced by conditional rounding, and so L1 norm at most
//     Bound min(sqrt(d'), Bound) (integer vectors);
//   - replacing one client moves the sum by Delta2 = 2 Bound in L2 and
//     Delta1 = 2 Bound min(sqrt(d'), Bound) in L1;
//   - ddgauss: each client adds N_Z(0, S) with S = ceil((sc nu/sqrt(n))^2)
//     (at least 1), so the sum's noise is the sum of n discrete Gaussians,
//     whose Renyi divergence of order alpha is at most (Kairouz et al.,
//     Theorem 1 and its RDP forms, as in the authors' TFF accounting,
//     compute_rdp_dgaussian), with sigma^2 = n S, a = Delta2/sigma,
//     a1 = Delta1/sigma and tau = 10 sum_{k=1}^{n-1} exp(-2 pi^2 S k/(k+1)):
//     min(alpha a^2/2 + tau d', alpha/2 (a^2 + 2 a1 tau + tau^2 d'), alpha/2 (a + sqrt(d') tau)^2);
//   - skellam: each client adds Poisson(lambda) - Poisson(lambda) with
//     lambda = mu/(2n), mu = (sc nu)^2, so the sum's noise is the
//     symmetric Skellam of variance mu, whose Renyi divergence of integer
//     order alpha is at most (Agarwal, Kairouz and Liu 2021, Theorem 3.5
//     and Corollary 3.6)
//     alpha Delta2^2/(2 mu) + min(((2 alpha - 1) Delta2^2 + 6 Delta1)/(4 mu^2), 3 Delta1/(2 mu));
//   - (eps, delta) from RDP: min over the orders of
//     eps(alpha) + ln(1 - 1/alpha) - (ln delta + ln alpha)/(alpha - 1)
//     (Balle et al. 2020, Theorem 21; Canonne, Kamath and Steinke 2020,
//     Proposition 12), the conversion TFF's accountant uses.
//
// calibrate searches for the smallest nu whose eps is at most the target
// (bisection in log nu, to a relative 1e-12, returning only checked
// points). eps falls as nu grows until the rounding dominates: a target
// below that floor is refused (raise ModBits).
type distParams struct {
	skellam bool
	dp      int
	nu, sc  float64
	bound   float64
	gauss   noise.DiscreteGaussian // ddgauss: N_Z(0, S) per client
	lambda  float64                // skellam: the mean of each Poisson per client
	eps     float64                // what the calibration certifies
	signs   []uint64
}

// normLimit is the largest integer squared norm that conditional
// rounding accepts: at most Bound^2 (its float64 square lowered by a
// relative 2^-50, more than its rounding error), so the sensitivity the
// accounting uses holds exactly.
func (p *distParams) normLimit() (uint64, error) {
	b2 := p.bound * p.bound * (1 - 0x1p-50)
	if !(b2 < 0x1p61) {
		return 0, fmt.Errorf("rounded norm bound %v too large", p.bound)
	}
	return uint64(b2), nil
}

// localVariance is the variance of one client's noise per coordinate, in
// scaled units.
func (p *distParams) localVariance() float64 {
	if p.skellam {
		return 2 * p.lambda
	}
	return p.gauss.Variance()
}

// distOrders are the Renyi orders of the conversion: all integers to 256,
// then integers growing by 5% to 10^7 (small eps needs large orders).
var distOrders = func() []float64 {
	var out []float64
	for a := 2.0; a <= 256; a++ {
		out = append(out, a)
	}
	for a := 256.0; a < 1e7; {
		a = math.Ceil(a * 1.05)
		out = append(out, a)
	}
	return out
}()

// rdpEpsilon converts an RDP curve to the eps of (eps, delta)-DP.
func rdpEpsilon(rdp func(alpha float64) float64, delta float64) float64 {
	best := math.Inf(1)
	ld := math.Log(delta)
	for _, a := range distOrders {
		e := rdp(a) + math.Log1p(-1/a) - (ld+math.Log(a))/(a-1)
		if e < best {
			best = e
		}
	}
	return max(best, 0)
}

// ddgTau is Kairouz et al.'s tau for n clients of variance S: the first
// 1000 terms exactly, the rest each bounded by the 1000th (the terms fall
// with k), so the result is an upper bound and eps only grows with it.
func ddgTau(s float64, n int) float64 {
	sum := 0.0
	for k := 1; k < n && k <= 1000; k++ {
		sum += math.Exp(-2 * math.Pi * math.Pi * s * float64(k) / float64(k+1))
	}
	if n-1 > 1000 {
		sum += float64(n-1-1000) * math.Exp(-2*math.Pi*math.Pi*s*1000/1001)
	}
	return 10 * sum
}

// ddgEpsilon is the eps of the sum of n N_Z(0, S) against sensitivities
// d2 (L2) and d1 (L1) in dimension dp.
func ddgEpsilon(d2, d1, s float64, n, dp int, delta float64) float64 {
	sig := math.Sqrt(float64(n) * s)
	a, a1 := d2/sig, d1/sig
	tau := ddgTau(s, n)
	fd := float64(dp)
	return rdpEpsilon(func(alpha float64) float64 { return ddgRDP(alpha, a, a1, tau, fd) }, delta)
}

// ddgRDP is Kairouz et al.'s bound on the Renyi divergence of order alpha
// of the sum of discrete Gaussians (see distParams), with a = Delta2/sigma,
// a1 = Delta1/sigma, tau and the dimension fd.
func ddgRDP(alpha, a, a1, tau, fd float64) float64 {
	t1 := alpha/2*a*a + tau*fd
	t2 := alpha / 2 * (a*a + 2*a1*tau + tau*tau*fd)
	x := a + math.Sqrt(fd)*tau
	t3 := alpha / 2 * x * x
	return min(t1, t2, t3)
}

// skellamEpsilon is the eps of Skellam noise of variance mu against
// sensitivities d2 (L2) and d1 (L1).
func skellamEpsilon(d2, d1, mu, delta float64) float64 {
	return rdpEpsilon(func(alpha float64) float64 { return skellamRDP(alpha, d2, d1, mu) }, delta)
}

// skellamRDP is Agarwal et al.'s bound on the Renyi divergence of integer
// order alpha of Skellam noise of variance mu (see distParams).
func skellamRDP(alpha, d2, d1, mu float64) float64 {
	return alpha*d2*d2/(2*mu) + min(((2*alpha-1)*d2*d2+6*d1)/(4*mu*mu), 3*d1/(2*mu))
}

// distScaleC is sc = s C from the heuristic (see distParams).
func distScaleC(b, n int, k float64, dp int, nu float64) float64 {
	fn := float64(n)
	return math.Sqrt(math.Ldexp(1, 2*b)-fn*k*k) / (2 * k * math.Sqrt(fn*fn/float64(dp)+nu*nu))
}

// roundedBound is Bound (see distParams) for scaled norm sc in dimension dp.
func roundedBound(sc float64, dp int) float64 {
	sd := math.Sqrt(float64(dp))
	return min(sc+sd, math.Sqrt(sc*sc+float64(dp)/4+math.Sqrt(2*math.Log(1/distBeta))*(sc+sd/2)))
}

// distEvaluate is the calibration at nu, with its eps.
func distEvaluate(name string, delta float64, b, n int, k float64, dp int, nu float64) (*distParams, error) {
	sc := distScaleC(b, n, k, dp, nu)
	p := &distParams{skellam: name == "skellam", dp: dp, nu: nu, sc: sc, bound: roundedBound(sc, dp)}
	d2 := 2 * p.bound
	d1 := 2 * p.bound * min(math.Sqrt(float64(dp)), p.bound)
	local := sc * nu / math.Sqrt(float64(n))
	if p.skellam {
		mu := (sc * nu) * (sc * nu)
		p.lambda = mu / (2 * float64(n))
		p.eps = skellamEpsilon(d2, d1, mu, delta)
		return p, nil
	}
	s := math.Max(math.Ceil(local*local), 1)
	if s > 1<<30 {
		return nil, fmt.Errorf("mech: %s: local variance %v beyond the sampler's 2^30", name, s)
	}
	g, err := noise.NewIntegerGaussian(uint64(s))
	if err != nil {
		return nil, fmt.Errorf("mech: %s: %w", name, err)
	}
	p.gauss = g
	p.eps = ddgEpsilon(d2, d1, s, n, dp, delta)
	return p, nil
}

// calibrate finds the smallest checked nu whose eps is at most eps.
func calibrate(name string, eps, delta float64, b, n int, k float64, dp int) (*distParams, error) {
	try := func(nu float64) (*distParams, bool, error) {
		p, err := distEvaluate(name, delta, b, n, k, dp, nu)
		if err != nil {
			return nil, false, err
		}
		return p, p.eps <= eps, nil
	}
	// Start from the continuous Gaussian's classical calibration for L2
	// sensitivity 2C.
	nu := 2 * math.Sqrt(2*math.Log(1.25/delta)) / eps
	best, ok, err := try(nu)
	if err != nil {
		return nil, err
	}
	var lo, hi float64
	if ok {
		hi = nu
		for range 200 {
			nu /= 2
			p, ok, err := try(nu)
			if err != nil {
				return nil, err
			}
			if !ok {
				lo = nu
				break
			}
			best, hi = p, nu
		}
		if lo == 0 {
			return best, nil // any noise will do: the smallest tried
		}
	} else {
		lo = nu
		floor := best.eps
		for i := 0; ; i++ {
			if i == 200 {
				return nil, fmt.Errorf("mech: %s: central eps %v is out of reach with %d bits for %d clients and %d (padded) parameters: the rounding alone costs eps %.3g; raise ModBits",
					name, eps, b, n, dp, floor)
			}
			nu *= 2
			p, ok, err := try(nu)
			if err != nil {
				return nil, err
			}
			floor = min(floor, p.eps)
			if ok {
				best, hi = p, nu
				break
			}
			lo = nu
		}
	}
	for hi > lo*(1+1e-12) {
		mid := math.Sqrt(lo * hi)
		if mid <= lo || mid >= hi {
			break
		}
		p, ok, err := try(mid)
		if err != nil {
			return nil, err
		}
		if ok {
			best, hi = p, mid
		} else {
			lo = mid
		}
	}
	return best, nil
}
