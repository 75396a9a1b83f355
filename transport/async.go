package transport

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/fedpq/fedpq/corr"
	"github.com/fedpq/fedpq/fl"
	pb "github.com/fedpq/fedpq/transport/fedpqpb"
)

// A deployed asynchronous run (mode async, FedBuff): the server keeps at
// most Concurrency clients training, each from the model current when it
// was given its Task; a client that finishes says Ready and holds its
// weights, unsent; once Buffer clients are queued, and no buffer is under
// way, they form the next buffer (fl.Engine.BeginBuffer), a round among
// themselves with the round machinery of a synchronous run (pairs, a
// secure round, dropouts, the deadline), in which each encodes against the
// model it trained from. Clients go on training and queueing meanwhile.
// Staleness is checked when a client says Ready and again when its buffer
// begins: past MaxStaleness its weights are refused (a Discard with the
// reason) before anything of them is sent, so nothing is charged. A
// client not Ready within TaskTimeout of its Task has the task withdrawn
// (a Discard): its slot goes to another client, so that a client that
// never answers costs the run nothing but that wait.

// asyncState is the clients of an asynchronous run between buffers.
// Guarded by Server.mu.
type asyncState struct {
	tasks   map[uint32]task // training
	queue   []readyUpdate   // said Ready, waiting for a buffer, in order
	members map[uint32]bool // in the buffer under way
	refused int             // Ready refused as stale since the last step
	// withdrawn is the version of each client's task withdrawn past the
	// task timeout, until the client says its late Ready or joins again:
	// it gets no Task meanwhile, so that a client that hangs holds no slot
	// again and again, and its late Ready costs nothing.
	withdrawn map[uint32]int
	timeouts  int // tasks withdrawn since the last step
	// sampled is, in a synchronous run that over-selects, the clients of
	// the round being sampled given a task, until the round begins.
	sampled map[uint32]bool
	// task is the current version's Task, its tensors encoded once for
	// every client that gets it.
	task *pb.Task
	// secret and draws give the stream from which dispatch picks each
	// idle client, as the simulation does (fl.Engine's "async-start").
	secret []byte
	draws  uint64
}

// task is a client's task in flight: the model version it trains from,
// and the timer that withdraws it past the task timeout (nil for an
// over-selected round's task, which its round's deadline bounds).
type task struct {
	version int
	timer   *time.Timer
}

// readyUpdate is a client's trained weights, held by the client, that a
// buffer may ask for.
type readyUpdate struct {
	id      uint32
	version int
}

func newAsyncState(secret []byte) *asyncState {
	return &asyncState{tasks: map[uint32]task{}, members: map[uint32]bool{}, withdrawn: map[uint32]int{}, sampled: map[uint32]bool{}, secret: secret}
}

// busy reports whether client id trains, owes a late Ready for a
// withdrawn task, waits in the queue or is in the buffer under way.
func (a *asyncState) busy(id uint32) bool {
	_, training := a.tasks[id]
	_, late := a.withdrawn[id]
	return training || late || a.members[id] || slices.ContainsFunc(a.queue, func(u readyUpdate) bool { return u.id == id })
}

// end takes client id's task out, if it has one, and stops its timer.
func (a *asyncState) end(id uint32) {
	if tk, ok := a.tasks[id]; ok {
		if tk.timer != nil {
			tk.timer.Stop()
		}
		delete(a.tasks, id)
	}
}

// forget takes a departed client's task and queued weights out: a client
// that leaves while training or queued costs nothing, and its slot goes to
// another client.
func (a *asyncState) forget(id uint32) {
	a.end(id)
	a.queue = slices.DeleteFunc(a.queue, func(u readyUpdate) bool { return u.id == id })
}

// dispatch gives Tasks to idle connected clients until Concurrency train,
// each drawn uniformly from the idle ones, as the simulation draws them:
// an order by id would make clients whose speed goes with their id (a
// site's, a fleet's, --delay tail's) take their tasks in waves, and a
// wave of slow ones hold every slot at once. s.mu is held.
func (s *Server) dispatch() {
	a := s.async
	if !s.buffered() || s.finished != nil || s.eng.Done() >= s.eng.Rounds() {
		return // over-selection gives its round's sample their tasks itself
	}
	m := s.cfg.Run.Concurrency
	if len(a.tasks) >= m {
		return
	}
	ids := make([]uint32, 0, len(s.sessions))
	for id, ss := range s.sessions {
		if ss.ctx.Err() == nil && !a.busy(id) { // a session replaced or leaving gets nothing
			ids = append(ids, id)
		}
	}
	slices.Sort(ids) // the draw's order, whatever the map's
	for len(a.tasks) < m && len(ids) > 0 {
		i := corr.Below(corr.Derive(a.secret, "async-start", a.draws), uint64(len(ids)))
		a.draws++
		s.give(ids[i], s.cfg.TaskTimeout)
		ids = slices.Delete(ids, int(i), int(i)+1)
	}
	s.cfg.Metrics.asyncClients(len(a.tasks), len(a.queue))
}

// give sends client id a Task of the current model version, withdrawn
// past timeout if it is positive. s.mu is held.
func (s *Server) give(id uint32, timeout time.Duration) {
	a, v := s.async, s.eng.Done()
	if a.task == nil || int(a.task.GetVersion()) != v {
		a.task = &pb.Task{Version: uint32(v), Global: encodeTensors(s.eng.Global())}
	}
	tk := &task{version: v}
	if timeout > 0 {
		tk.timer = time.AfterFunc(timeout, func() { s.expire(id, tk) })
	}
	a.tasks[id] = *tk
	s.sessions[id].send(&pb.ServerMessage{Body: &pb.ServerMessage_Task{Task: a.task}})
}

// expire withdraws client id's task tk if it is still in flight: the
// client was not Ready within the task timeout. The client is told why
// (a Discard: it drops the weights it may finish), and its slot goes to
// another idle client. tk is read under s.mu, which dispatch held while
// it set it.
func (s *Server) expire(id uint32, tk *task) {
	s.mu.Lock()
	defer s.mu.Unlock()
	a, v := s.async, tk.version
	if cur, ok := a.tasks[id]; !ok || cur.timer != tk.timer || s.finished != nil {
		return // answered, or the client left, or the run is over
	}
	delete(a.tasks, id)
	a.withdrawn[id] = v
	a.timeouts++
	s.discard(s.sessions[id], v, fmt.Sprintf("not Ready within the task timeout %v: the task is withdrawn and its slot given to another client; a late Ready for it is ignored, nothing sent, nothing charged, and the client's next task comes after it", s.cfg.TaskTimeout), "timeout")
	s.dispatch()
	s.notify()
}

// ready queues the weights sess trained for its task. A Ready without a
// task, or for another version than its task's, is refused: one task in
// flight per client, so that a flood of them costs the server nothing.
// The late Ready for a withdrawn task is ignored without counting
// against the client (it was told with a Discard, which it may not have
// read before it finished): the client is idle again. s.mu is held.
func (s *Server) ready(sess *session, r *pb.Ready) error {
	a := s.async
	if a == nil {
		return errors.New("a Ready, but the run is synchronous (mode sync) and does not over-select")
	}
	if w, ok := a.withdrawn[sess.id]; ok && int(r.GetVersion()) == w {
		delete(a.withdrawn, sess.id)
		s.log.Printf("client %d: its late Ready for the withdrawn task of model version %d ignored; it is idle again", sess.id, w)
		s.dispatch()
		return nil
	}
	tk, ok := a.tasks[sess.id]
	v := tk.version
	switch {
	case !ok:
		return errors.New("a Ready without a task (one task in flight per client)")
	case int(r.GetVersion()) != v:
		return fmt.Errorf("a Ready for model version %d; its task is version %d", r.GetVersion(), v)
	}
	a.end(sess.id)
	s.enqueue(sess, v, false)
	s.dispatch()
	s.notify()
	return nil
}

// reannounce acts on the Ready of a Join: weights the client trained and
// held across a lost connection or a server restart. Weights already used
// (uploaded in a buffer that ended) are ignored; those uploaded in the
// buffer the server lost in a restart (the next one) go to the head of the
// queue, so that the restarted buffer gets them back; the others queue as
// any Ready. A client in the buffer under way is its dropout: its weights
// wait for the buffer's end, and its next Task. A client whose task was
// withdrawn is idle afresh (its late Ready may never come: its training
// died with its connection), and weights of that task are discarded
// again, uncounted. r is nil if the Join announced nothing. s.mu is held.
func (s *Server) reannounce(sess *session, r *pb.Ready) {
	a, done := s.async, s.eng.Done()
	w, withdrawn := a.withdrawn[sess.id]
	delete(a.withdrawn, sess.id)
	if r == nil {
		return
	}
	v, up := int(r.GetVersion()), int(r.GetUploaded())
	switch {
	case a.members[sess.id]:
		return
	case withdrawn && v == w && up == 0:
		s.log.Printf("client %d: announced again its update from model version %d, whose task was withdrawn; discarded", sess.id, v)
		sess.send(&pb.ServerMessage{Body: &pb.ServerMessage_Discard{Discard: &pb.Discard{Version: uint32(v), Reason: "its task was withdrawn past the task timeout"}}})
		return
	case v > done:
		s.discard(sess, v, fmt.Sprintf("weights trained from model version %d, but the server has made %d steps", v, done), "invalid")
		return
	case up != 0 && up <= done:
		return // used by a buffer that ended: the client drops them itself (Welcome.rounds_done)
	}
	s.log.Printf("client %d: announced again its update from model version %d (uploaded in buffer %d, 0: none); queued", sess.id, v, up)
	s.enqueue(sess, v, up == done+1)
}

// enqueue queues sess's weights trained from version v, at the head if
// first, unless they are staler than MaxStaleness or the run has made its
// last step. s.mu is held.
func (s *Server) enqueue(sess *session, v int, first bool) {
	a := s.async
	if s.eng.Done() >= s.eng.Rounds() {
		return // the run is over: no buffer is left to take them, or to record a refusal
	}
	st := s.eng.Done() - v
	if s.stale(st) {
		s.discard(sess, v, s.staleReason(v, st), "stale")
		return
	}
	if !s.buffered() && (st != 0 || !a.sampled[sess.id]) {
		// Over-selection: only the current round's sample's weights.
		s.discard(sess, v, fmt.Sprintf("weights trained from model version %d are not for round %d's sample, the one given tasks", v, s.eng.Done()+1), "invalid")
		return
	}
	u := readyUpdate{id: sess.id, version: v}
	if first {
		a.queue = slices.Insert(a.queue, 0, u)
	} else {
		a.queue = append(a.queue, u)
	}
	s.cfg.Metrics.asyncClients(len(a.tasks), len(a.queue))
}

// stale reports whether an upload st steps stale is past MaxStaleness.
func (s *Server) stale(st int) bool {
	return s.cfg.Run.MaxStaleness > 0 && st > s.cfg.Run.MaxStaleness
}

func (s *Server) staleReason(v, st int) string {
	return fmt.Sprintf("weights trained from model version %d are %d steps stale, past max_staleness %d: refused before they were sent, nothing charged",
		v, st, s.cfg.Run.MaxStaleness)
}

// discard tells sess that its weights of version v will not be used, and
// why; reason is the metrics' label. s.mu is held.
func (s *Server) discard(sess *session, v int, why, reason string) {
	if reason == "stale" {
		s.async.refused++
	}
	s.cfg.Metrics.asyncRefused(reason)
	s.log.Printf("client %d: its update from model version %d refused: %s", sess.id, v, why)
	sess.send(&pb.ServerMessage{Body: &pb.ServerMessage_Discard{Discard: &pb.Discard{Version: uint32(v), Reason: why}}})
}

// runAsync runs the buffers left: each made of the first Buffer clients
// queued, run as a round among them, recorded as a round is.
func (s *Server) runAsync(ctx context.Context) error {
	s.mu.Lock()
	s.dispatch()
	s.mu.Unlock()
	first := true
	for s.eng.Done() < s.eng.Rounds() {
		begun := time.Now()
		ids, versions, err := s.nextBuffer(ctx, first)
		first = false
		if err != nil {
			return err
		}
		r, took, err := s.runRound(ctx, func(t int) (*fl.Plan, error) { return s.eng.BeginBuffer(t, ids, versions) }, begun)
		s.mu.Lock()
		r.Refused, s.async.refused = s.async.refused, 0
		r.Withdrawn, s.async.timeouts = s.async.timeouts, 0
		s.mu.Unlock()
		stop, err := s.record(r, took, err)
		s.mu.Lock()
		clear(s.async.members) // idle: each gets its next Task
		s.dispatch()
		s.notify()
		s.mu.Unlock()
		if stop || err != nil {
			return err
		}
		s.cfg.Metrics.staleness(r.Staleness)
	}
	return nil
}

// nextBuffer waits until Buffer clients are queued, refuses those grown
// staler than MaxStaleness while they waited, and takes the first Buffer
// as the next buffer's members: their ids, increasing, and versions. The
// server's first buffer waits Gather more once it could start, so that
// clients that held weights across a restart announce them again first
// (those of the buffer a restart interrupted go to the queue's head).
func (s *Server) nextBuffer(ctx context.Context, first bool) (ids, versions []int, err error) {
	k := s.cfg.Run.Buffer
	var logged, full time.Time
	start := time.Now()
	for {
		if err := ctx.Err(); err != nil {
			return nil, nil, err
		}
		s.mu.Lock()
		a := s.async
		a.queue = slices.DeleteFunc(a.queue, func(u readyUpdate) bool {
			st := s.eng.Done() - u.version
			if s.stale(st) {
				s.discard(s.sessions[u.id], u.version, s.staleReason(u.version, st), "stale")
				return true
			}
			return false
		})
		if len(a.queue) >= k && full.IsZero() {
			full = time.Now()
		}
		wait := 30 * time.Second
		if first && !full.IsZero() {
			wait = min(wait, s.cfg.Gather-time.Since(full))
		}
		if len(a.queue) >= k && (!first || wait <= 0) {
			buf := a.queue[:k]
			a.queue = slices.Clone(a.queue[k:])
			slices.SortFunc(buf, func(x, y readyUpdate) int { return int(x.id) - int(y.id) })
			for _, u := range buf {
				a.members[u.id] = true
				ids = append(ids, int(u.id))
				versions = append(versions, u.version)
			}
			s.cfg.Metrics.asyncClients(len(a.tasks), len(a.queue))
			s.mu.Unlock()
			return ids, versions, nil
		}
		if time.Since(logged) >= 30*time.Second {
			if !logged.IsZero() {
				s.log.Printf("buffer %d: waiting %v for %d updates: %d queued, %d clients training, %d connected",
					s.eng.Done()+1, time.Since(start).Round(time.Second), k, len(a.queue), len(a.tasks), len(s.sessions))
			}
			logged = time.Now()
		}
		ch := s.changed
		s.mu.Unlock()
		select {
		case <-ch:
		case <-time.After(wait):
		case <-ctx.Done():
			return nil, nil, ctx.Err()
		}
	}
}
