package mech

import (
	"math"
	"math/big"
	"testing"

	"github.com/fedpq/fedpq/corr"
)

// stream returns a deterministic test stream for a purpose and ids.
func stream(purpose string, ids ...uint64) *corr.Stream {
	return corr.Derive([]byte("mech tests"), purpose, ids...)
}

// expBig returns e^x to prec bits by its Taylor series (test use only: slow
// but exact to well beyond float64).
func expBig(x float64, prec uint) *big.Float {
	// e^x = (e^(x/2^k))^(2^k) with x/2^k < 1/2.
	k := 0
	for y := x; y > 0.5; y /= 2 {
		k++
	}
	y := new(big.Float).SetPrec(prec).SetFloat64(x)
	y.Quo(y, new(big.Float).SetPrec(prec).SetInt64(1<<k))
	sum := new(big.Float).SetPrec(prec).SetInt64(1)
	term := new(big.Float).SetPrec(prec).SetInt64(1)
	for i := 1; i < 200; i++ {
		term.Mul(term, y)
		term.Quo(term, new(big.Float).SetPrec(prec).SetInt64(int64(i)))
		sum.Add(sum, term)
	}
	for range k {
		sum.Mul(sum, sum)
	}
	return sum
}

// ratioAtMost reports whether num/den <= e^eps, exactly up to 2^-400.
func ratioAtMost(num, den *big.Int, eps float64) bool {
	const prec = 512
	r := new(big.Float).SetPrec(prec).SetInt(num)
	r.Quo(r, new(big.Float).SetPrec(prec).SetInt(den))
	return r.Cmp(expBig(eps, prec)) <= 0
}

// two64 is 2^64 as a big.Int.
var two64 = new(big.Int).Lsh(big.NewInt(1), 64)

func u64(x uint64) *big.Int { return new(big.Int).SetUint64(x) }

// constVec returns n copies of v.
func constVec(n int, v float32) []float32 {
	w := make([]float32, n)
	for i := range w {
		w[i] = v
	}
	return w
}

// decodeBits returns the one-bit payload's bits.
func decodeBits(t *testing.T, payload []byte, n int) []bool {
	t.Helper()
	if err := checkBits(payload, n); err != nil {
		t.Fatal(err)
	}
	out := make([]bool, n)
	for i := range out {
		out[i] = payload[i/8]>>(i%8)&1 == 1
	}
	return out
}

// meanVar returns the sample mean and variance.
func meanVar(x []float64) (m, v float64) {
	m, v, _ = moments(x)
	return m, v
}

// moments returns the sample mean, variance and fourth central moment.
func moments(x []float64) (m, v, m4 float64) {
	for _, y := range x {
		m += y
	}
	m /= float64(len(x))
	for _, y := range x {
		d := (y - m) * (y - m)
		v += d
		m4 += d * d
	}
	return m, v / float64(len(x)-1), m4 / float64(len(x))
}

// checkMeanVar compares a sample's mean and variance with their expected
// values, within 5 standard errors each: sqrt(var/n) for the mean and
// sqrt((m4 - var^2)/n) for the variance, both estimated from the sample,
// plus 25 var/n for the variance, its second-order term (which dominates
// when m4 = var^2, as for a fair coin). For a correct mechanism a failure
// has probability below 1e-6 per check.
func checkMeanVar(t *testing.T, what string, x []float64, wantMean, wantVar float64) {
	t.Helper()
	n := float64(len(x))
	m, v, m4 := moments(x)
	within(t, what+" mean", m, wantMean, 5*math.Sqrt(max(v, wantVar)/n)+1e-12)
	within(t, what+" variance", v, wantVar, 5*math.Sqrt(max(m4-v*v, 0)/n)+25*max(v, wantVar)/n+1e-12)
}

// within reports |got-want| <= tol, failing the test with a message if not.
func within(t *testing.T, what string, got, want, tol float64) {
	t.Helper()
	if math.IsNaN(got) || math.Abs(got-want) > tol {
		t.Errorf("%s = %.6g, want %.6g ± %.3g", what, got, want, tol)
	}
}

// cellser is implemented by the paired mechanisms: their shared cells.
type cellser interface{ cells() cells }

// l2Fit rescales w, for an L2 mechanism (the ddgauss and skellam L2 modes,
// pbm), so that w - rg.Center has L2 norm frac*rg.Radius (the vector the
// round engine would pass); other mechanisms' w is left as it is.
func l2Fit(m Mechanism, w []float32, rg Range, frac float64) {
	if _, ok := m.(L2); !ok {
		return
	}
	var s float64
	for _, v := range w {
		s += (float64(v) - rg.Center) * (float64(v) - rg.Center)
	}
	f := frac * rg.Radius / math.Sqrt(s)
	if s == 0 {
		f = 0
	}
	for i, v := range w {
		w[i] = float32(rg.Center + (float64(v)-rg.Center)*f)
	}
}

// testConfig is DefaultConfig with, for the mechanisms that need more
// (pbm), settings that make New work.
func testConfig(name string) Config {
	c := DefaultConfig()
	if info, ok := Lookup(name); ok && info.L2 {
		c.Noise, c.Clients = 1, 100
	}
	return c
}
