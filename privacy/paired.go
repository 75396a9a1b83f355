package privacy

import (
	"fmt"
	"math"
)

// PairedSecureSumEpsilon is the central epsilon, at delta, of one paired
// client's parameter (corbin, coq, augcorbin's pairs) against an observer
// that sees only the round's sum of one-bit messages (secure aggregation
// or a shuffler), when alone other clients of the round quantize alone
// with independent eps0-LDP bits (augcorbin's alone clients, a client left
// without a partner, or ldpq clients). It is one parameter of one round,
// worst case over every other input, the partner's included; +Inf means
// no epsilon up to 64 meets delta.
//
// The argument, for any paired mechanism whose two messages are each
// eps0-LDP bits (P(+1) in [qlo, qhi], qlo = 1/(e^eps0+1)), coupled in any
// way, as corbin's are with any number of shared bits and coq's with any
// codebook:
//
//   - Other pairs give no noise in the worst case: with both inputs at the
//     center c (T(c) = 2^63), corbin's leader sends +1 iff Z < 2^(d-1) and
//     its follower iff Z >= 2^(d-1), so their sum is 1 with certainty. Their
//     messages are independent of the target's, so giving them to the
//     observer only helps it; they are left out.
//   - The alone clients are a privacy blanket (SecureSumBlanket): the sum
//     is the target pair's sum S in {0, 1, 2} plus Binomial(M, 1/2) plus a
//     known offset, M ~ Binomial(alone, 2 qlo).
//   - For a partner whose bit has P(+1) = q2, the law of S is
//     (1-q1-q2+c, q1+q2-2c, c), c = P(both +1), over q1 in [qlo, qhi] and
//     c in [max(0, q1+q2-1), min(q1, q2)]: a polygon whose vertices are
//     affine in q2. The hockey-stick divergence is jointly convex, so its
//     largest value is at a pair of vertices and q2 in {qlo, qhi}; the two
//     q2 are mirror images (S -> 2-S). At q2 = qhi the distinct vertices
//     are (0, 1, 0), (qlo, qhi-qlo, qlo), (qlo, 0, qhi), (0, 2qlo, qhi-qlo).
//   - delta(eps) <= sum_m P[M = m] max over the 12 ordered pairs of vertices
//     of their divergence after adding Binomial(m, 1/2), each summed over
//     the count within 12 standard deviations, with a bound on the rest
//     added (as SecureSumBlanket, runs of m share the largest value).
//
// It is an upper bound, looser than the true corbin value by the slack of
// allowing any coupling, and it does not fall to eps0 for few clients:
// the pair's sum can move by 2, and the observer, unlike an eavesdropper,
// sees the partner's message inside the sum. With no alone client there is
// no guarantee at all: with the others' inputs at c, S = 2 is impossible
// for a target at or below c and has probability (T(w)-2^63)/2^64, up to
// tanh(eps0/2)/2, above it, so no epsilon holds at any delta below that
// (docs/privacy.md). The bound is +Inf unless (1 - qlo)^alone <= delta:
// with no fair coin among the alone clients (S is 0 or 2 under one input
// and not the other) the loss is unbounded.
func PairedSecureSumEpsilon(eps0 float64, alone int, delta float64) (float64, error) {
	if err := checkEpsilon(eps0); err != nil {
		return 0, err
	}
	if err := checkDelta(delta); err != nil {
		return 0, err
	}
	if alone < 0 || alone > maxBlanketClients {
		return 0, fmt.Errorf("privacy: alone clients %d must be in 0..%d", alone, maxBlanketClients)
	}
	qlo, qhi := rrProbs(eps0)
	verts := [][3]float64{{0, 1, 0}, {qlo, qhi - qlo, qlo}, {qlo, 0, qhi}, {0, 2 * qlo, qhi - qlo}}
	d := func(eps float64) float64 {
		s := blanketSum(alone, 2*qlo, 1e-6*delta, func(m int) float64 { return pairBlanketDelta(m, verts, eps) })
		return min(1, s*(1+lgammaMargin))
	}
	const most = 64.0
	if d(most) > delta {
		return math.Inf(1), nil
	}
	return smallestEpsilon(d, delta, most), nil
}

// pairBlanketDelta is the largest hockey-stick divergence at e^eps between
// two of the distributions verts on {0, 1, 2}, each plus Binomial(m, 1/2):
// the count y is summed over m/2+1 +- (10 sd + 3), and a bound on b's mass
// outside that window (b the Binomial(m, 1/2) pmf; P(y) is at most the
// largest b(y-j)) is added for the rest.
func pairBlanketDelta(m int, verts [][3]float64, eps float64) float64 {
	mf := float64(m)
	half := 10*math.Sqrt(mf)/2 + 3
	lo, hi := max(0, int(mf/2-half)), min(m, int(mf/2+half)+1) // the window of b
	w := hi - lo + 1
	// b padded with two zeros on each side: bp[i] = b(lo-2+i).
	bp := make([]float64, w+4)
	bp[2] = math.Exp(logBinom(m, lo) - mf*math.Ln2)
	for k := lo; k < hi; k++ {
		bp[k-lo+3] = bp[k-lo+2] * float64(m-k) / float64(k+1)
	}
	var rest float64
	if lo > 0 {
		r := float64(lo) / float64(m-lo+1) // b(lo-1)/b(lo), a bound on the ratios below
		rest += bp[2] * r / (1 - r)
	}
	if hi < m {
		r := float64(m-hi) / float64(hi+1)
		rest += bp[w+1] * r / (1 - r)
	}
	// dist[v][i] = P_v(y) for y = lo+i, i in [0, w+2).
	dist := make([][]float64, len(verts))
	for v, x := range verts {
		d := make([]float64, w+2)
		for i := range d {
			d[i] = x[0]*bp[i+2] + x[1]*bp[i+1] + x[2]*bp[i]
		}
		dist[v] = d
	}
	ee := math.Exp(eps)
	worst := 0.0
	for i, p := range dist {
		for j, q := range dist {
			if i == j {
				continue
			}
			s := 0.0
			for y, py := range p {
				s += max(0, py-ee*q[y])
			}
			worst = max(worst, s)
		}
	}
	return min(1, worst+rest)
}
