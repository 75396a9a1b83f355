package main

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/fedpq/fedpq/mech"
)

func runCLI(args ...string) (code int, stdout, stderr string) {
	var o, e bytes.Buffer
	code = run(context.Background(), args, &o, &e)
	return code, o.String(), e.String()
}

func TestDMEJSON(t *testing.T) {
	code, out, errOut := runCLI("dme", "--mechanism", "corbin", "--clients", "20", "--dim", "200", "--trials", "2", "--format", "json")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	var r map[string]any
	if err := json.Unmarshal([]byte(out), &r); err != nil {
		t.Fatalf("%v: %s", err, out)
	}
	for _, k := range []string{"mechanism", "epsilon", "clients", "dim", "trials", "mse", "mse_stderr", "mse_theory", "bias", "uplink_bits_per_param", "shared_setup_bytes_per_pair", "encode_mparams_per_s"} {
		if _, ok := r[k]; !ok {
			t.Errorf("JSON lacks %q", k)
		}
	}
	if r["mechanism"] != "corbin" || r["uplink_bits_per_param"] != 1.0 || r["shared_setup_bytes_per_pair"] != 64.0 {
		t.Errorf("unexpected result %v", r)
	}
}

func TestDMETextAll(t *testing.T) {
	code, out, errOut := runCLI("dme", "--clients", "10", "--dim", "64", "--trials", "1")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	for _, name := range mech.Names() {
		if !strings.Contains(out, " "+name+" ") {
			t.Errorf("table lacks %s:\n%s", name, out)
		}
	}
}

// TestDMEDistributedClients checks that dme calibrates ddgauss and skellam
// for its --clients: 100 clients, 1000 parameters, eps 1 give the MSE of
// TestDistDPMeasure (6.56, stderr about 0.2 at 2 trials), not that of each
// client adding the whole noise (35 and more).
func TestDMEDistributedClients(t *testing.T) {
	for _, name := range []string{"ddgauss", "skellam"} {
		code, out, errOut := runCLI("dme", "--mechanism", name, "--trials", "2", "--format", "json", "--quiet")
		if code != 0 {
			t.Fatalf("%s: exit %d: %s", name, code, errOut)
		}
		var r struct{ MSE float64 }
		if err := json.Unmarshal([]byte(out), &r); err != nil {
			t.Fatalf("%s: %v: %s", name, err, out)
		}
		if r.MSE < 5.5 || r.MSE > 7.7 {
			t.Errorf("%s: MSE %.4g, want 6.56 within 15%%", name, r.MSE)
		}
	}
}

func TestMechanismsList(t *testing.T) {
	code, out, _ := runCLI("mechanisms")
	if code != 0 || !strings.Contains(out, "ldpq") || !strings.Contains(out, "corbin") {
		t.Errorf("exit %d:\n%s", code, out)
	}
}

func TestUsageErrors(t *testing.T) {
	for _, args := range [][]string{{"nonesuch"}, {"dme", "--nonesuch"}, {"dme", "extra"}} {
		if code, _, _ := runCLI(args...); code != 2 {
			t.Errorf("%v: exit %d, want 2", args, code)
		}
	}
	// Bad values are usage errors too: exit 2, with the reason first.
	for _, args := range [][]string{{"dme", "--mechanism", "nonesuch"}, {"dme", "--epsilon", "0", "--mechanism", "ldpq"}, {"dme", "--input", "zipf"}, {"dme", "--radius", "-1", "--mechanism", "ldpq"}, {"dme", "--format", "xml"}, {"dme", "--clients", "0"}, {"reproduce", "nonesuch"}} {
		code, _, errOut := runCLI(args...)
		if code != 2 || !strings.HasPrefix(errOut, "fedpq "+args[0]+": ") {
			t.Errorf("%v: exit %d, stderr %q", args, code, errOut)
		}
	}
	if code, out, _ := runCLI("help"); code != 0 || !strings.Contains(out, "dme") {
		t.Errorf("help: exit %d", code)
	}
	if code, _, errOut := runCLI("dme", "-h"); code != 0 || !strings.Contains(errOut, "--epsilon") && !strings.Contains(errOut, "-epsilon") {
		t.Errorf("dme -h: exit %d, %s", code, errOut)
	}
}

// TestRunConfigAndFlags: a YAML file sets the run, flags given on the
// command line win, and the name defaults to the file's.
func TestRunConfigAndFlags(t *testing.T) {
	dir := t.TempDir()
	cfg := filepath.Join(dir, "small.yaml")
	if err := os.WriteFile(cfg, []byte("rounds: 5\nmechanism: ldpq\nepsilon: 2\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(dir, "run")
	code, stdout, stderr := runCLI("run", "--config", cfg, "--rounds", "2", "--out", out, "--format", "json", "--quiet")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	var s map[string]any
	if err := json.Unmarshal([]byte(stdout), &s); err != nil {
		t.Fatalf("%v: %s", err, stdout)
	}
	if s["rounds"] != 2.0 || s["mechanism"] != "ldpq" || s["epsilon_per_round"] != 2.0 || s["name"] != "small" {
		t.Errorf("summary %v", s)
	}
	written, err := os.ReadFile(filepath.Join(out, "config.yaml"))
	if err != nil || !strings.Contains(string(written), "rounds: 2") || !strings.Contains(string(written), "mechanism: ldpq") {
		t.Errorf("config.yaml: %v\n%s", err, written)
	}
	if code, _, _ := runCLI("run", "--config", filepath.Join(dir, "missing.yaml")); code != 1 {
		t.Errorf("missing config: exit %d", code)
	}
	if code, _, _ := runCLI("run", "--rounds", "x"); code != 2 {
		t.Errorf("bad flag: exit %d", code)
	}
}

// TestRunImageDatasetDefaults: --dataset mnist with no partition runs (the
// default partition was natural, which mnist does not have), says on
// stderr which partition it chose, and records it in config.yaml.
func TestRunImageDatasetDefaults(t *testing.T) {
	out := filepath.Join(t.TempDir(), "run")
	code, _, stderr := runCLI("run", "--dataset", "mnist", "--data-dir", "../../../shared/datasets", "--model", "linear",
		"--clients", "5", "--rounds", "1", "--out", out)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	if !strings.HasPrefix(stderr, "partition: iid (mnist has no clients of its own)\n") {
		t.Errorf("stderr does not say the partition:\n%s", stderr)
	}
	if y, err := os.ReadFile(filepath.Join(out, "config.yaml")); err != nil || !strings.Contains(string(y), "partition: iid\n") {
		t.Errorf("config.yaml: %v\n%s", err, y)
	}
}

// TestExitStatus: bad flags and bad values of settings are usage errors
// (status 2, with a pointer to the command's flags); failures at run time
// are status 1. A bad value was status 1 before.
func TestExitStatus(t *testing.T) {
	notRun := t.TempDir()
	badKey := filepath.Join(notRun, "bad-key.yaml")
	badValue := filepath.Join(notRun, "bad-value.yaml")
	if err := os.WriteFile(badKey, []byte("roundz: 3\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	existing := filepath.Join(notRun, "client-3.key")
	if err := os.WriteFile(existing, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(badValue, []byte("rounds: x\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	badSpec := filepath.Join(notRun, "net.yaml")
	if err := os.WriteFile(badSpec, []byte("layers:\n  - dense: {units: 8}\n  - dense: {units: classes}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		code int
		args []string
		says string
	}{
		{2, []string{"run", "--rounds", "-1"}, "rounds (-1)"},
		{2, []string{"run", "--partition", "halves"}, `partition "halves"`},
		{2, []string{"run", "--mechanism", "nonesuch"}, "nonesuch"},
		{2, []string{"run", "--dataset", "nonesuch"}, `unknown dataset "nonesuch"`},
		{2, []string{"run", "--dataset", "synthetic:x"}, "want synthetic:ALPHA,BETA"},
		{2, []string{"run", "--format", "xml"}, `--format "xml"`},
		{2, []string{"run", "--rounds", "x"}, "invalid value"},
		{2, []string{"run", "extra"}, "unexpected argument"},
		{2, []string{"server", "--format", "xml"}, `--format "xml"`},
		{2, []string{"server", "--epsilon", "0"}, "eps"},
		{2, []string{"client", "--partition", "9/8"}, `--partition "9/8"`},
		{2, []string{"client", "--partition", "1/8", "--seed", "x"}, `--seed "x"`},
		{2, []string{"nonesuch"}, "unknown command"},
		{1, []string{"run", "--resume", notRun}, "is not a run directory"},
		{1, []string{"run", "--config", filepath.Join(notRun, "missing.yaml")}, "missing.yaml: no such file; give a YAML file"},
		{1, []string{"run", "--config", notRun}, "is a directory; give a YAML file"},
		{1, []string{"server", "--config", filepath.Join(notRun, "missing.yaml")}, "experiments/ holds one per setting"},
		{1, []string{"keygen", "--client", "3", "--key", existing}, "already exists: keygen never overwrites a key"},
		{2, []string{"run", "--config", badKey}, "line 1: unknown key roundz (docs/config.md lists every key)"},
		{2, []string{"run", "--config", badValue}, "cannot unmarshal"},
		{2, []string{"run", "--model", badSpec}, "layers[0] (dense 8): is not the last layer, so it must be followed by relu or sigmoid"},
		{2, []string{"run", "--model", "resnet"}, `model "resnet": want one of`},
		{2, []string{"run", "--init-weights", "w.pt"}, "want a .safetensors or .onnx file"},
		{2, []string{"run", "--model", filepath.Join(notRun, "missing.yaml")}, "missing.yaml: no such file"},
		{2, []string{"model", "--input", "12,12,1", "cnn2"}, "layers[3] (conv 6 5x5): kernel 5x5 does not fit its input [4 4 6]"},
		{2, []string{"model", "resnet"}, `unknown architecture "resnet"`},
		{2, []string{"model", "--input", "28,28", "cnn2"}, "want H,W,C or F"},
		{2, []string{"export"}, "export takes one RUN_DIR, got 0"},
		{1, []string{"export", notRun}, "is not a run directory: it has no config.yaml"},
	} {
		code, _, stderr := runCLI(tc.args...)
		if code != tc.code || !strings.Contains(stderr, tc.says) || strings.Contains(stderr, "panic") {
			t.Errorf("%v: exit %d, want %d; stderr:\n%s", tc.args, code, tc.code, stderr)
		}
		if tc.code == 2 && tc.args[0] != "nonesuch" && !strings.Contains(stderr, "-h") && !strings.Contains(stderr, "Usage: fedpq") {
			t.Errorf("%v: stderr does not point at the flags:\n%s", tc.args, stderr)
		}
	}
}
