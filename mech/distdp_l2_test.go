package mech

import (
	"crypto/sha256"
	"fmt"
	"math"
	"strings"
	"testing"
)

// TestDistDPPerRoundKnownAnswer: the per-round mode (Config.Noise = 0) of
// ddgauss and skellam gives, bit for bit, the payloads, means and
// calibration it gave before the L2 mode was added (the hash was taken on
// the commit before it): 3 clients, 50 for the calibration, tensors of 1,
// 7, 100 and 1000 parameters, range 0.1±0.4.
func TestDistDPPerRoundKnownAnswer(t *testing.T) {
	const want = "8962d1321ea72db8ebf1dc21718cde72d11e747dd3b88191e62035037a8446dc"
	h := sha256.New()
	for _, name := range []string{"ddgauss", "skellam"} {
		for _, n := range []int{1, 7, 100, 1000} {
			c := DefaultConfig()
			c.Clients = 50
			m := mustNew(t, name, c)
			rg := Range{Center: 0.1, Radius: 0.4}
			w := distInputs(3, n, rg, 5)
			sum, _ := m.NewSum(n, rg)
			for k := range w {
				p, err := m.Encode(nil, w[k], rg, Slot{Private: stream("golden", uint64(k), uint64(n))})
				if err != nil {
					t.Fatal(err)
				}
				h.Write(p)
				if err := sum.Add(p, Slot{}); err != nil {
					t.Fatal(err)
				}
			}
			out := make([]float64, n)
			if err := sum.Mean(out); err != nil {
				t.Fatal(err)
			}
			for _, v := range out {
				fmt.Fprintf(h, "%x", math.Float64bits(v))
			}
			p, _ := m.(*distDP).params(n)
			fmt.Fprintf(h, "%x %x", math.Float64bits(p.eps), math.Float64bits(p.nu))
		}
	}
	if got := fmt.Sprintf("%x", h.Sum(nil)); got != want {
		t.Errorf("per-round payloads, means and calibration hash to %s, want %s", got, want)
	}
}

// l2Inputs are n clients' vectors of d parameters around rg.Center, of L2
// norms uniform in [0.5, 1] times rg.Radius, directions uniform, and one
// client's all on parameter 0 (a vector no per-parameter clipping at
// rg.Radius/sqrt(d) would leave alone).
func l2Inputs(n, d int, rg Range, seed uint64) [][]float32 {
	in := stream("l2-input", seed)
	w := make([][]float32, n)
	for c := range w {
		x := make([]float64, d)
		var s float64
		for i := range x {
			x[i] = in.NormFloat64()
			s += x[i] * x[i]
		}
		if c == 0 {
			clear(x)
			x[0], s = 1, 1
		}
		f := rg.Radius * (0.5 + 0.5*in.Float64()) / math.Sqrt(s)
		w[c] = make([]float32, d)
		for i := range x {
			w[c][i] = float32(rg.Center + x[i]*f)
		}
	}
	return w
}

// TestDistL2MeanMSE: ddgauss and skellam in the L2 mode (z = 0.5 and 2, b =
// 16, 50 clients, 100 parameters padded to 128, L2 bound 3 around 0.2),
// over 300 rounds: the mean is unbiased (every parameter within 4.5
// standard errors, the client whose vector is all on parameter 0 included)
// and its MSE matches the rotated coordinates' noise and rounding
// variance within 5% (as distTheory, with the scale sc/C for C the bound
// itself); the sum's noise standard deviation, in the input's units, is z
// C (skellam) or up to 0.1% above it (ddgauss's integer variance).
func TestDistL2MeanMSE(t *testing.T) {
	const n, d, rounds = 50, 100, 300
	rg := Range{Center: 0.2, Radius: 3}
	for _, name := range []string{"ddgauss", "skellam"} {
		for _, z := range []float64{0.5, 2} {
			c := DefaultConfig()
			c.Clients, c.Noise = n, z
			m := mustNew(t, name, c).(distL2)
			p, err := m.params(d)
			if err != nil {
				t.Fatal(err)
			}
			what := fmt.Sprintf("%s z=%g", name, z)
			sd := math.Sqrt(float64(n)*p.localVariance()) / p.sc // units of C
			if sd < z*(1-1e-12) || sd > z*1.001 {
				t.Errorf("%s: the sum's noise is %.6g C, want z C", what, sd)
			}
			w := l2Inputs(n, d, rg, uint64(10*z))
			want := trueMean(w)
			bias := make([]float64, d)
			sq := 0.0
			got := make([]float64, d)
			for r := range rounds {
				sum, _ := m.NewSum(d, rg)
				for _, pl := range distRound(t, m, w, rg, uint64(100*z), uint64(r)) {
					if err := sum.Add(pl, Slot{}); err != nil {
						t.Fatal(err)
					}
				}
				if err := sum.Mean(got); err != nil {
					t.Fatal(err)
				}
				for i := range got {
					e := got[i] - want[i]
					bias[i] += e / rounds
					sq += e * e / (rounds * d)
				}
			}
			s := p.sc / rg.Radius
			k := float64(n) * s * s * float64(n)
			lo, hi := float64(n)*p.localVariance()/k, float64(n)*(p.localVariance()+0.25)/k
			t.Logf("%s: MSE %.4g, theory [%.4g, %.4g]", what, sq, lo, hi)
			if sq < 0.95*lo || sq > 1.05*hi {
				t.Errorf("%s: MSE %.4g, theory [%.4g, %.4g]", what, sq, lo, hi)
			}
			for i, b := range bias {
				if se := math.Sqrt(hi / rounds); math.Abs(b) > 4.5*se {
					t.Errorf("%s: parameter %d: mean error %.3g, %.1f standard errors", what, i, b, b/se)
				}
			}
		}
	}
}

// TestDistL2RDP: the L2 mode's RDP is the papers' bound at the order's
// ceiling with the zero-out sensitivity Delta2 = Bound (the per-round
// mode's replacement, 2 Bound, gives at least 3.9 times it at every order
// here); it approaches a Gaussian's alpha/(2 z^2) where the scale is large
// (b = 18: within 1%, and not below it); it grows with the order and
// falls as z grows.
func TestDistL2RDP(t *testing.T) {
	const d = 1000
	for _, name := range []string{"ddgauss", "skellam"} {
		for _, b := range []int{16, 18} {
			prev := map[float64]float64{}
			for _, z := range []float64{0.7, 1, 2} {
				c := DefaultConfig()
				c.Clients, c.Noise, c.ModBits = 100, z, b
				m := mustNew(t, name, c).(distL2)
				p, _ := m.params(d)
				last := 0.0
				for _, alpha := range []float64{1.5, 2, 3.5, 8, 32, 256} {
					what := fmt.Sprintf("%s b=%d z=%g alpha=%g", name, b, z, alpha)
					got, err := m.RDP(alpha, d)
					if err != nil {
						t.Fatal(err)
					}
					a := math.Ceil(alpha)
					d2, d1 := p.bound, p.bound*min(math.Sqrt(float64(p.dp)), p.bound)
					var want, twice float64
					if p.skellam {
						mu := 2 * 100 * p.lambda
						want, twice = skellamRDP(a, d2, d1, mu), skellamRDP(a, 2*d2, 2*d1, mu)
					} else {
						s := p.gauss.Variance()
						sig := math.Sqrt(100 * s)
						want = ddgRDP(a, d2/sig, d1/sig, ddgTau(s, 100), float64(p.dp))
						twice = ddgRDP(a, 2*d2/sig, 2*d1/sig, ddgTau(s, 100), float64(p.dp))
					}
					if got != want {
						t.Errorf("%s: RDP %v, the bound at Delta2 = Bound %v", what, got, want)
					}
					if twice < 3.9*got {
						t.Errorf("%s: replace-one RDP %v is not about 4 times zero-out's %v", what, twice, got)
					}
					g := a / (2 * z * z)
					if r := got / g; r < 1 || (b == 18 && r > 1.01) {
						t.Errorf("%s: RDP %v is %v times a Gaussian's %v", what, got, r, g)
					}
					if got < last {
						t.Errorf("%s: RDP %v below the previous order's %v", what, got, last)
					}
					last = got
					if v, ok := prev[alpha]; ok && got > v {
						t.Errorf("%s: RDP %v above the smaller z's %v", what, got, v)
					}
					prev[alpha] = got
				}
			}
		}
	}
}

// TestDistL2Refuses: clear errors for a noise multiplier that is not
// positive and finite, a vector whose norm exceeds the bound beyond
// float32 rounding (one within it is accepted), NaN, orders not above 1
// and vector lengths out of range; and the per-round mode is what Noise =
// 0 gives.
func TestDistL2Refuses(t *testing.T) {
	rg := Range{Center: 0, Radius: 1}
	for _, name := range []string{"ddgauss", "skellam"} {
		for _, z := range []float64{-1, math.NaN(), math.Inf(1)} {
			c := DefaultConfig()
			c.Noise = z
			if _, err := New(name, c); err == nil || !strings.Contains(err.Error(), "noise multiplier") {
				t.Errorf("%s: noise %v: %v", name, z, err)
			}
		}
		if _, ok := mustNew(t, name, DefaultConfig()).(L2); ok {
			t.Errorf("%s: the per-round mode claims L2", name)
		}
		c := DefaultConfig()
		c.Noise, c.Clients = 1, 10
		m := mustNew(t, name, c)
		l2, ok := m.(L2)
		if !ok {
			t.Fatalf("%s: the L2 mode is not L2", name)
		}
		w := []float32{0.6, 0.8, 0}
		for _, tc := range []struct {
			scale float64
			ok    bool
		}{{1, true}, {1 + 0x1p-23, true}, {1 + 0x1p-20, false}, {1.01, false}} {
			v := make([]float32, len(w))
			for i := range w {
				v[i] = float32(float64(w[i]) * tc.scale)
			}
			_, err := m.Encode(nil, v, rg, Slot{Private: stream("l2-refuse")})
			if (err == nil) != tc.ok || (err != nil && !strings.Contains(err.Error(), "exceeds the bound")) {
				t.Errorf("%s: norm %v: %v", name, tc.scale, err)
			}
		}
		if _, err := m.Encode(nil, []float32{0, float32(math.NaN())}, rg, Slot{Private: stream("l2-refuse")}); err == nil {
			t.Errorf("%s: NaN accepted", name)
		}
		for _, alpha := range []float64{1, 0.5, math.NaN(), math.Inf(1)} {
			if _, err := l2.RDP(alpha, 10); err == nil || !strings.Contains(err.Error(), "order") {
				t.Errorf("%s: order %v: %v", name, alpha, err)
			}
		}
		for _, n := range []int{0, -1, distL2MaxParams + 1} {
			if _, err := l2.RDP(2, n); err == nil || !strings.Contains(err.Error(), "parameters") {
				t.Errorf("%s: %d parameters: %v", name, n, err)
			}
		}
		if _, err := m.NewSum(distL2MaxParams+1, rg); err == nil {
			t.Errorf("%s: NewSum of %d parameters accepted", name, distL2MaxParams+1)
		}
	}
}
