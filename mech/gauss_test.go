package mech

import (
	"encoding/binary"
	"math"
	"strings"
	"testing"

	"github.com/fedpq/fedpq/privacy"
)

// payloadFloats decodes a float32 payload.
func payloadFloats(t *testing.T, p []byte) []float64 {
	t.Helper()
	if len(p)%4 != 0 {
		t.Fatalf("payload of %d bytes is not whole float32s", len(p))
	}
	out := make([]float64, len(p)/4)
	for i := range out {
		out[i] = float64(math.Float32frombits(binary.LittleEndian.Uint32(p[4*i:])))
	}
	return out
}

// checkGridUnbiased encodes n copies of each input (inside, at the edge of
// and outside the range) and compares the outputs' mean with clip(w) and
// their variance with Variance(w), within 5 standard errors (checkMeanVar).
func checkGridUnbiased(t *testing.T, name string, c Config) {
	m, err := New(name, c)
	if err != nil {
		t.Fatal(err)
	}
	v, ok := m.(Variancer)
	if !ok {
		t.Fatalf("%s does not implement Variancer", name)
	}
	rg := Range{Center: 0.1, Radius: 0.5}
	const n = 100000
	for i, w := range []float32{0.123, -0.4, 0.6, 2} {
		payload, err := m.Encode(nil, constVec(n, w), rg, Slot{Private: stream(name+" unbiased", uint64(i))})
		if err != nil {
			t.Fatal(err)
		}
		if len(payload)*8 != m.Bits(n) {
			t.Fatalf("payload is %d bits, Bits says %d", len(payload)*8, m.Bits(n))
		}
		checkMeanVar(t, name, payloadFloats(t, payload), rg.Clip(float64(w)), v.Variance(float64(w), rg))
	}
}

// checkGridRoundTrip runs k clients through Encode and NewSum and compares
// the estimated mean with the clients' true (clipped) mean, per parameter,
// within 5 standard deviations of the estimate.
func checkGridRoundTrip(t *testing.T, name string, c Config) {
	m, err := New(name, c)
	if err != nil {
		t.Fatal(err)
	}
	rg := Range{Center: -1, Radius: 2}
	const n, k = 64, 200
	sum, err := m.NewSum(n, rg)
	if err != nil {
		t.Fatal(err)
	}
	truth := make([]float64, n)
	in := stream(name + " inputs")
	w := make([]float32, n)
	for client := range k {
		for i := range w {
			w[i] = float32(6*in.Float64() - 4) // some outside the range
			truth[i] += rg.Clip(float64(w[i])) / k
		}
		payload, err := m.Encode(nil, w, rg, Slot{Private: stream(name+" client", uint64(client))})
		if err != nil {
			t.Fatal(err)
		}
		if err := sum.Add(payload, Slot{}); err != nil {
			t.Fatal(err)
		}
	}
	if sum.Count() != k {
		t.Fatalf("Count() = %d, want %d", sum.Count(), k)
	}
	mean := make([]float64, n)
	if err := sum.Mean(mean); err != nil {
		t.Fatal(err)
	}
	// The variance differs between inputs only by the grid rounding's
	// f(1-f)g^2 < 2^-28 Variance, which the factor 1.01 covers.
	sd := math.Sqrt(m.(Variancer).Variance(rg.Center, rg) * 1.01 / k)
	for i := range mean {
		within(t, name+" round-trip mean", mean[i], truth[i], 5*sd)
	}
	// Deterministic: the same seed gives the same payload.
	a, _ := m.Encode(nil, w, rg, Slot{Private: stream(name + " seed")})
	b, _ := m.Encode(nil, w, rg, Slot{Private: stream(name + " seed")})
	if string(a) != string(b) {
		t.Error("the same private stream gave different payloads")
	}
}

// checkGridErrors feeds the encoder and the sum every kind of bad input.
func checkGridErrors(t *testing.T, name string, c Config) {
	m, err := New(name, c)
	if err != nil {
		t.Fatal(err)
	}
	good := Range{Center: 0, Radius: 1}
	slot := Slot{Private: stream(name + " errors")}
	nan, inf := math.NaN(), math.Inf(1)
	for _, rg := range []Range{{0, 0}, {0, -1}, {nan, 1}, {0, nan}, {inf, 1}, {0, inf}, {0, 1e-300}} {
		if _, err := m.Encode(nil, []float32{0}, rg, slot); err == nil {
			t.Errorf("%s: Encode accepted range %+v", name, rg)
		}
		if !math.IsNaN(m.(Variancer).Variance(0, rg)) {
			t.Errorf("%s: Variance for range %+v is not NaN", name, rg)
		}
	}
	for _, w := range []float32{float32(nan), float32(inf), float32(-inf)} {
		dst, err := m.Encode([]byte{7}, []float32{0, w}, good, slot)
		if err == nil {
			t.Errorf("%s: Encode accepted parameter %v", name, w)
		}
		if len(dst) != 1 {
			t.Errorf("%s: a failed Encode changed dst", name)
		}
	}
	if _, err := m.Encode(nil, []float32{0}, good, Slot{}); err == nil {
		t.Errorf("%s: Encode without private randomness succeeded", name)
	}
	for _, eps := range []float64{0, -1, nan, inf} {
		cc := c
		cc.Epsilon = eps
		if _, err := New(name, cc); err == nil {
			t.Errorf("%s: New accepted epsilon %v", name, eps)
		}
	}
	if _, err := m.NewSum(-1, good); err == nil {
		t.Errorf("%s: NewSum accepted a negative size", name)
	}
	sum, _ := m.NewSum(2, good)
	if err := sum.Add(make([]byte, 7), Slot{}); err == nil || sum.Count() != 0 {
		t.Errorf("%s: Sum accepted a 7-byte payload for 2 parameters", name)
	}
	if err := sum.Mean(make([]float64, 2)); err == nil {
		t.Errorf("%s: Mean of no payloads succeeded", name)
	}
}

func TestGaussianUnbiased(t *testing.T) {
	checkGridUnbiased(t, "gaussian", Config{Epsilon: 1, Delta: 1e-5})
}

func TestGaussianRoundTrip(t *testing.T) {
	checkGridRoundTrip(t, "gaussian", Config{Epsilon: 2})
}

func TestGaussianErrors(t *testing.T) {
	checkGridErrors(t, "gaussian", Config{Epsilon: 1})
	for _, d := range []float64{-1e-5, 1, 2, math.NaN(), math.Inf(1)} {
		if _, err := New("gaussian", Config{Epsilon: 1, Delta: d}); err == nil {
			t.Errorf("gaussian: New accepted delta %v", d)
		}
	}
}

// TestGaussianCalibration checks the noise against the analytic
// calibration: the grid mechanism's rigorous delta bound is met, sigma is
// at least the continuous analytic sigma for 2r and at most 1% above it,
// and Delta = 0 means the default 1e-5. Info must say (eps, delta).
func TestGaussianCalibration(t *testing.T) {
	rg := Range{Center: 3, Radius: 0.25}
	for _, eps := range []float64{0.1, 1, 5, 50} {
		m := gaussian{eps: eps, delta: 1e-5}
		d, err := m.noise(rg)
		if err != nil {
			t.Fatal(err)
		}
		cont, _ := privacy.AnalyticGaussianSigma(eps, 1e-5, 2*rg.Radius)
		bound, _ := privacy.DiscreteGaussianDelta(eps, d.Sigma(), d.Sensitivity(2*rg.Radius), d.Granularity())
		if bound > 1e-5 || d.Sigma() < cont || d.Sigma() > 1.01*cont {
			t.Errorf("eps %v: sigma %v (continuous %v), delta bound %v", eps, d.Sigma(), cont, bound)
		}
		t.Logf("eps %v: sigma/(2r) = %.6f, continuous %.6f (+%.3f%%), grid step sigma*%.3g, delta bound %.4g",
			eps, d.Sigma()/(2*rg.Radius), cont/(2*rg.Radius), 100*(d.Sigma()/cont-1), d.Granularity()/d.Sigma(), bound)
	}
	def, _ := New("gaussian", Config{Epsilon: 1})
	if def.(gaussian).delta != 1e-5 {
		t.Errorf("Delta 0 gave delta %v, want the default 1e-5", def.(gaussian).delta)
	}
	info, ok := Lookup("gaussian")
	if !ok || !info.LDP || !strings.Contains(info.Summary, "(eps, delta)") {
		t.Errorf("gaussian Info = %+v: want LDP and a summary that says (eps, delta)", info)
	}
	if m, _ := New("gaussian", Config{Epsilon: 1}); m.Coupling() != Independent || m.Bits(10) != 320 {
		t.Errorf("gaussian: coupling %v, Bits(10) = %d", m.Coupling(), m.Bits(10))
	}
}
