package transport

import (
	"context"
	"fmt"
	"log"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/credentials/insecure"

	"github.com/fedpq/fedpq/data"
)

// TestFleet: one process runs a fleet of 60 clients against a server, in
// plain rounds with pairs (corbin) on partitions of a shared dataset and
// on the clients' own files, and in a secure round; every client's upload
// is counted, and the clients are clients of their own: each its own
// identity key (the server pins 60 distinct keys), its own randomness and
// its own state file.
func TestFleet(t *testing.T) {
	const n = 60
	for _, tc := range []struct {
		mech   string
		secure bool
		own    bool
		rounds int
	}{{"corbin", false, false, 2}, {"corbin", false, true, 1}, {"ldpq", true, false, 1}} {
		t.Run(fmt.Sprintf("%s/secure=%v/own=%v", tc.mech, tc.secure, tc.own), func(t *testing.T) {
			c := runConfig(t, tc.mech, n, tc.rounds)
			c.SecureAggregation = tc.secure
			if tc.secure {
				c.Weighting = "mean"
			}
			var own string
			if tc.own {
				own, _ = ownFiles(t, c.Dataset, n)
				c.TestData, c.MaxExamples = filepath.Join(own, "test.npz"), 1000
			}
			ts := serve(t, ServerConfig{Run: c}, "127.0.0.1:0")
			states := t.TempDir()
			var ccs []ClientConfig
			for k := range n {
				cc := ClientConfig{
					Server: ts.addr, ID: k, Clients: n, Key: NewKey(), Token: token, Creds: insecure.NewCredentials(),
					RetryFor: 30 * time.Second, State: filepath.Join(states, fmt.Sprintf("client-%d.state", k)),
				}
				if tc.own {
					cc.Clients, cc.Data = 0, filepath.Join(own, fmt.Sprintf("client-%d.npz", k))
				}
				ccs = append(ccs, cc)
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
			sum := ts.wait(t)
			if res.Err != nil || res.Finished != n || res.Rounds != tc.rounds {
				t.Fatalf("fleet: %d finished after %d rounds, error %v; want %d after %d\n%s", res.Finished, res.Rounds, res.Err, n, tc.rounds, logs)
			}
			want := strings.TrimSpace(strings.Repeat(fmt.Sprint(n)+" ", tc.rounds))
			if got := fmt.Sprint(rounds(t, c.Dir())); got != "["+want+"]" || sum.Rounds != tc.rounds {
				t.Errorf("uploads per round %s, want [%s]", got, want)
			}
			pinned, err := LoadRoster(filepath.Join(c.Dir(), PinsFile))
			if err != nil {
				t.Fatal(err)
			}
			keys, secrets := map[string]bool{}, map[string]bool{}
			for k, c := range f.clients {
				keys[string(pinned[uint32(k)])] = true
				secrets[string(c.secret)] = true
				if _, err := os.Stat(c.cfg.State); err != nil {
					t.Errorf("client %d's state file: %v", k, err)
				}
			}
			if len(pinned) != n || len(keys) != n || len(secrets) != n {
				t.Errorf("%d pinned keys, %d distinct, %d distinct secrets; want %d each", len(pinned), len(keys), len(secrets), n)
			}
			// The fleet logs summary lines, not a line per client per round.
			if lines := strings.Count(logs.String(), "\n"); lines > 5*fleetLines {
				t.Errorf("the fleet logged %d lines:\n%s", lines, logs)
			}
			if !strings.Contains(logs.String(), fmt.Sprintf("round %d: %d started, %d uploaded, %d accepted", tc.rounds, n, n, n)) {
				t.Errorf("no summary of round %d's %d uploads:\n%s", tc.rounds, n, logs)
			}
		})
	}
}

// ownFiles writes n clients' own files of dataset, client-K.npz, and the
// test set, test.npz, in a new directory, and returns it with the dataset
// they were written from.
func ownFiles(t *testing.T, dataset string, n int) (string, *data.Federated) {
	t.Helper()
	fed, err := data.Load(dataset, data.Options{Clients: n, Seed: 1})
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	for k, idx := range fed.Natural {
		if err := data.Write(filepath.Join(dir, fmt.Sprintf("client-%d.npz", k)), data.FormatNPZ, fed.Train, idx, "", nil); err != nil {
			t.Fatal(err)
		}
	}
	all := make([]int, fed.Test.Len())
	for i := range all {
		all[i] = i
	}
	if err := data.Write(filepath.Join(dir, "test.npz"), data.FormatNPZ, fed.Test, all, "", nil); err != nil {
		t.Fatal(err)
	}
	return dir, fed
}
