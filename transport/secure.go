package transport

import (
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"errors"
	"fmt"
	"maps"
	"slices"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/fedpq/fedpq/fl"
	"github.com/fedpq/fedpq/mech"
	"github.com/fedpq/fedpq/secagg"
	pb "github.com/fedpq/fedpq/transport/fedpqpb"
)

// A secure round (secure_aggregation: true) runs SecAgg+ (package secagg)
// between the server and the round's clients, after each client has
// trained and encoded: every step waits for the clients still in the round
// and no longer than its deadline, so that clients that drop out at any
// point leave the others to finish. The server relays keys and sealed
// shares, and learns the sum of the uploads' integer fields only.

// Steps of a secure round, at the server.
const (
	secureKeys   = iota // collecting the clients' keys
	secureShares        // collecting their sealed shares
	secureMasked        // collecting their masked uploads
	secureUnmask        // collecting their answers to the unmask request
	secureDone
)

// secureRound is the server's side of a secure round.
type secureRound struct {
	srv       *secagg.Server
	params    secagg.Params
	step      int
	due       time.Time // the step's deadline
	keys      map[uint32]*pb.SecAggKeys
	shared    map[uint32]bool
	survivors map[uint32]bool // asked to unmask
	revealed  map[uint32]bool
}

func newSecureRound(plan *fl.Plan, roundDeadline time.Time) *secureRound {
	srv, params := plan.SecAgg()
	if srv == nil {
		return nil
	}
	return &secureRound{srv: srv, params: params, due: roundDeadline, keys: map[uint32]*pb.SecAggKeys{},
		shared: map[uint32]bool{}, survivors: map[uint32]bool{}, revealed: map[uint32]bool{}}
}

// announce is a secure round's settings as its RoundStart carries them.
func (sr *secureRound) announce(plan *fl.Plan) *pb.SecAgg {
	m := &pb.SecAgg{Bits: uint32(sr.params.Bits), Degree: uint32(sr.params.Degree), Threshold: uint32(sr.params.Threshold), Seed: sr.params.Seed[:]}
	for _, k := range plan.Clients {
		m.Clients = append(m.Clients, uint32(k))
	}
	return m
}

func secaggKeysSigned(runID []byte, k *pb.SecAggKeys) []byte {
	return signed("secagg-keys", runID, u32(k.GetRound()), u32(k.GetClient()), k.GetC(), k.GetS())
}

// advance moves a secure round on when its step is complete, or due: it
// sends what the next step needs and reports whether the round's uploads
// are all in and unmasked. s.mu is held.
func (s *Server) advance(rd *serverRound, now time.Time) bool {
	sr := rd.secure
	present := func(pos int) bool {
		st := rd.state[pos]
		return (st == waiting || st == uploaded) && s.sessions[uint32(rd.plan.Clients[pos])] != nil
	}
	for {
		complete := true
		for pos, k := range rd.plan.Clients {
			id := uint32(k)
			if !present(pos) {
				continue
			}
			switch sr.step {
			case secureKeys:
				complete = complete && sr.keys[id] != nil
			case secureShares:
				complete = complete && (sr.keys[id] == nil || sr.shared[id])
			case secureMasked:
				complete = complete && (!sr.shared[id] || rd.state[pos] != waiting)
			case secureUnmask:
				complete = complete && (!sr.survivors[id] || sr.revealed[id])
			}
		}
		if sr.step == secureDone || !complete && now.Before(sr.due) {
			return sr.step == secureDone
		}
		s.nextStep(rd)
		sr.due = now.Add(s.cfg.KeyShareTimeout)
	}
}

// nextStep closes the secure round's step and opens the next. s.mu is held.
func (s *Server) nextStep(rd *serverRound) {
	sr, t := rd.secure, uint32(rd.plan.T)
	fail := func(err error) {
		s.log.Printf("round %d: secure aggregation: %v", t, err)
		sr.step = secureDone
	}
	switch sr.step {
	case secureKeys:
		sr.step = secureShares
		for id := range sr.keys {
			peers, err := sr.srv.Keys(uint64(id))
			if err != nil {
				fail(err)
				return
			}
			m := &pb.SecAggPeers{Round: t}
			for _, j := range slices.Sorted(maps.Keys(peers)) {
				m.Keys = append(m.Keys, sr.keys[uint32(j)])
				var identity []byte
				if ss := s.sessions[uint32(j)]; ss != nil {
					identity = ss.identity
				}
				m.Identities = append(m.Identities, identity)
			}
			s.secureSend(rd, id, &pb.ServerMessage{Body: &pb.ServerMessage_SecaggPeers{SecaggPeers: m}})
		}
	case secureShares:
		sr.step = secureMasked
		for id := range sr.shared {
			in, err := sr.srv.Shares(uint64(id))
			if err != nil {
				fail(err)
				return
			}
			m := &pb.SecAggShares{Round: t}
			for _, from := range slices.Sorted(maps.Keys(in)) {
				m.Shares = append(m.Shares, &pb.SecAggShare{From: uint32(from), To: id, Ciphertext: in[from]})
			}
			s.secureSend(rd, id, &pb.ServerMessage{Body: &pb.ServerMessage_SecaggInbox{SecaggInbox: m}})
		}
	case secureMasked:
		sr.step = secureUnmask
		survivors, dropped, err := sr.srv.Request()
		if err != nil {
			fail(err)
			return
		}
		m := &pb.SecAggUnmask{Round: t}
		for _, id := range survivors {
			m.Survivors = append(m.Survivors, uint32(id))
			sr.survivors[uint32(id)] = true
		}
		for _, id := range dropped {
			m.Dropped = append(m.Dropped, uint32(id))
		}
		s.log.Printf("round %d: unmasking the sum of %d clients' uploads; %d dropped after sharing their keys", t, len(survivors), len(dropped))
		for _, id := range survivors {
			s.secureSend(rd, uint32(id), &pb.ServerMessage{Body: &pb.ServerMessage_SecaggUnmask{SecaggUnmask: m}})
		}
	case secureUnmask:
		sr.step = secureDone
	}
}

// secureSend sends m to client id if it is connected, counting it as
// setup. s.mu is held.
func (s *Server) secureSend(rd *serverRound, id uint32, m *pb.ServerMessage) {
	if ss := s.sessions[id]; ss != nil {
		ss.send(m)
		rd.setup += int64(proto.Size(m))
	}
}

// secureMessage handles a client's message of a secure round's protocol.
// A client whose keys or shares are refused is out of the round, and one
// whose answer is refused is not waited for: no step waits for a client
// that broke the protocol. s.mu is held.
func (s *Server) secureMessage(sess *session, m *pb.ClientMessage) error {
	err := s.secureStep(sess, m)
	round := m.GetSecaggKeys().GetRound() | m.GetSecaggShares().GetRound() | m.GetSecaggReveal().GetRound() // one is set
	if rd := s.round; err != nil && rd != nil && rd.secure != nil && round == uint32(rd.plan.T) {
		// A late message of an earlier round does not count against the
		// client in this one.
		if pos, ok := rd.pos[sess.id]; ok {
			if m.GetSecaggReveal() != nil {
				rd.secure.revealed[sess.id] = true
			} else if rd.state[pos] == waiting {
				rd.state[pos] = refused
			}
		}
	}
	return err
}

func (s *Server) secureStep(sess *session, m *pb.ClientMessage) error {
	rd := s.round
	var round uint32
	switch b := m.GetBody().(type) {
	case *pb.ClientMessage_SecaggKeys:
		round = b.SecaggKeys.GetRound()
	case *pb.ClientMessage_SecaggShares:
		round = b.SecaggShares.GetRound()
	case *pb.ClientMessage_SecaggReveal:
		round = b.SecaggReveal.GetRound()
	}
	if rd == nil || rd.secure == nil || round != uint32(rd.plan.T) {
		return fmt.Errorf("a secure-aggregation message for round %d, which is not a secure round under way", round)
	}
	sr, id := rd.secure, sess.id
	if _, ok := rd.pos[id]; !ok {
		return fmt.Errorf("round %d: client %d is not in the round", round, id)
	}
	defer s.notify()
	switch b := m.GetBody().(type) {
	case *pb.ClientMessage_SecaggKeys:
		k := b.SecaggKeys
		switch {
		case sr.step != secureKeys:
			return fmt.Errorf("round %d: keys after the keys step", round)
		case sr.keys[id] != nil:
			return fmt.Errorf("round %d: keys a second time", round)
		case k.GetClient() != id || len(k.GetSignature()) != ed25519.SignatureSize:
			return fmt.Errorf("round %d: keys for client %d with a %d-byte signature", round, k.GetClient(), len(k.GetSignature()))
		}
		if err := sr.srv.AddKeys(uint64(id), secagg.Advertised{C: k.GetC(), S: k.GetS()}); err != nil {
			return err
		}
		sr.keys[id] = k
	case *pb.ClientMessage_SecaggShares:
		if sr.step != secureShares {
			return fmt.Errorf("round %d: shares outside the shares step", round)
		}
		sealed := map[uint64][]byte{}
		for _, sh := range b.SecaggShares.GetShares() {
			if sh.GetFrom() != id {
				return fmt.Errorf("round %d: a share from %d", round, sh.GetFrom())
			}
			sealed[uint64(sh.GetTo())] = sh.GetCiphertext()
		}
		if err := sr.srv.AddShares(uint64(id), sealed); err != nil {
			return err
		}
		sr.shared[id] = true
	case *pb.ClientMessage_SecaggReveal:
		if sr.step != secureUnmask {
			return fmt.Errorf("round %d: shares revealed outside the unmask step", round)
		}
		r := secagg.Reveal{Self: map[uint64][]byte{}, Pair: map[uint64][]byte{}}
		for _, sh := range b.SecaggReveal.GetSelf() {
			r.Self[uint64(sh.GetOwner())] = sh.GetShare()
		}
		for _, sh := range b.SecaggReveal.GetPair() {
			r.Pair[uint64(sh.GetOwner())] = sh.GetShare()
		}
		if err := sr.srv.AddReveal(uint64(id), r); err != nil {
			return err
		}
		sr.revealed[id] = true
	}
	return nil
}

// secureUpload is a client's side of a secure round, once it has encoded
// its payloads: keys, shares, the masked upload, and its answer to the
// unmask request. It returns a message of a later round if it read one.
func (c *Client) secureUpload(ctx context.Context, stream pb.Federation_SessionClient, in <-chan *pb.ServerMessage, runID []byte, rs *pb.RoundStart, payloads [][]byte, loss float64) (*pb.ServerMessage, error) {
	t, self, sa := rs.GetRound(), uint32(c.cfg.ID), rs.GetSecagg()
	p := secagg.Params{Bits: int(sa.GetBits()), Degree: int(sa.GetDegree()), Threshold: int(sa.GetThreshold()), Round: uint64(t)}
	if len(sa.GetSeed()) != len(p.Seed) {
		return nil, &badRound{fmt.Errorf("a secure-aggregation seed of %d bytes", len(sa.GetSeed()))}
	}
	copy(p.Seed[:], sa.GetSeed())
	ids := make([]uint64, len(sa.GetClients()))
	for i, k := range sa.GetClients() {
		ids[i] = uint64(k)
	}
	m, err := mech.IntegerOf(c.m)
	if err != nil {
		return nil, &setupError{err}
	}
	x, err := fl.Fields(m, payloads, c.sizes())
	if err != nil {
		return nil, &badRound{err}
	}
	cl, err := secagg.NewClient(p, uint64(self), ids, rand.Reader)
	if err != nil {
		return nil, &badRound{err}
	}
	adv := cl.Keys()
	keys := &pb.SecAggKeys{Round: t, Client: self, C: adv.C, S: adv.S}
	keys.Signature = ed25519.Sign(c.cfg.Key, secaggKeysSigned(runID, keys))
	if err := stream.Send(&pb.ClientMessage{Body: &pb.ClientMessage_SecaggKeys{SecaggKeys: keys}}); err != nil {
		return nil, err
	}

	m1, next, err := c.await(ctx, in, t, func(m *pb.ServerMessage) bool { return m.GetSecaggPeers().GetRound() == t })
	if m1 == nil {
		return next, err
	}
	pm := m1.GetSecaggPeers()
	peers := map[uint64]secagg.Advertised{}
	for i, k := range pm.GetKeys() {
		identity := ed25519.PublicKey(nil)
		if i < len(pm.GetIdentities()) {
			identity = pm.GetIdentities()[i]
		}
		if c.cfg.Roster != nil {
			identity = c.cfg.Roster[k.GetClient()]
		}
		if err := verify(identity, secaggKeysSigned(runID, k), k.GetSignature()); err != nil || k.GetRound() != t {
			c.log.Printf("round %d: client %d's secure-aggregation keys: %v; leaving it out", t, k.GetClient(), err)
			continue
		}
		peers[uint64(k.GetClient())] = secagg.Advertised{C: k.GetC(), S: k.GetS()}
	}
	sealed, err := cl.Share(peers)
	if err != nil {
		return nil, &badRound{err}
	}
	shares := &pb.SecAggShares{Round: t}
	for _, to := range slices.Sorted(maps.Keys(sealed)) {
		shares.Shares = append(shares.Shares, &pb.SecAggShare{From: self, To: uint32(to), Ciphertext: sealed[to]})
	}
	if err := stream.Send(&pb.ClientMessage{Body: &pb.ClientMessage_SecaggShares{SecaggShares: shares}}); err != nil {
		return nil, err
	}
	c.log.Printf("round %d: sent its shares to %d neighbours", t, len(shares.Shares))

	m2, next, err := c.await(ctx, in, t, func(m *pb.ServerMessage) bool { return m.GetSecaggInbox().GetRound() == t })
	if m2 == nil {
		return next, err
	}
	inbox := map[uint64][]byte{}
	for _, sh := range m2.GetSecaggInbox().GetShares() {
		if sh.GetTo() == self {
			inbox[uint64(sh.GetFrom())] = sh.GetCiphertext()
		}
	}
	y, err := cl.Mask(x, inbox)
	if err != nil {
		return nil, &badRound{err}
	}
	if err := stream.Send(&pb.ClientMessage{Body: &pb.ClientMessage_Upload{Upload: &pb.Upload{
		Round: t, Masked: fl.PackFields(y, p.Bits), Loss: loss,
	}}}); err != nil {
		return nil, err
	}
	c.log.Printf("round %d: uploaded its masked fields (%d bits each)", t, p.Bits)

	m3, next, err := c.await(ctx, in, t, func(m *pb.ServerMessage) bool { return m.GetSecaggUnmask().GetRound() == t })
	if m3 == nil {
		return next, err
	}
	req := m3.GetSecaggUnmask()
	survivors := make([]uint64, len(req.GetSurvivors()))
	for i, id := range req.GetSurvivors() {
		survivors[i] = uint64(id)
	}
	dropped := make([]uint64, len(req.GetDropped()))
	for i, id := range req.GetDropped() {
		dropped[i] = uint64(id)
	}
	r, err := cl.Unmask(survivors, dropped)
	if err != nil {
		// A request this client must not answer, such as one that asks
		// for both shares of one client: it reveals nothing.
		c.log.Printf("round %d: refused the unmask request: %v", t, err)
		return nil, nil
	}
	rv := &pb.SecAggReveal{Round: t}
	for _, o := range slices.Sorted(maps.Keys(r.Self)) {
		rv.Self = append(rv.Self, &pb.SecAggSecret{Owner: uint32(o), Share: r.Self[o]})
	}
	for _, o := range slices.Sorted(maps.Keys(r.Pair)) {
		rv.Pair = append(rv.Pair, &pb.SecAggSecret{Owner: uint32(o), Share: r.Pair[o]})
	}
	if err := stream.Send(&pb.ClientMessage{Body: &pb.ClientMessage_SecaggReveal{SecaggReveal: rv}}); err != nil {
		return nil, err
	}
	c.log.Printf("round %d: revealed its shares for %d survivors and %d dropped clients", t, len(r.Self), len(r.Pair))
	return nil, nil
}

// await reads messages until one of round t that want accepts, and
// returns it; or, if the round ends first (the next RoundStart, the end of
// the run), that message as next.
func (c *Client) await(ctx context.Context, in <-chan *pb.ServerMessage, t uint32, want func(*pb.ServerMessage) bool) (m, next *pb.ServerMessage, err error) {
	for {
		select {
		case m, ok := <-in:
			if !ok {
				return nil, nil, errors.New("connection lost during secure aggregation")
			}
			switch b := m.GetBody().(type) {
			case *pb.ServerMessage_RoundStart, *pb.ServerMessage_Finished:
				c.log.Printf("round %d: ended before its secure aggregation did", t)
				return nil, m, nil
			case *pb.ServerMessage_Receipt:
				if r := b.Receipt; r.GetAccepted() {
					c.log.Printf("round %d: upload accepted", r.GetRound())
				} else {
					c.log.Printf("round %d: upload refused: %s", r.GetRound(), r.GetError())
				}
			default:
				if want(m) {
					return m, nil, nil
				}
			}
		case <-ctx.Done():
			return nil, nil, ctx.Err()
		}
	}
}

// sizes is the number of parameters of each of the model's tensors.
func (c *Client) sizes() []int {
	n := make([]int, len(c.specs))
	for i, s := range c.specs {
		n[i] = s.Size()
	}
	return n
}
