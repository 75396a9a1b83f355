package transport

import (
	"crypto/ed25519"
	"fmt"
	"maps"
	"slices"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/fedpq/fedpq/fl"
	"github.com/fedpq/fedpq/secagg"
	pb "github.com/fedpq/fedpq/transport/fedpqpb"
)

// A secure round (secure_aggregation: true) runs SecAgg+ (package secagg)
// between the server and the round's clients, after each client has
// trained and encoded: every step waits for the clients still in the round
// and no longer than its deadline, so that clients that drop out at any
// point leave the others to finish. A client that sends what the step does
// not accept (a bad signature, garbage, a wrong size) is out of the round
// from that step on, as if it had left. The server relays keys and
// dealings, checks signatures and commitments, and learns the sum of the
// uploads' integer fields only. This file is the server's side;
// secureclient.go is the client's.

// Steps of a secure round, at the server.
const (
	secureKeys     = iota // collecting the clients' keys
	secureShares          // collecting their dealings
	secureCheck           // collecting their checks of the shares dealt to them
	secureDisputes        // collecting disputed dealers' disclosures
	secureMasked          // collecting their masked uploads
	secureConsent         // collecting their consents to the unmask request
	secureUnmask          // collecting their shares
	secureDone
)

// secureRound is the server's side of a secure round.
type secureRound struct {
	srv       *secagg.Server
	params    secagg.Params
	link      [32]byte // the round's beacon link
	step      int
	due       time.Time                    // the step's deadline
	end       time.Time                    // the round's deadline, past which no step's is moved
	identity  map[uint32]ed25519.PublicKey // each client's enrolled identity, from the round's start
	keys      map[uint32]*pb.SecAggKeys    // step 0
	dealt     map[uint32]bool              // step 1
	signed    map[uint32]map[uint32][]byte // dealers' signatures of their sealed shares, by holder
	checked   map[uint32]*pb.SecAggCheck   // step 2, signed
	disputed  map[uint32]bool              // dealers complained of, asked to disclose
	disclosed map[uint32]bool              // their answers
	kept      map[uint32]bool              // given partners
	request   secagg.Request               // step 4
	digest    [32]byte                     // of request
	survivors map[uint32]bool              // asked to consent
	consents  map[uint32][]byte            // their signatures
	asked     map[uint32]bool              // sent their holders' consents, asked to reveal
	revealed  map[uint32]bool              // step 5
	gone      map[uint32]bool              // left, or joined again, since the round began
}

func newSecureRound(plan *fl.Plan, roundDeadline time.Time, identity map[uint32]ed25519.PublicKey) *secureRound {
	srv, params, link := plan.SecAgg()
	if srv == nil {
		return nil
	}
	return &secureRound{srv: srv, params: params, link: link, due: roundDeadline, end: roundDeadline, identity: identity,
		keys: map[uint32]*pb.SecAggKeys{}, dealt: map[uint32]bool{}, signed: map[uint32]map[uint32][]byte{},
		checked: map[uint32]*pb.SecAggCheck{}, disputed: map[uint32]bool{}, disclosed: map[uint32]bool{}, kept: map[uint32]bool{},
		survivors: map[uint32]bool{}, consents: map[uint32][]byte{}, asked: map[uint32]bool{}, revealed: map[uint32]bool{},
		gone: map[uint32]bool{}}
}

// announce is a secure round's settings as its RoundStart carries them.
func (sr *secureRound) announce(plan *fl.Plan) *pb.SecAgg {
	m := &pb.SecAgg{Bits: uint32(sr.params.Bits), Degree: uint32(sr.params.Degree), Threshold: uint32(sr.params.Threshold),
		Seed: sr.params.Seed[:], Beacon: sr.link[:]}
	for _, k := range plan.Clients {
		m.Clients = append(m.Clients, uint32(k))
	}
	return m
}

func secaggKeysSigned(runID []byte, k *pb.SecAggKeys) []byte {
	return signed("secagg-keys", runID, u32(k.GetRound()), u32(k.GetClient()), k.GetC(), k.GetS())
}

func secaggConsentSigned(runID []byte, round uint32, digest [32]byte) []byte {
	return signed("secagg-consent", runID, u32(round), digest[:])
}

// secaggShareSigned is what a dealer signs of each holder's sealed shares:
// a holder complains only of a dealing its dealer signed, so that a server
// that alters one cannot make an honest dealer disclose an honest holder's
// shares (secagg.Client.Disclose).
func secaggShareSigned(runID []byte, round uint32, sh *pb.SecAggShare, values []byte) []byte {
	return signed("secagg-share", runID, u32(round), u32(sh.GetFrom()), u32(sh.GetTo()), sh.GetCiphertext(), values)
}

// secaggCheckSigned is what a client signs of its complaints: a dealer
// discloses only shares that their holders disputed.
func secaggCheckSigned(runID []byte, c *pb.SecAggCheck) []byte {
	var list []byte
	for _, j := range c.GetComplaints() {
		list = append(list, u32(j)...)
	}
	return signed("secagg-check", runID, u32(c.GetRound()), u32(c.GetClient()), list)
}

// advance moves a secure round on when its step is complete, or due: it
// sends what the next step needs and reports whether the round's uploads
// are all in and unmasked. s.mu is held.
func (s *Server) advance(rd *serverRound, now time.Time) bool {
	sr := rd.secure
	// A client that joins again mid round has lost its side of the
	// protocol (its secrets die with its session): no step waits for it.
	present := func(pos int) bool {
		id := uint32(rd.plan.Clients[pos])
		return (rd.waiting(pos) || rd.uploaded(pos)) && s.sessions[id] != nil && !sr.gone[id]
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
				complete = complete && (sr.keys[id] == nil || sr.dealt[id])
			case secureCheck:
				complete = complete && (!sr.dealt[id] || sr.checked[id] != nil)
			case secureDisputes:
				complete = complete && (!sr.disputed[id] || sr.disclosed[id])
			case secureMasked:
				complete = complete && (!sr.kept[id] || !rd.waiting(pos))
			case secureConsent:
				complete = complete && (!sr.survivors[id] || sr.consents[id] != nil)
			case secureUnmask:
				complete = complete && (!sr.asked[id] || sr.revealed[id])
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
	rd.phases.mark(securePhases[sr.step])
	sr.step++
	switch sr.step {
	case secureShares:
		for _, id := range slices.Sorted(maps.Keys(sr.keys)) {
			peers, err := sr.srv.Keys(uint64(id))
			if err != nil {
				fail(err)
				return
			}
			m := &pb.SecAggPeers{Round: t}
			for _, j := range slices.Sorted(maps.Keys(peers)) {
				m.Keys = append(m.Keys, sr.keys[uint32(j)])
				m.Identities = append(m.Identities, sr.identity[uint32(j)])
			}
			s.secureSend(rd, id, &pb.ServerMessage{Body: &pb.ServerMessage_SecaggPeers{SecaggPeers: m}})
		}
	case secureCheck:
		for _, id := range slices.Sorted(maps.Keys(sr.dealt)) {
			in, err := sr.srv.Deliveries(uint64(id))
			if err != nil {
				fail(err)
				return
			}
			m := &pb.SecAggShares{Round: t}
			for _, from := range slices.Sorted(maps.Keys(in)) {
				m.Shares = append(m.Shares, &pb.SecAggShare{From: uint32(from), To: id, Ciphertext: in[from].Sealed, Values: in[from].Values,
					Signature: sr.signed[id][uint32(from)]})
			}
			delete(sr.signed, id)
			s.secureSend(rd, id, &pb.ServerMessage{Body: &pb.ServerMessage_SecaggInbox{SecaggInbox: m}})
		}
	case secureDisputes:
		// A dealer complained of is sent the signed complaints, and
		// discloses the disputed shares or is left out before masking.
		for _, id := range slices.Sorted(maps.Keys(sr.dealt)) {
			holders, err := sr.srv.Disputes(uint64(id))
			if err != nil {
				fail(err)
				return
			}
			if len(holders) == 0 {
				continue
			}
			m := &pb.SecAggDisputes{Round: t}
			for _, h := range holders {
				m.Checks = append(m.Checks, sr.checked[uint32(h)])
				m.Identities = append(m.Identities, sr.identity[uint32(h)])
			}
			sr.disputed[id] = true
			s.secureSend(rd, id, &pb.ServerMessage{Body: &pb.ServerMessage_SecaggDisputes{SecaggDisputes: m}})
		}
	case secureMasked:
		var left []int
		defer func() {
			if len(left) > 0 {
				s.log.Printf("round %d: %d clients not kept for masking (disputed shares not disclosed, or too few of their share holders took their shares as right): %s", t, len(left), firstTen(left))
			}
		}()
		for _, id := range slices.Sorted(maps.Keys(sr.checked)) {
			partners, err := sr.srv.Partners(uint64(id))
			if err != nil {
				if len(left) == 0 {
					s.log.Printf("round %d: %v", t, err)
				}
				left = append(left, int(id))
				continue
			}
			sr.kept[id] = true
			m := &pb.SecAggPartners{Round: t}
			for _, j := range partners {
				m.Partners = append(m.Partners, uint32(j))
			}
			s.secureSend(rd, id, &pb.ServerMessage{Body: &pb.ServerMessage_SecaggPartners{SecaggPartners: m}})
		}
	case secureConsent:
		req, err := sr.srv.Request()
		if err != nil {
			fail(err)
			return
		}
		sr.request, sr.digest = req, req.Digest(sr.params)
		m := &pb.SecAggUnmask{Round: t}
		for _, id := range req.Survivors {
			m.Survivors = append(m.Survivors, uint32(id))
			sr.survivors[uint32(id)] = true
		}
		for _, id := range req.Dropped {
			m.Dropped = append(m.Dropped, uint32(id))
		}
		s.log.Printf("round %d: unmasking the sum of %d clients' uploads; %d dropped after sharing their keys", t, len(req.Survivors), len(req.Dropped))
		for _, id := range req.Survivors {
			s.secureSend(rd, uint32(id), &pb.ServerMessage{Body: &pb.ServerMessage_SecaggUnmask{SecaggUnmask: m}})
		}
	case secureUnmask:
		// Each survivor that consented is sent the consents it needs
		// (secagg.Client.Witnesses): it reveals a client's share only when
		// enough of that client's holders agreed to the same request.
		for _, id := range slices.Sorted(maps.Keys(sr.consents)) {
			witnesses, err := sr.srv.Witnesses(uint64(id))
			if err != nil {
				fail(err)
				return
			}
			m := &pb.SecAggConsents{Round: t}
			for _, j := range witnesses {
				if sig, ok := sr.consents[uint32(j)]; ok {
					m.Clients = append(m.Clients, uint32(j))
					m.Signatures = append(m.Signatures, sig)
					m.Identities = append(m.Identities, sr.identity[uint32(j)])
				}
			}
			sr.asked[id] = true
			s.secureSend(rd, id, &pb.ServerMessage{Body: &pb.ServerMessage_SecaggConsents{SecaggConsents: m}})
		}
	}
}

// secureSend sends m to client id if it is connected, counting it as
// setup. s.mu is held.
func (s *Server) secureSend(rd *serverRound, id uint32, m *pb.ServerMessage) {
	if ss := s.sessions[id]; ss != nil && !rd.secure.gone[id] {
		ss.send(m)
		rd.setup += int64(proto.Size(m))
	}
}

// secureMessage handles a client's message of a secure round's protocol.
// A client whose message is refused is out of the round from that step
// on: no step waits for a client that broke the protocol. s.mu is held.
func (s *Server) secureMessage(sess *session, m *pb.ClientMessage, pre *checkedDealing) error {
	round, err := s.secureStep(sess, m, pre)
	if rd := s.round; err != nil && rd != nil && rd.secure != nil && round == uint32(rd.plan.T) {
		// A late message of an earlier round does not count against the
		// client in this one.
		if pos, ok := rd.pos[sess.id]; ok {
			sr := rd.secure
			switch {
			case m.GetSecaggReveal() != nil:
				sr.revealed[sess.id] = true
			case m.GetSecaggDisclosure() != nil:
				sr.disclosed[sess.id] = true
			case m.GetSecaggConsent() != nil:
				delete(sr.survivors, sess.id)
			default:
				rd.refuse(pos)
			}
		}
	}
	return err
}

// checkedDealing is a dealing checked by checkDealing for secure round sr.
type checkedDealing struct {
	sr     *secureRound
	values *secagg.Values
	err    error
}

// checkDealing checks client id's dealing in secure round sr: its values
// (secagg.Server.CheckDealing) and each share's signature by its dealer (a
// holder ignores a dealing its dealer did not sign, which would then count
// as right without being so). It reads only what no step of the round
// changes once its keys are in, so that a deployed server checks its
// clients' dealings on all cores, outside its lock (preDealing).
func (s *Server) checkDealing(sr *secureRound, id uint32, m *pb.SecAggShares) *checkedDealing {
	out := &checkedDealing{sr: sr}
	fail := func(err error) *checkedDealing { out.err = err; return out }
	round := m.GetRound()
	values, err := sr.srv.CheckDealing(uint64(id), m.GetValues())
	if err != nil {
		return fail(err)
	}
	hv, err := sr.srv.HolderValues(uint64(id), values)
	if err != nil {
		return fail(err)
	}
	seen := map[uint32]bool{}
	for _, sh := range m.GetShares() {
		switch {
		case sh.GetFrom() != id:
			return fail(fmt.Errorf("round %d: a share from %d", round, sh.GetFrom()))
		case seen[sh.GetTo()]:
			return fail(fmt.Errorf("round %d: two shares for %d", round, sh.GetTo()))
		case hv[uint64(sh.GetTo())] == nil:
			return fail(fmt.Errorf("round %d: a share for %d, not a holder of its", round, sh.GetTo()))
		}
		seen[sh.GetTo()] = true
		if err := verify(sr.identity[id], secaggShareSigned(s.runID, round, sh, hv[uint64(sh.GetTo())]), sh.GetSignature()); err != nil {
			return fail(fmt.Errorf("round %d: its shares for %d: %w", round, sh.GetTo(), err))
		}
	}
	out.values = values
	return out
}

// preDealing checks a dealing before handle takes the server's lock for
// it, when it is for the shares step under way: nil otherwise, and the
// step checks it under the lock as it does any message.
func (s *Server) preDealing(sess *session, m *pb.SecAggShares) *checkedDealing {
	s.mu.Lock()
	var sr *secureRound
	if rd := s.round; rd != nil && rd.secure != nil && m.GetRound() == uint32(rd.plan.T) && rd.secure.step == secureShares {
		sr = rd.secure
	}
	s.mu.Unlock()
	if sr == nil {
		return nil
	}
	return s.checkDealing(sr, sess.id, m)
}

// secureStep checks and records one message; it returns the round the
// message names.
func (s *Server) secureStep(sess *session, m *pb.ClientMessage, pre *checkedDealing) (uint32, error) {
	rd := s.round
	var round uint32
	switch b := m.GetBody().(type) {
	case *pb.ClientMessage_SecaggKeys:
		round = b.SecaggKeys.GetRound()
	case *pb.ClientMessage_SecaggShares:
		round = b.SecaggShares.GetRound()
	case *pb.ClientMessage_SecaggCheck:
		round = b.SecaggCheck.GetRound()
	case *pb.ClientMessage_SecaggDisclosure:
		round = b.SecaggDisclosure.GetRound()
	case *pb.ClientMessage_SecaggConsent:
		round = b.SecaggConsent.GetRound()
	case *pb.ClientMessage_SecaggReveal:
		round = b.SecaggReveal.GetRound()
	}
	if rd == nil || rd.secure == nil || round != uint32(rd.plan.T) {
		return round, fmt.Errorf("a secure-aggregation message for round %d, which is not a secure round under way", round)
	}
	sr, id := rd.secure, sess.id
	if _, ok := rd.pos[id]; !ok {
		return round, fmt.Errorf("round %d: client %d is not in the round", round, id)
	}
	defer s.notify()
	wrongStep := func(what string) error { return fmt.Errorf("round %d: %s outside its step", round, what) }
	switch b := m.GetBody().(type) {
	case *pb.ClientMessage_SecaggKeys:
		k := b.SecaggKeys
		switch {
		case sr.step != secureKeys:
			return round, wrongStep("keys")
		case sr.keys[id] != nil:
			return round, fmt.Errorf("round %d: keys a second time", round)
		case k.GetClient() != id:
			return round, fmt.Errorf("round %d: keys for client %d", round, k.GetClient())
		}
		if err := verify(sr.identity[id], secaggKeysSigned(s.runID, k), k.GetSignature()); err != nil {
			return round, fmt.Errorf("round %d: keys: %w", round, err)
		}
		if err := sr.srv.AddKeys(uint64(id), secagg.Advertised{C: k.GetC(), S: k.GetS()}); err != nil {
			return round, err
		}
		sr.keys[id] = k
	case *pb.ClientMessage_SecaggShares:
		if sr.step != secureShares {
			return round, wrongStep("shares")
		}
		if pre == nil || pre.sr != sr {
			pre = s.checkDealing(sr, id, b.SecaggShares)
		}
		if pre.err != nil {
			return round, pre.err
		}
		d := secagg.Dealing{Values: pre.values, Sealed: map[uint64][]byte{}}
		sigs := map[uint32][]byte{}
		for _, sh := range b.SecaggShares.GetShares() {
			d.Sealed[uint64(sh.GetTo())] = sh.GetCiphertext()
			sigs[sh.GetTo()] = sh.GetSignature()
		}
		if err := sr.srv.AddShares(uint64(id), d); err != nil {
			return round, err
		}
		for to, sig := range sigs {
			if sr.signed[to] == nil {
				sr.signed[to] = map[uint32][]byte{}
			}
			sr.signed[to][id] = sig
		}
		sr.dealt[id] = true
	case *pb.ClientMessage_SecaggCheck:
		c := b.SecaggCheck
		switch {
		case sr.step != secureCheck:
			return round, wrongStep("a check")
		case c.GetClient() != id:
			return round, fmt.Errorf("round %d: a check for client %d", round, c.GetClient())
		}
		if err := verify(sr.identity[id], secaggCheckSigned(s.runID, c), c.GetSignature()); err != nil {
			return round, fmt.Errorf("round %d: check: %w", round, err)
		}
		var complaints []uint64
		for _, j := range c.GetComplaints() {
			complaints = append(complaints, uint64(j))
		}
		if err := sr.srv.AddCheck(uint64(id), complaints); err != nil {
			return round, err
		}
		if len(complaints) > 0 {
			s.log.Printf("round %d: client %d found wrong shares from %v", round, id, complaints)
		}
		sr.checked[id] = c
	case *pb.ClientMessage_SecaggDisclosure:
		if sr.step != secureDisputes || !sr.disputed[id] {
			return round, wrongStep("a disclosure")
		}
		if sr.disclosed[id] {
			return round, fmt.Errorf("round %d: a second disclosure", round)
		}
		sr.disclosed[id] = true
		d := secagg.Disclosure{}
		for _, sh := range b.SecaggDisclosure.GetShares() {
			d[uint64(sh.GetHolder())] = [2][]byte{sh.GetB(), sh.GetS()}
		}
		if err := sr.srv.AddDisclosure(uint64(id), d); err != nil {
			return round, err
		}
		s.log.Printf("round %d: client %d disclosed the %d shares its holders disputed; they match its commitments", round, id, len(d))
	case *pb.ClientMessage_SecaggConsent:
		switch {
		case sr.step != secureConsent || !sr.survivors[id]:
			return round, wrongStep("a consent")
		case sr.consents[id] != nil:
			return round, fmt.Errorf("round %d: a second consent", round)
		}
		sig := b.SecaggConsent.GetSignature()
		if err := verify(sr.identity[id], secaggConsentSigned(s.runID, round, sr.digest), sig); err != nil {
			return round, fmt.Errorf("round %d: consent: %w", round, err)
		}
		sr.consents[id] = sig
	case *pb.ClientMessage_SecaggReveal:
		if sr.step != secureUnmask || !sr.asked[id] {
			return round, wrongStep("shares revealed")
		}
		r := secagg.Reveal{Self: map[uint64][]byte{}, Pair: map[uint64][]byte{}}
		for _, sh := range b.SecaggReveal.GetSelf() {
			r.Self[uint64(sh.GetOwner())] = sh.GetShare()
		}
		for _, sh := range b.SecaggReveal.GetPair() {
			r.Pair[uint64(sh.GetOwner())] = sh.GetShare()
		}
		if err := sr.srv.AddReveal(uint64(id), r); err != nil {
			return round, err
		}
		sr.revealed[id] = true
	}
	sr.progress(time.Now(), s.cfg.KeyShareTimeout)
	return round, nil
}

// progress moves the step's deadline on after a message it accepted: a
// step closes KeyShareTimeout after its last message, not after its start,
// so that its deadline scales with the clients (ten thousand clients
// dealing their shares on a few cores take minutes) while a step whose
// missing clients are gone still ends soon after the others are in. No
// deadline moves past the round's.
func (sr *secureRound) progress(now time.Time, idle time.Duration) {
	due := now.Add(idle)
	if due.After(sr.end) {
		due = sr.end
	}
	if due.After(sr.due) {
		sr.due = due
	}
}
