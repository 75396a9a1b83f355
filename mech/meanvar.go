package mech

import "fmt"

// MeanVariance is the variance of one coordinate of the mean of n uploads
// under rg whose clients all have input w: (alone Var(w) + pairs
// PairVariance(w, w)) / n^2, where alone of the uploads come from clients
// whose partner's upload is not in the sum (for a Paired mechanism; every
// upload of an Independent or Dithered one) and the other n - alone are
// (n - alone)/2 complete pairs. It is what a server can say about the noise
// in a decoded mean: the inputs it does not see are taken to be equal, at w.
//
// A Grouped mechanism (cq) couples the whole round, and a mechanism without
// a closed-form variance (Variancer, and PairVariancer when Paired) has none
// to give: both are errors.
func MeanVariance(m Mechanism, w float64, rg Range, n, alone int) (float64, error) {
	if n < 1 || alone < 0 || alone > n {
		return 0, fmt.Errorf("mech: mean variance of %d uploads, %d alone", n, alone)
	}
	v, ok := m.(Variancer)
	if !ok {
		return 0, fmt.Errorf("mech: %s has no closed-form variance", m.Name())
	}
	lone := v.Variance(w, rg)
	total := float64(n) * lone
	switch m.Coupling() {
	case Grouped:
		return 0, fmt.Errorf("mech: %s couples the whole group; it has no variance of a mean of independent uploads", m.Name())
	case Paired:
		pv, ok := m.(PairVariancer)
		if !ok {
			return 0, fmt.Errorf("mech: %s is paired but has no closed-form pair variance", m.Name())
		}
		if (n-alone)%2 != 0 {
			return 0, fmt.Errorf("mech: %d uploads with %d alone leave half a pair", n, alone)
		}
		total = float64(alone)*lone + float64((n-alone)/2)*pv.PairVariance(w, w, rg)
	}
	return total / float64(n) / float64(n), nil
}
