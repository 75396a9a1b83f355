package privacy

import (
	"fmt"
	"math/rand/v2"
	"testing"
)

// BenchmarkTreeNext is one step of the noise of a 1000-step tree (Restart
// 1000, so that the steps cycle through one tree's shapes) for the
// parameter counts of fedpq's CNN (6,422) and a model of 100,000, from a
// ChaCha8 source.
func BenchmarkTreeNext(b *testing.B) {
	for _, d := range []int{6_422, 100_000} {
		for _, efficient := range []bool{false, true} {
			b.Run(fmt.Sprintf("d=%d/efficient=%v", d, efficient), func(b *testing.B) {
				tr, err := NewTree(d, 1, rand.New(chacha(7)), TreeOptions{Restart: 1000, Efficient: efficient})
				if err != nil {
					b.Fatal(err)
				}
				dst := make([]float64, d)
				b.SetBytes(int64(8 * d))
				for b.Loop() {
					if err := tr.Next(dst); err != nil {
						b.Fatal(err)
					}
				}
			})
		}
	}
}

// BenchmarkTreeClient is one client's guarantee after 1000 steps, from
// its 10 steps.
func BenchmarkTreeClient(b *testing.B) {
	steps := []int{3, 104, 230, 371, 402, 555, 690, 777, 901, 1000}
	for b.Loop() {
		if _, err := TreeClient(steps, 1000, 2, 1e-6, TreeOptions{}); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkTreeWorstCase is the worst case over 1000 steps for a few
// participation limits k and separations b.
func BenchmarkTreeWorstCase(b *testing.B) {
	for _, c := range []struct {
		k, b int
		o    TreeOptions
	}{
		{1, 0, TreeOptions{}},
		{1000, 0, TreeOptions{}},
		{10, 99, TreeOptions{}},
		{10, 99, TreeOptions{Efficient: true}},
		{4, 249, TreeOptions{}},
		{2, 499, TreeOptions{}},
		{10, 99, TreeOptions{Restart: 100}},
	} {
		b.Run(fmt.Sprintf("k=%d/b=%d/efficient=%v/restart=%d", c.k, c.b, c.o.Efficient, c.o.Restart), func(b *testing.B) {
			for b.Loop() {
				if _, err := TreeWorstCase(1000, c.k, c.b, 2, 1e-6, c.o); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
