package mech

import (
	"math"
	"testing"
)

// TestJoPEQHugeEpsilon: jopeq at eps 1e3..1e9 used to return a nil
// mechanism and no error (the noise's q = exp(-eps/D) underflowed, every
// variance was NaN, and no design was chosen), and fedpq dme crashed on
// it. Now it calibrates to min(eps, jopeqMaxEps), states Epsilon() <= eps, and
// decodes like SDQ: every output within its quantization cell of the
// input (half a step for L = 1, the hexagon's circumradius for L = 2).
func TestJoPEQHugeEpsilon(t *testing.T) {
	rg := Range{Center: 0.2, Radius: 0.5}
	w := []float32{0.2, -0.3, 0.7, 0.45, 0.1}
	for _, eps := range []float64{300, 1e3, 1e4, 1e6, 1e9} {
		for _, c := range []struct{ rate, dim int }{{1, 1}, {2, 1}, {4, 1}, {2, 2}, {4, 2}} {
			cfg := DefaultConfig()
			cfg.Epsilon, cfg.Rate, cfg.Lattice = eps, c.rate, c.dim
			m, err := New("jopeq", cfg)
			if err != nil {
				t.Fatalf("eps %v R=%d L=%d: %v", eps, c.rate, c.dim, err)
			}
			e := m.(interface{ Epsilon() float64 }).Epsilon()
			if !(e > 0 && e <= min(eps, jopeqMaxEps)) {
				t.Errorf("eps %v R=%d L=%d: Epsilon() = %v", eps, c.rate, c.dim, e)
			}
			p, err := m.Encode(nil, w, rg, Slot{Private: latStream(12, 0), Shared: latStream(12, 1)})
			if err != nil {
				t.Fatal(err)
			}
			sum, _ := m.NewSum(len(w), rg)
			if err := sum.Add(p, Slot{Shared: latStream(12, 1)}); err != nil {
				t.Fatal(err)
			}
			out := make([]float64, len(w))
			if err := sum.Mean(out); err != nil {
				t.Fatal(err)
			}
			var cell float64
			switch q := m.(type) {
			case *jopeqScalar:
				cell = rg.Radius * q.cell.Step / 2 * (1 + 1e-12)
			case *jopeqHex:
				cell = rg.Radius * q.hex.Step / math.Sqrt(3) * (1 + 1e-12)
			}
			for i := range w {
				if d := math.Abs(out[i] - float64(w[i])); !(d <= cell) {
					t.Errorf("eps %v R=%d L=%d: output %v for %v", eps, c.rate, c.dim, out[i], w[i])
				}
			}
		}
	}
}

// TestNormalizeClamps: with a radius below an ulp of the center, c ± r
// rounds to a neighbour of c, and normalize returned u = ±ulp/r (±1.43
// here), which put jopeq's hexagonal SDQ point outside the cover its
// privacy analysis is over (a pair's loss reached 1.357 at eps 1). Every u
// must be in [-1, 1], and every SDQ point of the extreme inputs, under 2000
// dithers, in the cover.
func TestNormalizeClamps(t *testing.T) {
	ulp := math.Nextafter(1, 2) - 1
	rg := Range{Center: 1, Radius: 0.7 * ulp}
	for _, v := range []float32{-1e30, 0, 1, 2, 1e30} {
		if u := normalize(v, rg); !(u >= -1 && u <= 1) {
			t.Errorf("normalize(%v, %v) = %v", v, rg, u)
		}
	}
	m := latNew(t, "jopeq", 1, 4, 2).(*jopeqHex)
	src := latStream(13, 0)
	for range 2000 {
		dx, dy := m.hex.Dither(src.Uint64(), src.Uint64())
		for _, pair := range [][2]float32{{0, 0}, {2, 2}, {0, 2}, {2, 0}} {
			a, b := m.hex.Nearest(normalize(pair[0], rg)+dx, normalize(pair[1], rg)+dy)
			if _, ok := m.cover.Index(a, b); !ok {
				t.Fatalf("input %v: SDQ point (%d, %d) outside the cover", pair, a, b)
			}
		}
	}
}

// TestOneBitOverflow: a radius near 1e289 passed Range.Validate and the
// one-bit mechanisms' decoders output c ± Inf, so Mean returned NaN. Now
// such a range (and one so narrow that the threshold's slope overflows) is
// refused by Encode and NewSum, and any range that is accepted gives a
// finite mean.
func TestOneBitOverflow(t *testing.T) {
	for _, name := range []string{"ldpq", "corbin", "augcorbin", "coq"} {
		for _, eps := range []float64{1e-6, 1, 40} {
			cfg := DefaultConfig()
			cfg.Epsilon = eps
			m, err := New(name, cfg)
			if err != nil {
				t.Fatal(err)
			}
			for _, rg := range []Range{{0, 1e289}, {1e300, 1e288}, {0, 1e-300}, {1e300, 1e-10}, {0, 1e280}} {
				sl := Slot{Private: stream("overflow", 0), Shared: stream("overflow", 1), Role: Leader}
				_, encErr := m.Encode(nil, []float32{1, -1}, rg, sl)
				sum, err := m.NewSum(2, rg)
				if (err == nil) != (encErr == nil) {
					t.Errorf("%s eps %v %v: Encode says %v, NewSum %v", name, eps, rg, encErr, err)
				}
				if err != nil {
					continue
				}
				if err := sum.Add([]byte{1}, Slot{}); err != nil {
					t.Fatal(err)
				}
				out := make([]float64, 2)
				if err := sum.Mean(out); err != nil {
					t.Fatal(err)
				}
				for _, v := range out {
					if math.IsNaN(v) || math.IsInf(v, 0) {
						t.Errorf("%s eps %v %v: mean %v", name, eps, rg, out)
					}
				}
			}
		}
	}
}

// TestJoPEQHexExcess compares excess, E[(S - room)+] through the
// complement, with the direct sum over the law of S (up to its 1e-18
// tail) that it replaced, at scales where the direct sum is cheap: equal
// to 1e-9 absolute.
func TestJoPEQHexExcess(t *testing.T) {
	for _, scale := range []float64{0.05, 0.7, 3, 20} {
		z, err := newIndexNoise(scale)
		if err != nil {
			t.Fatal(err)
		}
		m := &jopeqHex{noise: z}
		top := int64(2)
		for z.tail(top) > 1e-18 {
			top++
		}
		one := make([]float64, top+1)
		one[0] = z.prob(0)
		for a := int64(1); a <= top; a++ {
			one[a] = 2 * z.prob(a)
		}
		law := []float64{1}
		for range 3 {
			next := make([]float64, len(law)+len(one)-1)
			for i, a := range law {
				for j, b := range one {
					next[i+j] += a * b
				}
			}
			law = next
		}
		for _, room := range []int64{-2, 0, 1, 3, 10, 40} {
			want := 0.0
			for s, pr := range law {
				if ex := int64(s) - room; ex > 0 {
					want += float64(ex) * pr
				}
			}
			if got := m.excess(room); math.Abs(got-want) > 1e-9 {
				t.Errorf("scale %v room %d: excess %v, direct sum %v", scale, room, got, want)
			}
		}
	}
}
