package mech

import (
	"fmt"
	"math"
	"strings"
	"testing"
)

// pbmNew is pbm with Clients n, Noise z and Trials m.
func pbmNew(t testing.TB, n int, z float64, m int) *pbm {
	t.Helper()
	c := DefaultConfig()
	c.Clients, c.Noise, c.Trials = n, z, m
	return mustNew(t, "pbm", c).(*pbm)
}

// TestPBMUnbiasedVariance: for d = 12 parameters and 4 clients (z = 2, one
// trial, and z = 1, three trials), one client's vector chosen to rotate
// onto a single coordinate (so that it is clipped), over 20,000 rounds,
// every parameter of the decoded mean has the expectation of the clipped
// vectors' mean, R^T clip(R x) averaged over the clients, and the variance
// sum_j R[j][i]^2 v_j / 16, v_j the exact variance of the decoded sum's
// rotated coordinate (pbmParams.variance), both within 5 standard errors
// (checkMeanVar).
func TestPBMUnbiasedVariance(t *testing.T) {
	const d, n, rounds = 12, 4, 20000
	rg := Range{Center: 0.5, Radius: 2}
	for _, tc := range []struct {
		z float64
		m int
	}{{2, 1}, {1, 3}} {
		mm := pbmNew(t, n, tc.z, tc.m)
		p, err := mm.params(d)
		if err != nil {
			t.Fatal(err)
		}
		R := rotationMatrix(p.rot)
		src := stream("pbm-input", uint64(tc.m))
		w := make([][]float32, n)
		clipped := make([][]float64, n) // R^T clip(R x), in units of the input
		yc := make([][]float64, d)      // clip(R x)_j per client
		for c := range w {
			x := make([]float64, d)
			if c == 0 {
				copy(x, R[0]) // R x = e_0: one rotated coordinate, clipped
			} else {
				for i := range x {
					x[i] = src.NormFloat64()
				}
			}
			var s float64
			for _, v := range x {
				s += v * v
			}
			f := rg.Radius * 0.95 / math.Sqrt(s)
			w[c] = make([]float32, d)
			x64 := make([]float64, d)
			for i := range x {
				w[c][i] = float32(rg.Center + x[i]*f)
				x64[i] = float64(w[c][i]) - rg.Center
			}
			cc := p.crel * rg.Radius
			y := make([]float64, d)
			for j := range d {
				for i := range d {
					y[j] += R[j][i] * x64[i]
				}
				y[j] = min(max(y[j], -cc), cc)
				yc[j] = append(yc[j], y[j]/rg.Radius)
			}
			clipped[c] = make([]float64, d)
			for i := range d {
				for j := range d {
					clipped[c][i] += R[j][i] * y[j]
				}
			}
		}
		if yc[0][0] < p.crel*(1-1e-12) {
			t.Fatalf("client 0's rotated coordinate %v is not clipped (c/C %v)", yc[0][0], p.crel)
		}
		samples := make([][]float64, d)
		out := make([]float64, d)
		for r := range rounds {
			sum, _ := mm.NewSum(d, rg)
			for c := range w {
				pl, err := mm.Encode(nil, w[c], rg, Slot{Private: stream("pbm-private", uint64(tc.m), uint64(r), uint64(c))})
				if err != nil {
					t.Fatal(err)
				}
				if err := sum.Add(pl, Slot{}); err != nil {
					t.Fatal(err)
				}
			}
			if err := sum.Mean(out); err != nil {
				t.Fatal(err)
			}
			for i, v := range out {
				samples[i] = append(samples[i], v)
			}
		}
		for i := range d {
			want := rg.Center
			for c := range w {
				want += clipped[c][i] / n
			}
			var v float64
			for j := range d {
				v += R[j][i] * R[j][i] * p.variance(yc[j], tc.m, rg.Radius)
			}
			checkMeanVar(t, fmt.Sprintf("z=%g m=%d parameter %d", tc.z, tc.m, i), samples[i], want, v/(n*n))
		}
	}
}

// TestPBMVariance: the variance of the decoded sum's rotated coordinate is
// (z C)^2 at the zero vector, exactly (up to rounding, 1e-12: theta is
// rounded down to a multiple of 2^-52), and (z C)^2 less sum_i y_i^2/m for
// clients at y_i, the closed form of pbm's doc; the clip is 2 root mean
// squares where theta stays within 1/4 and lower where it would not.
func TestPBMVariance(t *testing.T) {
	for _, tc := range []struct {
		n, m, d int
		z, k    float64
	}{{100, 1, 6422, 1, 2}, {100, 2, 6422, 0.7, 2}, {100, 1, 1000, 1, 0.5 * math.Sqrt(10)}, {10, 4, 100000, 0.5, 2}} {
		mm := pbmNew(t, tc.n, tc.z, tc.m)
		p, err := mm.params(tc.d)
		if err != nil {
			t.Fatal(err)
		}
		what := fmt.Sprintf("n=%d m=%d d=%d z=%g", tc.n, tc.m, tc.d, tc.z)
		if math.Abs(p.k-tc.k) > 1e-12 || p.theta > pbmMaxTheta {
			t.Errorf("%s: clip %v (want %v), theta %v", what, p.k, tc.k, p.theta)
		}
		const radius = 3.0
		zc := tc.z * radius
		y := make([]float64, tc.n)
		if v := p.variance(y, tc.m, radius); math.Abs(v/(zc*zc)-1) > 1e-12 {
			t.Errorf("%s: variance at zero %v, (z C)^2 %v", what, v, zc*zc)
		}
		src := stream("pbm-variance")
		var s2 float64
		for i := range y {
			y[i] = p.crel * (2*src.Float64() - 1)
			s2 += y[i] * y[i] * radius * radius
		}
		if v, want := p.variance(y, tc.m, radius), zc*zc-s2/float64(tc.m); math.Abs(v/want-1) > 1e-12 {
			t.Errorf("%s: variance %v, closed form %v", what, v, want)
		}
	}
}

// TestPBMBits: a payload is exactly Bits(d) = d len(m) bits; under secure
// aggregation the fields are summed in len(n m) bits, d fields for d
// parameters (no padding): 7 bits per parameter as sent for 100 clients of
// one trial, 8 for two, at 6,422 and 100,000 parameters; a payload a byte
// short or long, or with a count above m, is refused and leaves the sum as
// it was.
func TestPBMBits(t *testing.T) {
	rg := Range{Center: 0, Radius: 1}
	for _, tc := range []struct{ m, width, sum int }{{1, 1, 7}, {2, 2, 8}, {3, 2, 9}} {
		mm := pbmNew(t, 100, 1, tc.m)
		for _, d := range []int{6422, 100000} {
			what := fmt.Sprintf("m=%d d=%d", tc.m, d)
			w := make([]float32, d)
			w[0], w[d-1] = 0.6, -0.8
			pl, err := mm.Encode(nil, w, rg, Slot{Private: stream("pbm-bits")})
			if err != nil {
				t.Fatal(err)
			}
			if mm.Bits(d) != tc.width*d || len(pl) != (tc.width*d+7)/8 {
				t.Errorf("%s: Bits %d, payload %d bytes", what, mm.Bits(d), len(pl))
			}
			if k := SumBits(mm, 100); k != tc.sum || mm.Fields(d) != d {
				t.Errorf("%s: SumBits %d, fields %d", what, k, mm.Fields(d))
			}
			if sent := float64(SumBits(mm, 100)*mm.Fields(d)) / float64(d); sent != float64(tc.sum) {
				t.Errorf("%s: %v bits per parameter as sent", what, sent)
			}
			sum, _ := mm.NewSum(d, rg)
			bad := [][]byte{pl[:len(pl)-1], append(append([]byte(nil), pl...), 0)}
			if tc.m == 2 {
				over := append([]byte(nil), pl...)
				over[0] |= 3 // the first count is 3 > m
				bad = append(bad, over)
			}
			for _, b := range bad {
				if err := sum.Add(b, Slot{}); err == nil || sum.Count() != 0 {
					t.Errorf("%s: a bad payload of %d bytes accepted (count %d)", what, len(b), sum.Count())
				}
			}
			if err := sum.Add(pl, Slot{}); err != nil || sum.Count() != 1 {
				t.Errorf("%s: valid payload: %v", what, err)
			}
		}
	}
}

// TestPBMRefuses: clear errors for a noise multiplier that is not positive
// and finite (0 included: pbm has no per-round mode), trials and clients
// out of range, more trials than the accounting enumerates, a clip below
// one root mean square (too little noise for the trials' bias, theta
// beyond 1/4 otherwise), a bias too small for 2^-52, a vector longer than
// supported, an input whose norm exceeds the bound, NaN, no
// private randomness, and orders not above 1.
func TestPBMRefuses(t *testing.T) {
	c := func(set func(*Config)) Config {
		cfg := DefaultConfig()
		cfg.Noise, cfg.Clients = 1, 100
		set(&cfg)
		return cfg
	}
	for _, tc := range []struct {
		what, want string
		cfg        Config
	}{
		{"noise 0", "noise multiplier", c(func(c *Config) { c.Noise = 0 })},
		{"noise -1", "noise multiplier", c(func(c *Config) { c.Noise = -1 })},
		{"noise NaN", "noise multiplier", c(func(c *Config) { c.Noise = math.NaN() })},
		{"noise Inf", "noise multiplier", c(func(c *Config) { c.Noise = math.Inf(1) })},
		{"trials -1", "trials", c(func(c *Config) { c.Trials = -1 })},
		{"trials 2^16", "trials", c(func(c *Config) { c.Trials = 1 << 16 })},
		{"clients -3", "clients", c(func(c *Config) { c.Clients = -3 })},
		{"too many trials to account", "accounting", c(func(c *Config) { c.Trials = 50 })},
	} {
		if _, err := New("pbm", tc.cfg); err == nil || !strings.Contains(err.Error(), tc.want) || !strings.HasPrefix(err.Error(), "mech: pbm: ") {
			t.Errorf("%s: %v", tc.what, err)
		}
	}
	rg := Range{Center: 0, Radius: 1}
	slot := Slot{Private: stream("pbm-refuse")}
	small := pbmNew(t, 100, 0.1, 1) // clip 0.05 sqrt(d): below 1 for d < 400
	if _, err := small.Encode(nil, make([]float32, 100), rg, slot); err == nil || !strings.Contains(err.Error(), "raise Trials or Noise") {
		t.Errorf("a clip below one root mean square: %v", err)
	}
	if _, err := small.RDP(2, 100); err == nil {
		t.Error("RDP with a clip below one root mean square accepted")
	}
	huge := pbmNew(t, 100, 1e300, 1) // theta 1e-301: no bias on the 2^-52 grid
	if _, err := huge.Encode(nil, make([]float32, 100), rg, slot); err == nil || !strings.Contains(err.Error(), "no bias") {
		t.Errorf("a bias below 2^-52: %v", err)
	}
	mm := pbmNew(t, 2, 4, 1) // clip min(3, 2 sqrt(2 d)): at least 2.8 root mean squares
	if _, err := mm.NewSum(pbmMaxParams+1, rg); err == nil || !strings.Contains(err.Error(), "parameters") {
		t.Errorf("NewSum of %d parameters: %v", pbmMaxParams+1, err)
	}
	w := []float32{0.6, 0.8, 0, 0}
	for _, tc := range []struct {
		scale float64
		ok    bool
	}{{1, true}, {1 + 0x1p-23, true}, {1 + 0x1p-20, false}, {2, false}} {
		v := make([]float32, len(w))
		for i := range w {
			v[i] = float32(float64(w[i]) * tc.scale)
		}
		if _, err := mm.Encode(nil, v, rg, slot); (err == nil) != tc.ok || (err != nil && !strings.Contains(err.Error(), "exceeds the bound")) {
			t.Errorf("norm %v: %v", tc.scale, err)
		}
	}
	if _, err := mm.Encode(nil, []float32{0, float32(math.NaN())}, rg, slot); err == nil {
		t.Error("NaN accepted")
	}
	if _, err := mm.Encode(nil, w, rg, Slot{}); err == nil {
		t.Error("no private randomness accepted")
	}
	for _, alpha := range []float64{1, 0.5, 1.005, math.NaN(), math.Inf(1)} {
		if _, err := mm.RDP(alpha, 10); err == nil || !strings.Contains(err.Error(), "order") {
			t.Errorf("order %v: %v", alpha, err)
		}
	}
	for _, n := range []int{0, -1, pbmMaxParams + 1} {
		if _, err := mm.RDP(2, n); err == nil || !strings.Contains(err.Error(), "parameters") {
			t.Errorf("%d parameters: %v", n, err)
		}
	}
}

// TestPBMClipShare: what pbm's clip of 2 root mean squares cuts from a
// vector after its rotation, as pbm's doc states it (the Gaussian's
// 4.55% of the coordinates and 1.15% of the square): for cnn2's 6,422
// parameters, a random Gaussian vector and a vector on one coordinate
// (the rotation spreads it) lose 4 to 5% of their rotated coordinates to
// the clip, and 0.9 to 1.4% of their squared norm.
func TestPBMClipShare(t *testing.T) {
	const d = 6422
	rot := newBlockRotation(d)
	src := stream("pbm-clip-share")
	gauss := make([]float64, d)
	for i := range gauss {
		gauss[i] = src.NormFloat64()
	}
	one := make([]float64, d)
	one[0] = 1
	tmp := make([]float64, d)
	for name, x := range map[string][]float64{"gaussian": gauss, "one coordinate": one} {
		y := append([]float64(nil), x...)
		rot.apply(y, tmp)
		var norm2 float64
		for _, v := range y {
			norm2 += v * v
		}
		c := PBMClip(1, 100, 1, d) * math.Sqrt(norm2/d)
		var cut int
		var excess float64
		for _, v := range y {
			if a := math.Abs(v); a > c {
				cut++
				excess += (a - c) * (a - c)
			}
		}
		frac, share := float64(cut)/d, excess/norm2
		t.Logf("%s: %.2f%% of the coordinates beyond the clip, %.2f%% of the square", name, 100*frac, 100*share)
		if frac < 0.04 || frac > 0.05 || share < 0.009 || share > 0.014 {
			t.Errorf("%s: the clip cuts %.4f of the coordinates and %.4f of the square, want 0.04-0.05 and 0.009-0.014", name, frac, share)
		}
	}
}
