package noise

import "github.com/fedpq/fedpq/corr"

// maxIntegerVariance bounds the variance parameter of NewIntegerGaussian:
// with S <= 2^30 and t = floor(sqrt(S))+1 <= 2^15+1, d = 2 S t^2 < 2^62,
// as the exact sampler needs.
const maxIntegerVariance = 1 << 30

// NewIntegerGaussian returns the discrete Gaussian on the integers with
// P(Z = z) proportional to exp(-z^2/(2S)), for 1 <= S <= 2^30: the noise of
// the distributed discrete Gaussian mechanism (Kairouz, Liu and Steinke
// 2021), whose clients' integer vectors need integer noise, not noise on a
// grid tied to sigma. It is the DiscreteGaussian of granularity 1 and
// Sigma() = sqrt(S), sampled exactly by the same algorithm (CKS Algorithm
// 3, conditioned on |Z| < 2^32, which at S <= 2^30 has probability above
// 1 - exp(-2)^(2^32)); Int gives its samples as integers.
func NewIntegerGaussian(s uint64) (DiscreteGaussian, error) {
	if s < 1 || s > maxIntegerVariance {
		return DiscreteGaussian{}, errorf("integer gaussian variance %d must be in [1, 2^30]", s)
	}
	t := isqrt(s) + 1
	return DiscreteGaussian{g: 1, s: s, t: t, d: 2 * s * t * t}, nil
}

// Int returns one sample Z (in grid steps: for NewIntegerGaussian, an
// integer of the distribution itself).
func (d DiscreteGaussian) Int(src corr.Source) int64 { return d.sample(src) }
