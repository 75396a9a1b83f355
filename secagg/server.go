package secagg

import (
	"crypto/ecdh"
	"crypto/rand"
	"encoding/binary"
	"fmt"
	"maps"
	"runtime"
	"slices"
	"sync"
	"sync/atomic"

	"github.com/cloudflare/circl/group"

	"github.com/fedpq/fedpq/corr"
)

// Server is the server's side of one round: it relays keys and dealings,
// keeps the clients whose secrets can be rebuilt, folds masked inputs into a
// running sum, and removes the masks. Its steps, in order: AddKeys, then
// Keys per client; AddShares, then Deliveries per client; AddCheck, then
// Disputes per dealer and AddDisclosure from those complained of; Partners
// per client; AddMasked; Request; AddReveal; Sum. Every Add method
// refuses what an honest client cannot send, leaving the state as it was, so
// that a refused client is simply absent from the step. It keeps
// O(d + n·degree) state: the running sum, the keys and commitments, the
// dealings until delivered, and the revealed shares. A Server is not safe
// for concurrent use.
type Server struct {
	p          Params
	g          *graph
	threshold  int
	keys       map[uint64]Advertised
	sKeys      map[uint64]group.Element
	values     map[uint64]encodedValues
	dealtTo    map[uint64][]uint64               // each dealer's holders but itself, sorted
	inbox      map[uint64][]byte                 // sealed dealings by holder: inboxRecord bytes per dealer
	checked    map[uint64]map[uint64]bool        // U1: each checking client's complaints
	disputes   map[uint64][]uint64               // each dealer's complainers, sorted
	disclosed  map[uint64]map[uint64][2]revealed // disputed shares, checked: dealer, holder
	kept       map[uint64]bool                   // the clients kept for masking
	partners   map[uint64][]uint64
	excluded   map[uint64]string
	sum        []uint64
	masked     map[uint64]bool // U2
	dropped    []uint64
	self, pair map[uint64][]byte   // revealed shares by owner: revealedRecord bytes each
	holders    map[uint64][]uint64 // each owner's holders, sorted: a holder's point is its index + 1
	answered   map[uint64]bool
	wrong      map[uint64]bool
	weights    map[int][]group.Scalar // dualWeights by number of holders, made by NewServer
	step       int
}

const (
	stepKeys = iota
	stepShares
	stepCheck
	stepDisputes
	stepMask
	stepUnmask
	stepReleased
)

// NewServer starts a round among ids.
func NewServer(p Params, ids []uint64) (*Server, error) {
	degree, t, err := p.shape(len(ids))
	if err != nil {
		return nil, err
	}
	g, err := newGraph(p, ids)
	if err != nil {
		return nil, err
	}
	return &Server{
		p: p, g: g, threshold: t,
		keys: map[uint64]Advertised{}, sKeys: map[uint64]group.Element{}, values: map[uint64]encodedValues{},
		dealtTo: map[uint64][]uint64{}, inbox: map[uint64][]byte{}, checked: map[uint64]map[uint64]bool{},
		disclosed: map[uint64]map[uint64][2]revealed{},
		excluded:  map[uint64]string{}, masked: map[uint64]bool{},
		self: map[uint64][]byte{}, pair: map[uint64][]byte{},
		holders: map[uint64][]uint64{}, answered: map[uint64]bool{}, wrong: map[uint64]bool{},
		// Every dealer has degree+1 holders; made here, the weights are
		// never written again, for CheckDealing's sake.
		weights: map[int][]group.Scalar{degree + 1: dualWeights(degree + 1)},
	}, nil
}

// Threshold is t, the shares that rebuild a secret.
func (s *Server) Threshold() int { return s.threshold }

// Degree is the number of each client's neighbours in the round's graph.
func (s *Server) Degree() int { return s.g.degree() }

func (s *Server) member(id uint64) error {
	if _, ok := s.g.pos[id]; !ok {
		return fmt.Errorf("secagg: client %d is not among the round's clients", id)
	}
	return nil
}

// Neighbours returns client id's neighbours in the round's graph, sorted.
func (s *Server) Neighbours(id uint64) ([]uint64, error) {
	if err := s.member(id); err != nil {
		return nil, err
	}
	return s.g.neighbours(id), nil
}

// AddKeys records client id's advertised keys. It refuses keys that are
// not valid keys, or with which every agreement is known: an X25519 point
// of small order, the ristretto255 identity.
func (s *Server) AddKeys(id uint64, a Advertised) error {
	if s.step != stepKeys {
		return errPhase
	}
	if err := s.member(id); err != nil {
		return err
	}
	if _, dup := s.keys[id]; dup {
		return fmt.Errorf("secagg: client %d advertised keys twice", id)
	}
	S, err := parseElement(a.S)
	if err == nil {
		err = checkX25519(a.C)
	}
	if err != nil {
		return fmt.Errorf("secagg: client %d's keys: %w", id, err)
	}
	s.keys[id] = Advertised{C: slices.Clone(a.C), S: slices.Clone(a.S)}
	s.sKeys[id] = S
	return nil
}

// checkX25519 refuses what is not an X25519 public key, or is a point of
// small order: the agreement of a fixed key with it fails.
func checkX25519(c []byte) error {
	pub, err := ecdh.X25519().NewPublicKey(c)
	if err != nil {
		return err
	}
	_, err = probe.ECDH(pub)
	return err
}

// probe is a fixed private key that checkX25519 agrees with.
var probe = func() *ecdh.PrivateKey {
	k, err := ecdh.X25519().NewPrivateKey(make([]byte, 32))
	if err != nil {
		panic(err) // unreachable: any 32 bytes are an X25519 private key
	}
	return k
}()

// Keys returns the advertised keys of id's neighbours, for relaying to id.
// The first call closes the AdvertiseKeys step.
func (s *Server) Keys(id uint64) (map[uint64]Advertised, error) {
	if s.step > stepShares {
		return nil, errPhase
	}
	s.step = stepShares
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

// AddShares records client from's dealing: sealed shares of the exact size
// for every neighbour that advertised keys (the server refused any keys a
// client could refuse; a dealer that left some holders out would leave its
// secrets to fewer of them, and its departure could cost the round), at
// least threshold−1 of them, and values at each of its holders' points
// whose mask-key value at 0 is the key it advertised, on polynomials of
// degree below the threshold.
func (s *Server) AddShares(from uint64, d Dealing) error {
	if s.step != stepShares {
		return errPhase
	}
	if _, ok := s.keys[from]; !ok {
		return fmt.Errorf("secagg: client %d sent shares without advertising keys", from)
	}
	if _, dup := s.values[from]; dup {
		return fmt.Errorf("secagg: client %d sent shares twice", from)
	}
	m := len(s.g.holders(from))
	v := d.Values
	checked := v != nil && v.checkedBy == s && v.dealer == from
	switch {
	case checked: // by CheckDealing, at its advertised key
	case v == nil || len(v.B) != m+1 || len(v.S) != m+1:
		return fmt.Errorf("secagg: client %d's commitments are not for its %d holders", from, m)
	case !v.S[0].IsEqual(s.sKeys[from]):
		return fmt.Errorf("secagg: client %d's commitments are to another mask key than it advertised", from)
	}
	switch {
	case len(d.Sealed)+1 < s.threshold:
		return fmt.Errorf("secagg: client %d dealt to %d neighbours; threshold %d needs %d", from, len(d.Sealed), s.threshold, s.threshold-1)
	}
	for _, j := range s.g.neighbours(from) {
		if _, ok := s.keys[j]; ok && d.Sealed[j] == nil {
			return fmt.Errorf("secagg: client %d dealt no shares to its neighbour %d", from, j)
		}
	}
	for j, ct := range d.Sealed {
		if _, ok := s.keys[j]; !ok || !s.g.adjacent(from, j) {
			return fmt.Errorf("secagg: client %d dealt to %d, not a neighbour that advertised keys", from, j)
		}
		if len(ct) != sealedBytes {
			return fmt.Errorf("secagg: client %d's dealing to %d: %d bytes, not %d", from, j, len(ct), sealedBytes)
		}
	}
	if !checked {
		if err := s.consistent(from, v); err != nil {
			return err
		}
	}
	for j, ct := range d.Sealed {
		in := GrowRecords(s.inbox[j], inboxRecord, s.g.degree())
		s.inbox[j] = append(binary.LittleEndian.AppendUint64(in, from), ct...)
	}
	if checked { // its encoding, read by ParseValues into a buffer of its own
		s.values[from] = v.raw
	} else {
		s.values[from] = v.Bytes()
	}
	s.dealtTo[from] = slices.Sorted(maps.Keys(d.Sealed))
	return nil
}

// ParseValues reads the encoded values of client from's dealing ([Values.Bytes]).
func (s *Server) ParseValues(from uint64, raw []byte) (*Values, error) {
	S, ok := s.sKeys[from]
	if !ok {
		return nil, fmt.Errorf("secagg: client %d advertised no keys", from)
	}
	return ParseValues(raw, len(s.g.holders(from)), S)
}

// consistent checks that dealer from's values lie on polynomials of degree
// below the threshold.
func (s *Server) consistent(from uint64, v *Values) error {
	ok, err := v.consistent(s.threshold, s.weights[len(v.B)-1], rand.Reader)
	if err != nil {
		return err
	}
	if !ok {
		return fmt.Errorf("secagg: client %d's commitments are not of polynomials of degree below the threshold %d", from, s.threshold)
	}
	return nil
}

// CheckDealing is the costly part of AddShares, which it then skips: it
// reads dealer from's encoded values and checks them, at its advertised
// key and on polynomials of degree below the threshold. Once the keys step
// has closed it reads only what no step changes, so a deployed server runs
// it for many dealers at once, outside its lock. The values it returns are
// kept encoded only (B and S are nil): dealer from's, checked, for this
// server's AddShares and HolderValues, which read nothing else. Parsed,
// they take some 35 KB at degree 96, and a deployed server holds the
// dealings checked until its lock is free.
func (s *Server) CheckDealing(from uint64, raw []byte) (*Values, error) {
	v, err := s.ParseValues(from, raw)
	if err != nil {
		return nil, err
	}
	if err := s.consistent(from, v); err != nil {
		return nil, err
	}
	return &Values{raw: v.raw, checkedBy: s, dealer: from}, nil
}

// HolderValues is the encoding of each holder's two values in dealer
// from's values v, by holder: what the server relays with its sealed
// shares. Safe for concurrent use.
func (s *Server) HolderValues(from uint64, v *Values) (map[uint64][]byte, error) {
	if err := s.member(from); err != nil {
		return nil, err
	}
	out := map[uint64][]byte{}
	for h, x := range s.g.points(from) {
		if h != from {
			out[h] = v.holderValues(x)
		}
	}
	return out, nil
}

// Deliveries returns, and forgets, the dealings addressed to client to by
// clients that dealt. The first call closes the ShareKeys step.
func (s *Server) Deliveries(to uint64) (map[uint64]Delivery, error) {
	if s.step < stepShares || s.step > stepCheck {
		return nil, errPhase
	}
	s.step = stepCheck
	if _, ok := s.values[to]; !ok {
		return nil, fmt.Errorf("secagg: client %d sent no shares", to)
	}
	in := s.inbox[to]
	out := make(map[uint64]Delivery, len(in)/inboxRecord)
	for ; len(in) > 0; in = in[inboxRecord:] {
		from := binary.LittleEndian.Uint64(in)
		out[from] = Delivery{Values: s.values[from].holder(s.point(from, to)), Sealed: in[8:inboxRecord:inboxRecord]}
	}
	delete(s.inbox, to)
	return out, nil
}

// inboxRecord is the size of one dealing in a holder's inbox: the
// dealer's id and the sealed shares. A holder's dealings are kept in one
// buffer: 960,000 of them at 10,000 clients, each a slice of its own in a
// map of its own, held 40 MB more than their bytes.
const inboxRecord = 8 + sealedBytes

// GrowRecords makes room in buf, a list of records of size bytes, for one
// more, of at most most: it doubles from 16 records, and the last growth
// is to most. A holder's inbox (and a deployed server's record of the
// shares' signatures) so holds about what has arrived, not room for every
// neighbour's from the first: while dealings arrive faster than a deployed
// server checks them, those waiting hold their bytes already.
func GrowRecords(buf []byte, size, most int) []byte {
	if len(buf)+size <= cap(buf) {
		return buf
	}
	n := max(2*cap(buf), 16*size)
	if limit := most * size; n > limit && len(buf)+size <= limit {
		n = limit
	}
	return append(make([]byte, 0, max(n, len(buf)+size)), buf...)
}

// AddCheck records client from's complaints: dealers that dealt to it whose
// shares it found wrong.
func (s *Server) AddCheck(from uint64, complaints []uint64) error {
	if s.step != stepCheck {
		return errPhase
	}
	if _, ok := s.values[from]; !ok {
		return fmt.Errorf("secagg: client %d sent a check without dealing", from)
	}
	if _, dup := s.checked[from]; dup {
		return fmt.Errorf("secagg: client %d sent its check twice", from)
	}
	c := make(map[uint64]bool, len(complaints))
	for _, j := range complaints {
		if _, ok := slices.BinarySearch(s.dealtTo[j], from); !ok {
			return fmt.Errorf("secagg: client %d complains of %d, which did not deal to it", from, j)
		}
		c[j] = true
	}
	s.checked[from] = c
	return nil
}

// Disputes returns the holders that complained of dealer id's shares,
// sorted: the dealer must disclose their shares ([Client.Disclose],
// [Server.AddDisclosure]) or be left out of the round. The first call
// closes the CheckShares step.
func (s *Server) Disputes(id uint64) ([]uint64, error) {
	if s.step < stepCheck || s.step > stepDisputes {
		return nil, errPhase
	}
	if s.step == stepCheck {
		s.openDisputes()
	}
	if _, ok := s.values[id]; !ok {
		return nil, fmt.Errorf("secagg: client %d sent no shares", id)
	}
	return slices.Clone(s.disputes[id]), nil
}

func (s *Server) openDisputes() {
	s.step = stepDisputes
	s.disputes = map[uint64][]uint64{}
	for h, c := range s.checked {
		for j := range c {
			s.disputes[j] = append(s.disputes[j], h)
		}
	}
	for _, hs := range s.disputes {
		slices.Sort(hs)
	}
}

// AddDisclosure records dealer from's answer to the complaints of its
// shares: every disputed share, each a canonical scalar matching the
// dealer's values at its holder's point. A dealer whose answer is refused,
// or that sends none, is left out of the round before masking.
func (s *Server) AddDisclosure(from uint64, d Disclosure) error {
	if s.step != stepDisputes {
		return errPhase
	}
	want := s.disputes[from]
	switch {
	case len(want) == 0:
		return fmt.Errorf("secagg: client %d disclosed shares no one disputed", from)
	case s.disclosed[from] != nil:
		return fmt.Errorf("secagg: client %d disclosed its shares twice", from)
	case len(d) != len(want):
		return fmt.Errorf("secagg: client %d disclosed %d shares, %d are disputed", from, len(d), len(want))
	}
	got := make(map[uint64][2]revealed, len(want))
	for _, h := range want {
		sh, ok := d[h]
		if !ok {
			return fmt.Errorf("secagg: client %d did not disclose its shares for %d", from, h)
		}
		x := s.point(from, h)
		vs := s.values[from]
		var r [2]revealed
		for k, at := range []uint64{x, uint64(vs.holders()) + x} {
			v, err := parseScalar(sh[k])
			if err != nil {
				return fmt.Errorf("secagg: client %d's disclosed share for %d: %w", from, h, err)
			}
			if !grp.NewElement().MulGen(v).IsEqual(vs.element(at)) {
				return fmt.Errorf("secagg: client %d disclosed a share for %d that does not match its commitments", from, h)
			}
			r[k] = revealed{x: x, v: v}
		}
		got[h] = r
	}
	s.disclosed[from] = got
	return nil
}

// Partners returns the partners of kept client id: the kept neighbours it
// exchanged dealings with. The first call closes the CheckShares step (and
// disputes, if open): it keeps the clients that dealt, checked and answered
// every complaint of their shares, whose secrets at least threshold kept
// holders (itself included, and the disclosed shares, which the server
// holds) can rebuild, and that have at least threshold−1 partners, until
// all of this holds for every kept client. Since a dealer deals to every
// neighbour with keys and answers every complaint, one that leaves is as
// recoverable as an honest client that drops out: it costs only itself.
func (s *Server) Partners(id uint64) ([]uint64, error) {
	if s.step < stepCheck || s.step > stepMask {
		return nil, errPhase
	}
	if s.step == stepCheck {
		s.openDisputes()
	}
	if s.step == stepDisputes {
		s.step = stepMask
		s.keep()
	}
	if !s.kept[id] {
		if why, ok := s.excluded[id]; ok {
			return nil, fmt.Errorf("secagg: client %d is not kept for masking: %s", id, why)
		}
		return nil, fmt.Errorf("secagg: client %d did not check its shares", id)
	}
	return slices.Clone(s.partners[id]), nil
}

func (s *Server) keep() {
	s.kept = map[uint64]bool{}
	for j := range s.checked {
		s.kept[j] = true
	}
	for j := range s.values {
		if !s.kept[j] {
			s.excluded[j] = "it sent no check of its shares"
		}
	}
	for j, hs := range s.disputes {
		if s.kept[j] && s.disclosed[j] == nil {
			s.excluded[j] = fmt.Sprintf("it did not answer the complaints of %d holders with its shares", len(hs))
			delete(s.kept, j)
		}
	}
	for changed := true; changed; {
		changed = false
		for _, j := range slices.Sorted(maps.Keys(s.kept)) {
			holders, partners := 1+len(s.disclosed[j]), 0
			for _, i := range s.dealtTo[j] {
				if !s.kept[i] {
					continue
				}
				if !s.checked[i][j] {
					holders++
				}
				if _, ok := slices.BinarySearch(s.dealtTo[i], j); ok {
					partners++
				}
			}
			switch {
			case holders < s.threshold:
				s.excluded[j] = fmt.Sprintf("%d kept holders took its shares as right or had them disclosed, threshold %d", holders, s.threshold)
			case partners+1 < s.threshold:
				s.excluded[j] = fmt.Sprintf("%d kept partners, threshold %d needs %d", partners, s.threshold, s.threshold-1)
			default:
				continue
			}
			delete(s.kept, j)
			changed = true
		}
	}
	s.partners = make(map[uint64][]uint64, len(s.kept))
	for j := range s.kept {
		var ps []uint64
		for _, i := range s.dealtTo[j] {
			if _, ok := slices.BinarySearch(s.dealtTo[i], j); ok && s.kept[i] {
				if ps == nil {
					ps = make([]uint64, 0, len(s.dealtTo[j]))
				}
				ps = append(ps, i)
			}
		}
		if ps != nil {
			s.partners[j] = ps
		}
	}
}

// Excluded is the clients that dealt but were not kept for masking, with
// the reason.
func (s *Server) Excluded() map[uint64]string { return maps.Clone(s.excluded) }

// AddMasked folds kept client from's masked input into the running sum.
func (s *Server) AddMasked(from uint64, y []uint64) error {
	if s.step != stepMask {
		return errPhase
	}
	if !s.kept[from] {
		return fmt.Errorf("secagg: client %d sent a masked input but was not kept for masking", from)
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
// to every survivor: the survivors, and the kept clients that sent no masked
// input and have a surviving partner.
func (s *Server) Request() (Request, error) {
	if s.step != stepMask && s.step != stepUnmask {
		return Request{}, errPhase
	}
	if s.step == stepMask {
		s.step = stepUnmask
		for j := range s.kept {
			if s.masked[j] {
				continue
			}
			for _, i := range s.partners[j] {
				if s.masked[i] {
					s.dropped = append(s.dropped, j)
					break
				}
			}
		}
		slices.Sort(s.dropped)
	}
	return Request{Survivors: slices.Sorted(maps.Keys(s.masked)), Dropped: slices.Clone(s.dropped)}, nil
}

// AddReveal records survivor from's answer to the unmask request: shares
// of survivors' b and dropped clients' s that it holds (its own, or dealt to
// it and not complained of), each a canonical scalar.
func (s *Server) AddReveal(from uint64, r Reveal) error {
	if s.step != stepUnmask {
		return errPhase
	}
	if !s.masked[from] {
		return fmt.Errorf("secagg: client %d revealed shares but is not a survivor", from)
	}
	if s.answered[from] {
		return fmt.Errorf("secagg: client %d revealed shares twice", from)
	}
	type share struct {
		owner uint64
		into  map[uint64][]byte
		b     []byte
	}
	var got []share
	for _, kind := range []struct {
		shares map[uint64][]byte
		owner  func(uint64) bool
		into   map[uint64][]byte
	}{
		{r.Self, func(o uint64) bool { return s.masked[o] }, s.self},
		{r.Pair, func(o uint64) bool { _, ok := slices.BinarySearch(s.dropped, o); return ok }, s.pair},
	} {
		for owner, b := range kind.shares {
			if !kind.owner(owner) || !s.holds(from, owner) {
				return fmt.Errorf("secagg: client %d revealed a share of %d, which it does not hold or was not asked for", from, owner)
			}
			if _, err := parseScalar(b); err != nil { // then b is 32 bytes
				return fmt.Errorf("secagg: client %d's share of %d: %w", from, owner, err)
			}
			got = append(got, share{owner, kind.into, b})
		}
	}
	for _, sh := range got {
		rec := GrowRecords(sh.into[sh.owner], revealedRecord, s.g.degree()+1)
		rec = binary.LittleEndian.AppendUint64(rec, from)
		rec = binary.LittleEndian.AppendUint32(rec, uint32(s.point(sh.owner, from)))
		sh.into[sh.owner] = append(rec, sh.b...)
	}
	s.answered[from] = true
	return nil
}

// revealedRecord is the size of one revealed share as the server keeps it
// until Sum: its holder, the holder's point and the share. Kept so, the
// shares of 10,000 clients took 45 MB where a map per secret of parsed
// scalars took 100 MB.
const revealedRecord = 8 + 4 + scalarBytes

// revealedShares reads the shares of one secret that the server keeps in
// recs, by holder.
func revealedShares(recs []byte) map[uint64]revealed {
	out := make(map[uint64]revealed, len(recs)/revealedRecord)
	for ; len(recs) > 0; recs = recs[revealedRecord:] {
		v, err := parseScalar(recs[12:revealedRecord])
		if err != nil {
			panic(err) // unreachable: AddReveal parsed it
		}
		out[binary.LittleEndian.Uint64(recs)] = revealed{x: uint64(binary.LittleEndian.Uint32(recs[8:])), v: v}
	}
	return out
}

// holds reports whether holder has a share of owner's secrets that it
// took as right: its own, or one dealt to it that it did not complain of.
func (s *Server) holds(holder, owner uint64) bool {
	if holder == owner {
		return true
	}
	_, dealt := slices.BinarySearch(s.dealtTo[owner], holder)
	return dealt && !s.checked[holder][owner]
}

// point is holder's point in owner's sharing, 0 if it holds none. It keeps
// owner's holders, a sorted list: a map of their points took four times
// its memory (30 MB at 10,000 clients).
func (s *Server) point(owner, holder uint64) uint64 {
	hs, ok := s.holders[owner]
	if !ok {
		hs = slices.Clone(s.g.holders(owner)) // of its own size
		s.holders[owner] = hs
	}
	k, found := slices.BinarySearch(hs, holder)
	if !found {
		return 0
	}
	return uint64(k + 1)
}

// Sum rebuilds the survivors' self-mask seeds and the dropped clients'
// mask keys from the revealed shares, each checked against its commitments,
// removes their masks from the running sum, and returns the sum of the
// survivors' vectors mod 2^Bits. It fails, naming the client, when a secret
// has fewer than threshold right shares; the holders of wrong shares are in
// [Server.WrongShares]. Sum leaves the server's state as it was.
//
// It rebuilds secrets on GOMAXPROCS goroutines, in waves of doubling size:
// a holder found to reveal a wrong share in one wave is a suspect in the
// next, its shares tried last, so that a few lying holders cost a few
// searches rather than one in every secret they hold. The sum is the same
// whatever the order; which holders are found depends on the waves alone.
func (s *Server) Sum() ([]uint64, error) {
	if s.step != stepUnmask {
		return nil, errPhase
	}
	if len(s.masked) == 0 {
		return nil, fmt.Errorf("secagg: no masked input arrived")
	}
	owners := append(slices.Sorted(maps.Keys(s.masked)), s.dropped...)
	workers := make([]unmasker, min(runtime.GOMAXPROCS(0), len(owners)))
	for w := range workers {
		workers[w] = unmasker{ip: interpolator{}, buf: make([]uint64, len(s.sum)), masks: make([]uint64, len(s.sum))}
	}
	suspects := map[uint64]bool{}
	suspect := func(h uint64) bool { return suspects[h] }
	for lo, size := 0, len(workers); lo < len(owners); lo, size = lo+size, 2*size {
		n := min(size, len(owners)-lo)
		found, errs := make([][]uint64, n), make([]error, n)
		var next atomic.Int64
		var wg sync.WaitGroup
		for w := range workers {
			wg.Go(func() {
				for k := int(next.Add(1)) - 1; k < n; k = int(next.Add(1)) - 1 {
					if at := lo + k; at < len(s.masked) {
						found[k], errs[k] = s.selfMask(&workers[w], owners[at], suspect)
					} else {
						found[k], errs[k] = s.pairMasks(&workers[w], owners[at], suspect)
					}
				}
			})
		}
		wg.Wait()
		for _, hs := range found {
			s.blame(hs)
			for _, h := range hs {
				suspects[h] = true
			}
		}
		for _, err := range errs {
			if err != nil {
				return nil, err
			}
		}
	}
	out := slices.Clone(s.sum)
	for _, w := range workers {
		add(out, w.masks)
	}
	m := s.p.mask()
	for k := range out {
		out[k] &= m
	}
	return out, nil
}

// withDisclosed adds to the revealed shares of owner's secret (k = 0 for
// b, 1 for s) those it disclosed, which are already checked.
func (s *Server) withDisclosed(shares map[uint64]revealed, owner uint64, k int) map[uint64]revealed {
	if len(s.disclosed[owner]) == 0 {
		return shares
	}
	all := maps.Clone(shares)
	if all == nil {
		all = map[uint64]revealed{}
	}
	for h, r := range s.disclosed[owner] {
		all[h] = r[k]
	}
	return all
}

// Witnesses returns the clients whose consents survivor id needs to see
// ([Client.Witnesses]), for relaying them; valid once the request is made.
func (s *Server) Witnesses(id uint64) ([]uint64, error) {
	if s.step != stepUnmask {
		return nil, errPhase
	}
	if err := s.member(id); err != nil {
		return nil, err
	}
	return s.g.witnesses(id, s.dropped), nil
}

// unmasker is one of Sum's goroutines: its Lagrange coefficients, and the
// sum of the masks it rebuilt, negated.
type unmasker struct {
	ip         interpolator
	buf, masks []uint64
}

// selfMask rebuilds survivor i's self-mask seed and subtracts its mask; it
// returns the holders whose shares were wrong.
func (s *Server) selfMask(u *unmasker, i uint64, suspect func(uint64) bool) ([]uint64, error) {
	vs := s.values[i]
	b, wrong, err := u.ip.recoverSecret(s.threshold, committed(vs, vs.element(0), 0), s.weights[vs.holders()], s.withDisclosed(revealedShares(s.self[i]), i, 0), suspect)
	if err != nil {
		return wrong, fmt.Errorf("secagg: cannot rebuild survivor %d's self mask: %w", i, err)
	}
	buf := u.buf
	corr.NewStream(selfKey(s.p, b, i)).Fill(buf)
	sub(u.masks, buf)
	return wrong, nil
}

// pairMasks rebuilds dropped client j's mask key and subtracts its masks
// with its surviving partners; it returns the holders whose shares were
// wrong.
func (s *Server) pairMasks(u *unmasker, j uint64, suspect func(uint64) bool) ([]uint64, error) {
	vs := s.values[j]
	sj, wrong, err := u.ip.recoverSecret(s.threshold, committed(vs, s.sKeys[j], vs.holders()), s.weights[vs.holders()], s.withDisclosed(revealedShares(s.pair[j]), j, 1), suspect)
	if err != nil {
		return wrong, fmt.Errorf("secagg: cannot rebuild dropped client %d's mask key: %w", j, err)
	}
	buf := u.buf
	for _, i := range s.partners[j] {
		if !s.masked[i] {
			continue
		}
		corr.NewStream(pairKey(s.p, s.sKeys[i], sj, i, j)).Fill(buf)
		// y_i carries +PRG(s_ij) when i < j, −PRG(s_ij) otherwise.
		if i < j {
			sub(u.masks, buf)
		} else {
			add(u.masks, buf)
		}
	}
	return wrong, nil
}

// committed is one of a dealer's polynomials' values by point, parsed from
// vs once asked for: B's (from 0) or S's (from m), with at0 its value at 0.
func committed(vs encodedValues, at0 group.Element, from int) func(uint64) group.Element {
	parsed := map[uint64]group.Element{0: at0}
	return func(x uint64) group.Element {
		v, ok := parsed[x]
		if !ok {
			v = vs.element(uint64(from) + x)
			parsed[x] = v
		}
		return v
	}
}

func (s *Server) blame(holders []uint64) {
	for _, h := range holders {
		s.wrong[h] = true
	}
}

// Release drops the round's state once its sum is taken: the keys,
// commitments, dealings, checks, partners and revealed shares (some 13 KB
// a client at degree 96), which a deployed server would otherwise hold
// through the rest of its round's end (the update, the evaluation, the
// privacy accounting). Every step then fails; Threshold, Degree, Excluded
// and WrongShares still answer.
func (s *Server) Release() {
	s.step = stepReleased
	s.keys, s.sKeys, s.values, s.dealtTo, s.inbox = nil, nil, nil, nil, nil
	s.checked, s.disputes, s.disclosed, s.kept, s.partners = nil, nil, nil, nil, nil
	s.sum, s.masked, s.dropped, s.self, s.pair = nil, nil, nil, nil, nil
	s.holders, s.answered, s.weights = nil, nil, nil
}

// WrongShares is the survivors that revealed a share that does not match
// its commitments, found by Sum among the shares it tried: a wrong share it
// had no need to try is not found.
func (s *Server) WrongShares() []uint64 { return slices.Sorted(maps.Keys(s.wrong)) }
