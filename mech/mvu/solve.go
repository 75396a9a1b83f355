package mvu

import (
	"fmt"
	"math"
)

// Params identify one MVU design: 2^InputBits input levels, 2^BudgetBits
// output symbols, privacy budget Epsilon.
type Params struct {
	InputBits  int
	BudgetBits int
	Epsilon    float64
}

// Limits of what Solve accepts. The linear programs grow as
// 2^InputBits * 2^BudgetBits; beyond these the dense solver takes minutes.
const (
	MaxInputBits  = 8
	MaxBudgetBits = 4
	MinEpsilon    = 0.01
	MaxEpsilon    = 20
)

// Validate reports parameters Solve cannot handle.
func (p Params) Validate() error {
	if p.InputBits < 1 || p.InputBits > MaxInputBits {
		return fmt.Errorf("mvu: input bits %d outside 1..%d", p.InputBits, MaxInputBits)
	}
	if p.BudgetBits < 1 || p.BudgetBits > MaxBudgetBits {
		return fmt.Errorf("mvu: budget bits %d outside 1..%d", p.BudgetBits, MaxBudgetBits)
	}
	if math.IsNaN(p.Epsilon) || p.Epsilon < MinEpsilon || p.Epsilon > MaxEpsilon {
		return fmt.Errorf("mvu: epsilon %v outside [%v, %v]", p.Epsilon, MinEpsilon, MaxEpsilon)
	}
	return nil
}

// Levels is B_in, the number of input levels t_i = i/(B_in-1).
func (p Params) Levels() int { return 1 << p.InputBits }

// Symbols is B_out, the number of output symbols.
func (p Params) Symbols() int { return 1 << p.BudgetBits }

// margin is how much smaller than eps the privacy budget of the real-valued
// design is. It leaves every entry a relative slack of about margin/2 in both
// directions, which the integer rounding (roundDesign) uses to repair rows
// without leaving the exact eps-LDP box. It costs about margin relative MSE.
const margin = 1e-6

// design is a real-valued solution: P (B_in x B_out) and the decoding a.
type design struct {
	P   [][]float64
	a   []float64
	mse float64 // mean over the input levels of sum_j P_ij (t_i - a_j)^2
}

// solveDesign finds a (locally) optimal design for budget eps.
//
// For a fixed decoding vector a the problem is a linear program in P
// (lpDesign). The paper alternates that LP with a quadratic problem in a for
// fixed P, but that step is stuck: P a = t has B_in equations in B_out < B_in
// unknowns, and an LP vertex P has full column rank, so a is already its only
// solution. Instead the solver minimises the LP's optimal value over a
// directly: first over equally spaced a in [-d, 1+d] (the authors' search
// over the initial spread d), then with Nelder-Mead over all of a, started
// both from there and from the optimum for one budget bit less.
//
// Both the problem and its solution set are symmetric under the mirror
// x -> 1-x; the solver keeps a symmetric (a_{K-1-j} = 1 - a_j), which halves
// the free parameters and, for symmetric a, the LP (see lpDesign).
func solveDesign(p Params, eps float64) (*design, error) {
	K := p.Symbols()
	rho := math.Exp(eps)
	// The spread of a must be at least (rho+1)/(rho-1), the 1-bit randomized
	// response: a_0 <= -dmin. Equally spaced a with d >= dmin is feasible.
	dmin := 1 / math.Expm1(eps)
	eval := func(a []float64) float64 {
		d, err := lpDesign(p, rho, a)
		if err != nil {
			return math.Inf(1)
		}
		return d.mse
	}
	spaced := func(d float64) []float64 {
		a := make([]float64, K)
		for j := range K {
			a[j] = -d + float64(j)*(1+2*d)/float64(K-1)
		}
		return a
	}
	// Coarse scan of d on a log grid above dmin, then golden section.
	grid := []float64{1e-6, 1e-3, 0.01, 0.03, 0.1, 0.3, 1, 3}
	g := func(s float64) float64 { return eval(spaced(dmin + s*(1+dmin))) }
	vals := make([]float64, len(grid))
	best := 0
	for k, s := range grid {
		vals[k] = g(s)
		if vals[k] < vals[best] {
			best = k
		}
	}
	if math.IsInf(vals[best], 1) {
		return nil, fmt.Errorf("mvu: no feasible design found for %+v", p)
	}
	lo, hi := grid[max(best-1, 0)], grid[min(best+1, len(grid)-1)]
	if best == 0 {
		lo = 0
	}
	s := golden(g, lo, hi, 25)
	if g(s) > vals[best] {
		s = grid[best]
	}
	a := spaced(dmin + s*(1+dmin))

	if K > 2 {
		// Also start from the optimum for one bit less with every symbol
		// doubled: it is feasible with the same value, so the result is never
		// worse than the smaller budget's.
		lower, err := solveDesign(Params{p.InputBits, p.BudgetBits - 1, p.Epsilon}, eps)
		if err != nil {
			return nil, err
		}
		full := func(x []float64) []float64 {
			a := make([]float64, K)
			for j, v := range x {
				a[j], a[K-1-j] = v, 1-v
			}
			return a
		}
		f := func(x []float64) float64 { return eval(full(x)) }
		h := K / 2
		twice := make([]float64, h)
		for j := range twice {
			twice[j] = lower.a[j/2]
		}
		best, fbest := a[:h], math.Inf(1)
		for _, x0 := range [][]float64{a[:h], twice} {
			x := nelderMead(f, x0, 0.05*(1+2*dmin), 150*h, 1e-10)
			if v := f(x); v < fbest {
				best, fbest = x, v
			}
		}
		a = full(best)
	}
	return lpDesign(p, rho, a)
}

// nelderMead minimises f from x0 with the Nelder-Mead simplex method
// (standard coefficients 1, 2, 1/2, 1/2) and returns the best point seen.
// It stops after maxEval evaluations or when the values at the simplex's
// vertices agree to within tol relative. (gonum's optimize.NelderMead would
// do, but gonum's optimize package pulls in golang.org/x/tools, which is not
// in this module's go.sum.) f may be +Inf: such points are never accepted.
func nelderMead(f func([]float64) float64, x0 []float64, step float64, maxEval int, tol float64) []float64 {
	n := len(x0)
	xs := make([][]float64, n+1)
	fs := make([]float64, n+1)
	for k := range xs {
		xs[k] = append([]float64(nil), x0...)
		if k > 0 {
			xs[k][k-1] += step
		}
		fs[k] = f(xs[k])
	}
	evals := n + 1
	at := func(c []float64, x []float64, t float64) []float64 {
		y := make([]float64, n)
		for i := range y {
			y[i] = c[i] + t*(x[i]-c[i])
		}
		return y
	}
	for evals < maxEval {
		// Order: best first, worst last.
		for i := 1; i <= n; i++ {
			for k := i; k > 0 && fs[k] < fs[k-1]; k-- {
				xs[k], xs[k-1] = xs[k-1], xs[k]
				fs[k], fs[k-1] = fs[k-1], fs[k]
			}
		}
		if !math.IsInf(fs[n], 1) && fs[n]-fs[0] <= tol*math.Abs(fs[0]) {
			break
		}
		cen := make([]float64, n)
		for _, x := range xs[:n] {
			for i, v := range x {
				cen[i] += v / float64(n)
			}
		}
		xr := at(cen, xs[n], -1)
		fr := f(xr)
		evals++
		switch {
		case fr < fs[0]:
			xe := at(cen, xs[n], -2)
			fe := f(xe)
			evals++
			if fe < fr {
				xs[n], fs[n] = xe, fe
			} else {
				xs[n], fs[n] = xr, fr
			}
		case fr < fs[n-1]:
			xs[n], fs[n] = xr, fr
		default:
			xc := at(cen, xs[n], 0.5)
			if fr < fs[n] {
				xc = at(cen, xs[n], -0.5)
			}
			fc := f(xc)
			evals++
			if fc < min(fr, fs[n]) {
				xs[n], fs[n] = xc, fc
				continue
			}
			for k := 1; k <= n; k++ {
				xs[k] = at(xs[0], xs[k], 0.5)
				fs[k] = f(xs[k])
			}
			evals += n
		}
	}
	best := 0
	for k := range fs {
		if fs[k] < fs[best] {
			best = k
		}
	}
	return xs[best]
}

// golden minimises f on [lo, hi] by golden-section search.
func golden(f func(float64) float64, lo, hi float64, iters int) float64 {
	r := (math.Sqrt(5) - 1) / 2
	x1, x2 := hi-r*(hi-lo), lo+r*(hi-lo)
	f1, f2 := f(x1), f(x2)
	for range iters {
		if f1 <= f2 {
			hi, x2, f2 = x2, x1, f1
			x1 = hi - r*(hi-lo)
			f1 = f(x1)
		} else {
			lo, x1, f1 = x1, x2, f2
			x2 = lo + r*(hi-lo)
			f2 = f(x2)
		}
	}
	if f1 <= f2 {
		return x1
	}
	return x2
}

// lpDesign solves the LP in P for a fixed symmetric decoding a: minimise
// sum_ij P_ij (t_i - a_j)^2 subject to rows summing to 1, sum_j P_ij a_j = t_i,
// and m_j <= P_ij <= rho m_j with one free variable m_j per column (which
// replaces the B_in^2 B_out pairwise ratio constraints by 2 B_in B_out).
//
// For symmetric a an optimal P is symmetric, P_{B-1-i,K-1-j} = P_ij (average
// any optimum with its mirror image), so only the top half of the rows is
// solved, with columns j and K-1-j sharing one m (column j's bottom half is
// column K-1-j's top half mirrored). Variables, all >= 0: m_k (k < K/2),
// s_ij = P_ij - m_j and slack w_ij = (rho-1) m_j - s_ij.
func lpDesign(p Params, rho float64, a []float64) (*design, error) {
	B, K := p.Levels(), p.Symbols()
	H, h := B/2, K/2
	sig := func(j int) int { return min(j, K-1-j) }
	t := func(i int) float64 { return float64(i) / float64(B-1) }
	sIdx := func(i, j int) int { return h + i*K + j }
	wIdx := func(i, j int) int { return h + H*K + i*K + j }
	n := h + 2*H*K
	rows := H*K + 2*H
	A := make([][]float64, rows)
	b := make([]float64, rows)
	hint := make([]int, rows)
	c := make([]float64, n)
	for i := range H {
		for j := range K {
			r := i*K + j
			A[r] = make([]float64, n)
			A[r][sIdx(i, j)] = 1
			A[r][wIdx(i, j)] = 1
			A[r][sig(j)] = -(rho - 1)
			hint[r] = wIdx(i, j)
			d := t(i) - a[j]
			c[sIdx(i, j)] = d * d
			c[sig(j)] += d * d
		}
		sum, mean := make([]float64, n), make([]float64, n)
		for j := range K {
			sum[sig(j)] += 1
			sum[sIdx(i, j)] = 1
			mean[sig(j)] += a[j]
			mean[sIdx(i, j)] = a[j]
		}
		A[H*K+i], b[H*K+i], hint[H*K+i] = sum, 1, -1
		A[H*K+H+i], b[H*K+H+i], hint[H*K+H+i] = mean, t(i), -1
	}
	x, _, err := simplex(c, A, b, hint)
	if err != nil {
		return nil, err
	}
	P := make([][]float64, B)
	for i := range B {
		P[i] = make([]float64, K)
	}
	for i := range H {
		for j := range K {
			v := x[sig(j)] + x[sIdx(i, j)]
			P[i][j] = v
			P[B-1-i][K-1-j] = v
		}
	}
	return checkDesign(p, rho, P, a)
}

// checkDesign recomputes the constraints and the objective of P from scratch.
// Tableau pivoting accumulates rounding error, and on badly scaled problems
// (tiny eps, where |a| is in the hundreds) it can end on a wrong basis; such a
// P is rejected rather than handed to the search as a spuriously good value.
func checkDesign(p Params, rho float64, P [][]float64, a []float64) (*design, error) {
	B, K := p.Levels(), p.Symbols()
	scale := 1.0
	for _, v := range a {
		scale = max(scale, math.Abs(v))
	}
	const tol = 1e-9
	mse := 0.0
	for i, row := range P {
		t := float64(i) / float64(B-1)
		var sum, mean float64
		for j, v := range row {
			if v < -tol {
				return nil, fmt.Errorf("mvu: design entry (%d,%d) = %v is negative", i, j, v)
			}
			sum += v
			mean += v * a[j]
			mse += v * (t - a[j]) * (t - a[j])
		}
		if math.Abs(sum-1) > tol || math.Abs(mean-t) > tol*scale {
			return nil, fmt.Errorf("mvu: design row %d has sum %v, mean %v, want 1, %v", i, sum, mean, t)
		}
	}
	for j := range K {
		lo, hi := math.Inf(1), 0.0
		for i := range B {
			lo, hi = min(lo, P[i][j]), max(hi, P[i][j])
		}
		if hi > rho*lo+tol {
			return nil, fmt.Errorf("mvu: design column %d has ratio %v/%v > %v", j, hi, lo, rho)
		}
	}
	return &design{P: P, a: append([]float64(nil), a...), mse: mse / float64(B)}, nil
}
