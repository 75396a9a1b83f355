package mech

import (
	"math"
	"strings"
	"testing"

	"github.com/fedpq/fedpq/corr"
)

// latStream is a fixed-seed stream for the sdq family's tests.
func latStream(purpose byte, id uint64) *corr.Stream {
	var k [32]byte
	k[0] = purpose
	for i := range 8 {
		k[1+i] = byte(id >> (8 * i))
	}
	return corr.NewStream(k)
}

// latRun encodes w for clients 0..clients-1 (each with its own private and
// shared streams), adds every payload to a sum and returns, per parameter,
// the mean of the outputs and their sample variance (from single-client
// sums).
func latRun(t testing.TB, m Mechanism, w []float32, rg Range, clients int) (mean, variance []float64) {
	t.Helper()
	n := len(w)
	mean, variance = make([]float64, n), make([]float64, n)
	one := make([]float64, n)
	for c := range clients {
		s := Slot{Private: latStream(1, uint64(c)), Shared: latStream(2, uint64(c))}
		payload, err := m.Encode(nil, w, rg, s)
		if err != nil {
			t.Fatal(err)
		}
		if 8*len(payload) != m.Bits(n) {
			t.Fatalf("payload of %d bytes, Bits(%d) = %d", len(payload), n, m.Bits(n))
		}
		sum, err := m.NewSum(n, rg)
		if err != nil {
			t.Fatal(err)
		}
		if err := sum.Add(payload, Slot{Shared: latStream(2, uint64(c))}); err != nil {
			t.Fatal(err)
		}
		if err := sum.Mean(one); err != nil {
			t.Fatal(err)
		}
		for i, y := range one {
			mean[i] += y
			variance[i] += y * y
		}
	}
	k := float64(clients)
	for i := range mean {
		mean[i] /= k
		variance[i] = (variance[i] - k*mean[i]*mean[i]) / (k - 1)
	}
	return mean, variance
}

func latNew(t testing.TB, name string, eps float64, rate, dim int) Mechanism {
	t.Helper()
	c := DefaultConfig()
	c.Epsilon, c.Rate, c.Lattice = eps, rate, dim
	m, err := New(name, c)
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// latInputs spans the range, its ends, and two values outside it (which
// must be clipped).
var latInputs = []float32{-0.5, -0.5 + 0.37, 0, 1.21, 1.5, 1.5 - 1e-3, 0.9, -3, 7}

// TestSDQUnbiasedVariance checks, from 4000 clients with fixed seeds, that
// every output's mean is the clipped input within 5 standard errors and its
// variance is the closed form (the cell's second moment, whatever the
// input) within 15% (the standard error of a sample variance of 4000
// near-uniform errors is about 2.5%).
func TestSDQUnbiasedVariance(t *testing.T) {
	rg := Range{Center: 0.5, Radius: 1}
	const clients = 4000
	for _, dim := range []int{1, 2} {
		for _, rate := range []int{2, 4} {
			m := latNew(t, "sdq", 1, rate, dim)
			v := m.(Variancer).Variance(0, rg)
			mean, variance := latRun(t, m, latInputs, rg, clients)
			for i, w := range latInputs {
				want := rg.Clip(float64(w))
				if se := math.Sqrt(v / clients); math.Abs(mean[i]-want) > 5*se {
					t.Errorf("L=%d R=%d: mean output for %v is %v, want %v within %v", dim, rate, w, mean[i], want, 5*se)
				}
				if math.Abs(variance[i]/v-1) > 0.15 {
					t.Errorf("L=%d R=%d: variance for %v is %v, want %v", dim, rate, w, variance[i], v)
				}
			}
			t.Logf("sdq L=%d R=%d: per-parameter variance %.5g r^2 (closed form), bits/param %.2f", dim, rate, v, float64(m.Bits(1000))/1000)
		}
	}
}

// TestSDQErrorUniformOnCell checks Zamir and Feder's theorem on the scalar
// quantizer: the error of a fixed input is uniform on [-Delta/2, Delta/2)
// (10 bins, chi-square with 9 degrees of freedom below 27.9, p = 0.001).
func TestSDQErrorUniformOnCell(t *testing.T) {
	rg := Range{Center: 0, Radius: 1}
	m := latNew(t, "sdq", 1, 3, 1).(*sdq)
	const n, bins = 50000, 10
	w := make([]float32, n)
	for i := range w {
		w[i] = 0.123
	}
	payload, err := m.Encode(nil, w, rg, Slot{Shared: latStream(3, 0)})
	if err != nil {
		t.Fatal(err)
	}
	sum, _ := m.NewSum(n, rg)
	if err := sum.Add(payload, Slot{Shared: latStream(3, 0)}); err != nil {
		t.Fatal(err)
	}
	out := make([]float64, n)
	if err := sum.Mean(out); err != nil {
		t.Fatal(err)
	}
	var count [bins]float64
	step := m.scalar.Step
	for _, y := range out {
		e := (y - float64(float32(0.123))) / step
		count[min(max(int((e+0.5)*bins), 0), bins-1)]++
	}
	chi := 0.0
	for _, c := range count {
		chi += (c - n/bins) * (c - n/bins) / (n / bins)
	}
	if chi > 27.9 {
		t.Errorf("error histogram %v: chi-square %v > 27.9", count, chi)
	}
}

func TestSDQBitsAndRoundTrip(t *testing.T) {
	rg := Range{Center: 0, Radius: 2}
	for _, dim := range []int{1, 2} {
		m := latNew(t, "sdq", 1, 3, dim)
		for _, n := range []int{0, 1, 2, 3, 7, 64} {
			want := 8 * ((3*dim*((n+dim-1)/dim) + 7) / 8)
			if got := m.Bits(n); got != want {
				t.Errorf("L=%d: Bits(%d) = %d, want %d", dim, n, got, want)
			}
			w := make([]float32, n)
			for i := range w {
				w[i] = float32(i%5) - 2
			}
			mean, _ := latRun(t, m, w, rg, 2)
			for i := range w {
				if math.Abs(mean[i]-float64(w[i])) > 2 {
					t.Errorf("L=%d n=%d: output %v for %v is off by more than the range", dim, n, mean[i], w[i])
				}
			}
		}
	}
}

func TestSDQRejectsBadInput(t *testing.T) {
	rg := Range{Center: 0, Radius: 1}
	for _, c := range []struct {
		rate, dim int
		msg       string
	}{{0, 1, "rate"}, {33, 1, "rate"}, {1, 2, "rate"}, {17, 2, "rate"}, {4, 0, "lattice"}, {4, 3, "lattice"}} {
		cfg := DefaultConfig()
		cfg.Rate, cfg.Lattice = c.rate, c.dim
		for _, name := range []string{"sdq", "jopeq", "laplace+sdq"} {
			if _, err := New(name, cfg); err == nil || !strings.Contains(err.Error(), c.msg) {
				t.Errorf("%s rate %d lattice %d: err %v, want one about %s", name, c.rate, c.dim, err, c.msg)
			}
		}
	}
	for _, dim := range []int{1, 2} {
		m := latNew(t, "sdq", 1, 4, dim)
		ok := Slot{Private: latStream(4, 0), Shared: latStream(4, 1)}
		if _, err := m.Encode(nil, []float32{0, float32(math.NaN())}, rg, ok); err == nil {
			t.Error("NaN accepted")
		}
		if _, err := m.Encode(nil, []float32{float32(math.Inf(1))}, rg, ok); err == nil {
			t.Error("Inf accepted")
		}
		if _, err := m.Encode(nil, []float32{0}, Range{Radius: 0}, ok); err == nil {
			t.Error("zero radius accepted")
		}
		if _, err := m.Encode(nil, []float32{0}, rg, Slot{}); err == nil {
			t.Error("missing dither stream accepted")
		}
		if _, err := m.NewSum(-1, rg); err == nil {
			t.Error("negative size accepted")
		}
		sum, err := m.NewSum(3, rg)
		if err != nil {
			t.Fatal(err)
		}
		good, err := m.Encode(nil, []float32{0.1, 0.2, 0.3}, rg, ok)
		if err != nil {
			t.Fatal(err)
		}
		bad := [][]byte{nil, good[:len(good)-1], append(append([]byte{}, good...), 0)}
		if dim == 1 { // 12 bits in 2 bytes: the top 4 are padding
			bad = append(bad, []byte{good[0], good[1] | 0x80})
		} else { // 2 fields of 8 bits, 256 codes, but fewer codewords
			bad = append(bad, []byte{0xff, 0xff})
		}
		for _, p := range bad {
			if err := sum.Add(p, Slot{Shared: latStream(4, 1)}); err == nil {
				t.Errorf("L=%d: payload %x accepted", dim, p)
			}
		}
		if err := sum.Add(good, Slot{}); err == nil {
			t.Error("sum without dither stream accepted")
		}
		if sum.Count() != 0 {
			t.Errorf("rejected payloads counted: %d", sum.Count())
		}
		if err := sum.Mean(make([]float64, 3)); err == nil {
			t.Error("mean of no payloads accepted")
		}
	}
}

// FuzzSDQSumAdd feeds arbitrary bytes to both sdq sums: they must never
// panic, and a payload they accept must decode to finite values.
func FuzzSDQSumAdd(f *testing.F) {
	f.Add([]byte{0x12, 0x34, 0x05}, uint8(5))
	f.Add([]byte{0xff, 0xff, 0xff, 0xff}, uint8(3))
	rg := Range{Center: 0, Radius: 1}
	ms := []Mechanism{latNew(f, "sdq", 1, 4, 1), latNew(f, "sdq", 1, 4, 2), latNew(f, "sdq", 1, 3, 2)}
	f.Fuzz(func(t *testing.T, payload []byte, n uint8) {
		for _, m := range ms {
			sum, err := m.NewSum(int(n), rg)
			if err != nil {
				t.Fatal(err)
			}
			if sum.Add(payload, Slot{Shared: latStream(5, 0)}) != nil {
				continue
			}
			out := make([]float64, n)
			if err := sum.Mean(out); err != nil {
				t.Fatal(err)
			}
			for _, v := range out {
				if math.IsNaN(v) || math.IsInf(v, 0) || math.Abs(v) > 3 {
					t.Fatalf("accepted payload decodes to %v", v)
				}
			}
		}
	})
}
