package transport

import (
	"context"
	"crypto/ed25519"
	crand "crypto/rand"
	"errors"
	"fmt"
	"io"
	"log"
	"maps"
	"net"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/cloudflare/circl/group"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/protobuf/proto"

	"github.com/fedpq/fedpq/experiment"
	"github.com/fedpq/fedpq/fl"
	"github.com/fedpq/fedpq/report"
	"github.com/fedpq/fedpq/secagg"
	pb "github.com/fedpq/fedpq/transport/fedpqpb"
)

// BadSignature is a deviation only a deployment has: keys whose signature
// does not verify under the client's enrolled identity.
const badSignature = secagg.Behaviour(-1)

// badShareSignature deals shares whose signatures do not verify under the
// dealer's identity: the server refuses the dealing, since a holder would
// ignore such shares without complaining and still be counted as holding
// them.
const badShareSignature = secagg.Behaviour(-2)

// hostile plays a client of secure rounds by hand, over the wire, with an
// ldpq payload of zeros (every bit 0): each round it behaves as the next
// of its behaviours says, leaving and joining again where a behaviour
// leaves. It runs beside the honest clients (each step waits for every
// client), so it returns its failure rather than end the test.
type hostile struct {
	t      *testing.T
	addr   string
	id, n  uint32
	key    ed25519.PrivateKey
	r      *raw
	params int           // the model's parameters: an ldpq field each
	hold   chan struct{} // if set, closed before it sends its masked upload
	// gone: a client that leaves does not come back (the run's last round:
	// the server may have finished by then).
	gone bool
}

func newHostile(t *testing.T, addr string, id, n uint32, params int) (*hostile, error) {
	h := &hostile{t: t, addr: addr, id: id, n: n, key: NewKey(), params: params}
	return h, h.rejoin()
}

// rejoin opens a new session, once a second has passed since the last
// join of the id (the server's limit).
func (h *hostile) rejoin() error {
	for try := 0; ; try++ {
		r := dial(h.t, h.addr)
		r.key = h.key
		err := r.join(h.id, h.n, token)
		if err == nil {
			h.r = r
			return nil
		}
		if try == 10 {
			return err
		}
		time.Sleep(300 * time.Millisecond)
	}
}

// next reads messages until one that want accepts.
func (h *hostile) next(want func(*pb.ServerMessage) bool) (*pb.ServerMessage, error) {
	for {
		m, err := h.r.stream.Recv()
		if err != nil || want(m) {
			return m, err
		}
	}
}

func (h *hostile) send(m *pb.ClientMessage) error { return h.r.stream.Send(m) }

// leave ends the session and joins again for the next round.
func (h *hostile) leave() error {
	h.r.stream.CloseSend()
	if h.gone {
		return nil
	}
	return h.rejoin()
}

// play takes part in len(bs) rounds, round k behaving as bs[k].
func (h *hostile) play(bs []secagg.Behaviour) error {
	for k, b := range bs {
		if err := h.round(b); err != nil {
			return fmt.Errorf("round %d (%v): %w", k+1, b, err)
		}
	}
	return nil
}

func (h *hostile) round(b secagg.Behaviour) error {
	m, err := h.next(func(m *pb.ServerMessage) bool { return m.GetRoundStart() != nil })
	if err != nil {
		return err
	}
	rs := m.GetRoundStart()
	t, sa := rs.GetRound(), rs.GetSecagg()
	if sa == nil {
		return errors.New("a secure run's RoundStart without its secure-aggregation settings")
	}
	p := secagg.Params{Bits: int(sa.GetBits()), Degree: int(sa.GetDegree()), Threshold: int(sa.GetThreshold()), Round: uint64(t), Seed: [32]byte(sa.GetSeed())}
	var ids []uint64
	for _, k := range sa.GetClients() {
		ids = append(ids, uint64(k))
	}
	pol := secagg.Policy{MinClients: 1, MaxBits: 64}
	cl, err := secagg.NewClient(p, pol, uint64(h.id), ids, crand.Reader)
	if err != nil {
		return err
	}
	cl.Deviate(b)
	adv := cl.Keys()
	if b == secagg.BadKeys {
		adv = secagg.Advertised{C: make([]byte, 32), S: make([]byte, 32)}
	}
	keys := &pb.SecAggKeys{Round: t, Client: h.id, C: adv.C, S: adv.S}
	keys.Signature = ed25519.Sign(h.key, secaggKeysSigned(h.r.hello.GetRunId(), keys))
	if b == badSignature {
		keys.Signature = ed25519.Sign(NewKey(), secaggKeysSigned(h.r.hello.GetRunId(), keys))
	}
	if err := h.send(&pb.ClientMessage{Body: &pb.ClientMessage_SecaggKeys{SecaggKeys: keys}}); err != nil {
		return err
	}
	if b == secagg.LeaveAfterKeys || b == secagg.BadKeys || b == badSignature {
		return h.leave()
	}
	if m, err = h.next(func(m *pb.ServerMessage) bool { return m.GetSecaggPeers() != nil }); err != nil {
		return err
	}
	peers := map[uint64]secagg.Advertised{}
	for _, k := range m.GetSecaggPeers().GetKeys() {
		peers[uint64(k.GetClient())] = secagg.Advertised{C: k.GetC(), S: k.GetS()}
	}
	d, err := cl.Share(peers)
	if err != nil {
		return err
	}
	shares := &pb.SecAggShares{Round: t, Values: d.Values.Bytes()}
	for k, to := range slices.Sorted(maps.Keys(d.Sealed)) {
		ct := d.Sealed[to]
		switch b {
		case secagg.GarbageShares:
			crand.Read(ct)
		case secagg.ShortShares:
			ct = ct[1:]
		}
		if b == secagg.OmitShares && k >= int(sa.GetThreshold())-1 {
			break
		}
		sh := &pb.SecAggShare{From: h.id, To: uint32(to), Ciphertext: ct}
		signer := h.key
		if b == badShareSignature {
			signer = NewKey()
		}
		sh.Signature = ed25519.Sign(signer, secaggShareSigned(h.r.hello.GetRunId(), t, sh, cl.HolderValues(to)))
		shares.Shares = append(shares.Shares, sh)
	}
	if b == secagg.InconsistentValues {
		g, _ := group.Ristretto255.Generator().MarshalBinaryCompress()
		copy(shares.Values[len(shares.Values)-32:], g)
	}
	if err := h.send(&pb.ClientMessage{Body: &pb.ClientMessage_SecaggShares{SecaggShares: shares}}); err != nil {
		return err
	}
	switch b {
	case secagg.LeaveAfterShares, secagg.ShortShares, secagg.InconsistentValues, secagg.OmitShares, badShareSignature:
		return h.leave()
	}
	if m, err = h.next(func(m *pb.ServerMessage) bool { return m.GetSecaggInbox() != nil }); err != nil {
		return err
	}
	inbox := map[uint64]secagg.Delivery{}
	for _, sh := range m.GetSecaggInbox().GetShares() {
		inbox[uint64(sh.GetFrom())] = secagg.Delivery{Values: sh.GetValues(), Sealed: sh.GetCiphertext()}
	}
	complaints, err := cl.Check(inbox)
	if err != nil {
		return err
	}
	if b == secagg.FalseComplaints {
		complaints = slices.Sorted(maps.Keys(inbox))
	}
	check := &pb.SecAggCheck{Round: t, Client: h.id}
	for _, j := range complaints {
		check.Complaints = append(check.Complaints, uint32(j))
	}
	check.Signature = ed25519.Sign(h.key, secaggCheckSigned(h.r.hello.GetRunId(), check))
	if err := h.send(&pb.ClientMessage{Body: &pb.ClientMessage_SecaggCheck{SecaggCheck: check}}); err != nil {
		return err
	}
	switch b {
	case secagg.LeaveAfterCheck, secagg.GarbageShares, secagg.WrongShares, secagg.HostileDealer:
		return h.leave()
	}
	if m, err = h.next(func(m *pb.ServerMessage) bool { return m.GetSecaggPartners() != nil || m.GetSecaggDisputes() != nil }); err != nil {
		return err
	}
	if ds := m.GetSecaggDisputes(); ds != nil {
		var holders []uint64
		for _, c := range ds.GetChecks() {
			holders = append(holders, uint64(c.GetClient()))
		}
		disclosed, err := cl.Disclose(holders)
		if err != nil {
			return err
		}
		dm := &pb.SecAggDisclosure{Round: t}
		for _, hd := range holders {
			sh := disclosed[hd]
			if b == secagg.WrongDisclosure {
				sh[0], sh[1] = sh[1], sh[0]
			}
			dm.Shares = append(dm.Shares, &pb.SecAggDisclosed{Holder: uint32(hd), B: sh[0], S: sh[1]})
		}
		if err := h.send(&pb.ClientMessage{Body: &pb.ClientMessage_SecaggDisclosure{SecaggDisclosure: dm}}); err != nil {
			return err
		}
		if b == secagg.WrongDisclosure {
			return h.leave()
		}
		if m, err = h.next(func(m *pb.ServerMessage) bool { return m.GetSecaggPartners() != nil }); err != nil {
			return err
		}
	}
	var partners []uint64
	for _, j := range m.GetSecaggPartners().GetPartners() {
		partners = append(partners, uint64(j))
	}
	y, err := cl.Mask(make([]uint64, h.params), partners)
	if err != nil {
		return err
	}
	if b == secagg.ShortMasked {
		y = y[:len(y)-8]
	}
	if h.hold != nil {
		<-h.hold
	}
	if err := h.send(&pb.ClientMessage{Body: &pb.ClientMessage_Upload{Upload: &pb.Upload{Round: t, Masked: fl.PackFields(y, p.Bits), Loss: 0.5}}}); err != nil {
		return err
	}
	if m, err = h.next(func(m *pb.ServerMessage) bool { return m.GetReceipt() != nil }); err != nil {
		return err
	}
	if accepted := m.GetReceipt().GetAccepted(); accepted != (b != secagg.ShortMasked) {
		return fmt.Errorf("masked upload accepted %v: %s", accepted, m.GetReceipt().GetError())
	}
	if b == secagg.LeaveAfterMask || b == secagg.ShortMasked || b == secagg.DiscloseThenLeave {
		return h.leave()
	}
	if m, err = h.next(func(m *pb.ServerMessage) bool { return m.GetSecaggUnmask() != nil }); err != nil {
		return err
	}
	var req secagg.Request
	for _, j := range m.GetSecaggUnmask().GetSurvivors() {
		req.Survivors = append(req.Survivors, uint64(j))
	}
	for _, j := range m.GetSecaggUnmask().GetDropped() {
		req.Dropped = append(req.Dropped, uint64(j))
	}
	digest, err := cl.Consent(req)
	if err != nil {
		return err
	}
	if err := h.send(&pb.ClientMessage{Body: &pb.ClientMessage_SecaggConsent{SecaggConsent: &pb.SecAggConsent{
		Round: t, Signature: ed25519.Sign(h.key, secaggConsentSigned(h.r.hello.GetRunId(), t, digest)),
	}}}); err != nil {
		return err
	}
	if m, err = h.next(func(m *pb.ServerMessage) bool { return m.GetSecaggConsents() != nil }); err != nil {
		return err
	}
	var consenting []uint64
	for _, j := range m.GetSecaggConsents().GetClients() {
		consenting = append(consenting, uint64(j))
	}
	r, err := cl.Unmask(consenting)
	if err != nil {
		return err
	}
	rv := &pb.SecAggReveal{Round: t}
	for _, o := range slices.Sorted(maps.Keys(r.Self)) {
		share := r.Self[o]
		switch b {
		case secagg.WrongReveal:
			share = slices.Clone(share)
			share[0] ^= 1
		case secagg.GarbageReveal:
			share = make([]byte, 32)
			share[31] = 0xff
		}
		rv.Self = append(rv.Self, &pb.SecAggSecret{Owner: uint32(o), Share: share})
	}
	for _, o := range slices.Sorted(maps.Keys(r.Pair)) {
		rv.Pair = append(rv.Pair, &pb.SecAggSecret{Owner: uint32(o), Share: r.Pair[o]})
	}
	return h.send(&pb.ClientMessage{Body: &pb.ClientMessage_SecaggReveal{SecaggReveal: rv}})
}

// deployedBehaviours is every deviation a client can send over the wire
// (a commitment to another mask key than advertised cannot be: the server
// takes S(0) from the advertised key).
func deployedBehaviours() []secagg.Behaviour {
	var bs []secagg.Behaviour
	for _, b := range secagg.Behaviours {
		if b != secagg.ForeignCommitments {
			bs = append(bs, b)
		}
	}
	return append(bs, badSignature, badShareSignature)
}

// TestSecureBehaviours: a deployed secure run of ldpq with one hostile
// client, which in each round deviates from the protocol in another way
// (every behaviour of secagg.Run, and keys with a bad signature), among 4
// and 79 honest client processes: on the complete graph of 5 and the
// sparse graph of 80. Every round counts every honest upload, and the
// hostile one exactly when the protocol can still use it; no round is
// discarded or waits out a step's deadline.
func TestSecureBehaviours(t *testing.T) {
	for _, n := range []int{5, 80} {
		t.Run(fmt.Sprintf("n%d", n), func(t *testing.T) {
			bs := deployedBehaviours()
			c := runConfig(t, "ldpq", n, len(bs))
			c.Weighting, c.SecureAggregation = "mean", true
			ts := serve(t, ServerConfig{Run: c, KeyShareTimeout: 20 * time.Second, RoundTimeout: 2 * time.Minute}, "127.0.0.1:0")
			// Client 0 is hostile: a survivor's secret is rebuilt from its
			// holders in id order, so its wrong shares are read first.
			h, err := newHostile(t, ts.addr, 0, uint32(n), ts.srv.su.Model.NumParams())
			if err != nil {
				t.Fatal(err)
			}
			var honest []*testClient
			for k := 1; k < n; k++ {
				honest = append(honest, join(t, context.Background(), ClientConfig{Server: ts.addr, ID: k, Clients: n}))
			}
			start := time.Now()
			errc := make(chan error, 1)
			go func() { errc <- h.play(bs) }()
			ts.wait(t)
			for _, c := range honest {
				c.wait(t)
			}
			if err := <-errc; err != nil {
				t.Fatal(err)
			}
			run, err := report.ReadRun(c.Dir())
			if err != nil {
				t.Fatal(err)
			}
			for k, r := range run.Rounds {
				want := n - 1
				if bs[k].Counted() && bs[k] != badSignature && bs[k] != badShareSignature {
					want = n
				}
				if r.Clients != want || r.Discarded != "" {
					t.Errorf("round %d (%v): %d uploads, discarded %q; want %d", r.Round, bs[k], r.Clients, r.Discarded, want)
				}
			}
			if d := time.Since(start); d > time.Duration(len(bs))*20*time.Second {
				t.Errorf("%d rounds took %v: a step waited out its deadline", len(bs), d)
			}
			if !strings.Contains(ts.log.String(), "clients [0] revealed shares that do not match their commitments") {
				t.Error("the wrong shares revealed were not found")
			}
			if !strings.Contains(ts.log.String(), ": bad signature") || !strings.Contains(ts.log.String(), "its shares for") {
				t.Error("the dealing with badly signed shares was not refused for its signatures")
			}
		})
	}
}

// TestSecureReconnect: a client that loses its session after its masked
// upload and joins again, while another has yet to send its own, has lost
// its side of the protocol with its session: the round sums its upload
// without waiting for it in the later steps (neither the consent nor the
// unmask step waits out its 20 s deadline), and the server says so.
func TestSecureReconnect(t *testing.T) {
	const n = 5
	c := runConfig(t, "ldpq", n, 1)
	c.Weighting, c.SecureAggregation = "mean", true
	ts := serve(t, ServerConfig{Run: c, KeyShareTimeout: 20 * time.Second, RoundTimeout: 2 * time.Minute}, "127.0.0.1:0")
	rejoining, err := newHostile(t, ts.addr, 0, n, ts.srv.su.Model.NumParams())
	if err != nil {
		t.Fatal(err)
	}
	late, err := newHostile(t, ts.addr, 1, n, ts.srv.su.Model.NumParams())
	if err != nil {
		t.Fatal(err)
	}
	late.hold = make(chan struct{})
	var honest []*testClient
	for k := 2; k < n; k++ {
		honest = append(honest, join(t, context.Background(), ClientConfig{Server: ts.addr, ID: k, Clients: n}))
	}
	errc := make(chan error, 2)
	go func() {
		err := rejoining.play([]secagg.Behaviour{secagg.LeaveAfterMask})
		close(late.hold)
		errc <- err
	}()
	go func() { errc <- late.play([]secagg.Behaviour{secagg.Honest}) }()
	ts.wait(t)
	for _, h := range honest {
		h.wait(t)
	}
	for range 2 {
		if err := <-errc; err != nil {
			t.Fatal(err)
		}
	}
	steps := regexp.MustCompile(`secagg_consent (\S+), secagg_unmask (\S+),`).FindStringSubmatch(ts.log.String())
	if steps == nil {
		t.Fatalf("no times of the consent and unmask steps in the server's log:\n%s", ts.log)
	}
	for _, step := range steps[1:] {
		if d, err := time.ParseDuration(step); err != nil || d >= 10*time.Second {
			t.Errorf("steps took %s: one waited for the client that joined again", steps[0])
		}
	}
	if got := fmt.Sprint(rounds(t, c.Dir())); got != "[5]" {
		t.Errorf("uploads per round %s, want [5]", got)
	}
	if want := "round 1: client 0 reconnected during secure aggregation (step secagg_masked); its masked upload is summed"; !strings.Contains(ts.log.String(), want) {
		t.Errorf("no %q in the server's log:\n%s", want, ts.log)
	}
}

// TestSecureDeployment: a server and 8 clients run a secure round of
// ldpq, twice under one configuration: one run id, so each honest client
// sends the same message both times. In the first, client 6 leaves after
// it checked its shares, and client 7 after its masked upload and before
// it answers the unmask request; in the second, 6 leaves after its keys
// and 7 stays. Both end with the exact sum of the same 7 uploads: the same
// model, bit for bit, from masks drawn afresh.
func TestSecureDeployment(t *testing.T) {
	c := runConfig(t, "ldpq", 8, 1)
	c.Weighting, c.SecureAggregation = "mean", true
	model := func(six, seven secagg.Behaviour, dropped int) [32]byte {
		if err := os.RemoveAll(c.Dir()); err != nil { // the same directory: the same configuration
			t.Fatal(err)
		}
		ts := serve(t, ServerConfig{Run: c, KeyShareTimeout: 10 * time.Second}, "127.0.0.1:0")
		errc := make(chan error, 2)
		for _, hb := range []struct {
			id uint32
			b  secagg.Behaviour
		}{{6, six}, {7, seven}} {
			h, err := newHostile(t, ts.addr, hb.id, 8, ts.srv.su.Model.NumParams())
			if err != nil {
				t.Fatal(err)
			}
			go func() { errc <- h.play([]secagg.Behaviour{hb.b}) }()
		}
		var honest []*testClient
		for k := range 6 {
			honest = append(honest, join(t, context.Background(), ClientConfig{Server: ts.addr, ID: k, Clients: 8}))
		}
		for range 2 {
			if err := <-errc; err != nil {
				t.Fatal(err)
			}
		}
		sum := ts.wait(t)
		for _, h := range honest {
			h.wait(t)
		}
		if got := fmt.Sprint(rounds(t, c.Dir())); got != "[7]" || sum.Rounds != 1 {
			t.Errorf("6 %v, 7 %v: uploads per round %s, want [7]", six, seven, got)
		}
		if want := fmt.Sprintf("unmasking the sum of 7 clients' uploads; %d dropped after sharing their keys", dropped); !strings.Contains(ts.log.String(), want) {
			t.Errorf("6 %v, 7 %v: the server did not log %q:\n%s", six, seven, want, ts.log)
		}
		st, err := fl.LoadState(c.Dir() + "/" + experiment.CheckpointFile)
		if err != nil {
			t.Fatal(err)
		}
		return fl.Hash(st.Global)
	}
	if model(secagg.LeaveAfterCheck, secagg.LeaveAfterMask, 1) != model(secagg.LeaveAfterKeys, secagg.Honest, 0) {
		t.Error("the round with departures ends with another model than the round without them")
	}
}

// scripted is a server that deviates from the protocol as a test says: each
// session gets a Hello (the real run's, with its beacon unless hello
// changes it), a Welcome, one RoundStart, and then Finished once the
// client has answered it. It records the kind of the client's answer.
type scripted struct {
	pb.UnimplementedFederationServer
	hello   *pb.Hello
	start   *pb.RoundStart
	answers chan string
}

func (s *scripted) Session(stream pb.Federation_SessionServer) error {
	if err := stream.Send(&pb.ServerMessage{Body: &pb.ServerMessage_Hello{Hello: s.hello}}); err != nil {
		return err
	}
	if _, err := stream.Recv(); err != nil {
		return err
	}
	stream.Send(&pb.ServerMessage{Body: &pb.ServerMessage_Welcome{Welcome: &pb.Welcome{}}})
	stream.Send(&pb.ServerMessage{Body: &pb.ServerMessage_RoundStart{RoundStart: s.start}})
	for {
		m, err := stream.Recv()
		if err != nil {
			return err
		}
		var answer string
		switch b := m.GetBody().(type) {
		case *pb.ClientMessage_Decline:
			answer = "declined: " + b.Decline.GetReason()
		case *pb.ClientMessage_SecaggKeys:
			answer = "keys"
		case *pb.ClientMessage_Upload:
			answer = "upload"
		default:
			continue
		}
		s.answers <- answer
		return stream.Send(&pb.ServerMessage{Body: &pb.ServerMessage_Finished{Finished: &pb.Finished{Rounds: 1}}})
	}
}

// TestClientPolicy: a client holds a server that deviates to its policy.
// The honest round's settings get its keys; each deviation gets a decline
// naming it, before the client sends anything of the round: a threshold of
// 1 or of half the holders, a round of the client alone, fields wider than
// fl packs or narrower than the sum, a graph seed the server chose, a
// beacon that is not the committed chain's, a secure run's round without
// secure aggregation, and a round the client answered before, in this
// process or before its restart. A server that restarts the run with
// another beacon, and a run without secure aggregation for a client that
// requires it, are refused outright.
func TestClientPolicy(t *testing.T) {
	c := runConfig(t, "ldpq", 5, 3)
	c.Weighting, c.SecureAggregation = "mean", true
	srv, err := NewServer(ServerConfig{Run: c, Token: token, RoundTimeout: time.Minute, Log: log.New(io.Discard, "", 0)})
	if err != nil {
		t.Fatal(err)
	}
	for k := range 5 {
		if err := srv.eng.Enroll(k, 10); err != nil {
			t.Fatal(err)
		}
	}
	plan, err := srv.eng.Begin(1, []int{0, 1, 2, 3, 4})
	if err != nil {
		t.Fatal(err)
	}
	commitment := srv.eng.BeaconCommitment()
	hello := &pb.Hello{RunId: srv.runID, Challenge: make([]byte, 32), ConfigYaml: string(srv.yaml), Beacon: commitment[:]}
	honest := func() *pb.RoundStart {
		return &pb.RoundStart{Round: 1, Position: 0, Global: encodeTensors(plan.Global), Ranges: encodeRanges(plan.Ranges),
			Partner: -1, TimeLeftMilli: 60000, Secagg: newSecureRound(plan, time.Now(), nil).announce(plan)}
	}
	reseed := func(sa *pb.SecAgg) {
		var ids []uint64
		for _, k := range sa.GetClients() {
			ids = append(ids, uint64(k))
		}
		seed := secagg.SessionSeed(srv.runID, 1, ids, [32]byte(sa.GetBeacon()))
		sa.Seed = seed[:]
	}
	state := filepath.Join(t.TempDir(), "client.state")
	play := func(name string, start *pb.RoundStart, h *pb.Hello, policy ClientPolicy) (string, error) {
		s := &scripted{hello: h, start: start, answers: make(chan string, 1)}
		addr := scriptedServer(t, s)
		var logs syncBuffer
		cl, err := NewClient(ClientConfig{Server: addr, ID: 0, Clients: 5, Key: NewKey(), Token: token,
			Creds: insecure.NewCredentials(), RetryFor: time.Second, Policy: policy, State: state, Log: log.New(&logs, name+": ", 0)})
		if err != nil {
			t.Fatal(err)
		}
		_, err = cl.Run(context.Background())
		select {
		case a := <-s.answers:
			return a, err
		default:
			return "", err
		}
	}
	for _, tc := range []struct {
		name  string
		edit  func(*pb.RoundStart)
		want  string
		after bool // the round is then answered
	}{
		{"threshold 1", func(rs *pb.RoundStart) { rs.Secagg.Threshold = 1 }, "declined: secagg: policy: threshold 1 with 5 share holders; at least 3", false},
		{"half of the holders", func(rs *pb.RoundStart) { rs.Secagg.Threshold = 2 }, "threshold 2 with 5 share holders; at least 3", false},
		{"alone", func(rs *pb.RoundStart) { rs.Secagg.Clients, rs.Secagg.Bits = []uint32{0}, 1; reseed(rs.Secagg) }, "policy: 1 clients in the round, at least 3", false},
		{"33 bits", func(rs *pb.RoundStart) { rs.Secagg.Bits = 33 }, "33-bit fields; the sum of 5 clients' fields takes 3", false},
		{"narrow", func(rs *pb.RoundStart) { rs.Secagg.Bits = 2 }, "2-bit fields; the sum of 5 clients' fields takes 3", false},
		{"chosen seed", func(rs *pb.RoundStart) { rs.Secagg.Seed = make([]byte, 32) }, "the graph's seed does not derive from the round's beacon", false},
		{"chosen beacon", func(rs *pb.RoundStart) { rs.Secagg.Beacon = make([]byte, 32); reseed(rs.Secagg) }, "beacon is not a link of the chain", false},
		{"plain round", func(rs *pb.RoundStart) { rs.Secagg = nil }, "the run has secure aggregation, but round 1 does not", false},
		{"honest", func(*pb.RoundStart) {}, "keys", true},
	} {
		rs := honest()
		tc.edit(rs)
		got, _ := play(tc.name, rs, hello, DefaultClientPolicy)
		if !strings.Contains(got, tc.want) {
			t.Errorf("%s: the client answered %q, want %q", tc.name, got, tc.want)
		}
	}
	// The honest round was answered up to its keys; record it answered as
	// the masked upload would, then a restarted client declines it.
	st, err := loadClientState(state)
	if err != nil {
		t.Fatal(err)
	}
	if err := st.answer(srv.runID, 1); err != nil {
		t.Fatal(err)
	}
	if got, _ := play("again", honest(), hello, DefaultClientPolicy); !strings.Contains(got, "round 1 of this run was answered before") {
		t.Errorf("a round answered before: %q", got)
	}
	other := proto.Clone(hello).(*pb.Hello)
	other.Beacon = make([]byte, 32)
	if _, err := play("new beacon", honest(), other, DefaultClientPolicy); err == nil || !strings.Contains(err.Error(), "beacon for run") {
		t.Errorf("a run restarted with another beacon: %v", err)
	}
	plainCfg := c
	plainCfg.SecureAggregation, plainCfg.Out = false, t.TempDir()
	plainSrv, err := NewServer(ServerConfig{Run: plainCfg, Token: token, RoundTimeout: time.Minute, Log: log.New(io.Discard, "", 0)})
	if err != nil {
		t.Fatal(err)
	}
	plainHello := &pb.Hello{RunId: plainSrv.runID, Challenge: make([]byte, 32), ConfigYaml: string(plainSrv.yaml)}
	if _, err := play("require", honest(), plainHello, ClientPolicy{RequireSecure: true, SecAgg: secagg.DefaultPolicy}); err == nil || !strings.Contains(err.Error(), "does not use secure aggregation") {
		t.Errorf("a plain run for a client that requires secure aggregation: %v", err)
	}
}

// repeater is a server that sends the same RoundStart twice in one session,
// as a server that restarted in the round does, and records the uploads.
type repeater struct {
	pb.UnimplementedFederationServer
	hello   *pb.Hello
	start   *pb.RoundStart
	uploads chan *pb.ClientMessage
}

func (s *repeater) Session(stream pb.Federation_SessionServer) error {
	stream.Send(&pb.ServerMessage{Body: &pb.ServerMessage_Hello{Hello: s.hello}})
	if _, err := stream.Recv(); err != nil {
		return err
	}
	stream.Send(&pb.ServerMessage{Body: &pb.ServerMessage_Welcome{Welcome: &pb.Welcome{}}})
	for range 2 {
		stream.Send(&pb.ServerMessage{Body: &pb.ServerMessage_RoundStart{RoundStart: s.start}})
		for {
			m, err := stream.Recv()
			if err != nil {
				return err
			}
			if m.GetUpload() != nil || m.GetDecline() != nil {
				s.uploads <- m
				break
			}
		}
	}
	return stream.Send(&pb.ServerMessage{Body: &pb.ServerMessage_Finished{Finished: &pb.Finished{Rounds: 1}}})
}

// TestAskedAgain: a plain round asked for again gets the very same upload
// (nothing new leaves the client); after the client restarts, which loses
// it, the round is declined.
func TestAskedAgain(t *testing.T) {
	c := runConfig(t, "ldpq", 2, 1)
	srv, err := NewServer(ServerConfig{Run: c, Token: token, RoundTimeout: time.Minute, Log: log.New(io.Discard, "", 0)})
	if err != nil {
		t.Fatal(err)
	}
	for k := range 2 {
		srv.eng.Enroll(k, 10)
	}
	plan, err := srv.eng.Begin(1, []int{0, 1})
	if err != nil {
		t.Fatal(err)
	}
	s := &repeater{
		hello:   &pb.Hello{RunId: srv.runID, Challenge: make([]byte, 32), ConfigYaml: string(srv.yaml)},
		start:   &pb.RoundStart{Round: 1, Global: encodeTensors(plan.Global), Ranges: encodeRanges(plan.Ranges), Partner: -1, TimeLeftMilli: 60000},
		uploads: make(chan *pb.ClientMessage, 4),
	}
	addr := scriptedServer(t, s)
	state := filepath.Join(t.TempDir(), "client.state")
	run := func(secret string) {
		cl, err := NewClient(ClientConfig{Server: addr, ID: 0, Clients: 2, Key: NewKey(), Token: token,
			Creds: insecure.NewCredentials(), RetryFor: time.Second, State: state, Secret: []byte(secret), Log: log.New(io.Discard, "", 0)})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := cl.Run(context.Background()); err != nil {
			t.Fatal(err)
		}
	}
	run("first process")
	first, again := <-s.uploads, <-s.uploads
	if first.GetUpload() == nil || !proto.Equal(first, again) {
		t.Errorf("asked again in one process: %v, then %v; want the same upload", first, again)
	}
	run("after a restart")
	if m := <-s.uploads; !strings.Contains(m.GetDecline().GetReason(), "answered before") {
		t.Errorf("asked again after a restart: %v; want a decline", m)
	}
}

// TestReplayNewRunID: a server cannot have a round answered again by
// naming its run anew. A Hello whose run id is not its configuration's
// hash is refused, naming both; the same settings under a new id (another
// out directory, which the hash covers) get an upload of fresh
// randomness, not the first run's message again, although the client's
// record of answered rounds, kept per run, lets it answer.
func TestReplayNewRunID(t *testing.T) {
	c := runConfig(t, "ldpq", 2, 1)
	renamed := c
	renamed.Out = t.TempDir()
	var hellos []*pb.Hello
	var start *pb.RoundStart
	for _, cfg := range []experiment.Config{c, renamed} {
		srv, err := NewServer(ServerConfig{Run: cfg, Token: token, RoundTimeout: time.Minute, Log: log.New(io.Discard, "", 0)})
		if err != nil {
			t.Fatal(err)
		}
		hellos = append(hellos, &pb.Hello{RunId: srv.runID, Challenge: make([]byte, 32), ConfigYaml: string(srv.yaml)})
		if start == nil {
			for k := range 2 {
				srv.eng.Enroll(k, 10)
			}
			plan, err := srv.eng.Begin(1, []int{0, 1})
			if err != nil {
				t.Fatal(err)
			}
			start = &pb.RoundStart{Round: 1, Global: encodeTensors(plan.Global), Ranges: encodeRanges(plan.Ranges), Partner: -1, TimeLeftMilli: 60000}
		}
	}
	state := filepath.Join(t.TempDir(), "client.state")
	// answer runs a client process of the same secret and state file
	// against a server that opens with h, and returns its first answer.
	answer := func(h *pb.Hello) (*pb.ClientMessage, error) {
		s := &repeater{hello: h, start: start, uploads: make(chan *pb.ClientMessage, 2)}
		cl, err := NewClient(ClientConfig{Server: scriptedServer(t, s), ID: 0, Clients: 2, Key: NewKey(), Token: token,
			Creds: insecure.NewCredentials(), RetryFor: time.Second, State: state, Secret: []byte("client 0"), Log: log.New(io.Discard, "", 0)})
		if err != nil {
			t.Fatal(err)
		}
		_, err = cl.Run(context.Background())
		select {
		case m := <-s.uploads:
			return m, err
		default:
			return nil, err
		}
	}
	first, err := answer(hellos[0])
	if err != nil || first.GetUpload() == nil {
		t.Fatalf("the run as its server names it: %v, %v; want an upload", first, err)
	}
	again, err := answer(hellos[1])
	if err != nil || again.GetUpload() == nil {
		t.Fatalf("the same settings as a new run: %v, %v; want an upload", again, err)
	}
	if proto.Equal(first, again) {
		t.Error("the same settings as a new run got round 1's upload again, byte for byte")
	}
	forged := proto.Clone(hellos[0]).(*pb.Hello)
	forged.RunId = []byte("another run id..")
	want := fmt.Sprintf("names its run %x, but the configuration it sent is run %x", forged.GetRunId(), hellos[0].GetRunId())
	if m, err := answer(forged); m != nil || err == nil || !strings.Contains(err.Error(), want) {
		t.Errorf("the configuration under another run id: %v, %v; want it refused with %q", m, err, want)
	}
}

// scriptedServer serves impl, a server that plays a script, on a loopback
// port until the test ends, and returns its address.
func scriptedServer(t *testing.T, impl pb.FederationServer) string {
	t.Helper()
	gs := grpc.NewServer()
	pb.RegisterFederationServer(gs, impl)
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go gs.Serve(lis)
	t.Cleanup(gs.Stop)
	return lis.Addr().String()
}

// sentStream is a client's stream that records what it sends.
type sentStream struct {
	pb.Federation_SessionClient
	sent []*pb.ClientMessage
}

func (s *sentStream) Send(m *pb.ClientMessage) error { s.sent = append(s.sent, m); return nil }

// TestTamperingServer plays a server that alters what it relays against a
// client's check and disclosure steps: a dealing its dealer did not sign is
// left out and not complained of (complaining would make an honest dealer
// disclose this client's shares), one its dealer signed that does not open
// is complained of; a complaint its holder did not sign gets no share
// disclosed, one it signed gets its shares.
func TestTamperingServer(t *testing.T) {
	ids := []uint64{0, 1, 2, 3, 4}
	p := secagg.Params{Bits: 8, Seed: [32]byte{33}, Round: 1}
	pol := secagg.Policy{MinClients: 1, MaxBits: 8}
	srv, err := secagg.NewServer(p, ids)
	if err != nil {
		t.Fatal(err)
	}
	cls := map[uint64]*secagg.Client{}
	keys := map[uint32]ed25519.PrivateKey{}
	identities := map[uint32]ed25519.PublicKey{}
	for _, id := range ids {
		if cls[id], err = secagg.NewClient(p, pol, id, ids, crand.Reader); err != nil {
			t.Fatal(err)
		}
		srv.AddKeys(id, cls[id].Keys())
		keys[uint32(id)] = NewKey()
		identities[uint32(id)] = keys[uint32(id)].Public().(ed25519.PublicKey)
	}
	for _, id := range ids {
		peers, _ := srv.Keys(id)
		d, err := cls[id].Share(peers)
		if err != nil {
			t.Fatal(err)
		}
		if err := srv.AddShares(id, d); err != nil {
			t.Fatal(err)
		}
	}
	runID := []byte("tampering")
	in, err := srv.Deliveries(0)
	if err != nil {
		t.Fatal(err)
	}
	inbox := &pb.SecAggShares{Round: 1}
	for from := range uint32(5) {
		if from == 0 {
			continue
		}
		sh := &pb.SecAggShare{From: from, To: 0, Ciphertext: in[uint64(from)].Sealed, Values: in[uint64(from)].Values}
		sh.Signature = ed25519.Sign(keys[from], secaggShareSigned(runID, 1, sh, sh.GetValues()))
		switch from {
		case 1: // altered by the server after the dealer signed
			sh.Ciphertext = slices.Clone(sh.Ciphertext)
			sh.Ciphertext[0] ^= 1
		case 2: // signed so by its dealer, and not the dealing it committed to
			sh.Ciphertext = slices.Clone(sh.Ciphertext)
			sh.Ciphertext[0] ^= 1
			sh.Signature = ed25519.Sign(keys[from], secaggShareSigned(runID, 1, sh, sh.GetValues()))
		}
		inbox.Shares = append(inbox.Shares, sh)
	}
	stream := &sentStream{}
	c := &Client{cfg: ClientConfig{ID: 0, Key: keys[0]}, log: log.New(io.Discard, "", 0)}
	sr := &secureClientRound{c: c, stream: stream, runID: runID, t: 1, self: 0, cl: cls[0], identities: identities}
	if err := sr.check(&pb.ServerMessage{Body: &pb.ServerMessage_SecaggInbox{SecaggInbox: inbox}}); err != nil {
		t.Fatal(err)
	}
	if got := stream.sent[0].GetSecaggCheck().GetComplaints(); !slices.Equal(got, []uint32{2}) {
		t.Errorf("complaints %v, want [2]: of the dealing its dealer signed, not of the one the server altered", got)
	}
	// Dealer 1 is sent a complaint that 3 did not sign, dealer 2 one that
	// 3 signed.
	for dealer := uint32(1); dealer <= 2; dealer++ {
		in, err := srv.Deliveries(uint64(dealer))
		if err != nil {
			t.Fatal(err)
		}
		if _, err := cls[uint64(dealer)].Check(in); err != nil {
			t.Fatal(err)
		}
		stream.sent = nil
		sr := &secureClientRound{c: &Client{cfg: ClientConfig{ID: int(dealer), Key: keys[dealer]}, log: log.New(io.Discard, "", 0)},
			stream: stream, runID: runID, t: 1, self: dealer, cl: cls[uint64(dealer)], identities: identities}
		check := &pb.SecAggCheck{Round: 1, Client: 3, Complaints: []uint32{dealer}}
		signer := keys[3]
		if dealer == 1 {
			signer = NewKey()
		}
		check.Signature = ed25519.Sign(signer, secaggCheckSigned(runID, check))
		ds := &pb.SecAggDisputes{Round: 1, Checks: []*pb.SecAggCheck{check}}
		if err := sr.disclose(&pb.ServerMessage{Body: &pb.ServerMessage_SecaggDisputes{SecaggDisputes: ds}}); err != nil || len(stream.sent) != 1 {
			t.Fatalf("dealer %d: %v, sent %d messages", dealer, err, len(stream.sent))
		}
		shares := stream.sent[0].GetSecaggDisclosure().GetShares()
		if want := int(dealer - 1); len(shares) != want || want == 1 && shares[0].GetHolder() != 3 {
			t.Errorf("dealer %d disclosed %v, want %d shares (those of holder 3 when 3 signed its complaint)", dealer, shares, want)
		}
	}
}
