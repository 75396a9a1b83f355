package mech

import (
	"fmt"
	"math"
	"math/bits"
	"slices"
	"strings"
	"testing"

	"github.com/fedpq/fedpq/corr"
)

// intCase is one setting of an Integer mechanism.
type intCase struct {
	name string
	c    Config
}

func (ic intCase) String() string {
	return fmt.Sprintf("%s(eps=%g d=%d px=%g R=%d L=%d b=%d n=%d z=%g m=%d)", ic.name, ic.c.Epsilon, ic.c.SharedBits, ic.c.Px, ic.c.Rate, ic.c.Lattice, ic.c.ModBits, ic.c.Clients, ic.c.Noise, ic.c.Trials)
}

// intCases covers every Integer mechanism at settings that change its
// fields or its decode: eps, shared bits and coq's codebook, and for the
// lattices Rate 1 (jopeq's randomized response, one field per parameter),
// a higher scalar rate (jopeq's end marks) and the hexagonal lattice.
func intCases() []intCase {
	c := func(name string, set func(*Config)) intCase {
		cfg := DefaultConfig()
		set(&cfg)
		return intCase{name, cfg}
	}
	return []intCase{
		c("ldpq", func(c *Config) { c.Epsilon = 0.5 }),
		c("ldpq", func(c *Config) { c.Epsilon = 4 }),
		c("corbin", func(c *Config) {}),
		c("corbin", func(c *Config) { c.SharedBits, c.Epsilon = 1, 2 }),
		c("augcorbin", func(c *Config) { c.Gamma = 0.3 }),
		c("coq", func(c *Config) {}),
		c("coq", func(c *Config) { c.SharedBits, c.Px = 3, 0.3 }),
		c("cq", func(c *Config) {}),
		c("sdq", func(c *Config) { c.Rate = 1 }),
		c("sdq", func(c *Config) { c.Rate = 4 }),
		c("sdq", func(c *Config) { c.Rate, c.Lattice = 3, 2 }),
		c("sdq", func(c *Config) { c.Rate, c.Lattice = 2, 2 }),
		c("jopeq", func(c *Config) { c.Rate = 1 }),
		c("jopeq", func(c *Config) { c.Rate, c.Epsilon = 4, 2 }),
		c("jopeq", func(c *Config) { c.Rate, c.Lattice = 2, 2 }),
		c("laplace+sdq", func(c *Config) { c.Rate = 4 }),
		c("laplace+sdq", func(c *Config) { c.Rate, c.Lattice, c.Epsilon = 2, 2, 3 }),
		c("ddgauss", func(c *Config) { c.Clients = 100 }),
		c("ddgauss", func(c *Config) { c.Clients, c.ModBits, c.Epsilon = 100, 12, 4 }),
		c("skellam", func(c *Config) { c.Clients = 100 }),
		c("skellam", func(c *Config) { c.Clients, c.ModBits, c.Epsilon = 100, 12, 4 }),
		c("ddgauss", func(c *Config) { c.Clients, c.Noise = 100, 0.8 }),
		c("skellam", func(c *Config) { c.Clients, c.ModBits, c.Noise = 100, 12, 1.3 }),
		// pbm at settings whose clip is at least one root mean square at
		// one parameter: (1/2) z sqrt(m/n) >= 1.
		c("pbm", func(c *Config) { c.Clients, c.Noise, c.Trials = 4, 1.5, 16 }),
		c("pbm", func(c *Config) { c.Clients, c.Noise, c.Trials = 2, 3, 2 }),
	}
}

// intSlots returns the encoder slots of a round of clients (pairs drawn by
// corr.Pairing with the mechanism's Alone for Paired, a shuffled group for
// Grouped, a dither stream per client for Dithered), and server returns
// fresh server slots: each client's dither stream at its start.
func intSlots(m Mechanism, clients int, seed uint64) (enc []Slot, server func() []Slot) {
	enc = make([]Slot, clients)
	for c := range enc {
		enc[c].Private = stream("int-private", seed, uint64(c))
	}
	switch m.Coupling() {
	case Paired:
		for c, p := range corr.Pairing(stream("int-pairing", seed), clients, m.Alone()) {
			if p < 0 {
				continue
			}
			enc[c].Shared, enc[c].Role = stream("int-pair", seed, uint64(min(c, p))), Leader
			if c > p {
				enc[c].Role = Follower
			}
		}
	case Grouped:
		perm := make([]int, clients)
		corr.Shuffle(stream("int-perm", seed), perm)
		for c := range enc {
			enc[c].Shared, enc[c].Index, enc[c].Size = stream("int-group", seed), perm[c], clients
		}
	case Dithered:
		for c := range enc {
			enc[c].Shared = stream("int-dither", seed, uint64(c))
		}
	}
	server = func() []Slot {
		s := make([]Slot, clients)
		if m.Coupling() == Dithered {
			for c := range s {
				s[c].Shared = stream("int-dither", seed, uint64(c))
			}
		}
		return s
	}
	return enc, server
}

// TestDecodeSumMatchesSum: for every Integer mechanism, three ranges and
// 1, 2, 7 and 100 clients, each encoding three tensors in turn (so that
// shared streams run on from tensor to tensor), (a) a streaming Sum of the
// payloads in a shuffled order and (b) DecodeSum of the per-field sums of
// their Unpacked fields, with the server slots in that same order, give
// the same mean bit for bit. Each mean is also checked against the
// average of the clients' one-payload means (to 1e-11 of the range's
// reach), which the shared decode function cannot make agree by itself.
func TestDecodeSumMatchesSum(t *testing.T) {
	ranges := []Range{{Center: 0, Radius: 1}, {Center: 0.3, Radius: 0.05}, {Center: -2, Radius: 7}}
	sizes := []int{37, 1, 64}
	for ci, ic := range intCases() {
		m, err := New(ic.name, ic.c)
		if err != nil {
			t.Fatal(err)
		}
		im, err := IntegerOf(m)
		if err != nil {
			t.Fatal(err)
		}
		for ri, rg := range ranges {
			h, err := m.(Supporter).Support(rg)
			if err != nil {
				t.Fatal(err)
			}
			tol := 1e-11 * (math.Abs(rg.Center) + h)
			for _, clients := range []int{1, 2, 7, 100} {
				what := fmt.Sprintf("%v range %v clients %d", ic, rg, clients)
				seed := uint64(1000*ci + 10*ri + clients)
				enc, server := intSlots(m, clients, seed)
				in := stream("int-input", seed)
				payloads := make([][][]byte, clients)
				for c := range clients {
					for _, n := range sizes {
						w := make([]float32, n)
						for i := range w {
							w[i] = float32(rg.Center + rg.Radius*(2.4*in.Float64()-1.2))
						}
						l2Fit(m, w, rg, 0.9)
						p, err := m.Encode(nil, w, rg, enc[c])
						if err != nil {
							t.Fatalf("%s: %v", what, err)
						}
						payloads[c] = append(payloads[c], p)
					}
				}
				order := make([]int, clients)
				corr.Shuffle(stream("int-order", seed), order)
				srvA, srvB, srvC := server(), server(), server()
				slotsB := make([]Slot, clients)
				for k, c := range order {
					slotsB[k] = srvB[c]
				}
				for ti, n := range sizes {
					sum, err := m.NewSum(n, rg)
					if err != nil {
						t.Fatal(err)
					}
					fields := make([]uint64, im.Fields(n))
					total := make([]uint64, im.Fields(n))
					for _, c := range order {
						if err := sum.Add(payloads[c][ti], srvA[c]); err != nil {
							t.Fatalf("%s: Add: %v", what, err)
						}
						if err := im.Unpack(fields, payloads[c][ti], n); err != nil {
							t.Fatalf("%s: Unpack: %v", what, err)
						}
						for i, f := range fields {
							if f >= im.Levels() {
								t.Fatalf("%s: field %d is %d, Levels %d", what, i, f, im.Levels())
							}
							total[i] += f
						}
					}
					streamed, decoded := make([]float64, n), make([]float64, n)
					if err := sum.Mean(streamed); err != nil {
						t.Fatal(err)
					}
					if err := im.DecodeSum(decoded, total, clients, rg, slotsB); err != nil {
						t.Fatalf("%s: DecodeSum: %v", what, err)
					}
					ref := make([]float64, n)
					one := make([]float64, n)
					for c := range clients {
						s1, _ := m.NewSum(n, rg)
						if err := s1.Add(payloads[c][ti], srvC[c]); err != nil {
							t.Fatal(err)
						}
						if err := s1.Mean(one); err != nil {
							t.Fatal(err)
						}
						for i, v := range one {
							ref[i] += v / float64(clients)
						}
					}
					for i := range streamed {
						if math.Float64bits(streamed[i]) != math.Float64bits(decoded[i]) {
							t.Fatalf("%s tensor %d: parameter %d: Sum gives %v, DecodeSum %v", what, ti, i, streamed[i], decoded[i])
						}
						if math.IsNaN(streamed[i]) || math.Abs(streamed[i]-ref[i]) > tol {
							t.Fatalf("%s tensor %d: parameter %d: mean %v, the clients' one-payload means average %v (tol %g)", what, ti, i, streamed[i], ref[i], tol)
						}
					}
				}
			}
		}
	}
}

// TestDecodeSumSlotOrder shows that the order of the slots is part of the
// contract: for a dithered mechanism, the slots in the reverse of the
// order of Add give a mean that differs in the last bits for some
// parameter (float addition is not associative), while the order of Add
// gives it exactly.
func TestDecodeSumSlotOrder(t *testing.T) {
	const clients, n = 7, 200
	rg := Range{Center: 0.1, Radius: 1.3}
	m := latNew(t, "sdq", 1, 4, 1)
	im, _ := IntegerOf(m)
	enc, server := intSlots(m, clients, 1)
	sum, _ := m.NewSum(n, rg)
	total := make([]uint64, n)
	fields := make([]uint64, n)
	srv := server()
	for c := range clients {
		p, err := m.Encode(nil, constVec(n, 0.2), rg, enc[c])
		if err != nil {
			t.Fatal(err)
		}
		if err := sum.Add(p, srv[c]); err != nil {
			t.Fatal(err)
		}
		if err := im.Unpack(fields, p, n); err != nil {
			t.Fatal(err)
		}
		for i, f := range fields {
			total[i] += f
		}
	}
	want := make([]float64, n)
	sum.Mean(want)
	fwd, rev := server(), server()
	slices.Reverse(rev)
	got, other := make([]float64, n), make([]float64, n)
	if err := im.DecodeSum(got, total, clients, rg, fwd); err != nil {
		t.Fatal(err)
	}
	if err := im.DecodeSum(other, total, clients, rg, rev); err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(got, want) {
		t.Error("slots in the order of Add: a different mean")
	}
	if slices.Equal(other, want) {
		t.Error("slots in reverse order give the same mean bit for bit for all 200 parameters: the test no longer shows that the order matters")
	}
}

// TestDecodeSumRefuses: DecodeSum and Unpack refuse what cannot be a
// sum or a field buffer, with a clear error, and write nothing they would
// have to take back.
func TestDecodeSumRefuses(t *testing.T) {
	rg := Range{Center: 0, Radius: 1}
	for _, ic := range intCases() {
		m, _ := New(ic.name, ic.c)
		im, _ := IntegerOf(m)
		const n = 5
		f := im.Fields(n)
		ok := make([]uint64, f)
		slots := func(k int) []Slot {
			s := make([]Slot, k)
			for i := range s {
				s[i].Shared = stream("refuse", uint64(i))
			}
			return s
		}
		top := make([]uint64, f)
		top[f-1] = 3*(im.Levels()-1) + 1
		for _, bad := range []struct {
			what  string
			dst   []float64
			sum   []uint64
			count int
			rg    Range
			slots []Slot
		}{
			{"short sum", make([]float64, n), ok[:f-1], 3, rg, slots(3)},
			{"no clients", make([]float64, n), ok, 0, rg, slots(0)},
			{"a field beyond count*(Levels-1)", make([]float64, n), top, 3, rg, slots(3)},
			{"zero radius", make([]float64, n), ok, 3, Range{}, slots(3)},
		} {
			if err := im.DecodeSum(bad.dst, bad.sum, bad.count, bad.rg, bad.slots); err == nil {
				t.Errorf("%v: %s accepted", ic, bad.what)
			}
		}
		if SumBits(im, math.MaxInt) > 63 {
			if err := im.DecodeSum(make([]float64, n), ok, math.MaxInt, rg, nil); err == nil || !strings.Contains(err.Error(), "63") {
				t.Errorf("%v: a count whose sums overflow: %v", ic, err)
			}
		}
		if m.Coupling() == Dithered {
			if err := im.DecodeSum(make([]float64, n), ok, 3, rg, slots(2)); err == nil || !strings.Contains(err.Error(), "slots") {
				t.Errorf("%v: 2 slots for 3 clients: %v", ic, err)
			}
			s := slots(3)
			s[1].Shared = nil
			if err := im.DecodeSum(make([]float64, n), ok, 3, rg, s); err == nil {
				t.Errorf("%v: a slot without a dither stream accepted", ic)
			}
		} else if err := im.DecodeSum(make([]float64, n), ok, 3, rg, nil); err != nil {
			t.Errorf("%v: slots are not needed, but: %v", ic, err)
		}
		p, err := m.Encode(nil, constVec(n, 0.3), rg, Slot{Private: stream("refuse-p"), Shared: stream("refuse-s"), Role: Leader, Size: 1})
		if err != nil {
			t.Fatal(err)
		}
		if err := im.Unpack(make([]uint64, f+1), p, n); err == nil {
			t.Errorf("%v: Unpack into a buffer of the wrong length accepted", ic)
		}
		if err := im.Unpack(nil, p, -1); err == nil {
			t.Errorf("%v: Unpack of a negative size accepted", ic)
		}
	}
}

// TestSumBits checks SumBits against its definition, clients*(Levels-1) <
// 2^k <= 2*clients*(Levels-1), and at the values the docs quote.
func TestSumBits(t *testing.T) {
	for _, ic := range intCases() {
		m, _ := New(ic.name, ic.c)
		im, _ := IntegerOf(m)
		for _, clients := range []int{1, 2, 7, 100, 1000, 1 << 20} {
			k := SumBits(im, clients)
			hi, lo := bits.Mul64(uint64(clients), im.Levels()-1)
			if hi != 0 || k < 1 || k > 63 || lo>>k != 0 || lo>>(k-1) == 0 {
				t.Errorf("%v: SumBits(%d) = %d for a sum up to %d", ic, clients, k, lo)
			}
		}
	}
	one, _ := IntegerOf(mustNew(t, "ldpq", DefaultConfig()))
	for clients, want := range map[int]int{0: 0, -3: 0, 1: 1, 2: 2, 3: 2, 4: 3, 100: 7, 127: 7, 128: 8, 1000: 10} {
		if got := SumBits(one, clients); got != want {
			t.Errorf("one-bit SumBits(%d) = %d, want %d", clients, got, want)
		}
	}
	sdq, _ := IntegerOf(latNew(t, "sdq", 1, 4, 1))
	if got := SumBits(sdq, 100); got != 11 { // 100*15 = 1500 < 2048
		t.Errorf("sdq R=4 SumBits(100) = %d, want 11", got)
	}
	if got := SumBits(levels(1<<40), 1<<30); got != 70 { // (2^40-1) 2^30 needs 70 bits
		t.Errorf("SumBits beyond 64 bits = %d, want 70", got)
	}
}

// levels is an Integer with nothing but Levels, for SumBits.
type levels uint64

func (l levels) Levels() uint64                                        { return uint64(l) }
func (levels) Fields(int) int                                          { return 0 }
func (levels) Unpack([]uint64, []byte, int) error                      { return nil }
func (levels) DecodeSum([]float64, []uint64, int, Range, []Slot) error { return nil }

func mustNew(t testing.TB, name string, c Config) Mechanism {
	t.Helper()
	m, err := New(name, c)
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// TestIntegerOf: every registered mechanism, at its defaults and (for the
// lattices) on the hexagonal lattice, is Integer iff integerNames lists
// it; the others' error names them and the mechanisms that are.
func TestIntegerOf(t *testing.T) {
	for _, name := range L2Names() {
		m := mustNew(t, name, testConfig(name))
		if _, err := IntegerOf(m); (err == nil) != slices.Contains(integerNames, name) {
			t.Errorf("%s: IntegerOf: %v; integerNames lists it: %v", name, err, slices.Contains(integerNames, name))
		}
	}
	for _, name := range Names() {
		listed := slices.Contains(integerNames, name)
		cfgs := []Config{DefaultConfig()}
		if _, dim, err := latticeConfig(DefaultConfig(), name); err == nil && dim == 1 {
			hex := DefaultConfig()
			hex.Lattice = 2
			cfgs = append(cfgs, hex)
		}
		for _, c := range cfgs {
			m := mustNew(t, name, c)
			im, err := IntegerOf(m)
			switch {
			case listed && (err != nil || im == nil):
				t.Errorf("%s (L=%d): %v", name, c.Lattice, err)
			case !listed && err == nil:
				t.Errorf("%s (L=%d) is Integer but not in integerNames", name, c.Lattice)
			case !listed && !(strings.Contains(err.Error(), name) && strings.Contains(err.Error(), "ldpq") && strings.Contains(err.Error(), "laplace+sdq")):
				t.Errorf("%s: unclear error %q", name, err)
			}
		}
	}
	for _, name := range integerNames {
		if _, ok := Lookup(name); !ok {
			t.Errorf("integerNames lists %s, which is not registered", name)
		}
	}
	if _, err := IntegerOf(nil); err == nil {
		t.Error("IntegerOf(nil) accepted")
	}
}

// FuzzIntegerUnpack feeds arbitrary payloads to every Integer mechanism at
// small settings: Unpack refuses exactly what Sum.Add refuses, every field
// it writes is below Levels, and the one-client DecodeSum of its fields is
// the one-payload Mean bit for bit. The seeds are valid payloads.
func FuzzIntegerUnpack(f *testing.F) {
	rg := Range{Center: 0.2, Radius: 0.7}
	var ms []Mechanism
	for _, ic := range intCases() {
		m := mustNew(f, ic.name, ic.c)
		ms = append(ms, m)
		for _, n := range []int{1, 3, 8} {
			w := constVec(n, 0.5)
			l2Fit(m, w, rg, 0.9)
			p, err := m.Encode(nil, w, rg, Slot{Private: stream("fuzz-p"), Shared: stream("fuzz-s"), Role: Follower, Size: 1})
			if err != nil {
				f.Fatal(err)
			}
			f.Add(p, uint8(n))
		}
	}
	f.Add([]byte{0xff, 0xff, 0xff}, uint8(3))
	f.Add([]byte{}, uint8(0))
	f.Fuzz(func(t *testing.T, payload []byte, n8 uint8) {
		n := int(n8 % 20)
		for _, m := range ms {
			im, _ := IntegerOf(m)
			sum, err := m.NewSum(n, rg)
			if err != nil {
				t.Fatal(err)
			}
			addErr := sum.Add(payload, Slot{Shared: stream("fuzz-d")})
			fields := make([]uint64, im.Fields(n))
			unpackErr := im.Unpack(fields, payload, n)
			if (addErr == nil) != (unpackErr == nil) {
				t.Fatalf("%s n=%d payload %x: Add: %v, Unpack: %v", m.Name(), n, payload, addErr, unpackErr)
			}
			if addErr != nil {
				continue
			}
			for i, v := range fields {
				if v >= im.Levels() {
					t.Fatalf("%s: field %d is %d, Levels %d", m.Name(), i, v, im.Levels())
				}
			}
			if n == 0 {
				continue
			}
			want, got := make([]float64, n), make([]float64, n)
			if err := sum.Mean(want); err != nil {
				t.Fatal(err)
			}
			if err := im.DecodeSum(got, fields, 1, rg, []Slot{{Shared: stream("fuzz-d")}}); err != nil {
				t.Fatal(err)
			}
			for i := range want {
				if math.Float64bits(want[i]) != math.Float64bits(got[i]) {
					t.Fatalf("%s: parameter %d: Mean %v, DecodeSum %v", m.Name(), i, want[i], got[i])
				}
			}
		}
	})
}

// BenchmarkDecodeSum measures DecodeSum of 10 clients' summed fields for
// 2^16 parameters (range 0±1), per parameter: for Dithered mechanisms it
// draws and adds every client's dithers, so it grows with the clients.
func BenchmarkDecodeSum(b *testing.B) {
	const clients = 10
	rg := Range{Center: 0, Radius: 1}
	w := benchInput()
	for _, bc := range benchCases() {
		m, err := New(bc.name, bc.c)
		if err != nil {
			b.Fatal(err)
		}
		im, err := IntegerOf(m)
		if err != nil {
			continue
		}
		b.Run(bc.String(), func(b *testing.B) {
			total := make([]uint64, im.Fields(benchDim))
			fields := make([]uint64, len(total))
			for range clients {
				p, err := m.Encode(nil, w, rg, bc.slot(m))
				if err != nil {
					b.Fatal(err)
				}
				if err := im.Unpack(fields, p, benchDim); err != nil {
					b.Fatal(err)
				}
				for i, f := range fields {
					total[i] += f
				}
			}
			dst := make([]float64, benchDim)
			slots := make([]Slot, clients)
			for b.Loop() {
				for c := range slots {
					slots[c].Shared = stream("bench-dither", uint64(c))
				}
				if err := im.DecodeSum(dst, total, clients, rg, slots); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/benchDim, "ns/param")
		})
	}
}
