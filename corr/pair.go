package corr

import (
	"crypto/aes"
	"crypto/cipher"
	"crypto/ecdh"
	"fmt"
	"math"
)

// Pairing draws a round's pairs: a uniformly random permutation of the n
// clients, whose first round(alone*n) clients quantize alone (AugCorBin's
// gamma), the rest paired in order; with an odd remainder the last is alone
// too. partner[i] is i's partner, or -1.
func Pairing(src Source, n int, alone float64) []int {
	perm := make([]int, n)
	Shuffle(src, perm)
	partner := make([]int, n)
	for i := range partner {
		partner[i] = -1
	}
	rest := perm[min(n, int(math.Round(alone*float64(n)))):]
	for k := 0; k+1 < len(rest); k += 2 {
		a, b := rest[k], rest[k+1]
		partner[a], partner[b] = b, a
	}
	return partner
}

// Identity is a client's X25519 key for one round. Clients exchange the
// public halves through the server; each pair then holds a secret the
// server cannot compute (Diffie-Hellman, as in CorBin-FL Algorithm 3 line 1).
type Identity struct {
	key *ecdh.PrivateKey
}

// NewIdentity returns the X25519 key with the given 32 secret bytes (from a
// client's own randomness in a deployment, from the seed in a simulation).
func NewIdentity(secret [32]byte) (*Identity, error) {
	k, err := ecdh.X25519().NewPrivateKey(secret[:])
	if err != nil {
		return nil, fmt.Errorf("corr: %w", err)
	}
	return &Identity{key: k}, nil
}

// Public is the 32-byte public key to send to the partner.
func (id *Identity) Public() []byte { return id.key.PublicKey().Bytes() }

// PublicKeyBytes is the size of a public key on the wire.
const PublicKeyBytes = 32

// Pair is what two partners share in one round.
type Pair struct {
	secret    []byte
	round     uint64
	low, high uint64 // the two client ids, ordered
}

// Agree computes the secret that client self shares with client peer in a
// round, from self's identity and peer's public key. Both partners get the
// same Pair.
func (id *Identity) Agree(peerPublic []byte, round, self, peer uint64) (*Pair, error) {
	if self == peer {
		return nil, fmt.Errorf("corr: client %d cannot pair with itself", self)
	}
	pub, err := ecdh.X25519().NewPublicKey(peerPublic)
	if err != nil {
		return nil, fmt.Errorf("corr: partner %d public key: %w", peer, err)
	}
	s, err := id.key.ECDH(pub)
	if err != nil {
		return nil, fmt.Errorf("corr: key agreement with %d: %w", peer, err)
	}
	return &Pair{secret: s, round: round, low: min(self, peer), high: max(self, peer)}, nil
}

// Shared is the pair's stream of shared bits (the derived mode: no bits are
// sent, both partners expand the same key).
func (p *Pair) Shared() *Stream { return Derive(p.secret, "pair-shared", p.round, p.low, p.high) }

// Leader reports whether client self leads. The leader is chosen by a fair
// coin both partners derive from the secret: the same coin the paper's two
// exchanged bits give, without the exchange.
func (p *Pair) Leader(self uint64) bool {
	coin := Derive(p.secret, "pair-role", p.round, p.low, p.high).Uint64() & 1
	return (self == p.low) == (coin == 0)
}

// SealedOverhead is the number of bytes Seal adds to the shared bits.
const SealedOverhead = 16

// Seal encrypts and authenticates the leader's shared bits for the follower
// (the papers' transfer mode). AES-256-GCM under a key used for this one
// message, so the fixed nonce is never reused.
func (p *Pair) Seal(shared []byte) []byte {
	return p.aead().Seal(nil, make([]byte, 12), shared, nil)
}

// Open decrypts the leader's shared bits, failing if they were altered.
func (p *Pair) Open(sealed []byte) ([]byte, error) {
	b, err := p.aead().Open(nil, make([]byte, 12), sealed, nil)
	if err != nil {
		return nil, fmt.Errorf("corr: shared bits from the partner failed authentication: %w", err)
	}
	return b, nil
}

func (p *Pair) aead() cipher.AEAD {
	k := Key(p.secret, "pair-transfer", p.round, p.low, p.high)
	block, err := aes.NewCipher(k[:])
	if err != nil {
		panic(err) // unreachable: 32-byte key
	}
	g, err := cipher.NewGCM(block)
	if err != nil {
		panic(err) // unreachable: AES has a 16-byte block
	}
	return g
}
