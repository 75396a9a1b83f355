package transport

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

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
	c := asyncConfig(t, "ldpq", 3, 2, 1, 2)
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
	if got := fmt.Sprint(rounds(t, c.Dir())); got != "[1 1]" {
		t.Errorf("uploads per buffer %s, want [1 1]", got)
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
