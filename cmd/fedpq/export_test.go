package main

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// TestExportCommand: fedpq export writes both files of a finished run and
// prints the model's test accuracy; a run started from the safetensors
// file prints the same accuracy before its first round; fedpq model
// shows a zoo model's layers.
func TestExportCommand(t *testing.T) {
	dir := t.TempDir()
	src, dst := filepath.Join(dir, "src"), filepath.Join(dir, "dst")
	if code, _, stderr := runCLI("run", "--rounds", "3", "--out", src, "--quiet"); code != 0 {
		t.Fatalf("run: %s", stderr)
	}
	code, stdout, stderr := runCLI("export", src)
	if code != 0 {
		t.Fatalf("export: exit %d: %s", code, stderr)
	}
	acc := regexp.MustCompile(`test accuracy (\S+),`).FindStringSubmatch(stdout)
	if acc == nil || !strings.Contains(stdout, "global model after round 3") || !strings.Contains(stdout, `input "input" [N, 60]`) {
		t.Fatalf("export printed:\n%s", stdout)
	}
	for _, f := range []string{"model.onnx", "model.safetensors"} {
		if _, err := os.Stat(filepath.Join(src, f)); err != nil {
			t.Error(err)
		}
	}
	code, stdout, stderr = runCLI("run", "--rounds", "1", "--out", dst, "--quiet", "--init-weights", filepath.Join(src, "model.safetensors"))
	if code != 0 || !strings.Contains(stdout, "accuracy "+acc[1]+" before round 1") {
		t.Errorf("run from the export: exit %d, want accuracy %s before round 1:\n%s%s", code, acc[1], stdout, stderr)
	}
	code, stdout, _ = runCLI("model", "mlp")
	if code != 0 || !strings.Contains(stdout, "    1  dense 32                    [32]               25120  1.weight [32 784], 1.bias [32]") || !strings.Contains(stdout, "25818 parameters") {
		t.Errorf("fedpq model mlp: exit %d:\n%s", code, stdout)
	}
}
