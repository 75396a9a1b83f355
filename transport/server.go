// Package transport runs fedpq for real: a gRPC server that drives the
// round engine of package fl, and clients in processes of their own that
// hold their data, train, pair up and upload. The server and the
// simulation run the same rounds (fl.Plan) and the same mechanisms; only
// where the uploads come from differs.
package transport

import (
	"context"
	"crypto/sha256"
	"crypto/tls"
	"errors"
	"fmt"
	"log"
	"net"
	"os"
	"path/filepath"
	"runtime"
	"runtime/debug"
	"strings"
	"sync"
	"time"

	"golang.org/x/net/netutil"
	"google.golang.org/grpc"
	"google.golang.org/grpc/keepalive"

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
	// MaxWait, if positive, bounds a round's wait for the clients it
	// needs (MinClients; with the whole fleet, after Grace, one): after it
	// the server stops with an error naming who is missing, rather than
	// wait for ever. With the whole fleet it must exceed Grace.
	MaxWait time.Duration
	// RoundTimeout is each round's deadline: the round ends with the
	// uploads received by then.
	RoundTimeout time.Duration
	// TaskTimeout, mode async, is how long a client given a Task has to
	// train and say Ready; then the task is withdrawn and its slot given
	// to another client (default RoundTimeout: what a synchronous round
	// gives a client to train and upload).
	TaskTimeout time.Duration
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
	// TLS, if not nil, is the server's TLS configuration (its certificate):
	// clients must speak TLS. The server logs clients that do not, and
	// those that refuse its certificate; without TLS, clients that expect
	// it. (Give TLS here, not as a grpc.Creds option of Serve.)
	TLS *tls.Config
	Log *log.Logger
	// Metrics, if not nil, counts what the server does, for Prometheus.
	Metrics *ServerMetrics
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
	// checks holds a slot per dealing checked outside the lock
	// (preDealing), GOMAXPROCS of them: a dealing being checked holds its
	// parsed commitments (31 KB at degree 96), and 10,000 dealings
	// arriving faster than 2 cores check them held 350 MB at once.
	checks chan struct{}

	mu       sync.Mutex
	pins     *pins                // token mode: each id's first key
	pending  int                  // streams that have not joined (yet)
	joined   map[uint32]time.Time // when each id last joined
	refusals logWindow            // refused joins, logged at a bounded rate
	tlsLog   logWindow            // TLS mismatches, logged at a bounded rate
	joins    logWindow            // joins and leaves, logged at a bounded rate
	sessions map[uint32]*session
	changed  chan struct{} // closed, and replaced, whenever sessions or the round change
	round    *serverRound  // the round under way, or nil
	async    *asyncState   // the clients given tasks, training and queued: mode async, or sync with over_select (overselect.go); else nil
	finished *pb.Finished  // once the run is over
}

// NewServer prepares the run of cfg.Run: its test data and model, the
// engine, and the run directory. If the directory holds a checkpoint of
// the same run, the server resumes after its round.
func NewServer(cfg ServerConfig) (_ *Server, err error) {
	c := cfg.Run
	if c.Dropout != 0 {
		return nil, errors.New("dropout is simulated only: a server's clients drop out for real")
	}
	if c.Byzantine != "" || c.ByzantineFraction != 0 {
		return nil, errors.New("byzantine is simulated only: in a deployment a client attacks by itself (fedpq client --byzantine), unknown to the server")
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
	if cfg.TaskTimeout == 0 {
		cfg.TaskTimeout = cfg.RoundTimeout
	}
	if cfg.KeyShareTimeout == 0 {
		cfg.KeyShareTimeout = min(30*time.Second, cfg.RoundTimeout/2)
	}
	if cfg.JoinTimeout == 0 {
		cfg.JoinTimeout = 10 * time.Second
	}
	if fleet && cfg.MaxWait > 0 && cfg.MaxWait <= cfg.Grace {
		return nil, fmt.Errorf("max-wait %v must exceed grace %v: with min-clients 0 a round waits the grace for the whole fleet, then for at least one client up to max-wait", cfg.MaxWait, cfg.Grace)
	}
	if cfg.Grace < 0 || cfg.KeyShareTimeout < 0 || cfg.JoinTimeout < 0 || cfg.TaskTimeout < 0 {
		return nil, fmt.Errorf("grace %v, key-share timeout %v, join timeout %v and task timeout %v must be positive", cfg.Grace, cfg.KeyShareTimeout, cfg.JoinTimeout, cfg.TaskTimeout)
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
	// The evaluation set's file, read to decode it, is garbage now: give
	// it back rather than at the scavenger's pace.
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
	// Its directory is recorded as such, so that the same run started with
	// --out of its directory or without one is one run.
	c = su.Config
	c.Out = filepath.Clean(c.Dir())
	y, err := c.YAML()
	if err != nil {
		return nil, err
	}
	resume, err := resumable(c.Dir(), y, c.Rounds)
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
	id := runID(y)
	eng, err := fl.New(su.Engine, fl.Task{
		Model: start, Trainers: []fl.Trainer{tr}, Data: su.Data, Remote: c.Clients, Validation: su.Validation,
		Secret: secret, RunID: id,
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
		cfg: cfg, su: su, eng: eng, rec: rec, runID: id, yaml: y, log: cfg.Log,
		fleet: fleet, paired: m.Coupling() == mech.Paired, pins: pinned, joined: map[uint32]time.Time{},
		sessions: map[uint32]*session{}, changed: make(chan struct{}), checks: make(chan struct{}, runtime.GOMAXPROCS(0)),
	}
	if c.Mode == "async" || c.OverSelect > 0 {
		s.async = newAsyncState(secret)
	}
	if s.paired && su.Engine.Transfer {
		s.sealed = fl.TransferBytes(m, numParams(su.Arch().Tensors())) + corr.SealedOverhead
	}
	if resume {
		s.log.Printf("resuming %s after round %d from its checkpoint; model sha256 %x", c.Dir(), eng.Done(), short(eng.Global()))
	}
	if cfg.Metrics != nil {
		l, _, err := eng.Ledger()
		if err != nil {
			return nil, err
		}
		cfg.Metrics.loaded(eng.Rounds(), eng.Done(), l, c.TargetEpsilon, cfg.RoundTimeout)
	}
	return s, nil
}

// runID names the run of the resolved configuration y: the first 16 bytes
// of its SHA-256, with nothing fresh in it, so that a client can check the
// id a Hello names against the configuration it carries, and a server
// restarted on its directory goes on with the same run. A server can still
// name the same settings anew by changing y (its out directory, say); a
// client binds its randomness to the id (runSecret), so that such a run
// gets fresh messages, never round t's again.
func runID(y []byte) []byte {
	h := sha256.Sum256(y)
	return h[:16]
}

// resumable reports whether dir holds a checkpoint of the run whose
// configuration is y, with rounds left of its rounds. A checkpoint of
// another run is an error that names the settings that differ, not
// something to overwrite; a run that is over is a *FinishedError, not
// something to replay.
func resumable(dir string, y []byte, rounds int) (bool, error) {
	path := filepath.Join(dir, experiment.CheckpointFile)
	if _, err := os.Stat(path); err != nil {
		return false, nil
	}
	old, err := os.ReadFile(filepath.Join(dir, "config.yaml"))
	if err != nil {
		return false, fmt.Errorf("%s has a checkpoint but no config.yaml: %w", dir, err)
	}
	if string(old) != string(y) {
		diff, err := experiment.Diff(old, y)
		if err != nil {
			return false, fmt.Errorf("%s holds a checkpoint of another configuration (%v): give this run its own --out, or remove %s to start over", dir, err, dir)
		}
		return false, fmt.Errorf("%s holds a checkpoint of another configuration (%s): give this run its own --out, or remove %s to start over",
			dir, strings.Join(diff, "; "), dir)
	}
	st, err := fl.LoadState(path)
	if err != nil {
		return false, err
	}
	if st.Round >= rounds {
		return false, &FinishedError{Dir: dir, Rounds: st.Round}
	}
	return true, nil
}

// FinishedError is a server started on the directory of a run that is
// over: it has nothing to do, and says where the run's results are.
type FinishedError struct {
	Dir    string
	Rounds int
}

func (e *FinishedError) Error() string {
	return fmt.Sprintf("the run in %s finished earlier, after %d rounds (its summary: %s; metrics.jsonl beside it); nothing to do: to run it again, give it another --out, or remove %s",
		e.Dir, e.Rounds, filepath.Join(e.Dir, report.SummaryFile), e.Dir)
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
		// A connection's write buffer is taken from a pool while it
		// writes, not held while it idles: 32 KiB less per client.
		grpc.SharedWriteBuffer(true),
		// A round's start is encoded once for every client (sharedStart),
		// and large messages take no buffer of gRPC's 1 MiB tier.
		grpc.ForceServerCodecV2(newMessageCodec()),
		// No read buffer: gRPC holds one for the connection's life (its
		// 32 KiB default was 293 MB of a 10,000-client server's heap, 8 KiB
		// still 80 MB), and reads a frame's header and payload from the
		// connection instead, a data frame's payload into a buffer of its
		// pool. The clients send a few messages a round: the reads it
		// costs are a few tens a client.
		grpc.ReadBufferSize(0),
		grpc.ConnectionTimeout(s.cfg.JoinTimeout),
		grpc.KeepaliveParams(keepalive.ServerParameters{
			MaxConnectionIdle: s.cfg.JoinTimeout, Time: time.Minute, Timeout: pingTimeout,
		}),
		grpc.KeepaliveEnforcementPolicy(keepalive.EnforcementPolicy{MinTime: 20 * time.Second}),
	)
	if h := s.cfg.Metrics.stats(); h != nil {
		opts = append(opts, grpc.StatsHandler(h))
	}
	lis, opts = s.withTLS(netutil.LimitListener(lis, s.MaxConns()), opts)
	gs := grpc.NewServer(opts...)
	pb.RegisterFederationServer(gs, s)
	errc := make(chan error, 1)
	go func() { errc <- gs.Serve(lis) }()
	s.cfg.Metrics.setServing(true)
	defer s.cfg.Metrics.setServing(false)
	s.log.Printf("listening on %s: run %x, %s with %s, %d rounds, %d clients (waiting for %d)",
		lis.Addr(), s.runID, s.su.Config.DatasetName(), s.cfg.Run.Mechanism, s.cfg.Run.Rounds, s.cfg.Run.Clients, s.cfg.MinClients)

	err := s.run(ctx)
	if errors.Is(err, context.Canceled) {
		if _, serr := os.Stat(filepath.Join(s.cfg.Run.Dir(), experiment.CheckpointFile)); serr != nil {
			// No round was recorded: there is no checkpoint to name.
			s.log.Printf("told to stop: stopping after round %d of %d, with no checkpoint: the server started again starts the run from its first round", s.eng.Done(), s.eng.Rounds())
			err = fmt.Errorf("stopped after round %d, with no checkpoint to resume from: %w", s.eng.Done(), err)
		} else {
			s.log.Printf("told to stop: stopping after round %d of %d; its checkpoint in %s is kept, and the server started again with the same configuration resumes from it",
				s.eng.Done(), s.eng.Rounds(), s.cfg.Run.Dir())
			err = fmt.Errorf("stopped after round %d; its checkpoint is kept, and the server resumes from it when started again: %w", s.eng.Done(), err)
		}
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

// readBuffer is the size of a client's connection's read buffer (the
// server has none): a message larger than it is read in several calls.
const readBuffer = 8 << 10

// pingTimeout is how long a keepalive ping has to be answered, by the
// server or a client, before the connection is taken for dead. A loaded
// peer answers late: at 10,000 clients on 2 cores, dealing the shares of
// a secure round, pings went unanswered for over 20 s and live clients
// were cut out of the round. A dead peer is found a minute or two later.
const pingTimeout = 2 * time.Minute

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
	if s.buffered() {
		return s.runAsync(ctx)
	}
	for s.eng.Done() < s.eng.Rounds() {
		// A server told to stop between rounds starts no other: its
		// clients would train, and a secure round's answer, for nothing.
		if err := ctx.Err(); err != nil {
			return err
		}
		begun := time.Now()
		online, err := s.gather(ctx)
		if err != nil {
			return err
		}
		ids := make([]int, len(online))
		for i, id := range online {
			ids[i] = int(id)
		}
		if s.cfg.Run.OverSelect > 0 {
			// Over-selection: its round, or none if no client of its
			// sample finished (then the round is sampled again).
			if stop, err := s.overSelected(ctx, ids, begun); stop || err != nil {
				return err
			}
			continue
		}
		r, took, err := s.runRound(ctx, func(t int) (*fl.Plan, error) { return s.eng.Begin(t, ids) }, begun)
		if stop, err := s.record(r, took, err); stop || err != nil {
			return err
		}
	}
	return nil
}

// buffered reports whether the run is asynchronous: it steps on
// buffers of the clients that finish (mode async).
func (s *Server) buffered() bool { return s.cfg.Run.Mode == "async" }

// step is what the run calls a step of its model: a round, or an
// asynchronous run's buffer.
func (s *Server) step() string {
	if s.buffered() {
		return "buffer"
	}
	return "round"
}

// record records round r, ended with err, and logs it; it reports whether
// the run stops there (its privacy budget spent).
func (s *Server) record(r report.Round, took *phases, err error) (stop bool, _ error) {
	if errors.Is(err, fl.ErrBudget) {
		s.log.Printf("run stopped: %v", err)
		return true, nil
	}
	if err != nil {
		return false, err
	}
	err = s.rec.Round(r)
	took.mark("checkpoint")
	s.cfg.Metrics.completed(s.eng.Done(), &r)
	if err != nil {
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
	stale := ""
	if r.Cut > 0 {
		stale = fmt.Sprintf(", %d over-selected cut", r.Cut)
	}
	if s.buffered() {
		stale = fmt.Sprintf(", staleness mean %.2f max %d, %d refused as stale", r.Staleness, r.MaxStaleness, r.Refused)
		if r.Withdrawn > 0 {
			stale += fmt.Sprintf(", %d tasks withdrawn past the task timeout", r.Withdrawn)
		}
	}
	s.log.Printf("%s %d done: %d uploads, %d missing%s%s, %.3g bits/param, eps spent %g; checkpoint saved, model sha256 %x; took %s",
		s.step(), r.Round, r.Clients, r.Dropped, stale, acc, r.UplinkBitsPerParam, r.EpsilonSpent, short(s.eng.Global()), took)
	return false, nil
}

// finish tells every client the run is over.
func (s *Server) finish() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.finished = &pb.Finished{Rounds: uint32(s.eng.Done())}
	s.cfg.Metrics.runFinished()
	for _, ss := range s.sessions {
		ss.send(&pb.ServerMessage{Body: &pb.ServerMessage_Finished{Finished: s.finished}})
	}
	s.log.Printf("run finished after %d rounds; results in %s", s.eng.Done(), s.cfg.Run.Dir())
}
