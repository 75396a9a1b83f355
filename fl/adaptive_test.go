package fl

import (
	"math"
	"testing"

	"github.com/fedpq/fedpq/corr"
	"github.com/fedpq/fedpq/mech"
)

// decodedMean encodes n clients' inputs w (the same for all) with m under
// rg, independently (no partners), and returns the server's decoded mean.
func decodedMean(t *testing.T, m mech.Mechanism, w []float32, rg mech.Range, n int, seed uint64) []float64 {
	t.Helper()
	sum, err := m.NewSum(len(w), rg)
	if err != nil {
		t.Fatal(err)
	}
	for k := range n {
		src := corr.Derive([]byte("adaptive test"), "client", seed, uint64(k))
		p, err := m.Encode(nil, w, rg, mech.Slot{Private: src})
		if err != nil {
			t.Fatal(err)
		}
		if err := sum.Add(p, mech.Slot{}); err != nil {
			t.Fatal(err)
		}
	}
	est := make([]float64, len(w))
	if err := sum.Mean(est); err != nil {
		t.Fatal(err)
	}
	return est
}

func TestSpreadOfPureNoise(t *testing.T) {
	m, err := mech.New("ldpq", mech.Config{Epsilon: 0.1})
	if err != nil {
		t.Fatal(err)
	}
	rg := mech.Range{Radius: 0.05}
	est := decodedMean(t, m, make([]float32, 4096), rg, 30, 1)
	var raw float64
	for _, x := range est {
		raw += x * x / float64(len(est))
	}
	s, err := spread(m, est, rg, 30, 30)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("raw rms %g, spread %g", math.Sqrt(raw), s)
}
