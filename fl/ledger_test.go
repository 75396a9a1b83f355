package fl

import (
	"encoding/json"
	"fmt"
	"math"
	"strings"
	"testing"

	"github.com/fedpq/fedpq/privacy"
	"github.com/fedpq/fedpq/report"
)

// TestLedgerEncodesForAnyClientCount: the ledger behind secure aggregation
// or a shuffler encodes as JSON for every client count, each entry with a
// finite eps and a delta below 1, and a missing bound as null with a note.
// augcorbin with 200 clients at gamma 0.2 stopped runs with "json:
// unsupported value: +Inf": its round's bound is finite at delta and not
// at delta/k. (Under secure aggregation 200 clients take 2 s; the
// shuffler's ledger is the same computation.)
func TestLedgerEncodesForAnyClientCount(t *testing.T) {
	for _, tc := range []struct {
		mech    string
		secure  bool
		clients []int
	}{
		{"augcorbin", false, []int{2, 3, 5, 10, 20, 40, 64, 65, 100, 150, 200, 250, 300}},
		{"augcorbin", true, []int{3, 200}},
		{"ldpq", false, []int{1, 2, 3, 20, 65, 200}},
		{"ldpq", true, []int{3}},
		{"corbin", false, []int{2, 3, 65}},
	} {
		for _, n := range tc.clients {
			cfg := baseConfig()
			cfg.Mechanism, cfg.Rounds, cfg.Weighting, cfg.Mech.Epsilon, cfg.Mech.Gamma = tc.mech, 2, "mean", 1, 0.2
			cfg.SecureAggregation, cfg.Shuffle = tc.secure, !tc.secure
			_, rounds := run(t, cfg, fakeTask(n, 8, func(int) int { return 1 }))
			for _, r := range rounds {
				b, err := json.Marshal(r)
				if err != nil {
					t.Fatalf("%s, %d clients, round %d: %v", tc.mech, n, r.Round, err)
				}
				var back report.Round
				if err := json.Unmarshal(b, &back); err != nil || back.Privacy == nil {
					t.Fatalf("%s, %d clients, round %d: %v, privacy %v", tc.mech, n, r.Round, err, back.Privacy)
				}
				checkLedger(t, back.Privacy)
			}
		}
	}
}

// TestSecureRoundsOfTwo: a secure run whose rounds have fewer clients than
// a client's policy accepts is refused before it starts, with the reason.
func TestSecureRoundsOfTwo(t *testing.T) {
	cfg := baseConfig()
	cfg.Mechanism, cfg.Weighting, cfg.SecureAggregation = "ldpq", "mean", true
	_, err := New(cfg, fakeTask(2, 8, func(int) int { return 1 }))
	if err == nil || !strings.Contains(err.Error(), "needs rounds of at least 3 clients") {
		t.Errorf("a secure run of 2 clients: %v", err)
	}
}

// checkLedger fails t for an entry that is not a bound (eps not finite and
// non-negative, delta not in [0, 1)), or a null entry without a note.
func checkLedger(t *testing.T, l *privacy.Ledger) {
	t.Helper()
	for _, s := range []*privacy.Spent{l.Eavesdropper, l.Server, l.Partner} {
		if s == nil {
			continue
		}
		for _, b := range []*privacy.Bound{s.ParamRound, s.ParamBasic, s.ParamAdvanced, s.ParamOptimal, s.UploadRound, s.UploadBasic, s.UploadAdvanced, s.UploadOptimal} {
			switch {
			case b == nil && s.Note == "":
				t.Errorf("a null entry without a note: %+v (%s)", s, l.ServerView)
			case b != nil && (!(b.Eps >= 0) || math.IsInf(b.Eps, 0) || !(b.Delta >= 0 && b.Delta < 1)):
				t.Errorf("entry %+v is not a bound", b)
			}
		}
	}
}

// TestLedgerColluders: under secure aggregation the server's entry hides a
// client among the honest clients only: floor(5%) of the most clients a
// round selects (here 2 of 40) may collude with the server and subtract
// their own messages. Behind the trusted shuffler none is assumed.
func TestLedgerColluders(t *testing.T) {
	for _, secure := range []bool{true, false} {
		cfg := baseConfig()
		cfg.Mechanism, cfg.Rounds, cfg.Weighting, cfg.Mech.Epsilon, cfg.ClientsPerRound = "ldpq", 1, "mean", 1, 40
		cfg.SecureAggregation, cfg.Shuffle = secure, !secure
		_, rounds := run(t, cfg, fakeTask(100, 8, func(int) int { return 1 }))
		l := rounds[0].Privacy
		honest := 40
		if secure {
			honest = 38
		}
		want, err := privacy.SecureSumEpsilon(1, honest, cfg.LedgerDelta)
		if err != nil {
			t.Fatal(err)
		}
		if l.Server == nil || *l.Server.ParamRound != (privacy.Bound{Eps: want, Delta: cfg.LedgerDelta}) ||
			!strings.Contains(l.ServerView, fmt.Sprintf("of %d honest clients", honest)) ||
			secure != strings.Contains(l.ServerView, "up to 2 of a round's 40 clients (5%") {
			t.Errorf("secure %v: server %+v, want eps %v (%d honest clients): %s", secure, l.Server, want, honest, l.ServerView)
		}
	}
}
