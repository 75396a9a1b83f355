package main

import (
	"encoding/json"
	"image/png"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/fedpq/fedpq/fl"
	"github.com/fedpq/fedpq/model"
)

// TestAttackCommand runs a small attack end to end: the JSON has a row per
// mechanism with its observer, the exact gradient of the linear model is
// inverted (SSIM above 0.99) and ldpq's is not, and the PNG grid has a row
// per mechanism under the originals.
func TestAttackCommand(t *testing.T) {
	dir := t.TempDir()
	grid := filepath.Join(dir, "grid.png")
	code, out, errOut := runCLI("attack", "--data-dir", "../../../shared/datasets", "--model", "linear",
		"--targets", "2", "--iterations", "100", "--starts", "2", "--mechanism", "none", "--mechanism", "ldpq:1",
		"--mechanism", "corbin+pair:1", "--format", "json", "--png", grid, "--quiet")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	var r struct {
		Model string
		Rows  []struct {
			Setting, Observer string
			SSIM              float64
			Targets           int
		}
	}
	// encoding/json matches keys case-insensitively: "model", "rows", "ssim".
	if err := json.Unmarshal([]byte(out), &r); err != nil {
		t.Fatalf("%v: %s", err, out)
	}
	if r.Model != "linear" || len(r.Rows) != 3 {
		t.Fatalf("unexpected result %s", out)
	}
	if r.Rows[0].SSIM < 0.99 || r.Rows[1].SSIM > 0.3 || r.Rows[2].Observer != "pair" || r.Rows[0].Targets != 2 {
		t.Errorf("unexpected rows %+v", r.Rows)
	}
	f, err := os.Open(grid)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	img, err := png.Decode(f)
	if err != nil {
		t.Fatal(err)
	}
	// 4 rows of 28*3-pixel cells 4 apart; 2 targets of 2 images (the pair's).
	if b := img.Bounds(); b.Dy() != 4*(28*3+4)+4 || b.Dx() != 240+4*(28*3+4)+4 {
		t.Errorf("grid is %v", b)
	}
}

// TestAttackUsage: settings the attack cannot use exit with status 2 and
// say why.
func TestAttackUsage(t *testing.T) {
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"--mechanism", "nosuch"}, "unknown mechanism"},
		{[]string{"--batch", "9"}, "--batch"},
		{[]string{"--batch", "5", "--mechanism", "corbin+pair"}, "at most 8"},
		{[]string{"--method", "gd"}, "method"},
		{[]string{"--range", "wide"}, "oracle or fixed"},
		{[]string{"--message", "update", "--lr", "0"}, "learning rate"},
		{[]string{"--format", "xml"}, "--format"},
		{[]string{"--dataset", "cifar10"}, "--dataset"},
	} {
		code, _, errOut := runCLI(append([]string{"attack"}, c.args...)...)
		if code != 2 || !strings.Contains(errOut, c.want) {
			t.Errorf("%v: exit %d, stderr %q (want 2 and %q)", c.args, code, errOut, c.want)
		}
	}
}

// TestAttackCheckpoint: --checkpoint attacks a run's saved model, and a
// checkpoint of another model is refused with status 2.
func TestAttackCheckpoint(t *testing.T) {
	dir := t.TempDir()
	m, err := model.New("linear", []int{28, 28, 1}, 10)
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, "checkpoint.gob")
	if err := fl.SaveState(path, fl.State{Round: 3, Global: m.Init(7)}); err != nil {
		t.Fatal(err)
	}
	args := []string{"attack", "--data-dir", "../../../shared/datasets", "--checkpoint", path, "--targets", "1",
		"--iterations", "100", "--mechanism", "none", "--format", "json", "--quiet"}
	code, out, errOut := runCLI(append(args, "--model", "linear")...)
	if code != 0 {
		t.Fatalf("linear: exit %d: %s", code, errOut)
	}
	var r struct{ Rows []struct{ SSIM float64 } }
	if err := json.Unmarshal([]byte(out), &r); err != nil || len(r.Rows) != 1 || r.Rows[0].SSIM < 0.99 {
		t.Errorf("linear checkpoint: %v, %s", err, out)
	}
	if code, _, errOut := runCLI(append(args, "--model", "mlp")...); code != 2 || !strings.Contains(errOut, "not mlp") {
		t.Errorf("mlp on a linear checkpoint: exit %d, %s", code, errOut)
	}
}
