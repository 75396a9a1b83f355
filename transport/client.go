package transport

import (
	"bytes"
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log"
	"os"
	"runtime/debug"
	"sync/atomic"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/keepalive"
	"google.golang.org/grpc/status"

	"github.com/fedpq/fedpq/corr"
	"github.com/fedpq/fedpq/experiment"
	"github.com/fedpq/fedpq/fl"
	"github.com/fedpq/fedpq/mech"
	"github.com/fedpq/fedpq/model"
	"github.com/fedpq/fedpq/secagg"
	pb "github.com/fedpq/fedpq/transport/fedpqpb"
)

// ClientConfig is how a client takes part in a server's run.
type ClientConfig struct {
	Server  string // host:port
	ID      int    // the client's id K: its partition K of N, or its roster id
	Clients int    // N; 0 with Data: as the server says
	DataDir string // where the client's copy of a shared dataset is
	// Data, if not empty, is the client's own dataset, for a run whose
	// clients bring their own (DataFormat, if set, names its format).
	Data       string
	DataFormat string
	Key        ed25519.PrivateKey
	Token      string
	// Roster, if not nil, is where the client looks up its partners'
	// identities; without it, it takes them from the server.
	Roster Roster
	// Secret seeds the client's own randomness (its LDP coins, X25519 keys
	// and local shuffling), bound to each run's id; nil draws it from
	// crypto/rand, as a deployment should. The server never learns it.
	Secret []byte
	Creds  credentials.TransportCredentials
	// RetryFor is how long the client keeps reconnecting to a server it
	// lost (a restart) before it gives up.
	RetryFor time.Duration
	// Policy is what the client demands of the server; the zero value is
	// DefaultClientPolicy.
	Policy ClientPolicy
	// State is the file where the client records the rounds it answered
	// and each run's beacon, across restarts; "" keeps them in memory.
	State string
	// Trainer, if not "", is the command line of the client's own external
	// trainer (package extern), which trains its model; a run's model
	// "external" needs one. The client never runs a command the server
	// sends. TrainerTimeout bounds each of its requests (0: the default).
	// TrainerThreads is the threads it uses; 0: all the machine's cores.
	Trainer        string
	TrainerTimeout time.Duration
	TrainerThreads int
	// Metrics, if not nil, counts what the client does, for Prometheus;
	// the clients of one process share it.
	Metrics *ClientMetrics
	// Byzantine, if not the zero Attack, makes the client attack within
	// the support (fl.Attack): for tests and red-teaming. The server is not
	// told; its messages are ones an honest client could send.
	Byzantine fl.Attack
	// Delay is how long the client waits after it trained before it says
	// Ready (mode async) or uploads (mode sync): stragglers for tests,
	// demos and timing one mode against the other.
	Delay Delay

	Log *log.Logger
}

// Client is one federated client.
type Client struct {
	cfg   ClientConfig
	creds credentials.TransportCredentials
	// handshake, for a TLS client, is why its last TLS handshake failed.
	handshake *lastError
	secret    []byte
	// runSecret, secret bound to the run's id, is what the client's draws
	// in the run derive from.
	runSecret []byte
	log       *log.Logger
	yaml      string // the run's configuration, from the first Hello
	su        *experiment.Setup
	m         mech.Mechanism
	tr        fl.Trainer
	labels    []int32 // what it trains on: its data's labels, or a label-flip attacker's flipped copy
	specs     []model.TensorSpec
	params    int
	policy    ClientPolicy
	state     *clientState
	beacon    [32]byte // the run's beacon commitment, secure runs
	// last is the client's last plain upload, of run lastRun: what it
	// sends again if a restarted server asks for that round again.
	last    *pb.Upload
	lastRun []byte
	// held, in an asynchronous run, is the weights the client trained and
	// holds for a buffer (asyncclient.go).
	held *heldWeights
	// fleet, if not nil, is the fleet this client runs in: it shares the
	// fleet's setup, trainers and workers, and counts into its summary.
	fleet *Fleet
}

// NewClient checks cfg.
func NewClient(cfg ClientConfig) (*Client, error) {
	switch {
	case cfg.Data != "" && (cfg.ID < 0 || cfg.Clients < 0 || cfg.Clients > 0 && cfg.ID >= cfg.Clients):
		return nil, fmt.Errorf("client %d of %d: want 0 <= K < N", cfg.ID, cfg.Clients)
	case cfg.Data == "" && (cfg.Clients < 1 || cfg.ID < 0 || cfg.ID >= cfg.Clients):
		return nil, fmt.Errorf("partition %d/%d: want K/N with 0 <= K < N", cfg.ID, cfg.Clients)
	case cfg.Key == nil:
		return nil, errors.New("a client needs an identity key")
	case cfg.Creds == nil:
		return nil, errors.New("no transport credentials")
	}
	if cfg.Log == nil {
		cfg.Log = log.New(os.Stderr, fmt.Sprintf("fedpq client %d: ", cfg.ID), log.LstdFlags)
	}
	c := &Client{cfg: cfg, creds: cfg.Creds, secret: cfg.Secret, log: cfg.Log, policy: cfg.Policy}
	if cfg.Creds.Info().SecurityProtocol == "tls" {
		c.handshake = &lastError{}
		c.creds = handshakes{cfg.Creds, c.handshake}
	}
	if c.policy.SecAgg == (secagg.Policy{}) {
		c.policy.SecAgg = DefaultClientPolicy.SecAgg
	}
	if err := c.policy.SecAgg.Validate(); err != nil {
		return nil, err
	}
	var err error
	if c.state, err = loadClientState(cfg.State); err != nil {
		return nil, err
	}
	if c.secret == nil {
		c.secret = make([]byte, 32)
		rand.Read(c.secret)
	}
	return c, nil
}

// Run takes part in the run until the server says it is finished. It
// reconnects by itself when the connection is lost, for up to RetryFor.
func (c *Client) Run(ctx context.Context) (_ *pb.Finished, err error) {
	ended := c.cfg.Metrics.started()
	defer func() {
		if c.su != nil {
			c.su.Close() // its external trainer, if it has one
		}
		ended(err != nil && ctx.Err() == nil)
	}()
	lastOK := time.Now()
	backoff := 250 * time.Millisecond
	for {
		fin, joined, err := c.session(ctx)
		if fin != nil {
			return fin, nil
		}
		if joined {
			lastOK, backoff = time.Now(), 250*time.Millisecond
		}
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		if err == errPrepared {
			continue
		}
		if permanent(err) {
			return nil, err
		}
		if time.Since(lastOK) > c.cfg.RetryFor {
			return nil, fmt.Errorf("no server for %v: %w", c.cfg.RetryFor.Round(time.Second), err)
		}
		c.log.Printf("no session with the server (%v); reconnecting in %v", err, backoff)
		c.cfg.Metrics.reconnecting()
		select {
		case <-time.After(backoff):
		case <-ctx.Done():
			return nil, ctx.Err()
		}
		backoff = min(2*backoff, 5*time.Second)
	}
}

// runSecret is what a client's randomness in the run named id derives
// from: its own secret bound to the id. A server that runs the same
// settings again under a new id (with another out directory, which the
// id's hash covers) then gets fresh coins, training order and pair keys,
// not round t's message again: with the same message, two secure sums over
// client sets that differ by one client would give that client's message.
func runSecret(secret, id []byte) []byte {
	k := corr.Key(secret, "run "+hex.EncodeToString(id))
	return k[:]
}

// permanent reports an error that reconnecting will not cure: the server
// refused the client, the client cannot do what the run asks, or it and
// the server disagree on TLS.
func permanent(err error) bool {
	var local *setupError
	var mismatch *tlsMismatch
	if errors.As(err, &local) || errors.As(err, &mismatch) {
		return true
	}
	switch status.Code(err) {
	case codes.PermissionDenied, codes.InvalidArgument:
		return true
	}
	return false
}

// A client prepares the run (reads its data, starts its trainer) between
// the server's Hello and its Join, and a server gives a join only so long
// (ServerConfig.JoinTimeout, 10 s by default): a client that took longer
// than slowPrepare opens a new session to join in, rather than find the
// old one closed.
const slowPrepare = time.Second

var errPrepared = errors.New("prepared; joining anew")

// errConnectionLost ends a round whose stream broke while the client waited
// for the server; the session adds the stream's error.
var errConnectionLost = errors.New("connection lost")

// setupError is a failure on the client's side to prepare the run.
type setupError struct{ err error }

func (e *setupError) Error() string { return e.err.Error() }
func (e *setupError) Unwrap() error { return e.err }

// session is one connection: Hello, Join, then rounds until the end.
func (c *Client) session(ctx context.Context) (fin *pb.Finished, joined bool, err error) {
	// Keepalive pings find a server that vanished without closing the
	// connection; the server accepts a ping every 20 s at most. A ping
	// has pingTimeout to be answered.
	opts := []grpc.DialOption{grpc.WithTransportCredentials(c.creds),
		grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(1<<30), grpc.MaxCallSendMsgSize(1<<30),
			grpc.ForceCodecV2(newMessageCodec())),
		grpc.WithSharedWriteBuffer(true), // not held while idle: a fleet holds thousands of connections
		grpc.WithReadBufferSize(readBuffer),
		grpc.WithKeepaliveParams(keepalive.ClientParameters{Time: time.Minute, Timeout: pingTimeout})}
	if h := c.cfg.Metrics.stats(); h != nil {
		opts = append(opts, grpc.WithStatsHandler(h))
	}
	conn, err := grpc.NewClient(c.cfg.Server, opts...)
	if err != nil {
		return nil, false, &setupError{err}
	}
	defer conn.Close()
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	stream, err := pb.NewFederationClient(conn).Session(ctx)
	if err != nil {
		return nil, false, c.diagnose(ctx, err)
	}
	m, err := stream.Recv()
	if err != nil {
		return nil, false, c.diagnose(ctx, err)
	}
	hello := m.GetHello()
	if hello == nil {
		return nil, false, errors.New("the server did not open with a Hello")
	}
	if id := runID([]byte(hello.GetConfigYaml())); !bytes.Equal(hello.GetRunId(), id) {
		return nil, false, &setupError{fmt.Errorf("the server names its run %x, but the configuration it sent is run %x: a run's id is its configuration's hash", hello.GetRunId(), id)}
	}
	c.runSecret = runSecret(c.secret, hello.GetRunId())
	first, began := c.su == nil, time.Now()
	if err := c.prepare(hello.GetConfigYaml()); err != nil {
		return nil, false, err
	}
	if d := time.Since(began); first && d > slowPrepare {
		c.log.Printf("prepared its data and model in %v; joining in a new session", d.Round(time.Millisecond))
		return nil, false, errPrepared
	}
	if c.su.Config.SecureAggregation {
		if len(hello.GetBeacon()) != 32 {
			return nil, false, &setupError{fmt.Errorf("a secure run's beacon commitment of %d bytes", len(hello.GetBeacon()))}
		}
		if err := c.state.pin(hello.GetRunId(), hello.GetBeacon()); err != nil {
			return nil, false, &setupError{err}
		}
		c.beacon = [32]byte(hello.GetBeacon())
	}
	id := uint32(c.cfg.ID)
	err = stream.Send(&pb.ClientMessage{Body: &pb.ClientMessage_Join{Join: &pb.Join{
		Client: id, Clients: uint32(c.cfg.Clients), Identity: c.cfg.Key.Public().(ed25519.PublicKey),
		Signature: ed25519.Sign(c.cfg.Key, joinSigned(hello.GetRunId(), hello.GetChallenge(), id)),
		Token:     c.cfg.Token, Examples: uint64(len(c.su.Clients[0])), Ready: c.announced(hello.GetRunId()),
	}}})
	if errors.Is(err, io.EOF) {
		_, err = stream.Recv() // why the server ended the stream
	}
	if err != nil {
		return nil, false, err
	}
	if m, err = stream.Recv(); err != nil {
		return nil, false, err
	}
	if m.GetWelcome() == nil {
		return nil, false, errors.New("the server did not answer the Join with a Welcome")
	}
	c.routine("joined %s: run %x, after round %d", c.cfg.Server, hello.GetRunId(), m.GetWelcome().GetRoundsDone())
	c.used(m.GetWelcome().GetRoundsDone())
	defer c.cfg.Metrics.joined()()
	if c.fleet != nil {
		c.fleet.stats.connected.Add(1)
		defer c.fleet.stats.connected.Add(-1)
	}

	// Messages are read in their own goroutine, so that a partner's key
	// can arrive while the client trains.
	in := make(chan *pb.ServerMessage, 16)
	recvErr := make(chan error, 1)
	go func() {
		for {
			m, err := stream.Recv()
			if err != nil {
				recvErr <- err
				close(in)
				return
			}
			in <- m
		}
	}()
	var next *pb.ServerMessage
	for {
		m := next
		next = nil
		if m == nil {
			var ok bool
			if m, ok = <-in; !ok {
				err := <-recvErr
				if err == io.EOF {
					err = errors.New("the server closed the session")
				}
				return nil, true, err
			}
		}
		switch b := m.GetBody().(type) {
		case *pb.ServerMessage_RoundStart:
			if next, err = c.round(ctx, stream, in, hello.GetRunId(), b.RoundStart); err != nil {
				var bad *badRound
				if !errors.As(err, &bad) {
					if errors.Is(err, errConnectionLost) { // in is closed: why is waiting
						err = fmt.Errorf("%w: %v", err, <-recvErr)
					}
					return nil, true, err
				}
				c.log.Printf("round %d: %v", b.RoundStart.GetRound(), err)
			}
		case *pb.ServerMessage_Task:
			if next, err = c.task(ctx, stream, in, hello.GetRunId(), b.Task); err != nil {
				return nil, true, err
			}
		case *pb.ServerMessage_Discard:
			c.discard(b.Discard)
		case *pb.ServerMessage_Receipt:
			c.receipt(b.Receipt)
		case *pb.ServerMessage_Finished:
			return b.Finished, true, nil
		}
	}
}

// prepare builds the client's side of the run from the server's
// configuration: the data (its own dataset, read into the run's schema,
// or its partition of its copy of a shared dataset), the model and the
// mechanism. Only the client's own examples are kept. A server that comes
// back with another configuration is refused.
func (c *Client) prepare(y string) error {
	if c.su != nil {
		if y != c.yaml {
			return &setupError{errors.New("the server is now running another configuration")}
		}
		return nil
	}
	cfg := experiment.Default()
	if err := experiment.Parse([]byte(y), &cfg); err != nil {
		return &setupError{fmt.Errorf("the server's configuration: %w", err)}
	}
	if cfg.Clients != c.cfg.Clients && (c.cfg.Data == "" || c.cfg.Clients != 0) {
		return &setupError{fmt.Errorf("client %d of %d, but the run has %d clients", c.cfg.ID, c.cfg.Clients, cfg.Clients)}
	}
	if c.policy.RequireSecure && !cfg.SecureAggregation {
		return &setupError{errors.New("the run does not use secure aggregation, which this client requires")}
	}
	cfg.DataDir = c.cfg.DataDir
	if err := c.ownTrainer(&cfg); err != nil {
		return &setupError{err}
	}
	if c.cfg.DataFormat != "" {
		cfg.DataFormat = c.cfg.DataFormat
	}
	su, tr, err := c.setup(y, cfg)
	if err != nil {
		return &setupError{err}
	}
	m, err := mech.New(su.Engine.Mechanism, su.Engine.Mech)
	if err == nil {
		err = c.cfg.Byzantine.Check(m)
	}
	labels := su.Data.Train.Y
	if err == nil && c.cfg.Byzantine.Kind == fl.LabelFlip {
		labels, err = fl.FlipLabels(labels, su.Data.Train.Classes)
	}
	if err != nil {
		su.Close()
		return &setupError{err}
	}
	c.yaml, c.su, c.m, c.tr, c.labels, c.specs = y, su, m, tr, labels, su.Arch().Tensors()
	c.params = numParams(c.specs)
	c.cfg.Clients = cfg.Clients
	from := fmt.Sprintf("%s, partition %d/%d", cfg.Dataset, c.cfg.ID, c.cfg.Clients)
	if c.cfg.Data != "" {
		from = fmt.Sprintf("client %d of %d, its own data %s", c.cfg.ID, c.cfg.Clients, c.cfg.Data)
	}
	trainer := "fedpq's engine"
	if su.Pool != nil {
		trainer = fmt.Sprintf("trainer %q (%s, %d tensors)", cfg.Trainer, su.Pool.Name(), len(c.specs))
	}
	c.routine("%s: %d examples; model %s trained by %s, mechanism %s", from, len(su.Clients[0]), cfg.Model, trainer, cfg.Mechanism)
	if c.cfg.Byzantine.Kind != "" {
		c.log.Printf("attacking as a Byzantine client: %v (the server is not told)", c.cfg.Byzantine)
	}
	if c.cfg.Delay.Kind != "" {
		c.routine("a straggler by choice: --delay %v after each task's (sync: round's) training", c.cfg.Delay)
	}
	return nil
}

// setup is the client's data, model and trainer: its own, or, in a fleet,
// its data and the fleet's shared model and trainers.
func (c *Client) setup(y string, cfg experiment.Config) (*experiment.Setup, fl.Trainer, error) {
	if c.fleet != nil {
		return c.fleet.setup(y, cfg, c)
	}
	su, err := experiment.NewClientSetup(cfg, c.cfg.ID, c.cfg.Data)
	if err != nil {
		return nil, nil, err
	}
	// A partition leaves the rest of the dataset it was cut from as
	// garbage: give it back now, not at the scavenger's pace.
	debug.FreeOSMemory()
	tr, err := su.Worker()
	if err != nil {
		su.Close()
		return nil, nil, err
	}
	return su, tr, nil
}

// receipt logs the server's word on an upload.
func (c *Client) receipt(r *pb.Receipt) {
	if r.GetAccepted() {
		c.note(r.GetRound(), func(s *fleetStats) *atomic.Int64 { return &s.accepted })
		c.routine("round %d: upload accepted", r.GetRound())
		return
	}
	c.note(r.GetRound(), func(s *fleetStats) *atomic.Int64 { return &s.refused })
	c.log.Printf("round %d: upload refused: %s", r.GetRound(), r.GetError())
	c.cfg.Metrics.uploadRefused()
}

// lossPrivate reports whether a run's clients keep their training loss to
// themselves: a number computed on a client's data that no mechanism
// privatizes, which would leak beside an LDP upload or a secure sum. They
// send 0 instead, and the server reports no training loss.
func lossPrivate(c experiment.Config) bool {
	return c.Mechanism != "none" || c.SecureAggregation
}

// badRound is a RoundStart the client cannot take part in; it skips the
// round and waits for the next.
type badRound struct{ err error }

func (e *badRound) Error() string { return e.err.Error() }

// round takes part in one round: pair up (Paired mechanisms), train,
// encode, upload. It returns a message it read that belongs after the
// round (the next round's start, or the end).
func (c *Client) round(ctx context.Context, stream pb.Federation_SessionClient, in <-chan *pb.ServerMessage, runID []byte, rs *pb.RoundStart) (*pb.ServerMessage, error) {
	t := rs.GetRound()
	c.cfg.Metrics.roundStarted()
	if c.fleet != nil {
		c.fleet.stats.begin(t)
	}
	switch {
	case c.state.answered(runID, t):
		// A server that restarted asks again for the round it lost. A
		// plain round gets the very message it had (nothing new leaves);
		// a secure one, or one whose message this process no longer has,
		// is declined: a second masked input over another set of clients
		// would give its message away.
		if u := c.last; u != nil && rs.GetSecagg() == nil && string(c.lastRun) == string(runID) && u.GetRound() == t {
			c.log.Printf("round %d: asked again (the server restarted); sending the same upload", t)
			return nil, c.upload(stream, u)
		}
		return nil, c.decline(stream, t, "answered", fmt.Errorf("round %d of this run was answered before", t))
	case c.su.Config.SecureAggregation && rs.GetSecagg() == nil:
		return nil, c.decline(stream, t, "mismatch", fmt.Errorf("the run has secure aggregation, but round %d does not", t))
	case !c.su.Config.SecureAggregation && rs.GetSecagg() != nil:
		return nil, c.decline(stream, t, "mismatch", fmt.Errorf("round %d has secure aggregation, but the run does not", t))
	}
	// The model the update is encoded against: the round's, or, in an
	// asynchronous buffer or an over-selected round, the one the held
	// weights were trained from (their task's).
	var global [][]float32
	var held *heldWeights
	var err error
	if c.tasked() {
		if held, err = c.heldFor(runID, rs); err != nil {
			return nil, c.decline(stream, t, "held", err)
		}
		global = held.base
	} else if global, err = decodeTensors(rs.GetGlobal(), c.specs); err != nil {
		return nil, &badRound{fmt.Errorf("the global model: %w", err)}
	}
	ranges, err := decodeRanges(rs.GetRanges(), c.su.Engine.RangeCount(len(c.sizes())))
	if err != nil {
		return nil, &badRound{err}
	}
	deadline := time.Now().Add(time.Duration(rs.GetTimeLeftMilli()) * time.Millisecond)
	slot := mech.Slot{Private: corr.Derive(c.runSecret, "private", uint64(t))}
	switch c.m.Coupling() {
	case mech.Grouped, mech.Dithered:
		if len(rs.GetSharedKey()) != 32 {
			return nil, &badRound{fmt.Errorf("a shared key of %d bytes, want 32", len(rs.GetSharedKey()))}
		}
		slot.Shared = corr.NewStream([32]byte(rs.GetSharedKey()))
		slot.Index, slot.Size = int(rs.GetGroupIndex()), int(rs.GetGroupSize())
		if c.m.Coupling() == mech.Grouped && slot.Index >= slot.Size {
			return nil, &badRound{fmt.Errorf("group place %d of %d", slot.Index, slot.Size)}
		}
	}

	// A paired client sends its key share first, so that it travels
	// while the client trains.
	var me *corr.Identity
	partner := rs.GetPartner()
	if c.m.Coupling() == mech.Paired && partner >= 0 {
		if partner == int32(c.cfg.ID) || int(partner) >= c.cfg.Clients {
			return nil, &badRound{fmt.Errorf("partner %d", partner)}
		}
		if me, err = corr.NewIdentity(corr.Key(c.runSecret, "x25519", uint64(t))); err != nil {
			return nil, err
		}
		pub := me.Public()
		err := stream.Send(&pb.ClientMessage{Body: &pb.ClientMessage_KeyShare{KeyShare: &pb.KeyShare{
			Round: t, Client: uint32(c.cfg.ID), Partner: uint32(partner), PublicKey: pub,
			Signature: ed25519.Sign(c.cfg.Key, keyShareSigned(runID, t, uint32(c.cfg.ID), uint32(partner), pub)),
		}}})
		if err != nil {
			return nil, err
		}
	}

	start := time.Now()
	local, loss, err := c.trainRound(ctx, t, global, held, deadline)
	sent := loss
	if lossPrivate(c.su.Config) {
		sent = 0 // computed on the client's data, and not privatized
	}
	if err != nil {
		if c.su.Pool != nil && ctx.Err() == nil {
			// The trainer hung, exited or answered what fedpq refuses: the
			// client leaves this round (its trainer restarts for the next).
			c.log.Printf("round %d: local training failed: %v", t, err)
			return nil, c.decline(stream, t, "trainer", errors.New(trainerFailure(err)))
		}
		return nil, &setupError{err}
	}
	trained := time.Since(start)
	if held == nil {
		c.cfg.Metrics.trained(trained)
		// A synchronous round's straggler waits its --delay too, so that
		// the same fleet of stragglers can time sync against async
		// (scripts/async-deployed.sh). The round's deadline still holds.
		if d := c.cfg.Delay.wait(c.runSecret, c.cfg.ID, c.cfg.Clients, int(t)-1); d > 0 {
			select {
			case <-time.After(d):
			case <-ctx.Done():
				return nil, ctx.Err()
			}
		}
	}

	var next *pb.ServerMessage
	if me != nil {
		next, err = c.pair(ctx, stream, in, runID, rs, me, deadline, &slot)
		if err != nil {
			return nil, err
		}
	}
	var payloads [][]byte
	c.busy(func() {
		start := time.Now()
		payloads, err = c.cfg.Byzantine.Encode(c.m, c.su.Engine.Input(), global, local, ranges, slot, corr.Derive(c.runSecret, "byzantine-constant"))
		c.cfg.Metrics.encoded(time.Since(start))
	})
	if err != nil {
		return next, &badRound{err}
	}
	if rs.GetSecagg() != nil {
		c.routine("round %d: trained in %v (loss %.4f), encoded as %s; secure aggregation", t, trained.Round(time.Millisecond), loss, role(slot))
		later, err := c.secureUpload(ctx, stream, in, runID, rs, payloads, sent)
		if next == nil {
			next = later
		}
		if held != nil {
			held.uploaded = t
		}
		return next, err
	}
	size := 0
	for _, p := range payloads {
		size += len(p)
	}
	if err := c.state.answer(runID, t); err != nil {
		return next, &setupError{err}
	}
	c.last, c.lastRun = &pb.Upload{Round: t, Payloads: payloads, Loss: sent}, runID
	if held != nil {
		held.uploaded = t
	}
	if err := c.upload(stream, c.last); err != nil {
		return nil, err
	}
	c.note(t, func(s *fleetStats) *atomic.Int64 { return &s.uploaded })
	c.routine("round %d: trained in %v (loss %.4f), uploaded %d bytes as %s", t, trained.Round(time.Millisecond), loss, size, role(slot))
	return next, nil
}

// upload sends u, plain or masked.
func (c *Client) upload(stream pb.Federation_SessionClient, u *pb.Upload) error {
	if err := stream.Send(&pb.ClientMessage{Body: &pb.ClientMessage_Upload{Upload: u}}); err != nil {
		return err
	}
	c.cfg.Metrics.uploaded()
	return nil
}

// trainRound is the client's weights for round t: trained from global, or
// in an asynchronous buffer the held weights, trained already.
func (c *Client) trainRound(ctx context.Context, t uint32, global [][]float32, held *heldWeights, deadline time.Time) ([][]float32, float64, error) {
	if held != nil {
		return held.local, held.loss, nil
	}
	return c.train(ctx, t, global, deadline)
}

// train trains the client's model from global for round t. An external
// trainer must answer before the round's deadline, if there is one (an
// asynchronous task has none: it takes the time it takes).
func (c *Client) train(ctx context.Context, t uint32, global [][]float32, deadline time.Time) ([][]float32, float64, error) {
	if c.su.Pool != nil && !deadline.IsZero() {
		var cancel context.CancelFunc
		ctx, cancel = context.WithDeadline(ctx, deadline)
		defer cancel()
	}
	train := c.su.Data.Train
	return c.tr.Train(ctx, global, train.X, c.labels, c.su.Clients[0], model.TrainConfig{
		Epochs: c.su.Engine.Epochs, Batch: c.su.Engine.Batch, Seed: corr.Derive(c.runSecret, "local", uint64(t)).Uint64(),
		Client: c.cfg.ID, Round: int(t), ProxMu: c.su.Engine.ProxMu,
	})
}

func role(s mech.Slot) string {
	switch s.Role {
	case mech.Leader:
		return "a pair's leader"
	case mech.Follower:
		return "a pair's follower"
	}
	return "a lone client"
}

// pair waits for the partner's key share, checks its signature against the
// partner's identity (from the roster, else as the server relays it) and
// sets the slot's role and shared bits; in transfer mode the leader sends
// its shared bits sealed and the follower waits for them. A partner that
// leaves, or whose share or seal fails its check, leaves the client alone:
// an exact ldpq client. It returns a message of a later round, if it read
// one.
func (c *Client) pair(ctx context.Context, stream pb.Federation_SessionClient, in <-chan *pb.ServerMessage, runID []byte, rs *pb.RoundStart, me *corr.Identity, deadline time.Time, slot *mech.Slot) (*pb.ServerMessage, error) {
	t, self, partner := rs.GetRound(), uint32(c.cfg.ID), uint32(rs.GetPartner())
	identity := ed25519.PublicKey(rs.GetPartnerIdentity())
	if c.cfg.Roster != nil {
		id, ok := c.cfg.Roster[partner]
		if !ok {
			c.log.Printf("round %d: partner %d is not on the roster; encoding alone", t, partner)
			return nil, nil
		}
		if !bytes.Equal(id, identity) {
			c.log.Printf("round %d: the server gave partner %d an identity not on the roster", t, partner)
		}
		identity = id
	}
	// Wait for the partner until shortly before the deadline, so that the
	// upload still makes it.
	wait := time.NewTimer(time.Until(deadline) - max(time.Second, time.Until(deadline)/10))
	defer wait.Stop()
	recv := func(want string) (*pb.ServerMessage, *pb.ServerMessage, error) {
		for {
			select {
			case m, ok := <-in:
				if !ok {
					return nil, nil, fmt.Errorf("%w during pairing", errConnectionLost)
				}
				switch b := m.GetBody().(type) {
				case *pb.ServerMessage_PartnerKey:
					if want == "key" && b.PartnerKey.GetRound() == t {
						return m, nil, nil
					}
				case *pb.ServerMessage_PartnerSealed:
					if want == "sealed" && b.PartnerSealed.GetRound() == t {
						return m, nil, nil
					}
				case *pb.ServerMessage_PartnerGone:
					if b.PartnerGone.GetRound() == t {
						c.log.Printf("round %d: partner %d left; encoding alone", t, partner)
						return nil, nil, nil
					}
				case *pb.ServerMessage_RoundStart, *pb.ServerMessage_Finished:
					return nil, m, nil // the round is over
				case *pb.ServerMessage_Receipt:
					c.receipt(b.Receipt)
				}
			case <-wait.C:
				c.log.Printf("round %d: nothing from partner %d in time; encoding alone", t, partner)
				return nil, nil, nil
			case <-ctx.Done():
				return nil, nil, ctx.Err()
			}
		}
	}
	m, next, err := recv("key")
	if m == nil {
		return next, err
	}
	ks := m.GetPartnerKey()
	if ks.GetClient() != partner || ks.GetPartner() != self {
		c.log.Printf("round %d: a key share from %d to %d, not from partner %d; encoding alone", t, ks.GetClient(), ks.GetPartner(), partner)
		return nil, nil
	}
	if err := verify(identity, keyShareSigned(runID, t, partner, self, ks.GetPublicKey()), ks.GetSignature()); err != nil {
		c.log.Printf("round %d: partner %d's key share: %v; encoding alone", t, partner, err)
		return nil, nil
	}
	p, err := me.Agree(ks.GetPublicKey(), uint64(t), uint64(self), uint64(partner))
	if err != nil {
		c.log.Printf("round %d: %v; encoding alone", t, err)
		return nil, nil
	}
	leader := p.Leader(uint64(self))
	role := mech.Follower
	if leader {
		role = mech.Leader
	}
	if !c.su.Engine.Transfer {
		slot.Role, slot.Shared = role, p.Shared()
		return nil, nil
	}
	n := fl.TransferBytes(c.m, c.params)
	if n == 0 {
		return nil, &setupError{fmt.Errorf("%s does not say how many shared bits it uses", c.m.Name())}
	}
	if leader {
		bits := make([]byte, n)
		corr.Derive(c.runSecret, "leader-bits", uint64(t)).Read(bits)
		if err := stream.Send(&pb.ClientMessage{Body: &pb.ClientMessage_Sealed{Sealed: &pb.Sealed{
			Round: t, Client: self, Partner: partner, Ciphertext: p.Seal(bits),
		}}}); err != nil {
			return nil, err
		}
		src, err := corr.NewBytes(bits)
		if err != nil {
			return nil, err
		}
		slot.Role, slot.Shared = role, src
		return nil, nil
	}
	m, next, err = recv("sealed")
	if m == nil {
		return next, err
	}
	opened, err := p.Open(m.GetPartnerSealed().GetCiphertext())
	if err != nil || len(opened) != n {
		c.log.Printf("round %d: partner %d's shared bits: %v (%d bytes); encoding alone", t, partner, err, len(opened))
		return nil, nil
	}
	src, err := corr.NewBytes(opened)
	if err != nil {
		return nil, err
	}
	slot.Role, slot.Shared = role, src
	return nil, nil
}
