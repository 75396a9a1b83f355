package transport

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/fedpq/fedpq/experiment"
)

// TestRunDirectory: a server started again on the directory of a run that
// is over says so, and where its summary is, rather than replay it; one
// started with another configuration on that directory names the
// settings that differ and what to do.
func TestRunDirectory(t *testing.T) {
	c := runConfig(t, "ldpq", 2, 1)
	ts := serve(t, ServerConfig{Run: c}, "127.0.0.1:0")
	for k := range 2 {
		join(t, context.Background(), ClientConfig{Server: ts.addr, ID: k, Clients: 2})
	}
	ts.wait(t)

	_, err := NewServer(ServerConfig{Run: c, Token: token, RoundTimeout: time.Minute})
	var fin *FinishedError
	if !errors.As(err, &fin) || fin.Rounds != 1 || !strings.Contains(err.Error(), "finished earlier, after 1 rounds (its summary: "+filepath.Join(c.Dir(), "summary.json")) {
		t.Errorf("a finished run started again: %v", err)
	}
	other := c
	other.Epsilon, other.Rounds = 2, 3
	_, err = NewServer(ServerConfig{Run: other, Token: token, RoundTimeout: time.Minute})
	if want := "holds a checkpoint of another configuration (epsilon: 1 -> 2; rounds: 1 -> 3): give this run its own --out, or remove " + c.Dir(); err == nil || !strings.Contains(err.Error(), want) {
		t.Errorf("another configuration in the run's directory: %v, want %q", err, want)
	}
}

// TestStoppedBeforeFirstRound: a server told to stop while it waits for
// its first round's clients has no checkpoint, and says so; it said "its
// checkpoint in DIR is kept", naming a file that did not exist.
func TestStoppedBeforeFirstRound(t *testing.T) {
	c := runConfig(t, "none", 4, 2)
	ts := serve(t, ServerConfig{Run: c, MinClients: 4}, "127.0.0.1:0")
	for deadline := time.Now().Add(time.Minute); !strings.Contains(ts.log.String(), "listening on"); time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("the server did not start:\n%s", ts.log)
		}
	}
	ts.cancel()
	ended(t, ts.done, "the server")
	if _, err := os.Stat(filepath.Join(c.Dir(), experiment.CheckpointFile)); err == nil {
		t.Fatal("a checkpoint exists before the first round")
	}
	log := ts.log.String()
	if ts.err == nil || strings.Contains(log, "checkpoint in") || strings.Contains(ts.err.Error(), "checkpoint is kept") {
		t.Errorf("stopped before round 1, the server names a checkpoint that does not exist: %v\n%s", ts.err, log)
	}
	if !strings.Contains(log, "no checkpoint") {
		t.Errorf("the server does not say it has no checkpoint:\n%s", log)
	}
}
