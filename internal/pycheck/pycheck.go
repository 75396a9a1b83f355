// Package pycheck runs python/checks/check_export.py from Go tests: the checks
// of an export with Debian's PyTorch and ONNX, skipped with a message that
// names the packages where /usr/bin/python3 lacks them.
package pycheck

import (
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"testing"
)

// Python is the interpreter with Debian's python3-torch and python3-onnx.
const Python = "/usr/bin/python3"

// Require skips t unless Python imports torch and onnx.
func Require(t testing.TB) {
	t.Helper()
	if out, err := exec.Command(Python, "-c", "import torch, onnx").CombinedOutput(); err != nil {
		t.Skipf("%s cannot import torch and onnx (apt-get install python3-torch python3-onnx): %v %s", Python, err, out)
	}
}

// Script is the path of python/checks/check_export.py.
func Script() string {
	_, file, _, _ := runtime.Caller(0)
	return filepath.Join(filepath.Dir(file), "..", "..", "python", "checks", "check_export.py")
}

// Check runs the script on export directories (flags may come first in
// more) and returns its output and whether it passed (exit 0).
func Check(t testing.TB, dir string, more ...string) (string, bool) {
	t.Helper()
	Require(t)
	cmd := exec.Command(Python, append([]string{Script(), dir}, more...)...)
	cmd.Env = append(os.Environ(), "OMP_NUM_THREADS=1")
	out, err := cmd.CombinedOutput()
	if _, ok := err.(*exec.ExitError); err != nil && !ok {
		t.Fatalf("running %s: %v", Script(), err)
	}
	return string(out), err == nil
}
