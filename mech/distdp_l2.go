package mech

import (
	"fmt"
	"math"

	"github.com/fedpq/fedpq/mech/noise"
)

// distL2 is ddgauss or skellam in their L2 mode (Config.Noise = z > 0),
// the distributed DP-FedAvg of TensorFlow Federated: the pipeline of
// distDP on one vector x of n parameters with ||x||_2 <= C = rg.Radius
// (the round engine's clipping; Encode refuses a larger norm, l2Input,
// and clips no parameter), the noise set by z instead of a per-round
// (eps, delta):
//
//   - the scale follows the same heuristic with nu = z: sc = s C =
//     sqrt(2^(2b) - n k^2) / (2k sqrt(n^2/d' + z^2)), n = Config.Clients;
//   - each client adds 1/n of noise of standard deviation sc z in the
//     scaled units, z C in the input's: ddgauss N_Z(0, S) with
//     S = ceil((sc z/sqrt(n))^2) (at least 1, so the sum's variance n S is
//     at least (sc z)^2), skellam Poisson(lambda) - Poisson(lambda) with
//     lambda = (sc z)^2/(2n);
//   - the zero-out of one client (the relation of L2) moves the sum by that
//     client's rounded vector: Delta2 = Bound and Delta1 = Bound
//     min(sqrt(d'), Bound) (Bound as in distParams, enforced by
//     conditional rounding). A zero vector rounds to zero exactly, so the
//     zeroed client adds its noise and nothing else. The per-round mode,
//     and SumReplaceRDP (fixed-size sampling), use the replacement of one
//     client instead, twice these;
//   - RDP is Kairouz et al.'s bound (ddgauss) or Agarwal et al.'s
//     (skellam) of distParams at these sensitivities, at the order
//     ceil(alpha) (Renyi divergence grows with the order, and Agarwal et
//     al.'s bound is for integer orders).
//
// The bits are those of the per-round mode: b per coordinate of the
// rotated vector, padded to a power of two.
type distL2 struct{ *distDP }

// distL2MaxParams is the longest vector of the L2 mode: the rotation
// holds 16 bytes per padded coordinate (256 MiB at 2^24).
const distL2MaxParams = 1 << 24

func newDistL2(c Config, name string) (Mechanism, error) {
	if err := checkNoise(name, c.Noise); err != nil {
		return nil, err
	}
	b, n, k, err := distShape(c, name)
	if err != nil {
		return nil, err
	}
	return distL2{&distDP{name: name, z: c.Noise, bits: b, clients: n, k: k}}, nil
}

// distL2Params is the L2 mode's parameters for padded size dp.
func distL2Params(name string, z float64, b, n int, k float64, dp int) (*distParams, error) {
	sc := distScaleC(b, n, k, dp, z)
	p := &distParams{skellam: name == "skellam", dp: dp, nu: z, sc: sc, bound: roundedBound(sc, dp)}
	local := sc * z / math.Sqrt(float64(n))
	if p.skellam {
		p.lambda = (sc * z) * (sc * z) / (2 * float64(n))
		if !(p.lambda < 1<<40) {
			return nil, fmt.Errorf("mech: %s: Poisson mean %v per client out of range", name, p.lambda)
		}
		return p, nil
	}
	s := math.Max(math.Ceil(local*local), 1)
	if !(s <= 1<<30) {
		return nil, fmt.Errorf("mech: %s: local variance %v beyond the sampler's 2^30", name, s)
	}
	g, err := noise.NewIntegerGaussian(uint64(s))
	if err != nil {
		return nil, fmt.Errorf("mech: %s: %w", name, err)
	}
	p.gauss = g
	return p, nil
}

// RDP is the bound of the order ceil(alpha) for the zero-out of one
// client's vector of n parameters (see distL2).
func (m distL2) RDP(alpha float64, n int) (float64, error) {
	return m.SumRDP(alpha, n, m.clients)
}

// SumRDP is RDP's bound for a sum of clients shares of the noise: the
// Skellam of clients times the share's mean, or clients discrete
// Gaussians of the share's variance (Kairouz et al.'s tau for that many).
func (m distL2) SumRDP(alpha float64, n, clients int) (float64, error) {
	return m.sumRDP(alpha, n, clients, 1)
}

// ReplaceRDP is SumReplaceRDP at the count the noise is sized for.
func (m distL2) ReplaceRDP(alpha float64, n int) (float64, error) {
	return m.SumReplaceRDP(alpha, n, m.clients)
}

// SumReplaceRDP is SumRDP for the replacement of one client's vector by
// another: the sum moves by the difference of two rounded vectors, within
// 2 Bound in L2 and 2 Bound min(sqrt(d'), Bound) in L1, the per-round
// mode's sensitivities (distdp_calib.go).
func (m distL2) SumReplaceRDP(alpha float64, n, clients int) (float64, error) {
	return m.sumRDP(alpha, n, clients, 2)
}

// sumRDP is the bound at the zero-out's sensitivities times scale.
func (m distL2) sumRDP(alpha float64, n, clients int, scale float64) (float64, error) {
	if err := checkOrder(m.name, alpha, n, distL2MaxParams); err != nil {
		return 0, err
	}
	if clients < 1 {
		return 0, fmt.Errorf("mech: %s: a sum of %d clients' noise", m.name, clients)
	}
	p, err := m.params(n)
	if err != nil {
		return 0, err
	}
	a := math.Ceil(alpha)
	d2 := scale * p.bound
	d1 := scale * p.bound * min(math.Sqrt(float64(p.dp)), p.bound)
	if p.skellam {
		return skellamRDP(a, d2, d1, 2*float64(clients)*p.lambda), nil
	}
	s := p.gauss.Variance()
	sig := math.Sqrt(float64(clients) * s)
	return ddgRDP(a, d2/sig, d1/sig, ddgTau(s, clients), float64(p.dp)), nil
}
