package main

import (
	"fmt"
	"io"
	"net"
	"net/http"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// freeAddr is a loopback address with a port free a moment ago.
func freeAddr(t *testing.T) string {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer lis.Close()
	return lis.Addr().String()
}

// httpGet is url's status code and body; 0 where nothing answers.
func httpGet(url string) (int, string) {
	resp, err := http.Get(url)
	if err != nil {
		return 0, err.Error()
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// awaitHTTP polls url until it answers code.
func awaitHTTP(t *testing.T, url string, code int) string {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	for {
		got, body := httpGet(url)
		if got == code {
			return body
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: %d %q, want %d", url, got, body, code)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// TestSignalStopsAndResumes is what an orchestrator does to a server pod:
// SIGTERM in the middle of a round. The server (and a client) serve
// /healthz and /readyz; the server, signalled while round 2 waits for a
// client, logs where it stops and exits 0 within seconds with round 1's
// checkpoint; a client signalled exits 0 too, leaving the run. The same
// server command, started again, resumes after round 1, and the run ends
// with all 3 rounds, every upload of the 2 clients left counted (those of
// the interrupted round 2 sent again, as they were).
func TestSignalStopsAndResumes(t *testing.T) {
	dir := t.TempDir()
	addr, metrics, clientMetrics := freeAddr(t), freeAddr(t), freeAddr(t)
	runDir := filepath.Join(dir, "run")
	serverArgs := []string{"server", "--clients", "3", "--rounds", "3", "--mechanism", "ldpq", "--out", runDir, "--listen", addr,
		"--token", "t0ken", "--min-clients", "2", "--gather", "1s", "--round-timeout", "8s", "--metrics", metrics}
	client := func(k int, extra ...string) *proc {
		args := append([]string{"client", "--server", addr, "--partition", fmt.Sprintf("%d/3", k), "--token", "t0ken",
			"--seed", fmt.Sprint(k), "--retry-for", "1m", "--state", filepath.Join(dir, fmt.Sprintf("client-%d.state", k))}, extra...)
		return start(t, fmt.Sprintf("client %d", k), args...)
	}

	server := start(t, "server", serverArgs...)
	server.await(t, "listening on", time.Minute)
	if code, body := httpGet("http://" + metrics + "/healthz"); code != http.StatusOK {
		t.Errorf("server /healthz: %d %q", code, body)
	}
	awaitHTTP(t, "http://"+metrics+"/readyz", http.StatusOK)

	// Client 2 joins and is then frozen: the rounds wait for its upload
	// until their deadline.
	frozen := client(2, "--metrics", clientMetrics)
	server.await(t, "client 2 joined", time.Minute)
	awaitHTTP(t, "http://"+clientMetrics+"/readyz", http.StatusOK)
	if err := frozen.cmd.Process.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	clients := []*proc{client(0), client(1)}
	server.await(t, `round 1 done: 2 uploads, 1 missing`, time.Minute)
	server.await(t, `round 2: 3 clients`, time.Minute)
	if body := awaitHTTP(t, "http://"+metrics+"/metrics", http.StatusOK); !strings.Contains(body, "fedpq_server_rounds_done 1\n") || !strings.Contains(body, "fedpq_server_round 2\n") {
		t.Errorf("the server's metrics in round 2 do not say round 1 is done and round 2 under way:\n%s", body)
	}

	stopped := time.Now()
	if err := server.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	server.await(t, `told to stop: stopping after round 1 of 3; its checkpoint in .* is kept`, 10*time.Second)
	if err := server.wait(t, 10*time.Second); err != nil {
		t.Fatalf("the server signalled mid-round: %v, want exit status 0", err)
	}
	t.Logf("the server exited %v after SIGTERM", time.Since(stopped).Round(time.Millisecond))
	if slicesContain(server.lines(), "round 2 done") {
		t.Fatal("round 2 ended before the signal: the test did not stop the server mid-round")
	}

	// Client 2, signalled, leaves the run and exits 0.
	frozen.cmd.Process.Signal(syscall.SIGTERM)
	frozen.cmd.Process.Signal(syscall.SIGCONT)
	frozen.await(t, "told to stop", 10*time.Second)
	if err := frozen.wait(t, 10*time.Second); err != nil {
		t.Errorf("client 2 signalled: %v, want exit status 0", err)
	}

	server = start(t, "restarted server", serverArgs...)
	server.await(t, `resuming .* after round 1 from its checkpoint`, time.Minute)
	if err := server.wait(t, 2*time.Minute); err != nil {
		t.Fatalf("restarted server: %v", err)
	}
	for k, c := range clients {
		if err := c.wait(t, 30*time.Second); err != nil {
			t.Errorf("client %d: %v", k, err)
		}
		if !slicesContain(c.lines(), "round 2: asked again (the server restarted); sending the same upload") {
			t.Errorf("client %d did not send its round 2 upload again", k)
		}
	}
	if got := uploadsPerRound(t, runDir); got != "[2 2 2]" {
		t.Errorf("uploads per round %v, want [2 2 2]", got)
	}
	sum := *finishedRun(t, runDir).Summary
	if sum.Rounds != 3 || sum.Error != "" {
		t.Errorf("summary: %d rounds, error %q; want 3 and none", sum.Rounds, sum.Error)
	}
}
