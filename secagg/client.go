package secagg

import (
	"crypto/ecdh"
	"crypto/rand"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math"
	"math/big"
	"slices"

	"github.com/cloudflare/circl/group"

	"github.com/fedpq/fedpq/corr"
)

// refused is the step of a client that refused an unmask request: it
// takes no further step.
const refused = -1

// Advertised is a client's two public keys for a round: C, an X25519 key,
// seals the shares it is dealt; S = g^s, a ristretto255 element, is its mask
// key and the commitment to the constant term of s's sharing. 32 bytes each.
type Advertised struct {
	C, S []byte
}

// Dealing is what a client sends at ShareKeys: the commitments to its two
// sharing polynomials' values and each holder's sealed shares, keyed by
// holder.
type Dealing struct {
	Values *Values
	Sealed map[uint64][]byte
}

// Delivery is one dealer's dealing as the server relays it to one holder:
// the holder's two values (64 bytes), and its sealed shares.
type Delivery struct {
	Values []byte
	Sealed []byte
}

// Request is the server's unmask request: the survivors, whose masked
// inputs arrived, and the dropped, which were kept for masking and sent
// none; both sorted.
type Request struct {
	Survivors, Dropped []uint64
}

// Digest is what a survivor consents to: the request, bound to the session
// and round. Its caller signs it.
func (r Request) Digest(p Params) [32]byte {
	h := sha256.New()
	h.Write([]byte("fedpq/v2 secagg unmask request"))
	h.Write(p.Seed[:])
	b := binary.LittleEndian.AppendUint64(nil, p.Round)
	for _, list := range [][]uint64{r.Survivors, r.Dropped} {
		b = binary.LittleEndian.AppendUint64(b, uint64(len(list)))
		for _, id := range list {
			b = binary.LittleEndian.AppendUint64(b, id)
		}
	}
	h.Write(b)
	return [32]byte(h.Sum(nil))
}

// Reveal is a survivor's answer to the unmask request: its share of the
// self-mask seed b of each survivor (itself included) and of the mask key s
// of each dropped client, keyed by the owner of the secret; 32 bytes each.
type Reveal struct {
	Self map[uint64][]byte
	Pair map[uint64][]byte
}

// Client is one client's side of one round. Its methods are the protocol's
// steps and must be called in order: Keys, Share, Check, Mask, Consent,
// Unmask. A Client is not safe for concurrent use.
type Client struct {
	p         Params
	pol       Policy
	id        uint64
	n         int
	degree    int
	threshold int
	g         *graph
	rng       io.Reader
	c         *ecdh.PrivateKey
	s         group.Scalar
	sPub      []byte
	b         group.Scalar
	step      int
	peers     map[uint64]group.Element // mask keys of the neighbours it dealt to
	openKeys  map[uint64][32]byte      // keys that open each of them's dealing
	rejected  []uint64                 // neighbours whose keys it refused
	own       [2]group.Scalar          // its own shares of b and s
	polys     [2]polynomial            // b's and s's sharing polynomials, for disclosures
	dealt     *Values                  // the commitments of its dealing
	points    map[uint64]uint64        // its holders' points
	disclosed bool                     // whether it answered complaints
	arrived   map[uint64]bool          // peers whose dealings reached it
	held      map[uint64][2]group.Scalar
	partners  []uint64
	request   Request
	digest    [32]byte
	// tamper, set by Run only, alters the shares dealt to a holder: the
	// deviations of a dishonest dealer.
	tamper func(holder uint64, sh *[2]group.Scalar)
}

// NewClient starts client id's round among ids (all the round's clients,
// from which the neighbour graph is drawn), after checking the round's
// settings against the client's policy. rng supplies its secrets:
// crypto/rand.Reader in a deployment, a seeded stream in a simulation.
func NewClient(p Params, pol Policy, id uint64, ids []uint64, rng io.Reader) (*Client, error) {
	if err := pol.Check(p, len(ids)); err != nil {
		return nil, err
	}
	degree, t, err := p.shape(len(ids))
	if err != nil {
		return nil, err
	}
	g, err := newGraph(p, ids)
	if err != nil {
		return nil, err
	}
	if _, ok := g.pos[id]; !ok {
		return nil, fmt.Errorf("secagg: client %d is not among the round's clients", id)
	}
	cl := &Client{p: p, pol: pol, id: id, n: len(ids), degree: degree, threshold: t, g: g, rng: rng}
	var cSecret [32]byte
	if _, err := io.ReadFull(rng, cSecret[:]); err != nil {
		return nil, fmt.Errorf("secagg: client %d: %w", id, err)
	}
	if cl.c, err = ecdh.X25519().NewPrivateKey(cSecret[:]); err != nil {
		return nil, fmt.Errorf("secagg: %w", err)
	}
	if cl.s, err = randomScalar(rng); err != nil {
		return nil, fmt.Errorf("secagg: client %d: %w", id, err)
	}
	if cl.s.IsZero() {
		return nil, errors.New("secagg: a zero mask key") // probability 2^-252
	}
	cl.sPub = elementBytesOf(grp.NewElement().MulGen(cl.s))
	return cl, nil
}

// Keys is step 0 (AdvertiseKeys): the public keys to relay to the
// neighbours, authenticated by the caller.
func (cl *Client) Keys() Advertised {
	return Advertised{C: cl.c.PublicKey().Bytes(), S: slices.Clone(cl.sPub)}
}

// Share is step 1 (ShareKeys). keys holds the advertised keys the server
// relays, already authenticated by the caller; those of non-neighbours are
// ignored, a neighbour without keys has dropped, and one whose keys are not
// valid (not a key, or one with which every agreement is known) is left
// out ([Client.Rejected]). It draws the self-mask seed, shares it and the
// mask key among the neighbours it keeps and itself, and returns its
// dealing. It fails when fewer than threshold share holders remain.
func (cl *Client) Share(keys map[uint64]Advertised) (Dealing, error) {
	if cl.step != 0 {
		return Dealing{}, errPhase
	}
	cl.step++
	cl.peers = map[uint64]group.Element{}
	cl.openKeys = map[uint64][32]byte{}
	sealKeys := map[uint64][32]byte{}
	for _, j := range cl.g.neighbours(cl.id) {
		a, ok := keys[j]
		if !ok {
			continue
		}
		S, secret, err := cl.agree(a)
		if err != nil {
			cl.rejected = append(cl.rejected, j)
			continue
		}
		cl.peers[j] = S
		sealKeys[j] = shareKey(cl.p, secret, cl.id, j)
		cl.openKeys[j] = shareKey(cl.p, secret, j, cl.id)
	}
	if len(cl.peers)+1 < cl.threshold {
		return Dealing{}, fmt.Errorf("secagg: client %d: %d share holders (neighbours with valid keys and itself), threshold %d", cl.id, len(cl.peers)+1, cl.threshold)
	}
	var err error
	if cl.b, err = randomScalar(cl.rng); err != nil {
		return Dealing{}, fmt.Errorf("secagg: client %d: %w", cl.id, err)
	}
	bPoly, err := newPolynomial(cl.b, cl.threshold, cl.rng)
	if err != nil {
		return Dealing{}, err
	}
	sPoly, err := newPolynomial(cl.s, cl.threshold, cl.rng)
	if err != nil {
		return Dealing{}, err
	}
	x := cl.g.points(cl.id)
	vs := values(bPoly, sPoly, len(x))
	cl.own = [2]group.Scalar{bPoly.at(x[cl.id]), sPoly.at(x[cl.id])}
	cl.polys = [2]polynomial{bPoly, sPoly}
	cl.dealt, cl.points = vs, x
	d := Dealing{Values: vs, Sealed: make(map[uint64][]byte, len(cl.peers))}
	for j := range cl.peers {
		sh := [2]group.Scalar{bPoly.at(x[j]), sPoly.at(x[j])}
		if cl.tamper != nil {
			cl.tamper(j, &sh)
		}
		plain := binary.LittleEndian.AppendUint64(nil, cl.id)
		plain = binary.LittleEndian.AppendUint64(plain, j)
		plain = append(plain, scalarBytesOf(sh[0])...)
		plain = append(plain, scalarBytesOf(sh[1])...)
		d.Sealed[j] = seal(sealKeys[j], plain, vs.holderValues(x[j]))
	}
	return d, nil
}

// HolderValues is the encoding of holder's two values in the client's
// dealing: what the server relays with the holder's sealed shares, and
// what the dealer's caller signs with them. Valid after Share.
func (cl *Client) HolderValues(holder uint64) []byte {
	return cl.dealt.holderValues(cl.points[holder])
}

// agree checks a neighbour's advertised keys and returns its mask key and
// the X25519 agreement of the c keys. Go's X25519 refuses a point of small
// order, with which the agreement would be all zeros.
func (cl *Client) agree(a Advertised) (group.Element, []byte, error) {
	S, err := parseElement(a.S)
	if err != nil {
		return nil, nil, err
	}
	pub, err := ecdh.X25519().NewPublicKey(a.C)
	if err != nil {
		return nil, nil, err
	}
	secret, err := cl.c.ECDH(pub)
	if err != nil {
		return nil, nil, err
	}
	return S, secret, nil
}

// Rejected is the neighbours whose advertised keys Share refused.
func (cl *Client) Rejected() []uint64 { return slices.Clone(cl.rejected) }

// shareKey is the key that seals from's shares to to, from the agreement
// of their c keys: one key per direction, each used once.
func shareKey(p Params, secret []byte, from, to uint64) [32]byte {
	return kdf(secret, p.Seed, "share", p.Round, from, to)
}

// Check is step 2 (CheckShares). inbox holds the dealings the server relays
// to the client, keyed by dealer, each one the caller has checked the dealer
// signed (see [Client.Disclose] for why). It opens each and checks both
// shares against their values, keeps the right ones, and returns the
// dealers it complains of: those whose dealing does not open under its
// values, is not addressed from the dealer to it, or holds a wrong share;
// and those whose keys it refused. Dealings from clients that are not
// neighbours are ignored.
func (cl *Client) Check(inbox map[uint64]Delivery) ([]uint64, error) {
	if cl.step != 1 {
		return nil, errPhase
	}
	cl.step++
	cl.arrived = map[uint64]bool{}
	cl.held = map[uint64][2]group.Scalar{}
	var complaints []uint64
	opened := map[uint64]dealt{}
	for j, d := range inbox {
		if !cl.g.adjacent(cl.id, j) {
			continue
		}
		if _, ok := cl.peers[j]; ok {
			cl.arrived[j] = true
		}
		o, err := cl.open(j, d)
		if err != nil {
			complaints = append(complaints, j)
			continue
		}
		opened[j] = o
	}
	wrong, err := checkShares(opened)
	if err != nil {
		return nil, err
	}
	for j, o := range opened {
		if wrong[j] {
			complaints = append(complaints, j)
		} else {
			cl.held[j] = o.shares
		}
	}
	slices.Sort(complaints)
	return complaints, nil
}

// Disclosure is a dealer's answer to the holders that complained of its
// shares: the two shares it dealt each of them, in the clear, 32 bytes each,
// keyed by holder.
type Disclosure map[uint64][2][]byte

// Disclose is step 2b, for a dealer some holders complained of: it returns
// the shares it dealt to complainers, which the server checks against its
// values (Feldman's complaint round). A disputed dealing is resolved before
// any masked input is counted, so a dealer that dealt wrong shares and left
// is dropped before masking and costs the round nothing; one that answers
// is as recoverable as an honest one.
//
// A disclosed share is public. An honest holder complains of an honest
// dealer only if the dealing it got is not the one the dealer sent, which
// its caller rules out by checking the dealer's signature on it; so an
// honest dealer discloses only shares of colluding holders, which the
// server knows already. As a second line, it refuses to disclose more than
// t−1−c shares (c the colluders its policy allows among its holders), so
// that disclosed and colluding shares together never reach the threshold.
func (cl *Client) Disclose(complainers []uint64) (Disclosure, error) {
	if cl.step != 2 || cl.disclosed {
		return nil, errPhase
	}
	cl.disclosed = true
	limit := cl.threshold - 1 - colluders(cl.n, cl.degree, cl.pol.Corrupt)
	if len(complainers) > limit {
		return nil, fmt.Errorf("secagg: client %d: %d holders complain of its shares; it discloses at most %d (threshold %d, less the colluders its policy allows, less one)", cl.id, len(complainers), max(limit, 0), cl.threshold)
	}
	x := cl.points
	d := make(Disclosure, len(complainers))
	for _, h := range complainers {
		if _, ok := cl.peers[h]; !ok {
			return nil, fmt.Errorf("secagg: client %d: %d complains of its shares, but it dealt none to it", cl.id, h)
		}
		if _, dup := d[h]; dup {
			return nil, fmt.Errorf("secagg: client %d: %d complains twice", cl.id, h)
		}
		d[h] = [2][]byte{scalarBytesOf(cl.polys[0].at(x[h])), scalarBytesOf(cl.polys[1].at(x[h]))}
	}
	return d, nil
}

// dealt is an opened dealing: the holder's two shares and the values they
// must match.
type dealt struct {
	shares [2]group.Scalar
	values [2]group.Element
}

// checkShares finds the dealings whose shares do not match their values,
// g^share = value. It checks them all at once, Σ r_k share_k·g = Σ r_k
// value_k with random 128-bit r_k (a wrong share passes with probability
// 2^-128: Bellare, Garay and Rabin's small-exponent batch test), one
// multi-scalar multiplication instead of one scalar multiplication per
// share; only when that fails does it check them one by one.
func checkShares(opened map[uint64]dealt) (map[uint64]bool, error) {
	if len(opened) == 0 {
		return nil, nil
	}
	var points []group.Element
	var weights []group.Scalar
	sum := grp.NewScalar()
	for _, o := range opened {
		for k := range 2 {
			var r [16]byte
			if _, err := rand.Read(r[:]); err != nil {
				return nil, err
			}
			w := grp.NewScalar().SetBigInt(new(big.Int).SetBytes(r[:]))
			points, weights = append(points, o.values[k]), append(weights, w)
			sum.Add(sum, grp.NewScalar().Mul(w, o.shares[k]))
		}
	}
	if msm(points, weights).IsEqual(grp.NewElement().MulGen(sum)) {
		return nil, nil
	}
	wrong := map[uint64]bool{}
	for j, o := range opened {
		for k := range 2 {
			if !grp.NewElement().MulGen(o.shares[k]).IsEqual(o.values[k]) {
				wrong[j] = true
			}
		}
	}
	return wrong, nil
}

// open opens dealer j's dealing and reads its shares and values; whether
// they match is checkShares'.
func (cl *Client) open(j uint64, d Delivery) (dealt, error) {
	var o dealt
	if _, ok := cl.peers[j]; !ok {
		return o, errors.New("its keys were refused")
	}
	if len(d.Values) != 2*elementBytes {
		return o, errors.New("not two values")
	}
	plain, err := open(cl.openKeys[j], d.Sealed, d.Values)
	if err != nil {
		return o, err
	}
	if len(plain) != 16+2*scalarBytes || binary.LittleEndian.Uint64(plain) != j || binary.LittleEndian.Uint64(plain[8:]) != cl.id {
		return o, errors.New("not addressed from it to this client")
	}
	for k := range 2 {
		if o.shares[k], err = parseScalar(plain[16+k*scalarBytes : 16+(k+1)*scalarBytes]); err != nil {
			return o, err
		}
		if o.values[k], err = parseElement(d.Values[k*elementBytes : (k+1)*elementBytes]); err != nil {
			return o, err
		}
	}
	return o, nil
}

// Mask is step 3 (MaskedInput). x is the client's vector, each value below
// 2^Bits; partners are the neighbours the server kept that it exchanged
// dealings with, whose masks cancel its own. It returns
// x + PRG(b) + Σ ±PRG(s_ij) mod 2^Bits, which alone is uniformly random. It
// refuses partners it did not exchange dealings with, and fewer than
// threshold−1 of them.
func (cl *Client) Mask(x []uint64, partners []uint64) ([]uint64, error) {
	if cl.step != 2 {
		return nil, errPhase
	}
	cl.step++
	m := cl.p.mask()
	for i, v := range x {
		if v > m {
			return nil, fmt.Errorf("secagg: client %d: x[%d] = %d is not below 2^%d", cl.id, i, v, cl.p.Bits)
		}
	}
	for i, j := range partners {
		if i > 0 && j <= partners[i-1] {
			return nil, fmt.Errorf("secagg: client %d: partners not sorted, or listed twice", cl.id)
		}
		if !cl.arrived[j] {
			return nil, fmt.Errorf("secagg: client %d: partner %d is not a neighbour it exchanged dealings with", cl.id, j)
		}
	}
	if len(partners)+1 < cl.threshold {
		return nil, fmt.Errorf("secagg: client %d: %d partners, threshold %d needs %d", cl.id, len(partners), cl.threshold, cl.threshold-1)
	}
	cl.partners = slices.Clone(partners)
	y := slices.Clone(x)
	buf := make([]uint64, len(x))
	corr.NewStream(selfKey(cl.p, cl.b, cl.id)).Fill(buf)
	add(y, buf)
	for _, j := range partners {
		corr.NewStream(pairKey(cl.p, cl.peers[j], cl.s, cl.id, j)).Fill(buf)
		if cl.id < j {
			add(y, buf)
		} else {
			sub(y, buf)
		}
	}
	for i := range y {
		y[i] &= m
	}
	return y, nil
}

// selfKey is the key of client id's self mask.
func selfKey(p Params, b group.Scalar, id uint64) [32]byte {
	return kdf(scalarBytesOf(b), p.Seed, "self mask", p.Round, id)
}

// pairKey is the key of the mask that clients i and j share: from the
// agreement g^{s_i s_j}, computed as S·s by either of them, or by the
// server once it has rebuilt one of the two s.
func pairKey(p Params, S group.Element, s group.Scalar, i, j uint64) [32]byte {
	shared := elementBytesOf(grp.NewElement().Mul(S, s))
	return kdf(shared, p.Seed, "pair mask", p.Round, min(i, j), max(i, j))
}

func add(y, m []uint64) {
	for i := range y {
		y[i] += m[i]
	}
}

func sub(y, m []uint64) {
	for i := range y {
		y[i] -= m[i]
	}
}

// Consent is step 4 (Consistency): it checks the unmask request and returns
// the digest its caller signs. It refuses, agreeing to nothing, a request
// whose lists are not sorted, disjoint and of the round's clients, that does
// not list the client as a survivor, that leaves out one of its partners,
// whose survivors are not connected in the graph, or where fewer than
// threshold−1 of its partners survived (threshold with itself: Bonawitz et
// al.'s U3 ⊆ U2, |U3| >= t); in a sparse graph also one with so many
// clients missing that, with the corrupt fraction of its policy, the honest
// survivors could be disconnected (Bell et al.'s bound, at 2^-40).
//
// Counting partners, not neighbours, is what keeps a server from listing
// the partners a client masked with as dropped and other neighbours as
// survivors, and so rebuilding both its self mask and every pair mask:
// [MinThreshold] keeps threshold−1 above the colluders, so at least one
// partner that survives is honest, and its mask key is never revealed (see
// [Client.Unmask]).
func (cl *Client) Consent(r Request) ([32]byte, error) {
	if cl.step != 3 {
		return [32]byte{}, errPhase
	}
	cl.step = refused // until the request passes every check
	refuse := func(format string, a ...any) ([32]byte, error) {
		return [32]byte{}, fmt.Errorf("secagg: client %d: refused the unmask request: "+format, append([]any{cl.id}, a...)...)
	}
	listed := map[uint64]bool{}
	alive := map[uint64]bool{}
	for k, list := range [][]uint64{r.Survivors, r.Dropped} {
		for i, j := range list {
			if i > 0 && j <= list[i-1] {
				return refuse("its lists are not sorted")
			}
			if _, ok := cl.g.pos[j]; !ok {
				return refuse("client %d is not in the round", j)
			}
			if listed[j] {
				return refuse("client %d is listed both as a survivor and as dropped", j)
			}
			listed[j] = true
			alive[j] = k == 0
		}
	}
	if !alive[cl.id] {
		return refuse("it is not listed as a survivor")
	}
	for _, j := range cl.partners {
		if !listed[j] {
			return refuse("its partner %d is neither a survivor nor dropped", j)
		}
	}
	surviving := 0
	for _, j := range cl.partners {
		if alive[j] {
			surviving++
		}
	}
	if surviving+1 < cl.threshold {
		return refuse("%d of its %d partners survived; threshold %d needs %d", surviving, len(cl.partners), cl.threshold, cl.threshold-1)
	}
	if !cl.g.connected(r.Survivors) {
		return refuse("the %d survivors are not connected in the graph", len(r.Survivors))
	}
	if b := corruptCount(cl.n, cl.pol.Corrupt) + cl.n - len(r.Survivors); disconnectLog(cl.n, cl.degree, b) >= -securityBits*math.Ln2 {
		return refuse("%d of %d clients did not survive, too many for degree %d to keep the honest survivors connected", cl.n-len(r.Survivors), cl.n, cl.degree)
	}
	cl.request = Request{Survivors: slices.Clone(r.Survivors), Dropped: slices.Clone(r.Dropped)}
	cl.digest = r.Digest(cl.p)
	cl.step = 4
	return cl.digest, nil
}

// Unmask is step 5. consenting holds the clients whose consent to the same
// request the caller verified (the client itself among them); those it needs
// are [Client.Witnesses]. It reveals its share of a survivor's self-mask
// seed only when the request is certified for that survivor (at least
// threshold of the survivor's share holders consented to it), and its share
// of a dropped client's mask key only when the request is certified for the
// dropped client and for every one of its neighbours. One kind of share per
// client, never both; it refuses whole when the request is not certified for
// itself.
//
// Why this suffices, with c < threshold colluders among any client's
// holders and 2·threshold > holders + c ([MinThreshold]): honest clients
// consent once, so at most one request is certified for any client. A
// client V's self mask is revealed only under the one request R certified
// for V, listing V as a survivor; the mask key of V's partner j only under a
// request certified for j's neighbour V, which is R again, listing j as
// dropped. To remove every mask from V's input the server needs both, so R
// lists every honest partner of V as dropped; V refuses such an R (too few
// partners survive) and the dropped partners do not consent, which leaves
// R fewer than threshold consents among V's holders: not certified.
func (cl *Client) Unmask(consenting []uint64) (Reveal, error) {
	if cl.step != 4 {
		return Reveal{}, errPhase
	}
	cl.step++
	agreed := map[uint64]bool{}
	for _, j := range consenting {
		agreed[j] = true
	}
	certified := cl.g.certifier(agreed, cl.threshold)
	if n := cl.g.consents(cl.id, agreed); n < cl.threshold {
		return Reveal{}, fmt.Errorf("secagg: client %d: refused to unmask: %d of its share holders consented to the request, threshold %d", cl.id, n, cl.threshold)
	}
	r := Reveal{Self: map[uint64][]byte{cl.id: scalarBytesOf(cl.own[0])}, Pair: map[uint64][]byte{}}
	for _, j := range cl.request.Survivors {
		if sh, ok := cl.held[j]; ok && certified(j) {
			r.Self[j] = scalarBytesOf(sh[0])
		}
	}
	for _, j := range cl.request.Dropped {
		if sh, ok := cl.held[j]; ok && certified(j) && all(cl.g.neighbours(j), certified) {
			r.Pair[j] = scalarBytesOf(sh[1])
		}
	}
	return r, nil
}

// Witnesses is the clients whose consents the client needs to see to
// unmask what it can: the share holders of each client it holds shares of
// and, for a dropped one, of each of its neighbours. Valid after Consent.
func (cl *Client) Witnesses() []uint64 {
	return cl.g.witnesses(cl.id, cl.request.Dropped)
}

func all(ids []uint64, f func(uint64) bool) bool {
	for _, id := range ids {
		if !f(id) {
			return false
		}
	}
	return true
}
