package main

import (
	"encoding/json"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/fedpq/fedpq/data/datatest"
	"github.com/fedpq/fedpq/internal/pycheck"
	"github.com/fedpq/fedpq/report"
)

// clientRSSLimit is what a fedpq client holding 1/100 of MNIST may keep
// resident at its peak (VmHWM): the bound. Measured 2026-11-26 on
// the 2-core machine: 600 examples as NPZ, mlp, corbin, 27-31 MB
// (docs/data.md), so the margin is about 20 MB.
const clientRSSLimit = 50e6

// TestOwnDataMNIST: fedpq split writes MNIST for 100 clients (1/100 each,
// as NPZ files) and its test set; fedpq run on that directory learns
// (above 85% in 3 rounds of 20 clients), and its exported model gives
// PyTorch the same accuracy on test.npz; and a deployment of it runs with
// a server process that reads only the test set (its peak before any
// client joins within the test set, the model and 50 MB) and three client
// processes that each read only their own file, each staying under 50 MB
// resident at its peak.
func TestOwnDataMNIST(t *testing.T) {
	dataDir := sharedDatasets(t)
	dir := filepath.Join(t.TempDir(), "mnist-100")
	code, out, errOut := runCLI("split", "--from", "mnist", "--data-dir", dataDir, "--clients", "100", "--format", "npz", "--out", dir, "--quiet")
	if code != 0 {
		t.Fatalf("split: exit %d: %s", code, errOut)
	}
	if !strings.Contains(out, "100 clients (iid, seed 1) of 600 to 600 examples, and a test set of 10000") {
		t.Errorf("split: %s", out)
	}
	var m struct {
		MaxExamples int `json:"max_examples"`
	}
	if b, err := os.ReadFile(filepath.Join(dir, "manifest.json")); err != nil || json.Unmarshal(b, &m) != nil || m.MaxExamples != 600 {
		t.Fatalf("manifest.json: %v, max_examples %d", err, m.MaxExamples)
	}

	runDir := filepath.Join(t.TempDir(), "run")
	code, out, errOut = runCLI("run", "--data", dir, "--model", "mlp", "--mechanism", "none", "--lr", "0.1", "--rounds", "3",
		"--clients-per-round", "20", "--out", runDir, "--format", "json")
	if code != 0 {
		t.Fatalf("run: exit %d: %s", code, errOut)
	}
	var s report.Summary
	if err := json.Unmarshal([]byte(out), &s); err != nil {
		t.Fatal(err)
	}
	t.Logf("fedpq run --data: accuracy %.4f after 3 rounds of 20 of 100 clients", s.FinalAccuracy)
	if s.FinalAccuracy < 0.85 || s.Dataset != "mnist-100" {
		t.Errorf("run on the clients' own data: accuracy %.4f, dataset %q", s.FinalAccuracy, s.Dataset)
	}
	cfg, err := os.ReadFile(filepath.Join(runDir, "config.yaml"))
	if err != nil || !strings.Contains(string(cfg), "clients: 100") || !strings.Contains(string(cfg), "max_examples: 600") ||
		!strings.Contains(string(cfg), "shape: [28, 28, 1]") || !strings.Contains(string(cfg), "test_data: "+filepath.Join(dir, "test.npz")) {
		t.Errorf("config.yaml (%v):\n%s", err, cfg)
	}
	// The model leaves: PyTorch, reading test.npz as fedpq does (uint8
	// pixels scaled by 1/255, labels by class name), gets fedpq's accuracy.
	if code, _, errOut = runCLI("export", runDir); code != 0 {
		t.Fatalf("export: exit %d: %s", code, errOut)
	}
	if out, ok := pycheck.Check(t, runDir); !ok || !strings.Contains(out, "ok   accuracy") || !strings.Contains(out, "test examples of "+filepath.Join(dir, "test.npz")) {
		t.Errorf("check_export.py:\n%s", out)
	}

	if testing.Short() {
		t.Skip("the deployment runs 4 processes")
	}
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := lis.Addr().String()
	lis.Close()
	server := start(t, "server", "server", "--test-data", filepath.Join(dir, "test.npz"), "--clients", "100", "--max-examples", "600",
		"--model", "mlp", "--lr", "0.1", "--rounds", "2", "--out", filepath.Join(t.TempDir(), "dep"), "--listen", addr,
		"--token", "own", "--min-clients", "3", "--gather", "0s")
	server.await(t, "listening on", time.Minute)
	checkServerPeak(t, server, serverPeakLimit(mnistTestBytes, 25818))
	var clients []*proc
	for k := range 3 {
		clients = append(clients, start(t, fmt.Sprintf("client %d", k), "client", "--server", addr, "--token", "own",
			"--data", filepath.Join(dir, fmt.Sprintf("client-%d.npz", k)), "--seed", fmt.Sprint(k)))
	}
	peaks := make([]float64, len(clients))
	for done := 0; done < len(clients); {
		done = 0
		for k, c := range clients {
			select {
			case <-c.done:
				done++
			default:
				peaks[k] = max(peaks[k], procStatus(c, "VmHWM"))
			}
		}
		time.Sleep(20 * time.Millisecond)
	}
	if err := server.wait(t, time.Minute); err != nil {
		t.Fatalf("server: %v", err)
	}
	for k, c := range clients {
		if err := c.wait(t, 10*time.Second); err != nil {
			t.Errorf("client %d: %v", k, err)
		}
		c.await(t, fmt.Sprintf("client %d of 100, its own data .*client-%d.npz: 600 examples", k, k), time.Second)
	}
	server.await(t, `round 2 done: 3 uploads`, time.Second)
	t.Logf("clients' peak resident memory: %.1f, %.1f, %.1f MB", peaks[0]/1e6, peaks[1]/1e6, peaks[2]/1e6)
	for k, p := range peaks {
		if p == 0 || p > clientRSSLimit {
			t.Errorf("client %d: peak resident memory %.1f MB, want under %.0f MB", k, p/1e6, clientRSSLimit/1e6)
		}
	}
}

// procStatus is a field of a running process's /proc status in bytes (0
// if the process has ended).
func procStatus(p *proc, field string) float64 {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", p.cmd.Process.Pid))
	if err != nil {
		return 0
	}
	for _, l := range strings.Split(string(b), "\n") {
		if f := strings.Fields(l); len(f) == 3 && f[0] == field+":" {
			kb, _ := strconv.ParseFloat(f[1], 64)
			return kb * 1024
		}
	}
	return 0
}

// TestOwnDataCSV: scikit-learn's breast cancer set, split by fedpq split
// into 8 clients in one CSV with a client column (LEAF's convention) and a
// held-out test set, trains with fedpq run to above 90% accuracy (the
// classes are 37% and 63%) with the features standard-scaled by the test
// set's statistics, recorded in config.yaml with the classes (in name
// order: the split's CSV names them, and does not keep scikit-learn's
// order), from which the run is repeated.
func TestOwnDataCSV(t *testing.T) {
	src := filepath.Join(datatest.Sklearn(t), "breast_cancer.csv")
	dir := filepath.Join(t.TempDir(), "bc")
	code, out, errOut := runCLI("split", "--from", src, "--clients", "8", "--partition", "dirichlet:1", "--client-column", "hospital", "--out", dir, "--quiet")
	if code != 0 {
		t.Fatalf("split: exit %d: %s", code, errOut)
	}
	if !strings.Contains(out, "8 clients (dirichlet:1, seed 1)") || !strings.Contains(out, "a test set of 114") {
		t.Errorf("split: %s", out)
	}
	runDir := filepath.Join(t.TempDir(), "run")
	code, out, errOut = runCLI("run", "--data", filepath.Join(dir, "train.csv"), "--client-column", "hospital", "--test-data", filepath.Join(dir, "test.csv"),
		"--model", "linear", "--mechanism", "none", "--rounds", "10", "--lr", "0.1", "--out", runDir, "--format", "json")
	if code != 0 {
		t.Fatalf("run: exit %d: %s", code, errOut)
	}
	var s report.Summary
	if err := json.Unmarshal([]byte(out), &s); err != nil {
		t.Fatal(err)
	}
	t.Logf("breast cancer, 8 clients: accuracy %.4f", s.FinalAccuracy)
	if s.FinalAccuracy < 0.9 {
		t.Errorf("accuracy %.4f, want above 0.9", s.FinalAccuracy)
	}
	cfg, _ := os.ReadFile(filepath.Join(runDir, "config.yaml"))
	if !strings.Contains(string(cfg), "classes: [benign, malignant]") || !strings.Contains(string(cfg), "name: x29") || !strings.Contains(string(cfg), "clients: 8") {
		t.Errorf("config.yaml:\n%s", cfg)
	}
	// The same run from its config.yaml, as a user repeats it.
	code, _, errOut = runCLI("run", "--config", filepath.Join(runDir, "config.yaml"), "--out", filepath.Join(t.TempDir(), "again"), "--quiet")
	if code != 0 {
		t.Errorf("run --config config.yaml: exit %d: %s", code, errOut)
	}
	// The model leaves with the schema: PyTorch, reading test.csv as the
	// metadata says (scaled columns), gets fedpq's accuracy and loss.
	if code, _, errOut = runCLI("export", runDir); code != 0 {
		t.Fatalf("export: exit %d: %s", code, errOut)
	}
	if out, ok := pycheck.Check(t, runDir); !ok || !strings.Contains(out, "ok   accuracy") || !strings.Contains(out, "test examples of "+filepath.Join(dir, "test.csv")) {
		t.Errorf("check_export.py:\n%s", out)
	}
}
