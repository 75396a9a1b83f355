package transport

import (
	"context"
	"fmt"
	"math"
	"os"
	"strings"
	"testing"

	"github.com/fedpq/fedpq/experiment"
	"github.com/fedpq/fedpq/fl"
)

// TestByzantineClients: 2 of 8 deployed clients attack, unknown to the
// server, and every round counts all 8 uploads. With none and equal
// weights the server's estimated update moves by exactly what the attack
// says: sign-flip changes the mean by -2(u0 + u1)/8 and scale:3 by
// +2(u0 + u1)/8 (u0, u1 the attackers' honest updates, which each client
// computes alike in every run of one configuration, whose id its seed is
// bound to), so the two moves are opposite, to float32 rounding. Label-flip attackers, who train on
// flipped labels, move it too. An extreme corbin attacker, paired with an
// honest client, is counted as well.
func TestByzantineClients(t *testing.T) {
	out := t.TempDir() // one directory: the runs of none are of one configuration
	deploy := func(mechanism string, attack fl.Attack) []float32 {
		c := runConfig(t, mechanism, 8, 1)
		c.Weighting, c.Out = "mean", out
		if err := os.RemoveAll(out); err != nil {
			t.Fatal(err)
		}
		ts := serve(t, ServerConfig{Run: c}, "127.0.0.1:0")
		var cs []*testClient
		for k := range 8 {
			cfg := ClientConfig{Server: ts.addr, ID: k, Clients: 8}
			if k < 2 {
				cfg.Byzantine = attack
			}
			cs = append(cs, join(t, context.Background(), cfg))
		}
		ts.wait(t)
		for _, cl := range cs {
			cl.wait(t)
		}
		if got := fmt.Sprint(rounds(t, c.Dir())); got != "[8]" {
			t.Errorf("%s %v: uploads per round %s, want [8]", mechanism, attack, got)
		}
		if attack.Kind != "" && !strings.Contains(cs[0].log.String(), "attacking as a Byzantine client: "+attack.String()) {
			t.Errorf("client 0 does not say it attacks:\n%s", cs[0].log)
		}
		st, err := fl.LoadState(c.Dir() + "/" + experiment.CheckpointFile)
		if err != nil {
			t.Fatal(err)
		}
		var upd []float32
		for _, v := range st.PrevUpd {
			upd = append(upd, v...)
		}
		return upd
	}
	honest := deploy("none", fl.Attack{})
	flipped := deploy("none", fl.Attack{Kind: fl.SignFlip})
	scaled := deploy("none", fl.Attack{Kind: fl.ScaleBy, Scale: 3})
	moved := 0.0
	for i, h := range honest {
		down, up := float64(flipped[i])-float64(h), float64(scaled[i])-float64(h)
		if math.Abs(down+up) > 1e-7 {
			t.Fatalf("parameter %d: sign-flip moves the mean by %v, scale:3 by %v; want opposite moves", i, down, up)
		}
		moved = max(moved, math.Abs(down))
	}
	if moved < 1e-4 {
		t.Errorf("the attackers moved no parameter by more than %v", moved)
	}
	// Label-flip attackers train on flipped labels and encode honestly:
	// their updates, and so the mean, differ from the honest run's.
	flippedLabels := deploy("none", fl.Attack{Kind: fl.LabelFlip})
	diff := 0.0
	for i, h := range honest {
		diff = max(diff, math.Abs(float64(flippedLabels[i])-float64(h)))
	}
	if diff < 1e-4 {
		t.Errorf("label-flip attackers moved no parameter of the mean by more than %v", diff)
	}
	deploy("corbin", fl.Attack{Kind: fl.Extreme})
}
