package transport

import (
	"crypto/ed25519"
	"fmt"

	"google.golang.org/protobuf/proto"

	"github.com/fedpq/fedpq/corr"
	pb "github.com/fedpq/fedpq/transport/fedpqpb"
)

// Paired mechanisms need their clients to exchange key shares and sealed
// bits; the server relays them between the two partners of a pair, and
// tells a client to encode alone when its partner is gone.

// keySharesDue tells the partner of each client that sent no key share by
// the key-share deadline to encode alone, rather than wait for the round's
// deadline; a key share that comes later is refused. s.mu is held.
func (s *Server) keySharesDue(rd *serverRound) {
	for pos := range rd.plan.Clients {
		if rd.keyed[pos] || !rd.waiting(pos) {
			continue
		}
		if j := rd.plan.Pairing.Partner(pos); j >= 0 && rd.waiting(j) {
			rd.late[pos] = true
			s.log.Printf("round %d: no key share from client %d within %v; its partner %d encodes alone",
				rd.plan.T, rd.plan.Clients[pos], s.cfg.KeyShareTimeout, rd.plan.Clients[j])
			s.partnerGone(rd, pos)
		}
	}
}

// partnerGone tells the partner of the client at pos, if it still waits
// for it, that it will not pair this round. s.mu is held.
func (s *Server) partnerGone(rd *serverRound, pos int) {
	j := rd.plan.Pairing.Partner(pos)
	if j < 0 || !rd.waiting(j) {
		return
	}
	if p := s.sessions[uint32(rd.plan.Clients[j])]; p != nil {
		p.send(&pb.ServerMessage{Body: &pb.ServerMessage_PartnerGone{PartnerGone: &pb.PartnerGone{
			Round: uint32(rd.plan.T), Partner: uint32(rd.plan.Clients[pos]),
		}}})
	}
}

// relay forwards a key share or sealed bits from sess to its partner in
// the round under way. The server checks where it goes, not what it says:
// the partner checks the signature, or the seal.
//
// What it relays is bounded: per client and round one key share, of a
// public key's and a signature's size, and, in transfer mode, one sealed
// message of the size an honest leader seals.
func (s *Server) relay(sess *session, round, from, to uint32, m *pb.ServerMessage) error {
	rd := s.round
	if rd == nil || round != uint32(rd.plan.T) {
		return fmt.Errorf("a message for round %d, which is not under way", round)
	}
	pos, ok := rd.pos[sess.id]
	if !ok || from != sess.id {
		return fmt.Errorf("round %d: a message from client %d, which is not in the round as %d", round, sess.id, from)
	}
	j := rd.plan.Pairing.Partner(pos)
	if j < 0 || uint32(rd.plan.Clients[j]) != to {
		return fmt.Errorf("round %d: a message for client %d, which is not its partner", round, to)
	}
	if ks := m.GetPartnerKey(); ks != nil {
		switch {
		case rd.keyed[pos]:
			return fmt.Errorf("round %d: a second key share", round)
		case rd.late[pos]:
			return fmt.Errorf("round %d: a key share after the key-share deadline (its partner encodes alone)", round)
		case len(ks.GetPublicKey()) != corr.PublicKeyBytes || len(ks.GetSignature()) != ed25519.SignatureSize:
			return fmt.Errorf("round %d: a key share of %d and %d bytes, want a %d-byte key and a %d-byte signature",
				round, len(ks.GetPublicKey()), len(ks.GetSignature()), corr.PublicKeyBytes, ed25519.SignatureSize)
		}
		rd.keyed[pos] = true
	} else {
		c := m.GetPartnerSealed().GetCiphertext()
		switch {
		case s.sealed == 0:
			return fmt.Errorf("round %d: sealed bits, but the run does not transfer shared bits", round)
		case rd.sealed[pos]:
			return fmt.Errorf("round %d: sealed bits a second time", round)
		case len(c) != s.sealed:
			return fmt.Errorf("round %d: %d sealed bytes, want %d", round, len(c), s.sealed)
		}
		rd.sealed[pos] = true
	}
	if p := s.sessions[to]; p != nil && rd.waiting(j) {
		p.send(m)
		rd.setup += int64(proto.Size(m))
	}
	return nil
}
