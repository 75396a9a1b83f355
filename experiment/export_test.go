package experiment

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/fedpq/fedpq/fl"
	"github.com/fedpq/fedpq/internal/pycheck"
)

const mnistDir = "../../shared/datasets"

func needMNIST(t *testing.T) {
	if _, err := os.Stat(filepath.Join(mnistDir, "mnist", "t10k-images-idx3-ubyte.gz")); err != nil {
		t.Skipf("MNIST is not in %s: %v", mnistDir, err)
	}
}

// TestExportImport trains cnn2 on MNIST for two rounds, exports the global
// model, and checks the export with PyTorch and ONNX
// (python/checks/check_export.py: PyTorch's test accuracy and loss with the
// weights loaded into the nn.Sequential of the spec must be fedpq's within
// 1e-4). A run started from either file begins from exactly the exported
// model: its round-0 accuracy is the exported model's. Its config.yaml
// records the file's sha256; another hash, or a model the weights do not
// fit, is an error.
func TestExportImport(t *testing.T) {
	needMNIST(t)
	dir := t.TempDir()
	c := Default()
	c.Name, c.Out, c.Dataset, c.DataDir, c.Model = "src", filepath.Join(dir, "src"), "mnist", mnistDir, "cnn2"
	c.Clients, c.Rounds, c.Workers = 10, 2, 2
	s, err := Run(context.Background(), c, nil)
	if err != nil {
		t.Fatal(err)
	}
	ex, err := Export(c.Out, "", "")
	if err != nil {
		t.Fatal(err)
	}
	if ex.Accuracy != s.FinalAccuracy || ex.Round != 2 {
		t.Errorf("exported model: accuracy %v after round %d; the run ended at %v", ex.Accuracy, ex.Round, s.FinalAccuracy)
	}
	if out, ok := pycheck.Check(t, c.Out, "--data-dir", mnistDir); !ok || !strings.Contains(out, "ok   accuracy") {
		t.Errorf("check_export.py:\n%s", out)
	} else {
		t.Log(out)
	}
	for _, f := range ex.Files {
		b, _ := os.ReadFile(f)
		sum := sha256.Sum256(b)
		c2 := c
		c2.Name, c2.Out, c2.InitWeights = "dst", filepath.Join(dir, "dst"), f
		su, err := NewSetup(c2)
		if err != nil {
			t.Fatal(err)
		}
		start, err := su.Initial()
		if err != nil {
			t.Fatal(err)
		}
		if su.Config.InitWeightsSHA256 != hex.EncodeToString(sum[:]) {
			t.Errorf("%s: recorded sha256 %q", f, su.Config.InitWeightsSHA256)
		}
		tr, err := su.Trainer()
		if err != nil {
			t.Fatal(err)
		}
		eng, err := fl.New(su.Engine, fl.Task{Model: start, Trainers: []fl.Trainer{tr}, Data: su.Data, Clients: su.Clients})
		if err != nil {
			t.Fatal(err)
		}
		acc, loss, err := tr.Evaluate(eng.Global(), su.Data.Test.X, su.Data.Test.Y, nil)
		if err != nil || acc != ex.Accuracy || loss != ex.Loss {
			t.Errorf("%s: round 0 accuracy %v, loss %v (%v); exported %v, %v", filepath.Base(f), acc, loss, err, ex.Accuracy, ex.Loss)
		}
		// The wrong file for the recorded hash, and weights that do not fit.
		su.Config.InitWeightsSHA256 = strings.Repeat("0", 64)
		if _, err := su.Initial(); err == nil || !strings.Contains(err.Error(), "but the configuration records 0000") {
			t.Errorf("%s: another sha256: %v", filepath.Base(f), err)
		}
		c3 := c2
		c3.Model = "mlp"
		su, err = NewSetup(c3)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := su.Initial(); err == nil || !strings.Contains(err.Error(), `mlp has no tensor "0.weight"`) {
			t.Errorf("%s into mlp: %v", filepath.Base(f), err)
		}
	}
	// A whole run from the weights records where they came from.
	c2 := c
	c2.Name, c2.Out, c2.InitWeights, c2.Rounds = "dst", filepath.Join(dir, "dst"), ex.Files[1], 1
	s2, err := Run(context.Background(), c2, nil)
	if err != nil {
		t.Fatal(err)
	}
	if in := s2.Initial; in == nil || in.Accuracy != ex.Accuracy || in.Loss != ex.Loss || in.File != ex.Files[1] {
		t.Errorf("summary's initial model %+v; exported accuracy %v, loss %v", in, ex.Accuracy, ex.Loss)
	}
	var rec Config
	if err := Load(filepath.Join(c2.Out, "config.yaml"), &rec); err != nil || rec.InitWeights != ex.Files[1] || len(rec.InitWeightsSHA256) != 64 {
		t.Errorf("config.yaml records init_weights %q, sha256 %q (%v)", rec.InitWeights, rec.InitWeightsSHA256, err)
	}
}

// TestSpecFile: a spec file named by model is built and recorded in
// config.yaml as model_spec; the run repeats from config.yaml alone, the
// file gone; bad specs and bad init_weights settings fail Validate.
func TestSpecFile(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "tiny.yaml")
	spec := "layers:\n  - dense: {units: 16}\n  - relu\n  - dropout: {p: 0.2}\n  - dense: {units: classes}\n"
	if err := os.WriteFile(path, []byte(spec), 0o644); err != nil {
		t.Fatal(err)
	}
	c := Default()
	c.Model, c.Rounds, c.Out = path, 3, filepath.Join(dir, "a")
	a, err := Run(context.Background(), c, nil)
	if err != nil {
		t.Fatal(err)
	}
	if a.Model != "tiny" {
		t.Errorf("summary's model %q", a.Model)
	}
	os.Remove(path)
	rc := Default()
	if err := Load(filepath.Join(c.Out, "config.yaml"), &rc); err != nil {
		t.Fatal(err)
	}
	if rc.Model != "tiny" || rc.ModelSpec == nil || len(rc.ModelSpec.Layers) != 4 {
		t.Fatalf("config.yaml: model %q, spec %+v", rc.Model, rc.ModelSpec)
	}
	rc.Out = filepath.Join(dir, "b")
	b, err := Run(context.Background(), rc, nil)
	if err != nil {
		t.Fatal(err)
	}
	if a.FinalAccuracy != b.FinalAccuracy || a.BestAccuracy != b.BestAccuracy {
		t.Errorf("repeated from config.yaml: %v, first %v", b.FinalAccuracy, a.FinalAccuracy)
	}
	for _, tc := range []struct {
		edit func(*Config)
		want string
	}{
		{func(c *Config) { c.Model = path }, "no such file"},
		{func(c *Config) { c.Model = "resnet" }, `model "resnet": want one of`},
		{func(c *Config) { c.InitWeights = "w.pt" }, "want a .safetensors or .onnx file"},
		{func(c *Config) { c.InitWeights, c.InitWeightsSHA256 = "w.onnx", "abc" }, "want 64 hexadecimal digits"},
		{func(c *Config) { c.InitWeightsSHA256 = strings.Repeat("a", 64) }, "without init_weights"},
	} {
		c := Default()
		tc.edit(&c)
		if err := c.Validate(); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("error %v, want one containing %q", err, tc.want)
		}
	}
	// A spec written in the configuration itself.
	c = Default()
	if err := Parse([]byte("model_spec:\n  layers:\n    - dense: {units: classes}\n"), &c); err != nil {
		t.Fatal(err)
	}
	if r, err := c.ResolveModel(); err != nil || r.Model != "model_spec" || c.ModelSpec.Name != "" {
		t.Errorf("inline model_spec: model %q, %v (the caller's spec named %q)", r.Model, err, c.ModelSpec.Name)
	}
	if err := Parse([]byte("model_spec:\n  layers:\n    - tanh\n"), &c); err == nil || !strings.Contains(err.Error(), "layers[0] (tanh): unknown layer kind") {
		t.Errorf("inline model_spec with tanh: %v", err)
	}
	bad := filepath.Join(dir, "bad.yaml")
	os.WriteFile(bad, []byte("layers:\n  - conv: {channels: 4, kernel: 3}\n  - relu\n  - flatten\n  - dense: {units: classes}\n"), 0o644)
	c = Default()
	c.Model = bad
	if _, err := NewSetup(c); err == nil || !strings.Contains(err.Error(), "layers[0] (conv 4 3x3): needs an [H W C] input, got [60] (the data are vectors)") {
		t.Errorf("conv on vectors: %v", err)
	}
}

// TestExampleSpecs: the spec files in experiments/nets build on MNIST's
// input (TestExperimentFiles validates the experiments that name them).
func TestExampleSpecs(t *testing.T) {
	files, _ := filepath.Glob("../experiments/nets/*.yaml")
	if len(files) == 0 {
		t.Fatal("no spec in experiments/nets")
	}
	for _, f := range files {
		c := Default()
		c.Model = f
		r, err := c.ResolveModel()
		if err == nil {
			_, err = r.newModel([]int{28, 28, 1}, 10)
		}
		if err != nil {
			t.Errorf("%s: %v", f, err)
		}
	}
}
