package transport

import (
	"context"
	"io"
	"log"
	"testing"

	"google.golang.org/protobuf/proto"

	"github.com/fedpq/fedpq/fl"
	pb "github.com/fedpq/fedpq/transport/fedpqpb"
)

// FuzzClientMessage: whatever bytes a joined client sends in a round, the
// server decodes and handles them without crashing, and the round's
// aggregate only ever holds whole, valid uploads.
func FuzzClientMessage(f *testing.F) {
	for _, m := range []*pb.ClientMessage{
		{Body: &pb.ClientMessage_Upload{Upload: &pb.Upload{Round: 1, Payloads: [][]byte{make([]byte, 4), {1, 2}}}}},
		{Body: &pb.ClientMessage_KeyShare{KeyShare: &pb.KeyShare{Round: 1, Client: 0, Partner: 1, PublicKey: make([]byte, 32)}}},
		{Body: &pb.ClientMessage_Sealed{Sealed: &pb.Sealed{Round: 1, Client: 0, Partner: 1, Ciphertext: []byte{9}}}},
		{Body: &pb.ClientMessage_Join{Join: &pb.Join{Client: 3}}},
	} {
		b, _ := proto.Marshal(m)
		f.Add(b)
	}
	c := runConfig(&testing.T{}, "corbin", 2, 1)
	c.Out = f.TempDir()
	srv, err := NewServer(ServerConfig{Run: c, Token: token, RoundTimeout: 1, Log: log.New(io.Discard, "", 0)})
	if err != nil {
		f.Fatal(err)
	}
	for _, k := range []uint32{0, 1} {
		if err := srv.eng.Enroll(int(k), 10); err != nil {
			f.Fatal(err)
		}
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		var m pb.ClientMessage
		if proto.Unmarshal(b, &m) != nil {
			return
		}
		plan, err := srv.eng.Begin(1, nil)
		if err != nil {
			t.Fatal(err)
		}
		srv.round = &serverRound{plan: plan, pos: map[uint32]int{0: 0, 1: 1}, state: make([]int, 2)}
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		sess := &session{id: 0, examples: 10, out: make(chan *pb.ServerMessage, 16), ctx: ctx, cancel: cancel}
		srv.sessions = map[uint32]*session{0: sess}
		srv.handle(sess, &m)
		if plan.Received() > 1 {
			t.Fatalf("%d uploads from one client", plan.Received())
		}
		if _, err := srv.eng.End(plan); err != nil {
			t.Fatal(err)
		}
		srv.eng.Restore(fl.State{Joined: make([]int, 2), Global: srv.eng.Global()}) // back to round 1
	})
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
