package transport

import (
	"crypto/ed25519"
	"encoding/binary"
	"fmt"
	"maps"
	"slices"
	"time"

	"google.golang.org/protobuf/encoding/protowire"
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
	signed    map[uint32][]byte            // dealers' signatures of their sealed shares, by holder: signedRecord bytes each
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
		keys: map[uint32]*pb.SecAggKeys{}, dealt: map[uint32]bool{}, signed: map[uint32][]byte{},
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
	return shareSigned(runID, round, sh.GetFrom(), sh.GetTo(), sh.GetCiphertext(), values)
}

func shareSigned(runID []byte, round, from, to uint32, ciphertext, values []byte) []byte {
	return signed("secagg-share", runID, u32(round), u32(from), u32(to), ciphertext, values)
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

// signedRecord is the size of one dealer's signature in a holder's
// signed: the dealer's id and its Ed25519 signature (verify accepts no
// other size). A holder's signatures are kept in one buffer: a map per
// holder of a slice per signature held 40 MB more than their bytes at
// 10,000 clients.
const signedRecord = 4 + ed25519.SignatureSize

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
			m := &pb.SecAggPeers{Round: t, Keys: make([]*pb.SecAggKeys, 0, len(peers)), Identities: make([][]byte, 0, len(peers))}
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
			sigs := map[uint32][]byte{}
			for rec := sr.signed[id]; len(rec) > 0; rec = rec[signedRecord:] {
				sigs[binary.LittleEndian.Uint32(rec)] = rec[4:signedRecord:signedRecord]
			}
			delete(sr.signed, id)
			s.secureSend(rd, id, inboxMessage(t, id, in, sigs))
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
		// Every survivor gets the same request, encoded once: 20 KB at
		// 10,000 clients, which gRPC's codec would encode again into a
		// buffer of its pool for each.
		whole := &pb.ServerMessage{Body: &pb.ServerMessage_SecaggUnmask{SecaggUnmask: m}}
		b, err := proto.Marshal(whole)
		if err != nil {
			fail(err)
			return
		}
		e := &encoded{b: b, kind: kind(whole)}
		for _, id := range req.Survivors {
			s.secureSend(rd, uint32(id), e)
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
			// Built for every survivor at once: of their own size.
			n := 0
			for _, j := range witnesses {
				if _, ok := sr.consents[uint32(j)]; ok {
					n++
				}
			}
			m := &pb.SecAggConsents{Round: t, Clients: make([]uint32, 0, n), Signatures: make([][]byte, 0, n), Identities: make([][]byte, 0, n)}
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

// secureSend sends m, a *pb.ServerMessage or an *encoded, to client id if
// it is connected, counting it as setup. s.mu is held.
func (s *Server) secureSend(rd *serverRound, id uint32, m any) {
	if ss := s.sessions[id]; ss != nil && !rd.secure.gone[id] {
		ss.send(m)
		switch m := m.(type) {
		case *encoded:
			rd.setup += int64(len(m.b))
		case proto.Message:
			rd.setup += int64(proto.Size(m))
		}
	}
}

// Field numbers of a delivery (inboxMessage).
var (
	inboxField      = (&pb.ServerMessage{}).ProtoReflect().Descriptor().Fields().ByName("secagg_inbox").Number()
	sharesRound     = (&pb.SecAggShares{}).ProtoReflect().Descriptor().Fields().ByName("round").Number()
	sharesShares    = (&pb.SecAggShares{}).ProtoReflect().Descriptor().Fields().ByName("shares").Number()
	shareFrom       = (&pb.SecAggShare{}).ProtoReflect().Descriptor().Fields().ByName("from").Number()
	shareTo         = (&pb.SecAggShare{}).ProtoReflect().Descriptor().Fields().ByName("to").Number()
	shareCiphertext = (&pb.SecAggShare{}).ProtoReflect().Descriptor().Fields().ByName("ciphertext").Number()
	shareValues     = (&pb.SecAggShare{}).ProtoReflect().Descriptor().Fields().ByName("values").Number()
	shareSignature  = (&pb.SecAggShare{}).ProtoReflect().Descriptor().Fields().ByName("signature").Number()
)

// inboxMessage is client to's delivery in round t: the ServerMessage whose
// secagg_inbox is SecAggShares{Round: t, Shares: a SecAggShare{From, To,
// Ciphertext, Values, Signature} per dealer in in, by dealer, signed
// sigs[dealer]}, encoded as proto.Marshal encodes it, in a buffer of its
// size. The step opens with every client's delivery queued at once: built
// as messages, they held 35 KB of structs each (at degree 96) until sent,
// and then a 32 KiB buffer of gRPC's pool each; encoded, 23 KB.
func inboxMessage(t, to uint32, in map[uint64]secagg.Delivery, sigs map[uint32][]byte) *encoded {
	varint := func(n protowire.Number, v uint32) int {
		if v == 0 {
			return 0
		}
		return protowire.SizeTag(n) + protowire.SizeVarint(uint64(v))
	}
	bytes := func(n protowire.Number, b []byte) int {
		if len(b) == 0 {
			return 0
		}
		return protowire.SizeTag(n) + protowire.SizeBytes(len(b))
	}
	appendVarint := func(b []byte, n protowire.Number, v uint32) []byte {
		if v == 0 {
			return b
		}
		return protowire.AppendVarint(protowire.AppendTag(b, n, protowire.VarintType), uint64(v))
	}
	appendBytes := func(b []byte, n protowire.Number, v []byte) []byte {
		if len(v) == 0 {
			return b
		}
		return protowire.AppendBytes(protowire.AppendTag(b, n, protowire.BytesType), v)
	}
	froms := slices.Sorted(maps.Keys(in))
	shareSize := func(from uint64) int {
		d := in[from]
		return varint(shareFrom, uint32(from)) + varint(shareTo, to) + bytes(shareCiphertext, d.Sealed) +
			bytes(shareValues, d.Values) + bytes(shareSignature, sigs[uint32(from)])
	}
	body := varint(sharesRound, t)
	for _, from := range froms {
		body += protowire.SizeTag(sharesShares) + protowire.SizeBytes(shareSize(from))
	}
	b := make([]byte, 0, protowire.SizeTag(inboxField)+protowire.SizeBytes(body))
	b = protowire.AppendVarint(protowire.AppendTag(b, inboxField, protowire.BytesType), uint64(body))
	b = appendVarint(b, sharesRound, t)
	for _, from := range froms {
		d := in[from]
		b = protowire.AppendVarint(protowire.AppendTag(b, sharesShares, protowire.BytesType), uint64(shareSize(from)))
		b = appendVarint(b, shareFrom, uint32(from))
		b = appendVarint(b, shareTo, to)
		b = appendBytes(b, shareCiphertext, d.Sealed)
		b = appendBytes(b, shareValues, d.Values)
		b = appendBytes(b, shareSignature, sigs[uint32(from)])
	}
	return &encoded{b: b, kind: inboxKind}
}

var inboxKind = kind(&pb.ServerMessage{Body: &pb.ServerMessage_SecaggInbox{SecaggInbox: &pb.SecAggShares{}}})

// secureMessage handles a client's message of a secure round's protocol:
// m, or its dealing d (m nil). A client whose message is refused is out of
// the round from that step on: no step waits for a client that broke the
// protocol. s.mu is held.
func (s *Server) secureMessage(sess *session, m *pb.ClientMessage, d *dealing, pre *checkedDealing) error {
	round, err := s.secureStep(sess, m, d, pre)
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

// dealing is a client's dealing (a SecAggShares) as the server holds it
// from its arrival until the shares step records it: its shares in one
// buffer, not as the message's structs and slices (at degree 96, 22 KB a
// dealing instead of 35 KB). Dealings arrive faster than a busy server
// checks them, and at 10,000 clients on 2 cores most of a round's waited
// at once. A dealing whose shares are not all from its sender, with
// nonempty ciphertexts of one size and signatures of Ed25519's, is
// refused: it keeps its message, read as the same shares.
type dealing struct {
	round  uint32
	from   uint32
	values []byte
	n      int    // shares
	ct     int    // each share's ciphertext bytes
	recs   []byte // n records: to (4 bytes, little-endian), ciphertext, signature
	msg    *pb.SecAggShares
}

// newDealing reads client from's dealing m.
func newDealing(from uint32, m *pb.SecAggShares) *dealing {
	shares := m.GetShares()
	d := &dealing{round: m.GetRound(), from: from, n: len(shares)}
	if len(shares) > 0 {
		d.ct = len(shares[0].GetCiphertext())
	}
	for _, sh := range shares {
		if sh.GetFrom() != from || d.ct == 0 || len(sh.GetCiphertext()) != d.ct || len(sh.GetSignature()) != ed25519.SignatureSize {
			d.values, d.msg = m.GetValues(), m
			return d
		}
	}
	rec := 4 + d.ct + ed25519.SignatureSize
	buf := make([]byte, 0, len(m.GetValues())+len(shares)*rec)
	buf = append(buf, m.GetValues()...)
	if m.GetValues() != nil {
		d.values = buf[:len(buf):len(buf)]
	}
	for _, sh := range shares {
		buf = binary.LittleEndian.AppendUint32(buf, sh.GetTo())
		buf = append(append(buf, sh.GetCiphertext()...), sh.GetSignature()...)
	}
	d.recs = buf[len(d.values):]
	return d
}

// share is the k-th share, as the message listed them.
func (d *dealing) share(k int) (from, to uint32, ciphertext, signature []byte) {
	if d.msg != nil {
		sh := d.msg.GetShares()[k]
		return sh.GetFrom(), sh.GetTo(), sh.GetCiphertext(), sh.GetSignature()
	}
	rec := 4 + d.ct + ed25519.SignatureSize
	r := d.recs[k*rec : (k+1)*rec : (k+1)*rec]
	return d.from, binary.LittleEndian.Uint32(r), r[4 : 4+d.ct : 4+d.ct], r[4+d.ct:]
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
func (s *Server) checkDealing(sr *secureRound, id uint32, d *dealing) *checkedDealing {
	out := &checkedDealing{sr: sr}
	fail := func(err error) *checkedDealing { out.err = err; return out }
	round := d.round
	values, err := sr.srv.CheckDealing(uint64(id), d.values)
	if err != nil {
		return fail(err)
	}
	hv, err := sr.srv.HolderValues(uint64(id), values)
	if err != nil {
		return fail(err)
	}
	seen := map[uint32]bool{}
	for k := range d.n {
		from, to, ct, sig := d.share(k)
		switch {
		case from != id:
			return fail(fmt.Errorf("round %d: a share from %d", round, from))
		case seen[to]:
			return fail(fmt.Errorf("round %d: two shares for %d", round, to))
		case hv[uint64(to)] == nil:
			return fail(fmt.Errorf("round %d: a share for %d, not a holder of its", round, to))
		}
		seen[to] = true
		if err := verify(sr.identity[id], shareSigned(s.runID, round, from, to, ct, hv[uint64(to)]), sig); err != nil {
			return fail(fmt.Errorf("round %d: its shares for %d: %w", round, to, err))
		}
	}
	out.values = values
	return out
}

// preDealing checks a dealing before handle takes the server's lock for
// it, when it is for the shares step under way: nil otherwise, and the
// step checks it under the lock as it does any message. At most
// cap(s.checks) dealings are checked at once, the others waiting in the
// order they came.
func (s *Server) preDealing(sess *session, d *dealing) *checkedDealing {
	s.checks <- struct{}{}
	defer func() { <-s.checks }()
	s.mu.Lock()
	var sr *secureRound
	if rd := s.round; rd != nil && rd.secure != nil && d.round == uint32(rd.plan.T) && rd.secure.step == secureShares {
		sr = rd.secure
	}
	s.mu.Unlock()
	if sr == nil {
		return nil
	}
	return s.checkDealing(sr, sess.id, d)
}

// secureStep checks and records one message; it returns the round the
// message names.
func (s *Server) secureStep(sess *session, m *pb.ClientMessage, d *dealing, pre *checkedDealing) (uint32, error) {
	rd := s.round
	var round uint32
	switch b := m.GetBody().(type) {
	case nil: // m is nil: a dealing
		round = d.round
	case *pb.ClientMessage_SecaggKeys:
		round = b.SecaggKeys.GetRound()
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
	case nil: // a dealing
		if sr.step != secureShares {
			return round, wrongStep("shares")
		}
		if pre == nil || pre.sr != sr {
			pre = s.checkDealing(sr, id, d)
		}
		if pre.err != nil {
			return round, pre.err
		}
		dl := secagg.Dealing{Values: pre.values, Sealed: make(map[uint64][]byte, d.n)}
		sigs := make(map[uint32][]byte, d.n)
		for k := range d.n {
			_, to, ct, sig := d.share(k)
			dl.Sealed[uint64(to)] = ct
			sigs[to] = sig
		}
		if err := sr.srv.AddShares(uint64(id), dl); err != nil {
			return round, err
		}
		for to, sig := range sigs {
			rec := secagg.GrowRecords(sr.signed[to], signedRecord, sr.srv.Degree())
			sr.signed[to] = append(binary.LittleEndian.AppendUint32(rec, id), sig...)
		}
		sr.dealt[id] = true
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
