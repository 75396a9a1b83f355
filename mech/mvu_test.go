package mech

import (
	"math"
	"testing"

	"github.com/fedpq/fedpq/corr"
	"github.com/fedpq/fedpq/mech/mvu"
	"github.com/fedpq/fedpq/wire"
)

func mvuTestMech(t testing.TB, eps float64, in, budget int) *mvuMech {
	t.Helper()
	c := DefaultConfig()
	c.Epsilon, c.InputBits, c.BudgetBits, c.CacheDir = eps, in, budget, t.TempDir()
	m, err := New("mvu", c)
	if err != nil {
		t.Fatal(err)
	}
	return m.(*mvuMech)
}

func mvuStream(seed byte) *corr.Stream {
	var key [32]byte
	key[0], key[1] = 'm', seed
	return corr.NewStream(key)
}

func TestMVUContract(t *testing.T) {
	info, ok := Lookup("mvu")
	if !ok || !info.LDP {
		t.Fatalf("mvu not registered as LDP: %+v", info)
	}
	q := mvuTestMech(t, 1, 3, 2)
	if q.Name() != "mvu" || q.Coupling() != Independent || q.Alone() != 0 {
		t.Errorf("contract: %s %v %v", q.Name(), q.Coupling(), q.Alone())
	}
	for _, n := range []int{0, 1, 3, 1000} {
		if q.Bits(n) != 2*n {
			t.Errorf("Bits(%d) = %d", n, q.Bits(n))
		}
		out, err := q.Encode(nil, make([]float32, n), Range{0, 1}, Slot{Private: mvuStream(1)})
		if err != nil || len(out) != wire.PackedLen(n, 2) {
			t.Errorf("n=%d: %d bytes, %v", n, len(out), err)
		}
	}
	// Same coins, same message.
	w := []float32{-2, -0.3, 0, 0.25, 0.9, 7}
	a, _ := q.Encode(nil, w, Range{0, 1}, Slot{Private: mvuStream(2)})
	b, _ := q.Encode(nil, w, Range{0, 1}, Slot{Private: mvuStream(2)})
	if string(a) != string(b) {
		t.Error("Encode is not reproducible from its coins")
	}
}

func TestMVUErrors(t *testing.T) {
	c := DefaultConfig()
	c.CacheDir = t.TempDir()
	for _, bad := range []func(*Config){
		func(c *Config) { c.Epsilon = 0 },
		func(c *Config) { c.Epsilon = -1 },
		func(c *Config) { c.Epsilon = math.NaN() },
		func(c *Config) { c.Epsilon = math.Inf(1) },
		func(c *Config) { c.InputBits = 0 },
		func(c *Config) { c.BudgetBits = 9 },
	} {
		cc := c
		bad(&cc)
		if _, err := New("mvu", cc); err == nil {
			t.Errorf("New accepted %+v", cc)
		}
	}
	q := mvuTestMech(t, 1, 3, 2)
	s := Slot{Private: mvuStream(3)}
	for name, f := range map[string]func() error{
		"nan":        func() error { _, err := q.Encode(nil, []float32{0, float32(math.NaN())}, Range{0, 1}, s); return err },
		"inf":        func() error { _, err := q.Encode(nil, []float32{float32(math.Inf(-1))}, Range{0, 1}, s); return err },
		"radius":     func() error { _, err := q.Encode(nil, []float32{0}, Range{0, 0}, s); return err },
		"center":     func() error { _, err := q.Encode(nil, []float32{0}, Range{math.NaN(), 1}, s); return err },
		"no coins":   func() error { _, err := q.Encode(nil, []float32{0}, Range{0, 1}, Slot{}); return err },
		"sum radius": func() error { _, err := q.NewSum(3, Range{0, -1}); return err },
		"sum size":   func() error { _, err := q.NewSum(-1, Range{0, 1}); return err },
	} {
		if f() == nil {
			t.Errorf("%s: no error", name)
		}
	}
}

// The decoded mean and variance of one parameter match the closed form
// (mean = clipped w up to 2^-64 relative; Variance from the integer matrix),
// over N = 200000 draws with a fixed seed: the tolerance is 6 standard
// errors, the fourth central moment computed exactly from the matrix.
func TestMVUUnbiasedVariance(t *testing.T) {
	const N = 200000
	rg := Range{Center: 0.5, Radius: 2}
	for _, tc := range []struct {
		eps        float64
		in, budget int
	}{{1, 5, 2}, {4, 3, 3}, {0.5, 2, 1}} {
		q := mvuTestMech(t, tc.eps, tc.in, tc.budget)
		for k, w := range []float64{-1.5, -0.7, 0.5, 1.234567, 2.5, 9} {
			in := make([]float32, N)
			for i := range in {
				in[i] = float32(w)
			}
			msg, err := q.Encode(nil, in, rg, Slot{Private: mvuStream(byte(10 + k))})
			if err != nil {
				t.Fatal(err)
			}
			u, _ := wire.NewUnpacker(msg, N, tc.budget)
			var s, s2 float64
			want := rg.Clip(float64(float32(w)))
			for range N {
				v := rg.Center - rg.Radius + 2*rg.Radius*q.m.Values[u.Next()] - want
				s += v
				s2 += v * v
			}
			// Deviations are taken from the true mean, so s2/N estimates the
			// variance without bias, with standard error sqrt((m4-var^2)/N).
			mean, vr := s/N, s2/N
			wantVar := q.Variance(float64(float32(w)), rg)
			m4 := mvuFourth(q, float64(float32(w)), rg)
			if se := math.Sqrt(wantVar / N); math.Abs(mean) > 6*se {
				t.Errorf("%+v w=%v: bias %.4g, standard error %.4g", tc, w, mean, se)
			}
			if se := math.Sqrt((m4 - wantVar*wantVar) / N); math.Abs(vr-wantVar) > 6*se+1e-9*wantVar {
				t.Errorf("%+v w=%v: variance %.5g, closed form %.5g (se %.3g)", tc, w, vr, wantVar, se)
			}
		}
	}
}

// mvuFourth is E[(Q(w) - w)^4] from the exact output distribution.
func mvuFourth(q *mvuMech, w float64, rg Range) float64 {
	l, f, th := q.level(w, rg)
	pu := float64(th) * 0x1p-64
	x := rg.Clip(w)
	m4 := 0.0
	for _, lv := range []struct {
		i int
		p float64
	}{{l, 1 - pu}, {l + 1, pu}} {
		if lv.p == 0 || (f == 0 && lv.i != l) {
			continue
		}
		for j, n := range q.m.Counts[lv.i] {
			d := rg.Center - rg.Radius + 2*rg.Radius*q.m.Values[j] - x
			m4 += lv.p * float64(n) * 0x1p-64 * d * d * d * d
		}
	}
	return m4
}

// Many clients through the streaming sum: the mean estimate is within 6
// standard errors of the true mean of the clipped inputs.
func TestMVUSumMean(t *testing.T) {
	q := mvuTestMech(t, 1, 5, 2)
	rg := Range{Center: -1, Radius: 0.5}
	const n, clients = 8, 4000
	sum, err := q.NewSum(n, rg)
	if err != nil {
		t.Fatal(err)
	}
	truth := make([]float64, n)
	for c := range clients {
		w := make([]float32, n)
		for i := range w {
			w[i] = float32(-1.6 + 1.2*float64((i*7+c)%13)/12)
			truth[i] += rg.Clip(float64(w[i])) / clients
		}
		msg, err := q.Encode(nil, w, rg, Slot{Private: mvuStream(byte(c))})
		if err != nil {
			t.Fatal(err)
		}
		if err := sum.Add(msg, Slot{}); err != nil {
			t.Fatal(err)
		}
	}
	got := make([]float64, n)
	if err := sum.Mean(got); err != nil || sum.Count() != clients {
		t.Fatal(err, sum.Count())
	}
	// Var of one output is at most (2r)^2 max_i E[a^2 | i].
	worst := 0.0
	for i := range q.m.Levels() {
		_, s := q.m.Moments(i)
		worst = max(worst, s)
	}
	se := 2 * rg.Radius * math.Sqrt(worst/clients)
	for i := range got {
		if math.Abs(got[i]-truth[i]) > 6*se {
			t.Errorf("coordinate %d: mean %.5f, truth %.5f (se %.4f)", i, got[i], truth[i], se)
		}
	}
}

// Bad payloads are rejected and leave the sum unchanged.
func TestMVUSumRejects(t *testing.T) {
	q := mvuTestMech(t, 1, 3, 3)
	rg := Range{0, 1}
	sum, _ := q.NewSum(3, rg) // 9 bits: 2 bytes, 7 padding bits
	good, _ := q.Encode(nil, []float32{0.1, 0.2, 0.3}, rg, Slot{Private: mvuStream(4)})
	if err := sum.Add(good, Slot{}); err != nil {
		t.Fatal(err)
	}
	before := make([]float64, 3)
	sum.Mean(before)
	for name, p := range map[string][]byte{
		"short":   good[:1],
		"long":    append(append([]byte{}, good...), 0),
		"padding": {good[0], good[1] | 0x80},
		"empty":   nil,
	} {
		if err := sum.Add(p, Slot{}); err == nil {
			t.Errorf("%s payload accepted", name)
		}
	}
	// A symbol that has probability zero: a matrix with an unused column.
	z := &mvuMech{m: &mvu.Matrix{Params: mvu.Params{InputBits: 1, BudgetBits: 2, Epsilon: 1},
		Values: []float64{-1, 0, 1, 2}, Counts: [][]uint64{{1 << 63, 0, 1 << 62, 1 << 62}, {1 << 62, 0, 1 << 62, 1 << 63}}}, bits: 2}
	zs, _ := z.NewSum(1, rg)
	if err := zs.Add([]byte{1}, Slot{}); err == nil {
		t.Error("impossible symbol accepted")
	}
	if err := zs.Add([]byte{2}, Slot{}); err != nil {
		t.Errorf("possible symbol rejected: %v", err)
	}
	after := make([]float64, 3)
	sum.Mean(after)
	if sum.Count() != 1 || after[0] != before[0] || after[2] != before[2] {
		t.Errorf("rejected payloads changed the sum: %v -> %v", before, after)
	}
	if err := sum.Mean(make([]float64, 2)); err == nil {
		t.Error("Mean accepted a wrong-length buffer")
	}
	empty, _ := q.NewSum(3, rg)
	if err := empty.Mean(make([]float64, 3)); err == nil {
		t.Error("Mean of no payloads succeeded")
	}
}

func FuzzMVUSumAdd(f *testing.F) {
	q := mvuTestMech(f, 1, 3, 3)
	f.Add([]byte{0, 0}, uint8(3))
	f.Add([]byte{0xff, 0xff, 0xff}, uint8(8))
	f.Add([]byte{}, uint8(0))
	f.Fuzz(func(t *testing.T, payload []byte, n uint8) {
		sum, err := q.NewSum(int(n), Range{0, 1})
		if err != nil {
			t.Fatal(err)
		}
		err = sum.Add(payload, Slot{})
		if err == nil && len(payload) != wire.PackedLen(int(n), 3) {
			t.Fatalf("accepted %d bytes for %d parameters", len(payload), n)
		}
		if err != nil && sum.Count() != 0 {
			t.Fatal("failed Add counted")
		}
		if err == nil && n > 0 {
			dst := make([]float64, n)
			if err := sum.Mean(dst); err != nil {
				t.Fatal(err)
			}
		}
	})
}
