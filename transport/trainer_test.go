package transport

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/fedpq/fedpq/experiment"
	"github.com/fedpq/fedpq/extern/externtest"
	"github.com/fedpq/fedpq/report"
)

func TestMain(m *testing.M) {
	externtest.Main() // the fake trainer, where this process is one
	os.Exit(m.Run())
}

// TestExternalTrainerDeployed: a run whose model is an external trainer's
// (the fake's), deployed: the server's trainer describes the model and
// evaluates it, each client trains with its own trainer and never runs the
// server's command. A client whose trainer crashes declines the round,
// telling the server only the kind of failure (the trainer's output stays
// in its log), and takes part in the next round with a new trainer. A
// client without a trainer cannot take part.
func TestExternalTrainerDeployed(t *testing.T) {
	dir := t.TempDir()
	ran := filepath.Join(dir, "server-trainer-ran")
	c := runConfig(t, "corbin", 4, 3)
	c.Model = experiment.External
	c.Trainer = fmt.Sprintf("echo >> %q; %s", ran, externtest.Command(""))
	ts := serve(t, ServerConfig{Run: c}, "127.0.0.1:0")
	mark := filepath.Join(dir, "crashed")
	onceCrashing := fmt.Sprintf("if [ -e %q ]; then %s; fi; touch %q; %s", mark, externtest.Command(""), mark, externtest.Command("crash-train"))
	var cs []*testClient
	for k := range 4 {
		tr := externtest.Command("")
		if k == 2 {
			tr = onceCrashing
		}
		cs = append(cs, join(t, context.Background(), ClientConfig{Server: ts.addr, ID: k, Clients: 4, Trainer: tr}))
	}
	sum := ts.wait(t)
	for _, cl := range cs {
		cl.wait(t)
	}
	if got := fmt.Sprint(rounds(t, c.Dir())); got != "[3 4 4]" || sum.Rounds != 3 {
		t.Errorf("uploads per round %s, %d rounds; want [3 4 4]: client 2 declined round 1", got, sum.Rounds)
	}
	log := ts.log.String()
	if !strings.Contains(log, `round 1: client 2 declined: "local training failed: the trainer process timed out, exited or broke the protocol"`) || strings.Contains(log, "RuntimeError") {
		t.Errorf("server log: want client 2's decline, with the kind of failure only:\n%s", log)
	}
	if l := cs[2].log.String(); !strings.Contains(l, "round 1: local training failed: trainer 0 (pid ") || !strings.Contains(l, "RuntimeError: the fake trainer crashed") {
		t.Errorf("client 2's log: want the trainer's failure in full:\n%s", l)
	}
	if b, err := os.ReadFile(ran); err != nil || strings.Count(string(b), "\n") != 1 {
		t.Errorf("the server's trainer command ran %d times (%v); want once, by the server", strings.Count(string(b), "\n"), err)
	}
	if sum.Trainer == nil || sum.Trainer.Requests != 3 {
		t.Errorf("the server's trainer cost %+v; want its 3 evaluations", sum.Trainer)
	}

	ts = serve(t, ServerConfig{Run: runConfigExternal(t)}, "127.0.0.1:0")
	cl := join(t, context.Background(), ClientConfig{Server: ts.addr, ID: 0, Clients: 4})
	ended(t, cl.done, "client")
	if cl.err == nil || !strings.Contains(cl.err.Error(), "the run's model is external, an external trainer's own: give this client --trainer CMD") {
		t.Errorf("a client without a trainer: %v", cl.err)
	}
	ts.cancel()
}

func runConfigExternal(t *testing.T) experiment.Config {
	c := runConfig(t, "ldpq", 4, 1)
	c.Model = experiment.External
	c.Trainer = externtest.Command("")
	return c
}

// TestSlowPrepare: a client whose trainer takes longer to start than the
// server waits for a join (its JoinTimeout) joins in a new session, and
// does not take the closed one for a lost server.
func TestSlowPrepare(t *testing.T) {
	c := runConfig(t, "ldpq", 3, 1)
	ts := serve(t, ServerConfig{Run: c, JoinTimeout: time.Second}, "127.0.0.1:0")
	var cs []*testClient
	for k := range 3 {
		tr := externtest.Command("")
		if k == 1 {
			tr = "sleep 2; " + tr
		}
		cs = append(cs, join(t, context.Background(), ClientConfig{Server: ts.addr, ID: k, Clients: 3, Trainer: tr}))
	}
	if sum := ts.wait(t); sum.Rounds != 1 {
		t.Errorf("%d rounds, want 1", sum.Rounds)
	}
	for _, cl := range cs {
		cl.wait(t)
	}
	if l := cs[1].log.String(); !strings.Contains(l, "joining in a new session") || strings.Contains(l, "no session with the server") {
		t.Errorf("client 1's log: want it to join in a new session after its slow start:\n%s", l)
	}
}

// TestProxDeployed: a deployed client trains with the run's prox_mu,
// which it reads from the server's configuration: with the fake trainer
// (whose step shrinks by 1/(1+mu)) the deployed run's test losses are the
// simulation's, and differ from those of the run without FedProx.
func TestProxDeployed(t *testing.T) {
	c := runConfig(t, "none", 3, 2)
	c.Model, c.Trainer, c.Range, c.ProxMu = experiment.External, externtest.Command(""), "fixed:0,10", 1
	ts := serve(t, ServerConfig{Run: c}, "127.0.0.1:0")
	for k := range 3 {
		join(t, context.Background(), ClientConfig{Server: ts.addr, ID: k, Clients: 3, Trainer: externtest.Command("")})
	}
	ts.wait(t)
	deployed := testLosses(t, c.Dir())
	simulate := func(mu float64) []float64 {
		s := c
		s.ProxMu, s.Out = mu, t.TempDir()
		if _, err := experiment.Run(context.Background(), s, nil); err != nil {
			t.Fatal(err)
		}
		return testLosses(t, s.Dir())
	}
	sim, plain := simulate(1), simulate(0)
	if fmt.Sprint(deployed) != fmt.Sprint(sim) || fmt.Sprint(sim) == fmt.Sprint(plain) {
		t.Errorf("test losses: deployed %v, simulated %v, simulated without FedProx %v; want the first two equal, the third different", deployed, sim, plain)
	}
}

// testLosses are a run's test losses, round by round.
func testLosses(t *testing.T, dir string) []float64 {
	t.Helper()
	run, err := report.ReadRun(dir)
	if err != nil {
		t.Fatal(err)
	}
	var out []float64
	for _, r := range run.Rounds {
		if r.Loss == nil {
			t.Fatalf("round %d has no test loss", r.Round)
		}
		out = append(out, *r.Loss)
	}
	return out
}
