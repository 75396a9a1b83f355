package mech

import (
	"testing"
)

// TestContract runs every registered mechanism (and the variants of the
// benchmarks) through the contract: the payload is exactly Bits(n) bits
// rounded up to whole bytes, for sizes that do and do not fill a byte or a
// word; the server accepts it; payloads one byte short or long are refused
// and leave the sum as it was; the mean has the right length.
func TestContract(t *testing.T) {
	rg := Range{Center: 0.1, Radius: 0.5}
	for _, bc := range benchCases() {
		m, err := New(bc.name, bc.c)
		if err != nil {
			t.Fatal(err)
		}
		for _, n := range []int{1, 2, 7, 63, 64, 65, 1000, 1025} {
			w := make([]float32, n)
			for i := range w {
				w[i] = float32(0.6*float64(i%7)/7 - 0.2)
			}
			p, err := m.Encode(nil, w, rg, bc.slot(m))
			if err != nil {
				t.Fatalf("%v n=%d: %v", bc, n, err)
			}
			if want := (m.Bits(n) + 7) / 8; len(p) != want {
				t.Errorf("%v n=%d: payload of %d bytes, Bits says %d bits (%d bytes)", bc, n, len(p), m.Bits(n), want)
			}
			sum, err := m.NewSum(n, rg)
			if err != nil {
				t.Fatal(err)
			}
			for _, bad := range [][]byte{p[:len(p)-1], append(append([]byte(nil), p...), 0)} {
				if err := sum.Add(bad, bc.slot(m)); err == nil {
					t.Errorf("%v n=%d: payload of %d bytes accepted, want %d", bc, n, len(bad), len(p))
				}
			}
			if err := sum.Add(p, bc.slot(m)); err != nil || sum.Count() != 1 {
				t.Errorf("%v n=%d: valid payload: %v, count %d", bc, n, err, sum.Count())
			}
			if err := sum.Mean(make([]float64, n)); err != nil {
				t.Errorf("%v n=%d: mean: %v", bc, n, err)
			}
		}
	}
}

// TestHugeRange: a range whose ends overflow is refused by every mechanism,
// at encoding and at decoding, instead of decoding to Inf or NaN.
func TestHugeRange(t *testing.T) {
	for _, rg := range []Range{{Center: 0, Radius: 1e308}, {Center: 1.7e308, Radius: 1e308}} {
		for _, bc := range benchCases() {
			m, _ := New(bc.name, bc.c)
			if bc.name == "none" {
				continue // none ignores the range
			}
			if _, err := m.Encode(nil, []float32{0}, rg, bc.slot(m)); err == nil {
				t.Errorf("%v: range %v accepted by Encode", bc, rg)
			}
			if _, err := m.NewSum(1, rg); err == nil {
				t.Errorf("%v: range %v accepted by NewSum", bc, rg)
			}
		}
	}
}
