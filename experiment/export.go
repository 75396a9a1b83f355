package experiment

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/fedpq/fedpq/fl"
	"github.com/fedpq/fedpq/model"
	"github.com/fedpq/fedpq/model/onnx"
	"github.com/fedpq/fedpq/model/safetensors"
)

// Files fedpq export writes.
const (
	ExportONNX        = "model.onnx"
	ExportSafetensors = "model.safetensors"
)

// Exported is what Export wrote and measured.
type Exported struct {
	Files    []string // the files written
	Model    *model.Model
	Round    int     // the rounds the model had trained
	Accuracy float64 // the exported weights' accuracy and mean cross-entropy on the test set
	Loss     float64
}

// Export writes the global model of the run in dir (its checkpoint) to
// outDir ("": dir) as model.onnx and model.safetensors, in PyTorch's names
// and layouts (model.TorchTensors). It rebuilds the model from the run's
// config.yaml and data (dataDir, if not "", replaces the run's data_dir),
// which give the input shape and classes, and scores the weights on the
// test set; both files' metadata record the spec, the input shape, the
// classes, and that accuracy and loss, which python/checks/check_export.py
// compares with PyTorch's.
func Export(dir, outDir, dataDir string) (*Exported, error) {
	c, st, err := loadExport(dir)
	if err != nil {
		return nil, err
	}
	if dataDir != "" {
		c.DataDir = dataDir
	}
	// A deployed server's run of clients' own data has only its test set.
	setup := NewSetup
	if c.Own() && c.Data == "" {
		setup = NewServerSetup
	}
	su, err := setup(c)
	if err != nil {
		return nil, fmt.Errorf("rebuilding the model of %s from its config.yaml: %w", dir, err)
	}
	m := su.Model
	tr, err := su.Trainer()
	if err != nil {
		return nil, err
	}
	ex := &Exported{Model: m, Round: st.Round}
	if ex.Accuracy, ex.Loss, err = tr.Evaluate(st.Global, su.Data.Test.X, su.Data.Test.Y, nil); err != nil {
		return nil, fmt.Errorf("%s's checkpoint does not fit its model: %w", dir, err)
	}
	named, err := m.ToTorch(st.Global)
	if err != nil {
		return nil, err
	}
	meta := exportMeta(su.Config, m, ex)
	var sb bytes.Buffer
	tensors := make([]safetensors.Tensor, len(named))
	for i, t := range named {
		tensors[i] = safetensors.Tensor(t)
	}
	if err := safetensors.Write(&sb, tensors, meta); err != nil {
		return nil, err
	}
	doc := fmt.Sprintf("fedpq run %s, global model after round %d; input %q %s, output %q [N, %d] (logits)",
		su.Config.Name, st.Round, onnx.Input, inputLayout(m), onnx.Output, m.Classes())
	ob, err := onnx.Marshal(m, st.Global, doc, meta)
	if err != nil {
		return nil, err
	}
	if outDir == "" {
		outDir = dir
	}
	if err := os.MkdirAll(outDir, 0o755); err != nil {
		return nil, err
	}
	for _, f := range []struct {
		name string
		b    []byte
	}{{ExportONNX, ob}, {ExportSafetensors, sb.Bytes()}} {
		path := filepath.Join(outDir, f.name)
		if err := os.WriteFile(path, f.b, 0o644); err != nil {
			return nil, err
		}
		ex.Files = append(ex.Files, path)
	}
	return ex, nil
}

// loadExport reads the configuration and checkpoint of the run in dir.
func loadExport(dir string) (Config, fl.State, error) {
	c := Default()
	if st, err := os.Stat(dir); err != nil || !st.IsDir() {
		return c, fl.State{}, fmt.Errorf("%s is not a directory; give the run directory of a run (runs/NAME)", dir)
	}
	if err := Load(filepath.Join(dir, "config.yaml"), &c); err != nil {
		if os.IsNotExist(err) {
			return c, fl.State{}, fmt.Errorf("%s is not a run directory: it has no config.yaml (fedpq run writes runs/NAME/config.yaml and %s)", dir, CheckpointFile)
		}
		return c, fl.State{}, fmt.Errorf("%w", err)
	}
	path := filepath.Join(dir, CheckpointFile)
	if _, err := os.Stat(path); err != nil {
		return c, fl.State{}, fmt.Errorf("%s has no %s: the run ended before its first round did", dir, CheckpointFile)
	}
	st, err := fl.LoadState(path)
	if err != nil {
		return c, fl.State{}, fmt.Errorf("%w", err)
	}
	c.Out = dir
	return c, st, nil
}

// exportMeta is the metadata both files carry.
func exportMeta(c Config, m *model.Model, ex *Exported) map[string]string {
	meta := map[string]string{
		"format":              "pt", // tensors in PyTorch's names and layouts (the Hugging Face convention)
		"fedpq.spec":          string(m.Spec().YAML()),
		"fedpq.input":         intList(m.Input()),
		"fedpq.classes":       strconv.Itoa(m.Classes()),
		"fedpq.dataset":       c.Dataset,
		"fedpq.run":           c.Name,
		"fedpq.round":         strconv.Itoa(ex.Round),
		"fedpq.test_accuracy": strconv.FormatFloat(ex.Accuracy, 'g', -1, 64),
		"fedpq.test_loss":     strconv.FormatFloat(ex.Loss, 'g', -1, 64),
	}
	// A run of its clients' own data: the schema says how a row or an
	// image becomes the model's input (a CSV's column scaling and
	// categories), which a user of the model must do the same.
	if c.Schema != nil {
		b, err := json.Marshal(c.Schema)
		if err == nil {
			meta["fedpq.schema"] = string(b)
		}
		meta["fedpq.test_data"] = c.TestData
		meta["fedpq.label_column"] = c.LabelColumn
	}
	return meta
}

// inputLayout is the export's input shape, in words.
func inputLayout(m *model.Model) string {
	if in := m.Input(); len(in) == 3 {
		return fmt.Sprintf("[N, %d, %d, %d] (NCHW)", in[2], in[0], in[1])
	}
	return fmt.Sprintf("[N, %d]", m.Features())
}

func intList(v []int) string {
	s := make([]string, len(v))
	for i, d := range v {
		s[i] = strconv.Itoa(d)
	}
	return strings.Join(s, ",")
}
