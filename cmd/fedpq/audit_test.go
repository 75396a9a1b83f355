package main

import (
	"context"
	"encoding/json"
	"math"
	"strings"
	"testing"

	"github.com/fedpq/fedpq/audit"
	"github.com/fedpq/fedpq/mech"
)

// TestAuditJSON: fedpq audit's JSON parses, has a row per mechanism, eps
// and applicable observer, and the corbin pair view is above the claim the
// message keeps (modest samples, seed 1, eps 1: 0.78 for ldpq, 0.77 for a
// corbin message, 3.15 for the pair); the same seed gives the same bounds
// at any number of workers.
func TestAuditJSON(t *testing.T) {
	code, out, errOut := runCLI("audit", "--mechanism", "ldpq,corbin", "--epsilon", "1", "--samples", "1000", "--format", "json")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	var rep auditReport
	if err := json.Unmarshal([]byte(out), &rep); err != nil {
		t.Fatalf("%v: %s", err, out)
	}
	if rep.Samples != 1000 || rep.Alpha != 0.05 || rep.Seed != 1 || len(rep.Results) != 3 {
		t.Fatalf("report %+v", rep)
	}
	got := map[string]auditRow{}
	for _, r := range rep.Results {
		got[r.Mechanism+" "+r.Observer] = r
		if r.Claim == nil || *r.Claim != 1 || r.Samples != 1000 || r.Pairs != 10 || r.Views != 40000 || r.Inputs == "" {
			t.Errorf("row %+v", r)
		}
	}
	for _, k := range []string{"ldpq message", "corbin message"} {
		if r, ok := got[k]; !ok || r.Lower > 1 || r.Exceeds {
			t.Errorf("%s: %+v, want a bound within the claim 1", k, r)
		}
	}
	if r := got["corbin pair"]; r.Lower <= 2 || r.Exceeds {
		t.Errorf("corbin pair: %+v, want a bound above 2 and no EXCEEDS (no server claim)", r)
	}
	if _, again, _ := runCLI("audit", "--mechanism", "ldpq,corbin", "--epsilon", "1", "--samples", "1000", "--format", "json", "--workers", "1"); stripSeconds(t, again) != stripSeconds(t, out) {
		t.Error("the same seed gave different bounds on one worker")
	}
}

// stripSeconds is a report's JSON without its timings.
func stripSeconds(t *testing.T, s string) string {
	var rep auditReport
	if err := json.Unmarshal([]byte(s), &rep); err != nil {
		t.Fatal(err)
	}
	for i := range rep.Results {
		rep.Results[i].Seconds = 0
	}
	b, _ := json.Marshal(rep)
	return string(b)
}

// TestAuditTable: the table names each audit and its verdict.
func TestAuditTable(t *testing.T) {
	code, out, errOut := runCLI("audit", "--mechanism", "none,coq", "--epsilon", "2", "--samples", "300", "--observer", "pair")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	for _, want := range []string{"audit: 300 views per input, 10 input pairs", "coq ", " pair ", "above (no server claim)"} {
		if !strings.Contains(out, want) {
			t.Errorf("table lacks %q:\n%s", want, out)
		}
	}
	if strings.Contains(out, "none ") {
		t.Errorf("none has no pair view:\n%s", out)
	}
}

// TestAuditUsage: bad flags are usage errors (exit 2) with the reason.
func TestAuditUsage(t *testing.T) {
	for _, args := range [][]string{
		{"--mechanism", "nonesuch"}, {"--mechanism", "ldpq,"}, {"--epsilon", "0"}, {"--epsilon", "1,x"},
		{"--samples", "0"}, {"--alpha", "1"}, {"--delta", "-1"}, {"--observer", "server"},
		{"--format", "xml"}, {"--radius", "0"}, {"--mechanism", "ldpq", "--observer", "pair"},
		{"--mechanism", "mvu", "--budget-bits", "0"}, {"--nonesuch"}, {"extra"},
	} {
		code, _, errOut := runCLI(append([]string{"audit"}, args...)...)
		if code != 2 || !strings.HasPrefix(errOut, "fedpq audit: ") && !strings.Contains(errOut, "Usage: fedpq audit") {
			t.Errorf("%v: exit %d, stderr %q", args, code, errOut)
		}
	}
	if code, _, errOut := runCLI("audit", "-h"); code != 0 || !strings.Contains(errOut, "Examples:") || !strings.Contains(errOut, "-observer") {
		t.Errorf("audit -h: exit %d, %s", code, errOut)
	}
}

// revealing claims ldpq's eps but sends its input's sign: no epsilon.
type revealing struct{ mech.Mechanism }

func (revealing) Encode(dst []byte, w []float32, rg mech.Range, _ mech.Slot) ([]byte, error) {
	if w[0] > float32(rg.Center) {
		return append(dst, 1), nil
	}
	return append(dst, 0), nil
}

// TestAuditExceeds: a message bound above the claim is flagged (and makes
// fedpq audit exit 1), which the pair view's never is.
func TestAuditExceeds(t *testing.T) {
	m, err := mech.New("ldpq", mech.DefaultConfig())
	if err != nil {
		t.Fatal(err)
	}
	one := 1.0
	rg := mech.Range{Radius: 1}
	ins := audit.Neighbours(rg)
	row := &auditRow{Mechanism: "revealing", Epsilon: 1, Claim: &one}
	opts := audit.Options{Samples: 500, Alpha: 0.05, Seed: 1}
	if err := runAuditJobs(context.Background(), []auditJob{{revealing{m}, audit.Message, row}}, rg, ins, opts, 1, func(int) {}); err != nil {
		t.Fatal(err)
	}
	if !row.Exceeds || row.Lower <= 1 {
		t.Errorf("revealing: %+v, want EXCEEDS", row)
	}
}

// TestAuditUserLevelJSON: fedpq audit --user-level's JSON has a row per
// mechanism and noise multiplier, each bound within the accountant's claim
// (seed 1, 2,000 runs per world, 2 rounds of 3 clients, 16 parameters, z
// = 1: none 1.79 against 6.573 (PLD), the claim of the Gaussian of mu =
// sqrt(2), and ddgauss 1.72 against 7.088 (RDP)); the same seed gives the
// same bounds on one worker.
func TestAuditUserLevelJSON(t *testing.T) {
	args := []string{"audit", "--user-level", "--mechanism", "none,ddgauss", "--rounds", "2", "--clients", "3",
		"--params", "16", "--runs", "2000", "--format", "json"}
	code, out, errOut := runCLI(args...)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	var rep userAuditReport
	if err := json.Unmarshal([]byte(out), &rep); err != nil {
		t.Fatalf("%v: %s", err, out)
	}
	if !rep.UserLevel || rep.Rounds != 2 || rep.Clients != 3 || rep.Params != 16 || rep.Runs != 2000 ||
		rep.Alpha != 0.05 || rep.Delta != 1e-5 || rep.Seed != 1 || len(rep.Results) != 2 {
		t.Fatalf("report %+v", rep)
	}
	for _, r := range rep.Results {
		t.Logf("%+v", r)
		if r.Noise != 1 || r.Counted != 1000 || r.Lower <= 0 || r.Lower > r.Claim || r.Exceeds || r.Event == "" {
			t.Errorf("row %+v: want a positive bound within the claim", r)
		}
	}
	none, dd := rep.Results[0], rep.Results[1]
	if none.Mechanism != "none" || none.Relation != "add/remove" || none.ClaimMethod != "pld" || math.Abs(none.Claim-6.573) > 0.01 {
		t.Errorf("none: %+v, want the PLD claim 6.573 for add/remove", none)
	}
	if dd.Mechanism != "ddgauss" || dd.Relation != "zero-out" || dd.Claim < none.Claim {
		t.Errorf("ddgauss: %+v, want a zero-out claim at least the Gaussian's", dd)
	}
	if _, again, _ := runCLI(append(args, "--workers", "1")...); stripUserSeconds(t, again) != stripUserSeconds(t, out) {
		t.Error("the same seed gave different bounds on one worker")
	}
}

// stripUserSeconds is a user-level report's JSON without its timings.
func stripUserSeconds(t *testing.T, s string) string {
	var rep userAuditReport
	if err := json.Unmarshal([]byte(s), &rep); err != nil {
		t.Fatal(err)
	}
	for i := range rep.Results {
		rep.Results[i].Seconds = 0
	}
	b, _ := json.Marshal(rep)
	return string(b)
}

// TestAuditUserLevelTable: the table puts the claim and the bound side by
// side, with the confidence and the verdict.
func TestAuditUserLevelTable(t *testing.T) {
	code, out, errOut := runCLI("audit", "--user-level", "--mechanism", "none", "--noise-multiplier", "1,2", "--runs", "400", "--params", "8")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	for _, want := range []string{"user-level audit: 1 round of 10 clients, 8 parameters; 400 runs per world (200 counted); bounds hold with probability 0.95; delta 1e-05, seed 1",
		"claim (accountant)", "lower bound", "none       1  add/remove  4.377 (pld)", "none       2  add/remove", "within"} {
		if !strings.Contains(out, want) {
			t.Errorf("table lacks %q:\n%s", want, out)
		}
	}
}

// TestAuditUserLevelExceeds: a mechanism whose noise is a quarter of its
// claim's is EXCEEDS (and fedpq audit would exit 1): none's server noise
// at z = 0.25 against the claim at z = 1 (seed 1, 10,000 runs: 6.26
// against 4.377).
func TestAuditUserLevelExceeds(t *testing.T) {
	run, claim := mech.DefaultConfig(), mech.DefaultConfig()
	run.Noise, claim.Noise = 0.25, 1
	row := &userAuditRow{Mechanism: "none", Noise: 1}
	o := audit.UserOptions{Rounds: 1, Clients: 2, Params: 16, Runs: 10000, Alpha: 0.05, Delta: 1e-5, Seed: 1}
	if err := runUserAuditJobs(context.Background(), []userAuditJob{{"none", run, claim, row}}, o, func(string, int, int) {}); err != nil {
		t.Fatal(err)
	}
	if !row.Exceeds || row.Lower <= row.Claim {
		t.Errorf("none at a quarter of its noise: %+v, want EXCEEDS", row)
	}
	var b strings.Builder
	if err := printUserAudit(&b, userAuditReport{Rounds: 1, Clients: 2, Params: 16, Runs: 10000, Alpha: 0.05, Results: []userAuditRow{*row}}); err != nil || !strings.Contains(b.String(), "EXCEEDS") {
		t.Errorf("table %q, %v: want EXCEEDS", b.String(), err)
	}
}

// TestAuditUserLevelUsage: bad user-level flags, and each mode's flags in
// the other, are usage errors (exit 2) with the reason.
func TestAuditUserLevelUsage(t *testing.T) {
	for _, args := range [][]string{
		{"--user-level", "--mechanism", "ldpq"}, {"--user-level", "--mechanism", "nonesuch"},
		{"--user-level", "--noise-multiplier", "0"}, {"--user-level", "--noise-multiplier", "x"},
		{"--user-level", "--rounds", "0"}, {"--user-level", "--clients", "0"}, {"--user-level", "--params", "0"},
		{"--user-level", "--runs", "1"}, {"--user-level", "--delta", "0"}, {"--user-level", "--alpha", "0"},
		{"--user-level", "--mechanism", "ddgauss", "--mod-bits", "1"}, {"--user-level", "--mechanism", "pbm", "--pbm-trials", "0"},
		{"--user-level", "--epsilon", "1"}, {"--user-level", "--samples", "10"}, {"--user-level", "--observer", "pair"},
		{"--rounds", "2"}, {"--runs", "10"}, {"--noise-multiplier", "1"},
	} {
		code, _, errOut := runCLI(append([]string{"audit"}, args...)...)
		if code != 2 || !strings.HasPrefix(errOut, "fedpq audit: ") {
			t.Errorf("%v: exit %d, stderr %q", args, code, errOut)
		}
	}
	if code, _, errOut := runCLI("audit", "-h"); code != 0 || !strings.Contains(errOut, "--user-level") || !strings.Contains(errOut, "-noise-multiplier") {
		t.Errorf("audit -h: exit %d, %s", code, errOut)
	}
}
