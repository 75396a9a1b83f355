package noise

import (
	"math"
	"testing"
)

// TestIntegerGaussian: NewIntegerGaussian is the granularity-1 sampler
// whose pmf TestDiscreteGaussianPMF checks; its samples have variance S at
// the smallest and largest S it accepts, and it refuses S outside [1, 2^30].
func TestIntegerGaussian(t *testing.T) {
	src := seeded(9)
	for _, s := range []uint64{1, 7, 1 << 30} {
		d, err := NewIntegerGaussian(s)
		if err != nil {
			t.Fatal(err)
		}
		tt := isqrt(s) + 1
		if d != (DiscreteGaussian{g: 1, s: s, t: tt, d: 2 * s * tt * tt}) || d.Variance() != float64(s) || d.Granularity() != 1 {
			t.Errorf("S=%d: %+v", s, d)
		}
		// Kurtosis 3; |Z| > 4 sigma with probability about 6.3e-5.
		moments(t, "integer gaussian", func() float64 { return float64(d.Int(src)) }, 100000, float64(s), 3, 4*math.Sqrt(float64(s)), 2*(1-normalCDF(4)))
	}
	for _, s := range []uint64{0, 1<<30 + 1} {
		if _, err := NewIntegerGaussian(s); err == nil {
			t.Errorf("S=%d accepted", s)
		}
	}
}

func normalCDF(x float64) float64 { return 0.5 * math.Erfc(-x/math.Sqrt2) }
