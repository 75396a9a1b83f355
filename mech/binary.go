package mech

import (
	"encoding/binary"
	"fmt"
	"math"
	"math/bits"

	"github.com/fedpq/fedpq/corr"
)

// binq holds the integer thresholds shared by every eps-LDP one-bit
// quantizer (ldpq, corbin, augcorbin, coq). A client with input w sends +1
// when a uniform 64-bit word V is below T(w), so P(+1 | w) = T(w) / 2^64
// exactly: the probabilities are rationals the tests can check exactly.
//
// T runs linearly from lo at w = c-r to hi = 2^64 - lo at w = c+r, with lo
// the smallest integer at least 2^64/(e^eps+1) (plus a margin that covers
// the float64 error of e^eps and the at most one unit that the coq
// coupling adds), so hi/lo and (2^64-lo)/(2^64-hi) never exceed e^eps.
// The decoder maps +1 and -1 to c ± out with out = r * 2^64/(hi-lo) (a hair
// above alpha*r), which makes E[output] = w up to the float64 rounding of T.
type binq struct {
	c, r   float64
	a, b0  float64 // f = w*a + b0 maps the range onto [0, 2^62]
	lo, hi uint64
	span   uint64  // hi - lo
	out    float64 // outputs are c+out (bit 1) and c-out (bit 0)
}

func newBinq(eps float64, rg Range) (binq, error) {
	if !(eps > 0) || math.IsInf(eps, 0) {
		return binq{}, fmt.Errorf("mech: epsilon %v must be positive and finite", eps)
	}
	if err := rg.Validate(); err != nil {
		return binq{}, err
	}
	x := 0x1p64 / (math.Exp(eps) + 1) * (1 + 0x1p-45)
	if !(x < 0x1p63*(1-0x1p-40)) {
		return binq{}, fmt.Errorf("mech: epsilon %v is too small for 64-bit thresholds", eps)
	}
	lo := uint64(math.Ceil(x)) + 2
	hi := -lo // 2^64 - lo
	scale := 0x1p62 / (2 * rg.Radius)
	b := binq{c: rg.Center, r: rg.Radius, a: scale, b0: (rg.Radius - rg.Center) * scale,
		lo: lo, hi: hi, span: hi - lo, out: rg.Radius * 0x1p64 / float64(hi-lo)}
	// The outputs c ± out must be finite (a radius near 1e289 made out
	// Inf and the mean NaN), and so must w*a + b0 for every float32 w, or
	// the threshold of an input would be NaN (a radius below about 1e-251,
	// or a center 2^62/(2r) times beyond float64).
	if math.IsInf(b.c+b.out, 0) || math.IsInf(b.c-b.out, 0) || math.IsInf(b.a*math.MaxFloat32, 0) || math.IsInf(b.b0, 0) {
		return binq{}, fmt.Errorf("mech: range %v±%v at epsilon %v overflows the one-bit quantizer's arithmetic (outputs c ± %v)", rg.Center, rg.Radius, eps, b.out)
	}
	return b, nil
}

// threshold returns T(w) for a finite w, clipping w to the range:
// T = lo + floor(span * f / 2^62) with f the input's position in the range
// as a 62-bit fraction, so T is exactly lo at the bottom of the range
// and exactly hi at the top, and keeps the 53 bits a float64 holds between.
func (b *binq) threshold(w float32) uint64 {
	x := float64(w)*b.a + b.b0
	if x < 0 { // clipping is rare, so these branches are predictable
		x = 0
	}
	if x > 0x1p62 {
		x = 0x1p62
	}
	hi, lo := bits.Mul64(b.span, uint64(int64(x)))
	return b.lo + (hi<<2 | lo>>62)
}

// p1 is P(+1 | w) as a float64 (for closed-form variances).
func (b *binq) p1(w float64) float64 {
	return float64(b.threshold(float32(w))) * 0x1p-64
}

// variance is Var[Q(w)] of one client: out^2 - (E[Q]-c)^2.
func (b *binq) variance(w float64) float64 {
	m := b.out * (2*b.p1(w) - 1)
	return b.out*b.out - m*m
}

// chunk is the number of parameters encoded per batch of random words.
const chunk = 1024

// encode appends the 1-bit payload of w, using 64-bit random words: fill
// writes one uniform word V per parameter of the batch, and bit i is 1 iff
// V[i] < T(w[i]).
func (b *binq) encode(dst []byte, w []float32, fill func(v []uint64)) []byte {
	var v [chunk]uint64
	for len(w) > 0 {
		n := min(len(w), chunk)
		fill(v[:n])
		for k := 0; k < n; k += 64 {
			var word uint64
			for i, x := range w[k:min(n, k+64)] {
				_, below := bits.Sub64(v[k+i], b.threshold(x), 0)
				word |= below << i
			}
			dst = appendWord(dst, word, min(n-k, 64))
		}
		w = w[n:]
	}
	return dst
}

// encode32 is encode with the random word drawn half at a time: fill
// writes the top 32 bits of each V, and only when they equal the top half of
// T (probability 2^-32) does low draw the bottom 32. The bit is [V < T] all
// the same, for half the randomness. It checks w for NaN and Inf on the way,
// which costs less than a pass of its own.
func (b *binq) encode32(dst []byte, w []float32, fill func(v []uint32), low func() uint32) ([]byte, error) {
	var v [chunk]uint32
	for len(w) > 0 {
		n := min(len(w), chunk)
		fill(v[:n])
		for k := 0; k < n; k += 64 {
			ws := w[k:min(n, k+64)]
			word, tie, bad := b.below32(ws, v[k:k+len(ws)])
			if bad != 0 {
				return dst, checkInput(ws)
			}
			for ; tie != 0; tie &= tie - 1 { // settle ties on the low halves
				i := bits.TrailingZeros64(tie)
				if uint64(low()) < b.threshold(ws[i])&0xffffffff {
					word |= 1 << i
				}
			}
			dst = appendWord(dst, word, len(ws))
		}
		w = w[n:]
	}
	return dst, nil
}

// below32 compares up to 64 parameters' thresholds with the top halves of
// their random words: bit i of word is [v[i] < T(w[i]) >> 32], bit i of tie
// marks equality, and bad is nonzero if some w[i] is NaN or Inf. It makes
// no calls, so its loop keeps everything in registers.
//
//go:noinline
func (b *binq) below32(ws []float32, vs []uint32) (word, tie uint64, bad uint32) {
	vs = vs[:len(ws)]
	for i, x := range ws {
		bad |= (math.Float32bits(x)&0x7f800000 + 0x00800000) & 0x80000000
		top, r := b.threshold(x)>>32, uint64(vs[i])
		word |= (r - top) >> 63 << (uint(i) & 63) // r < top
		if r == top {
			tie |= 1 << (uint(i) & 63)
		}
	}
	return word, tie, bad
}

// sharedFields reads len(z) fields of k bits (1 <= k <= 32, len(z) <= chunk)
// from src, least significant first, consuming exactly ceil(len(z)*k/64)
// words: a pair's shared bits for one batch. Full batches take a whole
// number of words, so a tensor takes ceil(n*k/64) words in all, the count
// the transfer mode sends.
func sharedFields(src corr.Source, z []uint32, k uint) {
	var buf [chunk / 2]uint64
	src.Fill(buf[:(len(z)*int(k)+63)/64])
	k &= 63
	mask := uint64(1)<<k - 1
	acc, have, j := buf[0], uint(64), 1
	for i := range z {
		if have >= k {
			z[i] = uint32(acc & mask)
			acc >>= k
			have -= k
			continue
		}
		// The field straddles two words: its low bits end this one.
		next := buf[j%len(buf)]
		j++
		z[i] = uint32((acc | next<<(have&63)) & mask)
		acc = next >> ((k - have) & 63)
		have += 64 - k
	}
}

// appendWord appends the bytes holding the first n bits of word.
func appendWord(dst []byte, word uint64, n int) []byte {
	if n == 64 {
		return binary.LittleEndian.AppendUint64(dst, word)
	}
	for k := 0; k < (n+7)/8; k++ {
		dst = append(dst, byte(word>>(8*k)))
	}
	return dst
}

// bitSum is the server side of every one-bit mechanism: it counts, per
// coordinate, the clients that sent 1. Counting goes eight coordinates per
// addition: each payload byte is spread to eight 8-bit lanes of a word, and
// the lanes are flushed to 32-bit counters before they can overflow.
type bitSum struct {
	n         int
	zero, one float64 // decoded values of bits 0 and 1
	lanes     []uint64
	counts    []uint32
	pending   int // payloads in lanes since the last flush
	count     int
}

// spread[b] has byte k equal to bit k of b.
var spread = func() (t [256]uint64) {
	for b := range 256 {
		for k := range 8 {
			t[b] |= uint64(b>>k&1) << (8 * k)
		}
	}
	return t
}()

func newBitSum(n int, zero, one float64) (*bitSum, error) {
	if n < 0 {
		return nil, fmt.Errorf("mech: negative tensor size %d", n)
	}
	return &bitSum{n: n, zero: zero, one: one, lanes: make([]uint64, (n+7)/8), counts: make([]uint32, n)}, nil
}

// checkBits validates a payload of n one-bit fields.
func checkBits(payload []byte, n int) error {
	if want := (n + 7) / 8; len(payload) != want {
		return fmt.Errorf("mech: payload is %d bytes, want %d for %d one-bit parameters", len(payload), want, n)
	}
	if pad := n % 8; pad != 0 && payload[len(payload)-1]>>pad != 0 {
		return fmt.Errorf("mech: payload has nonzero padding after %d one-bit parameters", n)
	}
	return nil
}

func (s *bitSum) Add(payload []byte, _ Slot) error {
	if err := checkBits(payload, s.n); err != nil {
		return err
	}
	lanes := s.lanes[:len(payload)]
	for i, b := range payload {
		lanes[i] += spread[b]
	}
	s.count++
	if s.pending++; s.pending == 255 {
		s.flush()
	}
	return nil
}

func (s *bitSum) flush() {
	for i, l := range s.lanes {
		if l == 0 {
			continue
		}
		c := s.counts[8*i : min(8*i+8, s.n)]
		for k := range c {
			c[k] += uint32(l >> (8 * k) & 0xff)
		}
		s.lanes[i] = 0
	}
	s.pending = 0
}

func (s *bitSum) Count() int { return s.count }

func (s *bitSum) Mean(dst []float64) error {
	if err := checkMean(dst, s.n, s.count); err != nil {
		return err
	}
	s.flush()
	decodeOnes(dst, s.counts, s.count, s.zero, s.one)
	return nil
}

// decodeOnes writes the mean of count clients' one-bit outputs, given
// the number of ones per coordinate: bitSum's Mean and every one-bit
// DecodeSum, which must agree bit for bit.
func decodeOnes[T uint32 | uint64](dst []float64, ones []T, count int, zero, one float64) {
	inv := 1 / float64(count)
	for i, c := range ones {
		f := float64(c) * inv
		dst[i] = one*f + zero*(1-f)
	}
}

// bitFields is the Integer side of every one-bit mechanism (the eps-LDP
// ones and cq): one field per parameter, the bit itself.
type bitFields struct{}

func (bitFields) Fields(n int) int { return n }
func (bitFields) Levels() uint64   { return 2 }

// Unpack refuses what bitSum.Add refuses (checkBits) and writes the bits.
func (bitFields) Unpack(dst []uint64, payload []byte, n int) error {
	if n < 0 {
		return fmt.Errorf("mech: negative tensor size %d", n)
	}
	if len(dst) != n {
		return fmt.Errorf("mech: field buffer has length %d, want %d", len(dst), n)
	}
	if err := checkBits(payload, n); err != nil {
		return err
	}
	for i := range dst {
		dst[i] = uint64(payload[i>>3] >> (i & 7) & 1)
	}
	return nil
}

// decodeBitSum is DecodeSum for a one-bit mechanism whose bits decode to
// zero and one.
func decodeBitSum(dst []float64, sum []uint64, count int, zero, one float64) error {
	if err := checkSum(bitFields{}, dst, sum, count); err != nil {
		return err
	}
	decodeOnes(dst, sum, count, zero, one)
	return nil
}

// oneBit is what the eps-LDP one-bit mechanisms (ldpq, corbin, augcorbin,
// coq) share: one bit per parameter, the server's counting sum, and one
// client's variance. They differ only in the words V their clients draw.
type oneBit struct {
	bitFields
	eps float64
}

func (oneBit) Bits(n int) int { return n }

// ResponseEpsilon is the eps of the randomized response each parameter's
// bit is, for a client that encodes alone.
func (m oneBit) ResponseEpsilon() float64 { return m.eps }

func (m oneBit) NewSum(n int, rg Range) (Sum, error) {
	b, err := newBinq(m.eps, rg)
	if err != nil {
		return nil, err
	}
	return newBitSum(n, b.c-b.out, b.c+b.out)
}

// DecodeSum decodes the number of ones per coordinate to c ± out, as
// bitSum.Mean does; slots are ignored (nothing is subtracted).
func (m oneBit) DecodeSum(dst []float64, sum []uint64, count int, rg Range, _ []Slot) error {
	b, err := newBinq(m.eps, rg)
	if err != nil {
		return err
	}
	return decodeBitSum(dst, sum, count, b.c-b.out, b.c+b.out)
}

// Variance is out^2 - (E[Q(w)] - c)^2: one client's, whatever its role,
// since every role has the ldpq marginal (NaN for an invalid range).
func (m oneBit) Variance(w float64, rg Range) float64 {
	b, err := newBinq(m.eps, rg)
	if err != nil {
		return math.NaN()
	}
	return b.variance(w)
}

// Support is out = r 2^64/(hi - lo), about r (e^eps+1)/(e^eps-1): the
// decoder outputs c ± out and nothing else.
func (m oneBit) Support(rg Range) (float64, error) {
	b, err := newBinq(m.eps, rg)
	if err != nil {
		return 0, err
	}
	return b.out, nil
}
