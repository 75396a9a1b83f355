package mech

import (
	"math"
	"testing"
)

// TestLaplaceSDQGuaranteeAndMoments checks that the noise is calibrated to
// eps exactly on its grid (noise's own exact accounting of the sensitivity
// 2r after grid rounding), and, from 4000 clients, that each output's mean
// is the clipped input up to the stated clipping bias b 2^-Rate/2 plus 5
// standard errors, and its variance is the closed form Variance within
// 15%.
func TestLaplaceSDQGuaranteeAndMoments(t *testing.T) {
	rg := Range{Center: 0.5, Radius: 1}
	const clients = 4000
	for _, dim := range []int{1, 2} {
		for _, c := range []struct {
			rate int
			eps  float64
		}{{4, 1}, {6, 4}} {
			m := latNew(t, "laplace+sdq", c.eps, c.rate, dim).(*laplaceSDQ)
			l, wide, err := m.plan(rg)
			if err != nil {
				t.Fatal(err)
			}
			if got := l.Epsilon(2 * rg.Radius); got > c.eps {
				t.Errorf("L=%d: grid epsilon %v > %v", dim, got, c.eps)
			}
			b := l.Scale()
			bias := b * math.Ldexp(1, -c.rate) / 2
			mean, variance := latRun(t, m, latInputs, rg, clients)
			for i, w := range latInputs {
				want := rg.Clip(float64(w))
				v := m.Variance(float64(w), rg)
				if se := math.Sqrt(v / clients); math.Abs(mean[i]-want) > bias+5*se {
					t.Errorf("L=%d R=%d eps=%v: mean output for %v is %v, want %v within %v", dim, c.rate, c.eps, w, mean[i], want, bias+5*se)
				}
				if math.Abs(variance[i]/v-1) > 0.15 {
					t.Errorf("L=%d R=%d eps=%v: variance for %v is %v, want %v", dim, c.rate, c.eps, w, variance[i], v)
				}
			}
			t.Logf("laplace+sdq L=%d R=%d eps=%v: variance %.4g r^2 at the center, %.4g at an end (2b^2 = %.4g, sdq on r' %.3g), bias bound %.3g r",
				dim, c.rate, c.eps, m.Variance(rg.Center, rg), m.Variance(rg.Center+rg.Radius, rg), 2*b*b, m.q.Variance(0, wide), bias)
		}
	}
}
