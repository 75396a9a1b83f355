package transport

import (
	"bytes"
	"context"
	"crypto/ed25519"
	"encoding/binary"
	"errors"
	"fmt"
	"log"
	"math"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	"github.com/fedpq/fedpq/corr"
	"github.com/fedpq/fedpq/experiment"
	"github.com/fedpq/fedpq/fl"
	"github.com/fedpq/fedpq/mech"
	"github.com/fedpq/fedpq/report"
	pb "github.com/fedpq/fedpq/transport/fedpqpb"
)

// syncBuffer is a log destination safe for concurrent writers.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// runConfig is a small synthetic run that needs no files.
func runConfig(t *testing.T, mechanism string, clients, rounds int) experiment.Config {
	c := experiment.Default()
	c.Clients, c.Rounds, c.Mechanism, c.Out = clients, rounds, mechanism, t.TempDir()
	return c
}

const token = "test-token"

// testServer serves cfg on a loopback port until the run ends or the test
// does.
type testServer struct {
	srv    *Server
	addr   string
	log    *syncBuffer
	cancel context.CancelFunc
	done   chan struct{}
	sum    *report.Summary
	err    error
}

func serve(t *testing.T, cfg ServerConfig, addr string, opts ...grpc.ServerOption) *testServer {
	t.Helper()
	ts := &testServer{log: &syncBuffer{}, done: make(chan struct{})}
	cfg.Log = log.New(ts.log, "server: ", 0)
	if cfg.Token == "" && cfg.Roster == nil {
		cfg.Token = token
	}
	if cfg.RoundTimeout == 0 {
		cfg.RoundTimeout = time.Minute
	}
	srv, err := NewServer(cfg)
	if err != nil {
		t.Fatal(err)
	}
	lis, err := net.Listen("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	ts.srv, ts.addr = srv, lis.Addr().String()
	ctx, cancel := context.WithCancel(context.Background())
	ts.cancel = cancel
	go func() {
		defer close(ts.done)
		ts.sum, ts.err = srv.Serve(ctx, lis, opts...)
	}()
	t.Cleanup(func() {
		cancel()
		<-ts.done
		if t.Failed() {
			t.Logf("server log:\n%s", ts.log)
		}
	})
	return ts
}

// ended waits for done to be closed.
func ended(t *testing.T, done <-chan struct{}, what string) {
	t.Helper()
	select {
	case <-done:
	case <-time.After(2 * time.Minute):
		t.Fatalf("the %s did not end", what)
	}
}

func (ts *testServer) wait(t *testing.T) *report.Summary {
	t.Helper()
	ended(t, ts.done, "run")
	if ts.err != nil {
		t.Fatalf("server: %v", ts.err)
	}
	return ts.sum
}

// testClient runs a client in the background.
type testClient struct {
	log  *syncBuffer
	done chan struct{}
	fin  *pb.Finished
	err  error
}

func join(t *testing.T, ctx context.Context, cfg ClientConfig) *testClient {
	t.Helper()
	tc := &testClient{log: &syncBuffer{}, done: make(chan struct{})}
	cfg.Log = log.New(tc.log, fmt.Sprintf("client %d: ", cfg.ID), 0)
	if cfg.Key == nil {
		cfg.Key = NewKey()
	}
	if cfg.Token == "" {
		cfg.Token = token
	}
	if cfg.Creds == nil {
		cfg.Creds = insecure.NewCredentials()
	}
	if cfg.RetryFor == 0 {
		cfg.RetryFor = 30 * time.Second
	}
	cfg.Secret = []byte(fmt.Sprintf("client %d", cfg.ID))
	c, err := NewClient(cfg)
	if err != nil {
		t.Fatal(err)
	}
	go func() {
		defer close(tc.done)
		tc.fin, tc.err = c.Run(ctx)
	}()
	t.Cleanup(func() {
		<-tc.done
		if t.Failed() {
			t.Logf("client %d log:\n%s", cfg.ID, tc.log)
		}
	})
	return tc
}

func (tc *testClient) wait(t *testing.T) {
	t.Helper()
	ended(t, tc.done, "client")
	if tc.err != nil {
		t.Errorf("client: %v", tc.err)
	}
}

// rounds reads the uploads counted in each round of a run.
func rounds(t *testing.T, dir string) []int {
	t.Helper()
	run, err := report.ReadRun(dir)
	if err != nil {
		t.Fatal(err)
	}
	var n []int
	for _, r := range run.Rounds {
		n = append(n, r.Clients)
	}
	return n
}

// TestEveryCoupling: a server and 4 clients run 2 rounds of each kind of
// mechanism: pairs with derived and with transferred shared bits,
// a group, a dither shared with the server, and none; every upload is
// counted.
func TestEveryCoupling(t *testing.T) {
	for _, tc := range []struct {
		mech     string
		transfer bool
	}{{"corbin", false}, {"corbin", true}, {"cq", false}, {"sdq", false}, {"ldpq", false}, {"none", false}} {
		t.Run(fmt.Sprintf("%s/transfer=%v", tc.mech, tc.transfer), func(t *testing.T) {
			c := runConfig(t, tc.mech, 4, 2)
			c.Transfer = tc.transfer
			if tc.mech == "sdq" {
				c.Range = "fixed:0,0.5"
			}
			ts := serve(t, ServerConfig{Run: c}, "127.0.0.1:0")
			var cs []*testClient
			for k := range 4 {
				cs = append(cs, join(t, context.Background(), ClientConfig{Server: ts.addr, ID: k, Clients: 4}))
			}
			sum := ts.wait(t)
			for _, cl := range cs {
				cl.wait(t)
			}
			if got := fmt.Sprint(rounds(t, c.Dir())); got != "[4 4]" || sum.Rounds != 2 {
				t.Errorf("uploads per round %s, %d rounds; want [4 4], 2", got, sum.Rounds)
			}
			if tc.mech == "corbin" && !strings.Contains(cs[0].log.String(), "a pair's") {
				t.Errorf("client 0 never paired:\n%s", cs[0].log)
			}
			// The setup bytes are those relayed: per pair two signed X25519
			// keys (2 x (32 + 64) bytes and framing), and in transfer mode
			// the sealed shared bits.
			run, err := report.ReadRun(c.Dir())
			if err != nil {
				t.Fatal(err)
			}
			lo, hi := int64(0), int64(0)
			if tc.mech == "corbin" {
				lo, hi = 2*2*96, 2*2*120
				if tc.transfer {
					m, err := mech.New("corbin", mech.Config{Epsilon: c.Epsilon, SharedBits: c.SharedBits})
					if err != nil {
						t.Fatal(err)
					}
					sealed := int64(2 * (fl.TransferBytes(m, 610) + corr.SealedOverhead)) // the linear model: 610 parameters
					lo, hi = lo+sealed, hi+sealed+2*32
				}
			}
			for _, r := range run.Rounds {
				if r.SetupBytes < lo || r.SetupBytes > hi {
					t.Errorf("round %d: %d setup bytes, want %d to %d", r.Round, r.SetupBytes, lo, hi)
				}
				// A private run's clients keep their training loss.
				if private := tc.mech != "none"; private != math.IsNaN(r.TrainLoss) || !private && !(r.TrainLoss > 0) {
					t.Errorf("round %d: train loss %v reported by the clients of a %s run", r.Round, r.TrainLoss, tc.mech)
				}
			}
		})
	}
}

// raw is a hand-driven session, to send what an honest client never does.
type raw struct {
	stream pb.Federation_SessionClient
	hello  *pb.Hello
	key    ed25519.PrivateKey
}

func dial(t *testing.T, addr string) *raw {
	t.Helper()
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	stream, err := pb.NewFederationClient(conn).Session(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	m, err := stream.Recv()
	if err != nil {
		t.Fatal(err)
	}
	return &raw{stream: stream, hello: m.GetHello(), key: NewKey()}
}

func (r *raw) join(id, clients uint32, tok string) error { return r.joinClaiming(id, clients, tok, 10) }

// joinClaiming joins claiming to train on the given number of examples.
func (r *raw) joinClaiming(id, clients uint32, tok string, examples uint64) error {
	err := r.stream.Send(&pb.ClientMessage{Body: &pb.ClientMessage_Join{Join: &pb.Join{
		Client: id, Clients: clients, Identity: r.key.Public().(ed25519.PublicKey),
		Signature: ed25519.Sign(r.key, joinSigned(r.hello.GetRunId(), r.hello.GetChallenge(), id)),
		Token:     tok, Examples: examples,
	}}})
	if err != nil {
		return err
	}
	m, err := r.stream.Recv()
	if err == nil && m.GetWelcome() == nil {
		err = errors.New("no Welcome")
	}
	return err
}

// next reads messages until one of the wanted kind.
func (r *raw) next(t *testing.T, want func(*pb.ServerMessage) bool) *pb.ServerMessage {
	t.Helper()
	for {
		m, err := r.stream.Recv()
		if err != nil {
			t.Fatal(err)
		}
		if want(m) {
			return m
		}
	}
}

// with is p with tensor i replaced by v.
func with(p [][]byte, i int, v []byte) [][]byte {
	q := append([][]byte(nil), p...)
	q[i] = v
	return q
}

func float32s(n int, v float32) []byte {
	b := make([]byte, 4*n)
	for i := range n {
		binary.LittleEndian.PutUint32(b[4*i:], math.Float32bits(v))
	}
	return b
}

// TestRefusals: joins that are not enrolled are refused with the reason,
// and a joined client's bad messages (an upload for another round, a
// truncated, oversized, wrong-length or NaN upload, a second upload, a key
// share for someone else's partner) are refused and logged while the round
// goes on with the honest clients.
func TestRefusals(t *testing.T) {
	c := runConfig(t, "none", 4, 1)
	ts := serve(t, ServerConfig{Run: c, MinClients: 4}, "127.0.0.1:0")

	for _, tc := range []struct {
		name      string
		id, n     uint32
		tok       string
		sign      bool
		code      codes.Code
		errSubstr string
	}{
		{"wrong token", 0, 4, "nope", true, codes.PermissionDenied, "wrong join token"},
		{"no token", 0, 4, "", true, codes.PermissionDenied, "no join token, and this server requires one: --token or $FEDPQ_TOKEN"},
		{"unknown client", 7, 4, token, true, codes.PermissionDenied, "unknown client 7"},
		{"other partition", 0, 5, token, true, codes.InvalidArgument, "partition of 5"},
		{"bad signature", 0, 4, token, false, codes.PermissionDenied, "join signature"},
	} {
		r := dial(t, ts.addr)
		if !tc.sign {
			r.hello.Challenge = []byte("another challenge")
		}
		err := r.join(tc.id, tc.n, tc.tok)
		if status.Code(err) != tc.code || !strings.Contains(err.Error(), tc.errSubstr) {
			t.Errorf("%s: %v, want %v %q", tc.name, err, tc.code, tc.errSubstr)
		}
	}
	r := dial(t, ts.addr)
	r.stream.Send(&pb.ClientMessage{Body: &pb.ClientMessage_Upload{Upload: &pb.Upload{Round: 1}}})
	if _, err := r.stream.Recv(); status.Code(err) != codes.InvalidArgument {
		t.Errorf("an upload before a Join: %v", err)
	}

	// Client 3 keeps the round open while client 2 misbehaves, then leaves.
	bad, silent := dial(t, ts.addr), dial(t, ts.addr)
	if err := bad.join(2, 4, token); err != nil {
		t.Fatal(err)
	}
	if err := silent.join(3, 4, token); err != nil {
		t.Fatal(err)
	}
	honest := []*testClient{
		join(t, context.Background(), ClientConfig{Server: ts.addr, ID: 0, Clients: 4}),
		join(t, context.Background(), ClientConfig{Server: ts.addr, ID: 1, Clients: 4}),
	}
	rs := bad.next(t, func(m *pb.ServerMessage) bool { return m.GetRoundStart() != nil }).GetRoundStart()
	sizes := make([]int, len(rs.GetGlobal()))
	good := make([][]byte, len(sizes))
	for i, g := range rs.GetGlobal() {
		sizes[i] = len(g) / 4
		good[i] = float32s(sizes[i], 0.01)
	}
	nan := append([][]byte(nil), good...)
	nan[len(nan)-1] = float32s(sizes[len(sizes)-1], float32(math.NaN()))
	inf := append([][]byte(nil), good...)
	inf[0] = float32s(sizes[0], float32(math.Inf(1)))
	truncated := append([][]byte(nil), good...)
	truncated[0] = truncated[0][:len(truncated[0])-1]
	receipt := func(u *pb.Upload, want string) {
		t.Helper()
		if err := bad.stream.Send(&pb.ClientMessage{Body: &pb.ClientMessage_Upload{Upload: u}}); err != nil {
			t.Fatal(err)
		}
		r := bad.next(t, func(m *pb.ServerMessage) bool { return m.GetReceipt() != nil }).GetReceipt()
		if r.GetAccepted() || !strings.Contains(r.GetError(), want) {
			t.Errorf("upload answered %v %q, want a refusal with %q", r.GetAccepted(), r.GetError(), want)
		}
	}
	receipt(&pb.Upload{Round: 0, Payloads: good}, "round 0, which is not under way")
	receipt(&pb.Upload{Round: 2, Payloads: good}, "round 2, which is not under way")
	bad.stream.Send(&pb.ClientMessage{Body: &pb.ClientMessage_KeyShare{KeyShare: &pb.KeyShare{Round: 1, Client: 2, Partner: 0}}})
	bad.stream.Send(&pb.ClientMessage{})
	receipt(&pb.Upload{Round: 1, Payloads: good[:1]}, "tensors")
	receipt(&pb.Upload{Round: 1, Payloads: good}, "second upload") // its part in the round is over
	silent.stream.CloseSend()
	sum := ts.wait(t)
	for _, h := range honest {
		h.wait(t)
	}
	if got := fmt.Sprint(rounds(t, c.Dir())); got != "[2]" || sum.Rounds != 1 {
		t.Errorf("uploads per round %s, want [2]", got)
	}
	// The first three refusals of a round are logged, then one line says
	// the rest are not; every upload's receipt says why regardless.
	for _, want := range []string{"wrong join token", "unknown client 7", "the first message must be a Join",
		"not its partner", "replayed or late", "an empty or unknown message; further refusals in round 1 are not logged"} {
		if !strings.Contains(ts.log.String(), want) {
			t.Errorf("server log lacks %q", want)
		}
	}

	// What an upload holds, each in a run of its own so that the refused
	// upload is the client's first.
	last := len(good) - 1
	for _, tc := range []struct {
		name string
		u    *pb.Upload
		want string
	}{
		{"NaN", &pb.Upload{Payloads: with(good, last, nan[last])}, fmt.Sprintf("tensor %d", last)},
		{"Inf", &pb.Upload{Payloads: with(good, 0, inf[0])}, "tensor 0"},
		{"truncated", &pb.Upload{Payloads: with(good, 0, truncated[0])}, "payload of"},
		{"too many tensors", &pb.Upload{Payloads: append(good, good[0])}, "tensors"},
		{"loss", &pb.Upload{Payloads: good, Loss: math.NaN()}, "training loss"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := runConfig(t, "none", 1, 1)
			ts := serve(t, ServerConfig{Run: c}, "127.0.0.1:0")
			r := dial(t, ts.addr)
			if err := r.join(0, 1, token); err != nil {
				t.Fatal(err)
			}
			r.next(t, func(m *pb.ServerMessage) bool { return m.GetRoundStart() != nil })
			tc.u.Round = 1
			r.stream.Send(&pb.ClientMessage{Body: &pb.ClientMessage_Upload{Upload: tc.u}})
			rc := r.next(t, func(m *pb.ServerMessage) bool { return m.GetReceipt() != nil }).GetReceipt()
			if rc.GetAccepted() || !strings.Contains(rc.GetError(), tc.want) {
				t.Errorf("%s upload: %v %q, want a refusal with %q", tc.name, rc.GetAccepted(), rc.GetError(), tc.want)
			}
			ts.wait(t)
			if got := fmt.Sprint(rounds(t, c.Dir())); got != "[0]" {
				t.Errorf("uploads per round %s, want [0]", got)
			}
		})
	}
	t.Run("oversized", func(t *testing.T) {
		c := runConfig(t, "none", 1, 1)
		ts := serve(t, ServerConfig{Run: c}, "127.0.0.1:0")
		r := dial(t, ts.addr)
		if err := r.join(0, 1, token); err != nil {
			t.Fatal(err)
		}
		r.next(t, func(m *pb.ServerMessage) bool { return m.GetRoundStart() != nil })
		huge := make([]byte, ts.srv.MaxMessageBytes())
		r.stream.Send(&pb.ClientMessage{Body: &pb.ClientMessage_Upload{Upload: &pb.Upload{Round: 1, Payloads: [][]byte{huge}}}})
		if _, err := r.stream.Recv(); status.Code(err) != codes.ResourceExhausted {
			t.Errorf("oversized upload: %v", err)
		}
		ts.wait(t) // the round ends without the client
	})
}

// TestPartnerLeaves: a client that leaves after the round starts, before
// it sends its key share, leaves its partner alone: the partner is told,
// encodes alone (an exact ldpq client), and the round ends at once with
// the uploads of the others.
func TestPartnerLeaves(t *testing.T) {
	c := runConfig(t, "corbin", 4, 1)
	ts := serve(t, ServerConfig{Run: c, RoundTimeout: 10 * time.Minute}, "127.0.0.1:0")
	quitter := dial(t, ts.addr)
	if err := quitter.join(3, 4, token); err != nil {
		t.Fatal(err)
	}
	var cs []*testClient
	for k := range 3 {
		cs = append(cs, join(t, context.Background(), ClientConfig{Server: ts.addr, ID: k, Clients: 4}))
	}
	quitter.next(t, func(m *pb.ServerMessage) bool { return m.GetRoundStart() != nil })
	quitter.stream.CloseSend()
	start := time.Now()
	ts.wait(t)
	if time.Since(start) > time.Minute {
		t.Errorf("the round waited %v for a client that left", time.Since(start))
	}
	for _, cl := range cs {
		cl.wait(t)
	}
	if got := fmt.Sprint(rounds(t, c.Dir())); got != "[3]" {
		t.Errorf("uploads per round %s, want [3]", got)
	}
	alone := 0
	for _, cl := range cs {
		if strings.Contains(cl.log.String(), "partner 3 left; encoding alone") {
			alone++
		}
	}
	if alone != 1 {
		t.Errorf("%d clients were told their partner left, want 1", alone)
	}
	if !strings.Contains(ts.log.String(), "client 3 left before uploading") {
		t.Error("the server did not log the departure")
	}
}

// TestRestart: a server stopped after round 1 and started again on the
// same run directory resumes after round 1 with the same model; its
// clients reconnect by themselves and the run ends after round 3.
func TestRestart(t *testing.T) {
	c := runConfig(t, "corbin", 4, 3)
	var hash [32]byte
	first := make(chan struct{})
	ts := serve(t, ServerConfig{Run: c, Progress: func(r report.Round) {
		if r.Round == 1 {
			close(first)
		}
	}}, "127.0.0.1:0")
	var cs []*testClient
	for k := range 4 {
		cs = append(cs, join(t, context.Background(), ClientConfig{Server: ts.addr, ID: k, Clients: 4}))
	}
	<-first
	ts.cancel()
	<-ts.done
	if !errors.Is(ts.err, context.Canceled) {
		t.Fatalf("stopped server: %v", ts.err)
	}
	st, err := fl.LoadState(c.Dir() + "/" + experiment.CheckpointFile)
	if err != nil {
		t.Fatal(err)
	}
	if st.Round != 1 {
		t.Fatalf("checkpoint after round %d, want 1", st.Round)
	}
	hash = fl.Hash(st.Global)

	again := serve(t, ServerConfig{Run: c}, ts.addr)
	sum := again.wait(t)
	if want := fmt.Sprintf("after round 1 from its checkpoint; model sha256 %x", hash[:8]); !strings.Contains(again.log.String(), want) {
		t.Errorf("the restarted server did not resume with %q", want)
	}
	for k, cl := range cs {
		cl.wait(t)
		if !strings.Contains(cl.log.String(), "reconnecting") {
			t.Errorf("client %d did not reconnect", k)
		}
	}
	if got := fmt.Sprint(rounds(t, c.Dir())); got != "[4 4 4]" || sum.Rounds != 3 {
		t.Errorf("uploads per round %s over %d rounds, want [4 4 4]", got, sum.Rounds)
	}
}

// TestRoster: a server with a roster refuses a key not on it; a client
// whose roster holds another key for its partner refuses the partner's key
// share (as it would a relaying server's own) and encodes alone.
func TestRoster(t *testing.T) {
	c := runConfig(t, "corbin", 2, 1)
	keys := []ed25519.PrivateKey{NewKey(), NewKey()}
	roster := Roster{0: keys[0].Public().(ed25519.PublicKey), 1: keys[1].Public().(ed25519.PublicKey)}
	ts := serve(t, ServerConfig{Run: c, Roster: roster}, "127.0.0.1:0")
	stranger := dial(t, ts.addr)
	if err := stranger.join(0, 2, ""); status.Code(err) != codes.PermissionDenied || !strings.Contains(err.Error(), "not on the roster") {
		t.Errorf("a key not on the roster: %v", err)
	}
	forged := Roster{0: roster[0], 1: NewKey().Public().(ed25519.PublicKey)}
	a := join(t, context.Background(), ClientConfig{Server: ts.addr, ID: 0, Clients: 2, Key: keys[0], Roster: forged})
	b := join(t, context.Background(), ClientConfig{Server: ts.addr, ID: 1, Clients: 2, Key: keys[1], Roster: roster})
	ts.wait(t)
	a.wait(t)
	b.wait(t)
	if !strings.Contains(a.log.String(), "partner 1's key share: bad signature; encoding alone") {
		t.Errorf("client 0 accepted a key share its roster does not vouch for:\n%s", a.log)
	}
	if !strings.Contains(b.log.String(), "a pair's") {
		t.Errorf("client 1 did not pair with its rightful partner:\n%s", b.log)
	}
}

// TestMatchesSimulation: without a mechanism's noise, a deployed run and
// the simulation of the same configuration differ only in the order each
// client visits its examples, and end within 3 points of accuracy of each
// other (4 of the 135 test examples; with other client seeds the two
// differed by 0 to 1 example).
func TestMatchesSimulation(t *testing.T) {
	c := runConfig(t, "none", 6, 5)
	ts := serve(t, ServerConfig{Run: c}, "127.0.0.1:0")
	for k := range 6 {
		join(t, context.Background(), ClientConfig{Server: ts.addr, ID: k, Clients: 6})
	}
	dep := ts.wait(t)
	c.Out = t.TempDir()
	sim, err := experiment.Run(context.Background(), c, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("accuracy: deployed %.4f, simulated %.4f", dep.FinalAccuracy, sim.FinalAccuracy)
	if math.Abs(dep.FinalAccuracy-sim.FinalAccuracy) > 0.03 {
		t.Errorf("accuracy: deployed %.4f, simulated %.4f", dep.FinalAccuracy, sim.FinalAccuracy)
	}
}

// TestDeadline: a client that hangs without disconnecting is cut off by
// the round's deadline; the round ends with the uploads it has.
func TestDeadline(t *testing.T) {
	c := runConfig(t, "ldpq", 2, 1)
	ts := serve(t, ServerConfig{Run: c, RoundTimeout: 500 * time.Millisecond}, "127.0.0.1:0")
	hung := dial(t, ts.addr)
	if err := hung.join(1, 2, token); err != nil {
		t.Fatal(err)
	}
	cl := join(t, context.Background(), ClientConfig{Server: ts.addr, ID: 0, Clients: 2})
	ts.wait(t)
	cl.wait(t)
	if got := fmt.Sprint(rounds(t, c.Dir())); got != "[1]" {
		t.Errorf("uploads per round %s, want [1]", got)
	}
	for _, want := range []string{"deadline passed", "no upload by the deadline from 1 of 2 clients: 1"} {
		if !strings.Contains(ts.log.String(), want) {
			t.Errorf("server log lacks %q", want)
		}
	}
}

// TestPinnedIdentity: in token mode an id belongs to the first identity
// key that joined as it, across a restart of the server: another key is
// refused, the pinned one admitted; a rejoin within a second is refused
// until the second has passed.
func TestPinnedIdentity(t *testing.T) {
	c := runConfig(t, "ldpq", 2, 1)
	first := serve(t, ServerConfig{Run: c}, "127.0.0.1:0")
	owner := dial(t, first.addr)
	if err := owner.join(0, 2, token); err != nil {
		t.Fatal(err)
	}
	again := dial(t, first.addr)
	again.key = owner.key
	if err := again.join(0, 2, token); status.Code(err) != codes.ResourceExhausted || !strings.Contains(err.Error(), "joined less than 1s ago") {
		t.Errorf("a rejoin at once: %v", err)
	}
	first.cancel()
	<-first.done

	ts := serve(t, ServerConfig{Run: c}, first.addr)
	impostor := dial(t, ts.addr)
	if err := impostor.join(0, 2, token); status.Code(err) != codes.PermissionDenied || !strings.Contains(err.Error(), "another identity key") {
		t.Errorf("another key as client 0 after a restart: %v", err)
	}
	back := dial(t, ts.addr)
	back.key = owner.key
	if err := back.join(0, 2, token); err != nil {
		t.Errorf("the pinned key after a restart: %v", err)
	}
	b, err := os.ReadFile(filepath.Join(c.Dir(), PinsFile))
	if err != nil || !strings.HasPrefix(string(b), "0 "+PublicString(owner.key)+"\n") {
		t.Errorf("%s: %q, %v", PinsFile, b, err)
	}
	if info, err := os.Stat(filepath.Join(c.Dir(), SecretFile)); err != nil || info.Mode().Perm() != 0o600 || info.Size() != 32 {
		t.Errorf("%s: %v, %v", SecretFile, info, err)
	}
}

// TestJoinLimits: a stream that does not join within the join timeout is
// closed, and streams beyond MaxPending waiting to join are refused at
// once; once they are gone, a client joins.
func TestJoinLimits(t *testing.T) {
	c := runConfig(t, "ldpq", 1, 1)
	ts := serve(t, ServerConfig{Run: c, JoinTimeout: 3 * time.Second}, "127.0.0.1:0")
	// Four streams a connection, the most a connection may hold, so that
	// the limit met is the pending streams', not the connections'.
	var conn *grpc.ClientConn
	opened := 0
	open := func() (pb.Federation_SessionClient, error) {
		if opened%streamsPerConn == 0 {
			var err error
			if conn, err = grpc.NewClient(ts.addr, grpc.WithTransportCredentials(insecure.NewCredentials())); err != nil {
				t.Fatal(err)
			}
			c := conn
			t.Cleanup(func() { c.Close() })
		}
		opened++
		stream, err := pb.NewFederationClient(conn).Session(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		_, err = stream.Recv() // the Hello, or why there is none
		return stream, err
	}
	var idle []pb.Federation_SessionClient
	refused := 0
	for range ts.srv.MaxPending() + 5 {
		s, err := open()
		switch {
		case err == nil:
			idle = append(idle, s)
		case status.Code(err) == codes.ResourceExhausted:
			refused++
		default:
			t.Fatal(err)
		}
	}
	if len(idle) != ts.srv.MaxPending() || refused != 5 {
		t.Errorf("%d streams waiting to join, %d refused; want %d and 5", len(idle), refused, ts.srv.MaxPending())
	}
	start := time.Now()
	for _, s := range idle {
		if _, err := s.Recv(); status.Code(err) != codes.DeadlineExceeded || !strings.Contains(err.Error(), "no Join within 3s") {
			t.Fatalf("an idle stream: %v", err)
		}
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Errorf("idle streams closed after %v, want about 3s", d)
	}
	if !strings.Contains(ts.log.String(), "no Join within 3s (a client that loads its data for longer joins on its next connection)") {
		t.Errorf("the server did not log the streams it closed:\n%s", ts.log)
	}
	cl := join(t, context.Background(), ClientConfig{Server: ts.addr, ID: 0, Clients: 1})
	ts.wait(t)
	cl.wait(t)
}

// TestUploadWithoutSealedBits: in transfer mode a client that pairs and
// uploads but never sends the leader's sealed bits does not hold its
// partner until the deadline: whatever the roles, the partner is told when
// the upload arrives, and the round ends at once with both uploads.
func TestUploadWithoutSealedBits(t *testing.T) {
	c := runConfig(t, "corbin", 2, 1)
	c.Transfer = true
	ts := serve(t, ServerConfig{Run: c, RoundTimeout: time.Minute}, "127.0.0.1:0")
	r := dial(t, ts.addr)
	if err := r.join(1, 2, token); err != nil {
		t.Fatal(err)
	}
	honest := join(t, context.Background(), ClientConfig{Server: ts.addr, ID: 0, Clients: 2})
	rs := r.next(t, func(m *pb.ServerMessage) bool { return m.GetRoundStart() != nil }).GetRoundStart()
	start := time.Now()
	me, err := corr.NewIdentity(corr.Key([]byte("silent leader"), "x25519", 1))
	if err != nil {
		t.Fatal(err)
	}
	pub := me.Public()
	r.stream.Send(&pb.ClientMessage{Body: &pb.ClientMessage_KeyShare{KeyShare: &pb.KeyShare{
		Round: 1, Client: 1, Partner: 0, PublicKey: pub,
		Signature: ed25519.Sign(r.key, keyShareSigned(r.hello.GetRunId(), 1, 1, 0, pub)),
	}}})
	var payloads [][]byte
	for _, g := range rs.GetGlobal() {
		payloads = append(payloads, make([]byte, (len(g)/4+7)/8)) // corbin: a bit per parameter
	}
	r.stream.Send(&pb.ClientMessage{Body: &pb.ClientMessage_Upload{Upload: &pb.Upload{Round: 1, Payloads: payloads, Loss: 0.5}}})
	if rc := r.next(t, func(m *pb.ServerMessage) bool { return m.GetReceipt() != nil }).GetReceipt(); !rc.GetAccepted() {
		t.Fatalf("the upload was refused: %s", rc.GetError())
	}
	ts.wait(t)
	honest.wait(t)
	if d := time.Since(start); d > 20*time.Second {
		t.Errorf("the round took %v: its honest client waited for sealed bits that never came", d)
	}
	if got := fmt.Sprint(rounds(t, c.Dir())); got != "[2]" {
		t.Errorf("uploads per round %s, want [2]", got)
	}
}

// TestMaxWait: a server that needs 2 clients and has 1 stops after
// --max-wait with an error naming the client missing.
func TestMaxWait(t *testing.T) {
	c := runConfig(t, "ldpq", 2, 1)
	ts := serve(t, ServerConfig{Run: c, MinClients: 2, MaxWait: time.Second}, "127.0.0.1:0")
	r := dial(t, ts.addr)
	if err := r.join(0, 2, token); err != nil {
		t.Fatal(err)
	}
	ended(t, ts.done, "run")
	if ts.err == nil || !strings.Contains(ts.err.Error(), "1 of the 2 clients needed connected after waiting 1s (--max-wait); missing clients 1") {
		t.Errorf("server: %v", ts.err)
	}
}

// TestSlowClientCutOff: a client whose queue of messages is full is cut
// off rather than left to hold up the server, and the server's log says
// why it left.
func TestSlowClientCutOff(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	sess := &session{id: 3, out: make(chan any, 2), ctx: ctx, cancel: cancel}
	sess.send(&pb.ServerMessage{})
	sess.send(&pb.ServerMessage{})
	if ctx.Err() != nil || sess.slow.Load() {
		t.Fatal("cut off with room left in its queue")
	}
	sess.send(&pb.ServerMessage{})
	if ctx.Err() == nil || !sess.slow.Load() {
		t.Fatal("a client with a full queue was not cut off")
	}
	var logs syncBuffer
	s := &Server{sessions: map[uint32]*session{3: sess}, changed: make(chan struct{}), log: log.New(&logs, "", 0)}
	s.leave(sess)
	if want := "client 3 disconnected (cut off: it took too long to read the server's messages, 2 queued); 0 connected"; !strings.Contains(logs.String(), want) {
		t.Errorf("log %q; want %q", logs.String(), want)
	}
}
