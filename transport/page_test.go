package transport

import (
	"net/http"
	"regexp"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/fedpq/fedpq/privacy"
	"github.com/fedpq/fedpq/report"
)

var errDenied = status.Error(codes.PermissionDenied, "wrong join token")

// TestHistoryBounded: 10,000 rounds keep at most historyPoints points of
// each history; merged buckets cover every round once, in order, and keep
// the totals of uploads, clients chosen and refusals; the latest accuracy
// is kept.
func TestHistoryBounded(t *testing.T) {
	var h []roundPoint
	var a []accuracyPoint
	var uploads, chosen, refusals int
	for r := 1; r <= 10000; r++ {
		p := roundPoint{First: r, Last: r, Uploads: r % 7, Chosen: 7, Refusals: r % 3}
		uploads, chosen, refusals = uploads+p.Uploads, chosen+p.Chosen, refusals+p.Refusals
		h = addRound(h, p)
		if r%5 == 0 {
			a = addAccuracy(a, accuracyPoint{r, float64(r) / 1e4})
		}
		if len(h) > historyPoints || len(a) > historyPoints {
			t.Fatalf("round %d: %d round points, %d accuracy points; want at most %d", r, len(h), len(a), historyPoints)
		}
	}
	next, u, c, f := 1, 0, 0, 0
	for _, p := range h {
		if p.First != next || p.Last < p.First {
			t.Fatalf("bucket %d-%d, want one from %d", p.First, p.Last, next)
		}
		next = p.Last + 1
		u, c, f = u+p.Uploads, c+p.Chosen, f+p.Refusals
	}
	if next != 10001 || u != uploads || c != chosen || f != refusals {
		t.Errorf("buckets end at %d with %d uploads, %d chosen, %d refusals; want 10001, %d, %d, %d", next, u, c, f, uploads, chosen, refusals)
	}
	if last := a[len(a)-1]; last.Round != 10000 || a[0].Round != 5 {
		t.Errorf("accuracy from round %d to %d, want 5 to 10000", a[0].Round, last.Round)
	}
	for i := 1; i < len(a); i++ {
		if a[i].Round <= a[i-1].Round {
			t.Fatalf("accuracy points out of order: %v then %v", a[i-1], a[i])
		}
	}
}

// TestLivePage drives a ServerMetrics as a server does (a run of 4 rounds
// of DP-FedAvg with a budget, round 3 under way past its deadline) and
// reads its page and metrics over HTTP.
func TestLivePage(t *testing.T) {
	m := NewServerMetrics()
	base := "http://" + serveMonitorT(t, m)
	m.loaded(4, 0, nil, 2, 90*time.Second)
	m.setServing(true)
	m.clients(3, 3)
	acc := []float64{0.5, 0.75}
	for r := 1; r <= 2; r++ {
		m.begin(r, 3, time.Now().Add(time.Minute))
		m.uploaded()
		m.uploaded()
		m.refusedJoin(errDenied)
		u := &privacy.UserLevel{Rounds: r, Model: &privacy.Bound{Eps: 0.9 * float64(r), Delta: 1e-5}, Server: &privacy.Bound{Eps: 7, Delta: 1e-5}, Amplification: "Poisson sampling"}
		m.completed(r, &report.Round{Round: r, Clients: 2, Dropped: 1, Accuracy: &acc[r-1], Privacy: &privacy.Ledger{Delta: 1e-5, User: u}})
	}
	m.begin(3, 3, time.Now().Add(-2*time.Minute))
	m.uploaded()

	s := scrape(t, base)
	for name, want := range map[string]float64{
		`fedpq_server_user_epsilon{observer="model"}`:  1.8,
		`fedpq_server_user_epsilon{observer="server"}`: 7,
		"fedpq_server_user_delta":                      1e-5,
		"fedpq_server_user_epsilon_target":             2,
		"fedpq_server_accuracy":                        0.75,
		"fedpq_server_round_timeout_seconds":           90,
		"fedpq_server_round_clients":                   3,
		"fedpq_server_round_uploads":                   1,
		"fedpq_server_chosen_total":                    6,
		"fedpq_server_dropouts_total":                  2,
		"fedpq_server_uploads_total":                   5,
	} {
		if got, ok := s[name]; !ok || got != want {
			t.Errorf("%s = %v (present: %v), want %v", name, got, ok, want)
		}
	}
	if _, ok := s[`fedpq_server_user_epsilon{observer="eavesdropper"}`]; ok {
		t.Error("an eavesdropper's user-level epsilon where the ledger states none")
	}
	if d := s["fedpq_server_round_deadline_timestamp_seconds"]; d > float64(time.Now().Unix()) || d < float64(time.Now().Add(-3*time.Minute).Unix()) {
		t.Errorf("round 3's deadline at %v, want 2 minutes ago", d)
	}

	code, page := get(t, base+"/")
	if code != http.StatusOK {
		t.Fatalf("/: %d %s", code, page)
	}
	for _, want := range []string{
		`id="status">running<`, `id="done">2 of 4<`, "round 3: 1 of 3 uploads counted", `class="late"`, "past its deadline",
		"3 connected; 3 joined", "75.00% (round 2)", "ε = 1.8 at δ = 1e-05", "ε = 7 at δ = 1e-05", "90%", "ε = 2 against whoever gets the models",
		"amplification: Poisson sampling", `http-equiv="refresh"`,
	} {
		if !strings.Contains(page, want) {
			t.Errorf("the page lacks %q", want)
		}
	}
	if n := strings.Count(page, `class="uploads"`); n != 2 {
		t.Errorf("%d upload bars, want 2 (rounds 1 and 2)", n)
	}
	if n := strings.Count(page, `class="refusals"`); n != 2 {
		t.Errorf("%d refusal bars, want 2", n)
	}
	pts := regexp.MustCompile(`<polyline class="acc" points="([^"]*)"`).FindStringSubmatch(page)
	if pts == nil || len(strings.Fields(pts[1])) != 2 {
		t.Errorf("accuracy curve %v, want 2 points", pts)
	}
	if regexp.MustCompile(`(src|href)=`).MatchString(page) {
		t.Error("the page loads something: it must be self-contained")
	}

	m.runFinished()
	if _, page := get(t, base+"/"); !strings.Contains(page, `id="status">finished<`) || strings.Contains(page, "under way") {
		t.Errorf("a finished run's page: %s", page)
	}
	// A client process has no page.
	if code, _ := get(t, "http://"+serveMonitorT(t, NewClientMetrics())+"/"); code != http.StatusNotFound {
		t.Errorf("a client process's /: %d, want 404", code)
	}
}

// serveMonitorT serves m for the test and returns its address.
func serveMonitorT(t *testing.T, m Monitored) string {
	t.Helper()
	mon, err := ServeMonitor("127.0.0.1:0", m)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { mon.Close() })
	return mon.Addr()
}
