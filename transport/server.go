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
	"slices"
	"sync"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/fedpq/fedpq/experiment"
	"github.com/fedpq/fedpq/fl"
	"github.com/fedpq/fedpq/report"
	pb "github.com/fedpq/fedpq/transport/fedpqpb"
)

// ServerConfig is how a server runs a federated training run.
type ServerConfig struct {
	Run experiment.Config
	// MinClients is how many clients must be connected for a round to
	// start (0: all of Run.Clients). Once they are, the server waits up to
	// Gather for the others.
	MinClients int
	Gather     time.Duration
	// RoundTimeout is each round's deadline: the round ends with the
	// uploads received by then.
	RoundTimeout time.Duration
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
	cfg   ServerConfig
	su    *experiment.Setup
	eng   *fl.Engine
	rec   *experiment.Recorder
	runID []byte
	yaml  []byte
	log   *log.Logger

	mu       sync.Mutex
	sessions map[uint32]*session
	changed  chan struct{} // closed, and replaced, whenever sessions or the round change
	round    *serverRound  // the round under way, or nil
	finished *pb.Finished  // once the run is over
}

// serverRound is the round under way.
type serverRound struct {
	plan  *fl.Plan
	pos   map[uint32]int // client id to position
	state []int          // per position: waiting, uploaded, refused or gone
	setup int64          // bytes of key shares and sealed bits relayed
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

// NewServer prepares the run of cfg.Run: its test data and model, the
// engine, and the run directory. If the directory holds a checkpoint of
// the same run, the server resumes after its round.
func NewServer(cfg ServerConfig) (*Server, error) {
	c := cfg.Run
	if c.Dropout != 0 {
		return nil, errors.New("dropout is simulated only: a server's clients drop out for real")
	}
	if cfg.Token == "" && cfg.Roster == nil {
		return nil, errors.New("a server needs a join token or a roster, so that only enrolled clients take part")
	}
	if cfg.MinClients == 0 {
		cfg.MinClients = c.Clients
	}
	if cfg.MinClients < 1 || cfg.MinClients > c.Clients {
		return nil, fmt.Errorf("min-clients %d: want 1 to %d", cfg.MinClients, c.Clients)
	}
	if cfg.RoundTimeout <= 0 {
		return nil, fmt.Errorf("round timeout %v must be positive", cfg.RoundTimeout)
	}
	for id := range cfg.Roster {
		if int(id) >= c.Clients {
			return nil, fmt.Errorf("roster: client %d, but the run has clients 0 to %d", id, c.Clients-1)
		}
	}
	if cfg.Log == nil {
		cfg.Log = log.New(os.Stderr, "fedpq server: ", log.LstdFlags)
	}
	su, err := experiment.NewSetup(c)
	if err != nil {
		return nil, err
	}
	tr, err := su.Trainer()
	if err != nil {
		return nil, err
	}
	eng, err := fl.New(su.Engine, fl.Task{
		Model: su.Model, Trainers: []fl.Trainer{tr}, Data: su.Data, Remote: c.Clients, Validation: su.Validation,
	})
	if err != nil {
		return nil, err
	}
	y, err := c.YAML()
	if err != nil {
		return nil, err
	}
	resume, err := resumable(c.Dir(), y)
	if err != nil {
		return nil, err
	}
	rec, err := experiment.NewRecorder(c, eng, resume)
	if err != nil {
		return nil, err
	}
	id := sha256.Sum256(y)
	s := &Server{
		cfg: cfg, su: su, eng: eng, rec: rec, runID: id[:16], yaml: y, log: cfg.Log,
		sessions: map[uint32]*session{}, changed: make(chan struct{}),
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
	for _, t := range s.su.Model.Tensors() {
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
func (s *Server) Serve(ctx context.Context, lis net.Listener, opts ...grpc.ServerOption) (*report.Summary, error) {
	opts = append(opts, grpc.MaxRecvMsgSize(s.MaxMessageBytes()), grpc.MaxSendMsgSize(s.MaxMessageBytes()))
	gs := grpc.NewServer(opts...)
	pb.RegisterFederationServer(gs, s)
	errc := make(chan error, 1)
	go func() { errc <- gs.Serve(lis) }()
	s.log.Printf("listening on %s: run %x, %s with %s, %d rounds, %d clients (waiting for %d)",
		lis.Addr(), s.runID, s.cfg.Run.Dataset, s.cfg.Run.Mechanism, s.cfg.Run.Rounds, s.cfg.Run.Clients, s.cfg.MinClients)

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
	}
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
			return err
		}
		if s.cfg.Progress != nil {
			s.cfg.Progress(r)
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

// gather waits for MinClients connected clients, then up to Gather for
// the rest, and returns the ids of those connected.
func (s *Server) gather(ctx context.Context) ([]uint32, error) {
	var since time.Time
	logged := false
	for {
		s.mu.Lock()
		n, ch := len(s.sessions), s.changed
		s.mu.Unlock()
		if n >= s.cfg.MinClients {
			if since.IsZero() {
				since = time.Now()
			}
			if n == s.cfg.Run.Clients || time.Since(since) >= s.cfg.Gather {
				break
			}
		} else {
			since = time.Time{}
			if !logged {
				s.log.Printf("round %d: waiting for clients (%d of %d connected)", s.eng.Done()+1, n, s.cfg.MinClients)
				logged = true
			}
		}
		wait := time.Hour
		if !since.IsZero() {
			wait = s.cfg.Gather - time.Since(since)
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
	rd := &serverRound{plan: plan, pos: map[uint32]int{}, state: make([]int, len(plan.Clients))}
	s.round = rd
	global := encodeTensors(plan.Global)
	ranges := encodeRanges(plan.Ranges)
	for pos, k := range plan.Clients {
		rd.pos[uint32(k)] = pos
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
		s.sessions[uint32(k)].send(&pb.ServerMessage{Body: &pb.ServerMessage_RoundStart{RoundStart: msg}})
	}
	s.mu.Unlock()
	s.log.Printf("round %d: %d clients, %d pairs, deadline in %v", t, len(plan.Clients), plan.Round.Pairs(), s.cfg.RoundTimeout)

	timer := time.NewTimer(time.Until(deadline))
	defer timer.Stop()
wait:
	for {
		s.mu.Lock()
		open := slices.Contains(rd.state, waiting)
		ch := s.changed
		s.mu.Unlock()
		if !open {
			break
		}
		select {
		case <-ch:
		case <-timer.C:
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
	r.SetupBytes = rd.setup // what was relayed, signatures and framing included
	return r, err
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
func (s *Server) Session(stream pb.Federation_SessionServer) error {
	ctx := stream.Context()
	addr := "unknown"
	if p, ok := peer.FromContext(ctx); ok {
		addr = p.Addr.String()
	}
	challenge := make([]byte, 32)
	rand.Read(challenge)
	if err := stream.Send(&pb.ServerMessage{Body: &pb.ServerMessage_Hello{Hello: &pb.Hello{
		RunId: s.runID, Challenge: challenge, ConfigYaml: string(s.yaml),
	}}}); err != nil {
		return err
	}
	m, err := stream.Recv()
	if err != nil {
		return err
	}
	sess, err := s.join(ctx, m.GetJoin(), challenge, addr)
	if err != nil {
		s.log.Printf("refused a client at %s: %v", addr, err)
		return err
	}
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
			return status.Error(codes.Canceled, "session closed")
		}
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
	sctx, cancel := context.WithCancel(ctx)
	sess := &session{
		id: id, identity: j.GetIdentity(), examples: int(j.GetExamples()),
		out: make(chan *pb.ServerMessage, 16), ctx: sctx, cancel: cancel,
	}
	s.mu.Lock()
	defer s.mu.Unlock()
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
	s.notify()
	sess.send(&pb.ServerMessage{Body: &pb.ServerMessage_Welcome{Welcome: &pb.Welcome{RoundsDone: uint32(s.eng.Done())}}})
	if s.finished != nil {
		sess.send(&pb.ServerMessage{Body: &pb.ServerMessage_Finished{Finished: s.finished}})
	}
	s.log.Printf("client %d joined from %s (%d examples); %d connected", id, addr, sess.examples, len(s.sessions))
	return sess, nil
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
	if j := rd.plan.Round.Partner(pos); j >= 0 && rd.state[j] == waiting {
		if p := s.sessions[uint32(rd.plan.Clients[j])]; p != nil {
			p.send(&pb.ServerMessage{Body: &pb.ServerMessage_PartnerGone{PartnerGone: &pb.PartnerGone{
				Round: uint32(rd.plan.T), Partner: sess.id,
			}}})
		}
	}
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
	case *pb.ClientMessage_Join:
		err = errors.New("a second Join")
	default:
		err = errors.New("an empty or unknown message")
	}
	if err != nil {
		s.log.Printf("client %d: refused: %v", sess.id, err)
	}
}

// relay forwards a key share or sealed bits from sess to its partner in
// the round under way. The server checks where it goes, not what it says:
// the partner checks the signature, or the seal.
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
	if l := u.GetLoss(); math.IsNaN(l) || math.IsInf(l, 0) || l < 0 {
		rd.state[pos] = refused
		s.notify()
		return fmt.Errorf("round %d: training loss %v", u.GetRound(), l)
	}
	err := rd.plan.Add(pos, fl.Upload{Payloads: u.GetPayloads(), Examples: sess.examples, Loss: u.GetLoss()})
	if err != nil {
		rd.state[pos] = refused
		err = fmt.Errorf("round %d: %w", u.GetRound(), err)
	} else {
		rd.state[pos] = uploaded
	}
	s.notify()
	return err
}
