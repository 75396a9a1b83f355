package transport

import (
	"context"
	"crypto/ed25519"
	"io"
	"log"
	"math"
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
	sessions := make([]*session, n)
	for k := range n {
		seed := make([]byte, ed25519.SeedSize)
		seed[0], seed[1] = byte(k), byte(k>>8)
		key := ed25519.NewKeyFromSeed(seed)
		j := &pb.Join{
			Client: uint32(k), Clients: n, Identity: key.Public().(ed25519.PublicKey), Token: token, Examples: 10,
			Signature: ed25519.Sign(key, joinSigned(srv.runID, fuzzChallenge, uint32(k))),
		}
		if sessions[k], err = srv.join(context.Background(), j, fuzzChallenge, "test"); err != nil {
			t.Fatalf("client %d: %v", k, err)
		}
	}
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
