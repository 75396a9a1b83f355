package mech

import (
	"encoding/binary"
	"math"
	"testing"
)

// FuzzFloatSumAdd feeds arbitrary bytes to the float32 payload decoder that
// none, gaussian and laplace share. It must never panic; a payload it
// accepts has the right length and only finite values and adds one count;
// a payload it rejects leaves the sum unchanged.
func FuzzFloatSumAdd(f *testing.F) {
	const n = 3
	valid := binary.LittleEndian.AppendUint32(nil, math.Float32bits(1.5))
	valid = binary.LittleEndian.AppendUint32(valid, math.Float32bits(-2))
	valid = binary.LittleEndian.AppendUint32(valid, math.Float32bits(0))
	f.Add(valid)
	f.Add([]byte{})
	f.Add(valid[:11])
	f.Add(append(valid, 0))
	f.Add(binary.LittleEndian.AppendUint32(valid[:8], 0x7fc00000)) // NaN
	f.Add(binary.LittleEndian.AppendUint32(valid[:8], 0xff800000)) // -Inf
	f.Fuzz(func(t *testing.T, payload []byte) {
		s, err := newFloatSum(n, Range{Center: 0, Radius: 1})
		if err != nil {
			t.Fatal(err)
		}
		if err := s.Add(payload, Slot{}); err != nil {
			if s.Count() != 0 || s.sum[0] != 0 || s.sum[1] != 0 || s.sum[2] != 0 {
				t.Fatalf("a rejected payload changed the sum: %v", s.sum)
			}
			return
		}
		if len(payload) != 4*n || s.Count() != 1 {
			t.Fatalf("accepted a %d-byte payload (count %d)", len(payload), s.Count())
		}
		mean := make([]float64, n)
		if err := s.Mean(mean); err != nil {
			t.Fatal(err)
		}
		for i, v := range mean {
			if math.IsNaN(v) || math.IsInf(v, 0) || v != float64(math.Float32frombits(binary.LittleEndian.Uint32(payload[4*i:]))) {
				t.Fatalf("mean[%d] = %v for an accepted payload", i, v)
			}
		}
	})
}
