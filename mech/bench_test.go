package mech

import (
	"testing"
)

// benchDim is the tensor size of the benchmarks: a mid-size layer.
const benchDim = 1 << 16

func benchInput() []float32 {
	src := stream("bench-input")
	w := make([]float32, benchDim)
	for i := range w {
		w[i] = float32(2*src.Float64() - 1)
	}
	return w
}

func reportParams(b *testing.B, perOp int) {
	b.ReportMetric(float64(perOp)*float64(b.N)/b.Elapsed().Seconds(), "params/s")
}

// benchEncode measures one client's Encode of benchDim parameters.
func benchEncode(b *testing.B, name string, c Config, slot Slot) {
	m, err := New(name, c)
	if err != nil {
		b.Fatal(err)
	}
	w := benchInput()
	rg := Range{Center: 0, Radius: 1}
	dst := make([]byte, 0, 8*benchDim)
	b.SetBytes(4 * benchDim)
	b.ResetTimer()
	for range b.N {
		if _, err := m.Encode(dst[:0], w, rg, slot); err != nil {
			b.Fatal(err)
		}
	}
	reportParams(b, benchDim)
	b.ReportMetric(float64(m.Bits(benchDim))/benchDim, "bits/param")
}

func BenchmarkEncodeLDPQ(b *testing.B) {
	benchEncode(b, "ldpq", Config{Epsilon: 1}, Slot{Private: stream("p")})
}

func BenchmarkEncodeCorBinLeader(b *testing.B) {
	benchEncode(b, "corbin", Config{Epsilon: 1, SharedBits: 5}, Slot{Private: stream("p"), Shared: stream("s"), Role: Leader})
}

func BenchmarkEncodeCorBinFollower(b *testing.B) {
	benchEncode(b, "corbin", Config{Epsilon: 1, SharedBits: 5}, Slot{Private: stream("p"), Shared: stream("s"), Role: Follower})
}

func BenchmarkEncodeCoQ(b *testing.B) {
	benchEncode(b, "coq", Config{Epsilon: 1, SharedBits: 5, Px: 0.3}, Slot{Private: stream("p"), Shared: stream("s"), Role: Leader})
}

func BenchmarkEncodeCQ(b *testing.B) {
	benchEncode(b, "cq", Config{}, Slot{Private: stream("p"), Shared: stream("s"), Index: 3, Size: 100})
}

func BenchmarkEncodeNone(b *testing.B) {
	benchEncode(b, "none", Config{}, Slot{})
}

// benchSum measures the server's decode and aggregation of one payload.
func benchSum(b *testing.B, name string, c Config, slot Slot) {
	m, err := New(name, c)
	if err != nil {
		b.Fatal(err)
	}
	rg := Range{Center: 0, Radius: 1}
	payload, err := m.Encode(nil, benchInput(), rg, slot)
	if err != nil {
		b.Fatal(err)
	}
	sum, err := m.NewSum(benchDim, rg)
	if err != nil {
		b.Fatal(err)
	}
	b.ResetTimer()
	for range b.N {
		if err := sum.Add(payload, slot); err != nil {
			b.Fatal(err)
		}
	}
	reportParams(b, benchDim)
}

func BenchmarkSumOneBit(b *testing.B) {
	benchSum(b, "ldpq", Config{Epsilon: 1}, Slot{Private: stream("p")})
}

func BenchmarkSumNone(b *testing.B) {
	benchSum(b, "none", Config{}, Slot{})
}
