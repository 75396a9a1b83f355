package mech

import (
	"fmt"
	"math"
	"strings"
	"testing"
)

// l2Mechanisms are the L2 mechanisms at settings the tests sweep.
func l2Mechanisms(t *testing.T) []Mechanism {
	var out []Mechanism
	for _, c := range []struct {
		name          string
		clients, bits int
		z             float64
		trials        int
	}{{"ddgauss", 100, 16, 1, 0}, {"skellam", 10, 12, 0.5, 0}, {"pbm", 4, 0, 1.5, 16}, {"pbm", 100, 0, 1, 1}} {
		cfg := DefaultConfig()
		cfg.Clients, cfg.Noise, cfg.Trials = c.clients, c.z, c.trials
		if c.bits > 0 {
			cfg.ModBits = c.bits
		}
		out = append(out, mustNew(t, c.name, cfg))
	}
	return out
}

// TestL2Sweep runs the L2 mechanisms over vector lengths that do and do not
// fill a byte, a word or a power of two, and ranges with radii from 1e-30
// to 1e30 and centers 0, 1e6 and -1e20, the input of norm 0.9 times the
// radius (as float32 makes it: far from the center the float32 input is
// off by more than the bound and must be refused). Encode, NewSum, Add and
// Mean never panic; an error is a clear one ("mech: "); an accepted
// payload is exactly Bits(n) bits, one a byte short or long is refused and
// leaves the sum as it was, and the mean is finite and within Support
// (plus two float32 ulps of |c| + h).
func TestL2Sweep(t *testing.T) {
	accepted := 0
	for _, m := range l2Mechanisms(t) {
		for _, c := range []float64{0, 1e6, -1e20} {
			for _, r := range []float64{1e-30, 1e-10, 1, 1e10, 1e30} {
				rg := Range{Center: c, Radius: r}
				for _, n := range []int{1, 2, 7, 63, 64, 65, 1000, 1025} {
					what := fmt.Sprintf("%s %T n=%d %v±%v", m.Name(), m, n, c, r)
					w := make([]float32, n)
					for i := range w {
						w[i] = float32(c + r*float64(i%5-2))
					}
					l2Fit(m, w, rg, 0.9)
					var payload []byte
					encErr := noPanic(t, what+" Encode", func() (err error) {
						payload, err = m.Encode(nil, w, rg, Slot{Private: stream("l2-sweep")})
						return err
					})
					var sum Sum
					sumErr := noPanic(t, what+" NewSum", func() (err error) {
						sum, err = m.NewSum(n, rg)
						return err
					})
					for _, err := range []error{encErr, sumErr} {
						if err != nil && !strings.HasPrefix(err.Error(), "mech: ") {
							t.Errorf("%s: unclear error %q", what, err)
						}
					}
					if encErr != nil || sumErr != nil {
						continue
					}
					if want := (m.Bits(n) + 7) / 8; len(payload) != want {
						t.Errorf("%s: payload of %d bytes, want %d", what, len(payload), want)
					}
					for _, bad := range [][]byte{payload[:len(payload)-1], append(append([]byte(nil), payload...), 0)} {
						if err := sum.Add(bad, Slot{}); err == nil || sum.Count() != 0 {
							t.Errorf("%s: a payload of %d bytes accepted", what, len(bad))
						}
					}
					if err := noPanic(t, what+" Add", func() error { return sum.Add(payload, Slot{}) }); err != nil {
						t.Errorf("%s: honest payload refused: %v", what, err)
						continue
					}
					h, _ := m.(Supporter).Support(rg)
					out := make([]float64, n)
					if err := noPanic(t, what+" Mean", func() error { return sum.Mean(out) }); err != nil {
						t.Errorf("%s: Mean: %v", what, err)
						continue
					}
					tol := h + (math.Abs(c)+h)*0x1p-22
					for i, v := range out {
						if math.IsNaN(v) || math.IsInf(v, 0) || math.Abs(v-c) > tol {
							t.Errorf("%s: parameter %d decodes to %v, outside %v±%v", what, i, v, c, h)
						}
					}
					accepted++
				}
			}
		}
	}
	t.Logf("%d (mechanism, range, length) cases encoded and decoded", accepted)
	if accepted < 100 {
		t.Errorf("only %d cases accepted: the sweep does not exercise the mechanisms", accepted)
	}
}

// TestDistL2Wraps: the L2 mode sums modulo 2^b like the per-round mode
// (TestDistDPWraps): at 12 bits and 1000 clients of 30 parameters the
// exact sums wrap many times, and the sums reduced modulo 2^12, modulo
// 2^15 and exact decode, bit for bit, to the streaming Mean.
func TestDistL2Wraps(t *testing.T) {
	const n, d = 1000, 30
	rg := Range{Center: -0.2, Radius: 0.3}
	for _, name := range []string{"ddgauss", "skellam"} {
		c := DefaultConfig()
		c.Clients, c.ModBits, c.Noise = n, 12, 1
		m := mustNew(t, name, c)
		im, _ := IntegerOf(m)
		mod := m.(Modular).Modulus()
		w := l2Inputs(n, d, rg, 3)
		exact := make([]uint64, im.Fields(d))
		fields := make([]uint64, im.Fields(d))
		sum, _ := m.NewSum(d, rg)
		for _, pl := range distRound(t, m, w, rg, 3, 0) {
			if err := im.Unpack(fields, pl, d); err != nil {
				t.Fatal(err)
			}
			for i, f := range fields {
				exact[i] += f
			}
			if err := sum.Add(pl, Slot{}); err != nil {
				t.Fatal(err)
			}
		}
		wraps := 0
		for _, v := range exact {
			wraps = max(wraps, int(v/mod))
		}
		if wraps < 100 {
			t.Errorf("%s: the exact sums wrap at most %d times", name, wraps)
		}
		streamed := make([]float64, d)
		if err := sum.Mean(streamed); err != nil {
			t.Fatal(err)
		}
		for _, k := range []uint64{mod, 8 * mod, 0} {
			red := make([]uint64, len(exact))
			for i, v := range exact {
				red[i] = v
				if k != 0 {
					red[i] = v % k
				}
			}
			got := make([]float64, d)
			if err := im.DecodeSum(got, red, n, rg, nil); err != nil {
				t.Fatal(err)
			}
			for i := range got {
				if math.Float64bits(got[i]) != math.Float64bits(streamed[i]) {
					t.Fatalf("%s: sum mod %d: parameter %d decodes to %v, the streaming Mean %v", name, k, i, got[i], streamed[i])
				}
			}
		}
	}
}

// TestSumRDP: the bound for a sum with fewer honest shares than the noise
// is sized for. At the sized count it is RDP; with fewer it grows, and for
// skellam and ddgauss at half the count it is at least what the Gaussian's
// alpha/(2 z^2) becomes with half the variance (alpha/z^2), within the
// mechanisms' own slack over the Gaussian.
func TestSumRDP(t *testing.T) {
	const n = 1000
	for _, name := range []string{"skellam", "ddgauss", "pbm"} {
		l2 := sizedFor40(t, name).(L2)
		for _, a := range []float64{2, 8} {
			full, err := l2.RDP(a, n)
			if err != nil {
				t.Fatal(err)
			}
			same, err := l2.SumRDP(a, n, 40)
			if err != nil || same != full {
				t.Errorf("%s order %v: SumRDP at the sized count %v (%v), RDP %v", name, a, same, err, full)
			}
			prev := full
			for _, k := range []int{30, 20, 10} {
				r, err := l2.SumRDP(a, n, k)
				if err != nil {
					t.Fatal(err)
				}
				if !(r > prev) {
					t.Errorf("%s order %v: %d honest shares give %v, not above %v with more", name, a, k, r, prev)
				}
				prev = r
			}
			half, _ := l2.SumRDP(a, n, 20)
			if name != "pbm" && half < 0.99*a {
				t.Errorf("%s order %v: half the shares give %v, below the Gaussian's %v", name, a, half, a)
			}
		}
		if _, err := l2.SumRDP(2, n, 0); err == nil {
			t.Errorf("%s: a sum of no shares accepted", name)
		}
	}
}

// TestSumReplaceRDP: ddgauss's and skellam's curves for replacing one
// client's vector are their bounds at twice the zero-out's sensitivities,
// about 4 times the zero-out's curve, as a Gaussian's is exactly (their
// L1 terms scale by 2 to 4: from 3.9 to 4.4 times at a noise multiplier
// of 1); pbm states none.
func TestSumReplaceRDP(t *testing.T) {
	const n = 1000
	for _, name := range []string{"skellam", "ddgauss", "pbm"} {
		r, ok := sizedFor40(t, name).(Replacer)
		if name == "pbm" {
			if ok {
				t.Error("pbm states a replace-one curve: its accounting covers zero-out only")
			}
			continue
		}
		if !ok {
			t.Fatalf("%s states no replace-one curve", name)
		}
		for _, a := range []float64{2, 4, 8, 16} {
			zero, err := r.SumRDP(a, n, 30)
			if err != nil {
				t.Fatal(err)
			}
			repl, err := r.SumReplaceRDP(a, n, 30)
			if err != nil {
				t.Fatal(err)
			}
			if ratio := repl / zero; !(ratio >= 3.9 && ratio <= 4.4) {
				t.Errorf("%s order %v: replace-one %v, zero-out %v: ratio %v, want 3.9 to 4.4", name, a, repl, zero, ratio)
			}
		}
		if _, err := r.SumReplaceRDP(1, n, 30); err == nil {
			t.Errorf("%s: order 1 accepted", name)
		}
	}
}

// sizedFor40 is the L2 mechanism name at noise multiplier 1, its noise
// sized for 40 clients.
func sizedFor40(t *testing.T, name string) Mechanism {
	t.Helper()
	c := DefaultConfig()
	c.Noise, c.Clients = 1, 40
	m, err := New(name, c)
	if err != nil {
		t.Fatal(err)
	}
	return m
}
