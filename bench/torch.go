// Package bench measures fedpq's trainer beside PyTorch's, on the same
// machine in the same run: milliseconds per training step of every zoo
// model, and whole federated rounds of the papers' MNIST setting with their
// wall time and test accuracy. A speed or accuracy claim against PyTorch is
// only fair side by side, so `fedpq bench` runs both and prints the ratio.
//
// PyTorch's side is two small scripts embedded in the binary (torch_step.py
// and torch_fl.py, the project's anchors), run with a python3 that imports
// torch; without one, the tables have fedpq's columns only and say why.
package bench

import (
	"bytes"
	"context"
	_ "embed"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
)

var (
	//go:embed torch_step.py
	torchStep []byte
	//go:embed torch_fl.py
	torchFL []byte
)

// Torch is a python3 that imports torch.
type Torch struct {
	Python  string // the interpreter
	Version string // torch.__version__
	BLAS    string // the libblas.so.3 it calls, resolved
}

// DefaultPython is Debian's system interpreter, where python3-torch lives;
// a pyenv or venv python3 earlier in PATH usually lacks it.
const DefaultPython = "/usr/bin/python3"

// FindTorch checks that python imports torch. The error says how to
// install it; callers print fedpq's columns alone.
func FindTorch(ctx context.Context, python string) (*Torch, error) {
	out, err := exec.CommandContext(ctx, python, "-c",
		"import os, torch; print(torch.__version__); print(os.path.realpath('/usr/lib/x86_64-linux-gnu/libblas.so.3'))").Output()
	if err != nil {
		return nil, fmt.Errorf("bench: %s cannot import torch: install it (apt-get install python3-torch libopenblas0-pthread, for Debian's /usr/bin/python3), give --python a python3 that has it, or --python none for fedpq's columns alone (%v)", python, err)
	}
	lines := strings.Split(strings.TrimSpace(string(out)), "\n")
	t := &Torch{Python: python, Version: lines[0]}
	if len(lines) > 1 {
		t.BLAS = lines[1]
	}
	return t, nil
}

// OptimisedBLAS reports whether PyTorch calls an optimised BLAS: with
// Debian's reference BLAS its dense layers run about 10x slower, and a
// comparison against it flatters fedpq.
func (t *Torch) OptimisedBLAS() bool {
	for _, k := range []string{"openblas", "blis", "mkl"} {
		if strings.Contains(t.BLAS, k) {
			return true
		}
	}
	return false
}

// run runs an embedded script with args and decodes the JSON line it
// prints into v.
func (t *Torch) run(ctx context.Context, script []byte, name string, v any, args ...string) error {
	dir, err := os.MkdirTemp("", "fedpq-bench-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	path := filepath.Join(dir, name)
	if err := os.WriteFile(path, script, 0o644); err != nil {
		return err
	}
	var stdout, stderr bytes.Buffer
	cmd := exec.CommandContext(ctx, t.Python, append([]string{path}, args...)...)
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		return fmt.Errorf("bench: %s: %v: %s", name, err, lastLine(stderr.String()))
	}
	out := bytes.TrimSpace(stdout.Bytes())
	if i := bytes.LastIndexByte(out, '\n'); i >= 0 {
		out = out[i+1:]
	}
	if err := json.Unmarshal(out, v); err != nil {
		return fmt.Errorf("bench: %s printed %q: %w", name, out, err)
	}
	return nil
}

func lastLine(s string) string {
	s = strings.TrimSpace(s)
	if i := strings.LastIndexByte(s, '\n'); i >= 0 {
		return s[i+1:]
	}
	if s == "" {
		return "no message"
	}
	return s
}
