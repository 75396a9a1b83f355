package mech

import (
	"encoding/binary"
	"math"
	"testing"
)

// FuzzFloatSumAdd feeds arbitrary bytes to the float32 payload decoders of
// none, clip, gaussian and laplace (range 0.5±1, eps 1). It must never
// panic; a payload it accepts has the right length and only values within
// the mechanism's Support, and adds one count; a payload it rejects leaves
// the sum unchanged. The seeds include float32 max and values just inside
// and outside each support.
func FuzzFloatSumAdd(f *testing.F) {
	const n = 3
	rg := Range{Center: 0.5, Radius: 1}
	floats := func(v ...float32) []byte {
		var p []byte
		for _, x := range v {
			p = binary.LittleEndian.AppendUint32(p, math.Float32bits(x))
		}
		return p
	}
	valid := floats(1.5, -2, 0)
	f.Add(valid)
	f.Add([]byte{})
	f.Add(valid[:11])
	f.Add(append(valid, 0))
	f.Add(binary.LittleEndian.AppendUint32(valid[:8], 0x7fc00000)) // NaN
	f.Add(binary.LittleEndian.AppendUint32(valid[:8], 0xff800000)) // -Inf
	f.Add(floats(math.MaxFloat32, 0, 0))
	f.Add(floats(0, -math.MaxFloat32, 1e6))
	var ms []Mechanism
	for _, name := range []string{"none", "clip", "gaussian", "laplace"} {
		m, err := New(name, DefaultConfig())
		if err != nil {
			f.Fatal(err)
		}
		h, err := m.(Supporter).Support(rg)
		if err != nil {
			f.Fatal(err)
		}
		lo, hi := float32Bounds(rg, h)
		f.Add(floats(lo, hi, 0.5))
		f.Add(floats(math.Nextafter32(lo, -math.MaxFloat32), 0, 0))
		f.Add(floats(0, math.Nextafter32(hi, math.MaxFloat32), 0))
		ms = append(ms, m)
	}
	f.Fuzz(func(t *testing.T, payload []byte) {
		for _, m := range ms {
			s, err := m.NewSum(n, rg)
			if err != nil {
				t.Fatal(err)
			}
			fs := s.(*floatSum)
			if err := s.Add(payload, Slot{}); err != nil {
				if s.Count() != 0 || fs.sum[0] != 0 || fs.sum[1] != 0 || fs.sum[2] != 0 {
					t.Fatalf("%s: a rejected payload changed the sum: %v", m.Name(), fs.sum)
				}
				continue
			}
			if len(payload) != 4*n || s.Count() != 1 {
				t.Fatalf("%s: accepted a %d-byte payload (count %d)", m.Name(), len(payload), s.Count())
			}
			h, _ := m.(Supporter).Support(rg)
			mean := make([]float64, n)
			if err := s.Mean(mean); err != nil {
				t.Fatal(err)
			}
			for i, v := range mean {
				sent := float64(math.Float32frombits(binary.LittleEndian.Uint32(payload[4*i:])))
				// The bound is h rounded to float32: at most half an ulp of
				// c ± h beyond it.
				if math.IsNaN(v) || v != sent || math.Abs(v-rg.Center) > h*(1+0x1p-23) {
					t.Fatalf("%s: mean[%d] = %v for an accepted payload (support %v±%v)", m.Name(), i, v, rg.Center, h)
				}
			}
		}
	})
}
