// Package mvu solves and samples the MVU mechanism (Chaudhuri, Guo, Rabbat,
// "Privacy-aware compression for federated data analysis", UAI 2022): an
// eps-LDP, unbiased, B-bit randomizer of a number in [0, 1].
//
// The input x is first rounded without bias to one of B_in = 2^InputBits
// levels t_i = i/(B_in-1); the output is a symbol j of BudgetBits bits, drawn
// from row i of a sampling matrix, and decodes to the value a_j. The matrix
// and a minimise the mean squared error subject to unbiasedness and eps-LDP.
// Solving is slow enough to be done once per Params and cached (Load).
//
// The sampler uses integer probabilities n_ij / 2^64 drawn with one 64-bit
// uniform word, so the distribution that runs is exactly the one Verify
// checks: every column ratio n_ij / n_i'j is at most e^eps, proved with exact
// arithmetic, and E[a_J | level i] = t_i up to a stated bias below 1e-17.
package mvu

import (
	"fmt"
	"math"
	"math/big"
	"math/bits"
	"sort"
)

// Matrix is a solved MVU design with integer sampling probabilities.
type Matrix struct {
	Params
	// Values holds a_j, the decoded value of symbol j, ascending.
	Values []float64 `json:"values"`
	// Counts[i][j] = n_ij: symbol j is sent for level i with probability
	// n_ij / 2^64. Each row sums to exactly 2^64.
	Counts [][]uint64 `json:"counts"`
}

// Sample returns the symbol for input level i given a uniform 64-bit word u:
// symbol j for the j-th run of n_ij values of u, so with probability exactly
// n_ij / 2^64.
func (m *Matrix) Sample(i int, u uint64) int {
	row := m.Counts[i]
	for j, n := range row {
		if u < n {
			return j
		}
		u -= n
	}
	// Unreachable for a verified matrix: the row sums to 2^64 > u.
	return len(row) - 1
}

// Moments returns E[a_J] and E[a_J^2] for input level i.
func (m *Matrix) Moments(i int) (mean, second float64) {
	for j, n := range m.Counts[i] {
		p := float64(n) * 0x1p-64
		mean += p * m.Values[j]
		second += p * m.Values[j] * m.Values[j]
	}
	return mean, second
}

// MSE is the design objective: the mean over the input levels t_i of
// E[(a_J - t_i)^2 | level i], for inputs in [0, 1].
func (m *Matrix) MSE() float64 {
	B := m.Levels()
	s := 0.0
	for i := range B {
		t := float64(i) / float64(B-1)
		mean, second := m.Moments(i)
		s += second - 2*t*mean + t*t
	}
	return s / float64(B)
}

// Possible reports whether symbol j has nonzero probability (for any level:
// under eps-LDP a column is either all zero or all positive).
func (m *Matrix) Possible(j int) bool { return m.Counts[0][j] != 0 }

// Report is what Verify proved about a Matrix.
type Report struct {
	// MaxBias is max_i |sum_j n_ij a_j / 2^64 - t_i|, computed exactly and
	// rounded to float64.
	MaxBias float64
	// Epsilon is the largest log ratio max_i n_ij / min_i n_ij over the
	// columns (in float64; the bound against the requested eps is exact).
	Epsilon float64
}

// MaxBias is the largest unbiasedness error Verify accepts. Rounding leaves
// at most half a step of |a_j - a_j'| / 2^64 per level, about 1e-19.
const MaxBias = 1e-15

// Verify checks m with exact integer and rational arithmetic: its shape,
// finite ascending values, every row summing to exactly 2^64, every ratio
// n_ij / n_i'j <= e^eps (against a rigorous lower bound of e^eps), and bias at
// most MaxBias. It returns the measured bias and effective epsilon.
func Verify(m *Matrix) (Report, error) {
	var rep Report
	if err := m.Params.Validate(); err != nil {
		return rep, err
	}
	B, K := m.Levels(), m.Symbols()
	if len(m.Values) != K || len(m.Counts) != B {
		return rep, fmt.Errorf("mvu: matrix has %d values and %d rows, want %d and %d", len(m.Values), len(m.Counts), K, B)
	}
	for j, v := range m.Values {
		if math.IsNaN(v) || math.IsInf(v, 0) || j > 0 && v < m.Values[j-1] {
			return rep, fmt.Errorf("mvu: value %d is %v: values must be finite and ascending", j, v)
		}
	}
	for i, row := range m.Counts {
		if len(row) != K {
			return rep, fmt.Errorf("mvu: row %d has %d entries, want %d", i, len(row), K)
		}
		var hi, lo uint64
		for _, n := range row {
			var c uint64
			lo, c = bits.Add64(lo, n, 0)
			hi += c
		}
		if hi != 1 || lo != 0 {
			return rep, fmt.Errorf("mvu: row %d does not sum to 2^64", i)
		}
	}
	// eps-LDP: for each column, max <= e^eps * min, checked as
	// max <= L * min with L <= e^eps.
	L := expLower(m.Epsilon)
	for j := range K {
		lo, hi := m.Counts[0][j], m.Counts[0][j]
		for i := range B {
			lo, hi = min(lo, m.Counts[i][j]), max(hi, m.Counts[i][j])
		}
		if hi == 0 {
			continue
		}
		if lo == 0 {
			return rep, fmt.Errorf("mvu: column %d has zero and nonzero entries: not eps-LDP", j)
		}
		bound := new(big.Float).SetPrec(512).SetUint64(lo)
		bound.Mul(bound, L)
		if new(big.Float).SetUint64(hi).Cmp(bound) > 0 {
			return rep, fmt.Errorf("mvu: column %d has ratio %d/%d > e^%v", j, hi, lo, m.Epsilon)
		}
		rep.Epsilon = max(rep.Epsilon, math.Log(float64(hi)/float64(lo)))
	}
	for i := range B {
		b := rowBias(m, i)
		f, _ := b.Float64()
		rep.MaxBias = max(rep.MaxBias, math.Abs(f))
	}
	if rep.MaxBias > MaxBias {
		return rep, fmt.Errorf("mvu: bias %g exceeds %g", rep.MaxBias, MaxBias)
	}
	return rep, nil
}

// rowBias is sum_j n_ij a_j / 2^64 - t_i, exactly.
func rowBias(m *Matrix, i int) *big.Rat {
	s := new(big.Rat)
	var term, a big.Rat
	for j, n := range m.Counts[i] {
		a.SetFloat64(m.Values[j])
		term.SetUint64(n)
		s.Add(s, term.Mul(&term, &a))
	}
	two64 := new(big.Rat).SetInt(new(big.Int).Lsh(big.NewInt(1), 64))
	s.Quo(s, two64)
	return s.Sub(s, big.NewRat(int64(i), int64(m.Levels()-1)))
}

// expLower returns a number L <= e^x for x >= 0 (to about 2^-200 relative):
// a partial sum of the Taylor series, every operation rounded toward zero,
// so each computed term and the sum lie below the true ones.
func expLower(x float64) *big.Float {
	const prec = 256
	X := new(big.Float).SetPrec(prec).SetMode(big.ToZero).SetFloat64(x)
	sum := new(big.Float).SetPrec(prec).SetMode(big.ToZero).SetInt64(1)
	term := new(big.Float).SetPrec(prec).SetMode(big.ToZero).SetInt64(1)
	tiny := new(big.Float).SetMantExp(big.NewFloat(1), -240)
	for k := int64(1); k < 10000; k++ {
		term.Mul(term, X)
		term.Quo(term, new(big.Float).SetInt64(k))
		sum.Add(sum, term)
		if k > int64(x) && term.Cmp(new(big.Float).Mul(tiny, sum)) < 0 {
			break
		}
	}
	return sum
}

// Solve computes the MVU design for p: the real-valued optimum (see
// solveDesign) for budget eps - margin, rounded to integer probabilities
// that are exactly eps-LDP, then verified. A design for a smaller budget is
// eps-LDP too; at large eps the LP is badly scaled (e^eps near 1e8) and its
// optimum can be poor or not found, so there the designs for budgets 16, 12
// and 8 are solved as well and the one of least MSE is kept.
func Solve(p Params) (*Matrix, error) {
	if err := p.Validate(); err != nil {
		return nil, err
	}
	budgets := []float64{p.Epsilon - margin}
	for _, b := range []float64{16, 12, 8} {
		if b < p.Epsilon-margin {
			budgets = append(budgets, b)
		}
	}
	var best *Matrix
	var firstErr error
	for _, b := range budgets {
		m, err := solveAt(p, b)
		if err != nil {
			if firstErr == nil {
				firstErr = err
			}
			continue
		}
		if best == nil || m.MSE() < best.MSE() {
			best = m
		}
	}
	if best == nil {
		return nil, firstErr
	}
	return best, nil
}

// solveAt solves the real design for budget b <= eps and rounds it into
// integer counts that are eps-LDP for p's eps.
func solveAt(p Params, b float64) (*Matrix, error) {
	d, err := solveDesign(p, b)
	if err != nil {
		return nil, err
	}
	m, err := roundDesign(p, d)
	if err != nil {
		return nil, err
	}
	if _, err := Verify(m); err != nil {
		return nil, fmt.Errorf("mvu: solved matrix failed verification: %w", err)
	}
	return m, nil
}

// roundDesign turns a real design into integer counts. Each column j gets an
// integer box [lo_j, hi_j] with hi_j <= e^eps lo_j proved exactly, where lo_j
// sits a relative margin/2 below the column's real minimum; every count is
// kept in its box, so the result is eps-LDP whatever the repairs do. Each row
// is rounded, then its sum (to 2^64) and mean (to t_i) are repaired by moving
// counts between two symbols, leaving a bias below |a_j - a_j'| / 2^65.
func roundDesign(p Params, d *design) (*Matrix, error) {
	B, K := p.Levels(), p.Symbols()
	// Sort symbols by value; the mirror symmetry survives.
	order := make([]int, K)
	for j := range order {
		order[j] = j
	}
	sort.SliceStable(order, func(x, y int) bool { return d.a[order[x]] < d.a[order[y]] })
	m := &Matrix{Params: p, Values: make([]float64, K), Counts: make([][]uint64, B)}
	for j, o := range order {
		m.Values[j] = d.a[o]
	}
	L := expLower(p.Epsilon)
	lo, hi := make([]uint64, K), make([]uint64, K)
	for j, o := range order {
		cmin, cmax := 1.0, 0.0
		for i := range B {
			cmin, cmax = min(cmin, d.P[i][o]), max(cmax, d.P[i][o])
		}
		if cmax < 1e-12 {
			continue // a symbol the design never uses stays at zero
		}
		lo[j] = toCount(cmin * math.Exp(-margin/2))
		h, _ := new(big.Float).SetPrec(512).Mul(new(big.Float).SetUint64(lo[j]), L).Uint64()
		hi[j] = h
	}
	for i := range B {
		row := make([]uint64, K)
		for j, o := range order {
			row[j] = min(max(toCount(d.P[i][o]), lo[j]), hi[j])
		}
		m.Counts[i] = row
		if err := repairRow(m, i, lo, hi); err != nil {
			return nil, err
		}
	}
	return m, nil
}

// toCount is round(p * 2^64) for p in [0, 1), saturating below 2^64.
func toCount(p float64) uint64 {
	v := math.Round(p * 0x1p64)
	if v >= 0x1p64 {
		return math.MaxUint64
	}
	return uint64(max(v, 0))
}

// repairRow makes row i sum to 2^64 and have mean t_i up to rounding, by
// changing two counts within their boxes. Of the pairs that can absorb the
// change it picks the one with the smallest relative change.
func repairRow(m *Matrix, i int, lo, hi []uint64) error {
	row := m.Counts[i]
	var shi, slo uint64
	for _, n := range row {
		var c uint64
		slo, c = bits.Add64(slo, n, 0)
		shi += c
	}
	// D = 2^64 - sum, as a signed integer; rounding keeps it tiny.
	var D int64
	switch {
	case shi == 1 && slo <= 1<<62:
		D = -int64(slo)
	case shi == 0 && slo >= 1<<63:
		D = int64(-slo) // 2^64 - slo, which fits
	default:
		return fmt.Errorf("mvu: row %d of the real design does not sum to 1", i)
	}
	// E = t_i 2^64 - sum_j n_ij a_j: the change of sum_j n_ij a_j needed.
	e := rowBias(m, i)
	e.Mul(e, new(big.Rat).SetInt(new(big.Int).Lsh(big.NewInt(1), 64)))
	E, _ := e.Neg(e).Float64()
	type move struct {
		j1, j2 int
		d1, d2 int64
		cost   float64
	}
	var best *move
	for j1 := range row {
		for j2 := range row {
			a1, a2 := m.Values[j1], m.Values[j2]
			if j1 == j2 || a1 == a2 || row[j1] == 0 || row[j2] == 0 {
				continue
			}
			// d1 + d2 = D and d1 a1 + d2 a2 = E.
			d2f := math.Round((E - float64(D)*a1) / (a2 - a1))
			if math.Abs(d2f) > 1<<62 {
				continue
			}
			d2 := int64(d2f)
			d1 := D - d2
			if !fits(row[j1], d1, lo[j1], hi[j1]) || !fits(row[j2], d2, lo[j2], hi[j2]) {
				continue
			}
			c := max(math.Abs(float64(d1))/float64(row[j1]), math.Abs(float64(d2))/float64(row[j2]))
			if best == nil || c < best.cost {
				best = &move{j1, j2, d1, d2, c}
			}
		}
	}
	if best == nil {
		return fmt.Errorf("mvu: cannot round row %d within the eps-LDP bounds", i)
	}
	row[best.j1] = add(row[best.j1], best.d1)
	row[best.j2] = add(row[best.j2], best.d2)
	return nil
}

// add returns n + d for a d that fits.
func add(n uint64, d int64) uint64 {
	if d >= 0 {
		return n + uint64(d)
	}
	return n - uint64(-d)
}

// fits reports whether n + d stays within [lo, hi].
func fits(n uint64, d int64, lo, hi uint64) bool {
	if d >= 0 {
		return hi-n >= uint64(d) && n <= hi
	}
	return n >= lo && n-lo >= uint64(-d)
}
