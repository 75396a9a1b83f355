package transport

import (
	"context"
	"regexp"
	"strings"
	"testing"
	"time"
)

// TestGrace: with the whole fleet awaited, a round goes on with the
// clients connected when the grace runs out, at once (not a --gather
// later), and its log line says how long it really waited.
func TestGrace(t *testing.T) {
	c := runConfig(t, "ldpq", 2, 1)
	began := time.Now()
	ts := serve(t, ServerConfig{Run: c, Grace: time.Second, Gather: 20 * time.Second}, "127.0.0.1:0")
	cl := join(t, context.Background(), ClientConfig{Server: ts.addr, ID: 0, Clients: 2})
	ts.wait(t)
	cl.wait(t)
	took := time.Since(began)
	m := regexp.MustCompile(`round 1: going on with 1 of 2 clients after waiting (\S+) \(--grace 1s\) for clients 1`).FindStringSubmatch(ts.log.String())
	if m == nil {
		t.Fatalf("no grace line in the server's log:\n%s", ts.log)
	}
	waited, err := time.ParseDuration(m[1])
	if err != nil {
		t.Fatal(err)
	}
	if waited < time.Second || waited > took {
		t.Errorf("logged a wait of %v; the grace is 1s and the whole run took %v", waited, took)
	}
	if took >= 20*time.Second {
		t.Errorf("the run took %v: the round waited --gather after the grace", took)
	}
}

// TestMaxWaitFleet: with the whole fleet awaited and no client at all, the
// round waits past the grace for a first client, for --max-wait at most,
// then the server stops with an error naming who is missing. A max-wait
// within the grace is refused.
func TestMaxWaitFleet(t *testing.T) {
	c := runConfig(t, "ldpq", 2, 1)
	ts := serve(t, ServerConfig{Run: c, Grace: 300 * time.Millisecond, MaxWait: time.Second}, "127.0.0.1:0")
	ended(t, ts.done, "run")
	if ts.err == nil || !strings.Contains(ts.err.Error(), "0 of the 1 clients needed connected after waiting 1s (--max-wait); missing clients 0, 1") {
		t.Errorf("server: %v", ts.err)
	}
	_, err := NewServer(ServerConfig{Run: c, Token: token, RoundTimeout: time.Minute, Grace: time.Minute, MaxWait: time.Second})
	if err == nil || !strings.Contains(err.Error(), "max-wait 1s must exceed grace 1m0s") {
		t.Errorf("max-wait within the grace: %v", err)
	}
}
