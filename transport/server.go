// Package transport runs fedpq for real: a gRPC server that drives the
// round engine of package fl, and clients in processes of their own that
// hold their data, train, pair up and upload. The server and the
// simulation run the same rounds (fl.Plan) and the same mechanisms; only
// where the uploads come from differs.
package transport

import (
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"errors"
	"fmt"
	"log"
	"math"
	"net"
	"os"
	"path/filepath"
	"runtime/debug"
	"slices"
	"strings"
	"sync"
	"time"

	"golang.org/x/net/netutil"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/keepalive"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/fedpq/fedpq/corr"
	"github.com/fedpq/fedpq/experiment"
	"github.com/fedpq/fedpq/fl"
	"github.com/fedpq/fedpq/mech"
	"github.com/fedpq/fedpq/report"
	pb "github.com/fedpq/fedpq/transport/fedpqpb"
)

// ServerConfig is how a server runs a federated training run.
type ServerConfig struct {
	Run experiment.Config
	// MinClients is how many clients must be connected for a round to
	// start (0: all of Run.Clients, for up to Grace). Once they are, the
	// server waits up to Gather for the others.
	MinClients int
	Gather     time.Duration
	// Grace bounds the wait for the whole fleet when MinClients is 0:
	// after it a round goes on with the clients connected, so that one
	// client gone for good does not stall the run (default 2 minutes).
	Grace time.Duration
	// MaxWait, if positive, bounds the wait for an explicit MinClients:
	// after it the server stops with an error naming who is missing,
	// rather than wait for ever.
	MaxWait time.Duration
	// RoundTimeout is each round's deadline: the round ends with the
	// uploads received by then.
	RoundTimeout time.Duration
	// KeyShareTimeout is how long after a round starts a paired client
	// has to send its key share (it sends it before it trains); then its
	// partner is told to encode alone (default 30 s, at most half the
	// round).
	KeyShareTimeout time.Duration
	// JoinTimeout is how long a connection may take to join before it is
	// closed; it also bounds the TLS handshake and a connection's idle
	// time (default 10 s).
	JoinTimeout time.Duration
	// Token, if not empty, must be presented by every joining client.
	Token string
	// Roster, if not nil, is the only identities that may join, each as
	// the client id it is enrolled for.
	Roster Roster
	Log    *log.Logger
	// Progress, if not nil, sees every round once it is checkpointed.
	Progress func(report.Round)
}

// Server is a fedpq server: the round engine behind a gRPC service.
type Server struct {
	pb.UnimplementedFederationServer
	cfg    ServerConfig
	su     *experiment.Setup
	eng    *fl.Engine
	rec    *experiment.Recorder
	runID  []byte
	yaml   []byte
	log    *log.Logger
	fleet  bool // MinClients was left to its default: the whole fleet, for up to Grace
	paired bool // the mechanism pairs clients, so the server relays key shares
	sealed int  // transfer mode: the size of a leader's sealed bits; 0 otherwise

	mu       sync.Mutex
	pins     *pins                // token mode: each id's first key
	pending  int                  // streams that have not joined (yet)
	joined   map[uint32]time.Time // when each id last joined
	refusals logWindow            // refused joins, logged at a bounded rate
	sessions map[uint32]*session
	changed  chan struct{} // closed, and replaced, whenever sessions or the round change
	round    *serverRound  // the round under way, or nil
	finished *pb.Finished  // once the run is over
}

// Limits on what one peer can make the server hold or do. A client sends
// one stream at a time, a key share and at most one sealed message per
// round, and one upload; these leave honest clients room and bound the
// rest.
const (
	streamsPerConn = 4 // concurrent streams on one connection
	// maxInvalid refused messages in a round end a session: the client is
	// out of the round, and may join again for the next.
	maxInvalid = 8
	// loggedRefusals is how many of a session's refusals per round are
	// logged; the rest are counted, so that a flood cannot fill the log.
	loggedRefusals = 3
	// rejoinInterval is the least time between two joins of one id: a
	// client that reconnects in a loop cannot flood the log either.
	rejoinInterval = time.Second
	// loggedJoinRefusals is how many refused joins are logged a minute.
	loggedJoinRefusals = 10
)

// logWindow counts events per minute, to log the first few of each.
type logWindow struct {
	start  time.Time
	n      int
	missed int
}

// log reports whether an event now should be logged, and how many went
// unlogged in the window that ended, if one did.
func (w *logWindow) log(now time.Time, limit int) (ok bool, missed int) {
	if now.Sub(w.start) >= time.Minute {
		missed = w.missed
		w.start, w.n, w.missed = now, 0, 0
	}
	w.n++
	if w.n > limit {
		w.missed++
		return false, missed
	}
	return true, missed
}

// serverRound is the round under way.
type serverRound struct {
	plan   *fl.Plan
	pos    map[uint32]int // client id to position
	state  []int          // per position: waiting, uploaded, refused or gone
	keyed  []bool         // per position: its key share was relayed
	sealed []bool         // per position: its sealed bits were relayed
	late   []bool         // per position: no key share by the key-share deadline
	setup  int64          // bytes of key shares and sealed bits relayed
	secure *secureRound   // secure rounds: the protocol's state
}

func newServerRound(plan *fl.Plan) *serverRound {
	n := len(plan.Clients)
	rd := &serverRound{plan: plan, pos: map[uint32]int{}, state: make([]int, n),
		keyed: make([]bool, n), sealed: make([]bool, n), late: make([]bool, n)}
	for pos, k := range plan.Clients {
		rd.pos[uint32(k)] = pos
	}
	return rd
}

const (
	waiting = iota
	uploaded
	refused
	gone
)

// session is one connected client.
type session struct {
	id       uint32
	identity ed25519.PublicKey
	examples int
	out      chan *pb.ServerMessage
	ctx      context.Context
	cancel   context.CancelFunc

	// Guarded by Server.mu:
	window  int   // the round its refusals are counted for
	refused int   // refused messages in that round
	err     error // why the server closed the session, if it did
}

// send queues m for the client; a client too slow to take its messages
// is disconnected rather than left to hold up the server.
func (s *session) send(m *pb.ServerMessage) {
	select {
	case s.out <- m:
	default:
		s.cancel()
	}
}

// close ends the session with err, which the client receives. Server.mu
// is held.
func (s *session) close(err error) {
	if s.err == nil {
		s.err = err
	}
	s.cancel()
}

// NewServer prepares the run of cfg.Run: its test data and model, the
// engine, and the run directory. If the directory holds a checkpoint of
// the same run, the server resumes after its round.
func NewServer(cfg ServerConfig) (_ *Server, err error) {
	c := cfg.Run
	if c.Dropout != 0 {
		return nil, errors.New("dropout is simulated only: a server's clients drop out for real")
	}
	if cfg.Token == "" && cfg.Roster == nil {
		return nil, errors.New("a server needs a join token or a roster, so that only enrolled clients take part")
	}
	fleet := cfg.MinClients == 0
	if fleet {
		cfg.MinClients = c.Clients
	}
	if cfg.MinClients < 1 || cfg.MinClients > c.Clients {
		return nil, fmt.Errorf("min-clients %d: want 1 to %d", cfg.MinClients, c.Clients)
	}
	if cfg.RoundTimeout <= 0 {
		return nil, fmt.Errorf("round timeout %v must be positive", cfg.RoundTimeout)
	}
	if cfg.Grace == 0 {
		cfg.Grace = 2 * time.Minute
	}
	if cfg.KeyShareTimeout == 0 {
		cfg.KeyShareTimeout = min(30*time.Second, cfg.RoundTimeout/2)
	}
	if cfg.JoinTimeout == 0 {
		cfg.JoinTimeout = 10 * time.Second
	}
	if cfg.Grace < 0 || cfg.KeyShareTimeout < 0 || cfg.JoinTimeout < 0 {
		return nil, fmt.Errorf("grace %v, key-share timeout %v and join timeout %v must be positive", cfg.Grace, cfg.KeyShareTimeout, cfg.JoinTimeout)
	}
	for id := range cfg.Roster {
		if int(id) >= c.Clients {
			return nil, fmt.Errorf("roster: client %d, but the run has clients 0 to %d", id, c.Clients-1)
		}
	}
	if cfg.Log == nil {
		cfg.Log = log.New(os.Stderr, "fedpq server: ", log.LstdFlags)
	}
	su, err := experiment.NewServerSetup(c)
	if err != nil {
		return nil, err
	}
	defer func() {
		if err != nil {
			su.Close() // its external trainer, if it has one
		}
	}()
	// A partitioned run's training set was read to partition it, and is
	// garbage now: give it back rather than at the scavenger's pace.
	debug.FreeOSMemory()
	tr, err := su.Worker()
	if err != nil {
		return nil, err
	}
	// init_weights, read here only (with its sha256 recorded in the
	// configuration): the clients get the global model every round.
	start, err := su.Initial()
	if err != nil {
		return nil, err
	}
	// The configuration as run, its partition and model resolved: what
	// config.yaml records, the clients are sent, and the run id hashes.
	c = su.Config
	y, err := c.YAML()
	if err != nil {
		return nil, err
	}
	resume, err := resumable(c.Dir(), y)
	if err != nil {
		return nil, err
	}
	if err := os.MkdirAll(c.Dir(), 0o755); err != nil {
		return nil, err
	}
	secret, err := loadSecret(c.Dir())
	if err != nil {
		return nil, err
	}
	var pinned *pins
	if cfg.Roster == nil {
		if pinned, err = loadPins(c.Dir()); err != nil {
			return nil, err
		}
	}
	m, err := mech.New(su.Engine.Mechanism, su.Engine.Mech)
	if err != nil {
		return nil, err
	}
	id := sha256.Sum256(y)
	eng, err := fl.New(su.Engine, fl.Task{
		Model: start, Trainers: []fl.Trainer{tr}, Data: su.Data, Remote: c.Clients, Validation: su.Validation,
		Secret: secret, RunID: id[:16],
	})
	if err != nil {
		return nil, err
	}
	rec, err := experiment.NewRecorder(c, eng, resume)
	if err != nil {
		return nil, err
	}
	if !resume {
		if err := rec.StartedFrom(su, start, tr); err != nil {
			return nil, err
		}
	}
	s := &Server{
		cfg: cfg, su: su, eng: eng, rec: rec, runID: id[:16], yaml: y, log: cfg.Log,
		fleet: fleet, paired: m.Coupling() == mech.Paired, pins: pinned, joined: map[uint32]time.Time{},
		sessions: map[uint32]*session{}, changed: make(chan struct{}),
	}
	if s.paired && su.Engine.Transfer {
		s.sealed = fl.TransferBytes(m, numParams(su.Arch().Tensors())) + corr.SealedOverhead
	}
	if resume {
		s.log.Printf("resuming %s after round %d from its checkpoint; model sha256 %x", c.Dir(), eng.Done(), short(eng.Global()))
	}
	return s, nil
}

// resumable reports whether dir holds a checkpoint of the run whose
// configuration is y. A checkpoint of another run is an error, not
// something to overwrite.
func resumable(dir string, y []byte) (bool, error) {
	if _, err := os.Stat(filepath.Join(dir, experiment.CheckpointFile)); err != nil {
		return false, nil
	}
	old, err := os.ReadFile(filepath.Join(dir, "config.yaml"))
	if err != nil {
		return false, fmt.Errorf("%s has a checkpoint but no config.yaml: %w", dir, err)
	}
	if string(old) != string(y) {
		return false, fmt.Errorf("%s holds a checkpoint of another configuration: remove it or choose another --out", dir)
	}
	return true, nil
}

// short is the first bytes of a model's hash, for the log.
func short(w [][]float32) []byte { h := fl.Hash(w); return h[:8] }

// MaxMessageBytes is the largest message the server and its clients
// accept: the model as float32 and a margin. An upload is at most as large.
func (s *Server) MaxMessageBytes() int {
	n := 0
	for _, t := range s.su.Arch().Tensors() {
		k := 4
		for _, d := range t.Shape {
			k *= d
		}
		n += k + 16
	}
	return n + 1<<16
}

// Serve runs the whole run, serving clients on lis, and returns its
// summary. It returns when the last round is done and the clients were
// told, or when ctx is cancelled (a checkpoint of the last round is kept).
//
// Whoever connects is held to limits, so that no peer, joined or not, can
// make the server hold unbounded memory: at most 4 streams per connection,
// MaxConns connections, MaxPending streams not yet joined, JoinTimeout to
// join, and keepalive pings that close connections whose peer is gone.
func (s *Server) Serve(ctx context.Context, lis net.Listener, opts ...grpc.ServerOption) (*report.Summary, error) {
	opts = append(opts,
		grpc.MaxRecvMsgSize(s.MaxMessageBytes()), grpc.MaxSendMsgSize(s.MaxMessageBytes()),
		grpc.MaxConcurrentStreams(streamsPerConn),
		grpc.ConnectionTimeout(s.cfg.JoinTimeout),
		grpc.KeepaliveParams(keepalive.ServerParameters{
			MaxConnectionIdle: s.cfg.JoinTimeout, Time: time.Minute, Timeout: 20 * time.Second,
		}),
		grpc.KeepaliveEnforcementPolicy(keepalive.EnforcementPolicy{MinTime: 20 * time.Second}),
	)
	lis = netutil.LimitListener(lis, s.MaxConns())
	gs := grpc.NewServer(opts...)
	pb.RegisterFederationServer(gs, s)
	errc := make(chan error, 1)
	go func() { errc <- gs.Serve(lis) }()
	s.log.Printf("listening on %s: run %x, %s with %s, %d rounds, %d clients (waiting for %d)",
		lis.Addr(), s.runID, s.su.Config.DatasetName(), s.cfg.Run.Mechanism, s.cfg.Run.Rounds, s.cfg.Run.Clients, s.cfg.MinClients)

	err := s.run(ctx)
	if errors.Is(err, context.Canceled) {
		err = fmt.Errorf("stopped after round %d; its checkpoint is kept, and the server resumes from it when started again: %w", s.eng.Done(), err)
	}
	if err == nil {
		s.finish()
		// Give the sessions a moment to deliver Finished before closing.
		stopped := make(chan struct{})
		go func() { gs.GracefulStop(); close(stopped) }()
		select {
		case <-stopped:
		case <-time.After(5 * time.Second):
			gs.Stop()
		}
	} else {
		gs.Stop()
		s.rec.Fail(err)
	}
	s.su.Close()
	s.rec.SetTrainerCost(s.su.TrainerCost())
	sum, cerr := s.rec.Close()
	if err == nil {
		err = cerr
	}
	select {
	case serr := <-errc:
		if err == nil && serr != nil && !errors.Is(serr, grpc.ErrServerStopped) {
			err = serr
		}
	default:
	}
	return sum, err
}

// MaxConns is how many connections the server holds at once: two per
// client (one reconnecting while the old one closes) and a margin. More
// wait in the listen queue until a connection closes.
func (s *Server) MaxConns() int { return 2*s.cfg.Run.Clients + 32 }

// MaxPending is how many streams may wait to join at once; more are
// refused (ResourceExhausted: clients retry).
func (s *Server) MaxPending() int { return s.cfg.Run.Clients + 32 }

// notify wakes whoever waits on a change. s.mu must be held.
func (s *Server) notify() {
	close(s.changed)
	s.changed = make(chan struct{})
}

// run runs the rounds left.
func (s *Server) run(ctx context.Context) error {
	for s.eng.Done() < s.eng.Rounds() {
		online, err := s.gather(ctx)
		if err != nil {
			return err
		}
		r, err := s.runRound(ctx, online)
		if err != nil {
			return err
		}
		if err := s.rec.Round(r); err != nil {
			// The round is done and the engine has moved on; losing its
			// record or checkpoint should not lose the run.
			s.log.Printf("round %d: recording it: %v", r.Round, err)
		}
		if s.cfg.Progress != nil {
			s.cfg.Progress(r)
		}
		if r.Discarded != "" {
			s.log.Printf("round %d: aggregate discarded, the model is unchanged: %s", r.Round, r.Discarded)
		}
		acc := ""
		if r.Accuracy != nil {
			acc = fmt.Sprintf(", accuracy %.2f%%", 100**r.Accuracy)
		}
		s.log.Printf("round %d done: %d uploads, %d missing%s, %.3g bits/param, eps spent %g; checkpoint saved, model sha256 %x",
			r.Round, r.Clients, r.Dropped, acc, r.UplinkBitsPerParam, r.EpsilonSpent, short(s.eng.Global()))
	}
	return nil
}

// gather waits for the clients a round needs, MinClients connected, and
// then up to Gather for the rest, and returns the ids of those connected.
// With the default minimum (the whole fleet) it waits up to Grace, then
// goes on with those it has. While it waits it logs, every 30 s, who is
// missing.
func (s *Server) gather(ctx context.Context) ([]uint32, error) {
	start := time.Now()
	var since, logged time.Time
	for {
		s.mu.Lock()
		n, ch := len(s.sessions), s.changed
		missing := s.missing()
		s.mu.Unlock()
		need, graceLeft := s.cfg.MinClients, time.Duration(0)
		if s.fleet {
			if graceLeft = s.cfg.Grace - time.Since(start); graceLeft <= 0 {
				need = 1
			}
		}
		if n >= need {
			if since.IsZero() {
				since = time.Now()
			}
			if n == s.cfg.Run.Clients || time.Since(since) >= s.cfg.Gather {
				if n < s.cfg.Run.Clients && need < s.cfg.MinClients {
					s.log.Printf("round %d: going on with %d of %d clients after waiting %v (--grace) for %s",
						s.eng.Done()+1, n, s.cfg.Run.Clients, s.cfg.Grace, missing)
				}
				break
			}
		} else {
			since = time.Time{}
			waited := time.Since(start)
			if !s.fleet && s.cfg.MaxWait > 0 && waited >= s.cfg.MaxWait {
				return nil, fmt.Errorf("round %d: %d of the %d clients needed connected after waiting %v (--max-wait); missing %s",
					s.eng.Done()+1, n, need, s.cfg.MaxWait, missing)
			}
			if time.Since(logged) >= 30*time.Second {
				wait := "waiting for them"
				switch {
				case graceLeft > 0:
					wait = fmt.Sprintf("going on with those connected in %v", graceLeft.Round(time.Second))
				case !s.fleet && s.cfg.MaxWait > 0:
					wait = fmt.Sprintf("stopping in %v (--max-wait)", (s.cfg.MaxWait - waited).Round(time.Second))
				}
				s.log.Printf("round %d: waiting for clients for %v (%d of %d connected, %d needed): missing %s; %s",
					s.eng.Done()+1, waited.Round(time.Second), n, s.cfg.Run.Clients, need, missing, wait)
				logged = time.Now()
			}
		}
		wait := 30*time.Second - time.Since(logged)
		if !since.IsZero() {
			wait = s.cfg.Gather - time.Since(since)
		} else if graceLeft > 0 {
			wait = min(wait, graceLeft)
		} else if !s.fleet && s.cfg.MaxWait > 0 {
			wait = min(wait, s.cfg.MaxWait-time.Since(start))
		}
		select {
		case <-ch:
		case <-time.After(wait):
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	ids := make([]uint32, 0, len(s.sessions))
	for id := range s.sessions {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	return ids, nil
}

// missing names the clients not connected, the first ten of them. s.mu is
// held.
func (s *Server) missing() string {
	var ids []string
	left := 0
	for id := range s.cfg.Run.Clients {
		if s.sessions[uint32(id)] == nil {
			if len(ids) < 10 {
				ids = append(ids, fmt.Sprint(id))
			} else {
				left++
			}
		}
	}
	if left > 0 {
		ids = append(ids, fmt.Sprintf("and %d more", left))
	}
	return "clients " + strings.Join(ids, ", ")
}

// runRound runs one round among the online clients: it announces the
// round to those chosen, waits for their uploads until they are all in or
// gone, or the deadline, and ends the round with what it has.
func (s *Server) runRound(ctx context.Context, online []uint32) (report.Round, error) {
	ids := make([]int, len(online))
	for i, id := range online {
		ids[i] = int(id)
	}
	deadline := time.Now().Add(s.cfg.RoundTimeout)
	s.mu.Lock()
	t := s.eng.Done() + 1
	plan, err := s.eng.Begin(t, ids)
	if err != nil {
		s.mu.Unlock()
		return report.Round{}, err
	}
	rd := newServerRound(plan)
	identity := map[uint32]ed25519.PublicKey{}
	for _, k := range plan.Clients {
		if ss := s.sessions[uint32(k)]; ss != nil {
			identity[uint32(k)] = ss.identity
		}
	}
	rd.secure = newSecureRound(plan, deadline, identity)
	s.round = rd
	global := encodeTensors(plan.Global)
	ranges := encodeRanges(plan.Ranges)
	for pos, k := range plan.Clients {
		if s.sessions[uint32(k)] == nil { // left since it was counted
			rd.state[pos] = gone
		}
	}
	for pos, k := range plan.Clients {
		if rd.state[pos] == gone {
			continue
		}
		msg := &pb.RoundStart{
			Round: uint32(t), Position: uint32(pos), Global: global, Ranges: ranges,
			Partner: -1, TimeLeftMilli: time.Until(deadline).Milliseconds(),
		}
		if j := plan.Round.Partner(pos); j >= 0 && rd.state[j] != gone {
			msg.Partner = int32(plan.Clients[j])
			msg.PartnerIdentity = s.sessions[uint32(plan.Clients[j])].identity
		}
		if key, ok := plan.Round.SharedKey(pos); ok {
			msg.SharedKey = key[:]
		}
		gi, gs := plan.Round.Group(pos)
		msg.GroupIndex, msg.GroupSize = uint32(gi), uint32(gs)
		if rd.secure != nil {
			msg.Secagg = rd.secure.announce(plan)
		}
		s.sessions[uint32(k)].send(&pb.ServerMessage{Body: &pb.ServerMessage_RoundStart{RoundStart: msg}})
	}
	s.mu.Unlock()
	s.log.Printf("round %d: %d clients, %d pairs, deadline in %v", t, len(plan.Clients), plan.Round.Pairs(), s.cfg.RoundTimeout)

	timer := time.NewTimer(time.Until(deadline))
	defer timer.Stop()
	var keyShares <-chan time.Time
	if plan.Round.Pairs() > 0 {
		kt := time.NewTimer(s.cfg.KeyShareTimeout)
		defer kt.Stop()
		keyShares = kt.C
	}
wait:
	for {
		s.mu.Lock()
		open := slices.Contains(rd.state, waiting)
		var step <-chan time.Time
		if rd.secure != nil {
			// A secure round ends when its protocol does; each step
			// has a deadline of its own.
			open = !s.advance(rd, time.Now())
			step = time.After(time.Until(rd.secure.due))
		}
		ch := s.changed
		s.mu.Unlock()
		if !open {
			break
		}
		select {
		case <-ch:
		case <-step:
		case <-keyShares:
			keyShares = nil
			s.mu.Lock()
			s.keySharesDue(rd)
			s.mu.Unlock()
		case <-timer.C:
			if rd.secure != nil {
				continue // the keys step's deadline
			}
			s.log.Printf("round %d: deadline passed", t)
			break wait
		case <-ctx.Done():
			return report.Round{}, ctx.Err()
		}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.round = nil
	s.notify()
	for pos, st := range rd.state {
		if st == waiting {
			s.log.Printf("round %d: no upload from client %d by the deadline", t, plan.Clients[pos])
		}
	}
	r, err := s.eng.End(plan)
	if lossPrivate(s.cfg.Run) {
		r.TrainLoss = math.NaN() // the clients keep it (lossPrivate): null in metrics.jsonl
	}
	r.SetupBytes = rd.setup // what was relayed, signatures and framing included
	if rd.secure != nil {
		if wrong := rd.secure.srv.WrongShares(); len(wrong) > 0 {
			s.log.Printf("round %d: clients %v revealed shares that do not match their commitments; left out", t, wrong)
		}
	}
	return r, err
}

// decline takes a client that declines the round out of it: no step
// waits for it. s.mu is held.
func (s *Server) decline(sess *session, d *pb.Decline) error {
	rd := s.round
	if rd == nil || d.GetRound() != uint32(rd.plan.T) {
		return fmt.Errorf("declined round %d, which is not under way", d.GetRound())
	}
	pos, ok := rd.pos[sess.id]
	if !ok {
		return fmt.Errorf("round %d: declined, but not chosen", d.GetRound())
	}
	reason := d.GetReason()
	if len(reason) > 300 {
		reason = reason[:300] + "..."
	}
	s.log.Printf("round %d: client %d declined: %q", rd.plan.T, sess.id, reason)
	if rd.state[pos] == waiting {
		rd.state[pos] = refused
		s.partnerGone(rd, pos)
	}
	if sr := rd.secure; sr != nil {
		delete(sr.survivors, sess.id)
		sr.revealed[sess.id] = true
	}
	s.notify()
	return nil
}

// keySharesDue tells the partner of each client that sent no key share by
// the key-share deadline to encode alone, rather than wait for the round's
// deadline; a key share that comes later is refused. s.mu is held.
func (s *Server) keySharesDue(rd *serverRound) {
	for pos, st := range rd.state {
		if rd.keyed[pos] || st != waiting {
			continue
		}
		if j := rd.plan.Round.Partner(pos); j >= 0 && rd.state[j] == waiting {
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
	j := rd.plan.Round.Partner(pos)
	if j < 0 || rd.state[j] != waiting {
		return
	}
	if p := s.sessions[uint32(rd.plan.Clients[j])]; p != nil {
		p.send(&pb.ServerMessage{Body: &pb.ServerMessage_PartnerGone{PartnerGone: &pb.PartnerGone{
			Round: uint32(rd.plan.T), Partner: uint32(rd.plan.Clients[pos]),
		}}})
	}
}

// finish tells every client the run is over.
func (s *Server) finish() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.finished = &pb.Finished{Rounds: uint32(s.eng.Done())}
	for _, ss := range s.sessions {
		ss.send(&pb.ServerMessage{Body: &pb.ServerMessage_Finished{Finished: s.finished}})
	}
	s.log.Printf("run finished after %d rounds; results in %s", s.eng.Done(), s.cfg.Run.Dir())
}

// Session is one client's connection, from its Join to the run's end.
// The Hello is all a peer sees before it joins: the run's configuration,
// which holds no secret (round keys derive from the server's secret).
func (s *Server) Session(stream pb.Federation_SessionServer) error {
	ctx := stream.Context()
	addr := "unknown"
	if p, ok := peer.FromContext(ctx); ok {
		addr = p.Addr.String()
	}
	if !s.admit() {
		return status.Errorf(codes.ResourceExhausted, "%d connections are already joining; try again", s.MaxPending())
	}
	admitted := true
	defer func() {
		if admitted {
			s.admitted()
		}
	}()
	challenge := make([]byte, 32)
	rand.Read(challenge)
	hello := &pb.Hello{RunId: s.runID, Challenge: challenge, ConfigYaml: string(s.yaml)}
	if s.cfg.Run.SecureAggregation {
		c := s.eng.BeaconCommitment()
		hello.Beacon = c[:]
	}
	if err := stream.Send(&pb.ServerMessage{Body: &pb.ServerMessage_Hello{Hello: hello}}); err != nil {
		return err
	}
	m, err := recvWithin(stream, s.cfg.JoinTimeout)
	if err != nil {
		return err
	}
	sess, err := s.join(ctx, m.GetJoin(), challenge, addr)
	if err != nil {
		s.mu.Lock()
		ok, missed := s.refusals.log(time.Now(), loggedJoinRefusals)
		s.mu.Unlock()
		if missed > 0 {
			s.log.Printf("%d more refused joins in the last minute were not logged", missed)
		}
		if ok {
			s.log.Printf("refused a client at %s: %v", addr, err)
		}
		return err
	}
	s.admitted()
	admitted = false
	defer s.leave(sess)
	go func() {
		defer sess.cancel()
		for {
			m, err := stream.Recv()
			if err != nil {
				return
			}
			s.handle(sess, m)
		}
	}()
	for {
		select {
		case m := <-sess.out:
			if err := stream.Send(m); err != nil {
				return err
			}
			if m.GetFinished() != nil {
				return nil
			}
		case <-sess.ctx.Done():
			s.mu.Lock()
			err := sess.err
			s.mu.Unlock()
			if err == nil {
				err = status.Error(codes.Canceled, "session closed")
			}
			return err
		}
	}
}

// admit counts a stream that has yet to join, if there is room for it.
func (s *Server) admit() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.pending >= s.MaxPending() {
		return false
	}
	s.pending++
	return true
}

// admitted uncounts a stream that joined or ended.
func (s *Server) admitted() {
	s.mu.Lock()
	s.pending--
	s.mu.Unlock()
}

// recvWithin is the stream's next message, if it comes within d.
func recvWithin(stream pb.Federation_SessionServer, d time.Duration) (*pb.ClientMessage, error) {
	type result struct {
		m   *pb.ClientMessage
		err error
	}
	c := make(chan result, 1)
	go func() { // ends with the stream, when the handler returns
		m, err := stream.Recv()
		c <- result{m, err}
	}()
	select {
	case r := <-c:
		return r.m, r.err
	case <-time.After(d):
		return nil, status.Errorf(codes.DeadlineExceeded, "no Join within %v", d)
	}
}

// join checks a Join and registers the client's session.
func (s *Server) join(ctx context.Context, j *pb.Join, challenge []byte, addr string) (*session, error) {
	n := s.cfg.Run.Clients
	switch {
	case j == nil:
		return nil, status.Error(codes.InvalidArgument, "the first message must be a Join")
	case s.cfg.Token != "" && subtle.ConstantTimeCompare([]byte(j.GetToken()), []byte(s.cfg.Token)) != 1:
		return nil, status.Errorf(codes.PermissionDenied, "client %d: wrong join token", j.GetClient())
	case int(j.GetClients()) != n:
		return nil, status.Errorf(codes.InvalidArgument, "client %d: partition of %d, but the run has %d clients", j.GetClient(), j.GetClients(), n)
	case int(j.GetClient()) >= n:
		return nil, status.Errorf(codes.PermissionDenied, "unknown client %d: the run has clients 0 to %d", j.GetClient(), n-1)
	case j.GetExamples() < 1 || j.GetExamples() > math.MaxInt32:
		return nil, status.Errorf(codes.InvalidArgument, "client %d: %d examples", j.GetClient(), j.GetExamples())
	}
	id := j.GetClient()
	if err := verify(j.GetIdentity(), joinSigned(s.runID, challenge, id), j.GetSignature()); err != nil {
		return nil, status.Errorf(codes.PermissionDenied, "client %d: join signature: %v", id, err)
	}
	if s.cfg.Roster != nil {
		want, ok := s.cfg.Roster[id]
		if !ok || !want.Equal(ed25519.PublicKey(j.GetIdentity())) {
			return nil, status.Errorf(codes.PermissionDenied, "client %d: identity not on the roster", id)
		}
	}
	claim := int(j.GetExamples())
	examples := s.weight(id, claim)
	sctx, cancel := context.WithCancel(ctx)
	sess := &session{
		id: id, identity: j.GetIdentity(), examples: examples,
		out: make(chan *pb.ServerMessage, 16), ctx: sctx, cancel: cancel,
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.pins != nil {
		if err := s.pins.check(id, sess.identity); err != nil {
			cancel()
			return nil, status.Error(codes.PermissionDenied, err.Error())
		}
	}
	if last, ok := s.joined[id]; ok && time.Since(last) < rejoinInterval {
		cancel()
		return nil, status.Errorf(codes.ResourceExhausted, "client %d joined less than %v ago; try again", id, rejoinInterval)
	}
	if err := s.eng.Enroll(int(id), sess.examples); err != nil {
		cancel()
		return nil, status.Error(codes.InvalidArgument, err.Error())
	}
	if old := s.sessions[id]; old != nil {
		s.log.Printf("client %d reconnected from %s; closing its old session", id, addr)
		old.cancel()
		s.drop(old)
	}
	s.sessions[id] = sess
	s.joined[id] = time.Now()
	s.notify()
	sess.send(&pb.ServerMessage{Body: &pb.ServerMessage_Welcome{Welcome: &pb.Welcome{RoundsDone: uint32(s.eng.Done())}}})
	if s.finished != nil {
		sess.send(&pb.ServerMessage{Body: &pb.ServerMessage_Finished{Finished: s.finished}})
	}
	weighed := ""
	if examples != claim {
		weighed = fmt.Sprintf(", weighed as %d: %s", examples, s.weightRule(id))
	}
	s.log.Printf("client %d joined from %s (%d examples%s); %d connected", id, addr, claim, weighed, len(s.sessions))
	return sess, nil
}

// weight is FedAvg's weight of client id, which claims to train on claim
// examples: the claim, capped by the run's max_examples and, where the run
// partitions a shared dataset, by the partition the server computes for
// id; so that no client outweighs what the deployment states.
func (s *Server) weight(id uint32, claim int) int {
	if s.su.Clients != nil {
		claim = min(claim, len(s.su.Clients[id]))
	}
	return s.eng.Weight(claim)
}

// weightRule says which cap weight applied to client id.
func (s *Server) weightRule(id uint32) string {
	most := s.su.Config.MaxExamples
	if s.su.Clients != nil && (most == 0 || len(s.su.Clients[id]) < most) {
		return fmt.Sprintf("its partition of %s", s.su.Config.Dataset)
	}
	return "max_examples"
}

// leave unregisters a session that ended.
func (s *Server) leave(sess *session) {
	sess.cancel()
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.sessions[sess.id] != sess {
		return // replaced by a reconnection
	}
	delete(s.sessions, sess.id)
	s.drop(sess)
	s.notify()
	if s.finished == nil {
		s.log.Printf("client %d disconnected; %d connected", sess.id, len(s.sessions))
	}
}

// drop takes a departed client out of the round under way: the round no
// longer waits for it, and its partner, told, encodes alone. s.mu is held.
func (s *Server) drop(sess *session) {
	rd := s.round
	if rd == nil {
		return
	}
	pos, ok := rd.pos[sess.id]
	if !ok || rd.state[pos] != waiting {
		return
	}
	rd.state[pos] = gone
	s.log.Printf("round %d: client %d left before uploading", rd.plan.T, sess.id)
	s.partnerGone(rd, pos)
	s.notify()
}

// handle acts on one message of a joined client. A message that does not
// fit the round is refused with a log line (and, for an upload, a
// Receipt saying why); the session and the round go on.
func (s *Server) handle(sess *session, m *pb.ClientMessage) {
	s.mu.Lock()
	defer s.mu.Unlock()
	var err error
	switch b := m.GetBody().(type) {
	case *pb.ClientMessage_KeyShare:
		err = s.relay(sess, b.KeyShare.GetRound(), b.KeyShare.GetClient(), b.KeyShare.GetPartner(),
			&pb.ServerMessage{Body: &pb.ServerMessage_PartnerKey{PartnerKey: b.KeyShare}})
	case *pb.ClientMessage_Sealed:
		err = s.relay(sess, b.Sealed.GetRound(), b.Sealed.GetClient(), b.Sealed.GetPartner(),
			&pb.ServerMessage{Body: &pb.ServerMessage_PartnerSealed{PartnerSealed: b.Sealed}})
	case *pb.ClientMessage_Upload:
		err = s.upload(sess, b.Upload)
		r := &pb.Receipt{Round: b.Upload.GetRound(), Accepted: err == nil}
		if err != nil {
			r.Error = err.Error()
		}
		sess.send(&pb.ServerMessage{Body: &pb.ServerMessage_Receipt{Receipt: r}})
	case *pb.ClientMessage_SecaggKeys, *pb.ClientMessage_SecaggShares, *pb.ClientMessage_SecaggCheck,
		*pb.ClientMessage_SecaggConsent, *pb.ClientMessage_SecaggReveal:
		err = s.secureMessage(sess, m)
	case *pb.ClientMessage_Decline:
		err = s.decline(sess, b.Decline)
	case *pb.ClientMessage_Join:
		err = errors.New("a second Join")
	default:
		err = errors.New("an empty or unknown message")
	}
	if err != nil {
		s.refuse(sess, err)
	}
}

// refuse counts and logs a refused message: the first few of each round,
// so that a flood cannot fill the log, and it closes the session of a
// client that sends maxInvalid in one round. s.mu is held.
func (s *Server) refuse(sess *session, err error) {
	if t := s.eng.Done() + 1; sess.window != t {
		sess.window, sess.refused = t, 0
	}
	sess.refused++
	switch {
	case sess.refused <= loggedRefusals:
		s.log.Printf("client %d: refused: %v", sess.id, err)
	case sess.refused == maxInvalid:
		s.log.Printf("client %d: refused: %v; %d refused messages in round %d: disconnecting it for the round", sess.id, err, maxInvalid, sess.window)
		sess.close(status.Errorf(codes.ResourceExhausted, "%d refused messages in round %d: disconnected for the round", maxInvalid, sess.window))
	case sess.refused == loggedRefusals+1:
		s.log.Printf("client %d: refused: %v; further refusals in round %d are not logged", sess.id, err, sess.window)
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
	j := rd.plan.Round.Partner(pos)
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
	if p := s.sessions[to]; p != nil && rd.state[j] == waiting {
		p.send(m)
		rd.setup += int64(proto.Size(m))
	}
	return nil
}

// upload adds sess's upload to the round under way.
func (s *Server) upload(sess *session, u *pb.Upload) error {
	rd := s.round
	if rd == nil || u.GetRound() != uint32(rd.plan.T) {
		return fmt.Errorf("an upload for round %d, which is not under way (replayed or late)", u.GetRound())
	}
	pos, ok := rd.pos[sess.id]
	if !ok {
		return fmt.Errorf("round %d: client %d was not chosen", u.GetRound(), sess.id)
	}
	if rd.state[pos] != waiting {
		return fmt.Errorf("round %d: a second upload", u.GetRound())
	}
	var err error
	switch sr := rd.secure; {
	case sr == nil:
		err = rd.plan.Add(pos, fl.Upload{Payloads: u.GetPayloads(), Examples: sess.examples, Loss: u.GetLoss()})
	case sr.step != secureMasked || !sr.kept[sess.id]:
		err = errors.New("a masked upload outside the masking step, or from a client not kept for it")
	default:
		err = rd.plan.AddMasked(pos, u.GetMasked(), u.GetLoss())
	}
	if err != nil {
		rd.state[pos] = refused
		err = fmt.Errorf("round %d: %w", u.GetRound(), err)
	} else {
		rd.state[pos] = uploaded
	}
	// A client that uploads has sent all it will: if it is refused, or
	// in transfer mode sent no sealed bits, a partner still waiting for
	// it (a follower waits for the leader's bits) stops waiting. A partner
	// that has what it needs is past pairing and ignores this.
	if err != nil || s.sealed != 0 && !rd.sealed[pos] {
		s.partnerGone(rd, pos)
	}
	s.notify()
	return err
}
