package main

import (
	"fmt"
	"net/http"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/fedpq/fedpq/report"
)

// TestFleetBlock: block K of size S of a fleet's range is its clients
// K*S to K*S+S-1 counted from the range's first, the last block shorter;
// the blocks of a range cover it, each client once; a block past the
// range, or half of the flag pair, is an error.
func TestFleetBlock(t *testing.T) {
	rng := func(a, b int) []int {
		ids, err := parseRange("--partition", fmt.Sprintf("%d-%d", a, b))
		if err != nil {
			t.Fatal(err)
		}
		return ids
	}
	for _, tc := range []struct {
		ids      []int
		k, size  int
		want     string
		errorSay string
	}{
		{rng(0, 4), -1, 0, "[0 1 2 3 4]", ""},
		{rng(0, 4), 0, 3, "[0 1 2]", ""},
		{rng(0, 4), 1, 3, "[3 4]", ""},
		{rng(100, 199), 3, 25, fmt.Sprint(rng(175, 199)), ""},
		{rng(0, 4), 2, 3, "", "the range 0-4 (5 clients) has blocks 0 to 1"},
		{rng(0, 4), 1, 0, "", "--block K and --block-size S go together"},
		{rng(0, 4), -1, 3, "", "--block K and --block-size S go together"},
		{nil, 0, 3, "", "--block goes with a fleet's range"},
	} {
		got, err := fleetBlock(tc.ids, tc.k, tc.size)
		if tc.errorSay != "" {
			if err == nil || !strings.Contains(err.Error(), tc.errorSay) {
				t.Errorf("block %d of size %d of %v: %v %v, want an error saying %q", tc.k, tc.size, tc.ids, got, err, tc.errorSay)
			}
			continue
		}
		if err != nil || fmt.Sprint(got) != tc.want {
			t.Errorf("block %d of size %d of %v: %v %v, want %s", tc.k, tc.size, tc.ids, got, err, tc.want)
		}
	}
	for n := 1; n <= 12; n++ {
		for size := 1; size <= n+1; size++ {
			var all []int
			for k := 0; ; k++ {
				b, err := fleetBlock(rng(0, n-1), k, size)
				if err != nil {
					break
				}
				all = append(all, b...)
			}
			if fmt.Sprint(all) != fmt.Sprint(rng(0, n-1)) {
				t.Errorf("the blocks of size %d of 0-%d cover %v", size, n-1, all)
			}
		}
	}
	code, _, stderr := runCLI("client", "--partition", "0-4/5", "--block", "2", "--block-size", "3")
	if code != 2 || !strings.Contains(stderr, "has blocks 0 to 1") {
		t.Errorf("--block past the range: exit %d: %s", code, stderr)
	}
}

// TestServerLingers is a run under a Kubernetes Deployment, whose pods are
// restarted whenever they exit: its 5 clients are two fleet processes,
// blocks 0 and 1 of size 3 of the range 0-4/5 (as two pods of an Indexed
// Job run them), and every upload of every round is counted. The server,
// with --linger, stays up once the run is over: /healthz 200, /readyz 503
// saying the run is over, /metrics with the run finished; SIGTERM ends it
// with 0. Started again on the finished run, it says so and stays up the
// same way, its metrics saying the run is done, until SIGTERM.
func TestServerLingers(t *testing.T) {
	dir := t.TempDir()
	addr, metrics := freeAddr(t), freeAddr(t)
	runDir := filepath.Join(dir, "run")
	serverArgs := []string{"server", "--clients", "5", "--rounds", "2", "--model", "linear", "--mechanism", "ldpq", "--out", runDir,
		"--listen", addr, "--token", "t0ken", "--grace", "20s", "--metrics", metrics, "--linger"}
	server := start(t, "server", serverArgs...)
	server.await(t, "listening on", time.Minute)
	var fleets []*proc
	for k := range 2 {
		fleets = append(fleets, start(t, fmt.Sprintf("fleet %d", k), "client", "--server", addr, "--token", "t0ken", "--retry-for", "1m",
			"--partition", "0-4/5", "--block", fmt.Sprint(k), "--block-size", "3", "--seed", fmt.Sprint(k)))
	}
	for _, f := range fleets {
		if err := f.wait(t, 2*time.Minute); err != nil {
			t.Fatalf("%s: %v", f.name, err)
		}
	}
	server.await(t, `run finished after 2 rounds`, 10*time.Second)
	server.await(t, `the run is over; staying up \(--linger\)`, 10*time.Second)
	if got := uploadsPerRound(t, runDir); got != "[5 5]" {
		t.Errorf("uploads per round %v, want [5 5]: the two blocks are not the 5 clients", got)
	}
	lingering := func(p *proc) {
		t.Helper()
		time.Sleep(time.Second)
		select {
		case <-p.done:
			t.Fatalf("%s exited (%v) with --linger", p.name, p.err)
		default:
		}
		if code, body := httpGet("http://" + metrics + "/healthz"); code != http.StatusOK {
			t.Errorf("%s: /healthz %d %q, want 200", p.name, code, body)
		}
		if code, body := httpGet("http://" + metrics + "/readyz"); code != http.StatusServiceUnavailable || !strings.Contains(body, "the run is over") {
			t.Errorf("%s: /readyz %d %q, want 503 saying the run is over", p.name, code, body)
		}
		if _, body := httpGet("http://" + metrics + "/metrics"); !strings.Contains(body, "fedpq_server_run_finished 1\n") || !strings.Contains(body, "fedpq_server_rounds_done 2\n") {
			t.Errorf("%s: /metrics does not say the run finished with 2 rounds done:\n%s", p.name, body)
		}
		if err := p.cmd.Process.Signal(syscall.SIGTERM); err != nil {
			t.Fatal(err)
		}
		p.await(t, "told to stop: exiting", 10*time.Second)
		if err := p.wait(t, 10*time.Second); err != nil {
			t.Errorf("%s on SIGTERM: %v, want exit status 0", p.name, err)
		}
	}
	lingering(server)

	again := start(t, "server again", serverArgs...)
	again.await(t, "finished earlier, after 2 rounds", time.Minute)
	again.await(t, `staying up \(--linger\)`, 10*time.Second)
	lingering(again)
}

// uploadsPerRound is the uploads counted in each round of the finished
// run in runDir, as "[5 5]".
func uploadsPerRound(t *testing.T, runDir string) string {
	t.Helper()
	var got []int
	for _, r := range finishedRun(t, runDir).Rounds {
		got = append(got, r.Clients)
	}
	return fmt.Sprint(got)
}

// finishedRun reads the run in dir, which must have its summary.
func finishedRun(t *testing.T, dir string) *report.Run {
	t.Helper()
	run, err := report.ReadRun(dir)
	if err != nil {
		t.Fatal(err)
	}
	if run.Summary == nil {
		t.Fatalf("%s: no %s: the run did not finish", dir, report.SummaryFile)
	}
	return run
}
