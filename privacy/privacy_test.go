package privacy

import (
	"fmt"
	"math"
	"testing"
)

// TestAnalyticGaussianPublished checks sigma/Delta at delta = 1e-5 against
// the values published for the analytic Gaussian mechanism (Balle and Wang
// 2018; papers/NOTES.md), to the digits given, at two sensitivities.
func TestAnalyticGaussianPublished(t *testing.T) {
	for _, c := range []struct {
		eps, want float64
		digits    int
	}{{0.1, 30.750, 3}, {1, 3.7306, 4}, {5, 0.8919, 4}} {
		for _, d := range []float64{1, 2} {
			s, err := AnalyticGaussianSigma(c.eps, 1e-5, d)
			if err != nil {
				t.Fatal(err)
			}
			if got := fmt.Sprintf("%.*f", c.digits, s/d); got != fmt.Sprintf("%.*f", c.digits, c.want) {
				t.Errorf("eps %v, D %v: sigma/D = %v, published %v", c.eps, d, s/d, c.want)
			}
		}
	}
}

// TestAnalyticGaussianTight checks, over a wide range of eps and delta, that
// the returned sigma satisfies the exact condition and a 0.1% smaller sigma
// does not, and that it beats the classic bound where that bound is valid.
func TestAnalyticGaussianTight(t *testing.T) {
	for _, eps := range []float64{1e-6, 0.01, 0.1, 0.5, 1, 2, 5, 10, 50, 700, 1000} {
		for _, delta := range []float64{1e-12, 1e-5, 0.1, 0.9} {
			s, err := AnalyticGaussianSigma(eps, delta, 2)
			if err != nil {
				t.Fatalf("eps %v delta %v: %v", eps, delta, err)
			}
			if d, _ := GaussianDelta(eps, s, 2); d > delta {
				t.Errorf("eps %v delta %v: sigma %v gives delta %v", eps, delta, s, d)
			}
			if d, _ := GaussianDelta(eps, 0.999*s, 2); d <= delta {
				t.Errorf("eps %v delta %v: 0.999 sigma still gives delta %v <= target", eps, delta, d)
			}
			if classic := math.Sqrt(2*math.Log(1.25/delta)) * 2 / eps; eps < 1 && delta < 0.1 && s > classic {
				t.Errorf("eps %v delta %v: analytic sigma %v above the classic %v", eps, delta, s, classic)
			}
		}
	}
}

// TestGaussianDeltaTails checks logPhi against direct evaluation where that
// is accurate, and its asymptotic branch for continuity at the switch.
func TestGaussianDeltaTails(t *testing.T) {
	for _, x := range []float64{-30, -5, -1, 0, 1, 5} {
		want := math.Log(0.5 * math.Erfc(-x/math.Sqrt2))
		if got := logPhi(x); math.Abs(got-want) > 1e-13*math.Max(1, math.Abs(want)) {
			t.Errorf("logPhi(%v) = %v, want %v", x, got, want)
		}
	}
	below, above := logErfc(math.Nextafter(25, 0)), logErfc(25)
	if math.Abs(below-above) > 1e-12*math.Abs(above) {
		t.Errorf("logErfc jumps at 25: %v then %v", below, above)
	}
	if got := logPhi(-1000); math.IsInf(got, 0) || math.IsNaN(got) || math.Abs(got+500000-(-math.Log(1000*math.Sqrt(2*math.Pi)))) > 1e-6 {
		t.Errorf("logPhi(-1000) = %v, want about -500000 - log(1000 sqrt(2 pi))", got)
	}
}

// exactDiscreteDelta is the hockey-stick divergence between g*Z and
// g*(Z+shift), Z the discrete Gaussian of variance parameter s2, summed
// term by term over 80 standard deviations.
func exactDiscreteDelta(eps, s2 float64, shift int) float64 {
	l := int(40*math.Sqrt(s2)) + shift
	p := func(z int) float64 { return math.Exp(-float64(z) * float64(z) / (2 * s2)) }
	norm, d := 0.0, 0.0
	for z := -l; z <= l; z++ {
		norm += p(z)
		d += max(0, p(z)-math.Exp(eps)*p(z-shift))
	}
	return d / norm
}

// TestDiscreteGaussianDelta checks the rigorous bound against the exact
// delta of the discrete Gaussian, summed directly, on coarse grids where the
// two differ visibly, for every shift up to the sensitivity.
func TestDiscreteGaussianDelta(t *testing.T) {
	for _, c := range []struct {
		eps, sigmaSteps float64
		m               int
	}{{0.5, 3, 1}, {1, 6.3, 2}, {1, 20, 5}, {3, 2.2, 1}, {0.2, 40, 3}} {
		const g = 0.25
		sigma, sens := c.sigmaSteps*g, float64(c.m)*g
		bound, err := DiscreteGaussianDelta(c.eps, sigma, sens, g)
		if err != nil {
			t.Fatal(err)
		}
		cont, _ := GaussianDelta(c.eps, sigma, sens)
		for shift := 1; shift <= c.m; shift++ {
			if exact := exactDiscreteDelta(c.eps, c.sigmaSteps*c.sigmaSteps, shift); exact > bound {
				t.Errorf("%+v shift %d: exact discrete delta %v above the bound %v (continuous %v)", c, shift, exact, bound, cont)
			}
		}
	}
	if _, err := DiscreteGaussianDelta(1, 1, 1, 0.3); err == nil {
		t.Error("a sensitivity that is not a whole number of steps was accepted")
	}
}

func TestLaplaceScaleAlpha(t *testing.T) {
	if b, err := LaplaceScale(0.5, 2); err != nil || b != 4 {
		t.Errorf("LaplaceScale(0.5, 2) = %v, %v; want 4", b, err)
	}
	for _, eps := range []float64{1e-9, 0.1, 1, 5, 40, 800} {
		a, err := Alpha(eps)
		if err != nil {
			t.Fatal(err)
		}
		if want := 1 / math.Tanh(eps/2); math.Abs(a-want) > 1e-12*want {
			t.Errorf("Alpha(%v) = %v, want coth(eps/2) = %v", eps, a, want)
		}
	}
}

func TestErrors(t *testing.T) {
	nan, inf := math.NaN(), math.Inf(1)
	for _, c := range []struct{ eps, delta, sens float64 }{
		{0, 1e-5, 1}, {-1, 1e-5, 1}, {nan, 1e-5, 1}, {inf, 1e-5, 1},
		{1, 0, 1}, {1, 1, 1}, {1, -1e-5, 1}, {1, nan, 1},
		{1, 1e-5, 0}, {1, 1e-5, -2}, {1, 1e-5, nan}, {1, 1e-5, inf},
	} {
		if _, err := AnalyticGaussianSigma(c.eps, c.delta, c.sens); err == nil {
			t.Errorf("AnalyticGaussianSigma(%v, %v, %v) accepted", c.eps, c.delta, c.sens)
		}
	}
	for _, eps := range []float64{0, -1, nan, inf} {
		if _, err := LaplaceScale(eps, 1); err == nil {
			t.Errorf("LaplaceScale(%v, 1) accepted", eps)
		}
		if _, err := Alpha(eps); err == nil {
			t.Errorf("Alpha(%v) accepted", eps)
		}
	}
	if _, err := LaplaceScale(1, 0); err == nil {
		t.Error("LaplaceScale with sensitivity 0 accepted")
	}
	if _, err := GaussianDelta(1, 0, 1); err == nil {
		t.Error("GaussianDelta with sigma 0 accepted")
	}
}

// The Gaussian baseline of a parameter clipped to [c-r, c+r] with r = 1:
// sensitivity 2r, eps = 1, delta = 1e-5.
func ExampleAnalyticGaussianSigma() {
	sigma, err := AnalyticGaussianSigma(1, 1e-5, 2)
	if err != nil {
		panic(err)
	}
	classic := math.Sqrt(2*math.Log(1.25/1e-5)) * 2 / 1
	fmt.Printf("analytic sigma %.4f, classic bound %.4f\n", sigma, classic)
	// Output: analytic sigma 7.4613, classic bound 9.6896
}
