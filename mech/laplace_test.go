package mech

import (
	"math"
	"testing"

	"github.com/fedpq/fedpq/privacy"
)

func TestLaplaceUnbiased(t *testing.T) {
	checkGridUnbiased(t, "laplace", Config{Epsilon: 1})
}

func TestLaplaceRoundTrip(t *testing.T) {
	checkGridRoundTrip(t, "laplace", Config{Epsilon: 2})
}

func TestLaplaceErrors(t *testing.T) {
	checkGridErrors(t, "laplace", Config{Epsilon: 1})
}

// TestLaplaceCalibration checks that the noise is exactly eps-LDP for the
// rounded inputs (m/t <= eps, decided exactly, and the log-pmf ratio of the
// worst shift within eps) while its scale stays within a relative
// 2^-30/eps + 2^-31 (plus the 2^-40 margin) of 2r/eps, and that Variance is
// 2b^2 up to the grid terms (a relative 2^-60, so 1e-12 here).
func TestLaplaceCalibration(t *testing.T) {
	rg := Range{Center: -0.2, Radius: 0.75}
	for _, eps := range []float64{0.1, 1, 5, 50} {
		l, err := laplace{eps: eps}.noise(rg)
		if err != nil {
			t.Fatal(err)
		}
		sens := 2 * rg.Radius
		m := int64(l.Sensitivity(sens) / l.Granularity())
		if !l.IsPrivate(eps, sens) || l.LogProb(0)-l.LogProb(m) > eps {
			t.Errorf("eps %v: scale %v is not eps-private for %d grid steps", eps, l.Scale(), m)
		}
		b, _ := privacy.LaplaceScale(eps, sens)
		if r := l.Scale()/b - 1; r < 0 || r > 0x1p-30/eps+0x1p-31+0x1p-39 {
			t.Errorf("eps %v: scale %v is %.3g above 2r/eps = %v", eps, l.Scale(), r, b)
		}
		v := laplace{eps: eps}.Variance(rg.Center, rg)
		if want := 2 * l.Scale() * l.Scale(); math.Abs(v/want-1) > 1e-12 {
			t.Errorf("eps %v: Variance %v, want 2b^2 = %v", eps, v, want)
		}
	}
	if m, _ := New("laplace", Config{Epsilon: 1}); m.Coupling() != Independent || m.Bits(3) != 96 {
		t.Errorf("laplace: coupling %v, Bits(3) = %d", m.Coupling(), m.Bits(3))
	}
}
