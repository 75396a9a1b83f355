package mech

import (
	"encoding/binary"
	"math"
	"testing"
)

// TestClip: clip sends each value clipped to the range, exactly (as
// float32), and its mean is the mean of the clipped values; the server
// refuses a value outside the range, NaN and infinities, and keeps its sum
// as it was.
func TestClip(t *testing.T) {
	m, err := New("clip", DefaultConfig())
	if err != nil {
		t.Fatal(err)
	}
	rg := Range{Center: 0.1, Radius: 0.05}
	a := []float32{-1, 0.1, 0.12, 0.15, 0.2}
	b := []float32{0.06, 0.049, 0.3, 0.1, -0.2}
	want := []float64{ // mean of the clipped values
		(0.05 + 0.06) / 2, (0.1 + 0.05) / 2, (0.12 + 0.15) / 2, (0.15 + 0.1) / 2, (0.15 + 0.05) / 2,
	}
	sum, err := m.NewSum(len(a), rg)
	if err != nil {
		t.Fatal(err)
	}
	for _, w := range [][]float32{a, b} {
		p, err := m.Encode(nil, w, rg, Slot{})
		if err != nil {
			t.Fatal(err)
		}
		for i, v := range w {
			got := math.Float32frombits(binary.LittleEndian.Uint32(p[4*i:]))
			if c := float32(rg.Clip(float64(v))); got != c {
				t.Errorf("Encode(%v) sends %v, want %v", v, got, c)
			}
		}
		if err := sum.Add(p, Slot{}); err != nil {
			t.Fatal(err)
		}
	}
	mean := make([]float64, len(a))
	if err := sum.Mean(mean); err != nil {
		t.Fatal(err)
	}
	for i, v := range mean {
		if math.Abs(v-want[i]) > 1e-8 {
			t.Errorf("mean[%d] = %v, want %v", i, v, want[i])
		}
	}
	for _, bad := range []float32{0.1500001, 0.0499999, float32(math.NaN()), float32(math.Inf(1))} {
		p := binary.LittleEndian.AppendUint32(nil, math.Float32bits(bad))
		s, _ := m.NewSum(1, rg)
		if err := s.Add(p, Slot{}); err == nil || s.Count() != 0 {
			t.Errorf("payload %v: accepted (count %d)", bad, s.Count())
		}
	}
}
