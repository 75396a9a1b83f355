package experiment

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/fedpq/fedpq/fl"
	"github.com/fedpq/fedpq/model"
	"github.com/fedpq/fedpq/model/onnx"
	"github.com/fedpq/fedpq/model/safetensors"
	"github.com/fedpq/fedpq/report"
)

// ResolveModel returns c with its model settled: a spec file named by
// model is read into model_spec and model becomes the spec's name; with
// model_spec, model is its name; otherwise model must be an architecture
// of the zoo. The resolved configuration then builds the same model
// anywhere, without the spec file.
func (c Config) ResolveModel() (Config, error) {
	switch {
	case c.Model == External:
		if c.ModelSpec != nil || c.InitWeights != "" {
			return c, fmt.Errorf("model %s is the external trainer's: it takes no model_spec or init_weights (its model() draws the initial weights)", External)
		}
	case model.IsSpecFile(c.Model):
		s, err := model.LoadSpec(c.Model)
		if err != nil {
			return c, err
		}
		c.ModelSpec, c.Model = &s, s.Name
	case c.ModelSpec != nil:
		if len(c.ModelSpec.Layers) == 0 {
			return c, errors.New("model_spec has no layers")
		}
		s := *c.ModelSpec // c's copy, not the caller's
		if s.Name == "" {
			s.Name = "model_spec"
		}
		c.ModelSpec, c.Model = &s, s.Name
	case !slices.Contains(model.Names(), c.Model):
		return c, fmt.Errorf("model %q: want one of %v, a spec file (.yaml; docs/models.md#specs), or %s (an external trainer's own)", c.Model, model.Names(), External)
	}
	return c, nil
}

// newModel builds c's model (resolved) for the data's input and classes;
// nil for model external, whose model is the trainer's (startTrainers).
func (c Config) newModel(input []int, classes int) (*model.Model, error) {
	if c.Model == External {
		return nil, nil
	}
	if c.ModelSpec != nil {
		return model.FromSpec(*c.ModelSpec, input, classes)
	}
	return model.New(c.Model, input, classes)
}

// checkInitWeights checks what can be checked of init_weights without
// reading the file.
func (c Config) checkInitWeights() error {
	if c.InitWeights == "" {
		if c.InitWeightsSHA256 != "" {
			return errors.New("init_weights_sha256 is set without init_weights")
		}
		return nil
	}
	if _, err := weightsFormat(c.InitWeights); err != nil {
		return err
	}
	if h := c.InitWeightsSHA256; h != "" {
		if b, err := hex.DecodeString(h); err != nil || len(b) != sha256.Size {
			return fmt.Errorf("init_weights_sha256 %q: want 64 hexadecimal digits", h)
		}
	}
	return nil
}

// weightsFormat is the format of a weights file, by its extension.
func weightsFormat(path string) (string, error) {
	switch ext := strings.ToLower(filepath.Ext(path)); ext {
	case ".safetensors", ".onnx":
		return ext[1:], nil
	}
	return "", fmt.Errorf("init_weights %s: want a .safetensors or .onnx file (fedpq export writes both)", path)
}

// ReadWeights reads the weights of m from a .safetensors or .onnx file,
// named and laid out as fedpq export writes them (model.TorchTensors),
// with its sha256. A tensor missing, extra or of another shape is an
// error that names it.
func ReadWeights(path string, m *model.Model) ([][]float32, string, error) {
	format, err := weightsFormat(path)
	if err != nil {
		return nil, "", err
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, "", fmt.Errorf("init_weights: %w", err)
	}
	sum := sha256.Sum256(b)
	var named []model.Named
	switch format {
	case "onnx":
		named, err = onnx.Initializers(b)
	default:
		var f *safetensors.File
		if f, err = safetensors.Read(b); err == nil {
			for _, t := range f.Tensors {
				named = append(named, model.Named(t))
			}
		}
	}
	if err != nil {
		return nil, "", fmt.Errorf("init_weights %s: %w", path, err)
	}
	w, err := m.FromTorch(named)
	if err != nil {
		return nil, "", fmt.Errorf("init_weights %s: %w", path, err)
	}
	return w, hex.EncodeToString(sum[:]), nil
}

// pretrained is a model whose initial weights come from a file.
type pretrained struct {
	*model.Model
	w [][]float32
}

// Init returns a copy of the file's weights, whatever the seed.
func (p pretrained) Init(uint64) [][]float32 {
	out := make([][]float32, len(p.w))
	for i := range p.w {
		out[i] = slices.Clone(p.w[i])
	}
	return out
}

// Initial is the model the round engine starts from: the setup's model,
// with the weights of init_weights where the configuration names a file.
// It records the file's sha256 in s.Config (config.yaml), and fails where
// the configuration records another. Only the simulation and the server
// call it: a deployed client gets the global model every round.
func (s *Setup) Initial() (fl.Model, error) {
	c := &s.Config
	if c.InitWeights == "" {
		return s.Arch(), nil
	}
	w, sum, err := ReadWeights(c.InitWeights, s.Model)
	if err != nil {
		return nil, err
	}
	if c.InitWeightsSHA256 != "" && !strings.EqualFold(c.InitWeightsSHA256, sum) {
		return nil, fmt.Errorf("init_weights %s has sha256 %s, but the configuration records %s: the file is not the one the run started from", c.InitWeights, sum, c.InitWeightsSHA256)
	}
	c.InitWeightsSHA256 = sum
	return pretrained{s.Model, w}, nil
}

// StartedFrom records in the summary the test accuracy and loss of the
// model a run starts from, where init_weights gave it (nothing otherwise):
// tr scores start's weights before the first round.
func (rec *Recorder) StartedFrom(su *Setup, start fl.Model, tr fl.Trainer) error {
	c := su.Config
	if c.InitWeights == "" {
		return nil
	}
	acc, loss, err := tr.Evaluate(start.Init(c.Seed), su.Data.Test.X, su.Data.Test.Y, nil)
	if err != nil {
		return err
	}
	rec.s.Initial = &report.Initial{File: c.InitWeights, SHA256: c.InitWeightsSHA256, Accuracy: acc, Loss: loss}
	return nil
}
