package secagg

import (
	"fmt"
	"io"
	"maps"
	"slices"
)

// Run plays one round in memory: every client of inputs advertises keys and
// shares them; those in dropBeforeMask then vanish; the others send masked
// inputs; those in dropAfterMask vanish before the unmask request; the rest
// reveal. It returns the server's Sum, which is the sum mod 2^Bits of the
// inputs of the clients not in dropBeforeMask. rng supplies every client's
// secrets, in id order, so a seeded stream makes a run reproducible.
func Run(p Params, inputs map[uint64][]uint64, dropBeforeMask, dropAfterMask []uint64, rng io.Reader) ([]uint64, error) {
	ids := slices.Sorted(maps.Keys(inputs))
	srv, err := NewServer(p, ids)
	if err != nil {
		return nil, err
	}
	clients := make(map[uint64]*Client, len(ids))
	for _, id := range ids {
		c, err := NewClient(p, id, ids, rng)
		if err != nil {
			return nil, err
		}
		clients[id] = c
		if err := srv.AddKeys(id, c.Keys()); err != nil {
			return nil, err
		}
	}
	for _, id := range ids {
		keys, err := srv.Keys(id)
		if err != nil {
			return nil, err
		}
		sealed, err := clients[id].Share(keys)
		if err != nil {
			return nil, err
		}
		if err := srv.AddShares(id, sealed); err != nil {
			return nil, err
		}
	}
	before, after := set(dropBeforeMask), set(dropAfterMask)
	for _, id := range ids {
		sealed, err := srv.Shares(id)
		if err != nil {
			return nil, err
		}
		if before[id] {
			delete(clients, id)
			continue
		}
		y, err := clients[id].Mask(inputs[id], sealed)
		if err != nil {
			return nil, err
		}
		if err := srv.AddMasked(id, y); err != nil {
			return nil, err
		}
	}
	survivors, dropped, err := srv.Request()
	if err != nil {
		return nil, err
	}
	for _, id := range survivors {
		if after[id] {
			continue
		}
		r, err := clients[id].Unmask(survivors, dropped)
		if err != nil {
			return nil, err
		}
		if err := srv.AddReveal(id, r); err != nil {
			return nil, err
		}
	}
	sum, err := srv.Sum()
	if err != nil {
		return nil, fmt.Errorf("%w (%d clients, %d dropped before masking, %d after)", err, len(ids), len(before), len(after))
	}
	return sum, nil
}

func set(ids []uint64) map[uint64]bool {
	m := make(map[uint64]bool, len(ids))
	for _, id := range ids {
		m[id] = true
	}
	return m
}
