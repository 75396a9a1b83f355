package noise

import (
	"math"
	"testing"

	"github.com/fedpq/fedpq/corr"
)

// seeded returns a fixed stream, so every test sees the same samples.
func seeded(b byte) *corr.Stream { return corr.NewStream([32]byte{b, 0x6e, 0x6f}) }

// within reports whether a Bernoulli frequency of n trials is within z
// standard deviations of p.
func within(t *testing.T, what string, hits, n int, p, z float64) {
	t.Helper()
	sd := math.Sqrt(p * (1 - p) / float64(n))
	if got := float64(hits) / float64(n); math.Abs(got-p) > z*sd+1e-12 {
		t.Errorf("%s: frequency %.6f, want %.6f (tolerance %d sd = %.2g)", what, got, p, int(z), z*sd)
	}
}

func TestBernoulliPrimitives(t *testing.T) {
	src := seeded(1)
	const n = 100000
	for _, c := range []struct{ num, den uint64 }{{0, 5}, {1, 1}, {1, 3}, {2, 7}, {6, 7}, {1 << 40, 1<<41 + 3}} {
		hits := 0
		for range n {
			if bernExpFrac(src, c.num, c.den) {
				hits++
			}
		}
		within(t, "exp(-n/d)", hits, n, math.Exp(-float64(c.num)/float64(c.den)), 5)
	}
	for _, c := range []struct{ q, r, d uint64 }{{1, 0, 1}, {2, 1, 3}, {3, 5, 9}} {
		hits := 0
		for range n {
			if bernExp(src, c.q, c.r, c.d) {
				hits++
			}
		}
		within(t, "exp(-(q+r/d))", hits, n, math.Exp(-float64(c.q)-float64(c.r)/float64(c.d)), 5)
	}
	for _, p := range []float64{0, 0.3, 0x1p-70 + 0.5, 1 - 0x1p-53} {
		hits := 0
		for range n {
			if bernDyadic(src, p) {
				hits++
			}
		}
		within(t, "dyadic", hits, n, p, 5)
	}
}

// TestDiscreteLaplacePMF compares the exact sampler at small t with its
// pmf P(k) = (1-p)/(1+p) p^|k|, p = exp(-1/t), bin by bin.
func TestDiscreteLaplacePMF(t *testing.T) {
	src := seeded(2)
	const n = 200000
	for _, tt := range []uint64{1, 3} {
		count := map[int64]int{}
		for range n {
			count[discreteLaplace(src, tt)]++
		}
		p := math.Exp(-1 / float64(tt))
		for k := int64(-6); k <= 6; k++ {
			want := (1 - p) / (1 + p) * math.Pow(p, math.Abs(float64(k)))
			within(t, "discrete laplace pmf", count[k], n, want, 5)
		}
	}
}

// TestDiscreteGaussianPMF compares the exact sampler at small S with the
// normalized exp(-z^2/(2S)), bin by bin.
func TestDiscreteGaussianPMF(t *testing.T) {
	src := seeded(3)
	const n = 200000
	for _, s := range []uint64{1, 3, 10} {
		tt := isqrt(s) + 1
		d := DiscreteGaussian{g: 1, s: s, t: tt, d: 2 * s * tt * tt}
		count := map[int64]int{}
		for range n {
			count[d.sample(src)]++
		}
		norm := 0.0
		for z := int64(-100); z <= 100; z++ {
			norm += math.Exp(d.LogProb(z))
		}
		for z := int64(-8); z <= 8; z++ {
			within(t, "discrete gaussian pmf", count[z], n, math.Exp(d.LogProb(z))/norm, 5)
		}
	}
}

// TestPMFRatios checks the likelihood ratios that the privacy guarantee is
// made of, at the parameters a mechanism uses: a shift of m grid steps
// changes the Laplace log-pmf by exactly |m|/t, which Epsilon bounds, and
// the Gaussian log-pmf by the quadratic the continuous Gaussian has.
func TestPMFRatios(t *testing.T) {
	l, err := NewLaplace(2.0 / 0.7)
	if err != nil {
		t.Fatal(err)
	}
	m := int64(l.Sensitivity(2) / l.Granularity())
	if eps := l.Epsilon(2); math.Abs(eps-float64(m)*l.Granularity()/l.Scale()) > 1e-15 || eps < 0.7*(1-1e-9) || eps > 0.7*(1+1e-9) {
		t.Errorf("Epsilon(2) = %v, want %v = m/t ~ 0.7", eps, float64(m)/float64(l.t))
	}
	if l.IsPrivate(0.7, 2) {
		t.Errorf("scale 2/0.7 passes IsPrivate(0.7, 2) although the grid adds a step to the sensitivity")
	}
	if l2, _ := NewLaplace(l.Sensitivity(2) / 0.7 * (1 + 0x1p-40)); !l2.IsPrivate(0.7, 2) {
		t.Errorf("scale (sensitivity+grid)/eps fails IsPrivate")
	}
	for _, k := range []int64{-3 * m, -m, -1, 0, 5, m, 7 * m} {
		if got := l.LogProb(k) - l.LogProb(k+m); got > l.Epsilon(2)*(1+1e-15) {
			t.Errorf("laplace log ratio at %d: %v > eps %v", k, got, l.Epsilon(2))
		}
	}
	if got := l.LogProb(m) - l.LogProb(2*m); got != float64(m)/float64(l.t) {
		t.Errorf("laplace log ratio in the tail %v, want exactly m/t = %v", got, float64(m)/float64(l.t))
	}
	g, err := NewGaussian(3.5)
	if err != nil {
		t.Fatal(err)
	}
	for _, z := range []int64{-70000, -1, 0, 3, 123456} {
		want := -float64(z) * float64(z) / (2 * float64(g.s))
		if got := g.LogProb(z); got != want {
			t.Errorf("gaussian LogProb(%d) = %v, want %v", z, got, want)
		}
	}
}

// moments checks the mean, the variance and one two-sided tail of n samples
// against a continuous target. The variance tolerance is 5 standard
// deviations of the sample variance, sqrt((kurt-1)/n) relative.
func moments(t *testing.T, what string, sample func() float64, n int, variance, kurt, tail, tailP float64) {
	t.Helper()
	var sum, sum2 float64
	out := 0
	for range n {
		x := sample()
		sum += x
		sum2 += x * x
		if math.Abs(x) > tail {
			out++
		}
	}
	mean := sum / float64(n)
	v := sum2/float64(n) - mean*mean
	if tol := 5 * math.Sqrt(variance/float64(n)); math.Abs(mean) > tol {
		t.Errorf("%s: mean %v, want 0 +- %v", what, mean, tol)
	}
	if tol := 5 * math.Sqrt((kurt-1)/float64(n)); math.Abs(v/variance-1) > tol {
		t.Errorf("%s: variance %v, want %v (relative tolerance %.3g)", what, v, variance, tol)
	}
	within(t, what+" tail", out, n, tailP, 5)
}

func TestLaplaceMoments(t *testing.T) {
	const b = 1.7
	src := seeded(4)
	l, err := NewLaplace(b)
	if err != nil {
		t.Fatal(err)
	}
	if s := l.Scale(); s < b || s > b*(1+0x1p-31) {
		t.Errorf("Scale() = %v for %v: want at most a relative 2^-31 more", s, b)
	}
	if v := l.Variance(); math.Abs(v/(2*l.Scale()*l.Scale())-1) > 1e-9 {
		t.Errorf("Variance() = %v, want ~2b^2 = %v", v, 2*l.Scale()*l.Scale())
	}
	moments(t, "laplace", func() float64 { return Laplace(src, b) }, 200000, 2*b*b, 6, 3*b, math.Exp(-3))
}

func TestGaussianMoments(t *testing.T) {
	const sigma = 0.37
	src := seeded(5)
	g, err := NewGaussian(sigma)
	if err != nil {
		t.Fatal(err)
	}
	if s := g.Sigma(); s < sigma || s > sigma*(1+0x1p-28) {
		t.Errorf("Sigma() = %v for %v: want at most a relative 2^-28 more", s, sigma)
	}
	moments(t, "gaussian", func() float64 { return Gaussian(src, sigma) }, 200000, sigma*sigma, 3, 2*sigma, math.Erfc(2/math.Sqrt2))
}

// TestGrid checks the grid properties the exactness argument rests on.
func TestGrid(t *testing.T) {
	for _, s := range []float64{0x1p-960, 1e-280, 0.001, 1, 3, 1 << 20, 1e200, 0x1p960} {
		l, err := NewLaplace(s)
		if err != nil {
			t.Fatal(err)
		}
		g, err := NewGaussian(s)
		if err != nil {
			t.Fatal(err)
		}
		for _, c := range []struct {
			what       string
			step, lo   float64
			shift      int
			scaleFound float64
		}{{"laplace", l.Granularity(), s, laplaceShift, l.Scale()}, {"gaussian", g.Granularity(), s, gaussianShift, g.Sigma()}} {
			if f, _ := math.Frexp(c.step); f != 0.5 {
				t.Errorf("%s(%v): granularity %v is not a power of two", c.what, s, c.step)
			}
			if r := s / c.step; r < math.Ldexp(1, c.shift) || r >= math.Ldexp(1, c.shift+1) {
				t.Errorf("%s(%v): scale/granularity = %v, want in [2^%d, 2^%d)", c.what, s, r, c.shift, c.shift+1)
			}
			if c.scaleFound < s {
				t.Errorf("%s(%v): sampled scale %v is smaller than asked", c.what, s, c.scaleFound)
			}
		}
		if g.d >= 1<<62 || g.t*g.t <= g.s || (g.t-1)*(g.t-1) > g.s {
			t.Errorf("gaussian(%v): S=%d t=%d d=%d break the sampler's bounds", s, g.s, g.t, g.d)
		}
	}
}

// TestAdd checks that Add lands on the grid, is unbiased (the random
// rounding adds f(1-f)g^2 to the variance) and is reproducible.
func TestAdd(t *testing.T) {
	l, err := NewLaplace(1)
	if err != nil {
		t.Fatal(err)
	}
	g := l.Granularity()
	x := 0.25 + 0.3*g // not on the grid
	const n = 100000
	src := seeded(6)
	sum := 0.0
	for range n {
		y, err := l.Add(src, x)
		if err != nil {
			t.Fatal(err)
		}
		if q := y / g; q != math.Trunc(q) {
			t.Fatalf("Add returned %v, not a multiple of %v", y, g)
		}
		sum += y - x
	}
	if tol := 5 * math.Sqrt(l.Variance()/n); math.Abs(sum/n) > tol {
		t.Errorf("Add is biased: mean error %v, tolerance %v", sum/n, tol)
	}
	// The rounding alone: with zero noise the result is floor or ceil, up
	// with probability equal to the fractional part.
	up := 0
	for range n {
		if addOnGrid(src, 5.3*g, g, 0) == 6*g {
			up++
		}
	}
	within(t, "random rounding", up, n, 0.3, 5)

	a, b := seeded(7), seeded(7)
	for range 100 {
		ya, _ := l.Add(a, x)
		yb, _ := l.Add(b, x)
		if ya != yb {
			t.Fatal("the same seed gave different noise")
		}
	}
}

func TestErrors(t *testing.T) {
	for _, s := range []float64{0, -1, math.NaN(), math.Inf(1), 0x1p-1000, 0x1p1000} {
		if _, err := NewLaplace(s); err == nil {
			t.Errorf("NewLaplace(%v) accepted", s)
		}
		if _, err := NewGaussian(s); err == nil {
			t.Errorf("NewGaussian(%v) accepted", s)
		}
	}
	l, _ := NewLaplace(1)
	g, _ := NewGaussian(1)
	src := seeded(8)
	for _, x := range []float64{math.NaN(), math.Inf(-1), 1e30} {
		if _, err := l.Add(src, x); err == nil {
			t.Errorf("DiscreteLaplace.Add(%v) accepted", x)
		}
		if _, err := g.Add(src, x); err == nil {
			t.Errorf("DiscreteGaussian.Add(%v) accepted", x)
		}
	}
	defer func() {
		if recover() == nil {
			t.Error("Laplace with scale 0 did not panic")
		}
	}()
	Laplace(src, 0)
}

func benchSamples(b *testing.B, f func(corr.Source) float64) {
	src := seeded(9)
	var sink float64
	for b.Loop() {
		sink += f(src)
	}
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "samples/s")
	_ = sink
}

func BenchmarkLaplace(b *testing.B) {
	l, _ := NewLaplace(2)
	benchSamples(b, l.Sample)
}

func BenchmarkGaussian(b *testing.B) {
	g, _ := NewGaussian(2)
	benchSamples(b, g.Sample)
}

func BenchmarkGaussianAdd(b *testing.B) {
	g, _ := NewGaussian(2)
	benchSamples(b, func(src corr.Source) float64 { y, _ := g.Add(src, 0.3); return y })
}

// BenchmarkNormFloat64 is the insecure floating-point baseline, for scale.
func BenchmarkNormFloat64(b *testing.B) {
	src := seeded(9)
	var sink float64
	for b.Loop() {
		sink += src.NormFloat64()
	}
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "samples/s")
	_ = sink
}
