package mech

import (
	"encoding/binary"
	"fmt"
	"math"

	"github.com/fedpq/fedpq/corr"
	"github.com/fedpq/fedpq/mech/noise"
	"github.com/fedpq/fedpq/wire"
)

func init() {
	Register(Info{
		Name:    "jopeq-compat",
		Summary: "JoPEQ as its authors' code runs it (second-moment-matched Laplace or t noise, 1/(3 RMS) scaling sent in the clear): not formally eps-LDP",
		LDP:     false,
		New: func(c Config) (Mechanism, error) {
			if err := c.ValidateEpsilon(); err != nil {
				return nil, err
			}
			if c.Lattice != 1 && c.Lattice != 2 {
				return nil, fmt.Errorf("mech: jopeq-compat: lattice dimension %d must be 1 (scalar) or 2 (hexagonal)", c.Lattice)
			}
			if c.Rate < 1 || c.Rate > 31 {
				return nil, fmt.Errorf("mech: jopeq-compat: rate %d bits per parameter must be in 1..31", c.Rate)
			}
			if c.Lattice == 1 {
				return newCompatScalar(c.Epsilon, c.Rate)
			}
			return newCompatHex(c.Epsilon, c.Rate)
		},
	})
}

// jopeq-compat reproduces the JoPEQ authors' code (github.com/langnatalie/
// JoPEQ, federated_utils.py, privacy.py, quantization.py, configurations.py)
// inside fedpq's contract. It is NOT formally eps-LDP: the paper's
// Theorems III.1-III.2 ask for privacy noise whose characteristic function
// is the target's divided by the uniform cell's, and that ratio is
// unbounded (the cell's characteristic function sin(t Delta/2)/(t Delta/2)
// has zeros), so no such noise exists; the code instead matches second
// moments, which makes the total error have the target's variance but not
// its distribution, and a server that knows the dither sees the privacy
// noise alone, at less than the target's variance. On top of that the
// scaling sends the tensor's mean and RMS in the clear, and nothing bounds
// a normalized parameter, so there is no sensitivity.
//
// What it does, per tensor (after fedpq's clipping to the public range):
//
//   - Scaling: m = mean, s = 3*RMS of the centered tensor (for L = 2, a
//     mean per coordinate of the pairs and s = 3*sqrt(sum of squares /
//     pairs)); both sent as float32 and used as sent, u = (w - m)/s.
//   - L = 1: gamma = 1.5 sqrt(1 + 2 (2/eps)^2), Delta = 2 gamma/(2^Rate+1),
//     Laplace noise of variance 2 (2/eps)^2 - Delta^2/12 (the target
//     Laplace(2/eps) minus the dither's variance), dither uniform on
//     [-Delta/2, Delta/2), and the mid-tread quantizer Delta*round()
//     clamped to +-Delta 2^(Rate-1): 2^Rate + 1 levels.
//   - L = 2: the authors' lattice, generator G = [[1, 0], [1/sqrt3,
//     2/sqrt3]] scaled by Delta = 2 gamma/(2^Rate+1), gamma = 1.5 sqrt(1 +
//     sigma^2 nu/(nu-2)); quantization rounds the coordinates in the basis
//     G (Babai rounding: its cell is the parallelogram G [-1/2, 1/2)^2, not
//     the hexagon) and clamps each to +-2^(Rate-1); the dither is G times a
//     uniform vector, uniform on that parallelogram. The noise is the
//     bivariate t with nu = 4 and shape sigma^2 I - (nu-2)/nu Cov(dither),
//     so that its covariance plus the dither's is the target's
//     sigma^2 nu/(nu-2) I.
//   - The server outputs m + s (Q(u + n + d) - d).
//
// Choices where the code leaves one open: nu = 4 (its default) and sigma^2
// solved from the t mechanism's eps (the paper's eq. (11) with the exponent
// (nu+d)/2 of Reimherr and Awan, not the printed (nu+d)^2) for Sigma^-1/2
// sensitivity 1/sigma: the sensitivity that reproduces the code's table of
// (eps, sigma^2, nu) triples, except its default (4, 0.2, 4), which is eps
// 3.2 by that formula. Cov(dither) is the exact Delta^2/12 G G^T rather
// than the code's estimate from 1000 random samples. Pairs are
// (w[2i], w[2i+1]), not the code's (w[i], w[i+n/2]); an odd tensor pairs
// its last parameter with its coordinate mean (the code fails there). A
// constant tensor has RMS 0, where the code divides by zero; here s = r.
//
// Bits: the levels are 2^Rate + 1 per coordinate, which need Rate + 1 bits
// each, plus 64 bits (m, s) for L = 1 or 96 bits (two means, s) for L = 2.
// The paper counts Rate bits and calls the side information negligible.
//
// Output distribution (when nothing is clamped): w + s (n + e), e uniform
// on the cell and independent of n: mean w, covariance s^2 times the
// target's (8/eps^2 per parameter for L = 1, sigma^2 nu/(nu-2) for L = 2).
type compatScalar struct {
	eps     float64
	rate    int
	step    float64 // Delta
	laplace float64 // b of the second-moment-matched Laplace noise
}

func newCompatScalar(eps float64, rate int) (*compatScalar, error) {
	b := 2 / eps
	gamma := 1.5 * math.Sqrt(1+2*b*b)
	step := 2 * gamma / (math.Ldexp(1, rate) + 1)
	v := 2*b*b - step*step/12
	if !(v > 0) {
		return nil, fmt.Errorf("mech: jopeq-compat: at eps %v and rate %d the dither's variance %v exceeds the Laplace target's %v: the second-moment-matched noise does not exist", eps, rate, step*step/12, 2*b*b)
	}
	m := &compatScalar{eps: eps, rate: rate, step: step, laplace: math.Sqrt(v / 2)}
	if _, err := noise.NewLaplace(m.laplace); err != nil {
		return nil, fmt.Errorf("mech: jopeq-compat: %w", err)
	}
	return m, nil
}

func (m *compatScalar) Name() string       { return "jopeq-compat" }
func (m *compatScalar) Coupling() Coupling { return Dithered }
func (m *compatScalar) Alone() float64     { return 0 }
func (m *compatScalar) Bits(n int) int     { return 64 + 8*wire.PackedLen(n, m.rate+1) }

func (m *compatScalar) Encode(dst []byte, w []float32, rg Range, s Slot) ([]byte, error) {
	if err := checkJopeq(w, rg, s); err != nil {
		return dst, err
	}
	if _, _, _, err := compatLimits(rg, 1); err != nil {
		return dst, err
	}
	x := make([]float64, len(w))
	for i, v := range w {
		x[i] = rg.Clip(float64(v))
	}
	mean, scale := compatScale([][]float64{x}, len(x), rg)
	dst = binary.LittleEndian.AppendUint32(dst, math.Float32bits(mean[0]))
	dst = binary.LittleEndian.AppendUint32(dst, math.Float32bits(scale))
	mu, sc := float64(mean[0]), float64(scale)
	half := int64(1) << (m.rate - 1)
	p := wire.NewPacker(dst, m.rate+1)
	d := newWordReader(s.Shared, len(w))
	for _, v := range x {
		u := (v-mu)/sc + noise.Laplace(s.Private, m.laplace) + (unitFloat(d.next())-0.5)*m.step
		k := int64(math.RoundToEven(u / m.step)) // torch.round rounds halves to even
		p.Put(uint32(min(max(k, -half), half) + half))
	}
	return p.Bytes(), nil
}

func (m *compatScalar) NewSum(n int, rg Range) (Sum, error) {
	if n < 0 {
		return nil, fmt.Errorf("mech: negative tensor size %d", n)
	}
	lo, hi, smax, err := compatLimits(rg, 1)
	if err != nil {
		return nil, err
	}
	return &compatSum{n: n, dim: 1, lo: lo, hi: hi, smax: smax, width: m.rate + 1, limit: uint32(1)<<m.rate + 1, meanSum: meanSum{sum: make([]float64, n)},
		decode: func(f []uint32, d *wordReader) (float64, float64) {
			k := float64(int64(f[0]) - int64(1)<<(m.rate-1))
			return (k - (unitFloat(d.next()) - 0.5)) * m.step, 0
		}}, nil
}

// unitFloat is a uniform number in [0, 1) from the top 53 bits of a word.
func unitFloat(u uint64) float64 { return float64(u>>11) * 0x1p-53 }

// compatScale returns the authors' scaling of the coordinates xs (one slice
// per coordinate of a block, pairs counted in blocks): the coordinate means
// and s = 3 sqrt(sum of squared deviations / blocks), as the float32s that
// are sent. A zero or unrepresentable s becomes the range radius. The
// values are clipped to rg, so each mean lies in [c-r, c+r]: it is clamped
// there against the rounding of the sum, and an empty coordinate (the
// second of a one-parameter tensor, L = 2) gets c, so that the server can
// refuse any mean outside the range (compatLimits).
func compatScale(xs [][]float64, blocks int, rg Range) ([]float32, float32) {
	mean := make([]float32, len(xs))
	ss := 0.0
	for c, x := range xs {
		mu := rg.Center
		if len(x) > 0 {
			mu = 0
			for _, v := range x {
				mu += v
			}
			mu = min(max(mu/float64(len(x)), rg.Center-rg.Radius), rg.Center+rg.Radius)
		}
		mean[c] = float32(mu)
		for _, v := range x {
			ss += (v - float64(mean[c])) * (v - float64(mean[c]))
		}
	}
	s := float32(0)
	if blocks > 0 {
		s = float32(3 * math.Sqrt(ss/float64(blocks)))
	}
	if !(s > 0) || math.IsInf(float64(s), 0) {
		s = float32(rg.Radius)
	}
	return mean, s
}

// compatLimits is what an honest jopeq-compat header holds for rg and dim
// coordinates per block: means in [lo, hi], c ± r rounded to float32, and
// a scale in (0, smax]. Each coordinate's deviations from its sent mean
// have an RMS of at most r + e, e the float32 rounding of the mean plus
// the float64 error of its sum (together at most one float32 ulp of |c|+r
// for tensors below 2^29 parameters), and s sums dim coordinates, so
// s <= 3 sqrt(dim) (r + e); smax adds a relative 2^-20 for the rounding
// of s and is rounded up to a float32. A range whose radius is not a
// positive normal float32, or whose smax is not a finite float32, is
// refused: the scale could not be sent.
func compatLimits(rg Range, dim int) (lo, hi, smax float32, err error) {
	if err := rg.Validate(); err != nil {
		return 0, 0, 0, err
	}
	if !(rg.Radius >= 0x1p-126) || !(math.Abs(rg.Center)+rg.Radius <= math.MaxFloat32) {
		return 0, 0, 0, fmt.Errorf("mech: jopeq-compat: range %v±%v does not fit float32 headers", rg.Center, rg.Radius)
	}
	lo, hi = float32Bounds(rg, rg.Radius)
	top := max(-lo, hi)
	ulp := float64(math.Nextafter32(top, math.MaxFloat32)) - float64(top)
	bound := 3 * math.Sqrt(float64(dim)) * (rg.Radius + ulp) * (1 + 0x1p-20)
	smax = float32(bound)
	if float64(smax) < bound {
		smax = math.Nextafter32(smax, math.MaxFloat32)
	}
	if math.IsInf(float64(smax), 0) || float64(smax) < bound {
		return 0, 0, 0, fmt.Errorf("mech: jopeq-compat: range %v±%v: scale bound %v overflows float32", rg.Center, rg.Radius, bound)
	}
	return lo, hi, smax, nil
}

// compatHex is jopeq-compat with the authors' two-dimensional lattice; see
// compatScalar.
type compatHex struct {
	eps          float64
	rate         int
	nu, sigma2   float64
	step         float64    // Delta
	chol         [3]float64 // lower Cholesky factor (l11, l21, l22) of the t shape
	gen, inverse [4]float64 // Delta*G and its inverse, row-major
}

// compatNu is the degrees of freedom of the authors' default.
const compatNu = 4

func newCompatHex(eps float64, rate int) (*compatHex, error) {
	m := &compatHex{eps: eps, rate: rate, nu: compatNu, sigma2: tSigma2(eps, compatNu)}
	gamma := 1.5 * math.Sqrt(1+m.sigma2*m.nu/(m.nu-2))
	m.step = 2 * gamma / (math.Ldexp(1, rate) + 1)
	s3 := math.Sqrt(3)
	g := [4]float64{1, 0, 1 / s3, 2 / s3} // rows of G: columns (1, 1/sqrt3) and (0, 2/sqrt3)
	det := g[0]*g[3] - g[1]*g[2]
	for i := range g {
		m.gen[i] = m.step * g[i]
	}
	m.inverse = [4]float64{g[3] / det / m.step, -g[1] / det / m.step, -g[2] / det / m.step, g[0] / det / m.step}
	// Cov(dither) = Delta^2/12 G G^T; shape = sigma^2 I - (nu-2)/nu Cov.
	c := m.step * m.step / 12 * (m.nu - 2) / m.nu
	a11 := m.sigma2 - c*(g[0]*g[0]+g[1]*g[1])
	a21 := -c * (g[2]*g[0] + g[3]*g[1])
	a22 := m.sigma2 - c*(g[2]*g[2]+g[3]*g[3])
	if !(a11 > 0) || !(a11*a22-a21*a21 > 0) {
		return nil, fmt.Errorf("mech: jopeq-compat: at eps %v and rate %d the dither's covariance exceeds the t target's: the second-moment-matched noise does not exist", eps, rate)
	}
	l11 := math.Sqrt(a11)
	l21 := a21 / l11
	m.chol = [3]float64{l11, l21, math.Sqrt(a22 - l21*l21)}
	return m, nil
}

// tSigma2 solves the multivariate t mechanism's privacy loss for sigma^2:
// eps = (nu+2)/2 log((1 + c^2/nu)/(1 + (c-D)^2/nu)), D = 1/sigma, c = (D +
// sqrt(D^2 + 4 nu))/2 (Reimherr and Awan 2019, d = 2). The loss falls as
// sigma^2 grows, so bisection on log sigma^2 finds it.
func tSigma2(eps, nu float64) float64 {
	loss := func(s2 float64) float64 {
		d := 1 / math.Sqrt(s2)
		c := (d + math.Sqrt(d*d+4*nu)) / 2
		return (nu + 2) / 2 * math.Log((1+c*c/nu)/(1+(c-d)*(c-d)/nu))
	}
	lo, hi := -60.0, 60.0
	for range 200 {
		mid := (lo + hi) / 2
		if loss(math.Exp(mid)) > eps {
			lo = mid
		} else {
			hi = mid
		}
	}
	return math.Exp(hi)
}

func (m *compatHex) Name() string       { return "jopeq-compat" }
func (m *compatHex) Coupling() Coupling { return Dithered }
func (m *compatHex) Alone() float64     { return 0 }
func (m *compatHex) Bits(n int) int     { return 96 + 8*wire.PackedLen(2*latticeFields(n, 2), m.rate+1) }

// noise draws the bivariate t noise: L z sqrt(nu/W), L the Cholesky
// factor of the shape, z standard normal, W chi-square with nu = 4
// degrees of freedom (four squared normals), all from the client's coins.
func (m *compatHex) noise(src corr.Source) (float64, float64) {
	z1, z2 := noise.Gaussian(src, 1), noise.Gaussian(src, 1)
	w := 0.0
	for range compatNu {
		g := noise.Gaussian(src, 1)
		w += g * g
	}
	f := math.Sqrt(m.nu / w)
	return m.chol[0] * z1 * f, (m.chol[1]*z1 + m.chol[2]*z2) * f
}

// dither is Delta G v with v uniform on [-1/2, 1/2)^2: uniform on the
// parallelogram cell of the basis rounding.
func (m *compatHex) dither(u1, u2 uint64) (float64, float64) {
	v1, v2 := unitFloat(u1)-0.5, unitFloat(u2)-0.5
	return m.gen[0]*v1 + m.gen[1]*v2, m.gen[2]*v1 + m.gen[3]*v2
}

func (m *compatHex) Encode(dst []byte, w []float32, rg Range, s Slot) ([]byte, error) {
	if err := checkJopeq(w, rg, s); err != nil {
		return dst, err
	}
	if _, _, _, err := compatLimits(rg, 2); err != nil {
		return dst, err
	}
	n := len(w)
	pairs := latticeFields(n, 2)
	xs := [][]float64{make([]float64, 0, pairs), make([]float64, 0, pairs)}
	for i, v := range w {
		xs[i%2] = append(xs[i%2], rg.Clip(float64(v)))
	}
	mean, scale := compatScale(xs, pairs, rg)
	for _, mu := range mean {
		dst = binary.LittleEndian.AppendUint32(dst, math.Float32bits(mu))
	}
	dst = binary.LittleEndian.AppendUint32(dst, math.Float32bits(scale))
	sc := float64(scale)
	half := int64(1) << (m.rate - 1)
	p := wire.NewPacker(dst, m.rate+1)
	d := newWordReader(s.Shared, 2*pairs)
	for k := range pairs {
		var u [2]float64
		for c := range 2 {
			if k < len(xs[c]) {
				u[c] = (xs[c][k] - float64(mean[c])) / sc
			}
		}
		n1, n2 := m.noise(s.Private)
		dx, dy := m.dither(d.next(), d.next())
		x, y := u[0]+n1+dx, u[1]+n2+dy
		for _, c := range []float64{m.inverse[0]*x + m.inverse[1]*y, m.inverse[2]*x + m.inverse[3]*y} {
			p.Put(uint32(min(max(int64(math.RoundToEven(c)), -half), half) + half))
		}
	}
	return p.Bytes(), nil
}

func (m *compatHex) NewSum(n int, rg Range) (Sum, error) {
	if n < 0 {
		return nil, fmt.Errorf("mech: negative tensor size %d", n)
	}
	lo, hi, smax, err := compatLimits(rg, 2)
	if err != nil {
		return nil, err
	}
	half := int64(1) << (m.rate - 1)
	return &compatSum{n: n, dim: 2, lo: lo, hi: hi, smax: smax, width: m.rate + 1, limit: uint32(1)<<m.rate + 1, meanSum: meanSum{sum: make([]float64, n)},
		decode: func(f []uint32, d *wordReader) (float64, float64) {
			k1, k2 := float64(int64(f[0])-half), float64(int64(f[1])-half)
			dx, dy := m.dither(d.next(), d.next())
			return m.gen[0]*k1 + m.gen[1]*k2 - dx, m.gen[2]*k1 + m.gen[3]*k2 - dy
		}}, nil
}

// compatSum is jopeq-compat's server: a header of dim float32 means in
// [lo, hi] and one float32 scale in (0, smax] (compatLimits), then dim
// fields of width bits per block of dim parameters, each below limit.
type compatSum struct {
	n, dim, width int
	limit         uint32
	lo, hi, smax  float32
	decode        func(f []uint32, d *wordReader) (float64, float64)
	meanSum
}

func (s *compatSum) Add(payload []byte, sl Slot) error {
	if sl.Shared == nil {
		return fmt.Errorf("mech: a dithered sum needs the client's dither stream (Slot.Shared is nil)")
	}
	head := 4 * (s.dim + 1)
	if len(payload) < head {
		return fmt.Errorf("mech: jopeq-compat payload of %d bytes is shorter than its %d-byte header", len(payload), head)
	}
	var side [3]float64
	for i := range s.dim + 1 {
		v := math.Float32frombits(binary.LittleEndian.Uint32(payload[4*i:]))
		// NaN fails every comparison.
		if i < s.dim && !(v >= s.lo && v <= s.hi) {
			return fmt.Errorf("mech: jopeq-compat header mean %d is %v, outside the range [%v, %v]", i, v, s.lo, s.hi)
		}
		if i == s.dim && !(v > 0 && v <= s.smax) {
			return fmt.Errorf("mech: jopeq-compat scale %v is outside (0, %v], what clipped inputs give", v, s.smax)
		}
		side[i] = float64(v)
	}
	scale := side[s.dim]
	blocks := latticeFields(s.n, s.dim)
	fields := s.dim * blocks
	u, err := wire.NewUnpacker(payload[head:], fields, s.width)
	if err != nil {
		return fmt.Errorf("mech: %w", err)
	}
	for i := range fields {
		if f := u.Next(); f >= s.limit {
			return fmt.Errorf("mech: field %d is %d, outside the %d quantizer levels", i, f, s.limit)
		}
	}
	u, _ = wire.NewUnpacker(payload[head:], fields, s.width)
	d := newWordReader(sl.Shared, fields)
	f := make([]uint32, s.dim)
	for b := range blocks {
		for c := range f {
			f[c] = u.Next()
		}
		x, y := s.decode(f, d)
		s.sum[s.dim*b] += side[0] + scale*x
		if s.dim == 2 && 2*b+1 < s.n {
			s.sum[2*b+1] += side[1] + scale*y
		}
	}
	s.count++
	return nil
}

// compatSupport is the largest distance from c of a decoded value: a mean
// at most an end of [lo, hi], plus smax times the largest normalized
// coordinate, reach.
func compatSupport(rg Range, dim int, reach float64) (float64, error) {
	lo, hi, smax, err := compatLimits(rg, dim)
	if err != nil {
		return 0, err
	}
	return max(rg.Center-float64(lo), float64(hi)-rg.Center) + float64(smax)*reach, nil
}

// Support: a level k in -2^(Rate-1)..2^(Rate-1) minus a dither of at most
// half a step is at most (2^(Rate-1) + 1/2) Delta from 0.
func (m *compatScalar) Support(rg Range) (float64, error) {
	return compatSupport(rg, 1, (math.Ldexp(1, m.rate-1)+0.5)*m.step)
}

// Support: the point is Delta G (k - v) with |k_i - v_i| <= 2^(Rate-1) +
// 1/2 = a; its first coordinate is at most Delta a, its second Delta a
// (1 + 2)/sqrt3 = sqrt3 Delta a.
func (m *compatHex) Support(rg Range) (float64, error) {
	return compatSupport(rg, 2, math.Sqrt(3)*(math.Ldexp(1, m.rate-1)+0.5)*m.step)
}
