package privacy

import "math"

// BinomialQuantile is the smallest h in [k, n] such that a Binomial(n, q)
// count exceeds h with probability at most e^logLimit, and that
// probability, P[count > h]: the tail summed from n down, in log space,
// so that tails far below float64's epsilon (1e-14 and less) are exact to
// their last digits. fl sizes the rounds' shares of the noise with it.
func BinomialQuantile(n, k int, q, logLimit float64) (h int, tail float64) {
	lq, l1q := math.Log(q), math.Log1p(-q)
	lgn, _ := math.Lgamma(float64(n) + 1)
	logTail := math.Inf(-1)
	h = n
	for j := n; j > k; j-- {
		lj, _ := math.Lgamma(float64(j) + 1)
		lnj, _ := math.Lgamma(float64(n-j) + 1)
		next := logAddExp(logTail, lgn-lj-lnj+float64(j)*lq+float64(n-j)*l1q)
		if next > logLimit {
			break
		}
		h, logTail = j-1, next
	}
	return h, math.Exp(logTail)
}
