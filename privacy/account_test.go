package privacy

import (
	"math"
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
	if s.ParamRound != 1 || s.ParamBasic != 10 || s.UploadBasic != 10000 || s.UploadRound != opt || s.UploadOptimal != all {
		t.Errorf("ldpq: %+v", s)
	}
	if !(s.ParamOptimal <= s.ParamBasic && s.UploadOptimal < s.UploadBasic && s.UploadRound < d) {
		t.Errorf("ldpq: a composed bound above the basic one: %+v", s)
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
	exact, err := GaussianDelta(g.ParamOptimal, sigma, math.Sqrt(k))
	if err != nil || exact > delta {
		t.Errorf("gaussian over %d rounds: eps %v has delta %v, want <= %v (%v)", k, g.ParamOptimal, exact, delta, err)
	}
	if !(g.ParamOptimal < g.ParamBasic) {
		t.Errorf("gaussian: zCDP %v not below basic %v", g.ParamOptimal, g.ParamBasic)
	}

	if _, err := Account(Budget{Mechanism: "ldpq", Epsilon: 1}, 0, k, delta); err == nil {
		t.Error("no parameters accepted")
	}
	if _, err := Account(Budget{Mechanism: "ldpq", Epsilon: 1}, d, k, 0); err == nil {
		t.Error("delta 0 accepted")
	}
}
