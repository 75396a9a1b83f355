package mvu

import (
	"encoding/json"
	"fmt"
	"math"
	"math/big"
	"os"
	"path/filepath"
	"testing"

	"gonum.org/v1/gonum/mat"
	"gonum.org/v1/gonum/optimize/convex/lp"
)

// solved caches designs across tests of this package (Solve is deterministic).
var solved = map[Params]*Matrix{}

func solve(t testing.TB, p Params) *Matrix {
	t.Helper()
	if m, ok := solved[p]; ok {
		return m
	}
	m, err := Solve(p)
	if err != nil {
		t.Fatalf("Solve(%+v): %v", p, err)
	}
	solved[p] = m
	return m
}

// rrMSE is the mean over the B levels of the variance of 1-bit randomized
// response, a_0 = -1/(e^eps-1), a_1 = e^eps/(e^eps-1), P(a_1) linear in t:
// Var(t) = (t - a_0)(a_1 - t). It is the optimum for one output bit.
func rrMSE(eps float64, B int) float64 {
	rho := math.Exp(eps)
	a0, a1 := -1/(rho-1), rho/(rho-1)
	s := 0.0
	for i := range B {
		t := float64(i) / float64(B-1)
		s += (t - a0) * (a1 - t)
	}
	return s / float64(B)
}

var testParams = []Params{
	{1, 1, 1}, {3, 1, 0.5}, {3, 2, 1}, {4, 2, 0.1}, {5, 2, 1}, {4, 3, 2}, {5, 2, 5}, {3, 2, 20}, {2, 3, 0.01},
}

// Every solved matrix passes the exact checks: rows sum to 2^64, column
// ratios <= e^eps (exact), bias far below MaxBias.
func TestSolveVerifies(t *testing.T) {
	for _, p := range testParams {
		m := solve(t, p)
		rep, err := Verify(m)
		if err != nil {
			t.Fatalf("%+v: %v", p, err)
		}
		if rep.Epsilon > p.Epsilon || rep.MaxBias > 1e-17 {
			t.Errorf("%+v: effective eps %v, bias %g", p, rep.Epsilon, rep.MaxBias)
		}
		t.Logf("%+v: MSE %.6f, eps used %.9f, bias %.2g", p, m.MSE(), rep.Epsilon, rep.MaxBias)
	}
}

// With one output bit the optimum is randomized response: the solver must
// match it and cannot beat it. The design is solved for eps - margin; since
// |d ln MSE / d eps| = coth(eps/2) <= 1 + 2/eps for randomized response, that
// costs at most about margin (1 + 2/eps) relative.
func TestOneBitIsRandomizedResponse(t *testing.T) {
	for _, eps := range []float64{0.1, 1, 4} {
		for _, in := range []int{1, 3, 5} {
			p := Params{in, 1, eps}
			got, want := solve(t, p).MSE(), rrMSE(eps, p.Levels())
			if got < want*(1-1e-12) || got > want*(1+1.5*margin*(1+2/eps)) {
				t.Errorf("%+v: MSE %.9g, randomized response %.9g", p, got, want)
			}
		}
	}
}

// More budget bits never hurt, and at low bits MVU beats both 1-bit
// randomized response and the (unquantized, 32-bit) Laplace mechanism,
// whose variance on [0,1] is 2/eps^2. The log is the table in docs/mvu.md.
func TestBudgetHelps(t *testing.T) {
	t.Log("| eps | Laplace 2/eps^2 | MVU 1 bit (= RR) | MVU 2 bits | MVU 3 bits |")
	for _, eps := range []float64{0.1, 0.5, 1, 2, 5} {
		prev := math.Inf(1)
		row := fmt.Sprintf("| %v | %.4g |", eps, 2/(eps*eps))
		for b := 1; b <= 3; b++ {
			mse := solve(t, Params{4, b, eps}).MSE()
			if mse > prev*(1+1e-6) {
				t.Errorf("eps %v: %d bits MSE %.6f > %d bits %.6f", eps, b, mse, b-1, prev)
			}
			prev = mse
			row += fmt.Sprintf(" %.4g |", mse)
		}
		t.Log(row)
		two := solve(t, Params{4, 2, eps}).MSE()
		if lap := 2 / (eps * eps); two >= lap || two >= rrMSE(eps, 16) {
			t.Errorf("eps %v: 2-bit MVU MSE %.4f, Laplace %.4f, randomized response %.4f", eps, two, lap, rrMSE(eps, 16))
		}
	}
}

// The tableau simplex on the symmetric half-problem reaches the optimum that
// gonum's lp.Simplex finds on the full LP with all B^2 K pairwise ratio
// constraints, so both the solver and the reduction are right.
func TestLPMatchesGonum(t *testing.T) {
	p := Params{2, 2, 1}
	B, K := p.Levels(), p.Symbols()
	rho := math.Exp(p.Epsilon)
	for _, a := range [][]float64{{-1, 0.2, 0.8, 2}, {-0.7, 0.45, 0.55, 1.7}, {-2, -1, 2, 3}} {
		d, err := lpDesign(p, rho, a)
		if err != nil {
			t.Fatal(err)
		}
		nP := B * K
		var rows [][]float64
		var b []float64
		for i := range B {
			sum, mean := make([]float64, nP), make([]float64, nP)
			for j := range K {
				sum[i*K+j], mean[i*K+j] = 1, a[j]
			}
			rows = append(rows, sum, mean)
			b = append(b, 1, float64(i)/float64(B-1))
		}
		for i := range B {
			for i2 := range B {
				for j := range K {
					if i != i2 {
						r := make([]float64, nP)
						r[i*K+j], r[i2*K+j] = 1, -rho
						rows = append(rows, r)
						b = append(b, 0)
					}
				}
			}
		}
		ineq := len(rows) - 2*B
		c := make([]float64, nP)
		for i := range B {
			for j := range K {
				x := float64(i)/float64(B-1) - a[j]
				c[i*K+j] = x * x
			}
		}
		A := mat.NewDense(len(rows), nP+ineq, nil)
		for r, row := range rows {
			for k, v := range row {
				A.Set(r, k, v)
			}
			if r >= 2*B {
				A.Set(r, nP+r-2*B, 1)
			}
		}
		cc := append(c, make([]float64, ineq)...)
		opt, _, err := lp.Simplex(cc, A, b, 1e-12, nil)
		if err != nil {
			t.Fatalf("gonum: %v", err)
		}
		if got := d.mse * float64(B); math.Abs(got-opt) > 1e-8*(1+opt) {
			t.Errorf("a=%v: simplex %.12g, gonum %.12g", a, got, opt)
		}
	}
}

// Sample draws symbol j for exactly n_ij consecutive values of u.
func TestSampleThresholds(t *testing.T) {
	m := solve(t, Params{3, 2, 1})
	for i, row := range m.Counts {
		var start uint64
		for j, n := range row {
			if n == 0 {
				continue
			}
			if got := m.Sample(i, start); got != j {
				t.Errorf("row %d: Sample(%d) = %d, want %d", i, start, got, j)
			}
			if got := m.Sample(i, start+n-1); got != j {
				t.Errorf("row %d: Sample(%d) = %d, want %d", i, start+n-1, got, j)
			}
			start += n
		}
	}
}

// expLower is a lower bound of e^x, and a tight one.
func TestExpLower(t *testing.T) {
	for _, x := range []float64{0.01, 0.5, 1, 2.5, 10, 20} {
		L, _ := expLower(x).Float64()
		if e := math.Exp(x); L > e*(1+2e-16) || L < e*(1-4e-16) {
			t.Errorf("expLower(%v) = %v, exp %v", x, L, e)
		}
	}
	// e itself: compare exactly with an upper bound, e rounded up at 76 digits.
	e, _, _ := big.ParseFloat("2.7182818284590452353602874713526624977572470936999595749669676277240766303536", 10, 256, big.ToNearestEven)
	if expLower(1).Cmp(e) > 0 {
		t.Errorf("expLower(1) = %v exceeds e", expLower(1))
	}
}

// Verify rejects every kind of broken matrix.
func TestVerifyRejects(t *testing.T) {
	base := solve(t, Params{3, 2, 1})
	clone := func() *Matrix {
		b, _ := json.Marshal(base)
		var m Matrix
		if err := json.Unmarshal(b, &m); err != nil {
			t.Fatal(err)
		}
		return &m
	}
	cases := map[string]func(m *Matrix){
		"row sum":     func(m *Matrix) { m.Counts[2][1]++ },
		"ratio":       func(m *Matrix) { m.Counts[0][0] /= 4; m.Counts[0][1] += base.Counts[0][0] - m.Counts[0][0] },
		"zero entry":  func(m *Matrix) { m.Counts[1][3] += m.Counts[1][0]; m.Counts[1][0] = 0 },
		"bias":        func(m *Matrix) { m.Values[0] -= 1e-9 },
		"nan":         func(m *Matrix) { m.Values[1] = math.NaN() },
		"order":       func(m *Matrix) { m.Values[1], m.Values[2] = m.Values[2], m.Values[1] },
		"rows":        func(m *Matrix) { m.Counts = m.Counts[1:] },
		"width":       func(m *Matrix) { m.Counts[3] = m.Counts[3][:3] },
		"params":      func(m *Matrix) { m.BudgetBits = 0 },
		"tighter eps": func(m *Matrix) { m.Epsilon = 0.9 },
	}
	for name, breakIt := range cases {
		m := clone()
		breakIt(m)
		if _, err := Verify(m); err == nil {
			t.Errorf("%s: Verify accepted a broken matrix", name)
		}
	}
	if _, err := Verify(clone()); err != nil {
		t.Errorf("unbroken clone: %v", err)
	}
}

// Load writes a cache file that later loads verify; corrupt or tampered
// files are re-solved and replaced, never used.
func TestCache(t *testing.T) {
	p := Params{3, 2, 1}
	dir := t.TempDir()
	m, err := Load(dir, p)
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, FileName(p))
	got, err := readCache(path, p)
	if err != nil {
		t.Fatalf("reading back the cache: %v", err)
	}
	if got.MSE() != m.MSE() {
		t.Errorf("cached MSE %v, solved %v", got.MSE(), m.MSE())
	}
	if _, err := readCache(path, Params{3, 2, 2}); err == nil {
		t.Error("a file of other parameters was accepted")
	}
	tampered := m.Counts[0][0]
	for name, content := range map[string]func() []byte{
		"garbage": func() []byte { return []byte("{not json") },
		"tampered": func() []byte {
			bad := got
			bad.Counts[0][0], bad.Counts[0][1] = bad.Counts[0][0]/2, bad.Counts[0][1]+bad.Counts[0][0]-bad.Counts[0][0]/2
			b, _ := json.Marshal(bad)
			return b
		},
	} {
		d := filepath.Join(t.TempDir(), "sub")
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
		f := filepath.Join(d, FileName(p))
		if err := os.WriteFile(f, content(), 0o644); err != nil {
			t.Fatal(err)
		}
		m2, err := Load(d, p)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if _, err := Verify(m2); err != nil || m2.Counts[0][0] != tampered {
			t.Errorf("%s: loaded a bad matrix (%v)", name, err)
		}
		if _, err := readCache(f, p); err != nil {
			t.Errorf("%s: cache file not replaced: %v", name, err)
		}
	}
}

func TestParamsValidate(t *testing.T) {
	for _, p := range []Params{{0, 2, 1}, {9, 2, 1}, {3, 0, 1}, {3, 5, 1}, {3, 2, 0}, {3, 2, -1}, {3, 2, math.NaN()}, {3, 2, math.Inf(1)}, {3, 2, 50}} {
		if _, err := Solve(p); err == nil {
			t.Errorf("Solve(%+v) accepted bad parameters", p)
		}
	}
}

func BenchmarkSolve(b *testing.B) {
	for _, p := range []Params{{5, 2, 1}, {5, 3, 1}} {
		b.Run(FileName(p), func(b *testing.B) {
			for range b.N {
				if _, err := Solve(p); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// TestLargeEpsilon: at large eps, where the LP is badly scaled, Solve still
// finds a design, and more budget gives no worse a design, to within the 5%
// that rounding the eps-16 design into eps-20 boxes can cost (review found
// (2,3,20) failing and (3,3,20) 60x worse than (3,3,16)).
func TestLargeEpsilon(t *testing.T) {
	if _, err := Solve(Params{InputBits: 2, BudgetBits: 3, Epsilon: 20}); err != nil {
		t.Errorf("(2,3,20): %v", err)
	}
	m16, err := Solve(Params{InputBits: 3, BudgetBits: 3, Epsilon: 16})
	if err != nil {
		t.Fatal(err)
	}
	m20, err := Solve(Params{InputBits: 3, BudgetBits: 3, Epsilon: 20})
	if err != nil {
		t.Fatal(err)
	}
	if m20.MSE() > m16.MSE()*1.05 {
		t.Errorf("(3,3): MSE %.3g at eps 20, %.3g at eps 16", m20.MSE(), m16.MSE())
	}
}
