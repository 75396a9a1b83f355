package transport

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/fedpq/fedpq/experiment"
	"github.com/fedpq/fedpq/report"
)

// overSelectRun runs a deployed synchronous run of n clients, p per round
// over-selected by f, for rounds rounds, the first slow of them (ids
// 0 .. slow-1) 40 times slower to finish (--delay tail); it returns the
// rounds recorded, the summary, the over_selected refusals counted and
// the server's log.
func overSelectRun(t *testing.T, c experiment.Config, n, slow int) ([]report.Round, *report.Summary, int, string) {
	t.Helper()
	metrics := NewServerMetrics()
	ts := serve(t, ServerConfig{Run: c, Metrics: metrics, RoundTimeout: 30 * time.Second}, "127.0.0.1:0")
	delay, err := ParseDelay(fmt.Sprintf("tail:%g:40:0.05", float64(slow)/float64(n)))
	if err != nil {
		t.Fatal(err)
	}
	var cs []*testClient
	for k := range n {
		cs = append(cs, join(t, context.Background(), ClientConfig{Server: ts.addr, ID: k, Clients: n, Delay: delay}))
	}
	sum := ts.wait(t)
	for _, cl := range cs {
		cl.wait(t)
	}
	return readRun(t, c.Dir()), sum, asyncRefusals(t, metrics, "over_selected"), ts.log.String()
}

// checkOverSelected: every round has exactly p uploads, none missing, and
// cut some of its sample; the slow clients are never kept and the ledger
// charges them nothing; the summary counts the cut.
func checkOverSelected(t *testing.T, rs []report.Round, sum *report.Summary, refusals, rounds, p, slow int, log string) {
	t.Helper()
	if len(rs) != rounds || sum.Rounds != rounds {
		t.Fatalf("%d rounds recorded, summary %d; want %d:\n%s", len(rs), sum.Rounds, rounds, log)
	}
	cut := 0
	for _, r := range rs {
		if r.Clients != p || r.Dropped != 0 || r.Cut < 1 {
			t.Errorf("round %d: %d uploads, %d missing, %d cut; want %d, 0, at least 1", r.Round, r.Clients, r.Dropped, r.Cut, p)
		}
		cut += r.Cut
	}
	if sum.Cut != int64(cut) || refusals != cut {
		t.Errorf("metrics.jsonl counts %d cut, the summary %d, the metric %d", cut, sum.Cut, refusals)
	}
	if len(sum.ClientRounds) < slow {
		t.Fatalf("the summary's client rounds %v", sum.ClientRounds)
	}
	total := 0
	for k, n := range sum.ClientRounds {
		if k < slow && n != 0 {
			t.Errorf("slow client %d took part in %d rounds: it never finishes first", k, n)
		}
		total += n
	}
	if total != rounds*p {
		t.Errorf("the ledger charges %d client rounds (%v), want %d", total, sum.ClientRounds, rounds*p)
	}
	if !strings.Contains(log, fmt.Sprintf("over-selected: round 1 kept the first %d clients to finish; nothing sent, nothing charged", p)) {
		t.Errorf("the server did not tell the cut clients why:\n%s", log)
	}
}

// TestOverSelectStragglers: a deployed synchronous run that over-selects
// (over_select 1: 8 of 10 clients sampled for 4 places) with real
// stragglers keeps the first 4 of each round's sample to finish: every
// round has exactly 4 uploads, the slow clients are never kept and are
// charged nothing, and the run ends.
func TestOverSelectStragglers(t *testing.T) {
	const n, p, rounds, slow = 10, 4, 4, 2
	c := runConfig(t, "ldpq", n, rounds)
	c.ClientsPerRound, c.OverSelect = p, 1
	rs, sum, refusals, log := overSelectRun(t, c, n, slow)
	checkOverSelected(t, rs, sum, refusals, rounds, p, slow, log)
}

// TestOverSelectSecure: over-selection with secure aggregation (6 of 8
// sampled for 3 places): the secure round is among the kept clients only.
func TestOverSelectSecure(t *testing.T) {
	const n, p, rounds, slow = 8, 3, 2, 2
	c := runConfig(t, "ldpq", n, rounds)
	c.ClientsPerRound, c.OverSelect = p, 1
	c.Weighting, c.SecureAggregation = "mean", true
	rs, sum, refusals, log := overSelectRun(t, c, n, slow)
	checkOverSelected(t, rs, sum, refusals, rounds, p, slow, log)
}

// TestOverSelectPaired: over-selection with a paired mechanism (corbin):
// the kept clients are paired among themselves, 4 kept, 2 pairs.
func TestOverSelectPaired(t *testing.T) {
	const n, p, rounds, slow = 8, 4, 3, 2
	c := runConfig(t, "corbin", n, rounds)
	c.ClientsPerRound, c.OverSelect = p, 1
	rs, sum, refusals, log := overSelectRun(t, c, n, slow)
	checkOverSelected(t, rs, sum, refusals, rounds, p, slow, log)
	for r := 1; r <= rounds; r++ {
		if !strings.Contains(log, fmt.Sprintf("round %d: %d clients, %d pairs", r, p, p/2)) {
			t.Errorf("round %d was not paired among its %d kept clients:\n%s", r, p, log)
		}
	}
}
