package transport

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"

	pb "github.com/fedpq/fedpq/transport/fedpqpb"
)

// get fetches url and returns its status code and body.
func get(t *testing.T, url string) (int, string) {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, string(b)
}

// scrape reads a /metrics page: each series (its name and labels as
// printed, such as uploads_total or sent_bytes_total{kind="upload"}) to
// its value.
func scrape(t *testing.T, base string) map[string]float64 {
	t.Helper()
	code, body := get(t, base+"/metrics")
	if code != http.StatusOK {
		t.Fatalf("%s/metrics: %d %s", base, code, body)
	}
	series := map[string]float64{}
	sc := bufio.NewScanner(strings.NewReader(body))
	for sc.Scan() {
		line := sc.Text()
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		i := strings.LastIndexByte(line, ' ')
		v, err := strconv.ParseFloat(line[i+1:], 64)
		if err != nil {
			t.Fatalf("%s: %q: %v", base, line, err)
		}
		series[line[:i]] = v
	}
	return series
}

// awaitStatus polls url until it answers code.
func awaitStatus(t *testing.T, url string, code int) {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	for {
		got, body := get(t, url)
		if got == code {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: %d %q, want %d", url, got, body, code)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestMetrics scrapes a server's and a fleet's metrics over HTTP after a
// real run of 2 rounds of corbin (pairs) on loopback, with 4 clients in
// this process sharing one ClientMetrics, and checks them against what
// the run did: the uploads the run's record counts, the rounds, the
// phases timed once per round, the bytes each side counted of the same
// messages, the eps of the summary's ledger, and the refusals of joins
// and of a message made to be refused. /healthz and /readyz answer as the
// process stands: a server is ready while it serves, clients while they
// run and none has failed.
func TestMetrics(t *testing.T) {
	c := runConfig(t, "corbin", 4, 2)
	sm, cm, failed := NewServerMetrics(), NewClientMetrics(), NewClientMetrics()
	serveMon := func(m *Monitor, err error) string {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { m.Close() })
		return "http://" + m.Addr()
	}
	srvURL := serveMon(ServeMonitor("127.0.0.1:0", sm))
	cliURL := serveMon(ServeMonitor("127.0.0.1:0", cm))
	failedURL := serveMon(ServeMonitor("127.0.0.1:0", failed))
	for _, u := range []string{srvURL, cliURL, failedURL} {
		if code, body := get(t, u+"/healthz"); code != http.StatusOK {
			t.Errorf("%s/healthz: %d %q", u, code, body)
		}
		if code, body := get(t, u+"/readyz"); code != http.StatusServiceUnavailable {
			t.Errorf("%s/readyz before the run: %d %q, want 503", u, code, body)
		}
	}

	ts := serve(t, ServerConfig{Run: c, Metrics: sm}, "127.0.0.1:0")
	awaitStatus(t, srvURL+"/readyz", http.StatusOK)

	// Refused: a wrong token, another partition, and an upload for a round
	// not under way from a client that joined (as client 3, with the key
	// client 3 uses later: the server pins id 3 to it).
	key3 := NewKey()
	if err := dial(t, ts.addr).join(0, 4, "wrong"); err == nil {
		t.Fatal("a wrong token joined")
	}
	if err := dial(t, ts.addr).join(0, 5, token); err == nil {
		t.Fatal("a partition of 5 joined a run of 4")
	}
	r := dial(t, ts.addr)
	r.key = key3
	if err := r.join(3, 4, token); err != nil {
		t.Fatal(err)
	}
	late := &pb.ClientMessage{Body: &pb.ClientMessage_Upload{Upload: &pb.Upload{Round: 99, Payloads: [][]byte{{1, 2, 3}}}}}
	if err := r.stream.Send(late); err != nil {
		t.Fatal(err)
	}
	if rc := r.next(t, func(m *pb.ServerMessage) bool { return m.GetReceipt() != nil }).GetReceipt(); rc.GetAccepted() {
		t.Fatal("an upload for round 99 was accepted")
	}
	r.stream.CloseSend()
	for scrape(t, srvURL)["fedpq_server_connected_clients"] != 0 {
		time.Sleep(20 * time.Millisecond)
	}

	// A client refused for good fails, and its process is not ready.
	bad := join(t, context.Background(), ClientConfig{Server: ts.addr, ID: 0, Clients: 4, Token: "wrong", Metrics: failed})
	ended(t, bad.done, "refused client")
	if code, body := get(t, failedURL+"/readyz"); code != http.StatusServiceUnavailable || !strings.Contains(body, "1 clients stopped on an error") {
		t.Errorf("a failed client's /readyz: %d %q", code, body)
	}

	// The server waits for the whole fleet: with 3 of 4 clients running,
	// they are connected, and ready.
	var cs []*testClient
	for k := range 3 {
		cs = append(cs, join(t, context.Background(), ClientConfig{Server: ts.addr, ID: k, Clients: 4, Metrics: cm}))
	}
	awaitStatus(t, cliURL+"/readyz", http.StatusOK)
	cs = append(cs, join(t, context.Background(), ClientConfig{Server: ts.addr, ID: 3, Clients: 4, Key: key3, Metrics: cm}))
	sum := ts.wait(t)
	for _, cl := range cs {
		cl.wait(t)
	}
	if code, _ := get(t, srvURL+"/readyz"); code != http.StatusServiceUnavailable {
		t.Errorf("/readyz of a server that stopped serving: %d, want 503", code)
	}
	if code, _ := get(t, cliURL+"/readyz"); code != http.StatusServiceUnavailable {
		t.Errorf("/readyz of clients that all finished: %d, want 503", code)
	}

	s, cl := scrape(t, srvURL), scrape(t, cliURL)
	uploads := 0
	for _, n := range rounds(t, c.Dir()) {
		uploads += n
	}
	if uploads != 8 {
		t.Errorf("%d uploads counted in the run's record, want 8", uploads)
	}
	if sum.Privacy == nil || sum.Privacy.Eavesdropper == nil || sum.Privacy.Eavesdropper.UploadOptimal == nil {
		t.Fatalf("the summary has no eavesdropper's ledger: %+v", sum.Privacy)
	}
	// The refused upload reached the server, not the fleet: its bytes on
	// the wire are the message's and gRPC's 5-byte frame header.
	lateBytes := float64(proto.Size(late) + 5)
	for name, want := range map[string]float64{
		"fedpq_server_uploads_total":                           float64(uploads),
		"fedpq_server_rounds_completed_total":                  2,
		"fedpq_server_rounds_done":                             2,
		"fedpq_server_run_rounds":                              2,
		"fedpq_server_round":                                   2,
		"fedpq_server_run_finished":                            1,
		"fedpq_server_joined_clients":                          4,
		"fedpq_server_connected_clients":                       0,
		"fedpq_server_declines_total":                          0,
		"fedpq_server_dropouts_total":                          0,
		"fedpq_server_chosen_total":                            8,
		"fedpq_server_round_clients":                           4,
		"fedpq_server_round_uploads":                           4,
		`fedpq_server_join_refusals_total{reason="denied"}`:    2, // the raw session's and the failed client's
		`fedpq_server_join_refusals_total{reason="invalid"}`:   1,
		`fedpq_server_join_refusals_total{reason="timeout"}`:   0,
		`fedpq_server_refused_messages_total{kind="upload"}`:   1,
		`fedpq_server_phase_seconds_count{phase="gather"}`:     2,
		`fedpq_server_phase_seconds_count{phase="uploads"}`:    2,
		`fedpq_server_phase_seconds_count{phase="start"}`:      2,
		`fedpq_server_phase_seconds_count{phase="aggregate"}`:  2,
		`fedpq_server_phase_seconds_count{phase="checkpoint"}`: 2,
		`fedpq_server_epsilon{observer="eavesdropper"}`:        sum.Privacy.Eavesdropper.UploadOptimal.Eps,
		"fedpq_server_epsilon_delta":                           sum.Privacy.Delta,
		`fedpq_server_received_bytes_total{kind="upload"}`:     cl[`fedpq_client_sent_bytes_total{kind="upload"}`] + lateBytes,
		`fedpq_server_received_bytes_total{kind="key_share"}`:  cl[`fedpq_client_sent_bytes_total{kind="key_share"}`],
		`fedpq_server_sent_bytes_total{kind="partner_key"}`:    cl[`fedpq_client_received_bytes_total{kind="partner_key"}`],
		`fedpq_server_sent_bytes_total{kind="round_start"}`:    cl[`fedpq_client_received_bytes_total{kind="round_start"}`],
		`fedpq_server_sent_bytes_total{kind="finished"}`:       cl[`fedpq_client_received_bytes_total{kind="finished"}`],
		"fedpq_client_uploads_total":                           float64(uploads),
		"fedpq_client_rounds_total":                            float64(uploads),
		"fedpq_client_training_seconds_count":                  float64(uploads),
		"fedpq_client_encoding_seconds_count":                  float64(uploads),
		"fedpq_client_upload_refusals_total":                   0,
		"fedpq_client_clients_running":                         0,
		"fedpq_client_clients_connected":                       0,
		"fedpq_client_clients_failed_total":                    0,
		`fedpq_client_declines_total{reason="answered"}`:       0,
		// Client 3 reconnects only where it came back within a second of
		// the raw session's join as 3, and the server told it to retry.
		"fedpq_client_reconnects_total": s[`fedpq_server_join_refusals_total{reason="busy"}`],
	} {
		got, ok := s[name]
		if strings.HasPrefix(name, "fedpq_client_") {
			got, ok = cl[name]
		}
		if !ok || got != want {
			t.Errorf("%s = %v (present: %v), want %v", name, got, ok, want)
		}
	}
	if _, page := get(t, srvURL+"/"); !strings.Contains(page, `id="done">2 of 2<`) || !strings.Contains(page, `id="status">finished<`) {
		t.Errorf("the live page of the finished run: %s", page)
	}
	for _, name := range []string{`fedpq_server_received_bytes_total{kind="upload"}`, "fedpq_server_round_deadline_timestamp_seconds", "fedpq_server_round_timeout_seconds", `fedpq_server_sent_bytes_total{kind="round_start"}`, "process_resident_memory_bytes"} {
		if s[name] <= 0 {
			t.Errorf("%s = %v, want more than 0", name, s[name])
		}
	}
}

// TestSecureMetrics: a secure round times each step of secure
// aggregation once, counts its masked uploads as uploads, and both sides
// count the same bytes of the protocol's messages.
func TestSecureMetrics(t *testing.T) {
	c := runConfig(t, "ldpq", 5, 1)
	c.Weighting, c.SecureAggregation = "mean", true
	sm, cm := NewServerMetrics(), NewClientMetrics()
	ts := serve(t, ServerConfig{Run: c, Metrics: sm}, "127.0.0.1:0")
	var cs []*testClient
	for k := range 5 {
		cs = append(cs, join(t, context.Background(), ClientConfig{Server: ts.addr, ID: k, Clients: 5, Metrics: cm}))
	}
	ts.wait(t)
	for _, cl := range cs {
		cl.wait(t)
	}
	s, cl := gather(t, sm), gather(t, cm)
	checks := map[string]float64{
		"fedpq_server_uploads_total":                              5,
		"fedpq_client_uploads_total":                              5,
		`fedpq_server_received_bytes_total{kind="secagg_keys"}`:   cl[`fedpq_client_sent_bytes_total{kind="secagg_keys"}`],
		`fedpq_server_received_bytes_total{kind="secagg_reveal"}`: cl[`fedpq_client_sent_bytes_total{kind="secagg_reveal"}`],
		`fedpq_server_sent_bytes_total{kind="secagg_inbox"}`:      cl[`fedpq_client_received_bytes_total{kind="secagg_inbox"}`],
	}
	for _, step := range securePhases {
		checks[fmt.Sprintf("fedpq_server_phase_seconds_count{phase=%q}", step)] = 1
	}
	for name, want := range checks {
		got, ok := s[name]
		if strings.HasPrefix(name, "fedpq_client_") {
			got, ok = cl[name]
		}
		if !ok || got != want {
			t.Errorf("%s = %v (present: %v), want %v", name, got, ok, want)
		}
	}
	if s[`fedpq_server_received_bytes_total{kind="secagg_keys"}`] <= 0 {
		t.Error("no bytes of secure aggregation's keys counted")
	}
}

// gather is the metrics of m as scrape reads them, served for the test.
func gather(t *testing.T, m Monitored) map[string]float64 {
	t.Helper()
	mon, err := ServeMonitor("127.0.0.1:0", m)
	if err != nil {
		t.Fatal(err)
	}
	defer mon.Close()
	return scrape(t, "http://"+mon.Addr())
}
