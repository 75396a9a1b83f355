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

// BenchmarkUserRun times one run of the user-level audit, the canary's
// world, at fedpq audit --user-level's defaults: one round of 10 clients,
// 64 parameters, z = 1: 10 encodings (none: 9 and the server's noise),
// their sum and its decoding, and the projection.
func BenchmarkUserRun(b *testing.B) {
	for _, name := range []string{"none", "ddgauss", "pbm"} {
		a, err := newUserAudit(name, noiseConfig(1), userOpts(1, 10, 64, 2))
		if err != nil {
			b.Fatal(err)
		}
		b.Run(name, func(b *testing.B) {
			var s userScratch
			i := 0
			for b.Loop() {
				if _, err := a.run(1, i, &s); err != nil {
					b.Fatal(err)
				}
				i++
			}
		})
	}
}
