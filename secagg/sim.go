package secagg

import (
	"fmt"
	"io"
	"maps"
	"slices"

	"github.com/cloudflare/circl/group"
)

// Behaviour is how a client of [Run] takes part in a round: honestly, or
// deviating from the protocol in one of the ways a round must survive at the
// cost of that client's input alone.
type Behaviour int

const (
	Honest Behaviour = iota
	// LeaveAfterKeys advertises its keys, then vanishes.
	LeaveAfterKeys
	// LeaveAfterShares deals its shares, then vanishes.
	LeaveAfterShares
	// LeaveAfterCheck checks its shares, then vanishes before masking.
	LeaveAfterCheck
	// LeaveAfterMask sends its masked input, then vanishes: its input is
	// still summed, its self mask rebuilt from its holders.
	LeaveAfterMask
	// BadKeys advertises keys with which every agreement is known.
	BadKeys
	// GarbageShares deals ciphertexts of the right size full of random bytes.
	GarbageShares
	// WrongShares deals well-sealed shares that do not match its commitments.
	WrongShares
	// OneWrongShare deals one neighbour a wrong share, the others right ones:
	// its input is still summed.
	OneWrongShare
	// ShortShares deals a ciphertext of the wrong size.
	ShortShares
	// ForeignCommitments commits to a mask key it did not advertise.
	ForeignCommitments
	// InconsistentValues commits to values on no polynomial of degree
	// below the threshold.
	InconsistentValues
	// FalseComplaints complains of every dealer: its input is still summed.
	FalseComplaints
	// ShortMasked sends a masked input of the wrong length.
	ShortMasked
	// WrongReveal reveals random shares: its input is still summed, its
	// shares left out.
	WrongReveal
	// GarbageReveal reveals shares that are not scalars: refused whole.
	GarbageReveal
	// HostileDealer deals wrong shares to as many holders as the threshold
	// spares (holders − threshold of them), so that its own share would make
	// the threshold, then leaves without answering their complaints: it is
	// left out before masking.
	HostileDealer
	// WrongDisclosure deals one neighbour a wrong share and discloses a wrong
	// one when it complains: left out before masking.
	WrongDisclosure
	// OmitShares deals to only threshold−1 neighbours, so that its own share
	// would make the threshold: refused at dealing.
	OmitShares
	// DiscloseThenLeave deals wrong shares as HostileDealer does, discloses
	// the right ones, sends its masked input and leaves: its input is
	// summed, its self mask rebuilt from its holders and the disclosed
	// shares.
	DiscloseThenLeave
)

// Behaviours is every Behaviour, for tests.
var Behaviours = []Behaviour{Honest, LeaveAfterKeys, LeaveAfterShares, LeaveAfterCheck, LeaveAfterMask,
	BadKeys, GarbageShares, WrongShares, OneWrongShare, ShortShares, ForeignCommitments, InconsistentValues,
	FalseComplaints, ShortMasked, WrongReveal, GarbageReveal, HostileDealer, WrongDisclosure, OmitShares, DiscloseThenLeave}

// Counted reports whether a client behaving so has its input in the sum.
func (b Behaviour) Counted() bool {
	switch b {
	case Honest, LeaveAfterMask, OneWrongShare, FalseComplaints, WrongReveal, GarbageReveal, DiscloseThenLeave:
		return true
	}
	return false
}

func (b Behaviour) String() string {
	return [...]string{"honest", "leave-after-keys", "leave-after-shares", "leave-after-check", "leave-after-mask",
		"bad-keys", "garbage-shares", "wrong-shares", "one-wrong-share", "short-shares", "foreign-commitments", "inconsistent-values",
		"false-complaints", "short-masked", "wrong-reveal", "garbage-reveal", "hostile-dealer", "wrong-disclosure",
		"omit-shares", "disclose-then-leave"}[b]
}

// Deviate makes the client deal its shares as a dishonest dealer behaving
// so would (WrongShares, OneWrongShare); other behaviours are deviations of
// what it sends, which its caller plays. For tests and measurements of the
// protocol's robustness, such as [Run] and package transport's.
func (cl *Client) Deviate(b Behaviour) {
	nb := cl.g.neighbours(cl.id)
	wrong := map[uint64]bool{}
	switch b {
	case WrongShares:
		for _, j := range nb {
			wrong[j] = true
		}
	case OneWrongShare, WrongDisclosure:
		wrong[nb[0]] = true
	case HostileDealer, DiscloseThenLeave:
		for _, j := range nb[:len(nb)+1-cl.threshold] {
			wrong[j] = true
		}
	}
	if len(wrong) > 0 {
		cl.tamper = func(holder uint64, sh *[2]group.Scalar) {
			if wrong[holder] {
				sh[0].Add(sh[0], grp.NewScalar().SetUint64(1))
			}
		}
	}
}

// Outcome is the end of a round played by [Run].
type Outcome struct {
	Sum      []uint64          // the sum of the counted clients' inputs, mod 2^Bits
	Counted  []uint64          // the survivors, whose inputs are summed
	Excluded map[uint64]string // clients that dealt but were not kept for masking, and why
	Wrong    []uint64          // survivors that revealed wrong shares
}

// Run plays one round in memory among the clients of inputs, each behaving
// as behaviours says (Honest when absent). A message the server refuses
// leaves its sender out of that step, as in a deployment; an honest client's
// failure is an error. rng supplies every client's secrets, in id order, so
// a seeded stream makes a run reproducible.
func Run(p Params, inputs map[uint64][]uint64, behaviours map[uint64]Behaviour, rng io.Reader) (Outcome, error) {
	ids := slices.Sorted(maps.Keys(inputs))
	srv, err := NewServer(p, ids)
	if err != nil {
		return Outcome{}, err
	}
	bad := func(id uint64, b Behaviour) bool { return behaviours[id] == b }
	honest := func(id uint64, err error) error {
		if err != nil && behaviours[id] == Honest {
			return fmt.Errorf("honest client %d: %w", id, err)
		}
		return nil
	}
	pol := DefaultPolicy
	pol.MinClients, pol.MaxBits = min(pol.MinClients, len(ids)), 64
	clients := map[uint64]*Client{}
	for _, id := range ids {
		c, err := NewClient(p, pol, id, ids, rng)
		if err != nil {
			return Outcome{}, err
		}
		keys := c.Keys()
		if bad(id, BadKeys) {
			keys = Advertised{C: make([]byte, 32), S: make([]byte, 32)}
		}
		if err := srv.AddKeys(id, keys); err == nil {
			clients[id] = c
		} else if err := honest(id, err); err != nil {
			return Outcome{}, err
		}
	}
	leave := func(b Behaviour) {
		for id := range clients {
			if bad(id, b) {
				delete(clients, id)
			}
		}
	}
	leave(LeaveAfterKeys)
	for _, id := range slices.Sorted(maps.Keys(clients)) {
		c := clients[id]
		keys, err := srv.Keys(id)
		if err != nil {
			return Outcome{}, err
		}
		c.Deviate(behaviours[id])
		d, err := c.Share(keys)
		if err := honest(id, err); err != nil {
			return Outcome{}, err
		}
		switch {
		case bad(id, GarbageShares):
			for j := range d.Sealed {
				rng.Read(d.Sealed[j])
			}
		case bad(id, ShortShares):
			for j := range d.Sealed {
				d.Sealed[j] = d.Sealed[j][1:]
			}
		case bad(id, ForeignCommitments):
			d.Values.S[0] = grp.NewElement().MulGen(grp.NewScalar().SetUint64(7))
		case bad(id, OmitShares):
			for _, j := range slices.Sorted(maps.Keys(d.Sealed))[c.threshold-1:] {
				delete(d.Sealed, j)
			}
		case bad(id, InconsistentValues):
			last := len(d.Values.B) - 1
			d.Values.B[last] = grp.NewElement().Add(d.Values.B[last], grp.Generator())
			d.Values.raw = nil
		}
		if err == nil {
			err = srv.AddShares(id, d)
		}
		if err != nil {
			if err := honest(id, err); err != nil {
				return Outcome{}, err
			}
			delete(clients, id)
		}
	}
	leave(LeaveAfterShares)
	for _, id := range slices.Sorted(maps.Keys(clients)) {
		in, err := srv.Deliveries(id)
		if err != nil {
			return Outcome{}, err
		}
		complaints, err := clients[id].Check(in)
		if err != nil {
			return Outcome{}, err
		}
		if bad(id, FalseComplaints) {
			complaints = slices.Sorted(maps.Keys(in))
		}
		if err := honest(id, srv.AddCheck(id, complaints)); err != nil {
			return Outcome{}, err
		}
	}
	leave(LeaveAfterCheck)
	for _, id := range slices.Sorted(maps.Keys(clients)) {
		disputes, err := srv.Disputes(id)
		if err != nil || len(disputes) == 0 {
			continue
		}
		if bad(id, HostileDealer) {
			delete(clients, id)
			continue
		}
		d, err := clients[id].Disclose(disputes)
		if bad(id, WrongDisclosure) {
			for h, sh := range d {
				d[h] = [2][]byte{sh[1], sh[0]}
			}
		}
		if err == nil {
			err = srv.AddDisclosure(id, d)
		}
		if err := honest(id, err); err != nil {
			return Outcome{}, err
		}
	}
	for _, id := range slices.Sorted(maps.Keys(clients)) {
		partners, err := srv.Partners(id)
		if err == nil {
			var y []uint64
			if y, err = clients[id].Mask(inputs[id], partners); err == nil {
				if bad(id, ShortMasked) {
					y = y[1:]
				}
				err = srv.AddMasked(id, y)
			}
		}
		if err := honest(id, err); err != nil {
			return Outcome{}, err
		}
	}
	leave(LeaveAfterMask)
	leave(DiscloseThenLeave)
	req, err := srv.Request()
	if err != nil {
		return Outcome{}, err
	}
	var consenting []uint64
	for _, id := range req.Survivors {
		if c := clients[id]; c != nil {
			if _, err := c.Consent(req); err != nil {
				if err := honest(id, err); err != nil {
					return Outcome{}, err
				}
				continue
			}
			consenting = append(consenting, id)
		}
	}
	for _, id := range consenting {
		r, err := clients[id].Unmask(consenting)
		if err != nil {
			return Outcome{}, err
		}
		switch {
		case bad(id, WrongReveal):
			for _, m := range []map[uint64][]byte{r.Self, r.Pair} {
				for o := range m {
					s, _ := randomScalar(rng)
					m[o] = scalarBytesOf(s)
				}
			}
		case bad(id, GarbageReveal):
			for o := range r.Self {
				r.Self[o] = make([]byte, 32)
				r.Self[o][31] = 0xff
			}
		}
		if err := honest(id, srv.AddReveal(id, r)); err != nil {
			return Outcome{}, err
		}
	}
	sum, err := srv.Sum()
	if err != nil {
		return Outcome{}, fmt.Errorf("%w (%d clients)", err, len(ids))
	}
	return Outcome{Sum: sum, Counted: req.Survivors, Excluded: srv.Excluded(), Wrong: srv.WrongShares()}, nil
}
