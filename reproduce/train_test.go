package reproduce

import (
	"fmt"
	"math"
	"strings"
	"testing"
)

// paperTable fills a table with the paper's own numbers as if fedpq had
// measured them.
func paperTable(cells []cell) trainTable {
	t := make(trainTable, len(cells))
	for i, c := range cells {
		t[i] = TrainRow{Row: c.row, Col: c.col, Mean: c.paper, Accuracy: []float64{c.paper}}
	}
	return t
}

// TestChecksOnPapersNumbers: fed the paper's own table, every claim of
// LDP-FL's Table 1 and JoPEQ's Table I holds; changing one number that a
// claim rests on makes it fail.
func TestChecksOnPapersNumbers(t *testing.T) {
	for _, tb := range []ldpflTable{ldpflMNIST, ldpflFMNIST} {
		s := tb.spec()
		table := paperTable(s.cells(false))
		for _, c := range s.checks(table) {
			if !c.Holds {
				t.Errorf("%s: %s fails on the paper's numbers: %s", tb.label, c.Claim, c.Detail)
			}
		}
		// eps 10 falling 5 points below noise-free breaks the first claim
		// about closeness.
		for i := range table {
			if table[i].Col == "eps 10" {
				table[i].Mean -= 0.05
			}
		}
		failed := false
		for _, c := range s.checks(table) {
			failed = failed || !c.Holds
		}
		if !failed {
			t.Errorf("%s: every claim holds with eps 10 five points down", tb.label)
		}
	}
	s := jopeqAccuracy()
	cells := s.cells(false)
	var paper []cell
	for _, c := range cells {
		if !math.IsNaN(c.paper) {
			paper = append(paper, c)
		}
	}
	table := paperTable(paper)
	for _, c := range s.checks(table) {
		if !c.Holds {
			t.Errorf("JoPEQ: %s fails on the paper's numbers: %s", c.Claim, c.Detail)
		}
	}
	for i := range table {
		if table[i].Row == "FL+Lap+SDQ" && table[i].Col == "MLP" {
			table[i].Mean = 0.71
		}
	}
	if c := s.checks(table)[1]; c.Holds {
		t.Errorf("JoPEQ: FL+Lap+SDQ above JoPEQ still holds: %s", c.Detail)
	}
}

// TestTrainCells: full mode runs the paper's settings where this file says
// so (a change to them shows up here, not only in a long run).
func TestTrainCells(t *testing.T) {
	mn := ldpflMNIST.spec().cells(false)
	if len(mn) != 6 || mn[0].cfg.Mechanism != "none" || mn[1].cfg.Epsilon != 0.1 || mn[5].cfg.Epsilon != 10 {
		t.Fatalf("ldpfl-mnist cells: %+v", mn)
	}
	for _, c := range mn[1:] {
		if c.cfg.Clients != 100 || c.cfg.Range != "fixed:0,0.075" || c.cfg.LR != 0.03 || c.cfg.Rounds != 10 || c.cfg.Perturb != "weights" || c.cfg.ClientsPerRound != 0 {
			t.Errorf("ldpfl-mnist %s: %+v", c.col, c.cfg)
		}
	}
	fm := ldpflFMNIST.spec().cells(false)
	if c := fm[1].cfg; c.Clients != 200 || c.Range != "fixed:0,0.015" || c.Rounds != 15 || c.Dataset != "fashion-mnist" {
		t.Errorf("ldpfl-fmnist: %+v", c)
	}
	bits := corbinBits().cells(false)
	var ds []int
	for _, c := range bits[1:] {
		ds = append(ds, c.cfg.SharedBits)
		if c.cfg.Epsilon != 1 || c.cfg.Batch != 64 || c.cfg.Validation != 0.2 || c.cfg.Patience != 5 {
			t.Errorf("corbin-bits %s: %+v", c.col, c.cfg)
		}
	}
	if fmt.Sprint(ds) != "[1 3 5 7]" || bits[0].cfg.Mechanism != "ldpq" {
		t.Errorf("corbin-bits: d %v, reference %s", ds, bits[0].cfg.Mechanism)
	}
	for _, c := range corbinClients().cells(false) {
		if c.cfg.Epsilon != 5 || c.cfg.Batch != 32 || c.col != fmt.Sprintf("n = %d", c.cfg.Clients) {
			t.Errorf("corbin-clients %s %s: %+v", c.row, c.col, c.cfg)
		}
	}
	for _, c := range corbinMNIST().cells(false) {
		if c.cfg.Epsilon != 0.5 || c.cfg.Model != "cnn2" {
			t.Errorf("corbin-mnist %s: %+v", c.row, c.cfg)
		}
	}
	if corbinBits().seeds != 3 || corbinDropout().seeds != 3 || ldpflMNIST.spec().seeds > 1 {
		t.Error("full mode: corbin-bits and corbin-dropout run 3 seeds, ldpfl one")
	}
	if n := len(jopeqAccuracy().cells(false)); n != 18 {
		t.Errorf("jopeq-accuracy: %d cells, want 6 schemes x 3 models", n)
	}
}

func TestTrainMarkdown(t *testing.T) {
	p := 0.5
	tb := trainTable{
		{Row: "a", Col: "x", Mechanism: "ldpq", BitsPerParam: 1, Mean: 0.25, SD: 0.01, Paper: &p},
		{Row: "b", Col: "y", Mechanism: "none", BitsPerParam: 32, Mean: 0.75, SD: 0.02},
		{Row: "a", Col: "y", Mechanism: "ldpq", BitsPerParam: 1.5, Mean: 0.5},
	}
	want := "| a, paper | 50.00% | - |\n| a, fedpq (mean ± sd, 3 seeds) | 25.00% ± 1.00 | 50.00% ± 0.00 |\n| b, fedpq (mean ± sd, 3 seeds) | - | 75.00% ± 2.00 |\n" +
		"\nUplink bits per parameter per client (headers included): ldpq 1 to 1.5, none 32.\n"
	if got := tb.markdown(3); !strings.HasSuffix(got, want) {
		t.Errorf("got\n%s\nwant suffix\n%s", got, want)
	}
	// Difference of means with the standard error sqrt(sdA^2/nA + sdB^2/nB).
	tb = trainTable{
		{Row: "a", Col: "x", Accuracy: []float64{0.90, 0.92, 0.94}, Mean: 0.92, SD: 0.02},
		{Row: "b", Col: "x", Accuracy: []float64{0.89, 0.90, 0.91}, Mean: 0.90, SD: 0.01},
		{Row: "c", Col: "x", Accuracy: []float64{0.5}, Mean: 0.5},
	}
	if got, want := tb.diff("a", "x", "b", "x"), fmt.Sprintf("+2.00 ± %.2f", 100*math.Sqrt(0.0004/3+0.0001/3)); got != want {
		t.Errorf("diff: %q, want %q", got, want)
	}
	if got := tb.diff("c", "x", "b", "x"); got != "-40.00" {
		t.Errorf("diff with one seed: %q", got)
	}
	for in, want := range map[string]string{"MNIST (n = 100) eps 0.1": "mnist_n_100_eps_0.1", "FL+Lap+SDQ MLP": "fl-lap-sdq_mlp", "fedpq's eps-LDP jopeq CNN": "fedpq_s_eps-ldp_jopeq_cnn"} {
		if got := slug(in); got != want {
			t.Errorf("slug(%q) = %q, want %q", in, got, want)
		}
	}
}
