package main

import (
	"context"
	"fmt"
	"io"
	"strings"

	"github.com/fedpq/fedpq/experiment"
	"github.com/fedpq/fedpq/model/onnx"
)

func init() {
	commands["export"] = command{
		summary: "write a run's global model as ONNX and safetensors, in PyTorch's names and layouts",
		run:     runExport,
	}
}

const exportDescription = `Writes the global model of RUN_DIR (its checkpoint.gob, the model after its
last completed round) as model.onnx and model.safetensors, in RUN_DIR or --out.
The model is rebuilt from the run's config.yaml and data (for the input shape
and classes; --data-dir where the data are not where the run found them) and
scored on the test set; both files record that accuracy and loss, the model's
spec, input shape and classes in their metadata.

Tensors are named as in a PyTorch nn.Sequential of the model's spec (layer i:
"i.weight", "i.bias") in PyTorch's layouts: Conv2d [out, in, kh, kw], Linear
[out, in]. The ONNX graph (opset 13) takes "input" [N, C, H, W] (images) or
[N, F] (vectors) and gives "logits" [N, classes]. docs/models.md#export-and-import has
the details; python/checks/check_export.py checks the files with PyTorch and ONNX.
A run can start from the weights: init_weights in its configuration.
`

func runExport(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlags("export", "[flags] RUN_DIR", exportDescription, stderr)
	var (
		out     = fs.String("out", "", "directory to write model.onnx and model.safetensors to (default: RUN_DIR)")
		dataDir = fs.String("data-dir", "", "directory of the dataset files, where the run's data_dir (or $FEDPQ_DATA) no longer finds them")
	)
	dirs, err := parseWithArgs(fs, args)
	if err != nil {
		return err
	}
	if len(dirs) != 1 {
		fmt.Fprintf(stderr, "fedpq: export takes one RUN_DIR, got %d\n", len(dirs))
		fs.Usage()
		return errUsage
	}
	ex, err := experiment.Export(dirs[0], *out, *dataDir)
	if err != nil {
		return err
	}
	m := ex.Model
	fmt.Fprintf(stdout, "%s: %s, %d parameters, global model after round %d: test accuracy %.4f, loss %.4f\n",
		dirs[0], m.Arch(), m.NumParams(), ex.Round, ex.Accuracy, ex.Loss)
	var names []string
	for _, t := range m.TorchTensors() {
		names = append(names, fmt.Sprintf("%s %v", t.Name, t.Shape))
	}
	in := m.Input()
	shape := fmt.Sprintf("[N, %d]", m.Features())
	if len(in) == 3 {
		shape = fmt.Sprintf("[N, %d, %d, %d]", in[2], in[0], in[1])
	}
	fmt.Fprintf(stdout, "  tensors: %s\n", strings.Join(names, ", "))
	fmt.Fprintf(stdout, "  onnx: input %q %s, output %q [N, %d]\n", onnx.Input, shape, onnx.Output, m.Classes())
	for _, f := range ex.Files {
		fmt.Fprintf(stdout, "  wrote %s\n", f)
	}
	return nil
}
