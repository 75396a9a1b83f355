package privacy

import (
	"encoding/json"
	"math"
	"strings"
	"testing"
)

// TestAccount: the ledger of each kind of mechanism, against each observer.
func TestAccount(t *testing.T) {
	const d, k, delta = 1000, 10, 1e-5
	l, err := Account(Budget{Mechanism: "ldpq", Epsilon: 1}, d, k, delta)
	if err != nil {
		t.Fatal(err)
	}
	if l.Eavesdropper == nil || l.Server == nil || l.Partner == nil {
		t.Fatalf("ldpq: an observer without a guarantee: %+v", l)
	}
	s := *l.Server
	opt, _ := Optimal(1, d, delta)
	all, _ := Optimal(1, k*d, delta)
	popt, _ := Optimal(1, k, delta)
	// Each entry with the delta at which it holds: pure eps-DP for one
	// round and basic composition, delta for optimal composition.
	for _, c := range []struct {
		name string
		got  *Bound
		want Bound
	}{
		{"param_round", s.ParamRound, Bound{1, 0}}, {"param_basic", s.ParamBasic, Bound{10, 0}},
		{"param_optimal", s.ParamOptimal, Bound{popt, delta}}, {"upload_round", s.UploadRound, Bound{opt, delta}},
		{"upload_basic", s.UploadBasic, Bound{10000, 0}}, {"upload_optimal", s.UploadOptimal, Bound{all, delta}},
		// Advanced composition at eps = 1 is no better than basic: its
		// term k eps (e^eps - 1) alone exceeds k eps; it is then basic's,
		// at basic's delta.
		{"param_advanced", s.ParamAdvanced, Bound{10, 0}}, {"upload_advanced", s.UploadAdvanced, Bound{10000, 0}},
	} {
		if c.got == nil || *c.got != c.want {
			t.Errorf("ldpq %s: %+v, want %+v", c.name, c.got, c.want)
		}
	}
	if !(s.ParamOptimal.Eps <= s.ParamBasic.Eps && s.UploadOptimal.Eps < s.UploadBasic.Eps && s.UploadRound.Eps < d) || s.Note != "" {
		t.Errorf("ldpq: a composed bound above the basic one, or a note: %+v", s)
	}
	// At eps = 0.1 it is below basic and above optimal, and is the theorem's formula.
	l, _ = Account(Budget{Mechanism: "laplace", Epsilon: 0.1}, d, k, delta)
	a := l.Server
	want := math.Sqrt(2*k*d*math.Log(1/delta))*0.1 + k*d*0.1*math.Expm1(0.1)
	if math.Abs(a.UploadAdvanced.Eps-want) > 1e-9*want || a.UploadAdvanced.Delta != delta ||
		!(a.UploadOptimal.Eps < a.UploadAdvanced.Eps && a.UploadAdvanced.Eps < a.UploadBasic.Eps) {
		t.Errorf("laplace at eps 0.1: upload optimal %+v, advanced %+v (formula %v at %v), basic %+v", a.UploadOptimal, a.UploadAdvanced, want, delta, a.UploadBasic)
	}

	l, err = Account(Budget{Mechanism: "corbin", Epsilon: 1}, d, k, delta)
	if err != nil {
		t.Fatal(err)
	}
	if l.Eavesdropper == nil || l.Server != nil || l.Partner != nil {
		t.Errorf("corbin: want a guarantee against the eavesdropper only: %+v", l)
	}
	l, err = Account(Budget{Mechanism: "none"}, d, k, delta)
	if err == nil && (l.Eavesdropper != nil || l.Server != nil) {
		t.Errorf("none: a guarantee: %+v", l)
	}

	// gaussian: the zCDP epsilon over k rounds is sound: the exact delta
	// of k rounds of the continuous Gaussian (one Gaussian of sensitivity
	// sqrt(k)) at that epsilon is below delta.
	l, err = Account(Budget{Mechanism: "gaussian", Epsilon: 1, MechDelta: 1e-5}, d, k, delta)
	if err != nil {
		t.Fatal(err)
	}
	g := l.Server
	sigma, _ := AnalyticGaussianSigma(1, 1e-5, 1)
	exact, err := GaussianDelta(g.ParamOptimal.Eps, sigma, math.Sqrt(k))
	if err != nil || exact > delta || g.ParamOptimal.Delta != delta {
		t.Errorf("gaussian over %d rounds: %+v has delta %v, want <= %v (%v)", k, g.ParamOptimal, exact, delta, err)
	}
	if !(g.ParamOptimal.Eps < g.ParamBasic.Eps) {
		t.Errorf("gaussian: zCDP %+v not below basic %+v", g.ParamOptimal, g.ParamBasic)
	}
	// Its round bound holds at its own delta, basic composition at k (or
	// k d) times that: the 0.244 at d = 610, k = 40.
	if *g.ParamRound != (Bound{1, 1e-5}) || *g.ParamBasic != (Bound{k, k * 1e-5}) || *g.UploadBasic != (Bound{k * d, k * d * 1e-5}) {
		t.Errorf("gaussian: round %+v, basic %+v, upload basic %+v", g.ParamRound, g.ParamBasic, g.UploadBasic)
	}
	if q, _ := Account(Budget{Mechanism: "gaussian", Epsilon: 1, MechDelta: 1e-5}, 610, 40, delta); math.Abs(q.Server.UploadBasic.Delta-0.244) > 1e-12 {
		t.Errorf("gaussian, 610 parameters, 40 rounds: upload_basic %+v, want delta 0.244", q.Server.UploadBasic)
	}
	// Its advanced bound is basic's at eps 1 (the theorem's exceeds it),
	// and at eps 0.1 the theorem's, which holds at delta plus k times the
	// mechanism's delta; where that is 1 or more there is no such bound.
	if *g.ParamAdvanced != *g.ParamBasic {
		t.Errorf("gaussian: advanced %+v, want basic's %+v", g.ParamAdvanced, g.ParamBasic)
	}
	l, _ = Account(Budget{Mechanism: "gaussian", Epsilon: 0.1, MechDelta: 1e-5}, d, k, delta)
	if adv, _ := Advanced(0.1, k*d, delta); *l.Server.UploadAdvanced != (Bound{adv, k*d*1e-5 + delta}) || adv >= 0.1*k*d {
		t.Errorf("gaussian at eps 0.1: upload advanced %+v, want %v at %v", l.Server.UploadAdvanced, adv, k*d*1e-5+delta)
	}
	l, _ = Account(Budget{Mechanism: "gaussian", Epsilon: 1, MechDelta: 1e-3}, d, k, delta)
	if s := l.Server; s.UploadBasic != nil || s.UploadAdvanced != nil || !strings.Contains(s.Note, "upload_basic") || s.ParamBasic == nil {
		t.Errorf("gaussian at delta 1e-3, %d parameters, %d rounds: upload basic %+v, advanced %+v, note %q", d, k, s.UploadBasic, s.UploadAdvanced, s.Note)
	}

	if _, err := Account(Budget{Mechanism: "ldpq", Epsilon: 1}, 0, k, delta); err == nil {
		t.Error("no parameters accepted")
	}
	if _, err := Account(Budget{Mechanism: "ldpq", Epsilon: 1}, d, k, 0); err == nil {
		t.Error("delta 0 accepted")
	}
}

// TestLedgerJSON: every entry of the JSON carries the delta at which it
// holds, and a bound that does not exist is null with a note, never +Inf
// (which JSON cannot carry).
func TestLedgerJSON(t *testing.T) {
	l, err := Account(Budget{Mechanism: "gaussian", Epsilon: 1, MechDelta: 1e-5}, 610, 40, 1e-5)
	if err != nil {
		t.Fatal(err)
	}
	var s Spent
	s.Set("param_round", 1, 1e-5, "")
	s.Set("param_optimal", math.Inf(1), 1e-5, "")
	s.Set("upload_basic", 10, 2, "")
	l.Server = &s
	b, err := json.Marshal(l)
	if err != nil {
		t.Fatal(err)
	}
	var back map[string]map[string]json.RawMessage
	_ = json.Unmarshal(b, &back)
	var ub Bound
	if err := json.Unmarshal(back["eavesdropper"]["upload_basic"], &ub); err != nil || ub.Eps != 24400 || math.Abs(ub.Delta-0.244) > 1e-15 {
		t.Errorf("gaussian's upload_basic: %+v (%v), want eps 24400 at delta 0.244", ub, err)
	}
	server := back["server"]
	if string(server["param_round"]) != `{"eps":1,"delta":0.00001}` || string(server["param_optimal"]) != "null" || string(server["upload_basic"]) != "null" {
		t.Errorf("server entries: %s", b)
	}
	var note string
	_ = json.Unmarshal(server["note"], &note)
	if !strings.Contains(note, "param_optimal: no epsilon at delta 1e-05") || !strings.Contains(note, "upload_basic: it would hold at delta 2") {
		t.Errorf("note %q", note)
	}
}
