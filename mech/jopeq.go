package mech

import (
	"fmt"
	"math"

	"github.com/fedpq/fedpq/corr"
	"github.com/fedpq/fedpq/mech/lattice"
	"github.com/fedpq/fedpq/mech/noise"
	"github.com/fedpq/fedpq/wire"
)

func init() {
	Register(Info{
		Name:    "jopeq",
		Summary: "SDQ plus discrete noise on the lattice indices: eps-LDP per parameter even against a server that knows the dither, Rate bits per parameter",
		LDP:     true,
		New: func(c Config) (Mechanism, error) {
			if err := c.ValidateEpsilon(); err != nil {
				return nil, err
			}
			rate, dim, err := latticeConfig(c, "jopeq")
			if err != nil {
				return nil, err
			}
			// Above jopeqMaxEps the noise would underflow; the noise of
			// jopeqMaxEps is eps-LDP for every larger eps.
			eps := min(c.Epsilon, jopeqMaxEps)
			if dim == 1 {
				return newJopeqScalar(eps, rate)
			}
			return newJopeqHex(eps, rate)
		},
	})
}

// jopeqMaxEps caps the eps jopeq calibrates its noise to. Its laws need
// q = exp(-1/Scale) as a normal float64: at Rate 1, q = (2/(1+e^eps))^2
// underflows near eps 355, and with Scale = D/eps near eps 745 D. At the
// cap the noise is nonzero with probability below e^-150 and Epsilon() is
// at most 300 <= eps, so a larger eps gets this mechanism: SDQ up to that
// probability, and eps-LDP a fortiori.
const jopeqMaxEps = 300

// indexNoise is the integer noise jopeq adds to lattice indices: a sample
// g*K of noise.DiscreteLaplace (K a two-sided geometric integer, g a power
// of two at most 1/2) rounded to the nearest integer, halves away from
// zero. Because an integer index k0 is a multiple of g, k0 + g*K is the
// discrete Laplace mechanism on noise's grid, whose privacy loss for a
// shift of D indices is exactly D/Scale(); rounding is post-processing.
// The rounded law is, with q = exp(-1/Scale()) and p = exp(-g/Scale()):
//
//	P(Z = z) = A q^|z|          for z != 0, A = q^(-1/2) (1-q)/(1+p)
//	P(Z = 0) = 1 - 2 q^(1/2)/(1+p)
//
// symmetric, with geometric tails: P(Z >= u) = q^(u-1/2)/(1+p) for u >= 1,
// and Z - u given Z >= u is geometric with ratio q, whatever u >= 1.
// (noise conditions K on |K| < 2^30 Scale()/g, which moves every number
// here by a relative exp(-2^30).)
type indexNoise struct {
	lap     noise.DiscreteLaplace
	q, p, a float64
}

// The rounding is of the noise alone, so k0 + Z is not a function of
// k0 + g*K at ties (k0 = 1, g*K = -1/2 gives 0, k0 = 0, g*K = 1/2 gives 1),
// and post-processing does not cover it. What does: P(Z = 0) covers 2m-1
// grid points and P(Z = 1) covers 2m (m = 1/(2g)), so P(Z=1)/P(Z=0) <=
// 2m/(2m-1), a log-ratio of at most 2g, while P(Z=0)/P(Z=1) <= exp(1/Scale)
// (shift the 2m points of Z = 1 down by 2m). If 2g <= 1/Scale, the ratio
// of Z = v and Z = v - d is at most exp(d/Scale) for every shift d, ties
// included, which is all the proofs of jopeqScalar and jopeqHex use:
// newIndexNoise refuses scales above 2^15, where g*Scale can exceed 1/2
// (found by TestParameterSweep at eps 1e-6: a loss of 2.4e-4 for a
// claimed 1e-6).
func newIndexNoise(scale float64) (indexNoise, error) {
	lap, err := noise.NewLaplace(scale)
	if err != nil {
		return indexNoise{}, err
	}
	if lap.Granularity()*lap.Scale() > 0.5 {
		return indexNoise{}, fmt.Errorf("noise scale %v above 2^15 indices is too large for the exact rounding of the noise to integer lattice indices", scale)
	}
	s := lap.Scale()
	q, p := math.Exp(-1/s), math.Exp(-lap.Granularity()/s)
	return indexNoise{lap: lap, q: q, p: p, a: -math.Expm1(-1/s) / math.Sqrt(q) / (1 + p)}, nil
}

func (z indexNoise) sample(src corr.Source) int64 { return int64(math.Round(z.lap.Sample(src))) }

// prob is P(Z = v).
func (z indexNoise) prob(v int64) float64 {
	if v == 0 {
		return 1 - 2*math.Sqrt(z.q)/(1+z.p)
	}
	return z.a * math.Pow(z.q, math.Abs(float64(v)))
}

// tail is P(Z >= u) = P(Z <= -u) for u >= 1.
func (z indexNoise) tail(u int64) float64 { return math.Pow(z.q, float64(u)-0.5) / (1 + z.p) }

// variance is Var Z = 2 A q (1+q)/(1-q)^3.
func (z indexNoise) variance() float64 {
	omq := -math.Expm1(-1 / z.lap.Scale())
	return 2 * z.a * z.q * (1 + z.q) / (omq * omq * omq)
}

// overshoot is the mean q/(1-q) and the variance q/(1-q)^2 of the
// geometric excess Z - u given Z >= u >= 1.
func (z indexNoise) overshoot() (mean, variance float64) {
	omq := -math.Expm1(-1 / z.lap.Scale())
	return z.q / omq, z.q / (omq * omq)
}

// epsilon is the exact privacy loss of a shift of d indices.
func (z indexNoise) epsilon(d int64) float64 { return float64(d) / z.lap.Scale() }

// jopeqScalar is jopeq with the scalar lattice (L = 1).
//
// Encoding: the clipped parameter is normalized to u in [-1, 1]; the
// lattice is Delta*Z with Delta = 2/D, and its D+1 points covering [-1, 1]
// get the codebook indices h..h+D of the N = 2^Rate indices. With the
// dither d (uniform on [-Delta/2, Delta/2), from Slot.Shared), k0 = h +
// round((u + 1 + d)/Delta) is SDQ's index, always in h..h+D. The client
// sends k = clamp(k0 + Z, 0, N-1), Z from indexNoise with scale D/eps
// drawn from Slot.Private.
//
// Privacy: for any fixed dither, two inputs give k0 at most D apart, so
// k0 + Z is (D/Scale)-DP, Scale >= D/eps; clamping is post-processing.
// The guarantee, eps' = D/Scale <= eps, therefore holds for every dither,
// i.e. against a server that knows it. The largest log-ratio is attained
// (k0 = h against h+D at output 0), so eps' is exact.
//
// Decoding: the server maps k to t(k) = k inside and, at the two ends, to
// the conditional mean of the unclamped k0 + Z: t(0) = -q/(1-q), t(N-1) =
// N-1 + q/(1-q). Those do not depend on k0 because the tails of Z are
// geometric and every k0 is at least one index from each end (h >= 1,
// h+D <= N-2); so E[t(k) | k0] = k0 exactly, and y = c + r(-1 +
// (t(k) - h) Delta - d) is an unbiased estimate of the clipped w. (With
// Rate = 1 there is no room at the ends: D = 1, N = 2, the mechanism is
// randomized response on SDQ's bit, calibrated directly, and t is its
// standard debiasing.)
//
// Output distribution and variance: y - w = r(Delta (t(k) - k0) + e),
// e uniform on the cell; the two terms are uncorrelated, so
// Var y = r^2 Delta^2 (E V(k0) + 1/12), with V(k0) = Var Z minus
// (P(Z >= N-1-k0) + P(Z <= -k0)) q/(1-q)^2 (conditioning the clamped tails
// on their mean removes their geometric variance), the expectation over
// the two indices the dither can give. D is chosen in New to minimize the
// largest of these variances over the range: it trades the quantization
// term 1/12 against the noise, whose variance in value units is almost
// independent of D.
type jopeqScalar struct {
	eps    float64
	rate   int
	levels int64 // N
	span   int64 // D
	low    int64 // h
	noise  indexNoise
	cell   lattice.Scalar
	shift  float64 // t(N-1) - (N-1) = -t(0): how far the server moves the end indices
	rrBeta float64 // Rate 1: P(k = 1 | k0 = 0)
}

// maxScalarSpan bounds the search for D (which is at most N-3) so that New
// stays fast at high rates; in the measured cases the best D is N-3, the
// finest lattice, since the endpoint decoding turns the extra clamping
// into lower variance.
const maxScalarSpan = 1 << 16

func newJopeqScalar(eps float64, rate int) (*jopeqScalar, error) {
	levels := int64(1) << rate
	if levels == 2 {
		// Randomized response: P(k != k0) = beta ~ sqrt(q)/2, so the scale
		// with sqrt(q) = 2/(1 + e^eps) makes (1-beta)/beta = e^eps; the
		// grid only enlarges the scale, and beta with it.
		m := &jopeqScalar{eps: eps, rate: rate, levels: 2, span: 1, cell: lattice.Scalar{Step: 2}}
		var err error
		if m.noise, err = newIndexNoise(1 / (2 * (math.Log1p(math.Exp(eps)) - math.Ln2))); err != nil {
			return nil, fmt.Errorf("mech: jopeq: epsilon %v: %w", eps, err)
		}
		m.rrBeta = m.noise.tail(1)
		m.shift = m.rrBeta / (1 - 2*m.rrBeta)
		return m, nil
	}
	var best *jopeqScalar
	bestVar := math.Inf(1)
	for d := int64(1); d <= min(levels-3, maxScalarSpan); d++ {
		m := &jopeqScalar{eps: eps, rate: rate, levels: levels, span: d, low: (levels - 1 - d) / 2, cell: lattice.Scalar{Step: 2 / float64(d)}}
		var err error
		if m.noise, err = newIndexNoise(float64(d) / eps); err != nil {
			if best == nil {
				return nil, fmt.Errorf("mech: jopeq: epsilon %v: %w", eps, err)
			}
			break
		}
		m.shift, _ = m.noise.overshoot()
		// V(k0) is largest at the middle index, farthest from both ends.
		v := max(m.indexVar(m.low+d/2), m.indexVar(m.low+(d+1)/2)) + 1.0/12
		if v *= m.cell.Step * m.cell.Step; v < bestVar {
			best, bestVar = m, v
		}
	}
	if best == nil {
		return nil, fmt.Errorf("mech: jopeq: epsilon %v, rate %d: no lattice span has a finite variance", eps, rate)
	}
	return best, nil
}

func (m *jopeqScalar) Name() string       { return "jopeq" }
func (m *jopeqScalar) Coupling() Coupling { return Dithered }
func (m *jopeqScalar) Alone() float64     { return 0 }
func (m *jopeqScalar) Bits(n int) int     { return 8 * wire.PackedLen(n, m.rate) }

// Epsilon is the exact per-parameter privacy loss, D/Scale <= eps, or
// log((1-beta)/beta) <= eps for randomized response (Rate 1).
func (m *jopeqScalar) Epsilon() float64 {
	if m.levels == 2 {
		return math.Log((1 - m.rrBeta) / m.rrBeta)
	}
	return m.noise.epsilon(m.span)
}

// prob is P(k | k0), the probability of sending index k when SDQ's index
// is k0: the law the privacy guarantee is about.
func (m *jopeqScalar) prob(k, k0 int64) float64 {
	switch {
	case k < 0 || k >= m.levels:
		return 0
	case m.levels == 2 && k != k0:
		return m.rrBeta
	case m.levels == 2:
		return 1 - m.rrBeta
	case k == 0:
		return m.noise.tail(k0)
	case k == m.levels-1:
		return m.noise.tail(m.levels - 1 - k0)
	}
	return m.noise.prob(k - k0)
}

// indexVar is V(k0) = E[(t(k) - k0)^2 | k0].
func (m *jopeqScalar) indexVar(k0 int64) float64 {
	if m.levels == 2 {
		b := m.rrBeta
		return b * (1 - b) / ((1 - 2*b) * (1 - 2*b))
	}
	_, ov := m.noise.overshoot()
	return m.noise.variance() - (m.noise.tail(m.levels-1-k0)+m.noise.tail(k0))*ov
}

// index returns SDQ's index k0 of normalized input u under dither d.
func (m *jopeqScalar) index(u, d float64) int64 {
	return m.low + min(max(m.cell.Nearest(u+1+d), 0), m.span)
}

// Variance is the exact variance of the server's output for input w.
func (m *jopeqScalar) Variance(w float64, rg Range) float64 {
	f := (rg.Clip(w) - rg.Center) / rg.Radius
	pos := (f + 1) / m.cell.Step
	k := min(int64(math.Floor(pos)), m.span)
	frac := pos - float64(k)
	v := (1-frac)*m.indexVar(m.low+k) + 1.0/12
	if frac > 0 {
		v += frac * m.indexVar(m.low+k+1)
	}
	return rg.Radius * rg.Radius * m.cell.Step * m.cell.Step * v
}

func (m *jopeqScalar) Encode(dst []byte, w []float32, rg Range, s Slot) ([]byte, error) {
	if err := checkJopeq(w, rg, s); err != nil {
		return dst, err
	}
	p := wire.NewPacker(dst, m.rate)
	d := newWordReader(s.Shared, len(w))
	for _, v := range w {
		k0 := m.index(normalize(v, rg), m.cell.Dither(d.next()))
		k := min(max(k0+m.noise.sample(s.Private), 0), m.levels-1)
		p.Put(uint32(k))
	}
	return p.Bytes(), nil
}

func (m *jopeqScalar) NewSum(n int, rg Range) (Sum, error) { return newLatticeSum(n, rg, m) }

// Fields is the index k of each parameter, then (Rate >= 2) its end mark
// e = 1 + [k = N-1] - [k = 0], one per parameter. The server's estimate
// of the unclamped index, t(k), moves the end indices, so it is affine in
// (k, e), not in k: t(k) = k + shift*(e - 1). With Rate 1, t is affine in
// k alone (e = 2k), and a payload has one field per parameter.
func (m *jopeqScalar) Fields(n int) int {
	if m.levels == 2 {
		return n
	}
	return 2 * n
}

// Levels is 2^Rate, which bounds the end marks too (Rate >= 2).
func (m *jopeqScalar) Levels() uint64      { return uint64(m.levels) }
func (m *jopeqScalar) ditherLen(n int) int { return n }

func (m *jopeqScalar) Unpack(dst []uint64, payload []byte, n int) error {
	if err := checkFieldBuf(m, dst, n); err != nil {
		return err
	}
	top := uint32(m.levels - 1)
	return unpackCodes(payload, n, m.rate, uint64(m.levels), func(i int, k uint32) {
		dst[i] = uint64(k)
		if m.levels > 2 {
			e := uint64(1)
			switch k {
			case 0:
				e = 0
			case top:
				e = 2
			}
			dst[n+i] = e
		}
	})
}

func (m *jopeqScalar) addDither(dsum []float64, src corr.Source) { addScalarDither(dsum, m.cell, src) }

// decode is c + r(Delta*(mean t(k) - h) - mean dither - 1), with the sum of
// t(k) over count clients sum k + shift*(sum e - count).
func (m *jopeqScalar) decode(dst []float64, sum []uint64, dsum []float64, count int, rg Range) {
	n := len(dst)
	inv, cnt := 1/float64(count), int64(count)
	for i := range dst {
		k := int64(sum[i])
		e := 2*k - cnt
		if m.levels > 2 {
			e = int64(sum[n+i]) - cnt
		}
		t := float64(k-cnt*m.low) + m.shift*float64(e)
		dst[i] = rg.Center + rg.Radius*((t*m.cell.Step-dsum[i])*inv-1)
	}
}

func (m *jopeqScalar) DecodeSum(dst []float64, sum []uint64, count int, rg Range, slots []Slot) error {
	return decodeLatticeSum(m, dst, sum, count, rg, slots)
}

// checkJopeq is the common validation of a private dithered Encode.
func checkJopeq(w []float32, rg Range, s Slot) error {
	if s.Private == nil {
		return fmt.Errorf("mech: a private mechanism needs the client's private coins (Slot.Private is nil)")
	}
	return checkDithered(w, rg, s)
}

// jopeqHex is jopeq with the hexagonal lattice (L = 2), on pairs of
// parameters as in sdq.
//
// Encoding: with the hexagonal lattice of step Delta centered at the
// origin, SDQ's point k0 = Q(u + d) lies in the cover of the square
// (lattice.HexCover), whose points are at most H_in hops from the origin
// and at most H hops from each other (H is the largest span of a cube
// coordinate over the cover, computed exactly). The client adds the
// lattice noise z1*e1 + z2*e2 + z3*e3, where e1, e2, e3 are the lattice
// vectors at 0, 120 and 240 degrees and z1, z2, z3 are independent
// indexNoise of scale H/eps, projects the result onto the ball of M
// hops (lattice.Project, the largest ball with at most 4^Rate points) and
// sends its index.
//
// Privacy (of the pair; eps per parameter): the map z -> sum z_i e_i takes
// Z^3 onto the lattice, and a shift of the lattice by v is the image of a
// shift of Z^3 by any lift of v; the shortest lift in the l1 norm has
// hops(v) <= H steps, since +-e1, +-e2, +-e3 are the six neighbours. So the
// noisy point is (H/Scale)-DP for every dither, H/Scale <= eps, and the
// projection is post-processing: the pair as a whole is eps-LDP, hence so
// is each of its parameters, and so is a lone last parameter (paired with
// the center). A scale of H/(2 eps), giving 2 eps per pair, is not enough:
// changing one coordinate can move the point nearly H hops, so a single
// parameter could cost up to 2 eps (found in review).
//
// Output: c + r(p - d), p the (projected) point. Without the projection
// it is unbiased with per-coordinate variance r^2 Delta^2 (1.5 Var Z +
// 5/72) (the three directions add 3/2 Var Z per coordinate). The
// projection is a bias toward the center when the noise leaves the ball;
// New chooses Delta (through H_in = 1..M) to minimize that variance plus
// the square of a bound on the bias, Delta E[(|z1|+|z2|+|z3| - (M -
// H_in))+]. The remaining bias is measured in the tests and in the docs.
type jopeqHex struct {
	eps    float64
	rate   int
	radius int64 // M
	ball   *lattice.HexCode
	ballf  hexFields // the ball's points as integer fields
	hex    lattice.Hex
	cover  *lattice.HexCode
	sens   int64 // H
	noise  indexNoise
}

// maxHexRate bounds jopeq's hexagonal rate: the design search costs about
// 8 times more per bit (7 s at rate 9 on this project's machine).
const maxHexRate = 8

func newJopeqHex(eps float64, rate int) (*jopeqHex, error) {
	if rate > maxHexRate {
		return nil, fmt.Errorf("mech: jopeq: hexagonal rate %d above %d is not supported (its design search grows about 8x per bit)", rate, maxHexRate)
	}
	radius := lattice.BallRadius(1 << (2 * rate))
	ball, err := lattice.HexBall(radius)
	if err != nil {
		return nil, fmt.Errorf("mech: jopeq: %w", err)
	}
	ballf := newHexFields(ball)
	var best *jopeqHex
	bestCost := math.Inf(1)
	for in := int64(1); in <= radius; in++ {
		step, err := lattice.HexCoverStepFunc(1, func(c *lattice.HexCode) bool { return coverHops(c) <= in })
		if err != nil {
			return nil, fmt.Errorf("mech: jopeq: %w", err)
		}
		cover, err := lattice.HexCover(step, 1)
		if err != nil {
			return nil, fmt.Errorf("mech: jopeq: %w", err)
		}
		m := &jopeqHex{eps: eps, rate: rate, radius: radius, ball: ball, ballf: ballf, hex: lattice.Hex{Step: step}, cover: cover, sens: coverSpan(cover)}
		if m.noise, err = newIndexNoise(float64(m.sens) / eps); err != nil {
			if best == nil {
				return nil, fmt.Errorf("mech: jopeq: epsilon %v: %w", eps, err)
			}
			break
		}
		bias := step * m.excess(radius-coverHops(cover))
		if cost := m.unclampedVar() + bias*bias; cost < bestCost {
			best, bestCost = m, cost
		}
	}
	if best == nil {
		return nil, fmt.Errorf("mech: jopeq: epsilon %v, rate %d: no hexagonal design has a finite cost", eps, rate)
	}
	return best, nil
}

// coverHops is the largest hop count of a point of the cover.
func coverHops(c *lattice.HexCode) int64 {
	h := int64(0)
	c.Rows(func(j, lo, hi int64) { h = max(h, lattice.Hops(lo, j), lattice.Hops(hi, j)) })
	return h
}

// coverSpan is the largest hop distance between two points of the cover:
// the hop distance is the largest absolute difference of cube coordinates
// (i, j, -i-j), so it is the largest span of one of them.
func coverSpan(c *lattice.HexCode) int64 {
	const big = math.MaxInt64
	minI, maxI, minJ, maxJ, minK, maxK := int64(big), int64(-big), int64(big), int64(-big), int64(big), int64(-big)
	c.Rows(func(j, lo, hi int64) {
		minI, maxI = min(minI, lo), max(maxI, hi)
		minJ, maxJ = min(minJ, j), max(maxJ, j)
		minK, maxK = min(minK, -hi-j), max(maxK, -lo-j)
	})
	return max(maxI-minI, maxJ-minJ, maxK-minK)
}

// excess is E[(S - room)+], S = |z1|+|z2|+|z3|, the mean number of hops
// by which the noise can leave the ball. It is computed as E[S] - room +
// E[(room - S)+], with E|z| = 2Aq/(1-q)^2 in closed form and the exact law
// of S below room by convolution, so its cost is O(room^2) whatever the
// noise scale (summing the law of S up to its 1e-18 tail took O(Scale^2):
// hours at eps 1e-6).
func (m *jopeqHex) excess(room int64) float64 {
	omq := -math.Expm1(-1 / m.noise.lap.Scale())
	e := 3*2*m.noise.a*m.noise.q/(omq*omq) - float64(room)
	if room <= 0 {
		return e
	}
	one := make([]float64, room)
	one[0] = m.noise.prob(0)
	for a := int64(1); a < room; a++ {
		one[a] = 2 * m.noise.prob(a)
	}
	conv := func(x, y []float64) []float64 {
		out := make([]float64, room)
		for i, a := range x {
			for j, b := range y[:room-int64(i)] {
				out[i+j] += a * b
			}
		}
		return out
	}
	for s, pr := range conv(conv(one, one), one) {
		e += float64(room-int64(s)) * pr
	}
	return max(e, 0)
}

// unclampedVar is the per-coordinate variance in normalized units before
// the projection: Delta^2 (1.5 Var Z + 5/72).
func (m *jopeqHex) unclampedVar() float64 {
	return 1.5*m.noise.variance()*m.hex.Step*m.hex.Step + m.hex.SecondMoment()
}

func (m *jopeqHex) Name() string       { return "jopeq" }
func (m *jopeqHex) Coupling() Coupling { return Dithered }
func (m *jopeqHex) Alone() float64     { return 0 }
func (m *jopeqHex) Bits(n int) int     { return 8 * wire.PackedLen(latticeFields(n, 2), 2*m.rate) }

// Epsilon is the exact per-parameter privacy loss, H/Scale <= eps: the
// pair's, which bounds each of its parameters' (see jopeqHex).
func (m *jopeqHex) Epsilon() float64 { return m.noise.epsilon(m.sens) }

// point returns the projected noisy point for SDQ's point (i, j).
func (m *jopeqHex) point(i, j int64, src corr.Source) (int64, int64) {
	z1, z2, z3 := m.noise.sample(src), m.noise.sample(src), m.noise.sample(src)
	return lattice.Project(i+z1-z2, j+z2-z3, m.radius)
}

func (m *jopeqHex) Encode(dst []byte, w []float32, rg Range, s Slot) ([]byte, error) {
	if err := checkJopeq(w, rg, s); err != nil {
		return dst, err
	}
	n := len(w)
	p := wire.NewPacker(dst, 2*m.rate)
	d := newWordReader(s.Shared, 2*latticeFields(n, 2))
	for i := 0; i < n; i += 2 {
		u1, u2 := normalize(w[i], rg), 0.0
		if i+1 < n {
			u2 = normalize(w[i+1], rg)
		}
		dx, dy := m.hex.Dither(d.next(), d.next())
		a, b := m.hex.Nearest(u1+dx, u2+dy)
		idx, ok := m.ball.Index(m.point(a, b, s.Private))
		if !ok {
			return dst, fmt.Errorf("mech: jopeq: internal error: projected point outside the ball")
		}
		p.Put(uint32(idx))
	}
	return p.Bytes(), nil
}

func (m *jopeqHex) NewSum(n int, rg Range) (Sum, error) { return newLatticeSum(n, rg, m) }

// Fields is the two lattice coordinates of each pair's point, shifted by
// M: the point is linear in them, where its index in the ball is not.
func (m *jopeqHex) Fields(n int) int    { return 2 * latticeFields(n, 2) }
func (m *jopeqHex) ditherLen(n int) int { return m.Fields(n) }

// Levels is 2M+1, the span of the ball's coordinates.
func (m *jopeqHex) Levels() uint64 { return m.ballf.levels }

func (m *jopeqHex) Unpack(dst []uint64, payload []byte, n int) error {
	if err := checkFieldBuf(m, dst, n); err != nil {
		return err
	}
	return m.ballf.unpack(dst, payload, n, 2*m.rate)
}

func (m *jopeqHex) addDither(dsum []float64, src corr.Source) { addHexDither(dsum, m.hex, src) }

func (m *jopeqHex) decode(dst []float64, sum []uint64, dsum []float64, count int, rg Range) {
	m.ballf.decode(dst, sum, dsum, count, rg, m.hex)
}

func (m *jopeqHex) DecodeSum(dst []float64, sum []uint64, count int, rg Range, slots []Slot) error {
	return decodeLatticeSum(m, dst, sum, count, rg, slots)
}

// Support is r times the decoder's reach: -1 + (t - h) Delta minus a
// dither of at most Delta/2, t in [t(0), t(N-1)].
func (m *jopeqScalar) Support(rg Range) (float64, error) {
	if err := rg.Validate(); err != nil {
		return 0, err
	}
	lo := -1 + (-m.shift-float64(m.low))*m.cell.Step
	hi := -1 + (float64(m.levels-1)+m.shift-float64(m.low))*m.cell.Step
	return rg.Radius * (max(-lo, hi) + m.cell.Step/2), nil
}

// Support is r times the reach of the ball's points minus a dither.
func (m *jopeqHex) Support(rg Range) (float64, error) {
	if err := rg.Validate(); err != nil {
		return 0, err
	}
	return rg.Radius * hexReach(m.ball, m.hex), nil
}
