package audit

import (
	"testing"

	"github.com/fedpq/fedpq/mech"
)

// BenchmarkAudit times one audit of the range ends at 1000 views per input
// (and as many for the pilot): per op, 4000 encodings and decodings of one
// message, or of a pair's two for the pair observer.
func BenchmarkAudit(b *testing.B) {
	rg := mech.Range{Center: 0, Radius: 1}
	ends := Neighbours(rg)[:1]
	for _, c := range []struct {
		name string
		o    Observer
	}{{"ldpq", Message}, {"laplace", Message}, {"jopeq", Message}, {"corbin", Message}, {"corbin", Pair}} {
		m, err := mech.New(c.name, mech.DefaultConfig())
		if err != nil {
			b.Fatal(err)
		}
		b.Run(c.name+"/"+c.o.String(), func(b *testing.B) {
			for b.Loop() {
				if _, err := Audit(m, rg, ends, Options{Observer: c.o, Samples: 1000, Alpha: 0.05, Seed: 1}); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
