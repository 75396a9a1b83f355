package privacy

import (
	"math"
	"math/cmplx"
	"sort"

	"gonum.org/v1/gonum/dsp/fourier"
)

// This file composes the run-level accountant's loss distributions: k runs
// of one event by one FFT and a power (as dp_accounting's self_compose),
// events with each other by pld.convolve, and reads delta(eps) and
// eps(delta) off the result.

// selfCompose is the k-fold composition of p (rounding up: an upper bound).
// The k-fold sum of the losses is computed by FFT on a cycle of L bins
// that covers a window [lo, hi] of it: by Chernoff's bound, with
// M(t) = sum_i m_i e^(t l_i) the finite part's moment generating function,
// P[S >= hi] <= M(t)^k e^(-t hi) and P[S <= lo] <= M(-t)^k e^(t lo), each
// at most tail/2 for the best t of a grid. On the cycle, mass below the
// window wraps to higher losses (which only adds to delta) and mass above
// it to lower ones, so tail/2 more goes to +Inf; the +Inf mass of k runs
// is 1 - (1 - inf)^k. Rounded down (up false; for tests) the +Inf mass is
// not added. The result is trimmed by tail/2 (pld.trim).
func (p pld) selfCompose(k int, tail float64, up bool) (pld, error) {
	if k == 1 {
		return p, nil
	}
	lo, hi := p.window(k, tail/2)
	return p.selfComposeIn(k, lo, hi, tail, up)
}

// selfComposeIn is selfCompose with the window [lo, hi] given (from
// p.window(k, tail/2)).
func (p pld) selfComposeIn(k int, lo, hi, tail float64, up bool) (pld, error) {
	if k == 1 {
		return p, nil
	}
	kf := float64(k)
	infK := -math.Expm1(kf * math.Log1p(-p.inf))
	if p.inf >= 1 {
		infK = 1
	}
	n1 := len(p.mass)
	// Composed index J = sum of the k indices, each in [0, n1).
	jlo := max(0, int(math.Floor(lo/p.h))-k*p.off)
	jhi := min(k*(n1-1), int(math.Ceil(hi/p.h))-k*p.off)
	if jhi < jlo {
		jlo, jhi = 0, k*(n1-1)
	}
	need := max(jhi-jlo+1, n1)
	if need > maxBins {
		return pld{}, errTooFine{float64(need)}
	}
	size := fftSize(need)
	fft := fourier.NewFFT(size)
	a := make([]float64, size)
	copy(a, p.mass)
	c := fft.Coefficients(nil, a)
	// x^k in polar form; coefficients whose k-th power underflows are 0.
	for i, x := range c {
		lr := kf * math.Log(cmplx.Abs(x))
		if lr < -745 {
			c[i] = 0
			continue
		}
		s, co := math.Sincos(kf * cmplx.Phase(x))
		r := math.Exp(lr)
		c[i] = complex(r*co, r*s)
	}
	v := fft.Sequence(a, c)
	out := make([]float64, size)
	for r, x := range v {
		j := jlo + ((r-jlo)%size+size)%size
		out[j-jlo] = max(0, x/float64(size))
	}
	q := pld{h: p.h, off: k*p.off + jlo, mass: out, inf: infK}
	if up {
		q.inf = min(1, q.inf+tail/2)
	}
	return q.trim(tail/2, up), nil
}

// window is [lo, hi] with P[S < lo] and P[S > hi] at most t each, S the
// sum of k independent losses of p's finite part, by Chernoff's bound,
// clamped to S's range. The bound (k log M(s) - log t)/s, M the moment
// generating function, is unimodal in s > 0 (its numerator's derivative
// in s grows, M being log-convex); s is scanned on a coarse copy of p,
// then the bound is taken exactly around the best s found (every s gives
// a valid bound; the scan only looks for a small one).
func (p pld) window(k int, t float64) (lo, hi float64) {
	kf := float64(k)
	lmin := float64(p.off) * p.h
	lmax := float64(p.off+len(p.mass)-1) * p.h
	lt := math.Log(t)
	// at most 2048 blocks, each at its top (for hi) or bottom (for lo)
	// loss: a bound for such a copy bounds p
	step := (len(p.mass) + 2047) / 2048
	var cm, ctop, cbot []float64
	for i := 0; i < len(p.mass); i += step {
		m := 0.0
		for _, x := range p.mass[i:min(i+step, len(p.mass))] {
			m += x
		}
		cm = append(cm, m)
		cbot = append(cbot, float64(p.off+i)*p.h)
		ctop = append(ctop, float64(p.off+min(i+step, len(p.mass))-1)*p.h)
	}
	// logM is log sum m_i e^(s l_i), by log-sum-exp, from lm = log m.
	logM := func(lm, l []float64, s float64) float64 {
		top := math.Inf(-1)
		for i, x := range lm {
			top = max(top, x+s*l[i])
		}
		sum := 0.0
		for i, x := range lm {
			if e := x + s*l[i] - top; e > -745 {
				sum += math.Exp(e)
			}
		}
		return top + math.Log(sum)
	}
	logs := func(m []float64) []float64 {
		out := make([]float64, len(m))
		for i, x := range m {
			out[i] = math.Log(x) // -Inf for 0
		}
		return out
	}
	lcm, lpm := logs(cm), logs(p.mass)
	exact := make([]float64, len(p.mass))
	for i := range exact {
		exact[i] = float64(p.off+i) * p.h
	}
	// bound is the Chernoff end at s: the upper for s > 0, the lower (as
	// -bound) for s < 0.
	bound := func(lm, l []float64, s float64) float64 { return (kf*logM(lm, l, s) - lt) / s }
	best := func(l []float64, sign float64) float64 {
		bs, bv := 0.0, math.Inf(1)
		for j := -60; j <= 60; j++ {
			s := sign * math.Pow(2, float64(j)/3)
			if v := sign * bound(lcm, l, s); v < bv {
				bs, bv = s, v
			}
		}
		v := math.Inf(1)
		for j := -3; j <= 3; j++ {
			v = min(v, sign*bound(lpm, exact, bs*math.Pow(2, float64(j)/12)))
		}
		return v
	}
	hi = min(best(ctop, 1), kf*lmax)
	lo = max(-best(cbot, -1), kf*lmin)
	return lo, hi
}

// fftSize is the least n >= m whose only prime factors are 2, 3 and 5,
// sizes gonum's FFT does fast.
func fftSize(m int) int {
	best := 1
	for best < m {
		best *= 2
	}
	for p5 := 1; p5 < best; p5 *= 5 {
		for p35 := p5; p35 < best; p35 *= 3 {
			n := p35
			for n < m {
				n *= 2
			}
			best = min(best, n)
		}
	}
	return best
}

// curve is delta(eps) = inf + sum over losses l_i > eps of m_i (1 - e^(eps - l_i))
// of a pld, for eps >= 0, in O(log n) per call: s1 and s2 are suffix sums
// of m_i and m_i e^(-l_i) over the bins from first on (those with l_i > 0).
type curve struct {
	p      pld
	first  int
	s1, s2 []float64
}

func newCurve(p pld) curve {
	first := 0
	for first < len(p.mass) && float64(p.off+first)*p.h <= 0 {
		first++
	}
	n := len(p.mass) - first
	c := curve{p: p, first: first, s1: make([]float64, n+1), s2: make([]float64, n+1)}
	for i := n - 1; i >= 0; i-- {
		m := p.mass[first+i]
		l := float64(p.off+first+i) * p.h
		c.s1[i] = c.s1[i+1] + m
		c.s2[i] = c.s2[i+1] + m*math.Exp(-l)
	}
	return c
}

// loss is the loss of the curve's i-th bin from first.
func (c curve) loss(i int) float64 { return float64(c.p.off+c.first+i) * c.p.h }

// delta is delta(eps) for eps >= 0.
func (c curve) delta(eps float64) float64 {
	// i: the first bin from first with loss > eps.
	n := len(c.s1) - 1
	i := sort.Search(n, func(i int) bool { return c.loss(i) > eps })
	return min(1, c.p.inf+max(0, c.s1[i]-math.Exp(eps)*c.s2[i]))
}

// epsilon is the least eps >= 0 with delta(eps) <= target, +Inf when the
// +Inf mass alone exceeds it. On the segment between two bins delta is
// inf + s1 - e^eps s2 with fixed sums, solved exactly; the result is
// checked and nudged up against rounding.
func (c curve) epsilon(target float64) float64 {
	if c.p.inf >= target {
		return math.Inf(1)
	}
	if c.delta(0) <= target {
		return 0
	}
	n := len(c.s1) - 1
	// First bin i whose loss already meets the target.
	i := sort.Search(n, func(i int) bool { return c.delta(c.loss(i)) <= target })
	if i == n { // not reached within the grid: cannot happen with inf < target
		return math.Inf(1)
	}
	lo := 0.0
	if i > 0 {
		lo = c.loss(i - 1)
	}
	eps := c.loss(i)
	if c.s2[i] > 0 {
		if e := math.Log((c.p.inf + c.s1[i] - target) / c.s2[i]); e > lo && e < eps {
			eps = e
		}
	}
	for c.delta(eps) > target {
		eps = math.Nextafter(eps, math.Inf(1)) + 1e-15*eps
	}
	return eps
}

// pldPart is one event's loss distribution of one run in each direction,
// and how many runs the accountant composes.
type pldPart struct {
	one    [2]pld
	count  int
	sym    bool       // the two directions are the same law
	lo, hi [2]float64 // the windows of the count-fold compositions
}

// pldParts discretizes the atoms on step h: the unsampled Gaussians merged
// into one, N(0, sigma^2) with 1/sigma^2 the sum of count/Z^2 (Gaussian
// noises on the same data compose to exactly that Gaussian; Dong, Roth and
// Su 2019, Corollary 3.3), the others one part each. Each part's one-run
// truncation takes tail/(4 parts count), so that its k runs lose at most
// tail/(4 parts).
func pldParts(atoms []atom, h, tail float64, up bool) ([]pldPart, error) {
	var mu2 float64
	n := 0
	for _, a := range atoms {
		if g, ok := a.Event.(Gaussian); ok {
			mu2 += float64(a.Count) / (g.Z * g.Z)
		} else {
			n++
		}
	}
	if mu2 > 0 {
		n++
	}
	var parts []pldPart
	if mu2 > 0 {
		p, err := gaussianLaw(math.Sqrt(mu2)).grid(h, tail/float64(4*n), up)
		if err != nil {
			return nil, err
		}
		parts = append(parts, pldPart{one: [2]pld{p, p}, count: 1, sym: true})
	}
	for _, a := range atoms {
		if _, ok := a.Event.(Gaussian); ok {
			continue
		}
		var part pldPart
		part.count = a.Count
		for dir := range 2 {
			p, err := onePLD(a.Event, dir, h, tail/float64(4*n*a.Count), up)
			if err != nil {
				return nil, err
			}
			part.one[dir] = p
		}
		parts = append(parts, part)
	}
	return parts, nil
}

// width sets each part's windows for the truncation tail of composeParts
// and returns the span of losses, summed over the parts, that their
// composition covers: what the grid must hold.
func width(parts []pldPart, tail float64) float64 {
	w := 0.0
	for i := range parts {
		p := &parts[i]
		for dir := range 2 {
			if dir == addDir && p.sym {
				p.lo[dir], p.hi[dir] = p.lo[0], p.hi[0]
				continue
			}
			p.lo[dir], p.hi[dir] = p.one[dir].window(p.count, partTail(tail, len(parts))/2)
			w = max(w, p.hi[dir]-p.lo[dir]+p.one[dir].h)
		}
	}
	return w * float64(len(parts))
}

// partTail is each part's share of the truncation budget tail.
func partTail(tail float64, parts int) float64 { return tail / float64(4*parts) }

// fftAllowance is added to the +Inf mass of every distribution composed
// by FFT (rounding up): the FFT's rounding, which can lower a bin by about
// 1e-16 of the largest, lowered delta by at most 2e-14 against direct
// convolution in TestFFTRounding (which allows 5e-14); this covers that
// twenty times over. It is the one allowance that rests on a measurement
// rather than a proof.
const fftAllowance = 1e-12

// composeParts composes every part's runs and the parts with each other,
// in each direction, in the windows width set; the truncations add at
// most tail to the +Inf mass, and FFTs fftAllowance.
func composeParts(parts []pldPart, tail float64, up bool) ([2]pld, error) {
	var out [2]pld
	fft := len(parts) > 1
	for _, p := range parts {
		fft = fft || p.count > 1
	}
	defer func() {
		if fft && up {
			for dir := range out {
				out[dir].inf = min(1, out[dir].inf+fftAllowance)
			}
		}
	}()
	t := partTail(tail, len(parts))
	sym := true
	for _, p := range parts {
		sym = sym && p.sym
	}
	for dir := range 2 {
		if dir == addDir && sym {
			out[addDir] = out[removeDir]
			break
		}
		var acc pld
		for i, p := range parts {
			c, err := p.one[dir].selfComposeIn(p.count, p.lo[dir], p.hi[dir], t, up)
			if err != nil {
				return out, err
			}
			if i == 0 {
				acc = c
				continue
			}
			if len(acc.mass)+len(c.mass) > maxBins {
				return out, errTooFine{float64(len(acc.mass) + len(c.mass))}
			}
			acc = acc.convolve(c, t, up)
		}
		out[dir] = acc
	}
	return out, nil
}
