package transport

import (
	"context"
	"crypto/ed25519"
	"io"
	"log"
	"math"
	"slices"
	"testing"
	"time"

	"github.com/fedpq/fedpq/experiment"
	pb "github.com/fedpq/fedpq/transport/fedpqpb"
)

// TestAsyncDispatchUniform: an asynchronous server gives each free slot
// to an idle client drawn uniformly, as the simulation does, not in the
// order of ids: with --delay tail (the lowest ids slow) an order by id
// sent the slow tenth their tasks in waves that held every slot at once.
// 100 clients, 10 slots, 2,000 dispatches of 10 among them: the mean
// number of neighbours (ids i and i+1) given a task together is 0.9 for
// a uniform draw (99 neighbour pairs, each both chosen with probability
// 10·9/(100·99)), and 9 for tasks that go round by id; each client's
// share of tasks is 1/10 within 5 standard errors.
func TestAsyncDispatchUniform(t *testing.T) {
	const n, m, draws = 100, 10, 2000
	c := experiment.Default()
	c.Clients, c.Rounds, c.Mechanism, c.Out = n, 1, "ldpq", t.TempDir()
	c.Mode, c.Concurrency, c.Buffer, c.Weighting = "async", m, m, "mean"
	srv, err := NewServer(ServerConfig{
		Run: c, Token: token, RoundTimeout: time.Minute, TaskTimeout: time.Hour, Log: log.New(io.Discard, "", 0),
	})
	if err != nil {
		t.Fatal(err)
	}
	sessions := joinAll(t, srv, n)
	tasks := make([]int, n)
	neighbours := 0
	srv.mu.Lock()
	defer srv.mu.Unlock()
	for range draws {
		srv.dispatch()
		a := srv.async
		if len(a.tasks) != m {
			t.Fatalf("%d tasks given, want %d", len(a.tasks), m)
		}
		for id := range a.tasks {
			tasks[id]++
			if _, ok := a.tasks[id+1]; ok {
				neighbours++
			}
		}
		for id := range a.tasks {
			a.end(id)
		}
		for _, ss := range sessions {
			for len(ss.out) > 0 {
				<-ss.out
			}
		}
	}
	if mean := float64(neighbours) / draws; math.Abs(mean-0.9) > 0.15 {
		t.Errorf("%.3f neighbours given a task together per dispatch, want 0.9 (a uniform draw; 9 when tasks go round by id)", mean)
	}
	p := float64(m) / n
	se := math.Sqrt(draws * p * (1 - p))
	for id, got := range tasks {
		if math.Abs(float64(got)-draws*p) > 5*se {
			t.Errorf("client %d given %d tasks of %d dispatches, want %.0f ± %.0f", id, got, draws, draws*p, 5*se)
		}
	}
}

// joinAll joins clients 0 to n-1 of srv's run, each with a key of its
// own, straight through the server's Join handler.
func joinAll(t *testing.T, srv *Server, n int) []*session {
	t.Helper()
	sessions := make([]*session, n)
	for k := range n {
		seed := make([]byte, ed25519.SeedSize)
		seed[0], seed[1] = byte(k), byte(k>>8)
		key := ed25519.NewKeyFromSeed(seed)
		j := &pb.Join{
			Client: uint32(k), Clients: uint32(n), Identity: key.Public().(ed25519.PublicKey), Token: token, Examples: 10,
			Signature: ed25519.Sign(key, joinSigned(srv.runID, fuzzChallenge, uint32(k))),
		}
		var err error
		if sessions[k], err = srv.join(context.Background(), j, fuzzChallenge, "test"); err != nil {
			t.Fatalf("client %d: %v", k, err)
		}
	}
	return sessions
}

// TestOverSelectHostile: in a synchronous run that over-selects, a
// client outside the round's sample cannot get its weights into the
// round: a Ready without a task is refused as a bad message, and weights
// announced in a Join (a restart's path) are discarded as not the
// sample's; neither is queued. A sampled client's Ready is queued once,
// and a second Ready of it is refused.
func TestOverSelectHostile(t *testing.T) {
	const n = 6
	c := experiment.Default()
	c.Clients, c.Rounds, c.Mechanism, c.Out = n, 1, "ldpq", t.TempDir()
	c.ClientsPerRound, c.OverSelect, c.Weighting = 2, 0.5, "mean"
	srv, err := NewServer(ServerConfig{
		Run: c, Token: token, RoundTimeout: time.Minute, Log: log.New(io.Discard, "", 0),
	})
	if err != nil {
		t.Fatal(err)
	}
	sessions := joinAll(t, srv, n)
	sample, err := srv.eng.Oversample(1, nil)
	if err != nil {
		t.Fatal(err)
	}
	srv.mu.Lock()
	defer srv.mu.Unlock()
	a := srv.async
	for _, k := range sample { // as overSelected gives the sample its tasks
		a.sampled[uint32(k)] = true
		srv.give(uint32(k), 0)
	}
	outside := -1
	for k := range n {
		if !slices.Contains(sample, k) {
			outside = k
			break
		}
	}
	if len(sample) != 3 || outside < 0 {
		t.Fatalf("sample %v of %d clients: want 3 (ceil(2 x 1.5)) and one left out", sample, n)
	}
	if err := srv.ready(sessions[outside], &pb.Ready{Version: 0}); err == nil {
		t.Errorf("client %d, outside the sample %v, had its Ready without a task taken", outside, sample)
	}
	srv.reannounce(sessions[outside], &pb.Ready{Version: 0})
	if err := srv.ready(sessions[sample[0]], &pb.Ready{Version: 0}); err != nil {
		t.Errorf("sampled client %d's Ready refused: %v", sample[0], err)
	}
	if err := srv.ready(sessions[sample[0]], &pb.Ready{Version: 0}); err == nil {
		t.Errorf("sampled client %d's second Ready taken", sample[0])
	}
	if want := []readyUpdate{{id: uint32(sample[0]), version: 0}}; !slices.Equal(a.queue, want) {
		t.Errorf("queued %v, want only the sampled client's %v", a.queue, want)
	}
	for _, tk := range a.tasks {
		if tk.timer != nil {
			tk.timer.Stop()
		}
	}
}
