package main

import (
	"context"
	"encoding/json"
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
