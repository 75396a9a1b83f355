package transport

import (
	"bytes"
	"context"
	"crypto/ed25519"
	"encoding/json"
	"io"
	"log"
	"math"
	"slices"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/fedpq/fedpq/corr"
	"github.com/fedpq/fedpq/experiment"
	"github.com/fedpq/fedpq/fl"
	"github.com/fedpq/fedpq/mech"
	"github.com/fedpq/fedpq/secagg"
	pb "github.com/fedpq/fedpq/transport/fedpqpb"
)

// fuzzServer is a server of a one-round run of a mechanism between clients
// 0 and 1, both enrolled, and the model it starts from.
type fuzzServer struct {
	srv    *Server
	global [][]float32
}

// fuzzChallenge stands for the fresh challenge of a Hello in the Join path.
var fuzzChallenge = make([]byte, 32)

// FuzzClientMessage: whatever bytes a client sends in a round, under any
// mechanism, the server decodes and handles them without crashing: as the
// first message of a stream (a Join) or as a joined client's. The round's
// aggregate only ever holds whole, valid uploads, a joined client's weight
// never exceeds its partition, and the round ends with a finite model, an
// evaluation and a report that can be written.
//
// The last servers run secure rounds (ldpq, corbin): there the message
// arrives at the step of the protocol the input's first byte names, the
// two clients' honest secagg parts having run the steps before it.
func FuzzClientMessage(f *testing.F) {
	names := append(mech.Names(), "ldpq", "corbin")
	secureFrom := len(names) - 2
	servers := make([]fuzzServer, len(names))
	joiner := ed25519.NewKeyFromSeed(make([]byte, 32))
	for i, name := range names {
		c := experiment.Default()
		c.Clients, c.Rounds, c.Mechanism, c.Out = 2, 1, name, f.TempDir()
		c.SecureAggregation, c.Weighting = i >= secureFrom, "mean"
		if c.SecureAggregation {
			c.Clients = 3 // a secure run's rounds have 3 at least; clients 0 and 1 take part
		}
		srv, err := NewServer(ServerConfig{Run: c, Token: token, RoundTimeout: 1, Log: log.New(io.Discard, "", 0)})
		if err != nil {
			f.Fatalf("%s: %v", name, err)
		}
		for _, k := range []int{0, 1} {
			if err := srv.eng.Enroll(k, 10); err != nil {
				f.Fatal(err)
			}
		}
		servers[i] = fuzzServer{srv: srv, global: clone(srv.eng.Global())}

		// The seeds: an honest upload of client 0, and what a pair sends.
		plan, err := srv.eng.Begin(1, []int{0, 1})
		if err != nil {
			f.Fatal(err)
		}
		m, err := mech.New(name, srv.su.Engine.Mech)
		if err != nil {
			f.Fatal(err)
		}
		slot, err := plan.Pairing.ClientSlot(0, srv.su.Model.NumParams())
		if err != nil {
			f.Fatal(err)
		}
		payloads, err := fl.Encode(m, c.Perturb, plan.Global, clone(plan.Global), plan.Ranges, slot)
		if err != nil {
			f.Fatalf("%s: %v", name, err)
		}
		// A payload of the honest size whose every byte is 0x7f: for the
		// float mechanisms, every value 3.4e38.
		huge := make([][]byte, len(payloads))
		for i, p := range payloads {
			huge[i] = bytes.Repeat([]byte{0x7f}, len(p))
		}
		for _, m := range []*pb.ClientMessage{
			{Body: &pb.ClientMessage_Upload{Upload: &pb.Upload{Round: 1, Payloads: payloads, Loss: 0.5}}},
			{Body: &pb.ClientMessage_Upload{Upload: &pb.Upload{Round: 1, Masked: make([]byte, plan.MaskedBytes()), Loss: 0.5}}},
			{Body: &pb.ClientMessage_SecaggKeys{SecaggKeys: &pb.SecAggKeys{Round: 1, C: make([]byte, 32), S: make([]byte, 32), Signature: make([]byte, 64)}}},
			{Body: &pb.ClientMessage_SecaggShares{SecaggShares: &pb.SecAggShares{Round: 1, Shares: []*pb.SecAggShare{{From: 0, To: 1, Ciphertext: make([]byte, 200)}}}}},
			{Body: &pb.ClientMessage_SecaggReveal{SecaggReveal: &pb.SecAggReveal{Round: 1, Self: []*pb.SecAggSecret{{Owner: 1, Share: make([]byte, 32)}}}}},
			{Body: &pb.ClientMessage_SecaggShares{SecaggShares: &pb.SecAggShares{Round: 1, Values: make([]byte, 5*32), Shares: []*pb.SecAggShare{{From: 0, To: 1, Ciphertext: make([]byte, 96)}}}}},
			{Body: &pb.ClientMessage_SecaggCheck{SecaggCheck: &pb.SecAggCheck{Round: 1, Complaints: []uint32{1, 7}}}},
			{Body: &pb.ClientMessage_SecaggConsent{SecaggConsent: &pb.SecAggConsent{Round: 1, Signature: make([]byte, 64)}}},
			{Body: &pb.ClientMessage_Decline{Decline: &pb.Decline{Round: 1, Reason: "policy"}}},
			{Body: &pb.ClientMessage_Upload{Upload: &pb.Upload{Round: 1, Payloads: huge, Loss: 0.5}}},
			{Body: &pb.ClientMessage_Upload{Upload: &pb.Upload{Round: 1, Payloads: payloads, Loss: math.MaxFloat64}}},
			{Body: &pb.ClientMessage_KeyShare{KeyShare: &pb.KeyShare{Round: 1, Client: 0, Partner: 1, PublicKey: make([]byte, 32), Signature: make([]byte, 64)}}},
			{Body: &pb.ClientMessage_KeyShare{KeyShare: &pb.KeyShare{Round: 1, Client: 0, Partner: 1, PublicKey: make([]byte, 1000)}}},
			{Body: &pb.ClientMessage_Sealed{Sealed: &pb.Sealed{Round: 1, Client: 0, Partner: 1, Ciphertext: []byte{9}}}},
			{Body: &pb.ClientMessage_Join{Join: &pb.Join{
				Client: 1, Clients: 2, Identity: joiner.Public().(ed25519.PublicKey), Token: token, Examples: math.MaxInt32,
				Signature: ed25519.Sign(joiner, joinSigned(srv.runID, fuzzChallenge, 1)),
			}}},
		} {
			b, err := proto.Marshal(m)
			if err != nil {
				f.Fatal(err)
			}
			f.Add(uint8(i), b)
			secureKind := m.GetSecaggKeys() != nil || m.GetSecaggShares() != nil || m.GetSecaggCheck() != nil ||
				m.GetSecaggConsent() != nil || m.GetSecaggReveal() != nil || m.GetDecline() != nil || len(m.GetUpload().GetMasked()) > 0
			if i >= secureFrom && secureKind { // the secure round's later steps
				for step := 1; step < secureDone; step++ {
					f.Add(uint8(i+step*len(names)), b)
				}
			}
		}
	}
	f.Fuzz(func(t *testing.T, which uint8, b []byte) {
		var m pb.ClientMessage
		if proto.Unmarshal(b, &m) != nil {
			return
		}
		fs := servers[int(which)%len(servers)]
		srv := fs.srv
		if err := srv.eng.Restore(fl.State{Joined: make([]int, srv.cfg.Run.Clients), Global: clone(fs.global)}); err != nil {
			t.Fatal(err)
		}
		plan, err := srv.eng.Begin(1, []int{0, 1})
		if err != nil {
			t.Fatal(err)
		}
		srv.round = newServerRound(plan)
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		sess := &session{id: 0, examples: 10, out: make(chan any, 64), ctx: ctx, cancel: cancel}
		srv.sessions = map[uint32]*session{0: sess}
		added := 0
		if rd := srv.round; int(which)%len(servers) >= secureFrom {
			rd.secure = newSecureRound(plan, time.Now().Add(time.Minute), map[uint32]ed25519.PublicKey{0: sess.identity, 1: nil})
			added = secureSteps(t, srv, rd, int(which)/len(servers)%secureDone)
		}
		if j := m.GetJoin(); j != nil {
			if joined, err := srv.join(ctx, j, fuzzChallenge, "fuzz"); err == nil {
				if joined.examples > len(srv.su.Clients[joined.id]) {
					t.Fatalf("client %d weighs %d examples, its partition %d", joined.id, joined.examples, len(srv.su.Clients[joined.id]))
				}
				srv.leave(joined)
			}
		} else {
			srv.handle(sess, &m)
		}
		if plan.Received()-added > 1 {
			t.Fatalf("%d uploads from one client", plan.Received())
		}
		r, err := srv.eng.End(plan)
		if err != nil {
			t.Fatal(err)
		}
		for i, w := range srv.eng.Global() {
			for j, v := range w {
				if math.IsNaN(float64(v)) || math.IsInf(float64(v), 0) {
					t.Fatalf("%s: global tensor %d [%d] = %v", srv.cfg.Run.Mechanism, i, j, v)
				}
			}
		}
		if r.Accuracy == nil {
			t.Fatal("the round was not evaluated")
		}
		if _, err := json.Marshal(r); err != nil {
			t.Fatalf("the round's report: %v", err)
		}
	})
}

func clone(w [][]float32) [][]float32 {
	c := make([][]float32, len(w))
	for i, t := range w {
		c[i] = slices.Clone(t)
	}
	return c
}

// FuzzRoundStart: a client checks a RoundStart's model and ranges before
// it uses them, whatever the server sends.
func FuzzRoundStart(f *testing.F) {
	c := runConfig(&testing.T{}, "corbin", 2, 1)
	c.Out = f.TempDir()
	cl, err := NewClient(ClientConfig{ID: 0, Clients: 2, Key: NewKey(), Creds: nil})
	if err == nil || cl != nil {
		f.Fatal("a client without credentials")
	}
	srv, err := NewServer(ServerConfig{Run: c, Token: token, RoundTimeout: 1, Log: log.New(io.Discard, "", 0)})
	if err != nil {
		f.Fatal(err)
	}
	specs := srv.su.Model.Tensors()
	plan, err := srv.eng.Begin(1, []int{})
	if err != nil {
		f.Fatal(err)
	}
	good, _ := proto.Marshal(&pb.RoundStart{Round: 1, Global: encodeTensors(plan.Global), Ranges: encodeRanges(plan.Ranges)})
	f.Add(good)
	f.Fuzz(func(t *testing.T, b []byte) {
		var rs pb.RoundStart
		if proto.Unmarshal(b, &rs) != nil {
			return
		}
		w, err := decodeTensors(rs.GetGlobal(), specs)
		if err == nil && len(w) != len(specs) {
			t.Fatalf("%d tensors decoded for %d", len(w), len(specs))
		}
		rg, err := decodeRanges(rs.GetRanges(), len(specs))
		if err == nil {
			for _, r := range rg {
				if r.Validate() != nil {
					t.Fatalf("range %v accepted", r)
				}
			}
		}
	})
}

// secureSteps plays the two clients' honest secagg parts of a secure
// round up to step (secureKeys ... secureUnmask), as the server's handlers
// would record them, and returns the uploads added.
func secureSteps(t *testing.T, srv *Server, rd *serverRound, step int) int {
	t.Helper()
	sr := rd.secure
	ids := []uint64{0, 1}
	pol := secagg.DefaultPolicy
	pol.MinClients = 2
	var cls []*secagg.Client
	for _, id := range ids {
		c, err := secagg.NewClient(sr.params, pol, id, ids, corr.Derive([]byte("fuzz"), "secagg", id))
		if err != nil {
			t.Fatal(err)
		}
		cls = append(cls, c)
	}
	if step == secureKeys {
		return 0
	}
	for i, c := range cls {
		a := c.Keys()
		if err := sr.srv.AddKeys(uint64(i), a); err != nil {
			t.Fatal(err)
		}
		sr.keys[uint32(i)] = &pb.SecAggKeys{Round: 1, Client: uint32(i), C: a.C, S: a.S}
	}
	srv.nextStep(rd)
	if step == secureShares {
		return 0
	}
	for i, c := range cls {
		peers, err := sr.srv.Keys(uint64(i))
		if err != nil {
			t.Fatal(err)
		}
		d, err := c.Share(peers)
		if err != nil {
			t.Fatal(err)
		}
		if err := sr.srv.AddShares(uint64(i), d); err != nil {
			t.Fatal(err)
		}
		sr.dealt[uint32(i)] = true
	}
	// The step the server's nextStep opens, keeping the deliveries it
	// would have sent.
	sr.step = secureCheck
	var inbox []map[uint64]secagg.Delivery
	for i := range cls {
		in, err := sr.srv.Deliveries(uint64(i))
		if err != nil {
			t.Fatal(err)
		}
		inbox = append(inbox, in)
	}
	if step == secureCheck {
		return 0
	}
	for i, c := range cls {
		complaints, err := c.Check(inbox[i])
		if err != nil {
			t.Fatal(err)
		}
		if err := sr.srv.AddCheck(uint64(i), complaints); err != nil {
			t.Fatal(err)
		}
		sr.checked[uint32(i)] = &pb.SecAggCheck{Round: 1, Client: uint32(i)}
	}
	srv.nextStep(rd)
	if step == secureDisputes {
		return 0
	}
	srv.nextStep(rd)
	upload := func(i int) {
		partners, err := sr.srv.Partners(uint64(i))
		if err != nil {
			t.Fatal(err)
		}
		y, err := cls[i].Mask(make([]uint64, srv.su.Model.NumParams()), partners) // ldpq, corbin: a field per parameter
		if err != nil {
			t.Fatal(err)
		}
		if err := rd.plan.AddMasked(i, fl.PackFields(y, sr.params.Bits), 0.5); err != nil {
			t.Fatal(err)
		}
		rd.accept(i)
	}
	upload(1)
	if step == secureMasked {
		return 1
	}
	upload(0)
	srv.nextStep(rd)
	consent := func(i int) {
		digest, err := cls[i].Consent(sr.request)
		if err != nil {
			t.Fatal(err)
		}
		if digest != sr.digest {
			t.Fatal("the client's digest is not the server's")
		}
		sr.consents[uint32(i)] = make([]byte, 64)
	}
	consent(1)
	if step == secureConsent {
		return 2
	}
	consent(0)
	srv.nextStep(rd)
	r, err := cls[1].Unmask(ids)
	if err != nil {
		t.Fatal(err)
	}
	if err := sr.srv.AddReveal(1, r); err != nil {
		t.Fatal(err)
	}
	sr.revealed[1] = true
	return 2
}
