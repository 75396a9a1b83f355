package main

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/fedpq/fedpq/extern/externtest"
	"github.com/fedpq/fedpq/report"
)

// TestRunTrainer: fedpq run --trainer trains with an external trainer (the
// fake: a linear model of its own) and says what the protocol cost; a
// trainer that fails stops the run with the round, the client and why.
func TestRunTrainer(t *testing.T) {
	dir := t.TempDir()
	code, out, errOut := runCLI("run", "--model", "external", "--trainer", externtest.Command(""), "--rounds", "2",
		"--workers", "2", "--out", dir, "--quiet")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	if !strings.Contains(out, "quickstart: corbin on synthetic, external, 2 rounds") || !strings.Contains(out, ": 2 processes, 62 requests: ") ||
		!strings.Contains(out, " in the protocol (") {
		t.Errorf("output:\n%s", out)
	}
	code, _, errOut = runCLI("run", "--model", "external", "--trainer", externtest.Command("missing"), "--rounds", "2", "--out", t.TempDir(), "--quiet")
	if code != 1 || !strings.Contains(errOut, "round 1: client ") || !strings.Contains(errOut, "its train reply refused: tensor b (shape [10]) is missing") {
		t.Errorf("a trainer that leaves out a tensor: exit %d:\n%s", code, errOut)
	}
	code, _, errOut = runCLI("run", "--model", "external")
	if code != 2 || !strings.Contains(errOut, "give its command (trainer, --trainer)") {
		t.Errorf("model external without a trainer: exit %d:\n%s", code, errOut)
	}
}

// torchPython is Debian's python3 where it imports torch; the test is
// skipped otherwise.
func torchPython(t *testing.T) string {
	const python = "/usr/bin/python3"
	if err := exec.Command(python, "-c", "import torch").Run(); err != nil {
		if os.Getenv("CI") != "" { // CI installs Debian's python3-torch (.ci/run)
			t.Fatalf("%s cannot import torch: %v", python, err)
		}
		t.Skipf("needs PyTorch: %s cannot import torch (apt-get install python3-torch libopenblas0-pthread, Debian's): %v", python, err)
	}
	return python
}

// pythonScript is the path of a script under the repository's python/
// tree; the test fails where it is missing, before any skip for torch.
func pythonScript(t *testing.T, parts ...string) string {
	t.Helper()
	path := filepath.Join(append([]string{"..", "..", "python"}, parts...)...)
	if _, err := os.Stat(path); err != nil {
		t.Fatalf("the Python script the test runs: %v", err)
	}
	return path
}

// TestPyTorchTrainer: the PyTorch example trains MNIST's cnn2 end to end
// (10 of 100 clients a round, 3 rounds, no privacy, one local epoch): it
// passes the check that it computes fedpq's cnn2, learns, and gives the
// same rounds with one trainer process as with two.
func TestPyTorchTrainer(t *testing.T) {
	script := pythonScript(t, "examples", "mnist_cnn2.py")
	python := torchPython(t)
	data := sharedDatasets(t)
	trainer := python + " " + script
	var runs [][]report.Round
	for _, workers := range []string{"2", "1"} {
		dir := t.TempDir()
		code, out, errOut := runCLI("run", "--config", "../../experiments/mnist-ldpq.yaml", "--data-dir", data, "--mechanism", "none",
			"--clients-per-round", "10", "--rounds", "3", "--epochs", "1", "--workers", workers, "--trainer", trainer, "--out", dir, "--quiet")
		if code != 0 {
			t.Fatalf("exit %d: %s", code, errOut)
		}
		run := finishedRun(t, dir)
		s := run.Summary
		if s.FinalAccuracy < 0.8 || s.Trainer == nil || s.Trainer.Requests != 31 {
			t.Errorf("workers %s: final accuracy %v, trainer %+v; want above 80%% after 3 rounds, 31 requests (30 clients and the start's check):\n%s", workers, s.FinalAccuracy, s.Trainer, out)
		}
		for i := range run.Rounds {
			run.Rounds[i].Seconds = 0
		}
		runs = append(runs, run.Rounds)
	}
	a, _ := json.Marshal(runs[0])
	b, _ := json.Marshal(runs[1])
	if string(a) != string(b) {
		t.Errorf("two trainer processes and one give different rounds:\n%s\n%s", a, b)
	}
}

// TestPyTorchProx: the trainer library's optimizer applies FedProx's
// prox_mu as PyTorch does with the term in the loss, with SGD (momentum,
// weight decay) and Adam, with and without a closure, and the term
// matters (python/checks/torch_prox.py; skipped without torch).
func TestPyTorchProx(t *testing.T) {
	script := pythonScript(t, "checks", "torch_prox.py")
	python := torchPython(t)
	out, err := exec.Command(python, script).CombinedOutput()
	if err != nil {
		t.Fatalf("%v:\n%s", err, out)
	}
	t.Logf("\n%s", out)
}
