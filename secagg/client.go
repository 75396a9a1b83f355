package secagg

import (
	"bytes"
	"crypto/ecdh"
	"encoding/binary"
	"fmt"
	"io"
	"maps"
	"slices"

	"github.com/fedpq/fedpq/corr"
)

// Advertised is a client's two public keys for a round: C seals shares to
// its neighbours, S makes its pairwise masks. Each is a 32-byte X25519 key.
type Advertised struct {
	C, S []byte
}

// Reveal is a survivor's answer to the unmask request: its share of the
// self-mask seed of each survivor (itself included) and of the s-key seed of
// each dropped client, keyed by the owner of the secret.
type Reveal struct {
	Self map[uint64][]byte
	Pair map[uint64][]byte
}

// sealedBytes is the size of one sealed pair of shares: the two ids, the
// shares of b and of the s seed, and the GCM tag.
const sealedBytes = 16 + 2*shareBytes + 16

// Client is one client's side of one round. Its methods are the protocol's
// steps and must be called in order: Keys, Share, Mask, Unmask. A Client is
// not safe for concurrent use.
type Client struct {
	p         Params
	id        uint64
	threshold int
	g         *graph
	rng       io.Reader
	c, s      *ecdh.PrivateKey
	sSeed     [32]byte
	b         [32]byte
	keys      map[uint64]Advertised // neighbours' keys, after Share
	openKeys  map[uint64][32]byte   // keys that open each neighbour's shares, after Share
	own       []byte                // own shares of b and the s seed
	held      map[uint64][]byte     // neighbours' shares of their b and s seed, after Mask
	step      int
}

// NewClient starts client id's round among ids (all the round's clients,
// from which the neighbour graph is drawn). rng supplies its secrets:
// crypto/rand.Reader in a deployment, a seeded stream in a simulation.
func NewClient(p Params, id uint64, ids []uint64, rng io.Reader) (*Client, error) {
	_, t, err := p.shape(len(ids))
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
	cl := &Client{p: p, id: id, threshold: t, g: g, rng: rng}
	var cSecret [32]byte
	if _, err := io.ReadFull(rng, cSecret[:]); err != nil {
		return nil, fmt.Errorf("secagg: client %d: %w", id, err)
	}
	if _, err := io.ReadFull(rng, cl.sSeed[:]); err != nil {
		return nil, fmt.Errorf("secagg: client %d: %w", id, err)
	}
	if cl.c, err = ecdh.X25519().NewPrivateKey(cSecret[:]); err != nil {
		return nil, fmt.Errorf("secagg: %w", err)
	}
	if cl.s, err = sKey(p, cl.sSeed); err != nil {
		return nil, err
	}
	return cl, nil
}

// sKey is the s key pair of a seed: sharing the 32-byte seed, not the key,
// lets Shamir shares of 16-byte halves carry it.
func sKey(p Params, seed [32]byte) (*ecdh.PrivateKey, error) {
	k := kdf(seed[:], p.Seed, "s key", p.Round)
	s, err := ecdh.X25519().NewPrivateKey(k[:])
	if err != nil {
		return nil, fmt.Errorf("secagg: %w", err)
	}
	return s, nil
}

// Keys is step 0 (AdvertiseKeys): the public keys to relay to the
// neighbours, authenticated by the caller.
func (cl *Client) Keys() Advertised {
	return Advertised{C: cl.c.PublicKey().Bytes(), S: cl.s.PublicKey().Bytes()}
}

// Share is step 1 (ShareKeys). keys holds the advertised keys the server
// relays; those of non-neighbours are ignored, and a neighbour without keys
// has dropped. It draws the self-mask seed, shares it and the s-key seed
// among the neighbours with keys and the client itself, and returns each
// neighbour's sealed shares, keyed by recipient. It fails when fewer than
// threshold share holders remain.
func (cl *Client) Share(keys map[uint64]Advertised) (map[uint64][]byte, error) {
	if cl.step != 0 {
		return nil, errPhase
	}
	cl.step++
	cl.keys = make(map[uint64]Advertised)
	holders := []uint64{cl.id}
	for _, j := range cl.g.neighbours(cl.id) {
		a, ok := keys[j]
		if !ok {
			continue
		}
		if err := checkKeys(a); err != nil {
			return nil, fmt.Errorf("secagg: client %d's keys: %w", j, err)
		}
		cl.keys[j] = a
		holders = append(holders, j)
	}
	if len(holders) < cl.threshold {
		return nil, fmt.Errorf("secagg: client %d: %d share holders (neighbours with keys and itself), threshold %d", cl.id, len(holders), cl.threshold)
	}
	if _, err := io.ReadFull(cl.rng, cl.b[:]); err != nil {
		return nil, fmt.Errorf("secagg: client %d: %w", cl.id, err)
	}
	bs, err := split(cl.b, cl.threshold, holders, cl.rng)
	if err != nil {
		return nil, err
	}
	ss, err := split(cl.sSeed, cl.threshold, holders, cl.rng)
	if err != nil {
		return nil, err
	}
	cl.own = append(bs[0], ss[0]...)
	out := make(map[uint64][]byte, len(holders)-1)
	cl.openKeys = make(map[uint64][32]byte, len(holders)-1)
	for k, j := range holders[1:] {
		pub, err := ecdh.X25519().NewPublicKey(cl.keys[j].C)
		if err != nil {
			return nil, fmt.Errorf("secagg: %w", err)
		}
		secret, err := cl.c.ECDH(pub)
		if err != nil {
			return nil, fmt.Errorf("secagg: client %d's c key: %w", j, err)
		}
		key := shareKey(cl.p, secret, cl.id, j)
		cl.openKeys[j] = shareKey(cl.p, secret, j, cl.id)
		plain := binary.LittleEndian.AppendUint64(nil, cl.id)
		plain = binary.LittleEndian.AppendUint64(plain, j)
		plain = append(append(plain, bs[k+1]...), ss[k+1]...)
		out[j] = seal(key, plain)
	}
	return out, nil
}

// checkKeys refuses keys that are not X25519 public keys, or are points
// of small order, with which every agreement is all zeros: a client that
// advertised one would make each neighbour's ECDH fail, and so knock it
// out of the round.
func checkKeys(a Advertised) error {
	for _, k := range [][]byte{a.C, a.S} {
		pub, err := ecdh.X25519().NewPublicKey(k)
		if err != nil {
			return err
		}
		if _, err := probe.ECDH(pub); err != nil {
			return err
		}
	}
	return nil
}

// probe is a fixed private key that checkKeys agrees with.
var probe = func() *ecdh.PrivateKey {
	k, err := ecdh.X25519().NewPrivateKey(bytes.Repeat([]byte{7}, 32))
	if err != nil {
		panic(err) // unreachable: any 32 bytes are an X25519 private key
	}
	return k
}()

// shareKey is the key that seals from's shares to to, from the agreement
// of their c keys: one key per direction, each used once.
func shareKey(p Params, secret []byte, from, to uint64) [32]byte {
	return kdf(secret, p.Seed, "share", p.Round, from, to)
}

// Mask is step 2 (MaskedInput). x is the client's vector, each value below
// 2^Bits; sealed holds the shares its neighbours sent it, keyed by sender.
// The neighbours that sent shares are those it masks with. It returns
// x + PRG(b) + Σ ±PRG(s_ij) mod 2^Bits, which alone is uniformly random.
func (cl *Client) Mask(x []uint64, sealed map[uint64][]byte) ([]uint64, error) {
	if cl.step != 1 {
		return nil, errPhase
	}
	cl.step++
	m := cl.p.mask()
	for i, v := range x {
		if v > m {
			return nil, fmt.Errorf("secagg: client %d: x[%d] = %d is not below 2^%d", cl.id, i, v, cl.p.Bits)
		}
	}
	cl.held = make(map[uint64][]byte, len(sealed))
	for j, ct := range sealed {
		key, ok := cl.openKeys[j]
		if !ok {
			return nil, fmt.Errorf("secagg: client %d: shares from %d, not a neighbour that advertised keys", cl.id, j)
		}
		plain, err := open(key, ct)
		if err != nil {
			return nil, fmt.Errorf("secagg: client %d: shares from %d: %w", cl.id, j, err)
		}
		if len(plain) != 16+2*shareBytes || binary.LittleEndian.Uint64(plain) != j || binary.LittleEndian.Uint64(plain[8:]) != cl.id {
			return nil, fmt.Errorf("secagg: client %d: shares from %d are not addressed from %d to %d", cl.id, j, j, cl.id)
		}
		cl.held[j] = plain[16:]
	}
	if len(cl.held)+1 < cl.threshold {
		return nil, fmt.Errorf("secagg: client %d: %d neighbours shared keys, threshold %d needs %d", cl.id, len(cl.held), cl.threshold, cl.threshold-1)
	}
	y := slices.Clone(x)
	buf := make([]uint64, len(x))
	corr.NewStream(selfKey(cl.p, cl.b, cl.id)).Fill(buf)
	add(y, buf)
	for _, j := range slices.Sorted(maps.Keys(cl.held)) {
		pub, err := ecdh.X25519().NewPublicKey(cl.keys[j].S)
		if err != nil {
			return nil, fmt.Errorf("secagg: %w", err)
		}
		secret, err := cl.s.ECDH(pub)
		if err != nil {
			return nil, fmt.Errorf("secagg: client %d's s key: %w", j, err)
		}
		corr.NewStream(pairKey(cl.p, secret, cl.id, j)).Fill(buf)
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
func selfKey(p Params, b [32]byte, id uint64) [32]byte {
	return kdf(b[:], p.Seed, "self mask", p.Round, id)
}

// pairKey is the key of the mask that clients i and j share.
func pairKey(p Params, secret []byte, i, j uint64) [32]byte {
	return kdf(secret, p.Seed, "pair mask", p.Round, min(i, j), max(i, j))
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

// Unmask is step 3. survivors are the clients whose masked input reached
// the server, dropped those that shared keys and sent none (lists may name
// clients that are not neighbours; they are ignored). It reveals its shares
// of the survivors' self-mask seeds and of the dropped clients' s-key seeds.
// It refuses, revealing nothing, when a client is in both lists, when it is
// itself not a survivor, when a listed neighbour never shared keys with it,
// when fewer than threshold of its share holders (neighbours that shared and
// itself) survived, and when asked a second time.
func (cl *Client) Unmask(survivors, dropped []uint64) (Reveal, error) {
	if cl.step != 2 {
		return Reveal{}, errPhase
	}
	cl.step++
	alive := make(map[uint64]bool, len(survivors))
	for _, j := range survivors {
		alive[j] = true
	}
	if !alive[cl.id] {
		return Reveal{}, fmt.Errorf("secagg: client %d: refused: the request does not list it as a survivor", cl.id)
	}
	for _, j := range dropped {
		if alive[j] {
			return Reveal{}, fmt.Errorf("secagg: client %d: refused: client %d is listed both as a survivor and as dropped", cl.id, j)
		}
	}
	r := Reveal{Self: map[uint64][]byte{cl.id: cl.own[:shareBytes]}, Pair: map[uint64][]byte{}}
	for _, list := range []struct {
		ids  []uint64
		into map[uint64][]byte
		part int
	}{{survivors, r.Self, 0}, {dropped, r.Pair, 1}} {
		for _, j := range list.ids {
			if j == cl.id || !cl.g.adjacent(cl.id, j) {
				continue
			}
			sh, ok := cl.held[j]
			if !ok {
				return Reveal{}, fmt.Errorf("secagg: client %d: refused: neighbour %d never shared keys with it", cl.id, j)
			}
			list.into[j] = sh[list.part*shareBytes : (list.part+1)*shareBytes]
		}
	}
	if len(r.Self) < cl.threshold {
		return Reveal{}, fmt.Errorf("secagg: client %d: refused: %d of its share holders survived, threshold %d", cl.id, len(r.Self), cl.threshold)
	}
	return r, nil
}
