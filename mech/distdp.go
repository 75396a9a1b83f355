package mech

import (
	"fmt"
	"math"
	"math/bits"
	"slices"
	"sync"

	"gonum.org/v1/gonum/stat/distuv"

	"github.com/fedpq/fedpq/corr"
	"github.com/fedpq/fedpq/wire"
)

func init() {
	Register(Info{
		Name: "ddgauss",
		Summary: "distributed discrete Gaussian (Kairouz, Liu, Steinke 2021), TFF's baseline under secure aggregation: central (eps, delta)-DP per tensor per round " +
			"against a server that sees only the sum of Config.Clients clients, or with Noise z > 0 DP-FedAvg's L2 mode (one L2-clipped vector, RDP for zero-out); " +
			"no LDP; ModBits (16) bits per parameter, padded to a power of two",
		New: func(c Config) (Mechanism, error) { return newDistDP(c, "ddgauss") },
	})
	Register(Info{
		Name: "skellam",
		Summary: "Skellam mechanism (Agarwal, Kairouz, Liu 2021), TFF's baseline under secure aggregation: central (eps, delta)-DP per tensor per round " +
			"against a server that sees only the sum of Config.Clients clients, or with Noise z > 0 DP-FedAvg's L2 mode (one L2-clipped vector, RDP for zero-out); " +
			"no LDP; ModBits (16) bits per parameter, padded to a power of two",
		New: func(c Config) (Mechanism, error) { return newDistDP(c, "skellam") },
	})
}

// distDP is the pipeline that TensorFlow Federated runs under secure
// aggregation (DistributedDpSumFactory), with the noise of ddgauss or
// skellam. A client, for a tensor of d parameters, padded with zeros to
// d' = the next power of two:
//
//  1. clips each parameter to [c-r, c+r] and centers it: x = clip(w) - c,
//     so ||x||_2 <= C = r sqrt(d), the L2 bound of the papers;
//  2. rotates and scales it: y = s H D x / sqrt(d'), H the d'x d'
//     Walsh-Hadamard matrix, D a diagonal of random signs, s the scale
//     (1/s the papers' granularity gamma);
//  3. rounds y randomly and unbiasedly to integers, again until the
//     rounded vector's norm is at most Bound (conditional rounding,
//     Kairouz et al., Sec. 4.1);
//  4. adds integer noise: per coordinate N_Z(0, S) (ddgauss: the exact
//     discrete Gaussian of mech/noise) or Poisson(lambda) - Poisson(lambda)
//     (skellam), each client 1/n of the central noise;
//  5. sends each coordinate modulo 2^b, in b bits (modular clipping).
//
// The server sums the fields modulo 2^b (what secure aggregation reveals),
// maps each sum to [-2^(b-1), 2^(b-1)), undoes the rotation exactly in
// integers, divides by s and the count, adds c, and clamps the result to
// c ± 2^(b-1) r (Support; far beyond any estimate that carries
// information, so it only bounds the output for every tensor size).
//
// The rotation is public: its signs are derived from a fixed, published
// key and d' (distRotation), the same for every client, round and server.
// Privacy never depends on it; it spreads the vector over the coordinates
// so that the rounding and the modular range cost little.
//
// Guarantee: central (eps, delta)-DP of one round's sum of n clients for
// one tensor, against the server that sees only that sum (through secure
// aggregation), for the replacement of one client's tensor (L2 sensitivity
// twice a client's Bound; TFF's zero-out relation would need half the
// noise standard deviation). It holds if at least n clients add their
// noise (fewer clients: weaker), and it is not LDP: a client's message
// alone carries 1/n of the noise. Calibration: distParams. The L2 mode
// (Config.Noise > 0, distL2) takes one L2-clipped vector instead, sets the
// noise from the noise multiplier and states RDP for the zero-out
// relation (sensitivity one Bound).
type distDP struct {
	name    string
	eps     float64
	delta   float64
	z       float64 // the L2 mode's noise multiplier (distL2); 0 per round
	bits    int     // b
	clients int     // n
	k       float64
	cache   sync.Map // d' -> *distParams
}

// distBeta is the failure probability of one conditional rounding
// attempt's bound, exp(-1/2) as in Kairouz et al. and TFF.
var distBeta = math.Exp(-0.5)

// distMaxBits caps ModBits: at b = 18 the per-client noise variance stays
// within noise.NewIntegerGaussian's 2^30 (the heuristic keeps the local
// standard deviation below 2^b/(2k)).
const distMaxBits = 18

func newDistDP(c Config, name string) (Mechanism, error) {
	if c.Noise != 0 {
		return newDistL2(c, name)
	}
	eps, delta, err := c.epsDelta(name)
	if err != nil {
		return nil, err
	}
	b, n, k, err := distShape(c, name)
	if err != nil {
		return nil, err
	}
	return &distDP{name: name, eps: eps, delta: delta, bits: b, clients: n, k: k}, nil
}

// distShape checks and returns the bit width b, the clients n and TFF's k.
func distShape(c Config, name string) (b, n int, k float64, err error) {
	b = c.ModBits
	if b == 0 {
		b = 16
	}
	if b < 2 || b > distMaxBits {
		return 0, 0, 0, fmt.Errorf("mech: %s: modular bits %d must be in 2..%d", name, c.ModBits, distMaxBits)
	}
	n = c.Clients
	if n == 0 {
		n = 1
	}
	// k standard deviations of the sum fit in the modular range: TFF's
	// defaults, 4 for ddgauss and 3 for skellam.
	k = 4.0
	if name == "skellam" {
		k = 3
	}
	if n < 1 || float64(n)*k*k >= math.Ldexp(1, 2*b) {
		return 0, 0, 0, fmt.Errorf("mech: %s: %d clients do not fit %d modular bits (need n k^2 < 2^(2b), k = %v)", name, c.Clients, b, k)
	}
	return b, n, k, nil
}

func (m *distDP) Name() string       { return m.name }
func (m *distDP) Coupling() Coupling { return Independent }
func (m *distDP) Alone() float64     { return 0 }

// padded is d', the next power of two at or above n (0 for n = 0).
func padded(n int) int {
	if n <= 1 {
		return n
	}
	return 1 << bits.Len(uint(n-1))
}

// Bits is b bits for each of the d' rotated coordinates.
func (m *distDP) Bits(n int) int { return m.bits * padded(n) }

func (m *distDP) Fields(n int) int { return padded(n) }
func (m *distDP) Levels() uint64   { return 1 << m.bits }
func (m *distDP) Modulus() uint64  { return 1 << m.bits }

// Support is 2^(b-1) r: Sum.Mean clamps its estimate there.
func (m *distDP) Support(rg Range) (float64, error) {
	if err := rg.Validate(); err != nil {
		return 0, err
	}
	h := math.Ldexp(rg.Radius, m.bits-1)
	if math.IsInf(rg.Center-h, 0) || math.IsInf(rg.Center+h, 0) {
		return 0, fmt.Errorf("mech: %s: range %v±%v: its support ±%v overflows float64", m.name, rg.Center, rg.Radius, h)
	}
	return h, nil
}

// params returns the calibration for tensors of n parameters (n >= 1).
func (m *distDP) params(n int) (*distParams, error) {
	dp := padded(n)
	if p, ok := m.cache.Load(dp); ok {
		return p.(*distParams), nil
	}
	var p *distParams
	var err error
	if m.z > 0 {
		p, err = distL2Params(m.name, m.z, m.bits, m.clients, m.k, dp)
	} else {
		p, err = calibrate(m.name, m.eps, m.delta, m.bits, m.clients, m.k, dp)
	}
	if err != nil {
		return nil, err
	}
	p.signs = distRotation(dp)
	got, _ := m.cache.LoadOrStore(dp, p)
	return got.(*distParams), nil
}

// distRotationKey is the public key of the rotation's signs: the server
// and every client derive the same D from it and the padded size.
var distRotationKey = []byte("fedpq/v1 public rotation (not secret)")

// distRotation is the diagonal D: bit i of the words set means -1.
func distRotation(dp int) []uint64 {
	w := make([]uint64, (dp+63)/64)
	corr.Derive(distRotationKey, "distdp-rotation", uint64(dp)).Fill(w)
	return w
}

// roundConditional rounds each y[i] into z[i], up with probability its
// fractional part (to 2^-64), again until the squared norm of z is at most
// limit, and returns the number of tries (Kairouz et al.'s conditional
// rounding). The squared norm is exact in uint64: limit < 2^61, a square
// beyond 2^62 counts as over, and adding stops once past the limit.
func roundConditional(z []int64, y []float64, limit uint64, src corr.Source) (int, error) {
	for try := 1; try <= distMaxTries; try++ {
		var norm2 uint64
		for i, v := range y {
			fl := math.Floor(v)
			z[i] = int64(fl)
			// v - fl is exact for |v| < 2^52, and below 1.
			if src.Uint64() < uint64(math.Ldexp(v-fl, 64)) {
				z[i]++
			}
			if norm2 <= limit {
				a := uint64(z[i])
				if z[i] < 0 {
					a = uint64(-z[i])
				}
				if a > 1<<31 {
					norm2 = limit + 1
				} else {
					norm2 += a * a
				}
			}
		}
		if norm2 <= limit {
			return try, nil
		}
	}
	return distMaxTries, fmt.Errorf("conditional rounding failed %d times", distMaxTries)
}

func flipped(signs []uint64, i int) bool { return signs[i>>6]>>(i&63)&1 == 1 }

// fwht is the unnormalized Walsh-Hadamard transform, in place (len a power
// of two); H is symmetric and H H = d' I.
func fwht[T int64 | float64](a []T) {
	for h := 1; h < len(a); h *= 2 {
		for i := 0; i < len(a); i += 2 * h {
			for j := i; j < i+h; j++ {
				x, y := a[j], a[j+h]
				a[j], a[j+h] = x+y, x-y
			}
		}
	}
}

// scale is s for range rg and n parameters: s C = p.sc with C = r sqrt(n).
func (p *distParams) scale(rg Range, n int) float64 {
	return p.sc / (rg.Radius * math.Sqrt(float64(n)))
}

// l2Bound is C, the L2 bound of a client's vector of n parameters: the
// radius itself in the L2 mode, r sqrt(n) per round.
func (m *distDP) l2Bound(rg Range, n int) float64 {
	if m.z > 0 {
		return rg.Radius
	}
	return rg.Radius * math.Sqrt(float64(n))
}

func (m *distDP) check(n int, rg Range) (*distParams, float64, error) {
	h, err := m.Support(rg)
	if err != nil {
		return nil, 0, err
	}
	if m.z > 0 && n > distL2MaxParams {
		return nil, 0, fmt.Errorf("mech: %s: vector of %d parameters: at most %d", m.name, n, distL2MaxParams)
	}
	p, err := m.params(n)
	if err != nil {
		return nil, 0, err
	}
	if s := p.sc / m.l2Bound(rg, n); !(s > 0) || math.IsInf(s, 0) {
		return nil, 0, fmt.Errorf("mech: %s: range radius %v gives scale %v", m.name, rg.Radius, s)
	}
	return p, h, nil
}

// distMaxTries bounds conditional rounding: each try meets the bound with
// probability at least 1 - exp(-1/2), so 1000 all fail with probability
// below 1e-200.
const distMaxTries = 1000

func (m *distDP) Encode(dst []byte, w []float32, rg Range, s Slot) ([]byte, error) {
	if err := checkInput(w); err != nil {
		return dst, err
	}
	if s.Private == nil {
		return dst, errNoPrivate(m.name)
	}
	n := len(w)
	if n == 0 {
		return dst, nil
	}
	p, _, err := m.check(n, rg)
	if err != nil {
		return dst, err
	}
	dp := p.dp
	// y = s H D x / sqrt(d'), with s x = (p.sc/C) x computed as x/C first.
	y := make([]float64, dp)
	f := p.sc / math.Sqrt(float64(dp))
	inv := 1 / m.l2Bound(rg, n)
	if m.z > 0 {
		// The L2 mode: the vector as it is, within the bound, unclipped.
		x, err := l2Input(m.name, w, rg)
		if err != nil {
			return dst, err
		}
		for i, v := range x {
			y[i] = v * inv * f
			if flipped(p.signs, i) {
				y[i] = -y[i]
			}
		}
	} else {
		for i, v := range w {
			y[i] = centered(float64(v), rg) * inv * f
			if flipped(p.signs, i) {
				y[i] = -y[i]
			}
		}
	}
	fwht(y)
	z := make([]int64, dp)
	limit, err := p.normLimit()
	if err != nil {
		return dst, fmt.Errorf("mech: %s: %w", m.name, err)
	}
	if _, err := roundConditional(z, y, limit, s.Private); err != nil {
		return dst, fmt.Errorf("mech: %s: %w", m.name, err)
	}
	if err := p.addNoise(z, s.Private); err != nil {
		return dst, fmt.Errorf("mech: %s: %w", m.name, err)
	}
	pk := wire.NewPacker(slices.Grow(dst, wire.PackedLen(dp, m.bits)), m.bits)
	for _, v := range z {
		pk.Put(uint32(uint64(v) & (m.Modulus() - 1)))
	}
	return pk.Bytes(), nil
}

// addNoise adds each client's share of the central noise to z.
func (p *distParams) addNoise(z []int64, src corr.Source) error {
	if p.skellam {
		// Poisson(lambda) - Poisson(lambda): Hörmann's PTRS in float64
		// (gonum), exact in real arithmetic, not in floating point.
		ps := distuv.Poisson{Lambda: p.lambda, Src: src}
		for i := range z {
			a, b := ps.Rand(), ps.Rand()
			if a > 1<<52 || b > 1<<52 {
				return fmt.Errorf("poisson sample %v, %v out of range", a, b)
			}
			z[i] += int64(a) - int64(b)
		}
		return nil
	}
	for i := range z {
		z[i] += p.gauss.Int(src)
	}
	return nil
}

func (m *distDP) Unpack(dst []uint64, payload []byte, n int) error {
	if err := checkFieldBuf(m, dst, n); err != nil {
		return err
	}
	u, err := wire.NewUnpacker(payload, padded(n), m.bits)
	if err != nil {
		return fmt.Errorf("mech: %s: %w", m.name, err)
	}
	for i := range dst {
		dst[i] = uint64(u.Next())
	}
	return nil
}

// DecodeSum decodes the per-field sum, reduced modulo 2^b or not (Modular);
// a field above count*(2^b-1) is refused, as no count clients can send it.
func (m *distDP) DecodeSum(dst []float64, sum []uint64, count int, rg Range, _ []Slot) error {
	if err := checkSum(m, dst, sum, count); err != nil {
		return err
	}
	if len(dst) == 0 {
		return nil
	}
	p, h, err := m.check(len(dst), rg)
	if err != nil {
		return err
	}
	m.decode(dst, sum, count, rg, p, h)
	return nil
}

// decode is the server's side, shared by Sum.Mean and DecodeSum: the
// centered residues, the exact integer inverse rotation D H z, then
// c + (D H z)_i / (sqrt(d') s count), clamped to c ± h.
func (m *distDP) decode(dst []float64, sum []uint64, count int, rg Range, p *distParams, h float64) {
	mod, half := m.Modulus(), int64(1)<<(m.bits-1)
	z := make([]int64, p.dp)
	for i, v := range sum {
		z[i] = int64(v & (mod - 1))
		if z[i] >= half {
			z[i] -= int64(mod)
		}
	}
	fwht(z) // |entries| <= d' 2^(b-1): exact in int64
	mult := m.l2Bound(rg, len(dst)) / (p.sc * math.Sqrt(float64(p.dp)) * float64(count))
	for i := range dst {
		v := z[i]
		if flipped(p.signs, i) {
			v = -v
		}
		dst[i] = min(max(rg.Center+float64(v)*mult, rg.Center-h), rg.Center+h)
	}
}

func (m *distDP) NewSum(n int, rg Range) (Sum, error) {
	if n < 0 {
		return nil, fmt.Errorf("mech: negative tensor size %d", n)
	}
	s := &distSum{m: m, n: n, rg: rg}
	if n == 0 {
		return s, rg.Validate()
	}
	p, h, err := m.check(n, rg)
	if err != nil {
		return nil, err
	}
	s.p, s.h, s.acc, s.fields = p, h, make([]uint64, p.dp), make([]uint64, p.dp)
	return s, nil
}

// distSum keeps the per-field sums modulo 2^b.
type distSum struct {
	m           *distDP
	p           *distParams
	n           int
	rg          Range
	h           float64
	acc, fields []uint64
	count       int
}

func (s *distSum) Add(payload []byte, _ Slot) error {
	if err := s.m.Unpack(s.fields, payload, s.n); err != nil {
		return err
	}
	mask := s.m.Modulus() - 1
	for i, f := range s.fields {
		s.acc[i] = (s.acc[i] + f) & mask
	}
	s.count++
	return nil
}

func (s *distSum) Count() int { return s.count }

func (s *distSum) Mean(dst []float64) error {
	if err := checkMean(dst, s.n, s.count); err != nil {
		return err
	}
	if s.n > 0 {
		s.m.decode(dst, s.acc, s.count, s.rg, s.p, s.h)
	}
	return nil
}
