package main

import (
	"context"
	"fmt"
	"io"
	"strconv"
	"strings"

	"github.com/fedpq/fedpq/model"
)

func init() {
	commands["model"] = command{
		summary: "show a model of the zoo or a spec file: each layer's output shape and tensors",
		run:     runModel,
	}
}

const modelDescription = `Builds MODEL, an architecture of the zoo (linear, mlp, ..., lenet) or a spec
file NET.yaml of one's own (docs/models.md#specs), for inputs of shape --input
and --classes outputs, and prints each layer with the shape of its output and
its tensors, as an export names them (PyTorch's nn.Sequential of the spec), or
the error that says which layer does not fit and why. Without MODEL it lists
the zoo.
`

func runModel(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlags("model", "[flags] [MODEL]", modelDescription, stderr)
	var (
		input   = fs.String("input", "28,28,1", "shape of one example: H,W,C for images (MNIST 28,28,1, CIFAR-10 32,32,3) or F for vectors")
		classes = fs.Int("classes", 10, "number of classes")
		yaml    = fs.Bool("yaml", false, "print the model's spec as YAML (a zoo model's as a starting point for one's own)")
	)
	names, err := parseWithArgs(fs, args)
	if err != nil {
		return err
	}
	if len(names) == 0 {
		for _, n := range model.Names() {
			fmt.Fprintf(stdout, "%-11s %s\n", n, model.Describe(n))
		}
		return nil
	}
	if len(names) > 1 {
		fmt.Fprintf(stderr, "fedpq: model takes one MODEL, got %d\n", len(names))
		fs.Usage()
		return errUsage
	}
	var shape []int
	for _, f := range strings.Split(*input, ",") {
		d, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || d < 1 {
			return badValue{fmt.Errorf("--input %q: want positive integers separated by commas, such as 28,28,1", *input)}
		}
		shape = append(shape, d)
	}
	if len(shape) != 1 && len(shape) != 3 {
		return badValue{fmt.Errorf("--input %q: want H,W,C or F", *input)}
	}
	var m *model.Model
	if model.IsSpecFile(names[0]) {
		var s model.Spec
		if s, err = model.LoadSpec(names[0]); err == nil {
			m, err = model.FromSpec(s, shape, *classes)
		}
	} else {
		m, err = model.New(names[0], shape, *classes)
	}
	if err != nil {
		return err
	}
	if *yaml {
		_, err := stdout.Write(m.Spec().YAML())
		return err
	}
	_, err = io.WriteString(stdout, m.Summary())
	return err
}
