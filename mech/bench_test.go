package mech

import (
	"fmt"
	"testing"
)

// benchDim is the tensor size of the benchmarks: a mid-size layer.
const benchDim = 1 << 16

// benchCase is one mechanism setting to benchmark.
type benchCase struct {
	name string
	c    Config
	role Role // Paired mechanisms: the role to encode as
}

// benchCases is every registered mechanism with its defaults, plus the
// variants whose speed differs: a corbin follower, a biased coq codebook,
// and the hexagonal lattice.
func benchCases() []benchCase {
	var cases []benchCase
	for _, name := range Names() {
		cases = append(cases, benchCase{name: name, c: DefaultConfig(), role: Leader})
	}
	follower := benchCase{name: "corbin", c: DefaultConfig(), role: Follower}
	coq := benchCase{name: "coq", c: DefaultConfig(), role: Leader}
	coq.c.Px = 0.3
	cases = append(cases, follower, coq)
	for _, name := range []string{"sdq", "jopeq", "jopeq-compat", "laplace+sdq"} {
		hex := benchCase{name: name, c: DefaultConfig()}
		hex.c.Lattice = 2
		cases = append(cases, hex)
	}
	return cases
}

func (bc benchCase) String() string {
	s := bc.name
	switch {
	case bc.name == "corbin" && bc.role == Follower:
		s += "/follower"
	case bc.name == "coq":
		s += fmt.Sprintf("/px=%g", bc.c.Px)
	case bc.c.Lattice == 2:
		s += "/hex"
	}
	return s
}

// slot returns a client's randomness for the mechanism's coupling.
func (bc benchCase) slot(m Mechanism) Slot {
	s := Slot{Private: stream("bench-private")}
	switch m.Coupling() {
	case Paired:
		s.Shared, s.Role = stream("bench-shared"), bc.role
	case Grouped:
		s.Shared, s.Index, s.Size = stream("bench-group"), 3, 100
	case Dithered:
		s.Shared = stream("bench-dither")
	}
	return s
}

func benchInput() []float32 {
	src := stream("bench-input")
	w := make([]float32, benchDim)
	for i := range w {
		w[i] = float32(2*src.Float64() - 1)
	}
	return w
}

// BenchmarkEncode measures one client's Encode of 2^16 parameters in
// [-1, 1] (range 0±1, eps 1): params/s on one core, and bits/param sent.
func BenchmarkEncode(b *testing.B) {
	w := benchInput()
	rg := Range{Center: 0, Radius: 1}
	for _, bc := range benchCases() {
		b.Run(bc.String(), func(b *testing.B) {
			m, err := New(bc.name, bc.c)
			if err != nil {
				b.Fatal(err)
			}
			slot := bc.slot(m)
			dst := make([]byte, 0, 8*benchDim)
			b.ResetTimer()
			for range b.N {
				if _, err := m.Encode(dst[:0], w, rg, slot); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(benchDim)*float64(b.N)/b.Elapsed().Seconds(), "params/s")
			b.ReportMetric(float64(m.Bits(benchDim))/benchDim, "bits/param")
		})
	}
}

// BenchmarkSum measures the server's validation, decoding and aggregation
// of one client's payload: client-params/s on one core.
func BenchmarkSum(b *testing.B) {
	w := benchInput()
	rg := Range{Center: 0, Radius: 1}
	for _, bc := range benchCases() {
		b.Run(bc.String(), func(b *testing.B) {
			m, err := New(bc.name, bc.c)
			if err != nil {
				b.Fatal(err)
			}
			payload, err := m.Encode(nil, w, rg, bc.slot(m))
			if err != nil {
				b.Fatal(err)
			}
			sum, err := m.NewSum(benchDim, rg)
			if err != nil {
				b.Fatal(err)
			}
			b.ResetTimer()
			for range b.N {
				// Dithered sums regenerate the client's dither from its slot.
				if err := sum.Add(payload, bc.slot(m)); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(benchDim)*float64(b.N)/b.Elapsed().Seconds(), "params/s")
		})
	}
}
