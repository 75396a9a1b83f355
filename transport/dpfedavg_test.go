package transport

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/fedpq/fedpq/report"
	"github.com/fedpq/fedpq/secagg"
)

// TestDPFedAvgDeployed: DP-FedAvg over gRPC. With the central Gaussian, a
// noise multiplier and a target, the server stops the run at the round
// that would spend past the target, says so, and its summary states the
// user-level guarantee within the target; with pbm under secure
// aggregation every upload of every round is counted and the guarantee
// against the server is stated, and a client that leaves mid-round has its
// share of the noise added by the server.
func TestDPFedAvgDeployed(t *testing.T) {
	t.Run("central budget", func(t *testing.T) {
		c := runConfig(t, "none", 4, 10)
		c.Weighting, c.Clip, c.NoiseMultiplier, c.TargetEpsilon = "mean", 1, 3, 2
		ts := serve(t, ServerConfig{Run: c}, "127.0.0.1:0")
		for k := range 4 {
			join(t, context.Background(), ClientConfig{Server: ts.addr, ID: k, Clients: 4})
		}
		s := ts.wait(t)
		u := s.Privacy.User
		if !strings.Contains(ts.log.String(), "run stopped") || !strings.Contains(ts.log.String(), "past its target 2") {
			t.Errorf("the server did not say the budget stopped the run:\n%s", ts.log)
		}
		if n := len(s.ClientRounds); n != 4 || s.ClientRounds[0] < 1 || s.ClientRounds[0] >= 10 {
			t.Errorf("client rounds %v: want the run stopped early", s.ClientRounds)
		}
		if u == nil || u.Model == nil || u.Model.Eps > 2 || u.Server != nil {
			t.Errorf("user-level ledger %+v: want eps at most 2 against the models, none against the server", u)
		}
	})
	t.Run("pbm secure", func(t *testing.T) {
		c := runConfig(t, "pbm", 6, 2)
		c.Weighting, c.Clip, c.NoiseMultiplier, c.SecureAggregation = "mean", 1, 1, true
		ts := serve(t, ServerConfig{Run: c}, "127.0.0.1:0")
		var clients []*testClient
		for k := range 6 {
			clients = append(clients, join(t, context.Background(), ClientConfig{Server: ts.addr, ID: k, Clients: 6}))
		}
		s := ts.wait(t)
		for _, tc := range clients {
			tc.wait(t)
		}
		if got := rounds(t, c.Dir()); len(got) != 2 || got[0] != 6 || got[1] != 6 {
			t.Errorf("uploads counted per round %v, want [6 6]", got)
		}
		if u := s.Privacy.User; u == nil || u.Server == nil || u.Model == nil || u.Server.Eps < u.Model.Eps {
			t.Errorf("user-level ledger %+v: want a guarantee against the server", u)
		}
	})
	// A client that leaves after the round starts (after checking its
	// shares, before its masked upload): the sum unmasks without it, and
	// the server adds its share of the noise, so the round still carries
	// the 7 shares the noise was sized for.
	t.Run("pbm secure dropout", func(t *testing.T) {
		c := runConfig(t, "pbm", 7, 1)
		c.Weighting, c.Clip, c.NoiseMultiplier, c.SecureAggregation = "mean", 1, 1, true
		ts := serve(t, ServerConfig{Run: c, KeyShareTimeout: 10 * time.Second}, "127.0.0.1:0")
		h, err := newHostile(t, ts.addr, 6, 7, ts.srv.su.Model.NumParams())
		if err != nil {
			t.Fatal(err)
		}
		h.gone = true // the run's only round: the server may finish before a rejoin
		errc := make(chan error, 1)
		go func() { errc <- h.play([]secagg.Behaviour{secagg.LeaveAfterCheck}) }()
		var clients []*testClient
		for k := range 6 {
			clients = append(clients, join(t, context.Background(), ClientConfig{Server: ts.addr, ID: k, Clients: 7}))
		}
		if err := <-errc; err != nil {
			t.Fatal(err)
		}
		s := ts.wait(t)
		for _, tc := range clients {
			tc.wait(t)
		}
		run, err := report.ReadRun(c.Dir())
		if err != nil {
			t.Fatal(err)
		}
		if len(run.Rounds) != 1 || s.Rounds != 1 {
			t.Fatalf("%d rounds, want 1", len(run.Rounds))
		}
		if r := run.Rounds[0]; r.Clients != 6 || r.Dropped != 1 || r.NoiseShares != 1 || r.Discarded != "" {
			t.Errorf("round 1: %d uploads, %d dropped, %d shares added by the server, discarded %q: want 6, 1, 1 and applied", r.Clients, r.Dropped, r.NoiseShares, r.Discarded)
		}
		if u := s.Privacy.User; u == nil || u.Server == nil || u.Model == nil {
			t.Errorf("user-level ledger %+v: want guarantees against the models and the server", u)
		}
	})
	// The adaptive clip under distributed noise: the count rides in each
	// client's vector (one more coordinate), the server reads it from the
	// secure sum and announces the moved clip with the next round.
	t.Run("skellam secure adaptive", func(t *testing.T) {
		c := runConfig(t, "skellam", 6, 3)
		c.Weighting, c.Clip, c.NoiseMultiplier, c.SecureAggregation = "mean", 1, 1, true
		c.ClipQuantile, c.ClipQuantileNoise = 0.5, 3
		ts := serve(t, ServerConfig{Run: c}, "127.0.0.1:0")
		var clients []*testClient
		for k := range 6 {
			clients = append(clients, join(t, context.Background(), ClientConfig{Server: ts.addr, ID: k, Clients: 6}))
		}
		ts.wait(t)
		for _, tc := range clients {
			tc.wait(t)
		}
		run, err := report.ReadRun(c.Dir())
		if err != nil {
			t.Fatal(err)
		}
		if len(run.Rounds) != 3 {
			t.Fatalf("%d rounds, want 3", len(run.Rounds))
		}
		for i, r := range run.Rounds {
			if r.Clients != 6 || len(r.RangeRadius) != 2 {
				t.Errorf("round %d: %d uploads, ranges %v: want 6, and the vector's bound with the count's scale", i+1, r.Clients, r.RangeRadius)
			}
		}
		if a, b := run.Rounds[0].RangeRadius[0], run.Rounds[2].RangeRadius[0]; a == b {
			t.Errorf("the clip stayed at %v: want it moved by the clients' counts", a)
		}
	})
}
