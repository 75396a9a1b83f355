package mech

import "testing"

// TestMeanVariance compares MeanVariance with the sample variance of real
// decoded means: n clients (pairs of leader and follower sharing bits, and
// lone clients) encode a vector of 40,000 copies of the same input, the Sum
// decodes their mean, and each coordinate is one draw of it. Mean and
// variance within 5 standard errors (checkMeanVar), fixed seeds.
func TestMeanVariance(t *testing.T) {
	const dim = 40000
	rg := Range{Center: 0.01, Radius: 0.05}
	for _, c := range []struct {
		name     string
		cfg      Config
		n, alone int
		inputs   []float32
	}{
		{"ldpq", Config{Epsilon: 0.1}, 7, 7, []float32{0.01, 0.05, -0.2}},
		{"gaussian", Config{Epsilon: 1, Delta: 1e-5}, 5, 5, []float32{0.01, 0.03}},
		{"corbin", Config{Epsilon: 0.1, SharedBits: 5}, 6, 0, []float32{0.012, 0.02, 0.055}},
		{"corbin", Config{Epsilon: 1, SharedBits: 5}, 7, 3, []float32{0.012, 0.04}},
		{"coq", Config{Epsilon: 3, SharedBits: 4, Px: 0.3}, 6, 2, []float32{0.0, 0.03}},
	} {
		m, err := New(c.name, c.cfg)
		if err != nil {
			t.Fatal(err)
		}
		for k, w := range c.inputs {
			sum, err := m.NewSum(dim, rg)
			if err != nil {
				t.Fatal(err)
			}
			seed := uint64(100*k + c.n)
			for i := range c.n {
				s := Slot{Private: stream("mean variance", seed, uint64(i))}
				if i >= c.alone { // pairs: (alone, alone+1), ...
					pair := uint64((i - c.alone) / 2)
					s.Shared, s.Role = stream("mean variance shared", seed, pair), Leader
					if (i-c.alone)%2 == 1 {
						s.Role = Follower
					}
				}
				p, err := m.Encode(nil, constVec(dim, w), rg, s)
				if err != nil {
					t.Fatal(err)
				}
				if err := sum.Add(p, Slot{}); err != nil {
					t.Fatal(err)
				}
			}
			mean := make([]float64, dim)
			if err := sum.Mean(mean); err != nil {
				t.Fatal(err)
			}
			want, err := MeanVariance(m, float64(w), rg, c.n, c.alone)
			if err != nil {
				t.Fatal(err)
			}
			checkMeanVar(t, c.name+" mean", mean, rg.Clip(float64(w)), want)
		}
	}
	ldpq, _ := New("ldpq", Config{Epsilon: 1})
	corbin, _ := New("corbin", Config{Epsilon: 1, SharedBits: 5})
	cq, _ := New("cq", DefaultConfig())
	for name, f := range map[string]func() (float64, error){
		"no uploads":    func() (float64, error) { return MeanVariance(ldpq, 0, rg, 0, 0) },
		"too many lone": func() (float64, error) { return MeanVariance(ldpq, 0, rg, 2, 3) },
		"half a pair":   func() (float64, error) { return MeanVariance(corbin, 0, rg, 3, 0) },
		"grouped":       func() (float64, error) { return MeanVariance(cq, 0, rg, 4, 0) },
	} {
		if v, err := f(); err == nil {
			t.Errorf("%s: variance %v, want an error", name, v)
		}
	}
}
