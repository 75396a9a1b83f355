package secagg

import (
	"crypto/aes"
	"crypto/cipher"
	"crypto/hkdf"
	"crypto/rand"
	"crypto/sha256"
	"errors"
	"fmt"
	"io"
	"maps"
	"math/big"
	"math/bits"
	"slices"
	"strings"

	"github.com/cloudflare/circl/group"
)

// This file holds the protocol's cryptography: key derivation, sealing,
// and verifiable secret sharing over ristretto255 in the manner of Feldman
// (1987), with commitments to the polynomials' values rather than their
// coefficients: a holder checks its share against one value, the server
// checks each dealer's values once and every share revealed to it, so that a
// wrong share is found and left out rather than spoiling a reconstruction.

// kdf derives a 32-byte key from a secret for one purpose and tuple of ids:
// HKDF-SHA256 salted with the session seed, info "fedpq/v2 secagg <purpose>
// <id>...". Distinct purposes, sessions, rounds or ids give independent keys.
func kdf(secret []byte, seed [32]byte, purpose string, ids ...uint64) [32]byte {
	var info strings.Builder
	info.WriteString("fedpq/v2 secagg ")
	info.WriteString(purpose)
	for _, id := range ids {
		fmt.Fprintf(&info, " %d", id)
	}
	k, err := hkdf.Key(sha256.New, secret, seed[:], info.String(), 32)
	if err != nil {
		panic(err) // unreachable: 32 bytes is far below HKDF-SHA256's limit
	}
	return [32]byte(k)
}

// grp is the prime-order group of the shared secrets, their commitments and
// the pairwise-mask keys.
var grp = group.Ristretto255

const (
	elementBytes = 32
	scalarBytes  = 32
	// sealedBytes is one sealed dealing to one holder: the dealer's and the
	// holder's ids, the holder's shares of b and of s, and the GCM tag.
	sealedBytes = 16 + 2*scalarBytes + 16
)

// randomScalar draws a scalar from 64 bytes of rng, reduced mod the group
// order (bias below 2^-250). The group's own RandomScalar ignores its reader,
// which would make a seeded simulation irreproducible.
func randomScalar(rng io.Reader) (group.Scalar, error) {
	var b [64]byte
	if _, err := io.ReadFull(rng, b[:]); err != nil {
		return nil, err
	}
	return grp.NewScalar().SetBigInt(new(big.Int).SetBytes(b[:])), nil
}

func scalarBytesOf(s group.Scalar) []byte {
	b, err := s.MarshalBinary()
	if err != nil {
		panic(err) // unreachable: ristretto255 scalars always marshal
	}
	return b
}

func elementBytesOf(e group.Element) []byte {
	b, err := e.MarshalBinaryCompress()
	if err != nil {
		panic(err) // unreachable: ristretto255 elements always marshal
	}
	return b
}

// parseScalar reads a canonical 32-byte scalar.
func parseScalar(b []byte) (group.Scalar, error) {
	s := grp.NewScalar()
	if err := s.UnmarshalBinary(b); err != nil {
		return nil, errors.New("not a canonical ristretto255 scalar")
	}
	return s, nil
}

// parseElement reads a 32-byte ristretto255 element other than the
// identity (an identity commitment or key would make a secret, or an
// agreement, known to all).
func parseElement(b []byte) (group.Element, error) {
	e := grp.NewElement()
	if len(b) != elementBytes || e.UnmarshalBinary(b) != nil {
		return nil, errors.New("not a ristretto255 element")
	}
	if e.IsIdentity() {
		return nil, errors.New("the identity element")
	}
	return e, nil
}

// polynomial is a random polynomial of degree t−1 over the scalars whose
// constant term is a secret.
type polynomial []group.Scalar

func newPolynomial(secret group.Scalar, t int, rng io.Reader) (polynomial, error) {
	p := polynomial{secret}
	for range t - 1 {
		c, err := randomScalar(rng)
		if err != nil {
			return nil, err
		}
		p = append(p, c)
	}
	return p, nil
}

// at evaluates p at x by Horner's rule.
func (p polynomial) at(x uint64) group.Scalar {
	xs := grp.NewScalar().SetUint64(x)
	v := p[len(p)-1].Copy()
	for k := len(p) - 2; k >= 0; k-- {
		v.Mul(v, xs)
		v.Add(v, p[k])
	}
	return v
}

// Values are a dealer's commitments to its two sharing polynomials in
// evaluation form: g^{P(x)} at x = 0 and at each holder's point 1..m, for
// P = B (the self-mask seed b's polynomial) and P = S (the mask key s's).
// S(0) is g^s, the key the dealer advertised. A holder checks its shares
// against its own two values; the server checks that the m+1 values of each
// polynomial lie on one of degree below t ([Values.consistent]), and every
// revealed share against its holder's value. Under the discrete-log
// assumption in ristretto255 they reveal nothing of the secrets.
type Values struct {
	B, S []group.Element // indexed by point, 0..m
	// raw is the encoding of B and S, made once by values or read by
	// ParseValues, so that the server keeps it without encoding again.
	// Whoever changes B or S sets it to nil.
	raw []byte
	// checkedBy and dealer are set by Server.CheckDealing: they are
	// dealer's, on polynomials of degree below checkedBy's threshold, S(0)
	// its key. Such values are kept in raw only.
	checkedBy *Server
	dealer    uint64
}

// values evaluates and commits to b and s at 0..m.
func values(b, s polynomial, m int) *Values {
	v := &Values{B: make([]group.Element, m+1), S: make([]group.Element, m+1)}
	for x := range m + 1 {
		v.B[x] = grp.NewElement().MulGen(b.at(uint64(x)))
		v.S[x] = grp.NewElement().MulGen(s.at(uint64(x)))
	}
	v.raw = v.encode()
	return v
}

// Bytes is the values' encoding: B(0..m), then S(1..m) (S(0) is the
// advertised key), 32 bytes each.
func (v *Values) Bytes() []byte {
	if v.raw != nil {
		return slices.Clone(v.raw)
	}
	return v.encode()
}

func (v *Values) encode() []byte {
	out := make([]byte, 0, (2*len(v.B)-1)*elementBytes)
	for _, e := range v.B {
		out = append(out, elementBytesOf(e)...)
	}
	for _, e := range v.S[1:] {
		out = append(out, elementBytesOf(e)...)
	}
	return out
}

// ValuesBytes is the size of the values of a dealer with m holders.
func ValuesBytes(m int) int { return (2*m + 1) * elementBytes }

// ParseValues reads the values of a dealer with m holders whose advertised
// mask key is S0, refusing any that is not a ristretto255 element other
// than the identity.
func ParseValues(raw []byte, m int, S0 group.Element) (*Values, error) {
	if m < 1 || len(raw) != ValuesBytes(m) {
		return nil, fmt.Errorf("secagg: commitments of %d bytes, want %d for %d holders", len(raw), ValuesBytes(m), m)
	}
	v := &Values{B: make([]group.Element, m+1), S: make([]group.Element, m+1), raw: slices.Clone(raw)}
	v.S[0] = S0
	for k := range 2*m + 1 {
		e, err := parseElement(raw[k*elementBytes : (k+1)*elementBytes])
		if err != nil {
			return nil, fmt.Errorf("secagg: commitment %d: %w", k, err)
		}
		if k <= m {
			v.B[k] = e
		} else {
			v.S[k-m] = e
		}
	}
	return v, nil
}

// holderValues is the encoding of point x's two values, to which a
// holder's dealing is sealed and against which it checks its shares. v is
// made by values.
func (v *Values) holderValues(x uint64) []byte { return encodedValues(v.raw).holder(x) }

// encodedValues are a dealer's values as [Values.Bytes] encodes them. The
// server keeps them so, 32 bytes a value where a parsed element takes some
// 180, and parses only the values a step needs.
type encodedValues []byte

// holders is m, the dealer's share holders.
func (e encodedValues) holders() int { return (len(e)/elementBytes - 1) / 2 }

// holder is the encoding of point x's two values, B(x) and S(x), x >= 1.
func (e encodedValues) holder(x uint64) []byte {
	m := uint64(e.holders())
	return append(slices.Clone(e.at(x)), e.at(m+x)...)
}

// at is the encoding of the k-th value: B(k) for k <= m, else S(k−m).
func (e encodedValues) at(k uint64) []byte { return e[k*elementBytes : (k+1)*elementBytes] }

// element parses the k-th value.
func (e encodedValues) element(k uint64) group.Element {
	v := grp.NewElement()
	if err := v.UnmarshalBinary(e.at(k)); err != nil {
		panic(err) // unreachable: the server keeps values it parsed or encoded
	}
	return v
}

// consistent reports whether both polynomials' values lie on polynomials
// of degree below t. For points 0..m, Σ_x w_x R(x) = 0 for every R of
// degree below m, with w_x = 1/Π_{y≠x}(x−y) = (−1)^(m−x)/(x!(m−x)!); so
// with Q random of degree m−t, Σ_x w_x Q(x) g^{P(x)} is the identity when P
// has degree below t, and otherwise with probability at most (m−t+1)/2^252
// (a nonzero polynomial's chance of vanishing at a random point). One
// multi-scalar multiplication over 2(m+1) points checks both.
func (v *Values) consistent(t int, w []group.Scalar, rng io.Reader) (bool, error) {
	m := len(v.B) - 1
	if t > m || len(w) != m+1 {
		return false, nil
	}
	points := append(slices.Clone(v.B), v.S...)
	scalars := make([]group.Scalar, 0, len(points))
	for range 2 {
		q := make(polynomial, m-t+1)
		for k := range q {
			c, err := randomScalar(rng)
			if err != nil {
				return false, err
			}
			q[k] = c
		}
		for x := range m + 1 {
			scalars = append(scalars, grp.NewScalar().Mul(w[x], q.at(uint64(x))))
		}
	}
	return msm(points, scalars).IsIdentity(), nil
}

// dualWeights returns w_x = (−1)^(m−x)/(x!(m−x)!) for x = 0..m, the
// weights [Values.consistent] takes.
func dualWeights(m int) []group.Scalar {
	fact := make([]group.Scalar, m+1)
	fact[0] = grp.NewScalar().SetUint64(1)
	for x := 1; x <= m; x++ {
		fact[x] = grp.NewScalar().Mul(fact[x-1], grp.NewScalar().SetUint64(uint64(x)))
	}
	w := make([]group.Scalar, m+1)
	for x := range w {
		w[x] = grp.NewScalar().Inv(grp.NewScalar().Mul(fact[x], fact[m-x]))
		if (m-x)%2 == 1 {
			w[x].Neg(w[x])
		}
	}
	return w
}

// msm returns Σ s_i·P_i by Pippenger's bucket method: for each window of c
// bits of the scalars, points are added into 2^c − 1 buckets by digit and
// the buckets summed by running sums, about (253/c)(n + 2^(c+1)) additions
// against some 300 group operations per point one by one.
func msm(points []group.Element, scalars []group.Scalar) group.Element {
	c := 4
	for c < 8 && 1<<(c+2) < len(points) {
		c++
	}
	digits := make([][]byte, len(scalars))
	for i, s := range scalars {
		digits[i] = scalarBytesOf(s) // little endian
	}
	digit := func(b []byte, at int) int {
		d := 0
		for k := range c {
			if bit := at + k; bit/8 < len(b) {
				d |= int(b[bit/8]>>(bit%8)&1) << k
			}
		}
		return d
	}
	nbits := 0 // the longest scalar's bits: windows above it are empty
	for _, b := range digits {
		for k := len(b) - 1; k >= 0; k-- {
			if b[k] != 0 {
				nbits = max(nbits, 8*k+bits.Len8(b[k]))
				break
			}
		}
	}
	// Emptied with Set(zero), not Set(grp.Identity()): that allocated 2^c
	// elements a window, half a megabyte of garbage a dealing checked.
	zero := grp.Identity()
	buckets := make([]group.Element, 1<<c)
	for d := range buckets {
		buckets[d] = grp.Identity()
	}
	result, running, sum := grp.Identity(), grp.NewElement(), grp.NewElement()
	for at := max(nbits-1, 0) / c * c; at >= 0; at -= c {
		for range c {
			result.Dbl(result)
		}
		for d := range buckets {
			buckets[d].Set(zero)
		}
		for i, p := range points {
			if d := digit(digits[i], at); d != 0 {
				buckets[d].Add(buckets[d], p)
			}
		}
		running.Set(zero)
		sum.Set(zero)
		for d := len(buckets) - 1; d >= 1; d-- {
			running.Add(running, buckets[d])
			sum.Add(sum, running)
		}
		result.Add(result, sum)
	}
	return result
}

// lagrangeAtZero returns the coefficients l_i with Σ l_i P(x_i) = P(0) for
// every polynomial P of degree below len(xs): l_i = Π_{j≠i} x_j/(x_j − x_i).
// The xs must be distinct points among 1..m, with w = dualWeights(m). Since
// Π_{y≠x}(y − x) over all of 1..m is (−1)^(x−1)·(x−1)!·(m−x)!,
// l_i = (−1)^(m−1)·Π_j x_j·w_{x_i}·Π_y (y − x_i) over the points y of 1..m
// not in xs: no inversion, and products of small integers multiplied in
// machine words, so that secrets rebuilt from any t of their shares, not
// only the first t, cost little more than from the same t.
func lagrangeAtZero(xs []uint64, w []group.Scalar) []group.Scalar {
	m := uint64(len(w) - 1)
	in := make([]bool, m+1)
	for _, x := range xs {
		in[x] = true
	}
	var rest []uint64
	for y := uint64(1); y <= m; y++ {
		if !in[y] {
			rest = append(rest, y)
		}
	}
	p := product(xs, 0)
	if m%2 == 0 {
		p.Neg(p)
	}
	l := make([]group.Scalar, len(xs))
	for i, x := range xs {
		l[i] = product(rest, x)
		l[i].Mul(l[i], w[x])
		l[i].Mul(l[i], p)
	}
	return l
}

// product is Π (y − x) over ys: words multiplied while they hold the
// product, one scalar multiplication a word.
func product(ys []uint64, x uint64) group.Scalar {
	out, word := grp.NewScalar().SetUint64(1), grp.NewScalar()
	acc, neg := uint64(1), false
	for _, y := range ys {
		d := y - x
		if y < x {
			d, neg = x-y, !neg
		}
		hi, lo := bits.Mul64(acc, d)
		if hi != 0 {
			out.Mul(out, word.SetUint64(acc))
			lo = d
		}
		acc = lo
	}
	out.Mul(out, word.SetUint64(acc))
	if neg {
		out.Neg(out)
	}
	return out
}

// interpolator caches Lagrange coefficients by their points: a round's
// secrets are mostly rebuilt from the same points 1..t.
type interpolator map[string][]group.Scalar

// at0 is P(0) from t points among 1..m, w = dualWeights(m).
func (ip interpolator) at0(xs []uint64, ys []group.Scalar, w []group.Scalar) group.Scalar {
	key := fmt.Sprint(xs)
	l, ok := ip[key]
	if !ok {
		l = lagrangeAtZero(xs, w)
		ip[key] = l
	}
	v := grp.NewScalar()
	for i := range xs {
		v.Add(v, grp.NewScalar().Mul(l[i], ys[i]))
	}
	return v
}

// recoverSecret rebuilds the secret whose sharing polynomial's values are
// value(x) (value(0) = g^secret), x among 1..m with w = dualWeights(m), from
// the shares revealed by holders (holder id to its point x and share). It
// interpolates t shares and checks the result against value(0): the first
// t in holder order, those of suspect holders (found wrong in another
// secret) last. Only if that fails, which takes a wrong share among them,
// does it find which ([wrongShares]), leave them out and try the next t. It
// returns the holders whose shares were wrong.
func (ip interpolator) recoverSecret(t int, value func(uint64) group.Element, w []group.Scalar, shares map[uint64]revealed, suspect func(uint64) bool) (group.Scalar, []uint64, error) {
	if len(shares) < t {
		return nil, nil, fmt.Errorf("%d shares, threshold %d", len(shares), t)
	}
	var holders, suspects []uint64
	for _, h := range slices.Sorted(maps.Keys(shares)) {
		if suspect(h) {
			suspects = append(suspects, h)
		} else {
			holders = append(holders, h)
		}
	}
	holders = append(holders, suspects...)
	right := map[uint64]bool{} // found right by a batch check
	var wrong []uint64
	for len(holders) >= t {
		xs := make([]uint64, t)
		ys := make([]group.Scalar, t)
		var unsure []uint64
		for i, h := range holders[:t] {
			xs[i], ys[i] = shares[h].x, shares[h].v
			if !right[h] {
				unsure = append(unsure, h)
			}
		}
		s := ip.at0(xs, ys, w)
		if grp.NewElement().MulGen(s).IsEqual(value(0)) {
			return s, wrong, nil
		}
		set := make([]revealed, len(unsure))
		for i, h := range unsure {
			set[i] = shares[h]
		}
		bad, err := wrongShares(set, value, true)
		if err != nil {
			return nil, wrong, err
		}
		if len(bad) == 0 {
			return nil, wrong, errors.New("shares that each match their values interpolate to another secret")
		}
		for k, h := range unsure {
			if slices.Contains(bad, k) {
				wrong = append(wrong, h)
			} else {
				right[h] = true
			}
		}
		holders = slices.DeleteFunc(holders, func(h uint64) bool { return slices.Contains(wrong, h) })
	}
	return nil, wrong, fmt.Errorf("%d of the %d shares are wrong, threshold %d", len(wrong), len(shares), t)
}

// wrongShares returns the positions in set of the shares that do not match
// their values, given, if failing, that one does not. A set that fails one
// batch check ([sharesMatch]) is halved until single shares, each then
// checked alone: k wrong shares among n cost O(k log n) checks, not n.
func wrongShares(set []revealed, value func(uint64) group.Element, failing bool) ([]int, error) {
	if !failing || len(set) == 1 {
		ok, err := sharesMatch(set, value)
		if ok || err != nil {
			return nil, err
		}
		if len(set) == 1 {
			return []int{0}, nil
		}
	}
	half := len(set) / 2
	bad, err := wrongShares(set[:half], value, false)
	if err != nil {
		return nil, err
	}
	more, err := wrongShares(set[half:], value, len(bad) == 0)
	for _, k := range more {
		bad = append(bad, half+k)
	}
	return bad, err
}

// sharesMatch reports whether every share matches its value, g^share =
// value(x): a single share by itself; more at once, Σ r_k share_k·g =
// Σ r_k value(x_k) with random 128-bit r_k (a wrong share passes with
// probability 2^-128: Bellare, Garay and Rabin's small-exponent batch
// test), one multi-scalar multiplication.
func sharesMatch(set []revealed, value func(uint64) group.Element) (bool, error) {
	if len(set) == 1 {
		return grp.NewElement().MulGen(set[0].v).IsEqual(value(set[0].x)), nil
	}
	r := make([]byte, 16*len(set))
	if _, err := rand.Read(r); err != nil {
		return false, err
	}
	points := make([]group.Element, len(set))
	weights := make([]group.Scalar, len(set))
	sum := grp.NewScalar()
	for k, sh := range set {
		points[k] = value(sh.x)
		weights[k] = grp.NewScalar().SetBigInt(new(big.Int).SetBytes(r[16*k : 16*(k+1)]))
		sum.Add(sum, grp.NewScalar().Mul(weights[k], sh.v))
	}
	return msm(points, weights).IsEqual(grp.NewElement().MulGen(sum)), nil
}

// revealed is a share the server received, at its holder's point.
type revealed struct {
	x uint64
	v group.Scalar
}

// seal encrypts one dealing under a key used for nothing else, hence the
// fixed nonce; aad binds it to the holder's values.
func seal(key [32]byte, plain, aad []byte) []byte {
	return aead(key).Seal(nil, make([]byte, 12), plain, aad)
}

func open(key [32]byte, sealed, aad []byte) ([]byte, error) {
	return aead(key).Open(nil, make([]byte, 12), sealed, aad)
}

func aead(key [32]byte) cipher.AEAD {
	block, err := aes.NewCipher(key[:])
	if err != nil {
		panic(err) // unreachable: the key has a valid length
	}
	g, err := cipher.NewGCM(block)
	if err != nil {
		panic(err) // unreachable: AES has a 16-byte block
	}
	return g
}
