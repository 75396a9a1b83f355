package privacy

import (
	"math"

	"gonum.org/v1/gonum/dsp/fourier"
)

// ComposeSecureSum is the central epsilon, at delta, of k compositions of
// SecureSumEpsilon's mechanism: one client's eps0-LDP bit among n, seen
// through the sum, k times with fresh coins. k counts what the ledger
// composes: the rounds a client took part in for one parameter, or rounds
// times parameters for its whole upload (each parameter has its own sum and
// its own coins).
//
// It composes privacy loss distributions (Koskela, Jalko, Honkela 2020;
// Koskela, Jalko, Prediger, Honkela 2021; as in Google's dp_accounting):
//
//   - One round's pair is the blanket view of SecureSumBlanket, (M, X +
//     Binomial(M, 1/2)) with X ~ Bernoulli(qhi) against Bernoulli(qlo). It
//     dominates the true view for every input of the target and the others
//     (SecureSumBlanket's argument, for every eps), and it is symmetric, so
//     one ordering's loss distribution serves both. Dominating pairs compose
//     adaptively (Zhu, Dong and Wang, "Optimal accounting of differential
//     privacy via characteristic function", AISTATS 2022), so the k-fold
//     product bounds k rounds whose inputs depend on earlier rounds.
//   - The loss ln(P/Q) of each outcome is rounded up to a grid of step h;
//     delta(eps) = E[(1 - e^(eps-L))_+] grows with every loss, so the
//     rounded distribution, composed, gives an upper bound. Mass that the
//     truncations drop, at the top, is moved to +Inf loss; at the bottom,
//     up to the lowest kept loss; m's runs are rounded down as in
//     blanketSum (fewer fair coins is a pessimistic post-processing).
//   - k-fold composition is convolution, by FFT (gonum dsp/fourier) and
//     repeated squaring, with the tails truncated after each product (at
//     1e-4 delta/(2 log2 k + 2) each, and the one-round distribution's at
//     1e-4 delta/k). FFT rounding (about 1e-16 of the largest bin per
//     bin) is not accounted for.
//
// The grid step is h = max(1e-3 eps1/sqrt(k), 24 sqrt(k) sd/2^20), eps1
// the one-round epsilon and sd the one-round loss's standard deviation;
// rounding adds at most k h to the result (TestComposeSecureSum checks the
// gap to the same computation rounded down). The result is the least of
// this, Optimal(eps0, k, delta) (the local guarantee composed, which holds
// against anyone) and k SecureSumEpsilon(eps0, n, delta/k) (basic
// composition of the round's bound, exact for n up to 10,000: basic
// composition holds for any (eps, delta)-DP rounds, adaptively chosen; it
// is the tighter at k = 1, where the grid only adds). Each is a sound
// bound at delta, so their least is. The exact per-round worst case is not
// composed by PLD: it is a maximum over the others' inputs that no single
// pair of distributions is known to dominate at every eps, which PLD
// composition needs.
func ComposeSecureSum(eps0 float64, n, k int, delta float64) (float64, error) {
	up, _, err := composeSecureSum(eps0, n, k, delta, false)
	if err != nil {
		return 0, err
	}
	local, _ := Optimal(eps0, k, delta)
	basic, _ := SecureSumEpsilon(eps0, n, delta/float64(k))
	return min(up, local, float64(k)*basic), nil
}

// composeSecureSum is ComposeSecureSum, and with lower set, also the same
// computation with every loss rounded down and the truncated mass dropped
// (the runs of m still take their lowest m): the gap between the two is
// what the grid and the truncations cost.
func composeSecureSum(eps0 float64, n, k int, delta float64, lower bool) (up, down float64, err error) {
	if err := checkBlanket(eps0, n, delta); err != nil {
		return 0, 0, err
	}
	if err := checkCount(k); err != nil {
		return 0, 0, err
	}
	local, _ := Optimal(eps0, k, delta)
	eps1, _ := SecureSumBlanket(eps0, n, delta)
	if n == 1 || eps1 >= eps0 {
		return local, local, nil
	}
	// Truncation budgets: the one-round +Inf mass adds up over k rounds,
	// each product's over the squarings.
	tail1 := 1e-4 * delta / float64(k)
	tail := 1e-4 * delta / (2*math.Log2(float64(k)) + 2)
	_, sd := blanketLossMoments(eps0, n)
	kf := float64(k)
	h := max(1e-3*eps1/math.Sqrt(kf), 24*math.Sqrt(kf)*sd/(1<<20))
	epsOf := func(up bool) float64 {
		r := roundDown
		if up {
			r = roundUp
		}
		one := blanketPLD(eps0, n, h, tail1, r)
		p := one.power(k, tail, up)
		if p.inf > delta {
			return local
		}
		hi := float64(p.off+len(p.mass)) * h
		return smallestEpsilon(p.delta, delta, max(hi, 0))
	}
	up = epsOf(true)
	if lower {
		down = epsOf(false)
	}
	return up, down, nil
}

// pld is a privacy loss distribution on a grid: mass[i] at loss
// (off+i) h, and inf at +Inf.
type pld struct {
	h    float64
	off  int
	mass []float64
	inf  float64
}

// delta is E[(1 - e^(eps-L))_+], the hockey-stick divergence at e^eps.
func (p pld) delta(eps float64) float64 {
	d := p.inf
	for i, x := range p.mass {
		if l := float64(p.off+i) * p.h; l > eps {
			d += x * -math.Expm1(eps-l)
		}
	}
	return d
}

// blanketLossMoments is the mean and standard deviation of the loss of
// SecureSumBlanket's blanket pair at its most likely m: enough to size the
// grid.
func blanketLossMoments(eps0 float64, n int) (mean, sd float64) {
	qlo, qhi := rrProbs(eps0)
	m := int(float64(n) * 2 * qlo)
	var s1, s2 float64
	forLoss(m, qlo, qhi, func(_ int, l, p float64) {
		s1 += p * l
		s2 += p * l * l
	})
	return s1, math.Sqrt(max(0, s2-s1*s1))
}

// forLoss calls fn(s, loss, P(s)) for the counts s of Bernoulli(qhi) +
// Binomial(m, 1/2) within 12 standard deviations of the middle, and
// returns the mass left out below and above (bounds: P(s) <= 2 b(s), b the
// Binomial(m+1, 1/2) pmf, and geometric tails).
func forLoss(m int, qlo, qhi float64, fn func(s int, l, p float64)) (below, above float64) {
	m1 := float64(m + 1)
	half := 12*math.Sqrt(m1)/2 + 2
	lo, hi := max(0, int(m1/2-half)), min(m+1, int(m1/2+half)+1)
	logb := logBinom(m+1, lo) - m1*math.Ln2
	b := math.Exp(logb)
	for s := lo; s <= hi; s++ {
		sf := float64(s)
		num := qhi*sf + qlo*(m1-sf)
		den := qlo*sf + qhi*(m1-sf)
		fn(s, math.Log(num/den), b*2*num/m1)
		if s < hi {
			b *= (m1 - sf) / (sf + 1)
		}
	}
	// Beyond the window b's ratio is at most r < 1 on each side.
	if lo > 0 {
		bl := math.Exp(logBinom(m+1, lo-1) - m1*math.Ln2)
		r := float64(lo-1) / (m1 - float64(lo-1) + 1)
		below = 2 * bl / (1 - r)
	}
	if hi < m+1 {
		bh := math.Exp(logBinom(m+1, hi+1) - m1*math.Ln2)
		r := (m1 - float64(hi+1)) / float64(hi+2)
		above = 2 * bh / (1 - r)
	}
	return below, above
}

// rounding is how blanketPLD puts a loss on its grid.
type rounding int

const (
	roundDown  rounding = iota // to the grid point below: a lower bound
	roundUp                    // to the grid point above: an upper bound
	roundSplit                 // split between the two keeping Q's mass (sampled.go's split): an upper bound that is again a pair
)

// blanketPLD is the loss distribution of SecureSumBlanket's blanket pair,
// (M, Bernoulli(qhi) + Binomial(M, 1/2)) against Bernoulli(qlo), each
// loss put on the grid of step h by r. Rounded up or split, the mass left
// out is put at +Inf (above) or at the lowest loss (below); rounded down it
// is dropped. M is walked as in blanketSum, in runs that take the run's
// lowest m.
func blanketPLD(eps0 float64, n int, h, tail float64, r rounding) pld {
	up := r != roundDown
	qlo, qhi := rrProbs(eps0)
	// mass[i] is at grid index off+i; it grows to the losses met, with
	// slack at the front so that growing there stays cheap.
	var mass []float64
	off := 0
	put := func(i int, x float64) {
		switch {
		case mass == nil:
			mass, off = make([]float64, 1, 1024), i
		case i < off:
			extra := max(off-i, len(mass))
			grown := make([]float64, extra+len(mass))
			copy(grown[extra:], mass)
			mass, off = grown, off-extra
		case i >= off+len(mass):
			mass = append(mass, make([]float64, i-off-len(mass)+1)...)
		}
		mass[i-off] += x
	}
	idx := func(l float64) int {
		if up {
			return int(math.Ceil(l / h))
		}
		return int(math.Floor(l / h))
	}
	var inf float64
	addM := func(m int, w float64) {
		lowest := math.MaxInt
		below, above := forLoss(m, qlo, qhi, func(_ int, l, p float64) {
			if r == roundSplit {
				i := int(math.Floor(l / h))
				a, b := split(w*p, w*p*math.Exp(-l), float64(i)*h, h)
				lowest = min(lowest, i)
				put(i, a)
				put(i+1, b)
				return
			}
			i := idx(l)
			lowest = min(lowest, i)
			put(i, w*p)
		})
		if up {
			put(lowest, w*below)
			inf += w * above
		}
	}
	N, g := n-1, 2*qlo
	mode := min(N, int(float64(N+1)*g))
	run := blanketRun(mode)
	odds := g / (1 - g)
	p0 := math.Exp(logBinom(N, mode) + float64(mode)*math.Log(g) + float64(N-mode)*math.Log1p(-g))
	// Upward: runs [a, a+run) take m = a.
	acc, start := 0.0, mode
	for m, p := mode, p0; ; m++ {
		acc += p
		last := m == N
		r := 0.0
		if !last {
			r = float64(N-m) / float64(m+1) * odds
			if r < 1 && p*r/(1-r) <= tail {
				if up {
					inf += p * r / (1 - r)
				}
				last = true
			}
		}
		if last || (m+1-mode)%run == 0 {
			addM(start, acc)
			acc, start = 0, m+1
		}
		if last {
			break
		}
		p *= r
	}
	// Downward: a run's mass takes its lowest m, the last one reached.
	acc, low := 0.0, mode
	for m, p := mode, p0; m > 0; {
		s := float64(m) / (float64(N-m+1) * odds)
		if s < 1 && p*s/(1-s) <= tail {
			if up {
				inf += p * s / (1 - s)
			}
			break
		}
		p *= s
		m--
		acc, low = acc+p, m
		if (mode-m)%run == 0 {
			addM(m, acc)
			acc = 0
		}
	}
	if acc > 0 {
		addM(low, acc)
	}
	return pld{h: h, off: off, mass: mass, inf: inf}.trim(tail, up)
}

// trim drops leading and trailing bins and truncates the tails: at most
// tail of mass from the top goes to +Inf (up) or down to the highest kept
// bin (!up); at most tail from the bottom goes up to the lowest kept bin
// (up) or is dropped (!up).
func (p pld) trim(tail float64, up bool) pld {
	lo, hi := 0, len(p.mass)-1
	var cut float64
	for lo < hi && cut+p.mass[lo] <= tail {
		cut += p.mass[lo]
		lo++
	}
	if up {
		p.mass[lo] += cut
	}
	cut = 0
	for hi > lo && cut+p.mass[hi] <= tail {
		cut += p.mass[hi]
		hi--
	}
	if up {
		p.inf += cut
	} else {
		p.mass[hi] += cut
	}
	p.off += lo
	p.mass = append([]float64(nil), p.mass[lo:hi+1]...)
	return p
}

// convolve is the loss distribution of the composition of p and q.
func (p pld) convolve(q pld, tail float64, up bool) pld {
	n := len(p.mass) + len(q.mass) - 1
	size := 1
	for size < n {
		size *= 2
	}
	fft := fourier.NewFFT(size)
	a := make([]float64, size)
	copy(a, p.mass)
	b := make([]float64, size)
	copy(b, q.mass)
	fa := fft.Coefficients(nil, a)
	fb := fft.Coefficients(nil, b)
	for i := range fa {
		fa[i] *= fb[i]
	}
	c := fft.Sequence(a, fa)
	out := make([]float64, n)
	for i := range out {
		out[i] = max(0, c[i]/float64(size))
	}
	inf := p.inf + q.inf // a union bound when rounding up
	if !up {
		inf = 0
	}
	return pld{h: p.h, off: p.off + q.off, mass: out, inf: inf}.trim(tail, up)
}

// power is the k-fold composition of p, by repeated squaring.
func (p pld) power(k int, tail float64, up bool) pld {
	var acc pld
	have := false
	for base := p; ; {
		if k&1 == 1 {
			if have {
				acc = acc.convolve(base, tail, up)
			} else {
				acc, have = base, true
			}
		}
		k >>= 1
		if k == 0 {
			return acc
		}
		base = base.convolve(base, tail, up)
	}
}
