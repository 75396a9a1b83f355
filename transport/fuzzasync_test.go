package transport

import (
	"context"
	"crypto/ed25519"
	"fmt"
	"io"
	"log"
	"math"
	"slices"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/fedpq/fedpq/experiment"
	"github.com/fedpq/fedpq/fl"
	"github.com/fedpq/fedpq/mech"
	pb "github.com/fedpq/fedpq/transport/fedpqpb"
)

// FuzzAsyncMessages' run: its clients (2 training at once, buffers of 2, max
// staleness 1) and steps.
const (
	fuzzAsyncClients = 3
	fuzzAsyncSteps   = 3
	fuzzAsyncOps     = 64 // a script's ops read at most: each exec stays short
)

// The ops of a FuzzAsyncMessages script: an op byte names its client
// (op % fuzzAsyncClients) and its kind (op / fuzzAsyncClients % opCount);
// opReady and opJoin read two more bytes, opUpload one.
const (
	opHonest  = iota // answers what the client was sent, as an honest client does
	opReady          // a Ready for any version, any uploaded
	opJoin           // joins again, announcing a Ready of any version and uploaded, or its own weights
	opLeave          // its connection is lost
	opUpload         // an upload for any round: honest if a buffer is under way, else not
	opExpire         // its task, if it has one, passes the task timeout
	opMessage        // the fuzzed message
	opDecline        // declines the buffer under way
	opCount
)

// fuzzPeer is the test's side of one client of FuzzAsyncMessages: its
// session, and what an honest client would hold.
type fuzzPeer struct {
	id       uint32
	key      ed25519.PrivateKey
	sess     *session       // nil while it is not connected
	task     int            // the version of the task it trains, -1: none
	late     int            // the version of a task withdrawn, whose late Ready it owes; -1: none
	held     int            // the version its held weights were trained from, -1: none
	uploaded int            // the buffer it uploaded them in, 0: none
	start    *pb.RoundStart // a buffer's start it has not answered
}

// fuzzAsync is FuzzAsyncMessages' server and one exec's state.
type fuzzAsync struct {
	t      *testing.T
	srv    *Server
	m      mech.Mechanism
	global [][]float32
	peers  []*fuzzPeer
}

// FuzzAsyncMessages: whatever the clients of an asynchronous run (mode
// async) send, in whatever order, with a buffer under way or not (Ready
// messages of any version and uploaded, Joins that announce a Ready again,
// uploads in and out of their buffer, repeated, tasks withdrawn, the
// fuzzed message), the server never panics, never queues a Ready without
// a task (a Join's announcement aside), keeps at most Concurrency tasks
// and each client once, and, the clients then honest, finishes the run
// within a time limit: it never deadlocks.
//
// The input is a script of ops (see opHonest) and a message that opMessage
// sends. The server's loop (runAsync) runs as in a deployment; the
// clients' messages go straight to its handlers, as a session's would.
func FuzzAsyncMessages(f *testing.F) {
	c := experiment.Default()
	c.Clients, c.Rounds, c.Mechanism, c.Out = fuzzAsyncClients, fuzzAsyncSteps, "ldpq", f.TempDir()
	c.Mode, c.Concurrency, c.Buffer, c.Weighting, c.MaxStaleness = "async", 2, 2, "mean", 1
	srv, err := NewServer(ServerConfig{
		Run: c, Token: token, RoundTimeout: 5 * time.Second, Gather: time.Millisecond,
		TaskTimeout: time.Hour, // the script withdraws tasks (opExpire)
		Log:         log.New(io.Discard, "", 0),
	})
	if err != nil {
		f.Fatal(err)
	}
	m, err := mech.New(c.Mechanism, srv.su.Engine.Mech)
	if err != nil {
		f.Fatal(err)
	}
	fz := &fuzzAsync{srv: srv, m: m, global: clone(srv.eng.Global())}

	op := func(kind, client int) byte { return byte(kind*fuzzAsyncClients + client) }
	honest := []byte{op(opHonest, 0), op(opHonest, 1), op(opHonest, 2)}
	ready := func(v, up uint32) []byte {
		b, _ := proto.Marshal(&pb.ClientMessage{Body: &pb.ClientMessage_Ready{Ready: &pb.Ready{Version: v, Uploaded: up}}})
		return b
	}
	upload, _ := proto.Marshal(&pb.ClientMessage{Body: &pb.ClientMessage_Upload{Upload: &pb.Upload{Round: 1, Payloads: [][]byte{{1, 2, 3}}, Loss: 0.5}}})
	join, _ := proto.Marshal(&pb.ClientMessage{Body: &pb.ClientMessage_Join{Join: &pb.Join{Client: 1, Clients: fuzzAsyncClients, Token: token, Examples: 10}}})
	for _, seed := range []struct {
		script []byte
		msg    []byte
	}{
		{nil, nil}, // the honest run alone
		{[]byte{op(opReady, 2), 0, 0, op(opReady, 0), 0, 0, op(opReady, 0), 0, 0}, ready(0, 0)},                        // without a task, and twice
		{[]byte{op(opReady, 0), 1, 0, op(opMessage, 1), op(opMessage, 2)}, ready(7, 3)},                                // for other versions
		{slices.Concat(honest, honest, []byte{op(opJoin, 0), 1, 1, op(opJoin, 1), 0, 0, op(opJoin, 2), 0xff, 0}), nil}, // announced again, mid-buffer
		{slices.Concat(honest, honest, []byte{op(opUpload, 0), 1, op(opUpload, 0), 1, op(opUpload, 1), 2, op(opUpload, 2), 1}), upload},
		{slices.Concat(honest, honest, []byte{op(opLeave, 0), op(opDecline, 1), op(opJoin, 0), 0xff, 0}), join},
		{[]byte{op(opExpire, 0), op(opReady, 0), 0, 0, op(opJoin, 1), 0, 0, op(opExpire, 1), op(opJoin, 1), 0, 0}, nil}, // withdrawn, then Ready late or joined again
		{slices.Concat(honest, honest, honest, honest, []byte{op(opJoin, 0), 1, 1, op(opJoin, 1), 1, 2, op(opReady, 2), 1, 0}), ready(1, 1)},
		{slices.Concat(honest, honest, honest, []byte{op(opJoin, 0), 0, 0}, honest, []byte{op(opJoin, 1), 0, 0}, honest, []byte{op(opJoin, 2), 0, 0}), nil}, // stale
	} {
		f.Add(seed.script, seed.msg)
	}
	f.Fuzz(func(t *testing.T, script, msg []byte) {
		fz.run(t, script, msg)
	})
}

// run plays one script on a fresh run, then the clients honest to its end.
func (fz *fuzzAsync) run(t *testing.T, script, msg []byte) {
	fz.t = t
	srv := fz.srv
	if err := srv.eng.Restore(fl.State{Joined: make([]int, fuzzAsyncClients), Global: clone(fz.global)}); err != nil {
		t.Fatal(err)
	}
	srv.mu.Lock()
	srv.async, srv.round, srv.finished = newAsyncState([]byte("fuzz")), nil, nil
	srv.sessions, srv.joined = map[uint32]*session{}, map[uint32]time.Time{}
	srv.mu.Unlock()
	fz.peers = nil
	for k := range fuzzAsyncClients {
		seed := make([]byte, ed25519.SeedSize)
		seed[0] = byte(k)
		p := &fuzzPeer{id: uint32(k), key: ed25519.NewKeyFromSeed(seed), task: -1, late: -1, held: -1}
		fz.peers = append(fz.peers, p)
		fz.join(p, nil)
	}
	ctx, cancel := context.WithCancel(context.Background())
	ran := make(chan error, 1)
	go func() { ran <- srv.run(ctx) }()
	defer func() {
		cancel()
		<-ran
		srv.mu.Lock()
		for _, tk := range srv.async.tasks {
			tk.timer.Stop()
		}
		srv.mu.Unlock()
	}()

	arg := func() byte {
		if len(script) == 0 {
			return 0
		}
		b := script[0]
		script = script[1:]
		return b
	}
	for n := 0; len(script) > 0 && n < fuzzAsyncOps; n++ {
		b := arg()
		p := fz.peers[int(b)%fuzzAsyncClients]
		kind := int(b) / fuzzAsyncClients % opCount
		fz.drain(p)
		if p.sess == nil && kind != opJoin {
			fz.join(p, fz.announce(p))
		}
		switch kind {
		case opHonest:
			fz.honest(p)
			fz.settle()
		case opReady:
			fz.ready(p, &pb.Ready{Version: uint32(arg()), Uploaded: uint32(arg())})
		case opJoin:
			v, up := arg(), arg()
			r := &pb.Ready{Version: uint32(v), Uploaded: uint32(up)}
			if v == 0xff {
				r = fz.announce(p) // its own weights, if any
			}
			fz.join(p, r)
		case opLeave:
			srv.leave(p.sess)
			p.sess, p.task, p.start = nil, -1, nil
		case opUpload:
			fz.upload(p, uint32(arg()))
		case opExpire:
			srv.mu.Lock()
			tk, ok := srv.async.tasks[p.id]
			srv.mu.Unlock()
			if ok {
				srv.expire(p.id, &tk)
			}
		case opMessage:
			var m pb.ClientMessage
			if proto.Unmarshal(msg, &m) != nil {
				break
			}
			if r := m.GetReady(); r != nil {
				fz.ready(p, r)
			} else {
				srv.handle(p.sess, &m)
			}
		case opDecline:
			srv.mu.Lock()
			t := 0
			if srv.round != nil {
				t = srv.round.plan.T
			}
			srv.mu.Unlock()
			srv.handle(p.sess, &pb.ClientMessage{Body: &pb.ClientMessage_Decline{Decline: &pb.Decline{Round: uint32(t), Reason: "fuzz"}}})
		}
		fz.check()
	}

	// The clients honest from here on: the run finishes.
	limit := time.After(30 * time.Second)
	for {
		for _, p := range fz.peers {
			fz.drain(p)
			if p.sess == nil {
				fz.join(p, fz.announce(p))
			}
			fz.honest(p)
		}
		fz.check()
		select {
		case err := <-ran:
			ran <- err // for the deferred wait
			if err != nil {
				t.Fatalf("the run failed: %v", err)
			}
			if srv.eng.Done() != fuzzAsyncSteps {
				t.Fatalf("the run ended after %d steps of %d", srv.eng.Done(), fuzzAsyncSteps)
			}
			for i, w := range srv.eng.Global() {
				for j, v := range w {
					if math.IsNaN(float64(v)) || math.IsInf(float64(v), 0) {
						t.Fatalf("global tensor %d [%d] = %v", i, j, v)
					}
				}
			}
			return
		case <-limit:
			srv.mu.Lock()
			a := srv.async
			state := fmt.Sprintf("%d steps done, tasks %v, queue %v, members %v, withdrawn %v, buffer under way %v",
				srv.eng.Done(), a.tasks, a.queue, a.members, a.withdrawn, srv.round != nil)
			srv.mu.Unlock()
			t.Fatalf("the run has not finished 30 s after its clients turned honest: %s", state)
		case <-time.After(time.Millisecond):
		}
	}
}

// settle waits, up to a second, for the server's loop to act on what the
// clients sent: to begin the buffer it can, or end the one it can, and
// give the tasks it can; so that a script's later ops meet the buffers
// its honest ops made possible.
func (fz *fuzzAsync) settle() {
	srv := fz.srv
	for start := time.Now(); time.Since(start) < time.Second; time.Sleep(100 * time.Microsecond) {
		srv.mu.Lock()
		a, rd := srv.async, srv.round
		settled := srv.eng.Done() >= fuzzAsyncSteps ||
			rd == nil && len(a.members) == 0 && len(a.queue) < srv.cfg.Run.Buffer ||
			rd != nil && len(rd.waitingFor()) > 0
		srv.mu.Unlock()
		if settled {
			return
		}
	}
}

// join joins p again (a new session, replacing its old one), announcing r.
func (fz *fuzzAsync) join(p *fuzzPeer, r *pb.Ready) {
	srv := fz.srv
	srv.mu.Lock()
	delete(srv.joined, p.id) // the test rejoins faster than rejoinInterval
	srv.mu.Unlock()
	j := &pb.Join{
		Client: p.id, Clients: fuzzAsyncClients, Identity: p.key.Public().(ed25519.PublicKey), Token: token, Examples: 10,
		Signature: ed25519.Sign(p.key, joinSigned(srv.runID, fuzzChallenge, p.id)), Ready: r,
	}
	sess, err := srv.join(context.Background(), j, fuzzChallenge, "fuzz")
	if err != nil {
		fz.t.Fatalf("client %d: join: %v", p.id, err)
	}
	// Its task and buffer went with its old session.
	p.sess, p.task, p.late, p.start = sess, -1, -1, nil
	fz.drain(p)
}

// announce is the Ready an honest p's Join carries: its held weights.
func (fz *fuzzAsync) announce(p *fuzzPeer) *pb.Ready {
	if p.held < 0 {
		return nil
	}
	return &pb.Ready{Version: uint32(p.held), Uploaded: uint32(p.uploaded)}
}

// drain reads what the server sent p, as an honest client does. A
// session the server closed ends, as its stream would.
func (fz *fuzzAsync) drain(p *fuzzPeer) {
	if p.sess == nil {
		return
	}
	for {
		select {
		case m := <-p.sess.out:
			fz.read(p, m)
			continue
		default:
		}
		break
	}
	if p.sess.ctx.Err() != nil {
		fz.srv.leave(p.sess)
		p.sess, p.task, p.start = nil, -1, nil
	}
}

func (fz *fuzzAsync) read(p *fuzzPeer, m any) {
	var sm *pb.ServerMessage
	switch m := m.(type) {
	case *pb.ServerMessage:
		sm = m
	case *sharedStart:
		sm = &pb.ServerMessage{}
		if err := proto.Unmarshal(slices.Concat(m.head, m.shared), sm); err != nil {
			fz.t.Fatalf("client %d: a buffer's start: %v", p.id, err)
		}
	default:
		fz.t.Fatalf("client %d: sent a %T", p.id, m)
	}
	switch b := sm.GetBody().(type) {
	case *pb.ServerMessage_Task:
		if p.task >= 0 || p.late >= 0 {
			fz.t.Fatalf("client %d: a Task of version %d, with its task of version %d (late %d) unanswered", p.id, b.Task.GetVersion(), p.task, p.late)
		}
		p.task, p.held, p.uploaded = int(b.Task.GetVersion()), -1, 0
	case *pb.ServerMessage_Discard:
		v := int(b.Discard.GetVersion())
		if v == p.task {
			p.task, p.late = -1, v // withdrawn: it owes its late Ready
		}
		if v == p.held {
			p.held, p.uploaded = -1, 0
		}
	case *pb.ServerMessage_Welcome:
		if p.uploaded != 0 && p.uploaded <= int(b.Welcome.GetRoundsDone()) {
			p.held, p.uploaded = -1, 0
		}
	case *pb.ServerMessage_RoundStart:
		p.start = b.RoundStart
	}
}

// honest answers what p was sent: a withdrawn task's late Ready, its
// task's Ready, and its upload to the buffer under way.
func (fz *fuzzAsync) honest(p *fuzzPeer) {
	if p.late >= 0 {
		v := p.late
		p.late = -1
		fz.ready(p, &pb.Ready{Version: uint32(v)})
	}
	if p.task >= 0 {
		v := p.task
		p.task = -1
		fz.ready(p, &pb.Ready{Version: uint32(v)})
	}
	if rs := p.start; rs != nil {
		p.start = nil
		if p.held != int(rs.GetVersion()) || p.uploaded != 0 && p.uploaded != int(rs.GetRound()) {
			// Not weights it holds (a fuzzed Join announced them): it
			// declines, as Client.round does.
			fz.srv.handle(p.sess, &pb.ClientMessage{Body: &pb.ClientMessage_Decline{Decline: &pb.Decline{Round: rs.GetRound(), Reason: "held"}}})
			return
		}
		fz.upload(p, rs.GetRound())
		p.uploaded = int(rs.GetRound())
	}
}

// ready sends p's Ready r, and checks, in the same hold of the server's
// lock, that it queued p only if p had a task of r's version (the late
// Ready of a withdrawn task is ignored, not queued). The server's
// handler is called as handle calls it.
func (fz *fuzzAsync) ready(p *fuzzPeer, r *pb.Ready) {
	srv := fz.srv
	srv.mu.Lock()
	defer srv.mu.Unlock()
	a := srv.async
	tk, tasked := a.tasks[p.id]
	w, withdrawn := a.withdrawn[p.id]
	queued := slices.ContainsFunc(a.queue, func(u readyUpdate) bool { return u.id == p.id })
	err := srv.ready(p.sess, r)
	if err != nil {
		srv.refuse(p.sess, err)
		return
	}
	v := int(r.GetVersion())
	switch {
	case withdrawn && w == v:
		if !queued && slices.ContainsFunc(a.queue, func(u readyUpdate) bool { return u.id == p.id }) {
			fz.t.Fatalf("client %d: the late Ready of its withdrawn task of version %d queued", p.id, v)
		}
	case !tasked:
		fz.t.Fatalf("client %d: a Ready of version %d accepted without a task", p.id, v)
	case tk.version != v:
		fz.t.Fatalf("client %d: a Ready of version %d accepted for its task of version %d", p.id, v, tk.version)
	}
	// What the client holds now, whether the Ready was the script's or
	// its own.
	if withdrawn && w == v {
		p.late = -1
	} else {
		p.task, p.held, p.uploaded = -1, v, 0
	}
}

// upload sends p's upload for round t: an honest one if p is in the
// buffer under way, else one of the wrong size.
func (fz *fuzzAsync) upload(p *fuzzPeer, t uint32) {
	srv := fz.srv
	payloads := [][]byte{{1, 2, 3}}
	srv.mu.Lock()
	if rd := srv.round; rd != nil {
		if pos, ok := rd.pos[p.id]; ok {
			plan := rd.plan
			slot, err := plan.Pairing.ClientSlot(pos, srv.su.Model.NumParams())
			if err != nil {
				srv.mu.Unlock()
				fz.t.Fatal(err)
			}
			if payloads, err = fl.Encode(fz.m, srv.cfg.Run.Perturb, plan.Global, clone(plan.Global), plan.Ranges, slot); err != nil {
				srv.mu.Unlock()
				fz.t.Fatal(err)
			}
		}
	}
	srv.mu.Unlock()
	srv.handle(p.sess, &pb.ClientMessage{Body: &pb.ClientMessage_Upload{Upload: &pb.Upload{Round: t, Payloads: payloads, Loss: 0.5}}})
}

// check checks the asynchronous state's invariants: at most Concurrency
// tasks; each client at most once in the queue, and not while it trains
// or is in the buffer under way; every client training or queued
// connected.
func (fz *fuzzAsync) check() {
	srv := fz.srv
	srv.mu.Lock()
	defer srv.mu.Unlock()
	a := srv.async
	if len(a.tasks) > srv.cfg.Run.Concurrency {
		fz.t.Fatalf("%d tasks in flight, concurrency %d", len(a.tasks), srv.cfg.Run.Concurrency)
	}
	seen := map[uint32]bool{}
	for _, u := range a.queue {
		_, training := a.tasks[u.id]
		switch {
		case seen[u.id]:
			fz.t.Fatalf("client %d queued twice: %v", u.id, a.queue)
		case training:
			fz.t.Fatalf("client %d queued while it trains", u.id)
		case a.members[u.id]:
			fz.t.Fatalf("client %d queued while in the buffer under way", u.id)
		case srv.sessions[u.id] == nil:
			fz.t.Fatalf("client %d queued, not connected", u.id)
		}
		seen[u.id] = true
	}
	for id := range a.tasks {
		if srv.sessions[id] == nil {
			fz.t.Fatalf("client %d has a task, not connected", id)
		}
	}
}
