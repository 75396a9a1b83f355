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

	"google.golang.org/protobuf/proto"

	"github.com/fedpq/fedpq/experiment"
	"github.com/fedpq/fedpq/fl"
	"github.com/fedpq/fedpq/mech"
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
func FuzzClientMessage(f *testing.F) {
	names := mech.Names()
	servers := make([]fuzzServer, len(names))
	joiner := ed25519.NewKeyFromSeed(make([]byte, 32))
	for i, name := range names {
		c := experiment.Default()
		c.Clients, c.Rounds, c.Mechanism, c.Out = 2, 1, name, f.TempDir()
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
		plan, err := srv.eng.Begin(1, nil)
		if err != nil {
			f.Fatal(err)
		}
		m, err := mech.New(name, srv.su.Engine.Mech)
		if err != nil {
			f.Fatal(err)
		}
		slot, err := plan.Round.ClientSlot(0, srv.su.Model.NumParams())
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
		}
	}
	f.Fuzz(func(t *testing.T, which uint8, b []byte) {
		var m pb.ClientMessage
		if proto.Unmarshal(b, &m) != nil {
			return
		}
		fs := servers[int(which)%len(servers)]
		srv := fs.srv
		if err := srv.eng.Restore(fl.State{Joined: make([]int, 2), Global: clone(fs.global)}); err != nil {
			t.Fatal(err)
		}
		plan, err := srv.eng.Begin(1, nil)
		if err != nil {
			t.Fatal(err)
		}
		srv.round = newServerRound(plan)
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		sess := &session{id: 0, examples: 10, out: make(chan *pb.ServerMessage, 16), ctx: ctx, cancel: cancel}
		srv.sessions = map[uint32]*session{0: sess}
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
		if plan.Received() > 1 {
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
