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
	// Advanced composition at eps = 1 is no better than basic: its term
	// k eps (e^eps - 1) alone exceeds k eps.
	if s.ParamAdvanced != s.ParamBasic || s.UploadAdvanced != s.UploadBasic {
		t.Errorf("ldpq at eps 1: advanced %v, %v; want the basic %v, %v", s.ParamAdvanced, s.UploadAdvanced, s.ParamBasic, s.UploadBasic)
	}
	// At eps = 0.1 it is below basic and above optimal, and is the theorem's formula.
	l, _ = Account(Budget{Mechanism: "laplace", Epsilon: 0.1}, d, k, delta)
	a := l.Server
	want := math.Sqrt(2*k*d*math.Log(1/delta))*0.1 + k*d*0.1*math.Expm1(0.1)
	if math.Abs(a.UploadAdvanced-want) > 1e-9*want || !(a.UploadOptimal < a.UploadAdvanced && a.UploadAdvanced < a.UploadBasic) {
		t.Errorf("laplace at eps 0.1: upload optimal %v, advanced %v (formula %v), basic %v", a.UploadOptimal, a.UploadAdvanced, want, a.UploadBasic)
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
	// Its advanced bound is the theorem's at eps (capped at basic), which
	// holds with delta plus k times the mechanism's delta.
	if adv, _ := Advanced(1, k, delta); g.ParamAdvanced != adv || g.ParamAdvanced > g.ParamBasic {
		t.Errorf("gaussian: advanced %v, want %v (basic %v)", g.ParamAdvanced, adv, g.ParamBasic)
	}

	if _, err := Account(Budget{Mechanism: "ldpq", Epsilon: 1}, 0, k, delta); err == nil {
		t.Error("no parameters accepted")
	}
	if _, err := Account(Budget{Mechanism: "ldpq", Epsilon: 1}, d, k, 0); err == nil {
		t.Error("delta 0 accepted")
	}
}
