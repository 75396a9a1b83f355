// Package privacy calibrates fedpq's privacy noise: the analytic Gaussian
// mechanism of Balle and Wang (2018), its exact-sampler counterpart on a
// grid (Canonne, Kamath and Steinke 2020), the Laplace mechanism, and the
// alpha = (e^eps+1)/(e^eps-1) of the one-bit LDP mechanisms.
//
// # Run-level accounting
//
// The ledger (Account) states privacy per parameter and per round. An
// Accountant states one client's whole contribution over a whole run as
// one (eps, delta). A run is described by Events: Gaussian{Z} (noise
// multiplier Z), RDPCurve (a mechanism known by its Renyi curve, such as
// the distributed discrete Gaussian or Skellam), Pair (a discrete
// dominating pair, such as SecureSumPair's blanket), Composed and Sequence,
// and PoissonSampled (add/remove one client) or FixedSampled (m of n
// without replacement, replace one client) around a single mechanism.
// Compose each round's event as the run goes; Epsilon, Delta or Guarantee
// answer at any time; JSON saves and restores the accountant exactly.
//
// Where every event has a privacy loss distribution (Gaussian, Pair, and
// those Poisson-sampled), the accountant composes them numerically
// (Koskela et al.; Google's dp_accounting; Microsoft's prv-accountant):
// each direction of neighbours on its own grid, losses split between grid
// points so that the result is an upper bound (connect-the-dots,
// Doroshenko et al. 2022), runs of one event by one FFT power in a
// Chernoff window, truncated mass counted in delta. Otherwise it adds
// Renyi-DP curves: the sampled Gaussian of Mironov, Talwar and Zhang
// (2019), for any Poisson-sampled curve the same binomial sum with its
// remove direction certified per rate and order (remove.go; Zhu and
// Wang's 2019 bound where not), Wang,
// Balle and Kasiviswanathan's (2019) for sampling without replacement, and
// the conversion of Canonne, Kamath and Steinke (2020). Auto takes the
// smaller of the two where both apply; NoiseMultiplier finds the least Z
// that meets a target (eps, delta).
//
// Every function validates its arguments and returns an error rather than a
// value that would silently give less privacy than asked.
package privacy

import (
	"fmt"
	"math"
)

func checkEpsilon(eps float64) error {
	if !(eps > 0) || math.IsInf(eps, 0) {
		return fmt.Errorf("privacy: epsilon %v must be positive and finite", eps)
	}
	return nil
}

func checkDelta(delta float64) error {
	if !(delta > 0 && delta < 1) {
		return fmt.Errorf("privacy: delta %v must be in (0, 1)", delta)
	}
	return nil
}

func checkSensitivity(s float64) error {
	if !(s > 0) || math.IsInf(s, 0) {
		return fmt.Errorf("privacy: sensitivity %v must be positive and finite", s)
	}
	return nil
}

// LaplaceScale is the scale b = sensitivity/eps of the Laplace mechanism,
// which is eps-DP for a query of that L1 sensitivity (Dwork, McSherry,
// Nissim and Smith 2006). fedpq's baseline uses sensitivity 2r for a
// parameter clipped to [c-r, c+r].
func LaplaceScale(eps, sensitivity float64) (float64, error) {
	if err := checkEpsilon(eps); err != nil {
		return 0, err
	}
	if err := checkSensitivity(sensitivity); err != nil {
		return 0, err
	}
	return sensitivity / eps, nil
}

// Alpha is (e^eps+1)/(e^eps-1) = coth(eps/2): the factor by which an
// eps-LDP one-bit mechanism (randomized response on a stochastically
// rounded bit) must stretch its output to stay unbiased. It is computed
// with expm1, so it is accurate for small eps too.
func Alpha(eps float64) (float64, error) {
	if err := checkEpsilon(eps); err != nil {
		return 0, err
	}
	m := math.Expm1(eps)
	if math.IsInf(m, 1) {
		return 1, nil
	}
	return (m + 2) / m, nil
}
