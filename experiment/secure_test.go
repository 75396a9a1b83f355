package experiment

import (
	"context"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/fedpq/fedpq/fl"
	"github.com/fedpq/fedpq/privacy"
	"github.com/fedpq/fedpq/report"
)

// finalModel runs c and returns the hash of its final global model and
// its rounds.
func finalModel(t *testing.T, c Config) ([32]byte, []report.Round) {
	t.Helper()
	if _, err := Run(context.Background(), c, nil); err != nil {
		t.Fatal(err)
	}
	st, err := fl.LoadState(filepath.Join(c.Dir(), CheckpointFile))
	if err != nil {
		t.Fatal(err)
	}
	run, err := report.ReadRun(c.Dir())
	if err != nil {
		t.Fatal(err)
	}
	return fl.Hash(st.Global), run.Rounds
}

// TestSecureAggregationExact: under secure aggregation every integer
// mechanism ends with the same model, bit for bit, as without it (the
// secure sum is exact), with clients dropping out after the keys are
// shared (their masks rebuilt from the survivors' shares), and each upload
// costs k = ceil(log2(n·(levels-1)+1)) bits per field: 5 bits per
// parameter for the one-bit mechanisms and 24 clients, 7 for 80 (whose
// round runs on a sparse neighbour graph).
func TestSecureAggregationExact(t *testing.T) {
	for _, tc := range []struct {
		mech    string
		lattice int
		bits    float64 // per parameter, under secure aggregation
		clients int     // more than 64: a sparse neighbour graph
	}{
		{"ldpq", 1, 5, 24}, {"corbin", 1, 5, 24}, {"augcorbin", 1, 5, 24}, {"coq", 1, 5, 24}, {"cq", 1, 5, 24},
		{"sdq", 1, 9, 24}, {"sdq", 2, 10, 24}, {"jopeq", 1, 18, 24}, {"laplace+sdq", 1, 9, 24},
		{"corbin", 1, 7, 80},
		// Modular sums: 12 bits per coordinate of the tensors padded to
		// powers of two (600 -> 1024, 10 -> 16 of the 610 parameters).
		{"ddgauss", 1, 12 * 1040.0 / 610, 24}, {"skellam", 1, 12 * 1040.0 / 610, 24},
	} {
		c := Default()
		c.Clients, c.Rounds, c.Dropout, c.Weighting = tc.clients, 3, 0.2, "mean"
		c.Mechanism, c.Lattice, c.ModBits = tc.mech, tc.lattice, 12
		if c.Mechanism != "corbin" && c.Mechanism != "ldpq" && c.Mechanism != "augcorbin" && c.Mechanism != "coq" && c.Mechanism != "cq" {
			c.Range = "fixed:0,0.5"
		}
		c.Out = t.TempDir()
		plain, _ := finalModel(t, c)
		c.SecureAggregation, c.Out = true, t.TempDir()
		masked, rounds := finalModel(t, c)
		if plain != masked {
			t.Errorf("%s L=%d: the model differs under secure aggregation", tc.mech, tc.lattice)
		}
		for _, r := range rounds {
			if r.UplinkBitsPerParam != tc.bits || r.Clients == tc.clients || r.SetupBytes == 0 || r.Discarded != "" {
				t.Errorf("%s L=%d round %d: %v bits/param (want %v), %d clients (want some dropped), %d setup bytes, discarded %q",
					tc.mech, tc.lattice, r.Round, r.UplinkBitsPerParam, tc.bits, r.Clients, r.SetupBytes, r.Discarded)
			}
		}
	}
}

// TestSecureAggregationRefused: a mechanism whose decode is not affine in
// integer fields, and unequal weights, are clear errors.
func TestSecureAggregationRefused(t *testing.T) {
	for _, tc := range []struct {
		mech, weighting, want string
	}{
		{"gaussian", "mean", "secure aggregation"},
		{"none", "mean", "secure aggregation"},
		{"corbin", "examples", "weighting: mean"},
	} {
		c := Default()
		c.Rounds, c.Mechanism, c.Weighting, c.SecureAggregation, c.Out = 1, tc.mech, tc.weighting, true, t.TempDir()
		if _, err := Run(context.Background(), c, nil); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s, weighting %s: %v, want an error with %q", tc.mech, tc.weighting, err, tc.want)
		}
	}
}

// TestShuffle: behind the shuffler the one-bit mechanisms end with the
// same model, bit for bit (each parameter's multiset of bits is its
// count, all the server needs), and the float mechanisms within float
// rounding of the same accuracy; the mechanisms whose reports cannot be
// split per parameter are refused.
func TestShuffle(t *testing.T) {
	for _, m := range []string{"ldpq", "corbin", "cq", "none", "gaussian"} {
		c := Default()
		c.Clients, c.Rounds, c.Dropout, c.Weighting, c.Mechanism = 12, 3, 0.2, "mean", m
		c.Out = t.TempDir()
		plain, pr := finalModel(t, c)
		c.Shuffle, c.Out = true, t.TempDir()
		shuffled, sr := finalModel(t, c)
		oneBit := m != "none" && m != "gaussian"
		if oneBit && plain != shuffled {
			t.Errorf("%s: the model differs behind the shuffler", m)
		}
		a, b := *pr[len(pr)-1].Accuracy, *sr[len(sr)-1].Accuracy
		if d := a - b; d > 0.01 || d < -0.01 {
			t.Errorf("%s: accuracy %v plain, %v shuffled", m, a, b)
		}
	}
	for _, m := range []string{"sdq", "jopeq-compat"} {
		c := Default()
		c.Mechanism, c.Weighting, c.Shuffle, c.Rounds, c.Out = m, "mean", true, 1, t.TempDir()
		if _, err := Run(context.Background(), c, nil); err == nil || !strings.Contains(err.Error(), "shuffle") {
			t.Errorf("%s behind a shuffler: %v", m, err)
		}
	}
}

// TestLedgerAgainstHiddenServer: behind secure aggregation or a shuffler
// the ledger's server entry is the privacy-blanket bound of the fewest
// messages a round summed (ldpq), none for pairs with no client alone,
// and the local bound for mechanisms whose amplification is not computed;
// the eavesdropper's entry is unchanged.
func TestLedgerAgainstHiddenServer(t *testing.T) {
	for _, tc := range []struct {
		mech    string
		shuffle bool
	}{{"ldpq", false}, {"ldpq", true}, {"corbin", false}, {"jopeq", false}, {"ddgauss", false}} {
		c := Default()
		c.Clients, c.Rounds, c.Weighting, c.Mechanism, c.Out = 30, 2, "mean", tc.mech, t.TempDir()
		c.SecureAggregation, c.Shuffle = !tc.shuffle, tc.shuffle
		if tc.mech == "ddgauss" {
			c.Epsilon, c.ModBits = 5, 12
		}
		_, rounds := finalModel(t, c)
		l := rounds[len(rounds)-1].Privacy
		if tc.mech == "ddgauss" {
			// Its calibration: eps per tensor per round (2 tensors).
			if l == nil || l.Eavesdropper != nil || l.Server == nil || *l.Server.UploadRound != (privacy.Bound{Eps: 10, Delta: 2e-5}) || *l.Server.UploadOptimal != (privacy.Bound{Eps: 20, Delta: 4e-5}) {
				t.Errorf("ddgauss: ledger %+v, server %+v", l, l.Server)
			}
			continue
		}
		if l == nil || l.ServerView == "" || l.Eavesdropper == nil || *l.Eavesdropper.ParamRound != (privacy.Bound{Eps: c.Epsilon}) {
			t.Fatalf("%s: ledger %+v", tc.mech, l)
		}
		switch tc.mech {
		case "ldpq":
			// Under secure aggregation 1 of the 30 (5%) may collude with
			// the server and subtract its own message.
			honest := 30
			if !tc.shuffle {
				honest = 29
			}
			want, err := privacy.SecureSumEpsilon(c.Epsilon, honest, c.LedgerDelta)
			if err != nil {
				t.Fatal(err)
			}
			// Basic composition is k times the round's bound (at k·delta);
			// the optimal (PLD) one is tighter than it and than the local.
			s, k, kd, delta := l.Server, float64(l.Rounds), float64(l.Rounds*l.Parameters), c.LedgerDelta
			if s == nil || *s.ParamRound != (privacy.Bound{Eps: want, Delta: delta}) || !(want < c.Epsilon) || !(s.ParamOptimal.Eps < l.Eavesdropper.ParamOptimal.Eps) ||
				*s.ParamBasic != (privacy.Bound{Eps: k * want, Delta: k * delta}) || !(s.ParamOptimal.Eps <= s.ParamBasic.Eps) || s.ParamOptimal.Delta != delta ||
				*s.UploadBasic != (privacy.Bound{Eps: kd * want, Delta: kd * delta}) || !(s.UploadOptimal.Eps <= s.UploadBasic.Eps) || s.UploadOptimal.Delta != delta {
				t.Errorf("ldpq: server %+v, want eps %v per parameter per round (local %v)", l.Server, want, c.Epsilon)
			}
		case "corbin":
			if l.Server != nil || !strings.Contains(l.ServerView, "0 of them from clients without a partner") {
				t.Errorf("corbin: server %+v (%s), want none", l.Server, l.ServerView)
			}
		case "jopeq":
			if l.Server == nil || !reflect.DeepEqual(l.Server, l.Eavesdropper) {
				t.Errorf("jopeq: server %+v, want the local %+v", l.Server, l.Eavesdropper)
			}
		}
	}
}

// TestStrategyUnderHiddenSums: a server optimizer reads only the round's
// estimate, so under secure aggregation, and behind the shuffler, it steps
// exactly as on the plain mean: the same model, bit for bit, for fedavgm
// and fedadam. Attackers are hidden in the secure sum and the shuffled
// reports as well, and move them exactly as they move the plain mean:
// neither detects nor weakens an attack within the support (and the
// robust rules, which would need each message, are refused under both).
func TestStrategyUnderHiddenSums(t *testing.T) {
	base := Default()
	base.Clients, base.Rounds, base.Weighting, base.Mechanism = 24, 3, "mean", "ldpq"
	model := func(c Config, hidden string) [32]byte {
		c.SecureAggregation, c.Shuffle = hidden == "secure", hidden == "shuffle"
		c.Out = t.TempDir()
		h, _ := finalModel(t, c)
		return h
	}
	for _, s := range []struct {
		opt string
		lr  float64
	}{{"fedavgm", 0.3}, {"fedadam", 0.03}} {
		c := base
		c.ServerOptimizer, c.GlobalLR = s.opt, s.lr
		plain := model(c, "")
		for _, hidden := range []string{"secure", "shuffle"} {
			if model(c, hidden) != plain {
				t.Errorf("%s under %s: the model differs from the plain mean's", s.opt, hidden)
			}
		}
	}
	honest := model(base, "")
	c := base
	c.Byzantine, c.ByzantineFraction = "sign-flip", 0.25
	attacked := model(c, "")
	if attacked == honest {
		t.Fatal("the sign-flip attack did not change the model")
	}
	for _, hidden := range []string{"secure", "shuffle"} {
		if model(c, hidden) != attacked {
			t.Errorf("under %s the attack moves the model otherwise than the plain mean", hidden)
		}
	}
}
