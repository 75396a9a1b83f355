package transport

import (
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"crypto/subtle"
	"errors"
	"fmt"
	"math"
	"sync/atomic"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"

	pb "github.com/fedpq/fedpq/transport/fedpqpb"
)

// A session is one connected client, from its join to its leaving: this
// file admits and authenticates joins, bounds what one peer can make the
// server hold, and dispatches what a client sends.

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
	// loggedJoinRefusals is how many refused joins (and, apart, TLS
	// mismatches) are logged a minute.
	loggedJoinRefusals = 10
	// loggedJoins is how many joins and leaves are logged a minute: a
	// fleet of thousands would otherwise log a line per client; the
	// rounds' lines say how many are connected.
	loggedJoins = 20
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

// logBounded logs an event of the kind w counts, unless loggedJoinRefusals
// of them were logged in the last minute; it says how many were not. s.mu
// must not be held.
func (s *Server) logBounded(w *logWindow, kind, format string, args ...any) {
	s.mu.Lock()
	ok, missed := w.log(time.Now(), loggedJoinRefusals)
	s.mu.Unlock()
	if missed > 0 {
		s.log.Printf("%d more %s in the last minute were not logged", missed, kind)
	}
	if ok {
		s.log.Printf(format, args...)
	}
}

// session is one connected client.
type session struct {
	id       uint32
	identity ed25519.PublicKey
	examples int
	out      chan any // a *pb.ServerMessage or a *sharedStart
	ctx      context.Context
	cancel   context.CancelFunc
	slow     atomic.Bool // its queue of messages was full: the server cut it off

	// Guarded by Server.mu:
	window  int   // the round its refusals are counted for
	refused int   // refused messages in that round
	err     error // why the server closed the session, if it did
}

// send queues m, a *pb.ServerMessage or a *sharedStart, for the client; a
// client too slow to take its messages is disconnected rather than left to
// hold up the server.
func (s *session) send(m any) {
	select {
	case s.out <- m:
	default:
		s.slow.Store(true)
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
		err := status.Errorf(codes.ResourceExhausted, "%d connections are already joining; try again", s.MaxPending())
		s.cfg.Metrics.refusedJoin(err)
		return err
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
	if status.Code(err) == codes.DeadlineExceeded {
		s.logBounded(&s.refusals, "refused joins", "closed a connection from %s: %v (a client that loads its data for longer joins on its next connection)", addr, err)
	}
	if err != nil {
		s.cfg.Metrics.refusedJoin(err) // no Join in time; a peer that went away is not counted
		return err
	}
	sess, err := s.join(ctx, m.GetJoin(), challenge, addr)
	if err != nil {
		s.cfg.Metrics.refusedJoin(err)
		s.logBounded(&s.refusals, "refused joins", "refused a client at %s: %v", addr, err)
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
			if err := stream.SendMsg(m); err != nil {
				return err
			}
			if m, ok := m.(*pb.ServerMessage); ok && m.GetFinished() != nil {
				return nil
			}
		case <-sess.ctx.Done():
			s.mu.Lock()
			err := sess.err
			s.mu.Unlock()
			switch {
			case err != nil:
			case sess.slow.Load():
				err = status.Errorf(codes.ResourceExhausted, "the client took too long to read the server's messages (%d queued)", cap(sess.out))
			default:
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
	case s.cfg.Token != "" && j.GetToken() == "":
		return nil, status.Errorf(codes.PermissionDenied, "client %d: no join token, and this server requires one: --token or $FEDPQ_TOKEN", j.GetClient())
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
		out: make(chan any, 16), ctx: sctx, cancel: cancel,
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
	s.rejoined(id)
	s.cfg.Metrics.clients(len(s.sessions), len(s.joined))
	s.notify()
	sess.send(&pb.ServerMessage{Body: &pb.ServerMessage_Welcome{Welcome: &pb.Welcome{RoundsDone: uint32(s.eng.Done())}}})
	if s.finished != nil {
		sess.send(&pb.ServerMessage{Body: &pb.ServerMessage_Finished{Finished: s.finished}})
	}
	if s.async != nil {
		s.reannounce(sess, j.GetReady())
		s.dispatch()
	}
	weighed := ""
	if examples != claim {
		weighed = fmt.Sprintf(", weighed as %d: %s", examples, s.weightRule(id))
	}
	if ok, missed := s.joins.log(time.Now(), loggedJoins); ok || weighed != "" {
		if missed > 0 {
			s.log.Printf("%d more joins and leaves in the minute before were not logged; %d connected", missed, len(s.sessions))
		}
		s.log.Printf("client %d joined from %s (%d examples%s); %d connected", id, addr, claim, weighed, len(s.sessions))
	}
	return sess, nil
}

// rejoined logs what becomes of client id, which joined again, in the
// secure round under way if it was in it: its secrets died with its old
// session, so it takes no further part. s.mu is held.
func (s *Server) rejoined(id uint32) {
	rd := s.round
	if rd == nil || rd.secure == nil || !rd.secure.gone[id] || rd.secure.step == secureDone {
		return
	}
	what := "it is counted as dropped in this round"
	if rd.uploaded(rd.pos[id]) {
		what = "its masked upload is summed, its self mask rebuilt from its holders' shares"
	}
	s.log.Printf("round %d: client %d reconnected during secure aggregation (step %s); %s, and it takes part from the next round",
		rd.plan.T, id, securePhases[rd.secure.step], what)
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
	s.cfg.Metrics.clients(len(s.sessions), len(s.joined))
	s.drop(sess)
	s.notify()
	if ok, missed := s.joins.log(time.Now(), loggedJoins); ok && s.finished == nil {
		if missed > 0 {
			s.log.Printf("%d more joins and leaves in the minute before were not logged; %d connected", missed, len(s.sessions))
		}
		why := ""
		if sess.slow.Load() {
			why = fmt.Sprintf(" (cut off: it took too long to read the server's messages, %d queued)", cap(sess.out))
		}
		s.log.Printf("client %d disconnected%s; %d connected", sess.id, why, len(s.sessions))
	}
}

// drop takes a departed client out of the round under way (and, mode
// async, its task or queued weights: another client gets its slot): the
// round no longer waits for it, and its partner, told, encodes alone; no step of a
// secure round waits for it again, even if it joins again. s.mu is held.
func (s *Server) drop(sess *session) {
	if s.async != nil {
		s.async.forget(sess.id)
		s.dispatch()
	}
	rd := s.round
	if rd == nil {
		return
	}
	pos, ok := rd.pos[sess.id]
	if ok && rd.secure != nil {
		rd.secure.gone[sess.id] = true
	}
	if !ok || !rd.leave(pos) {
		return
	}
	s.log.Printf("round %d: client %d left before uploading", rd.plan.T, sess.id)
	s.partnerGone(rd, pos)
	s.notify()
}

// handle acts on one message of a joined client. A message that does not
// fit the round is refused with a log line (and, for an upload, a
// Receipt saying why); the session and the round go on.
func (s *Server) handle(sess *session, m *pb.ClientMessage) {
	if d := m.GetSecaggShares(); d != nil {
		// The message is not held from here on: see dealing.
		s.handleDealing(sess, newDealing(sess.id, d))
		return
	}
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
	case *pb.ClientMessage_SecaggKeys, *pb.ClientMessage_SecaggCheck,
		*pb.ClientMessage_SecaggConsent, *pb.ClientMessage_SecaggReveal, *pb.ClientMessage_SecaggDisclosure:
		err = s.secureMessage(sess, m, nil, nil)
	case *pb.ClientMessage_Decline:
		err = s.decline(sess, b.Decline)
	case *pb.ClientMessage_Ready:
		err = s.ready(sess, b.Ready)
	case *pb.ClientMessage_Join:
		err = errors.New("a second Join")
	default:
		err = errors.New("an empty or unknown message")
	}
	if err != nil {
		s.cfg.Metrics.refusedMessage(m)
		s.refuse(sess, err)
	}
}

// handleDealing is handle for a client's dealing: checked first outside
// the lock (preDealing), then recorded under it.
func (s *Server) handleDealing(sess *session, d *dealing) {
	pre := s.preDealing(sess, d)
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.secureMessage(sess, nil, d, pre); err != nil {
		s.cfg.Metrics.refusedMessage(dealingMessage)
		s.refuse(sess, err)
	}
}

// dealingMessage stands for a dealing in the refused messages' metrics.
var dealingMessage = &pb.ClientMessage{Body: &pb.ClientMessage_SecaggShares{SecaggShares: &pb.SecAggShares{}}}

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
