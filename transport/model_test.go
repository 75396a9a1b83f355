package transport

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/fedpq/fedpq/experiment"
	"github.com/fedpq/fedpq/model/safetensors"
)

// TestSpecAndInitWeights: a server runs a network of one's own from a
// spec file, starting from weights in a safetensors file; both files are
// gone before the clients join, which build the model from the spec that
// the configuration they are sent holds, and need no weights (the server
// sends the global model). config.yaml records the spec and the weights'
// sha256.
func TestSpecAndInitWeights(t *testing.T) {
	dir := t.TempDir()
	spec := filepath.Join(dir, "tiny.yaml")
	if err := os.WriteFile(spec, []byte("layers:\n  - dense: {units: 12}\n  - relu\n  - dense: {units: classes}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	c := runConfig(t, "none", 4, 2)
	c.Model = spec
	su, err := experiment.NewSetup(c)
	if err != nil {
		t.Fatal(err)
	}
	named, err := su.Model.ToTorch(su.Model.Init(99))
	if err != nil {
		t.Fatal(err)
	}
	var b bytes.Buffer
	ts := make([]safetensors.Tensor, len(named))
	for i, n := range named {
		ts[i] = safetensors.Tensor(n)
	}
	if err := safetensors.Write(&b, ts, nil); err != nil {
		t.Fatal(err)
	}
	weights := filepath.Join(dir, "w.safetensors")
	if err := os.WriteFile(weights, b.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
	c.InitWeights = weights
	srv := serve(t, ServerConfig{Run: c}, "127.0.0.1:0")
	os.Remove(spec)
	os.Remove(weights)
	for k := range 4 {
		join(t, context.Background(), ClientConfig{Server: srv.addr, ID: k, Clients: 4})
	}
	s := srv.wait(t)
	if s.Model != "tiny" || s.Rounds != 2 {
		t.Errorf("summary: model %q, %d rounds", s.Model, s.Rounds)
	}
	rec := experiment.Default()
	if err := experiment.Load(filepath.Join(c.Out, "config.yaml"), &rec); err != nil {
		t.Fatal(err)
	}
	if rec.ModelSpec == nil || len(rec.ModelSpec.Layers) != 3 || len(rec.InitWeightsSHA256) != 64 {
		t.Errorf("config.yaml: model_spec %+v, init_weights_sha256 %q", rec.ModelSpec, rec.InitWeightsSHA256)
	}
	if !strings.Contains(srv.log.String(), "round 2 done") {
		t.Errorf("server log:\n%s", srv.log.String())
	}
}
