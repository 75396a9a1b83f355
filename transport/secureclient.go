package transport

import (
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"errors"
	"fmt"
	"maps"
	"slices"
	"sync/atomic"

	"github.com/fedpq/fedpq/fl"
	"github.com/fedpq/fedpq/mech"
	"github.com/fedpq/fedpq/secagg"
	pb "github.com/fedpq/fedpq/transport/fedpqpb"
)

// ClientPolicy is what a client demands of a server before it takes part:
// its defence against a server that deviates from the protocol.
type ClientPolicy struct {
	// RequireSecure refuses a run without secure aggregation. A client of a
	// run whose configuration has it refuses a round without it in any case.
	RequireSecure bool
	// SecAgg is what a secure round's settings must meet (secagg.Policy):
	// the fraction of colluding clients they withstand, the fewest clients,
	// the widest field.
	SecAgg secagg.Policy
}

// DefaultClientPolicy: secure aggregation where the run has it, with
// secagg.DefaultPolicy.
var DefaultClientPolicy = ClientPolicy{SecAgg: secagg.DefaultPolicy}

// decline tells the server that the client takes no part in round t, and
// returns why as a badRound: the session goes on with the next round.
// reason is why in one word of declineReasons, for the metrics.
func (c *Client) decline(stream pb.Federation_SessionClient, t uint32, reason string, why error) error {
	c.cfg.Metrics.declined(reason)
	if err := stream.Send(&pb.ClientMessage{Body: &pb.ClientMessage_Decline{Decline: &pb.Decline{Round: t, Reason: why.Error()}}}); err != nil {
		return err
	}
	c.note(t, func(s *fleetStats) *atomic.Int64 { return &s.declined })
	return &badRound{fmt.Errorf("declined: %w", why)}
}

// secureParams checks a secure round's settings, before the client sends
// anything: the graph's seed must come from the run's beacon (so the server
// did not choose it), and the field width must be the one that holds the
// round's sum (a narrower one would wrap it, a wider one fl cannot pack).
// The policy's checks are secagg.NewClient's.
func (c *Client) secureParams(runID []byte, rs *pb.RoundStart) (secagg.Params, []uint64, error) {
	t, sa := rs.GetRound(), rs.GetSecagg()
	p := secagg.Params{Bits: int(sa.GetBits()), Degree: int(sa.GetDegree()), Threshold: int(sa.GetThreshold()), Round: uint64(t)}
	if len(sa.GetSeed()) != 32 || len(sa.GetBeacon()) != 32 {
		return p, nil, fmt.Errorf("a secure-aggregation seed of %d bytes and beacon of %d", len(sa.GetSeed()), len(sa.GetBeacon()))
	}
	ids := make([]uint64, len(sa.GetClients()))
	for i, k := range sa.GetClients() {
		ids[i] = uint64(k)
	}
	link := [32]byte(sa.GetBeacon())
	if !secagg.CheckLink(c.beacon, link, int(t)) {
		return p, nil, fmt.Errorf("round %d's beacon is not a link of the chain the server committed to", t)
	}
	if seed := secagg.SessionSeed(runID, uint64(t), ids, link); seed != [32]byte(sa.GetSeed()) {
		return p, nil, errors.New("the graph's seed does not derive from the round's beacon and clients")
	}
	p.Seed = [32]byte(sa.GetSeed())
	m, err := mech.IntegerOf(c.m)
	if err != nil {
		return p, nil, err
	}
	want, err := fl.SecureBits(m, len(ids))
	if err != nil {
		return p, nil, err
	}
	if p.Bits != want {
		return p, nil, fmt.Errorf("%d-bit fields; the sum of %d clients' fields takes %d", p.Bits, len(ids), want)
	}
	return p, ids, nil
}

// secureUpload is a client's side of a secure round, once it has encoded
// its payloads: one step of secagg's a message from the server, each a
// method of secureClientRound below. It returns a message of a later round if it
// read one.
func (c *Client) secureUpload(ctx context.Context, stream pb.Federation_SessionClient, in <-chan *pb.ServerMessage, runID []byte, rs *pb.RoundStart, payloads [][]byte, loss float64) (*pb.ServerMessage, error) {
	sr, err := c.newSecureClientRound(stream, runID, rs, payloads, loss)
	if err != nil {
		return nil, err
	}
	if err := sr.advertise(); err != nil {
		return nil, err
	}
	t := sr.t
	steps := []struct {
		want func(*pb.ServerMessage) bool
		do   func(*pb.ServerMessage) error
	}{
		{func(m *pb.ServerMessage) bool { return m.GetSecaggPeers().GetRound() == t }, sr.deal},
		{func(m *pb.ServerMessage) bool { return m.GetSecaggInbox().GetRound() == t }, sr.check},
		// Disputes come only to a dealer complained of; partners follow.
		{func(m *pb.ServerMessage) bool {
			return m.GetSecaggDisputes().GetRound() == t || m.GetSecaggPartners().GetRound() == t
		}, sr.disclose},
		{func(m *pb.ServerMessage) bool { return m.GetSecaggPartners().GetRound() == t }, sr.mask},
		{func(m *pb.ServerMessage) bool { return m.GetSecaggUnmask().GetRound() == t }, sr.consent},
		{func(m *pb.ServerMessage) bool { return m.GetSecaggConsents().GetRound() == t }, sr.reveal},
	}
	for _, step := range steps {
		m := sr.pending
		sr.pending = nil
		if m == nil {
			var next *pb.ServerMessage
			if m, next, err = c.await(ctx, in, t, step.want); m == nil {
				return next, err
			}
		}
		if err := step.do(m); errors.Is(err, errLeft) {
			return nil, nil
		} else if err != nil {
			return nil, err
		}
	}
	return nil, nil
}

// errLeft ends a client's part in a secure round, which it has logged why.
var errLeft = errors.New("left the secure round")

// secureClientRound is a client's side of one secure round.
type secureClientRound struct {
	c          *Client
	stream     pb.Federation_SessionClient
	runID      []byte
	t, self    uint32
	bits       int
	cl         *secagg.Client
	x          []uint64 // the fields it masks
	loss       float64
	identities map[uint32]ed25519.PublicKey // its neighbours', from their keys
	pending    *pb.ServerMessage            // read by one step, for the next
	digest     [32]byte                     // of the request it consented to
}

// newSecureClientRound checks the round's settings against the client's policy
// (declining the round if they fail) and turns its payloads into fields.
func (c *Client) newSecureClientRound(stream pb.Federation_SessionClient, runID []byte, rs *pb.RoundStart, payloads [][]byte, loss float64) (*secureClientRound, error) {
	t, self := rs.GetRound(), uint32(c.cfg.ID)
	p, ids, err := c.secureParams(runID, rs)
	if err != nil {
		return nil, c.decline(stream, t, "policy", err)
	}
	sr := &secureClientRound{c: c, stream: stream, runID: runID, t: t, self: self, bits: p.Bits, loss: loss}
	c.busy(func() { sr.cl, err = secagg.NewClient(p, c.policy.SecAgg, uint64(self), ids, rand.Reader) })
	if err != nil {
		return nil, c.decline(stream, t, "policy", err)
	}
	m, err := mech.IntegerOf(c.m)
	if err != nil {
		return nil, &setupError{err}
	}
	if sr.x, err = fl.Fields(m, payloads, c.sizes()); err != nil {
		return nil, &badRound{err}
	}
	return sr, nil
}

func (sr *secureClientRound) send(m *pb.ClientMessage) error { return sr.stream.Send(m) }

// advertise is step 0: its keys, signed.
func (sr *secureClientRound) advertise() error {
	adv := sr.cl.Keys()
	keys := &pb.SecAggKeys{Round: sr.t, Client: sr.self, C: adv.C, S: adv.S}
	keys.Signature = ed25519.Sign(sr.c.cfg.Key, secaggKeysSigned(sr.runID, keys))
	return sr.send(&pb.ClientMessage{Body: &pb.ClientMessage_SecaggKeys{SecaggKeys: keys}})
}

// deal is step 1: it checks its neighbours' keys and deals its shares, each
// holder's signed.
func (sr *secureClientRound) deal(m *pb.ServerMessage) error {
	c, t := sr.c, sr.t
	var (
		peers map[uint64]secagg.Advertised
		d     secagg.Dealing
		err   error
	)
	shares := &pb.SecAggShares{Round: t}
	c.busy(func() {
		peers, sr.identities = c.peers(t, sr.runID, m.GetSecaggPeers())
		if d, err = sr.cl.Share(peers); err != nil {
			return
		}
		shares.Values = d.Values.Bytes()
		for _, to := range slices.Sorted(maps.Keys(d.Sealed)) {
			sh := &pb.SecAggShare{From: sr.self, To: uint32(to), Ciphertext: d.Sealed[to]}
			sh.Signature = ed25519.Sign(c.cfg.Key, secaggShareSigned(sr.runID, t, sh, sr.cl.HolderValues(to)))
			shares.Shares = append(shares.Shares, sh)
		}
	})
	if err != nil {
		return &badRound{err}
	}
	if r := sr.cl.Rejected(); len(r) > 0 {
		c.log.Printf("round %d: left out neighbours %v, whose keys are not valid", t, r)
	}
	if err := sr.send(&pb.ClientMessage{Body: &pb.ClientMessage_SecaggShares{SecaggShares: shares}}); err != nil {
		return err
	}
	c.routine("round %d: dealt its shares to %d neighbours", t, len(shares.Shares))
	return nil
}

// check is step 2: it checks the shares dealt to it and sends its
// complaints, signed.
func (sr *secureClientRound) check(m *pb.ServerMessage) error {
	c, t := sr.c, sr.t
	var (
		complaints []uint64
		err        error
	)
	c.busy(func() {
		inbox := map[uint64]secagg.Delivery{}
		for _, sh := range m.GetSecaggInbox().GetShares() {
			if sh.GetTo() != sr.self {
				continue
			}
			// A dealing its dealer did not sign was altered on the way:
			// complaining of it would make an honest dealer disclose this
			// client's shares to the server.
			if err := verify(sr.identities[sh.GetFrom()], secaggShareSigned(sr.runID, t, sh, sh.GetValues()), sh.GetSignature()); err != nil {
				c.log.Printf("round %d: the dealing relayed from %d is not the one it signed (%v): left out, not complained of", t, sh.GetFrom(), err)
				continue
			}
			inbox[uint64(sh.GetFrom())] = secagg.Delivery{Values: sh.GetValues(), Sealed: sh.GetCiphertext()}
		}
		complaints, err = sr.cl.Check(inbox)
	})
	if err != nil {
		return &badRound{err}
	}
	check := &pb.SecAggCheck{Round: t, Client: sr.self}
	for _, j := range complaints {
		check.Complaints = append(check.Complaints, uint32(j))
	}
	check.Signature = ed25519.Sign(c.cfg.Key, secaggCheckSigned(sr.runID, check))
	if len(complaints) > 0 {
		c.log.Printf("round %d: the shares of %v are wrong", t, complaints)
	}
	return sr.send(&pb.ClientMessage{Body: &pb.ClientMessage_SecaggCheck{SecaggCheck: check}})
}

// disclose is step 2b, for a dealer complained of: it checks each relayed
// complaint was signed by its holder and names the client, and sends the
// disputed shares. A client that will not disclose them (more complaints
// than its policy allows, see secagg.Client.Disclose) leaves the round:
// the server leaves it out before masking. Partners, which come instead
// when no one complained, are for the next step.
func (sr *secureClientRound) disclose(m *pb.ServerMessage) error {
	c, t := sr.c, sr.t
	ds := m.GetSecaggDisputes()
	if ds == nil {
		sr.pending = m
		return nil
	}
	var complainers []uint64
	for i, check := range ds.GetChecks() {
		h := check.GetClient()
		if err := verify(c.identity(h, sr.identities, ds.GetIdentities(), i), secaggCheckSigned(sr.runID, check), check.GetSignature()); err != nil || check.GetRound() != t || !slices.Contains(check.GetComplaints(), sr.self) {
			c.log.Printf("round %d: a complaint of its shares from %d that %d did not sign: ignored", t, h, h)
			continue
		}
		complainers = append(complainers, uint64(h))
	}
	slices.Sort(complainers)
	complainers = slices.Compact(complainers)
	d, err := sr.cl.Disclose(complainers)
	if err != nil {
		c.log.Printf("round %d: %v; it leaves the round", t, err)
		return errLeft
	}
	out := &pb.SecAggDisclosure{Round: t}
	for _, h := range complainers {
		out.Shares = append(out.Shares, &pb.SecAggDisclosed{Holder: uint32(h), B: d[h][0], S: d[h][1]})
	}
	c.log.Printf("round %d: %d holders complained of its shares; it disclosed theirs", t, len(complainers))
	return sr.send(&pb.ClientMessage{Body: &pb.ClientMessage_SecaggDisclosure{SecaggDisclosure: out}})
}

// mask is step 3: it records the round as answered and uploads its masked
// fields.
func (sr *secureClientRound) mask(m *pb.ServerMessage) error {
	c, t := sr.c, sr.t
	var partners []uint64
	for _, j := range m.GetSecaggPartners().GetPartners() {
		partners = append(partners, uint64(j))
	}
	var (
		y   []uint64
		err error
	)
	c.busy(func() { y, err = sr.cl.Mask(sr.x, partners) })
	if err != nil {
		return c.decline(sr.stream, t, "masking", err)
	}
	// The masked upload is the first message that depends on the
	// client's data: the round is recorded as answered before it leaves.
	if err := c.state.answer(sr.runID, t); err != nil {
		return &setupError{err}
	}
	if err := c.upload(sr.stream, &pb.Upload{Round: t, Masked: fl.PackFields(y, sr.bits), Loss: sr.loss}); err != nil {
		return err
	}
	c.note(t, func(s *fleetStats) *atomic.Int64 { return &s.uploaded })
	c.routine("round %d: uploaded its masked fields (%d bits each), masked with %d partners", t, sr.bits, len(partners))
	return nil
}

// consent is step 4: it checks the unmask request and signs it.
func (sr *secureClientRound) consent(m *pb.ServerMessage) error {
	var req secagg.Request
	for _, id := range m.GetSecaggUnmask().GetSurvivors() {
		req.Survivors = append(req.Survivors, uint64(id))
	}
	for _, id := range m.GetSecaggUnmask().GetDropped() {
		req.Dropped = append(req.Dropped, uint64(id))
	}
	var err error
	if sr.digest, err = sr.cl.Consent(req); err != nil {
		// A request this client must not answer, such as one that drops
		// the partners it masked with: it reveals nothing.
		sr.c.log.Printf("round %d: %v", sr.t, err)
		return errLeft
	}
	return sr.send(&pb.ClientMessage{Body: &pb.ClientMessage_SecaggConsent{SecaggConsent: &pb.SecAggConsent{
		Round: sr.t, Signature: ed25519.Sign(sr.c.cfg.Key, secaggConsentSigned(sr.runID, sr.t, sr.digest)),
	}}})
}

// reveal is step 5: it checks the consents relayed to it and reveals the
// shares they allow.
func (sr *secureClientRound) reveal(m *pb.ServerMessage) error {
	c, t := sr.c, sr.t
	consenting := []uint64{uint64(sr.self)}
	cs := m.GetSecaggConsents()
	var (
		r   secagg.Reveal
		err error
	)
	c.busy(func() {
		for i, j := range cs.GetClients() {
			if i >= len(cs.GetSignatures()) || j == sr.self {
				continue
			}
			if err := verify(c.identity(j, sr.identities, cs.GetIdentities(), i), secaggConsentSigned(sr.runID, t, sr.digest), cs.GetSignatures()[i]); err == nil {
				consenting = append(consenting, uint64(j))
			}
		}
		r, err = sr.cl.Unmask(consenting)
	})
	if err != nil {
		c.log.Printf("round %d: %v", t, err)
		return errLeft
	}
	rv := &pb.SecAggReveal{Round: t}
	for _, o := range slices.Sorted(maps.Keys(r.Self)) {
		rv.Self = append(rv.Self, &pb.SecAggSecret{Owner: uint32(o), Share: r.Self[o]})
	}
	for _, o := range slices.Sorted(maps.Keys(r.Pair)) {
		rv.Pair = append(rv.Pair, &pb.SecAggSecret{Owner: uint32(o), Share: r.Pair[o]})
	}
	if err := sr.send(&pb.ClientMessage{Body: &pb.ClientMessage_SecaggReveal{SecaggReveal: rv}}); err != nil {
		return err
	}
	c.routine("round %d: %d holders consented; revealed its shares for %d survivors and %d dropped clients", t, len(consenting), len(r.Self), len(r.Pair))
	return nil
}

// identity is the identity that client j's signature must verify under:
// from the roster where the client has one; else a neighbour's, as relayed
// with its keys; else as relayed with the signature (relayed[i]).
func (c *Client) identity(j uint32, neighbours map[uint32]ed25519.PublicKey, relayed [][]byte, i int) ed25519.PublicKey {
	if c.cfg.Roster != nil {
		return c.cfg.Roster[j]
	}
	if id, ok := neighbours[j]; ok {
		return id
	}
	if i < len(relayed) {
		return relayed[i]
	}
	return nil
}

// peers checks the relayed keys of the client's neighbours: each signed by
// the neighbour's identity, from the roster where the client has one, else
// as the server relays it. It returns the keys that pass, and the
// identities that consents will be checked against.
func (c *Client) peers(t uint32, runID []byte, pm *pb.SecAggPeers) (map[uint64]secagg.Advertised, map[uint32]ed25519.PublicKey) {
	keys := map[uint64]secagg.Advertised{}
	identities := map[uint32]ed25519.PublicKey{}
	for i, k := range pm.GetKeys() {
		var identity ed25519.PublicKey
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
		keys[uint64(k.GetClient())] = secagg.Advertised{C: k.GetC(), S: k.GetS()}
		identities[k.GetClient()] = identity
	}
	return keys, identities
}

// await reads messages until one of round t that want accepts, and
// returns it; or, if the round ends first (the next RoundStart, the end of
// the run), that message as next.
func (c *Client) await(ctx context.Context, in <-chan *pb.ServerMessage, t uint32, want func(*pb.ServerMessage) bool) (m, next *pb.ServerMessage, err error) {
	for {
		select {
		case m, ok := <-in:
			if !ok {
				return nil, nil, fmt.Errorf("%w during secure aggregation", errConnectionLost)
			}
			switch b := m.GetBody().(type) {
			case *pb.ServerMessage_RoundStart, *pb.ServerMessage_Finished:
				c.log.Printf("round %d: ended before its secure aggregation did", t)
				return nil, m, nil
			case *pb.ServerMessage_Receipt:
				c.receipt(b.Receipt)
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

// sizes is the number of parameters of each vector the client encodes:
// each of the model's tensors, or DP-FedAvg's one (fl.Config.Encoded).
func (c *Client) sizes() []int {
	n := make([]int, len(c.specs))
	for i, s := range c.specs {
		n[i] = s.Size()
	}
	return c.su.Engine.Encoded(n)
}
