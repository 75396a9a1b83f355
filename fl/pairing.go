package fl

import (
	"fmt"

	"github.com/fedpq/fedpq/corr"
	"github.com/fedpq/fedpq/mech"
)

// Pairing is how one round couples a mechanism's n clients (indexed 0..n-1
// within the round), and the randomness that follows: the pairing or group
// order the server announces, and how each client's Slot is made. In a simulation every
// secret derives from the run's seed; the key agreement, role coin and
// sealing are the real ones.
type Pairing struct {
	m        mech.Mechanism
	secret   []byte
	t        uint64
	n        int
	transfer bool
	partner  []int // Paired: each client's partner, or -1
	order    []int // Grouped: each client's position
}

// NewPairing draws round t's pairing (Paired mechanisms) or group order
// (Grouped) for n clients from secret. With transfer, a pair's leader sends
// its shared bits sealed, as the papers do, instead of both deriving them.
func NewPairing(m mech.Mechanism, secret []byte, t uint64, n int, transfer bool) *Pairing {
	r := &Pairing{m: m, secret: secret, t: t, n: n, transfer: transfer}
	switch m.Coupling() {
	case mech.Paired:
		r.partner = corr.Pairing(corr.Derive(secret, "pairing", t), n, m.Alone())
	case mech.Grouped:
		r.order = make([]int, n)
		corr.Shuffle(corr.Derive(secret, "group-order", t), r.order)
	}
	return r
}

// Partner is client i's partner, or -1 (unpaired, or not a Paired mechanism).
func (r *Pairing) Partner(i int) int {
	if r.partner == nil {
		return -1
	}
	return r.partner[i]
}

// Pairs is the number of pairs formed.
func (r *Pairing) Pairs() int {
	p := 0
	for i, j := range r.partner {
		if j > i {
			p++
		}
	}
	return p
}

// ClientSlot returns client i's randomness for encoding n parameters in
// all (the sum over its tensors, which sizes the transfer mode's message).
func (r *Pairing) ClientSlot(i, n int) (mech.Slot, error) {
	slot := mech.Slot{Private: corr.Derive(r.secret, "private", r.t, uint64(i))}
	if k, ok := r.SharedKey(i); ok {
		slot.Shared = corr.NewStream(k)
	}
	slot.Index, slot.Size = r.Group(i)
	if r.m.Coupling() == mech.Paired {
		if err := r.pair(i, n, &slot); err != nil {
			return slot, err
		}
	}
	return slot, nil
}

// SharedKey is the key of the stream client i shares with the server: its
// dither (Dithered) or the group's bits (Grouped); false for mechanisms that
// share nothing with the server. A deployed server sends it to the client
// with the round.
func (r *Pairing) SharedKey(i int) ([32]byte, bool) {
	switch r.m.Coupling() {
	case mech.Grouped:
		return corr.Key(r.secret, "group-shared", r.t), true
	case mech.Dithered:
		return corr.Key(r.secret, "dither", r.t, uint64(i)), true
	}
	return [32]byte{}, false
}

// Group is client i's place in its group (Grouped); 0, 0 otherwise.
func (r *Pairing) Group(i int) (index, size int) {
	if r.order == nil {
		return 0, 0
	}
	return r.order[i], r.n
}

// ServerSlot is what the server knows of client i's randomness: the dither
// it shares with Dithered clients, nothing otherwise.
func (r *Pairing) ServerSlot(i int) mech.Slot {
	if r.m.Coupling() == mech.Dithered {
		k, _ := r.SharedKey(i)
		return mech.Slot{Shared: corr.NewStream(k)}
	}
	return mech.Slot{}
}

// SetupBytes is what one pair sends to set up its shared bits for n
// parameters of mechanism m: two X25519 public keys, plus in transfer mode
// the sealed bits (whole 64-bit words). 0 for unpaired mechanisms.
func SetupBytes(m mech.Mechanism, n int, transfer bool) int {
	if m.Coupling() != mech.Paired {
		return 0
	}
	b := 2 * corr.PublicKeyBytes
	if transfer {
		b += TransferBytes(m, n) + corr.SealedOverhead
	}
	return b
}

// TransferBytes is the size of the shared bits a leader sends for n
// parameters in transfer mode: whole 64-bit words, as the follower reads
// them; 0 if m does not say how many shared bits it uses.
func TransferBytes(m mech.Mechanism, n int) int {
	sb, ok := m.(mech.SharedBitser)
	if !ok {
		return 0
	}
	return 8 * ((sb.SharedBits(n) + 63) / 64)
}

// identity is client i's X25519 key for the round.
func (r *Pairing) identity(i int) (*corr.Identity, error) {
	return corr.NewIdentity(corr.Key(r.secret, "x25519", r.t, uint64(i)))
}

// pair runs client i's key agreement with its partner and sets its role
// and shared bits: derived from the secret, or, in transfer mode, sent by
// the leader sealed under a key from the secret.
func (r *Pairing) pair(i, n int, slot *mech.Slot) error {
	j := r.partner[i]
	if j < 0 {
		return nil // alone: an exact ldpq client
	}
	me, err := r.identity(i)
	if err != nil {
		return err
	}
	peer, err := r.identity(j)
	if err != nil {
		return err
	}
	p, err := me.Agree(peer.Public(), r.t, uint64(i), uint64(j))
	if err != nil {
		return err
	}
	slot.Role = mech.Follower
	leader := j
	if p.Leader(uint64(i)) {
		slot.Role, leader = mech.Leader, i
	}
	if !r.transfer {
		slot.Shared = p.Shared()
		return nil
	}
	if TransferBytes(r.m, n) == 0 {
		return fmt.Errorf("fl: %s does not say how many shared bits it uses", r.m.Name())
	}
	// The leader draws the bits from a stream of its own and seals them;
	// in a simulation both partners compute the sealed message it sends.
	bits := make([]byte, TransferBytes(r.m, n))
	corr.Derive(r.secret, "leader-bits", r.t, uint64(leader)).Read(bits)
	opened, err := p.Open(p.Seal(bits))
	if err != nil {
		return err
	}
	src, err := corr.NewBytes(opened)
	if err != nil {
		return err
	}
	slot.Shared = src
	return nil
}
