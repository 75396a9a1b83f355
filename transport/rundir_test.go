package transport

import (
	"context"
	"errors"
	"path/filepath"
	"strings"
	"testing"
	"time"
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
