package main

import (
	"bytes"
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"encoding/binary"
	"errors"
	"flag"
	"fmt"
	"io"
	"math"
	"net"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	"github.com/fedpq/fedpq/corr"
	"github.com/fedpq/fedpq/experiment"
	"github.com/fedpq/fedpq/mech"
	"github.com/fedpq/fedpq/report"
	pb "github.com/fedpq/fedpq/transport/fedpqpb"
)

var hostileClients = flag.Int("hostile-clients", 8, "clients in each of TestHostile's runs, one of them the attacker")

const hostileToken = "hostile-test-token"

// TestHostile plays the attacks of a lying participant against a real
// server process on loopback with honest client processes: uploads no
// honest client can send, an inflated example count, a flood of key
// shares and of empty messages, an impostor, a silent partner, a client
// that leaves for good, and tens of thousands of streams from a peer with
// no token. Each run must end with the honest clients' accuracy (that of
// the simulation of the same configuration, within 15 points: the attacks
// it defends against took it to 1-7%), every honest upload counted, no
// round waiting out its deadline, a bounded log and bounded memory.
// go test ./cmd/fedpq -run Hostile -hostile-clients 30 runs it bigger.
func TestHostile(t *testing.T) {
	if testing.Short() {
		t.Skip("runs a server and client processes for about a minute")
	}
	n := *hostileClients
	if n < 3 {
		t.Fatalf("-hostile-clients %d: want at least 3", n)
	}
	const rounds = 12    // enough that one run's accuracy is not one round's luck
	bad := uint32(n - 1) // the attacker's id; the others are honest
	every := func(k int) []int { return slices.Repeat([]int{k}, rounds) }
	for _, m := range []string{"none", "gaussian", "laplace"} {
		t.Run("uploads/"+m, func(t *testing.T) {
			h := startHostile(t, m, rounds, "--min-clients", fmt.Sprint(n))
			a := h.attacker(bad, math.MaxInt32)
			for round, attack := range []struct {
				value float32
				loss  float64
			}{{math.MaxFloat32, 0.1}, {1e6, 0.1}, {0, math.MaxFloat64}} {
				rs := a.roundStart()
				if r := a.upload(rs.GetRound(), a.floats(rs, attack.value), attack.loss); r.GetAccepted() {
					t.Errorf("round %d: an upload of %g with loss %g was accepted", round+1, attack.value, attack.loss)
				} else {
					t.Logf("round %d: upload of %g, loss %g: %s", round+1, attack.value, attack.loss, r.GetError())
				}
			}
			// Then honest-looking uploads (zero updates) are counted, with
			// no more weight than the client's partition, whatever it
			// claimed.
			for range rounds - 3 {
				rs := a.roundStart()
				if r := a.upload(rs.GetRound(), a.floats(rs, 0), 0.1); !r.GetAccepted() {
					t.Errorf("round %d: a zero update was refused: %s", rs.GetRound(), r.GetError())
				}
			}
			want := every(n)
			want[0], want[1], want[2] = n-1, n-1, n-1
			h.finish(t, want)
			su, err := experiment.NewSetup(h.cfg)
			if err != nil {
				t.Fatal(err)
			}
			line := h.server.await(t, fmt.Sprintf("client %d joined from .* \\((\\d+) examples, weighed as (\\d+): its partition", bad), time.Second)
			if k, _ := strconv.Atoi(line[2]); line[1] != fmt.Sprint(math.MaxInt32) || k > len(su.Clients[bad]) {
				t.Errorf("the server weighs a client that claimed %s examples as %d, its partition %d", line[1], k, len(su.Clients[bad]))
			}
		})
	}

	t.Run("uploads/jopeq-compat", func(t *testing.T) {
		h := startHostile(t, "jopeq-compat", rounds, "--min-clients", fmt.Sprint(n))
		a := h.attacker(bad, 0)
		for round, header := range [][2]float32{{0, math.MaxFloat32}, {1e30, 1}, {0, 1e10}, {0, -1}} {
			rs := a.roundStart()
			if r := a.upload(rs.GetRound(), a.compat(rs, header[0], header[1]), 0.1); r.GetAccepted() {
				t.Errorf("round %d: a header of mean %g, scale %g was accepted", round+1, header[0], header[1])
			} else {
				t.Logf("round %d: mean %g, scale %g: %s", round+1, header[0], header[1], r.GetError())
			}
		}
		a.sitOut(rounds - 4)
		h.finish(t, every(n-1))
	})

	t.Run("relays", func(t *testing.T) {
		h := startHostile(t, "corbin", rounds, "--min-clients", fmt.Sprint(n))
		a := h.attacker(bad, 0)

		// Round 1: an impostor joins as an honest client with a key of
		// its own and the shared token; then the attacker floods its
		// partner with oversized key shares and is disconnected.
		rs := a.roundStart()
		imp := h.dial(t)
		if err := imp.join(0, 100); status.Code(err) != codes.PermissionDenied || !strings.Contains(err.Error(), "another identity key") {
			t.Errorf("an impostor as client 0: %v", err)
		}
		// And 100 joins with a wrong token: refused, 10 a minute logged.
		for range 100 {
			s := h.dial(t)
			s.token = "wrong"
			if err := s.join(0, 100); status.Code(err) != codes.PermissionDenied {
				t.Fatalf("a join with a wrong token: %v", err)
			}
			s.conn.Close()
		}
		junk := make([]byte, 60_000)
		sent := 0
		for ; sent < 1000; sent++ {
			if a.send(&pb.ClientMessage{Body: &pb.ClientMessage_KeyShare{KeyShare: &pb.KeyShare{
				Round: rs.GetRound(), Client: bad, Partner: uint32(rs.GetPartner()), PublicKey: junk, Signature: junk[:64],
			}}}) != nil {
				break
			}
		}
		if err := a.drain(); status.Code(err) != codes.ResourceExhausted {
			t.Errorf("after %d oversized key shares: %v, want ResourceExhausted", sent, err)
		}
		a = h.attacker(bad, 0) // it joins again, with the key it is pinned to

		// Round 2: no key share; the partner is told when the key-share
		// deadline passes, not at the round's.
		rs = a.roundStart()
		h.server.await(t, fmt.Sprintf("no key share from client %d within 2s; its partner %d encodes alone", bad, rs.GetPartner()), 30*time.Second)
		a.upload(rs.GetRound(), nil, 0.1)

		// Round 3: a key share its partner refuses (the signature is not
		// the attacker's), then a refused upload: the partner is told at
		// once.
		rs = a.roundStart()
		a.send(&pb.ClientMessage{Body: &pb.ClientMessage_KeyShare{KeyShare: &pb.KeyShare{
			Round: rs.GetRound(), Client: bad, Partner: uint32(rs.GetPartner()), PublicKey: make([]byte, 32), Signature: make([]byte, 64),
		}}})
		a.upload(rs.GetRound(), nil, 0.1)

		// Round 4: a million empty messages.
		a.roundStart()
		for i := 0; i < 1_000_000 && a.send(&pb.ClientMessage{}) == nil; i++ {
		}
		if err := a.drain(); status.Code(err) != codes.ResourceExhausted {
			t.Errorf("after a flood of empty messages: %v, want ResourceExhausted", err)
		}
		h.attacker(bad, 0).sitOut(rounds - 4)
		h.finish(t, every(n-1))
		lines := h.server.lines()
		refusals, joins := 0, 0
		for _, l := range lines {
			if strings.Contains(l, fmt.Sprintf("client %d: refused", bad)) {
				refusals++
			}
			if strings.Contains(l, "refused a client at") {
				joins++
			}
			for k := range n - 1 {
				if strings.Contains(l, fmt.Sprintf("client %d disconnected", k)) {
					t.Errorf("honest client %d lost its session: %s", k, l)
				}
			}
		}
		// At most 4 lines of refusals per round, and a few lines per
		// client and round besides.
		if refusals > 4*rounds || joins > 10 || len(lines) > 4*rounds+3*n+10 {
			t.Errorf("%d log lines, %d of them the attacker's refusals, %d refused joins", len(lines), refusals, joins)
		}
	})

	t.Run("streams", func(t *testing.T) {
		h := startHostile(t, "ldpq", rounds, "--min-clients", fmt.Sprint(n))
		before := rss(t, h.server)
		peak := before
		// 50,000 streams on one connection, then 500 connections of 4
		// streams each, none of them ever sending a byte of a message.
		one := openStreams(t, h.addr, 50_000)
		peak = max(peak, rss(t, h.server))
		var many []io.Closer
		for range 500 {
			many = append(many, openStreams(t, h.addr, 4))
		}
		for range 5 {
			time.Sleep(200 * time.Millisecond)
			peak = max(peak, rss(t, h.server))
		}
		t.Logf("server RSS: %.1f MB before, at most %.1f MB under the flood of streams", before/1e6, peak/1e6)
		if peak > 200e6 {
			t.Errorf("server RSS %.0f MB under the flood of streams, want < 200 MB", peak/1e6)
		}
		one.Close()
		for _, c := range many {
			c.Close()
		}
		h.attacker(bad, 0).sitOut(rounds)
		h.finish(t, every(n-1))
	})

	t.Run("leaves", func(t *testing.T) {
		// The default fleet minimum: a client gone for good delays each
		// later round by the grace, not forever.
		// The grace also covers round 1's wait for the honest processes
		// to start, which a loaded machine can make take seconds.
		h := startHostile(t, "sdq", 3, "--grace", "5s", "--gather", "0s", "--range", "fixed:0,0.5")
		a := h.attacker(bad, 0)
		rs := a.roundStart()
		// The configuration every peer sees names the seed; the dither
		// the server shares with this client does not derive from it.
		c := experiment.Default()
		if err := experiment.Parse([]byte(a.hello.GetConfigYaml()), &c); err != nil {
			t.Fatal(err)
		}
		fromSeed := corr.Key(corr.SeedSecret(c.Seed), "dither", uint64(rs.GetRound()), uint64(rs.GetPosition()))
		if bytes.Equal(fromSeed[:], rs.GetSharedKey()) {
			t.Error("the dither key derives from the seed in the configuration")
		}
		a.conn.Close()
		h.finish(t, []int{n - 1, n - 1, n - 1})
		h.server.await(t, fmt.Sprintf("going on with %d of %d clients after waiting 5s", n-1, n), time.Second)
	})
}

// hostileRun is a server process and its honest client processes.
type hostileRun struct {
	t      *testing.T
	cfg    experiment.Config
	addr   string
	server *proc
	honest []*proc
	start  time.Time
	key    ed25519.PrivateKey // the attacker's, the same each time it joins
}

// startHostile starts a server of a run of mechanism among
// -hostile-clients clients, and all but the last as honest processes.
func startHostile(t *testing.T, mechanism string, rounds int, flags ...string) *hostileRun {
	t.Helper()
	n := *hostileClients
	dir := t.TempDir()
	c := experiment.Default()
	c.Mechanism, c.Clients, c.Rounds, c.Epsilon, c.Seed, c.Out = mechanism, n, rounds, 4, 2, filepath.Join(dir, "run")
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := lis.Addr().String()
	lis.Close()
	args := []string{"server", "--mechanism", mechanism, "--clients", fmt.Sprint(n), "--rounds", fmt.Sprint(rounds), "--epsilon", "4",
		"--seed", "2", "--out", c.Out, "--listen", addr, "--token", hostileToken, "--round-timeout", "60s",
		"--key-share-timeout", "2s", "--join-timeout", "2s"}
	args = append(args, flags...)
	for i := 0; i+1 < len(flags); i += 2 {
		if flags[i] == "--range" {
			c.Range = flags[i+1]
		}
	}
	h := &hostileRun{t: t, cfg: c, addr: addr, start: time.Now()}
	h.server = start(t, "server", args...)
	h.server.await(t, "listening on", time.Minute)
	for k := range n - 1 {
		h.honest = append(h.honest, start(t, fmt.Sprintf("client %d", k), "client", "--server", addr,
			"--partition", fmt.Sprintf("%d/%d", k, n), "--token", hostileToken, "--seed", fmt.Sprint(k), "--retry-for", "1m"))
	}
	return h
}

// finish waits for the run to end and checks what it must: the server
// exits cleanly, each round counted the uploads want says, none waited
// out the deadline, and the final accuracy is the honest one.
func (h *hostileRun) finish(t *testing.T, want []int) {
	t.Helper()
	if err := h.server.wait(t, 3*time.Minute); err != nil {
		t.Fatalf("server: %v", err)
	}
	for k, c := range h.honest {
		if err := c.wait(t, 30*time.Second); err != nil {
			t.Errorf("honest client %d: %v", k, err)
		}
	}
	run, err := report.ReadRun(h.cfg.Out)
	if err != nil {
		t.Fatal(err)
	}
	var got []int
	for _, r := range run.Rounds {
		got = append(got, r.Clients)
	}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("uploads per round %v, want %v", got, want)
	}
	for _, l := range h.server.lines() {
		if strings.Contains(l, "deadline passed") {
			t.Errorf("a round waited out its deadline: %s", l)
		}
	}
	dep := *finishedRun(t, h.cfg.Out).Summary
	sc := h.cfg
	sc.Out = filepath.Join(t.TempDir(), "simulation")
	sim, err := experiment.Run(context.Background(), sc, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("%s: final accuracy %.4f under attack, %.4f simulated without; %v", h.cfg.Mechanism, dep.FinalAccuracy, sim.FinalAccuracy, time.Since(h.start).Round(100*time.Millisecond))
	if dep.FinalAccuracy < sim.FinalAccuracy-0.15 {
		t.Errorf("final accuracy %.4f under attack, %.4f simulated without", dep.FinalAccuracy, sim.FinalAccuracy)
	}
}

// attacker speaks the protocol as a client does, and lies where it likes.
type attacker struct {
	t      *testing.T
	h      *hostileRun
	conn   *grpc.ClientConn
	stream pb.Federation_SessionClient
	hello  *pb.Hello
	key    ed25519.PrivateKey
	id     uint32
	token  string
}

// dial opens a session and reads the server's Hello.
func (h *hostileRun) dial(t *testing.T) *attacker {
	t.Helper()
	conn, err := grpc.NewClient(h.addr, grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(1<<30)))
	if err != nil {
		t.Fatal(err)
	}
	// No scenario takes this long: a session the server leaves hanging
	// fails the test instead of stalling it.
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	t.Cleanup(func() { cancel(); conn.Close() })
	stream, err := pb.NewFederationClient(conn).Session(ctx)
	if err != nil {
		t.Fatal(err)
	}
	m, err := stream.Recv()
	if err != nil {
		t.Fatal(err)
	}
	_, key, _ := ed25519.GenerateKey(rand.Reader)
	return &attacker{t: t, h: h, conn: conn, stream: stream, hello: m.GetHello(), key: key, token: hostileToken}
}

// attacker joins as client id, claiming the examples given (0: 100), with
// the same identity key every time it joins a run.
// A join within a second of the id's last is refused: it retries, as a
// client does.
func (h *hostileRun) attacker(id uint32, examples uint64) *attacker {
	if examples == 0 {
		examples = 100
	}
	for {
		a := h.dial(h.t)
		if h.key == nil {
			h.key = a.key
		}
		a.key, a.id = h.key, id
		err := a.join(id, examples)
		if err == nil {
			return a
		}
		if status.Code(err) != codes.ResourceExhausted {
			h.t.Fatalf("the attacker's join: %v", err)
		}
		a.conn.Close()
		time.Sleep(250 * time.Millisecond)
	}
}

// signed is transport's signing format (auth.go), written out as a client
// of another implementation would.
func signed(context string, fields ...[]byte) []byte {
	b := []byte("fedpq/v1 " + context)
	for _, f := range fields {
		b = binary.BigEndian.AppendUint32(b, uint32(len(f)))
		b = append(b, f...)
	}
	return b
}

func (a *attacker) join(id uint32, examples uint64) error {
	err := a.send(&pb.ClientMessage{Body: &pb.ClientMessage_Join{Join: &pb.Join{
		Client: id, Clients: uint32(*hostileClients), Identity: a.key.Public().(ed25519.PublicKey), Token: a.token,
		Examples:  examples,
		Signature: ed25519.Sign(a.key, signed("join", a.hello.GetRunId(), a.hello.GetChallenge(), binary.BigEndian.AppendUint32(nil, id))),
	}}})
	if err != nil {
		return err
	}
	m, err := a.stream.Recv()
	if err == nil && m.GetWelcome() == nil {
		err = errors.New("no Welcome")
	}
	return err
}

func (a *attacker) send(m *pb.ClientMessage) error { return a.stream.Send(m) }

// next reads messages until one that want accepts.
func (a *attacker) next(want func(*pb.ServerMessage) bool) *pb.ServerMessage {
	a.t.Helper()
	for {
		m, err := a.stream.Recv()
		if err != nil {
			a.t.Fatalf("the attacker's session: %v", err)
		}
		if want(m) {
			return m
		}
	}
}

func (a *attacker) roundStart() *pb.RoundStart {
	a.t.Helper()
	return a.next(func(m *pb.ServerMessage) bool { return m.GetRoundStart() != nil }).GetRoundStart()
}

// upload sends an upload and returns the server's receipt for it.
func (a *attacker) upload(round uint32, payloads [][]byte, loss float64) *pb.Receipt {
	a.t.Helper()
	if err := a.send(&pb.ClientMessage{Body: &pb.ClientMessage_Upload{Upload: &pb.Upload{Round: round, Payloads: payloads, Loss: loss}}}); err != nil {
		a.t.Fatal(err)
	}
	return a.next(func(m *pb.ServerMessage) bool { return m.GetReceipt() != nil }).GetReceipt()
}

// sitOut takes part in the next k rounds by sending an upload the server
// refuses, so that no round waits for it.
func (a *attacker) sitOut(k int) {
	a.t.Helper()
	for range k {
		rs := a.roundStart()
		a.upload(rs.GetRound(), nil, 0.1)
	}
}

// drain reads until the session ends and returns why it did.
func (a *attacker) drain() error {
	for {
		if _, err := a.stream.Recv(); err != nil {
			return err
		}
	}
}

// floats is an upload of a float32 mechanism with every value v.
func (a *attacker) floats(rs *pb.RoundStart, v float32) [][]byte {
	var p [][]byte
	for _, g := range rs.GetGlobal() {
		b := make([]byte, len(g))
		for i := 0; i < len(b); i += 4 {
			binary.LittleEndian.PutUint32(b[i:], math.Float32bits(v))
		}
		p = append(p, b)
	}
	return p
}

// compat is a jopeq-compat upload (scalar lattice) with the given header
// and every quantizer field 0.
func (a *attacker) compat(rs *pb.RoundStart, mean, scale float32) [][]byte {
	a.t.Helper()
	m, err := mech.New("jopeq-compat", mech.Config{Epsilon: a.h.cfg.Epsilon, Rate: a.h.cfg.Rate, Lattice: a.h.cfg.Lattice})
	if err != nil {
		a.t.Fatal(err)
	}
	var p [][]byte
	for _, g := range rs.GetGlobal() {
		b := make([]byte, (m.Bits(len(g)/4)+7)/8)
		binary.LittleEndian.PutUint32(b, math.Float32bits(mean))
		binary.LittleEndian.PutUint32(b[4:], math.Float32bits(scale))
		p = append(p, b)
	}
	return p
}

// openStreams opens n streams of the Session method on one plaintext
// HTTP/2 connection and never sends a message on them: what any peer can
// do without a token. The server's frames are read and dropped.
func openStreams(t *testing.T, addr string, n int) io.Closer {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	go io.Copy(io.Discard, c)
	if _, err := io.WriteString(c, http2.ClientPreface); err != nil {
		t.Fatal(err)
	}
	fr := http2.NewFramer(c, nil)
	if err := fr.WriteSettings(); err != nil {
		t.Fatal(err)
	}
	var hb bytes.Buffer
	enc := hpack.NewEncoder(&hb)
	for i := range n {
		hb.Reset()
		for _, f := range [][2]string{{":method", "POST"}, {":scheme", "http"}, {":path", "/fedpq.v1.Federation/Session"},
			{":authority", addr}, {"content-type", "application/grpc"}, {"te", "trailers"}} {
			enc.WriteField(hpack.HeaderField{Name: f[0], Value: f[1]})
		}
		if err := fr.WriteHeaders(http2.HeadersFrameParam{StreamID: uint32(2*i + 1), BlockFragment: hb.Bytes(), EndHeaders: true}); err != nil {
			t.Logf("the server closed the connection after %d streams: %v", i, err)
			break
		}
	}
	return c
}

// rss is the resident memory of a process, in bytes.
func rss(t *testing.T, p *proc) float64 {
	t.Helper()
	v := procStatus(p, "VmRSS")
	if v == 0 {
		t.Fatalf("%s: no VmRSS", p.name)
	}
	return v
}
