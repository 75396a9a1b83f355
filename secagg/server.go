package secagg

import (
	"crypto/ecdh"
	"fmt"
	"maps"
	"slices"

	"github.com/fedpq/fedpq/corr"
)

// Server is the server's side of one round: it relays keys and sealed
// shares, folds masked inputs into a running sum, and removes the masks.
// Its steps, in order: AddKeys, then Keys per client; AddShares, then Shares
// per client; AddMasked; Request; AddReveal; Sum. It keeps O(d + n·degree)
// state: the running sum, the keys, the sealed shares until delivered, and
// the revealed shares. A Server is not safe for concurrent use.
type Server struct {
	p         Params
	g         *graph
	threshold int
	keys      map[uint64]Advertised        // U0: clients that advertised keys
	inbox     map[uint64]map[uint64][]byte // sealed shares by recipient, then sender
	shared    map[uint64]bool              // U1: clients that sent shares
	sum       []uint64                     // running sum of masked inputs
	masked    map[uint64]bool              // U2: clients whose masked input arrived
	dropped   []uint64                     // U1 \ U2 with a neighbour in U2
	self      map[uint64]map[uint64][]byte // revealed shares of self-mask seeds: owner, holder
	pair      map[uint64]map[uint64][]byte // revealed shares of s-key seeds: owner, holder
	answered  map[uint64]bool
	step      int
}

// NewServer starts a round among ids.
func NewServer(p Params, ids []uint64) (*Server, error) {
	_, t, err := p.shape(len(ids))
	if err != nil {
		return nil, err
	}
	g, err := newGraph(p, ids)
	if err != nil {
		return nil, err
	}
	return &Server{
		p: p, g: g, threshold: t,
		keys:     map[uint64]Advertised{},
		inbox:    map[uint64]map[uint64][]byte{},
		shared:   map[uint64]bool{},
		masked:   map[uint64]bool{},
		self:     map[uint64]map[uint64][]byte{},
		pair:     map[uint64]map[uint64][]byte{},
		answered: map[uint64]bool{},
	}, nil
}

func (s *Server) member(id uint64) error {
	if _, ok := s.g.pos[id]; !ok {
		return fmt.Errorf("secagg: client %d is not among the round's clients", id)
	}
	return nil
}

// AddKeys records client id's advertised keys.
func (s *Server) AddKeys(id uint64, a Advertised) error {
	if s.step != 0 {
		return errPhase
	}
	if err := s.member(id); err != nil {
		return err
	}
	if _, dup := s.keys[id]; dup {
		return fmt.Errorf("secagg: client %d advertised keys twice", id)
	}
	if err := checkKeys(a); err != nil {
		return fmt.Errorf("secagg: client %d's keys: %w", id, err)
	}
	s.keys[id] = a
	return nil
}

// Keys returns the advertised keys of id's neighbours, for relaying to id.
// The first call closes the AdvertiseKeys step.
func (s *Server) Keys(id uint64) (map[uint64]Advertised, error) {
	if s.step > 1 {
		return nil, errPhase
	}
	s.step = 1
	if _, ok := s.keys[id]; !ok {
		return nil, fmt.Errorf("secagg: client %d advertised no keys", id)
	}
	out := map[uint64]Advertised{}
	for _, j := range s.g.neighbours(id) {
		if a, ok := s.keys[j]; ok {
			out[j] = a
		}
	}
	return out, nil
}

// AddShares records the sealed shares client from addresses to each of its
// neighbours that advertised keys, all of which it must address.
func (s *Server) AddShares(from uint64, sealed map[uint64][]byte) error {
	if s.step != 1 {
		return errPhase
	}
	if _, ok := s.keys[from]; !ok {
		return fmt.Errorf("secagg: client %d sent shares without advertising keys", from)
	}
	if s.shared[from] {
		return fmt.Errorf("secagg: client %d sent shares twice", from)
	}
	want := 0
	for _, j := range s.g.neighbours(from) {
		if _, ok := s.keys[j]; !ok {
			continue
		}
		want++
		if len(sealed[j]) != sealedBytes {
			return fmt.Errorf("secagg: client %d's shares for %d: %d bytes, not %d", from, j, len(sealed[j]), sealedBytes)
		}
	}
	if len(sealed) != want {
		return fmt.Errorf("secagg: client %d addressed %d recipients, not its %d neighbours with keys", from, len(sealed), want)
	}
	for j, ct := range sealed {
		if s.inbox[j] == nil {
			s.inbox[j] = map[uint64][]byte{}
		}
		s.inbox[j][from] = ct
	}
	s.shared[from] = true
	return nil
}

// Shares returns, and forgets, the sealed shares addressed to client to by
// clients that sent theirs. The first call closes the ShareKeys step.
func (s *Server) Shares(to uint64) (map[uint64][]byte, error) {
	if s.step < 1 || s.step > 2 {
		return nil, errPhase
	}
	s.step = 2
	if !s.shared[to] {
		return nil, fmt.Errorf("secagg: client %d sent no shares", to)
	}
	out := s.inbox[to]
	delete(s.inbox, to)
	if out == nil {
		out = map[uint64][]byte{}
	}
	return out, nil
}

// AddMasked folds client from's masked input into the running sum.
func (s *Server) AddMasked(from uint64, y []uint64) error {
	if s.step != 2 {
		return errPhase
	}
	if !s.shared[from] {
		return fmt.Errorf("secagg: client %d sent a masked input without sharing keys", from)
	}
	if s.masked[from] {
		return fmt.Errorf("secagg: client %d sent a masked input twice", from)
	}
	if s.sum != nil && len(y) != len(s.sum) {
		return fmt.Errorf("secagg: client %d's masked input has length %d, not %d", from, len(y), len(s.sum))
	}
	m := s.p.mask()
	for i, v := range y {
		if v > m {
			return fmt.Errorf("secagg: client %d: y[%d] = %d is not below 2^%d", from, i, v, s.p.Bits)
		}
	}
	if s.sum == nil {
		s.sum = make([]uint64, len(y))
	}
	add(s.sum, y)
	s.masked[from] = true
	return nil
}

// Request closes the MaskedInput step and returns the unmask request sent
// to every survivor: the survivors, and the clients that shared keys but
// sent no masked input and have a surviving neighbour, both sorted.
func (s *Server) Request() (survivors, dropped []uint64, err error) {
	if s.step != 2 && s.step != 3 {
		return nil, nil, errPhase
	}
	if s.step == 2 {
		s.step = 3
		for j := range s.shared {
			if s.masked[j] {
				continue
			}
			for _, i := range s.g.neighbours(j) {
				if s.masked[i] {
					s.dropped = append(s.dropped, j)
					break
				}
			}
		}
		slices.Sort(s.dropped)
	}
	return slices.Sorted(maps.Keys(s.masked)), slices.Clone(s.dropped), nil
}

// AddReveal records survivor from's answer to the unmask request.
func (s *Server) AddReveal(from uint64, r Reveal) error {
	if s.step != 3 {
		return errPhase
	}
	if !s.masked[from] {
		return fmt.Errorf("secagg: client %d revealed shares but is not a survivor", from)
	}
	if s.answered[from] {
		return fmt.Errorf("secagg: client %d revealed shares twice", from)
	}
	for owner, sh := range r.Self {
		if !s.masked[owner] || (owner != from && !s.g.adjacent(owner, from)) {
			return fmt.Errorf("secagg: client %d revealed a self-mask share of %d, not a surviving neighbour", from, owner)
		}
		if len(sh) != shareBytes {
			return fmt.Errorf("secagg: client %d's share of %d has %d bytes, not %d", from, owner, len(sh), shareBytes)
		}
	}
	for owner, sh := range r.Pair {
		if _, ok := slices.BinarySearch(s.dropped, owner); !ok || !s.g.adjacent(owner, from) {
			return fmt.Errorf("secagg: client %d revealed an s-key share of %d, not a dropped neighbour", from, owner)
		}
		if len(sh) != shareBytes {
			return fmt.Errorf("secagg: client %d's share of %d has %d bytes, not %d", from, owner, len(sh), shareBytes)
		}
	}
	for _, kind := range []struct {
		got  map[uint64][]byte
		into map[uint64]map[uint64][]byte
	}{{r.Self, s.self}, {r.Pair, s.pair}} {
		for owner, sh := range kind.got {
			if kind.into[owner] == nil {
				kind.into[owner] = map[uint64][]byte{}
			}
			kind.into[owner][from] = sh
		}
	}
	s.answered[from] = true
	return nil
}

// Sum rebuilds the survivors' self-mask seeds and the dropped clients'
// s-key seeds from the revealed shares, removes their masks from the running
// sum, and returns the sum of the survivors' vectors mod 2^Bits. It fails,
// naming the client, when a secret has fewer than threshold shares. Sum
// leaves the server's state as it was.
func (s *Server) Sum() ([]uint64, error) {
	if s.step != 3 {
		return nil, errPhase
	}
	if len(s.masked) == 0 {
		return nil, fmt.Errorf("secagg: no masked input arrived")
	}
	out := slices.Clone(s.sum)
	buf := make([]uint64, len(out))
	for _, i := range slices.Sorted(maps.Keys(s.masked)) {
		b, err := recoverSecret(s.threshold, s.self[i])
		if err != nil {
			return nil, fmt.Errorf("secagg: cannot rebuild survivor %d's self mask: %w", i, err)
		}
		corr.NewStream(selfKey(s.p, b, i)).Fill(buf)
		sub(out, buf)
	}
	for _, j := range s.dropped {
		seed, err := recoverSecret(s.threshold, s.pair[j])
		if err != nil {
			return nil, fmt.Errorf("secagg: cannot rebuild dropped client %d's pairwise masks: %w", j, err)
		}
		key, err := sKey(s.p, seed)
		if err != nil {
			return nil, err
		}
		if string(key.PublicKey().Bytes()) != string(s.keys[j].S) {
			return nil, fmt.Errorf("secagg: dropped client %d's rebuilt s key does not match the one it advertised", j)
		}
		for _, i := range s.g.neighbours(j) {
			if !s.masked[i] {
				continue
			}
			pub, err := ecdh.X25519().NewPublicKey(s.keys[i].S)
			if err != nil {
				return nil, fmt.Errorf("secagg: %w", err)
			}
			secret, err := key.ECDH(pub)
			if err != nil {
				return nil, fmt.Errorf("secagg: client %d's s key: %w", i, err)
			}
			corr.NewStream(pairKey(s.p, secret, i, j)).Fill(buf)
			// y_i carries +PRG(s_ij) when i < j, −PRG(s_ij) otherwise.
			if i < j {
				sub(out, buf)
			} else {
				add(out, buf)
			}
		}
	}
	m := s.p.mask()
	for k := range out {
		out[k] &= m
	}
	return out, nil
}
