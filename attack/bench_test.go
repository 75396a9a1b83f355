package attack

import (
	"context"
	"testing"

	"github.com/fedpq/fedpq/model"
)

// BenchmarkView times the server's view of one upload on lenet (a client's
// SGD step on one MNIST image, its encoding, the server's decoding), per
// mechanism and observer.
func BenchmarkView(b *testing.B) {
	d := mnist(b)
	m, _ := model.New("lenet", d.Shape, 10)
	w := m.Init(1)
	for _, c := range []struct {
		mech    string
		clients int
	}{{"none", 1}, {"ldpq", 1}, {"jopeq", 1}, {"corbin", 2}} {
		mk := newMech(b, c.mech, 1)
		batches := []Batch{batch(d, 0, 1), batch(d, 100, 1)}[:c.clients]
		b.Run(c.mech, func(b *testing.B) {
			for b.Loop() {
				if _, err := View(context.Background(), m, w, mk, gradient, batches, 1); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkScore times scoring a batch of 8 MNIST images: 64 SSIMs and the
// best of 8! matchings.
func BenchmarkScore(b *testing.B) {
	d := mnist(b)
	truth := batch(d, 0, 8)
	rec := Reconstruction{X: batch(d, 500, 8).X, Labels: truth.Y}
	for b.Loop() {
		if _, err := Score(d.Shape, truth, rec); err != nil {
			b.Fatal(err)
		}
	}
}
