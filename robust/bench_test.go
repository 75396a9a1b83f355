package robust

import (
	"math/rand/v2"
	"testing"
)

// BenchmarkRules times each rule on n = 100 messages of d = 100,000
// parameters (go test ./robust -bench . -benchtime 10x); ns/op is one
// aggregation.
func BenchmarkRules(b *testing.B) {
	const n, d = 100, 100_000
	rng := rand.New(rand.NewPCG(7, 8))
	rows := honestAndByzantine(rng, n, 10, d, 3, true)
	out := make([]float64, d)
	for _, r := range []Rule{Mean{}, Median{}, TrimmedMean{Beta: 0.1}, Krum{F: 10}, MultiKrum{F: 10, M: 50}, Bulyan{F: 10}, NormBounded{C: 100}} {
		b.Run(r.String(), func(b *testing.B) {
			b.SetBytes(n * d * 4)
			for b.Loop() {
				if err := r.Aggregate(rows, out); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkLarge times the median and Krum on n = 300 messages of d =
// 100,000 parameters, to show how they grow with n: the median as n (per
// coordinate), Krum as n^2 (go test ./robust -bench Large -benchtime 3x).
func BenchmarkLarge(b *testing.B) {
	const n, d = 300, 100_000
	rng := rand.New(rand.NewPCG(9, 10))
	rows := honestAndByzantine(rng, n, 30, d, 3, true)
	out := make([]float64, d)
	for _, r := range []Rule{Median{}, Krum{F: 30}} {
		b.Run(r.String(), func(b *testing.B) {
			b.SetBytes(n * d * 4)
			for b.Loop() {
				if err := r.Aggregate(rows, out); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
