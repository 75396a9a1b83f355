package mech

import (
	"fmt"
	"math"
	"math/big"
	"reflect"
	"strings"
	"testing"

	"github.com/fedpq/fedpq/privacy"
)

// sweepVariant is one setting of a mechanism's parameters in the sweep.
// bad marks a setting outside the domain, which New must refuse.
type sweepVariant struct {
	name string
	set  func(*Config)
	bad  bool
}

// sweepVariants lists, per mechanism, its parameters inside their domain
// and at its edges, and a few just outside. Left out by design, for time:
// jopeq's hexagonal rates above 4 (its design search costs about 1 s at
// rate 8), sdq's and laplace+sdq's above 8 (codebooks of 4^Rate points),
// and mvu's matrices beyond 3 input bits and 2 budget bits (LP solves;
// mvu_test covers them), all of which TestJoPEQ*, TestSDQ* and TestMVU*
// exercise at their own settings.
func sweepVariants(name string) []sweepVariant {
	v := func(label string, bad bool, set func(*Config)) sweepVariant {
		return sweepVariant{name: label, set: set, bad: bad}
	}
	lat := func(rate, dim int, bad bool) sweepVariant {
		return v(fmt.Sprintf("R=%d L=%d", rate, dim), bad, func(c *Config) { c.Rate, c.Lattice = rate, dim })
	}
	switch name {
	case "gaussian":
		return []sweepVariant{
			v("delta default", false, func(c *Config) { c.Delta = 0 }),
			v("delta 1e-12", false, func(c *Config) { c.Delta = 1e-12 }),
			v("delta 0.5", false, func(c *Config) { c.Delta = 0.5 }),
			v("delta 1", true, func(c *Config) { c.Delta = 1 }),
			v("delta NaN", true, func(c *Config) { c.Delta = math.NaN() }),
		}
	case "corbin", "augcorbin":
		out := []sweepVariant{
			v("d=1", false, func(c *Config) { c.SharedBits = 1 }),
			v("d=32", false, func(c *Config) { c.SharedBits = 32 }),
			v("d=0", true, func(c *Config) { c.SharedBits = 0 }),
			v("d=33", true, func(c *Config) { c.SharedBits = 33 }),
		}
		if name == "augcorbin" {
			out = append(out,
				v("gamma 0", false, func(c *Config) { c.Gamma = 0 }),
				v("gamma 1", false, func(c *Config) { c.Gamma = 1 }),
				v("gamma 1.1", true, func(c *Config) { c.Gamma = 1.1 }),
				v("gamma NaN", true, func(c *Config) { c.Gamma = math.NaN() }))
		}
		return out
	case "coq":
		return []sweepVariant{
			v("d=1", false, func(c *Config) { c.SharedBits = 1 }),
			v("d=16 px=0.3", false, func(c *Config) { c.SharedBits, c.Px = 16, 0.3 }),
			v("px=1e-6", false, func(c *Config) { c.Px = 1e-6 }),
			v("px=0.999999", false, func(c *Config) { c.Px = 0.999999 }),
			v("d=17", true, func(c *Config) { c.SharedBits = 17 }),
			v("px=0", true, func(c *Config) { c.Px = 0 }),
			v("px=1", true, func(c *Config) { c.Px = 1 }),
		}
	case "mvu":
		return []sweepVariant{
			v("in=1 budget=1", false, func(c *Config) { c.InputBits, c.BudgetBits = 1, 1 }),
			v("in=3 budget=2", false, func(c *Config) { c.InputBits, c.BudgetBits = 3, 2 }),
			v("in=0", true, func(c *Config) { c.InputBits = 0 }),
			v("budget=9", true, func(c *Config) { c.BudgetBits = 9 }),
		}
	case "sdq", "laplace+sdq":
		return []sweepVariant{lat(1, 1, false), lat(4, 1, false), lat(32, 1, false), lat(2, 2, false), lat(8, 2, false),
			lat(0, 1, true), lat(33, 1, true), lat(1, 2, true), lat(17, 2, true), lat(4, 3, true)}
	case "jopeq":
		return []sweepVariant{lat(1, 1, false), lat(2, 1, false), lat(4, 1, false), lat(32, 1, false), lat(2, 2, false), lat(4, 2, false),
			lat(0, 1, true), lat(33, 1, true), lat(1, 2, true), lat(17, 2, true), lat(4, 3, true)}
	case "ddgauss", "skellam":
		return []sweepVariant{
			v("defaults", false, func(*Config) {}),
			v("b=8 n=100", false, func(c *Config) { c.ModBits, c.Clients = 8, 100 }),
			v("b=18 n=1000", false, func(c *Config) { c.ModBits, c.Clients = 18, 1000 }),
			v("delta 1e-12", false, func(c *Config) { c.Delta = 1e-12 }),
			v("b=19", true, func(c *Config) { c.ModBits = 19 }),
			v("b=1", true, func(c *Config) { c.ModBits = 1 }),
			v("b=4 n=1000", true, func(c *Config) { c.ModBits, c.Clients = 4, 1000 }),
			v("n=-1", true, func(c *Config) { c.Clients = -1 }),
			v("delta 1", true, func(c *Config) { c.Delta = 1 }),
		}
	case "jopeq-compat":
		return []sweepVariant{lat(1, 1, false), lat(4, 1, false), lat(31, 1, false), lat(1, 2, false), lat(4, 2, false),
			lat(0, 1, true), lat(32, 1, true), lat(4, 0, true)}
	}
	return []sweepVariant{v("defaults", false, func(*Config) {})}
}

// TestParameterSweep runs every registered mechanism over its parameters
// (sweepVariants), eps from 1e-6 to 1e9, and ranges with radii from 1e-30
// to 1e30 and centers 0, 1e6 and -1e20. New must give a clear error
// ("mech: ...") or a usable mechanism (never a nil one), and refuse the
// settings outside the domain; Encode, NewSum, Add and Mean must not panic;
// an Encode that succeeds must give Bits(n) bits that the server accepts
// (or the server must refuse the range too); the mean must be finite and
// within Support (plus two float32 ulps of |c| + h, the rounding of what
// is sent). Where a mechanism states its eps it must hold: the one-bit
// thresholds exactly (ratioAtMost, for eps <= 10), jopeq's Epsilon() <= eps
// and, for the scalar lattice, the exact law's largest log-ratio (eps <=
// 10), laplace's IsPrivate and gaussian's rigorous delta bound at the
// scales used.
func TestParameterSweep(t *testing.T) {
	epsilons := []float64{1e-6, 1e-3, 0.5, 1, 4, 10, 1e4, 1e6, 1e9}
	var ranges []Range
	for _, c := range []float64{0, 1e6, -1e20} {
		for _, r := range []float64{1e-30, 1e-10, 1, 1e10, 1e30} {
			ranges = append(ranges, Range{Center: c, Radius: r})
		}
	}
	cacheDir := t.TempDir()
	accepted := 0
	for _, name := range Names() {
		info, _ := Lookup(name)
		for _, vr := range sweepVariants(name) {
			for _, eps := range epsilons {
				cfg := DefaultConfig()
				cfg.Epsilon, cfg.CacheDir = eps, cacheDir
				vr.set(&cfg)
				what := fmt.Sprintf("%s %s eps=%g", name, vr.name, eps)
				var m Mechanism
				err := noPanic(t, what+" New", func() error {
					var err error
					m, err = New(name, cfg)
					return err
				})
				if err != nil {
					if !strings.HasPrefix(err.Error(), "mech: ") {
						t.Errorf("%s: unclear error %q", what, err)
					}
					continue
				}
				if m == nil || reflect.ValueOf(m).Kind() == reflect.Pointer && reflect.ValueOf(m).IsNil() {
					t.Errorf("%s: New returned a nil mechanism and no error", what)
					continue
				}
				if vr.bad {
					t.Errorf("%s: accepted", what)
				}
				checkStatedEpsilon(t, what, m, eps, ranges)
				for _, rg := range ranges {
					if sweepRange(t, fmt.Sprintf("%s %v±%v", what, rg.Center, rg.Radius), m, info, rg) {
						accepted++
					}
				}
			}
		}
	}
	t.Logf("%d (mechanism, setting, range) cases encoded and decoded", accepted)
}

// noPanic runs f and turns a panic into a test error.
func noPanic(t *testing.T, what string, f func() error) (err error) {
	t.Helper()
	defer func() {
		if p := recover(); p != nil {
			t.Errorf("%s: panic: %v", what, p)
			err = fmt.Errorf("mech: panicked")
		}
	}()
	return f()
}

// sweepRange encodes inputs at and beyond the range with m, decodes them
// and checks the contract; it reports whether the range was usable.
func sweepRange(t *testing.T, what string, m Mechanism, info Info, rg Range) bool {
	t.Helper()
	c, r := rg.Center, rg.Radius
	w := []float32{float32(c), float32(c + r), float32(c - r), float32(c + 0.3*r), float32(c - 2*r)}
	if !info.Unclipped {
		w = append(w, math.MaxFloat32, -math.MaxFloat32)
	}
	slot := func() Slot {
		s := Slot{Private: stream("sweep-private"), Shared: stream("sweep-shared")}
		switch m.Coupling() {
		case Paired:
			s.Role = Leader
		case Grouped:
			s.Index, s.Size = 1, 3
		}
		return s
	}
	var payload []byte
	encErr := noPanic(t, what+" Encode", func() error {
		var err error
		payload, err = m.Encode(nil, w, rg, slot())
		return err
	})
	var sum Sum
	sumErr := noPanic(t, what+" NewSum", func() error {
		var err error
		sum, err = m.NewSum(len(w), rg)
		return err
	})
	for _, err := range []error{encErr, sumErr} {
		if err != nil && !strings.HasPrefix(err.Error(), "mech: ") {
			t.Errorf("%s: unclear error %q", what, err)
		}
	}
	if encErr != nil {
		return false
	}
	if sumErr != nil {
		t.Errorf("%s: Encode accepts the range, NewSum refuses it: %v", what, sumErr)
		return false
	}
	if want := (m.Bits(len(w)) + 7) / 8; len(payload) != want {
		t.Errorf("%s: payload of %d bytes, want %d", what, len(payload), want)
	}
	var h float64
	if err := noPanic(t, what+" Support", func() error {
		var err error
		h, err = m.(Supporter).Support(rg)
		return err
	}); err != nil {
		t.Errorf("%s: Support: %v", what, err)
		return false
	}
	if err := noPanic(t, what+" Add", func() error { return sum.Add(payload, slot()) }); err != nil {
		t.Errorf("%s: honest payload refused: %v", what, err)
		return false
	}
	out := make([]float64, len(w))
	if err := noPanic(t, what+" Mean", func() error { return sum.Mean(out) }); err != nil {
		t.Errorf("%s: Mean: %v", what, err)
		return false
	}
	tol := h + (math.Abs(c)+h)*0x1p-22
	for i, v := range out {
		if math.IsNaN(v) || math.IsInf(v, 0) || math.Abs(v-c) > tol {
			t.Errorf("%s: input %v decodes to %v, outside %v±%v", what, w[i], v, c, h)
		}
	}
	return true
}

// checkStatedEpsilon checks the eps a mechanism states, where that is
// feasible (see TestParameterSweep).
func checkStatedEpsilon(t *testing.T, what string, m Mechanism, eps float64, ranges []Range) {
	t.Helper()
	switch q := m.(type) {
	case *jopeqScalar:
		if e := q.Epsilon(); !(e > 0 && e <= eps) {
			t.Errorf("%s: Epsilon() = %v", what, e)
		}
		if eps <= 10 {
			worst := 0.0
			// The indices near SDQ's and the two ends; elsewhere both
			// laws are geometric in k with the same ratio.
			ks := []int64{0, q.levels - 1}
			for k := max(q.low-64, 0); k <= min(q.low+q.span+64, q.levels-1); k++ {
				ks = append(ks, k)
			}
			for _, k := range ks {
				for _, pair := range [][2]int64{{q.low, q.low + q.span}, {q.low + q.span, q.low}} {
					if a, b := q.prob(k, pair[0]), q.prob(k, pair[1]); a > 0 {
						worst = max(worst, math.Log(a/b))
					}
				}
			}
			if !(worst <= eps*(1+1e-9)+1e-12) {
				t.Errorf("%s: largest log-ratio %v", what, worst)
			}
		}
	case *jopeqHex:
		if e := q.Epsilon(); !(e > 0 && e <= eps) {
			t.Errorf("%s: Epsilon() = %v", what, e)
		}
	case ldpq, corbin, *coq:
		if eps > 10 {
			return
		}
		for _, rg := range ranges {
			b, err := newBinq(eps, rg)
			if err != nil {
				continue
			}
			if !ratioAtMost(u64(b.hi), u64(b.lo), eps) || !ratioAtMost(new(big.Int).Sub(two64, u64(b.lo)), new(big.Int).Sub(two64, u64(b.hi)), eps) {
				t.Errorf("%s %v: thresholds %d, %d exceed e^eps", what, rg, b.lo, b.hi)
			}
			return // the thresholds do not depend on the range
		}
	case laplace:
		for _, rg := range ranges {
			if l, err := q.noise(rg); err == nil && !l.IsPrivate(eps, 2*rg.Radius) {
				t.Errorf("%s %v: scale %v is not eps-private", what, rg, l.Scale())
			}
		}
	case *distDP:
		for _, n := range []int{1, 5, 1000} {
			if p, err := q.params(n); err == nil && !(p.eps <= eps) {
				t.Errorf("%s n=%d: calibrated eps %v", what, n, p.eps)
			}
		}
	case gaussian:
		for _, rg := range ranges {
			d, err := q.noise(rg)
			if err != nil {
				continue
			}
			bound, err := privacy.DiscreteGaussianDelta(eps, d.Sigma(), d.Sensitivity(2*rg.Radius), d.Granularity())
			if err != nil || bound > q.delta {
				t.Errorf("%s %v: delta bound %v (%v) above %v", what, rg, bound, err, q.delta)
			}
		}
	}
}
