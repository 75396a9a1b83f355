package mech

import (
	"encoding/binary"
	"math"
	"testing"
)

// TestSupportTailRate checks that the support of gaussian and laplace cuts
// the noise where an honest value is refused with probability at most
// 1e-12 per parameter: the stated bounds 2 exp(-z^2/2) and 2 exp(-z) at z,
// the continuous tails (math.Erfc, exp(-z)) below them, and, at the scales
// the mechanisms use for a few ranges, rigorous bounds on the exact
// discrete tails: for the discrete Laplace 2 p^m/(1+p), m the first integer
// above z t; for the discrete Gaussian of variance S (in grid steps),
// twice (f(m) + sqrt(pi S/2) erfc(m/sqrt(2S))) over sqrt(2 pi S) - 1, f
// the unnormalized law and m the first integer at or above z sqrt(S),
// which bounds the tail sum by an integral and the normalizer from below.
func TestSupportTailRate(t *testing.T) {
	const slack = 1 + 1e-12 // the float64 rounding of z
	if p := 2 * math.Exp(-zGauss*zGauss/2); p > refusalTarget*slack {
		t.Errorf("gaussian: subgaussian tail at z = %v is %v", zGauss, p)
	}
	if p := math.Erfc(zGauss / math.Sqrt2); p > refusalTarget {
		t.Errorf("gaussian: continuous tail at z = %v is %v", zGauss, p)
	}
	if p := 2 * math.Exp(-zLaplace); p > refusalTarget*slack {
		t.Errorf("laplace: tail bound at z = %v is %v", zLaplace, p)
	}
	if p := math.Exp(-zLaplace); p > refusalTarget {
		t.Errorf("laplace: continuous tail at z = %v is %v", zLaplace, p)
	}
	for _, rg := range []Range{{0, 0.05}, {1e6, 1e-10}, {-3, 7}} {
		for _, eps := range []float64{0.1, 1, 10} {
			l, err := laplace{eps: eps}.noise(rg)
			if err != nil {
				t.Fatal(err)
			}
			tt := l.Scale() / l.Granularity()
			m := math.Floor(zLaplace*tt) + 1
			if p := 2 * math.Exp(-m/tt) / (1 + math.Exp(-1/tt)); p > refusalTarget {
				t.Errorf("laplace %v eps %v: exact tail %v", rg, eps, p)
			}
			d, err := gaussian{eps: eps, delta: 1e-5}.noise(rg)
			if err != nil {
				t.Fatal(err)
			}
			sd := d.Sigma() / d.Granularity()
			s := sd * sd
			m = math.Ceil(zGauss * sd)
			tail := math.Exp(-m*m/(2*s)) + math.Sqrt(math.Pi*s/2)*math.Erfc(m/math.Sqrt(2*s))
			if p := 2 * tail / (math.Sqrt(2*math.Pi*s) - 1); p > refusalTarget {
				t.Errorf("gaussian %v eps %v: discrete tail bound %v", rg, eps, p)
			}
		}
	}
}

// TestSupportHonestUploads encodes 10^6 parameters at the ends of the
// range (the values farthest from the center, where the support is
// tightest) with gaussian and laplace at eps 0.5 and 4 and checks that the
// server accepts every payload. With refusals at most 1e-12 per parameter,
// a failure has probability below 1e-6. It logs the largest noise seen, in
// units of the scale, against the cut z.
func TestSupportHonestUploads(t *testing.T) {
	if testing.Short() {
		t.Skip("10^6 encodes")
	}
	const n = 125000
	w := make([]float32, n)
	for _, name := range []string{"gaussian", "laplace"} {
		for _, eps := range []float64{0.5, 4} {
			for k, rg := range []Range{{0.3, 0.05}, {-1e3, 2}} {
				for i := range w {
					w[i] = float32(rg.Center + rg.Radius*float64(1-2*(i%2)))
				}
				c := DefaultConfig()
				c.Epsilon = eps
				m, _ := New(name, c)
				p, err := m.Encode(nil, w, rg, Slot{Private: stream("support", uint64(k), uint64(eps*10))})
				if err != nil {
					t.Fatal(err)
				}
				sum, err := m.NewSum(n, rg)
				if err != nil {
					t.Fatal(err)
				}
				if err := sum.Add(p, Slot{}); err != nil {
					t.Errorf("%s eps %v %v: an honest upload was refused: %v", name, eps, rg, err)
				}
				scale, z := 0.0, zLaplace
				if name == "gaussian" {
					d, _ := m.(gaussian).noise(rg)
					scale, z = d.Sigma(), zGauss
				} else {
					l, _ := m.(laplace).noise(rg)
					scale = l.Scale()
				}
				worst := 0.0
				for i := range w {
					v := float64(math.Float32frombits(binary.LittleEndian.Uint32(p[4*i:])))
					worst = max(worst, math.Abs(v-float64(w[i])))
				}
				t.Logf("%s eps %v %v: largest noise %.2f scales, cut at %.2f", name, eps, rg, worst/scale, z)
			}
		}
	}
}

// TestSupportRefusesHostile: the float32 decoders refuse what the issue's
// attacker sent (float32 max, 1e6 per value) at r = 0.05, eps 1, and
// jopeq-compat refuses a header scale of float32 max, a scale above what
// clipped inputs give, and a mean outside the range. Before the supports
// every one of these was accepted.
func TestSupportRefusesHostile(t *testing.T) {
	rg := Range{Center: 0, Radius: 0.05}
	floats := func(v ...float32) []byte {
		var p []byte
		for _, x := range v {
			p = binary.LittleEndian.AppendUint32(p, math.Float32bits(x))
		}
		return p
	}
	for _, name := range []string{"none", "gaussian", "laplace"} {
		m, _ := New(name, DefaultConfig())
		for _, v := range []float32{math.MaxFloat32, -math.MaxFloat32, 1e6, -1e6} {
			sum, err := m.NewSum(2, rg)
			if err != nil {
				t.Fatal(err)
			}
			if err := sum.Add(floats(0, v), Slot{}); err == nil {
				t.Errorf("%s: value %v accepted", name, v)
			}
		}
	}
	for _, dim := range []int{1, 2} {
		m := latNew(t, "jopeq-compat", 1, 4, dim)
		w := []float32{0.01, -0.03, 0.2, 0}
		sl := func() Slot { return Slot{Private: latStream(11, 0), Shared: latStream(11, 1)} }
		p, err := m.Encode(nil, w, rg, sl())
		if err != nil {
			t.Fatal(err)
		}
		_, _, smax, _ := compatLimits(rg, dim)
		for _, bad := range []struct {
			at int
			v  float32
		}{{dim, math.MaxFloat32}, {dim, math.Nextafter32(smax, 1)}, {dim, 0}, {0, 0.0500001}, {dim - 1, -1e6}} {
			q := append([]byte(nil), p...)
			binary.LittleEndian.PutUint32(q[4*bad.at:], math.Float32bits(bad.v))
			sum, _ := m.NewSum(len(w), rg)
			if err := sum.Add(q, Slot{Shared: latStream(11, 1)}); err == nil {
				t.Errorf("jopeq-compat L=%d: header value %d = %v accepted", dim, bad.at, bad.v)
			}
		}
		sum, _ := m.NewSum(len(w), rg)
		if err := sum.Add(p, Slot{Shared: latStream(11, 1)}); err != nil {
			t.Errorf("jopeq-compat L=%d: honest payload refused: %v", dim, err)
		}
	}
}

// TestCompatScaleWithinLimit: the scale an honest client sends is at most
// smax even for the tensors that maximize it (half the values at each end
// of the range) and for ranges far from 0 relative to their radius, where
// the float32 rounding of the mean dominates.
func TestCompatScaleWithinLimit(t *testing.T) {
	for _, rg := range []Range{{0, 1}, {1e6, 1e-3}, {-1e20, 1e-30}, {0.3, 1e-30}, {5, 1e30}} {
		for _, dim := range []int{1, 2} {
			for _, n := range []int{1, 2, 3, 1001} {
				xs := make([][]float64, dim)
				for i := range n {
					v := rg.Center + rg.Radius*float64(1-2*((i/dim)%2))
					if i%3 == 2 {
						v = rg.Center - rg.Radius
					}
					xs[i%dim] = append(xs[i%dim], v)
				}
				mean, s := compatScale(xs, latticeFields(n, dim), rg)
				lo, hi, smax, err := compatLimits(rg, dim)
				if err != nil {
					t.Fatal(err)
				}
				for _, mu := range mean {
					if !(mu >= lo && mu <= hi) {
						t.Errorf("%v L=%d n=%d: mean %v outside [%v, %v]", rg, dim, n, mu, lo, hi)
					}
				}
				if !(s > 0 && s <= smax) {
					t.Errorf("%v L=%d n=%d: scale %v outside (0, %v]", rg, dim, n, s, smax)
				}
			}
		}
	}
}

// TestSupportTable logs, for every mechanism at its defaults (and the
// hexagonal variants), the support half-width h at r = 0.05, eps 1 and
// center 0: one client's largest effect on a mean of n clients is h/n.
// These are the figures of docs/mechanisms.md.
func TestSupportTable(t *testing.T) {
	rg := Range{Center: 0, Radius: 0.05}
	for _, bc := range benchCases() {
		c := bc.c
		c.CacheDir = t.TempDir()
		m, err := New(bc.name, c)
		if err != nil {
			t.Fatal(err)
		}
		h, err := m.(Supporter).Support(rg)
		if err != nil {
			t.Fatal(err)
		}
		if !(h >= rg.Radius) || math.IsInf(h, 0) {
			t.Errorf("%v: support %v", bc, h)
		}
		t.Logf("| %s | %.4g | %.4g |", bc, h/rg.Radius, h)
	}
}
