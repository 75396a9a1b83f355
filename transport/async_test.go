package transport

import (
	"context"
	"fmt"
	"log"
	"math"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/credentials/insecure"

	"github.com/fedpq/fedpq/experiment"
	"github.com/fedpq/fedpq/report"
	pb "github.com/fedpq/fedpq/transport/fedpqpb"
)

// asyncConfig is a small asynchronous run: n clients, m training at once,
// buffers of k, steps buffers.
func asyncConfig(t *testing.T, mechanism string, n, m, k, steps int) experiment.Config {
	c := runConfig(t, mechanism, n, steps)
	c.Mode, c.Concurrency, c.Buffer = "async", m, k
	return c
}

// readRun is the run's recorded rounds (buffers).
func readRun(t *testing.T, dir string) []report.Round {
	t.Helper()
	run, err := report.ReadRun(dir)
	if err != nil {
		t.Fatal(err)
	}
	return run.Rounds
}

// TestAsyncStragglers: a deployed asynchronous run (FedBuff) with real
// stragglers on loopback (the first third of the clients ten times
// slower) makes its steps, each from a full buffer of uploads, some of
// them stale; the fast clients upload more often than the slow ones.
func TestAsyncStragglers(t *testing.T) {
	c := asyncConfig(t, "ldpq", 6, 4, 2, 6)
	c.Staleness = "poly:0.5"
	ts := serve(t, ServerConfig{Run: c}, "127.0.0.1:0")
	delay, err := ParseDelay("tail:0.34:10:0.05")
	if err != nil {
		t.Fatal(err)
	}
	var cs []*testClient
	for k := range 6 {
		cs = append(cs, join(t, context.Background(), ClientConfig{Server: ts.addr, ID: k, Clients: 6, Delay: delay}))
	}
	sum := ts.wait(t)
	for _, cl := range cs {
		cl.wait(t)
	}
	rs := readRun(t, c.Dir())
	stale := 0
	for _, r := range rs {
		if r.Clients != 2 || r.Dropped != 0 {
			t.Errorf("buffer %d: %d uploads, %d missing; want 2, 0", r.Round, r.Clients, r.Dropped)
		}
		stale = max(stale, r.MaxStaleness)
	}
	if len(rs) != 6 || sum.Rounds != 6 {
		t.Errorf("%d buffers recorded, summary %d; want 6", len(rs), sum.Rounds)
	}
	if stale == 0 {
		t.Errorf("no upload was stale:\n%s", ts.log)
	}
	if !strings.Contains(ts.log.String(), "buffer 6 done: 2 uploads, 0 missing, staleness mean") {
		t.Errorf("the server did not log its buffers:\n%s", ts.log)
	}
}

// TestAsyncFlood: a Ready without a task, a second Ready and one for
// another version are refused, and a client that keeps sending them is
// cut off; the run goes on with the honest clients.
func TestAsyncFlood(t *testing.T) {
	c := asyncConfig(t, "ldpq", 3, 2, 2, 2)
	ts := serve(t, ServerConfig{Run: c}, "127.0.0.1:0")
	r := dial(t, ts.addr)
	if err := r.join(2, 3, token); err != nil {
		t.Fatal(err)
	}
	task := r.next(t, func(m *pb.ServerMessage) bool { return m.GetTask() != nil }).GetTask()
	send := func(v uint32) {
		if err := r.stream.Send(&pb.ClientMessage{Body: &pb.ClientMessage_Ready{Ready: &pb.Ready{Version: v}}}); err != nil {
			t.Fatal(err)
		}
	}
	send(task.GetVersion() + 1) // another version
	send(task.GetVersion())     // accepted: queued
	for range maxInvalid {
		send(task.GetVersion()) // no task any more
	}
	// Its queued weights leave with it, before the honest clients join: a
	// buffer of 2 cannot begin with them alone.
	waitFor(t, "client 2 to be disconnected", func() bool { return strings.Contains(ts.log.String(), "client 2 disconnected") })
	var a, b *testClient
	a = join(t, context.Background(), ClientConfig{Server: ts.addr, ID: 0, Clients: 3})
	b = join(t, context.Background(), ClientConfig{Server: ts.addr, ID: 1, Clients: 3})
	ts.wait(t)
	a.wait(t)
	b.wait(t)
	log := ts.log.String()
	for _, want := range []string{
		"client 2: refused: a Ready for model version 1; its task is version 0",
		"client 2: refused: a Ready without a task (one task in flight per client)",
		"refused messages in round",
	} {
		if !strings.Contains(log, want) {
			t.Errorf("the server did not log %q:\n%s", want, log)
		}
	}
	if got := fmt.Sprint(rounds(t, c.Dir())); got != "[2 2]" {
		t.Errorf("uploads per buffer %s, want [2 2]", got)
	}
}

// waitFor polls cond for up to a minute.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for start := time.Now(); !cond(); time.Sleep(10 * time.Millisecond) {
		if time.Since(start) > time.Minute {
			t.Fatalf("waited a minute for %s", what)
		}
	}
}

// TestAsyncStale: weights trained from a model more than max_staleness
// steps old are refused when the client says Ready, before anything of
// them is sent, with the reason; the buffer records the refusal and no
// upload of the client is counted.
func TestAsyncStale(t *testing.T) {
	c := asyncConfig(t, "ldpq", 4, 4, 1, 5)
	c.MaxStaleness = 1
	second := make(chan struct{})
	metrics := NewServerMetrics()
	ts := serve(t, ServerConfig{Run: c, Metrics: metrics, Progress: func(r report.Round) {
		if r.Round == 2 {
			close(second)
		}
	}}, "127.0.0.1:0")
	r := dial(t, ts.addr)
	if err := r.join(3, 4, token); err != nil {
		t.Fatal(err)
	}
	task := r.next(t, func(m *pb.ServerMessage) bool { return m.GetTask() != nil }).GetTask()
	var cs []*testClient
	for k := range 3 {
		cs = append(cs, join(t, context.Background(), ClientConfig{Server: ts.addr, ID: k, Clients: 4}))
	}
	<-second
	if err := r.stream.Send(&pb.ClientMessage{Body: &pb.ClientMessage_Ready{Ready: &pb.Ready{Version: task.GetVersion()}}}); err != nil {
		t.Fatal(err)
	}
	d := r.next(t, func(m *pb.ServerMessage) bool { return m.GetDiscard() != nil }).GetDiscard()
	if d.GetVersion() != 0 || !strings.Contains(d.GetReason(), "steps stale, past max_staleness 1: refused before they were sent, nothing charged") {
		t.Errorf("discarded version %d: %q", d.GetVersion(), d.GetReason())
	}
	r.stream.CloseSend()
	ts.wait(t)
	for _, cl := range cs {
		cl.wait(t)
	}
	refused := 0
	for _, b := range readRun(t, c.Dir()) {
		refused += b.Refused
		if b.Clients != 1 || b.MaxStaleness > 1 {
			t.Errorf("buffer %d: %d uploads, max staleness %d; want 1, at most 1", b.Round, b.Clients, b.MaxStaleness)
		}
	}
	if refused < 1 { // client 3's, and the others' that came two steps late
		t.Errorf("%d refusals recorded, want at least 1", refused)
	}
	if !strings.Contains(ts.log.String(), "client 3: its update from model version 0 refused") {
		t.Errorf("the server did not log the refusal:\n%s", ts.log)
	}
	families, err := metrics.Registry().Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range families {
		switch f.GetName() {
		case "fedpq_server_async_staleness":
			if n := f.GetMetric()[0].GetHistogram().GetSampleCount(); n != 5 {
				t.Errorf("fedpq_server_async_staleness counts %d buffers, want 5", n)
			}
		case "fedpq_server_async_refused_total":
			for _, m := range f.GetMetric() {
				if m.GetLabel()[0].GetValue() == "stale" && int(m.GetCounter().GetValue()) != refused {
					t.Errorf("fedpq_server_async_refused_total{reason=\"stale\"} %v, want %d", m.GetCounter().GetValue(), refused)
				}
			}
		}
	}
}

// leaver joins as client id of n, trains for nothing, says Ready to its
// first Task, and leaves when its buffer starts: a dropout of the buffer's
// round.
func leaver(t *testing.T, addr string, id, n uint32) {
	t.Helper()
	r := dial(t, addr)
	if err := r.join(id, n, token); err != nil {
		t.Fatal(err)
	}
	task := r.next(t, func(m *pb.ServerMessage) bool { return m.GetTask() != nil }).GetTask()
	if err := r.stream.Send(&pb.ClientMessage{Body: &pb.ClientMessage_Ready{Ready: &pb.Ready{Version: task.GetVersion()}}}); err != nil {
		t.Fatal(err)
	}
	go func() {
		if rs, err := r.stream.Recv(); err == nil && rs.GetRoundStart() != nil {
			r.stream.CloseSend()
		}
	}()
}

// TestAsyncSecure: a secure buffer is a secure round among its members: a
// member that leaves is its dropout and the buffer sums the others; a
// buffer whose members fall below the threshold is lost whole, its
// members' uploads reported missing, and the model does not move.
func TestAsyncSecure(t *testing.T) {
	for _, tc := range []struct {
		name           string
		honest, leave  int
		uploads, drops int
	}{{"dropout", 3, 1, 3, 1}, {"below-threshold", 1, 2, 0, 3}} {
		t.Run(tc.name, func(t *testing.T) {
			n := tc.honest + tc.leave
			c := asyncConfig(t, "ldpq", n, n, n, 1)
			c.Weighting, c.SecureAggregation = "mean", true
			ts := serve(t, ServerConfig{Run: c, RoundTimeout: 10 * time.Second}, "127.0.0.1:0")
			for k := tc.honest; k < n; k++ {
				leaver(t, ts.addr, uint32(k), uint32(n))
			}
			var cs []*testClient
			for k := range tc.honest {
				cs = append(cs, join(t, context.Background(), ClientConfig{Server: ts.addr, ID: k, Clients: n}))
			}
			ts.wait(t)
			for _, cl := range cs {
				cl.wait(t)
			}
			b := readRun(t, c.Dir())[0]
			if b.Clients != tc.uploads || b.Dropped != tc.drops {
				t.Errorf("buffer 1: %d uploads, %d missing (discarded %q); want %d, %d", b.Clients, b.Dropped, b.Discarded, tc.uploads, tc.drops)
			}
		})
	}
}

// TestAsyncMatchesSimulation: with every client in every buffer (buffer =
// concurrency = clients) and no mechanism's noise, a deployed asynchronous
// run is synchronous FedAvg with staleness 0, and ends within 3 points of
// accuracy of the simulation of the same configuration. (Not bit for bit:
// a deployed client draws its local training order from its own secret,
// the simulation from the run's, as TestMatchesSimulation says of sync.)
func TestAsyncMatchesSimulation(t *testing.T) {
	c := asyncConfig(t, "none", 6, 6, 6, 5)
	ts := serve(t, ServerConfig{Run: c}, "127.0.0.1:0")
	for k := range 6 {
		join(t, context.Background(), ClientConfig{Server: ts.addr, ID: k, Clients: 6})
	}
	dep := ts.wait(t)
	for _, b := range readRun(t, c.Dir()) {
		if b.Clients != 6 || b.MaxStaleness != 0 {
			t.Errorf("buffer %d: %d uploads, max staleness %d; want 6, 0", b.Round, b.Clients, b.MaxStaleness)
		}
	}
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

// TestAsyncRestart: a server stopped in the middle of an asynchronous run
// and started again resumes from its last step; its clients reconnect,
// announce again the weights they held (those uploaded in the buffer the
// stop interrupted first), and no trained update is dropped: every buffer
// is full, and no client declines a buffer or has its weights discarded.
func TestAsyncRestart(t *testing.T) {
	c := asyncConfig(t, "ldpq", 4, 4, 2, 4)
	second := make(chan struct{})
	ts := serve(t, ServerConfig{Run: c, Progress: func(r report.Round) {
		if r.Round == 2 {
			close(second)
		}
	}}, "127.0.0.1:0")
	delay, err := ParseDelay("fixed:0.1")
	if err != nil {
		t.Fatal(err)
	}
	var cs []*testClient
	for k := range 4 {
		cs = append(cs, join(t, context.Background(), ClientConfig{Server: ts.addr, ID: k, Clients: 4, Delay: delay}))
	}
	<-second
	ts.cancel()
	<-ts.done
	again := serve(t, ServerConfig{Run: c, Gather: 2 * time.Second}, ts.addr)
	sum := again.wait(t)
	for _, cl := range cs {
		cl.wait(t)
		if log := cl.log.String(); strings.Contains(log, "declined") || strings.Contains(log, "update from model version") {
			t.Errorf("a client lost its update:\n%s", log)
		}
	}
	if !strings.Contains(again.log.String(), "announced again its update") {
		t.Errorf("no client announced its weights again:\n%s", again.log)
	}
	if got := fmt.Sprint(rounds(t, c.Dir())); got != "[2 2 2 2]" || sum.Rounds != 4 {
		t.Errorf("uploads per buffer %s over %d, want [2 2 2 2]", got, sum.Rounds)
	}
}

// TestAsyncFleet: a fleet of 30 clients in one process (fedpq client
// --partition a-b/N) serves an asynchronous run unchanged, with delays
// that make the first tenth of its clients stragglers: every buffer is
// full.
func TestAsyncFleet(t *testing.T) {
	const n = 30
	c := asyncConfig(t, "corbin", n, 12, 6, 4)
	ts := serve(t, ServerConfig{Run: c}, "127.0.0.1:0")
	delay, err := ParseDelay("tail:0.1:10:0.02")
	if err != nil {
		t.Fatal(err)
	}
	var ccs []ClientConfig
	for k := range n {
		ccs = append(ccs, ClientConfig{Server: ts.addr, ID: k, Clients: n, Key: NewKey(), Token: token,
			Creds: insecure.NewCredentials(), RetryFor: 30 * time.Second, Delay: delay})
	}
	logs := &syncBuffer{}
	f, err := NewFleet(FleetConfig{Clients: ccs, Workers: 2, Every: time.Second, Log: log.New(logs, "fleet: ", 0)})
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan FleetResult, 1)
	go func() { done <- f.Run(context.Background()) }()
	var res FleetResult
	select {
	case res = <-done:
	case <-time.After(2 * time.Minute):
		t.Fatalf("the fleet did not end; its log:\n%s", logs)
	}
	ts.wait(t)
	if res.Err != nil || res.Finished != n {
		t.Fatalf("fleet: %d finished, error %v; want %d\n%s", res.Finished, res.Err, n, logs)
	}
	if got := fmt.Sprint(rounds(t, c.Dir())); got != "[6 6 6 6]" {
		t.Errorf("uploads per buffer %s, want [6 6 6 6]", got)
	}
}

// TestAsyncLeaveWhileTraining: a client that leaves while it trains costs
// nothing: its slot (the run's only one) goes to the idle client, and the
// run ends.
func TestAsyncLeaveWhileTraining(t *testing.T) {
	c := asyncConfig(t, "ldpq", 2, 1, 1, 2)
	ts := serve(t, ServerConfig{Run: c}, "127.0.0.1:0")
	r := dial(t, ts.addr)
	if err := r.join(1, 2, token); err != nil {
		t.Fatal(err)
	}
	r.next(t, func(m *pb.ServerMessage) bool { return m.GetTask() != nil })
	idle := join(t, context.Background(), ClientConfig{Server: ts.addr, ID: 0, Clients: 2})
	waitFor(t, "client 0 to join", func() bool {
		ts.srv.mu.Lock()
		defer ts.srv.mu.Unlock()
		return len(ts.srv.sessions) == 2
	})
	r.stream.CloseSend()
	ts.wait(t)
	idle.wait(t)
	if got := fmt.Sprint(rounds(t, c.Dir())); got != "[1 1]" {
		t.Errorf("uploads per buffer %s, want [1 1]", got)
	}
}

// TestAsyncRestartMidBuffer: a server stopped inside a buffer's round,
// after a member's upload was acknowledged and while another member holds
// the buffer open, and started again, gets that upload back: the member
// announces its weights again, heads the queue, and sends the very same
// upload to the restarted buffer of the same number.
func TestAsyncRestartMidBuffer(t *testing.T) {
	c := asyncConfig(t, "ldpq", 3, 3, 2, 3)
	second := make(chan struct{})
	ts := serve(t, ServerConfig{Run: c, Progress: func(r report.Round) {
		if r.Round == 2 {
			close(second)
		}
	}}, "127.0.0.1:0")
	delay, err := ParseDelay("fixed:0.3")
	if err != nil {
		t.Fatal(err)
	}
	var cs []*testClient
	for k := range 2 {
		cs = append(cs, join(t, context.Background(), ClientConfig{Server: ts.addr, ID: k, Clients: 3, Delay: delay}))
	}
	<-second
	// Client 2 says Ready at once, joins buffer 3 with the first of the
	// others, and never uploads: the buffer stays open.
	r := dial(t, ts.addr)
	if err := r.join(2, 3, token); err != nil {
		t.Fatal(err)
	}
	task := r.next(t, func(m *pb.ServerMessage) bool { return m.GetTask() != nil }).GetTask()
	if err := r.stream.Send(&pb.ClientMessage{Body: &pb.ClientMessage_Ready{Ready: &pb.Ready{Version: task.GetVersion()}}}); err != nil {
		t.Fatal(err)
	}
	member := -1
	waitFor(t, "a member's upload to buffer 3", func() bool {
		for k, cl := range cs {
			if strings.Contains(cl.log.String(), "round 3: upload accepted") {
				member = k
				return true
			}
		}
		return false
	})
	ts.cancel()
	<-ts.done
	again := serve(t, ServerConfig{Run: c, Gather: 2 * time.Second}, ts.addr)
	again.wait(t)
	for _, cl := range cs {
		cl.wait(t)
		if strings.Contains(cl.log.String(), "declined") {
			t.Errorf("a client declined:\n%s", cl.log)
		}
	}
	if !strings.Contains(cs[member].log.String(), "round 3: asked again (the server restarted); sending the same upload") {
		t.Errorf("client %d did not send its upload again:\n%s", member, cs[member].log)
	}
	if got := fmt.Sprint(rounds(t, c.Dir())); got != "[2 2 2]" {
		t.Errorf("uploads per buffer %s, want [2 2 2]", got)
	}
}

// asyncRefusals is the server's fedpq_server_async_refused_total for
// reason.
func asyncRefusals(t *testing.T, m *ServerMetrics, reason string) int {
	t.Helper()
	families, err := m.Registry().Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range families {
		if f.GetName() != "fedpq_server_async_refused_total" {
			continue
		}
		for _, c := range f.GetMetric() {
			if c.GetLabel()[0].GetValue() == reason {
				return int(c.GetCounter().GetValue())
			}
		}
	}
	t.Fatalf("no fedpq_server_async_refused_total{reason=%q}", reason)
	return 0
}

// TestAsyncTaskTimeout: a client that holds its Task past the task
// timeout has it withdrawn with a Discard that says why; its late Ready
// is ignored without counting against it, and it gets a next Task; the
// withdrawal is counted by the metric and in metrics.jsonl.
func TestAsyncTaskTimeout(t *testing.T) {
	c := asyncConfig(t, "ldpq", 4, 2, 1, 6)
	late := make(chan struct{})
	metrics := NewServerMetrics()
	ts := serve(t, ServerConfig{Run: c, Metrics: metrics, TaskTimeout: time.Second, Progress: func(r report.Round) {
		if r.Round == 3 { // hold the run until the late Ready is answered
			select {
			case <-late:
			case <-time.After(20 * time.Second):
			}
		}
	}}, "127.0.0.1:0")
	r := dial(t, ts.addr)
	if err := r.join(0, 4, token); err != nil {
		t.Fatal(err)
	}
	task := r.next(t, func(m *pb.ServerMessage) bool { return m.GetTask() != nil }).GetTask()
	var cs []*testClient
	for k := 1; k < 4; k++ {
		cs = append(cs, join(t, context.Background(), ClientConfig{Server: ts.addr, ID: k, Clients: 4}))
	}
	d := r.next(t, func(m *pb.ServerMessage) bool { return m.GetDiscard() != nil }).GetDiscard()
	if d.GetVersion() != task.GetVersion() || !strings.Contains(d.GetReason(), "not Ready within the task timeout 1s: the task is withdrawn") {
		t.Errorf("discarded version %d (task %d): %q", d.GetVersion(), task.GetVersion(), d.GetReason())
	}
	if err := r.stream.Send(&pb.ClientMessage{Body: &pb.ClientMessage_Ready{Ready: &pb.Ready{Version: task.GetVersion()}}}); err != nil {
		t.Fatal(err)
	}
	r.next(t, func(m *pb.ServerMessage) bool { return m.GetTask() != nil }) // idle again
	r.stream.CloseSend()                                                    // leaves with its second task: no timeout
	close(late)
	ts.wait(t)
	for _, cl := range cs {
		cl.wait(t)
	}
	withdrawn := 0
	for _, b := range readRun(t, c.Dir()) {
		withdrawn += b.Withdrawn
		if b.Clients != 1 {
			t.Errorf("buffer %d: %d uploads, want 1", b.Round, b.Clients)
		}
	}
	if withdrawn != 1 || ts.sum.Withdrawn != 1 {
		t.Errorf("metrics.jsonl counts %d tasks withdrawn, the summary %d; want 1", withdrawn, ts.sum.Withdrawn)
	}
	if n := asyncRefusals(t, metrics, "timeout"); n != 1 {
		t.Errorf("fedpq_server_async_refused_total{reason=\"timeout\"} %d, want 1", n)
	}
	log := ts.log.String()
	if !strings.Contains(log, "client 0: its late Ready for the withdrawn task of model version 0 ignored; it is idle again") {
		t.Errorf("the server did not log the late Ready:\n%s", log)
	}
	if strings.Contains(log, "client 0: refused:") {
		t.Errorf("the late Ready was refused as a bad message:\n%s", log)
	}
}

// TestAsyncTaskTimeoutStraggler: a client that would take 60 s to say
// Ready (its --delay) loses its slot after the task timeout, logs the
// Discard, drops its work at once and says the late Ready that makes it
// idle again; the others make every step of the run, each buffer full,
// long before it would have answered.
func TestAsyncTaskTimeoutStraggler(t *testing.T) {
	c := asyncConfig(t, "ldpq", 4, 2, 1, 6)
	metrics := NewServerMetrics()
	ts := serve(t, ServerConfig{Run: c, Metrics: metrics, TaskTimeout: 500 * time.Millisecond}, "127.0.0.1:0")
	hung, err := ParseDelay("fixed:60")
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	slow := join(t, ctx, ClientConfig{Server: ts.addr, ID: 0, Clients: 4, Delay: hung})
	waitFor(t, "the straggler's first task", func() bool { return strings.Contains(slow.log.String(), "joined") })
	// The others take 0.2 s a task, so that the run outlasts the timeout.
	fast, err := ParseDelay("fixed:0.2")
	if err != nil {
		t.Fatal(err)
	}
	var cs []*testClient
	for k := 1; k < 4; k++ {
		cs = append(cs, join(t, context.Background(), ClientConfig{Server: ts.addr, ID: k, Clients: 4, Delay: fast}))
	}
	sum := ts.wait(t)
	if took := time.Since(start); took > 30*time.Second {
		t.Errorf("the run took %v: the straggler held its slot", took)
	}
	for _, cl := range cs {
		cl.wait(t)
	}
	cancel()
	<-slow.done
	if sum.Rounds != 6 {
		t.Errorf("%d steps, want 6", sum.Rounds)
	}
	for _, b := range readRun(t, c.Dir()) {
		if b.Clients != 1 {
			t.Errorf("buffer %d: %d uploads, want 1", b.Round, b.Clients)
		}
	}
	if sum.Withdrawn < 1 || int(sum.Withdrawn) != asyncRefusals(t, metrics, "timeout") {
		t.Errorf("the summary counts %d tasks withdrawn, the metric %d; want the same, at least 1", sum.Withdrawn, asyncRefusals(t, metrics, "timeout"))
	}
	if !strings.Contains(ts.log.String(), "client 0: its update from model version 0 refused: not Ready within the task timeout 500ms") {
		t.Errorf("the server did not log the withdrawal:\n%s", ts.log)
	}
	if !strings.Contains(ts.log.String(), "client 0: its late Ready for the withdrawn task of model version 0 ignored") {
		t.Errorf("the straggler did not answer the Discard with its Ready:\n%s", ts.log)
	}
	waitFor(t, "the straggler's log of the Discard", func() bool {
		return strings.Contains(slow.log.String(), "update from model version 0 refused: not Ready within the task timeout")
	})
}
