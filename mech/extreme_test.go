package mech

import (
	"math"
	"slices"
	"testing"
)

// extremeDir is a direction with both signs and zeros (which count as
// "not positive": the lower end).
func extremeDir(n int) []float32 {
	d := make([]float32, n)
	for i := range d {
		d[i] = float32(i%3 - 1)
	}
	return d
}

// decodeOne is the server's decoding of one payload: the mean of a sum of
// it alone, with the slot the server would use (the dither stream for a
// Dithered mechanism).
func decodeOne(t *testing.T, m Mechanism, p []byte, n int, rg Range, s Slot) []float64 {
	t.Helper()
	sum, err := m.NewSum(n, rg)
	if err != nil {
		t.Fatal(err)
	}
	if err := sum.Add(p, s); err != nil {
		t.Fatalf("%s: the server refuses the extreme message: %v", m.Name(), err)
	}
	out := make([]float64, n)
	if err := sum.Mean(out); err != nil {
		t.Fatal(err)
	}
	return out
}

// TestExtreme: the mechanisms named in Extremal's doc have an extreme
// message and no other does; the server accepts it, and every parameter
// decodes to the documented end: none c ± r, gaussian c ± (r + 3 sigma),
// a one-bit mechanism c ± out with every bit the one of dir's sign, sdq's
// scalar lattice the top or bottom index (the honest encoding of the
// edge, byte for byte), its hexagonal lattice the corner's encoding.
func TestExtreme(t *testing.T) {
	rg := Range{Center: 0.25, Radius: 0.5} // c ± r exact in float32
	var have []string
	for _, bc := range benchCases() {
		m, err := New(bc.name, bc.c)
		if err != nil {
			t.Fatal(err)
		}
		x, err := ExtremeOf(m)
		if err != nil {
			continue
		}
		if !slices.Contains(have, bc.name) {
			have = append(have, bc.name)
		}
		t.Run(bc.String(), func(t *testing.T) {
			n := 1001
			dir := extremeDir(n)
			p, err := x.Extreme(nil, dir, rg, bc.slot(m))
			if err != nil {
				t.Fatal(err)
			}
			if want := (m.Bits(n) + 7) / 8; len(p) != want {
				t.Fatalf("%d bytes, want %d", len(p), want)
			}
			got := decodeOne(t, m, p, n, rg, bc.slot(m))
			var h float64
			exact := false // one-bit outputs are float64; the others float32
			switch mm := m.(type) {
			case none:
				h = rg.Radius
			case gaussian:
				d, _ := mm.noise(rg)
				h = rg.Radius + 3*d.Sigma()
			case *sdq:
				edges := make([]float32, n)
				for i, v := range dir {
					edges[i] = float32(rg.Center - rg.Radius)
					if v > 0 {
						edges[i] = float32(rg.Center + rg.Radius)
					}
				}
				honest, err := m.Encode(nil, edges, rg, bc.slot(m))
				if err != nil {
					t.Fatal(err)
				}
				if !slices.Equal(p, honest) {
					t.Errorf("the extreme message is not the honest encoding of the edges")
				}
				if mm.dim == 2 {
					return
				}
				// Top or bottom index: within half a step of the edge.
				h = rg.Radius
				for i, v := range got {
					want := rg.Center - h
					if dir[i] > 0 {
						want = rg.Center + h
					}
					if math.Abs(v-want) > rg.Radius*mm.scalar.Step/2*(1+1e-9) {
						t.Fatalf("parameter %d decodes to %v, want within half a step (%v) of %v", i, v, rg.Radius*mm.scalar.Step/2, want)
					}
				}
				return
			default: // the one-bit mechanisms
				exact = true
				if h, err = m.(Supporter).Support(rg); err != nil {
					t.Fatal(err)
				}
				for i, b := range decodeBits(t, p, n) {
					if b != (dir[i] > 0) {
						t.Fatalf("bit %d is %v for direction %v", i, b, dir[i])
					}
				}
			}
			for i, v := range got {
				want := rg.Center - h
				if dir[i] > 0 {
					want = rg.Center + h
				}
				if !exact {
					want = float64(float32(want))
				}
				if math.Abs(v-want) > 1e-12 {
					t.Fatalf("parameter %d (direction %v) decodes to %v, want %v", i, dir[i], v, want)
				}
			}
		})
	}
	if want := []string{"augcorbin", "coq", "corbin", "gaussian", "ldpq", "none", "sdq"}; !slices.Equal(have, want) {
		t.Errorf("mechanisms with an extreme message: %v, want %v", have, want)
	}
	if _, err := ExtremeOf(mustNew(t, "laplace", DefaultConfig())); err == nil || err.Error() != "mech: laplace has no extreme message (Extremal); none, gaussian, ldpq, corbin, augcorbin, coq and sdq have one" {
		t.Errorf("laplace: %v", err)
	}
}

// TestOneClientEffect: what the support alone bounds. Among n clients of
// a one-bit mechanism, one client that replaces its honest message by any
// other (here the extreme one, every bit 1) moves the decoded mean of each
// parameter by at most (hi - lo)/n = 2 out/n, and by exactly that where
// its honest bit was 0: checked on real messages of n = 10 clients
// (ldpq, and corbin with the attacker in a pair whose partner is honest)
// at eps = 1 and r = 0.05, where out = 0.1082 and the bound is 0.02164.
func TestOneClientEffect(t *testing.T) {
	const n, params = 10, 4096
	rg := Range{Center: 0, Radius: 0.05}
	for _, name := range []string{"ldpq", "corbin"} {
		t.Run(name, func(t *testing.T) {
			m := mustNew(t, name, DefaultConfig())
			out, err := m.(Supporter).Support(rg)
			if err != nil {
				t.Fatal(err)
			}
			payloads := make([][]byte, n)
			for k := range payloads {
				w := make([]float32, params)
				src := stream("effect-input", uint64(k))
				for i := range w {
					w[i] = float32(0.1*src.Float64() - 0.05)
				}
				s := Slot{Private: stream("effect-private", uint64(k))}
				if m.Coupling() == Paired {
					// clients 2j and 2j+1 are a pair.
					s.Shared, s.Role = stream("effect-shared", uint64(k/2)), Leader+Role(k%2)
				}
				if payloads[k], err = m.Encode(nil, w, rg, s); err != nil {
					t.Fatal(err)
				}
			}
			mean := func(ps [][]byte) []float64 {
				sum, _ := m.NewSum(params, rg)
				for _, p := range ps {
					if err := sum.Add(p, Slot{}); err != nil {
						t.Fatal(err)
					}
				}
				dst := make([]float64, params)
				if err := sum.Mean(dst); err != nil {
					t.Fatal(err)
				}
				return dst
			}
			honest := mean(payloads)
			up := make([]float32, params)
			for i := range up {
				up[i] = 1
			}
			extreme, err := m.(Extremal).Extreme(nil, up, rg, Slot{})
			if err != nil {
				t.Fatal(err)
			}
			attacked := mean(append([][]byte{extreme}, payloads[1:]...))
			bound := 2 * out / n
			bits := decodeBits(t, payloads[0], params)
			moved := 0
			for i := range honest {
				d := attacked[i] - honest[i]
				want := 0.0
				if !bits[i] {
					want, moved = bound, moved+1
				}
				if math.Abs(d-want) > 1e-15 {
					t.Fatalf("parameter %d moved by %v, want %v (the honest bit was %v)", i, d, want, bits[i])
				}
			}
			if math.Abs(out-0.1082) > 5e-5 || moved < params/4 {
				t.Errorf("out %v, %d of %d parameters moved", out, moved, params)
			}
			t.Logf("%s eps 1, r 0.05: out %.5f, one client of %d moves a parameter by at most %.5f; %d of %d moved", name, out, n, bound, moved, params)
		})
	}
}
