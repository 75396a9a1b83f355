package mech

import (
	"fmt"
	"math"
	"math/bits"
	"slices"
	"sync"

	"github.com/fedpq/fedpq/wire"
)

func init() {
	Register(Info{
		Name: "pbm",
		Summary: "Poisson binomial mechanism (Chen, Ozgur, Kairouz 2022) for DP-FedAvg under secure aggregation: one L2-clipped vector, rotated without padding, " +
			"Trials (1) binomial trials per coordinate biased by it, noise multiplier Noise; RDP of one round's sum of Config.Clients clients for zero-out, " +
			"computed exactly in the worst case; no LDP; len(Clients*Trials) bits per parameter as summed, unbiased, no modular clipping",
		L2:  true,
		New: newPBM,
	})
}

// pbm is the Poisson binomial mechanism of Chen, Ozgur and Kairouz, "The
// Poisson binomial mechanism for unbiased federated learning with secure
// aggregation", ICML 2022, on one vector of d parameters clipped in L2
// norm to C = rg.Radius (the round engine's clipping; l2Input). A client:
//
//  1. rotates x = w - rg.Center by the public orthonormal blockRotation of
//     R^d (no padding): y = R x, ||y||_2 = ||x||_2 <= C;
//  2. clips each coordinate to [-c, c], c = k C/sqrt(d), and sets the bias
//     beta_j = theta y_j/c, |beta_j| <= theta;
//  3. sends, per coordinate, the number of successes of m = Config.Trials
//     trials of probability 1/2 + beta_j, exactly (one uniform 64-bit word
//     per trial against 2^64 (1/2 + beta_j), an integer), in len(m) bits.
//
// The sum of n clients' counts, which is all that secure aggregation shows
// the server, is Poisson binomial per coordinate; the server decodes
// yhat_j = (c/(m theta)) (S_j - count m/2), whose mean is the sum of the
// clients' clipped coordinates: the estimate of the mean is unbiased for
// the clipped vectors, with no modular clipping (the count never leaves
// [0, count m]). It rotates back and divides by the count.
//
// Noise. The variance of yhat_j is (c/(m theta))^2 sum_i m (1/4 -
// beta_ij^2) = n c^2/(4 m theta^2) - sum_i y_ij^2/m. theta is set so that
// the first term, the variance at the zero vector, is (z C)^2, z =
// Config.Noise, n = Config.Clients: theta = (c/C) sqrt(n/m)/(2z) =
// k sqrt(n/(4 m d))/z, rounded down to a multiple of 2^-52 (so 1/2 +- theta
// are exact). The variance of the sum's coordinate is then (z C)^2 less
// sum_i y_ij^2/m (on average over the coordinates n C^2/(m d) at most):
// that of a Gaussian of multiplier z, or a little less; the inverse
// rotation spreads it over the parameters. pbmParams.variance states it
// exactly.
//
// The clip. The rotated coordinates of a vector of norm C have mean square
// C^2/d; c = k C/sqrt(d) with k = 2 cuts those beyond twice that root mean
// square (a coordinate of a spread vector is nearly Gaussian: 4.6% of
// them, and 1.15% of the norm's square beyond the clip; TestPBMClipShare
// measures 4.5-4.7% and 1.0-1.2% for cnn2's size). theta grows with
// k, and with it the cost of discreteness in privacy (pbmAccount): at
// k = 3 (0.27% of the coordinates, 0.04% of the square) pbm needed 1.18
// times a Gaussian's variance for cnn2 at one trial rather than 1.07, and
// its noise multiplier for eps 8 in the table of docs/privacy.md was 1.267
// at two trials rather than 1.239: 4.5% of the variance of the noise, far
// more than the 1.15% of each vector's square the lower clip costs. k is
// lowered further where theta would exceed 1/4 (trials of probability 1/4
// to 3/4, the paper's range): k = min(2, (1/2) z sqrt(m d/n)), and New
// refuses settings where k would fall below 1 (raise Trials or Noise).
//
// Guarantee (L2): RDP for the zero-out of one client of the sum of n
// clients, pbmAccount: the exact worst case over the other clients'
// biases, computed to a relative 1e-3 (with margins that keep it an upper
// bound), for both orders of the pair. It holds if at least n clients
// take part honestly (more add trials and only help; fewer weaken it). Against the Gaussian's alpha/(2
// z^2) at the same z, it costs (TestPBMRDPGaussian, 100 clients, z = 1):
//
//	6,422 parameters, 1 trial (theta 0.125):    1.07 at orders 1.5 to 4, 1.08 at 8, 1.10 at 16, 1.12 at 32
//	6,422 parameters, 2 trials (theta 0.088):   1.035 at 1.5 to 4, 1.04 at 8, 1.05 at 16, 1.06 at 32
//	100,000 parameters, 1 trial (theta 0.032):  1.005 at 1.5 to 8, 1.007 at 16
//	100,000 parameters, 2 trials (theta 0.022): 1.002 to 1.004 at 1.5 to 16
//
// (mostly the variance the others' trials lose at the extremes, 1/(1 -
// 4 theta^2), and, at high orders, the coordinates at the clip). So at
// equal RDP pbm needs about that factor of a Gaussian's variance: about
// 1.07 (one trial) or 1.035 (two) for a cnn2-sized model and 100 clients,
// 1.005 for 100,000 parameters. The first call of RDP at an order computes
// the bound (pbm_rdp.go: about 20 to 90 ms per order for 100 clients of
// one trial, 0.15 to 0.45 s for two, on a shared 2-core machine); it is
// kept per vector length and order.
//
// Bits. A payload holds len(m) bits per parameter (values 0..m); under
// secure aggregation each field is summed in Z_2^k, k = len(count m)
// (SumBits; 7 bits for 100 clients of 1 trial, 8 for 2), d fields for d
// parameters: no padding, so k bits per parameter as sent. pbm is not
// Modular: the round engine sizes k for the round's actual count, so the
// sum never wraps and needs no margin (at 100 clients and one trial, 7
// bits hold any count up to 127 clients).
type pbm struct {
	z       float64
	clients int      // n
	trials  int      // m
	cache   sync.Map // d -> *pbmParams
	fewer   sync.Map // pbmFewer -> *pbmAccount, for SumRDP of other counts
}

// pbmFewer keys the accounting of a sum of fewer clients than pbm's.
type pbmFewer struct{ d, clients int }

// pbmParams is pbm's setting for vectors of d parameters.
type pbmParams struct {
	d     int
	rot   *blockRotation
	k     float64 // the clip in root mean squares of a coordinate at norm C
	crel  float64 // c/C = k/sqrt(d)
	theta float64
	u     float64 // the bound on sum_j beta_j^2, with a margin (RDP's)
	acct  *pbmAccount
}

const (
	// pbmMaxParams is the longest vector: the rotation holds 20 bytes per
	// parameter.
	pbmMaxParams = 1 << 24
	// pbmMaxTrials bounds Trials: a count fits 16 bits.
	pbmMaxTrials = 1<<16 - 1
	// pbmMaxCoins bounds (Clients-1) Trials, what the accounting
	// enumerates (its cost grows as the square).
	pbmMaxCoins = 1 << 12
	// pbmClip is k, the clip in root mean squares; pbmMaxTheta is the
	// largest bias; pbmMinClip the smallest k New accepts.
	pbmClip     = 2.0
	pbmMaxTheta = 0.25
	pbmMinClip  = 1.0
	// pbmSumSlack is how far sum_j beta_j^2 may exceed theta^2 (C/c)^2 by
	// rounding before Encode refuses (it cannot, for a vector of norm at
	// most C: the rounding is below 1e-12); the accounting uses twice it.
	pbmSumSlack = 0x1p-21
	// pbmMinOrder is the smallest Rényi order RDP computes: the excesses
	// lose about 2^-52/((alpha-1) |x|) of their precision (pbm_rdp.go).
	pbmMinOrder = 1.01
	// pbmSupportSDs is the clamp of the decoded mean, in noise standard
	// deviations z C beyond the radius.
	pbmSupportSDs = 1 << 20
)

func newPBM(c Config) (Mechanism, error) {
	if err := checkNoise("pbm", c.Noise); err != nil {
		return nil, err
	}
	n := c.Clients
	if n == 0 {
		n = 1
	}
	if n < 1 {
		return nil, fmt.Errorf("mech: pbm: clients %d must be positive", c.Clients)
	}
	m := c.Trials
	if m == 0 {
		m = 1
	}
	if m < 1 || m > pbmMaxTrials {
		return nil, fmt.Errorf("mech: pbm: trials %d must be in 1..%d", c.Trials, pbmMaxTrials)
	}
	if n-1 > pbmMaxCoins || (n-1)*m > pbmMaxCoins {
		return nil, errPBMAccount(n, m)
	}
	return &pbm{z: c.Noise, clients: n, trials: m}, nil
}

func (m *pbm) Name() string       { return "pbm" }
func (m *pbm) Coupling() Coupling { return Independent }
func (m *pbm) Alone() float64     { return 0 }

// width is the bits of one count, len(m).
func (m *pbm) width() int { return bits.Len(uint(m.trials)) }

// Bits is len(m) bits per parameter.
func (m *pbm) Bits(n int) int   { return m.width() * n }
func (m *pbm) Fields(n int) int { return n }
func (m *pbm) Levels() uint64   { return uint64(m.trials) + 1 }

// Support is C (1 + 2^20 z): the decoded mean is clamped there, 2^20 of
// the sum's noise standard deviations beyond any clipped input.
func (m *pbm) Support(rg Range) (float64, error) {
	if err := rg.Validate(); err != nil {
		return 0, err
	}
	h := rg.Radius * (1 + pbmSupportSDs*m.z)
	if math.IsInf(h, 0) || math.IsInf(rg.Center-h, 0) || math.IsInf(rg.Center+h, 0) {
		return 0, fmt.Errorf("mech: pbm: range %v±%v: its support ±%v overflows float64", rg.Center, rg.Radius, h)
	}
	return h, nil
}

// PBMClip is pbm's clip k, in root mean squares of a rotated coordinate
// of a vector at the bound, for noise multiplier z, clients sharing the
// noise, trials per coordinate and d parameters: min(2, (z/2) sqrt(trials
// d/clients)), so that the bias stays within 1/4 (see pbm). An audit's
// worst-case canary puts its norm on the fewest coordinates this clip
// lets it reach.
func PBMClip(z float64, clients, trials, d int) float64 {
	return min(pbmClip, pbmMaxTheta*2*z*math.Sqrt(float64(trials)*float64(d)/float64(clients)))
}

// params returns the setting for d parameters (1 <= d <= pbmMaxParams).
func (m *pbm) params(d int) (*pbmParams, error) {
	if d < 1 || d > pbmMaxParams {
		return nil, fmt.Errorf("mech: pbm: vector of %d parameters: want 1 to %d", d, pbmMaxParams)
	}
	if p, ok := m.cache.Load(d); ok {
		return p.(*pbmParams), nil
	}
	fn, fm, fd := float64(m.clients), float64(m.trials), float64(d)
	k := PBMClip(m.z, m.clients, m.trials, d)
	if !(k >= pbmMinClip) {
		return nil, fmt.Errorf("mech: pbm: at noise multiplier %v, %d clients of %d trials and %d parameters the clip would be %.3g root mean squares of a coordinate (below %v) to keep the bias within %v: raise Trials or Noise",
			m.z, m.clients, m.trials, d, k, pbmMinClip, pbmMaxTheta)
	}
	theta := math.Floor(math.Ldexp(k*math.Sqrt(fn/(4*fm*fd))/m.z, 52))
	theta = math.Ldexp(theta, -52)
	if !(theta > 0) {
		return nil, fmt.Errorf("mech: pbm: noise multiplier %v leaves no bias for %d parameters", m.z, d)
	}
	crel := k / math.Sqrt(fd)
	p := &pbmParams{d: d, rot: newBlockRotation(d), k: k, crel: crel, theta: theta,
		u: theta * theta / (crel * crel) * (1 + 2*pbmSumSlack)}
	p.acct = newPBMAccount(m.clients, m.trials, theta)
	got, _ := m.cache.LoadOrStore(d, p)
	return got.(*pbmParams), nil
}

func (m *pbm) Encode(dst []byte, w []float32, rg Range, s Slot) ([]byte, error) {
	if err := checkInput(w); err != nil {
		return dst, err
	}
	if s.Private == nil {
		return dst, errNoPrivate("pbm")
	}
	if _, err := m.Support(rg); err != nil {
		return dst, err
	}
	d := len(w)
	if d == 0 {
		return dst, nil
	}
	p, err := m.params(d)
	if err != nil {
		return dst, err
	}
	x, err := l2Input("pbm", w, rg)
	if err != nil {
		return dst, err
	}
	p.rot.apply(x, make([]float64, d))
	// beta_j = theta clip(y_j/c, -1, 1); prob = 1/2 + beta_j, within
	// [1/2-theta, 1/2+theta] exactly (both ends are doubles), and
	// prob - 1/2 is exact (Sterbenz).
	inv := 1 / (p.crel * rg.Radius)
	var sum2 float64
	for j, v := range x {
		prob := 0.5 + p.theta*min(max(v*inv, -1), 1)
		b := prob - 0.5
		sum2 += b * b
		x[j] = prob
	}
	if limit := p.theta * p.theta / (p.crel * p.crel) * (1 + pbmSumSlack); !(sum2 <= limit) {
		return dst, fmt.Errorf("mech: pbm: the biases' sum of squares %v exceeds %v", sum2, limit)
	}
	pk := wire.NewPacker(slices.Grow(dst, wire.PackedLen(d, m.width())), m.width())
	for _, prob := range x {
		// prob is in [1/4, 3/4], a multiple of 2^-54: 2^64 prob is an
		// integer, and a uniform word is below it with probability prob.
		t := uint64(math.Ldexp(prob, 64))
		var k uint32
		for range m.trials {
			if s.Private.Uint64() < t {
				k++
			}
		}
		pk.Put(k)
	}
	return pk.Bytes(), nil
}

func (m *pbm) Unpack(dst []uint64, payload []byte, n int) error {
	if err := checkFieldBuf(m, dst, n); err != nil {
		return err
	}
	return unpackCodes(payload, n, m.width(), m.Levels(), func(i int, f uint32) { dst[i] = uint64(f) })
}

// DecodeSum decodes the exact per-field sum of count clients' counts.
func (m *pbm) DecodeSum(dst []float64, sum []uint64, count int, rg Range, _ []Slot) error {
	if err := checkSum(m, dst, sum, count); err != nil {
		return err
	}
	if len(dst) == 0 {
		return rg.Validate()
	}
	h, err := m.Support(rg)
	if err != nil {
		return err
	}
	p, err := m.params(len(dst))
	if err != nil {
		return err
	}
	return m.decode(dst, sum, count, rg, p, h)
}

// decode is the server's side, shared by Sum.Mean and DecodeSum.
func (m *pbm) decode(dst []float64, sum []uint64, count int, rg Range, p *pbmParams, h float64) error {
	total := uint64(count) * uint64(m.trials)
	if total >= 1<<53 {
		return fmt.Errorf("mech: pbm: %d clients of %d trials: the sums exceed float64's integers", count, m.trials)
	}
	// yhat_j/count = (c/(m theta count)) (S_j - count m/2).
	f := p.crel * rg.Radius / (float64(m.trials) * p.theta * float64(count))
	half := float64(total) / 2
	for j, s := range sum {
		dst[j] = (float64(s) - half) * f
	}
	p.rot.invert(dst, make([]float64, len(dst)))
	for i, v := range dst {
		dst[i] = min(max(rg.Center+v, rg.Center-h), rg.Center+h)
	}
	return nil
}

func (m *pbm) NewSum(n int, rg Range) (Sum, error) {
	if n < 0 {
		return nil, fmt.Errorf("mech: negative tensor size %d", n)
	}
	h, err := m.Support(rg)
	if err != nil {
		return nil, err
	}
	s := &pbmSum{m: m, n: n, rg: rg, h: h}
	if n == 0 {
		return s, nil
	}
	if s.p, err = m.params(n); err != nil {
		return nil, err
	}
	s.acc, s.fields = make([]uint64, n), make([]uint64, n)
	return s, nil
}

// pbmSum keeps the exact per-field sums.
type pbmSum struct {
	m           *pbm
	p           *pbmParams
	n           int
	rg          Range
	h           float64
	acc, fields []uint64
	count       int
}

func (s *pbmSum) Add(payload []byte, _ Slot) error {
	if uint64(s.count+1)*uint64(s.m.trials) >= 1<<53 {
		return fmt.Errorf("mech: pbm: sum of %d payloads is full", s.count)
	}
	if err := s.m.Unpack(s.fields, payload, s.n); err != nil {
		return err
	}
	for i, f := range s.fields {
		s.acc[i] += f
	}
	s.count++
	return nil
}

func (s *pbmSum) Count() int { return s.count }

func (s *pbmSum) Mean(dst []float64) error {
	if err := checkMean(dst, s.n, s.count); err != nil {
		return err
	}
	if s.n == 0 {
		return nil
	}
	return s.m.decode(dst, s.acc, s.count, s.rg, s.p, s.h)
}

// RDP is the bound of pbmAccount for vectors of n parameters: s(alpha) U,
// U the bound on the sum of the squared biases. It is +Inf (no bound)
// where alpha ln((1+2 theta)^m) exceeds 650, beyond float64's range
// (orders above 2,000 at theta 0.19, one trial), and refused below order
// pbmMinOrder.
func (m *pbm) RDP(alpha float64, n int) (float64, error) { return m.SumRDP(alpha, n, m.clients) }

// SumRDP is pbmAccount's bound for a sum of clients clients' trials, each
// biased as Encode biases them (theta for pbm's clients).
func (m *pbm) SumRDP(alpha float64, n, clients int) (float64, error) {
	if err := checkOrder("pbm", alpha, n, pbmMaxParams); err != nil {
		return 0, err
	}
	if alpha < pbmMinOrder {
		return 0, fmt.Errorf("mech: pbm: Rényi order %v: the accounting computes orders from %v (closer to 1 its sums lose their precision)", alpha, pbmMinOrder)
	}
	if clients < 1 || (clients-1)*m.trials > pbmMaxCoins {
		return 0, fmt.Errorf("mech: pbm: a sum of %d clients' trials: want 1 to %d clients", clients, pbmMaxCoins/m.trials+1)
	}
	p, err := m.params(n)
	if err != nil {
		return 0, err
	}
	acct := p.acct
	if clients != m.clients {
		a, ok := m.fewer.Load(pbmFewer{n, clients})
		if !ok {
			a, _ = m.fewer.LoadOrStore(pbmFewer{n, clients}, newPBMAccount(clients, m.trials, p.theta))
		}
		acct = a.(*pbmAccount)
	}
	_, s := acct.slope(alpha)
	return s * p.u, nil
}

// pbmVariance is the exact variance of the decoded sum's coordinate j of
// the rotated vector (before the inverse rotation), in the input's units,
// for clients whose rotated, clipped coordinates are y[i] (in units of C).
func (p *pbmParams) variance(y []float64, trials int, radius float64) float64 {
	c := p.crel * radius
	f := c / (float64(trials) * p.theta)
	v := 0.0
	for _, yi := range y {
		b := p.theta * min(max(yi*radius/c, -1), 1)
		v += float64(trials) * (0.25 - b*b)
	}
	return f * f * v
}
