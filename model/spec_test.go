package model

import (
	"fmt"
	"math"
	"reflect"
	"slices"
	"strings"
	"testing"
)

// oldArchs is the zoo as model.go listed it in Go before the specs
// (commit 0c45bbd), the oracle that each zoo spec must compile to.
var oldArchs = map[string]struct {
	layers []layer
	image  bool
	doc    string
}{
	"linear": {doc: "logistic regression (softmax over a linear map of the flattened input)"},
	"mlp": {layers: []layer{{kind: dense, out: 32}, {kind: dense, out: 16}},
		doc: "JoPEQ's MLP: hidden layers 32 and 16, ReLU"},
	"mlp-wide": {layers: []layer{{kind: dense, out: 128}, {kind: dense, out: 64}},
		doc: "MLP with hidden layers 128 and 64, ReLU"},
	"cnn2": {image: true, layers: []layer{
		{kind: conv, out: 6, k: 5}, {kind: maxPool},
		{kind: conv, out: 6, k: 5}, {kind: maxPool},
		{kind: dense, out: 50}},
		doc: "JoPEQ's CNN: conv5x5x6, maxpool2, conv5x5x6, maxpool2, fc50, fc"},
	"corbin-cnn": {image: true, layers: []layer{
		{kind: conv, out: 32, k: 3}, {kind: maxPool},
		{kind: conv, out: 64, k: 3}, {kind: maxPool},
		{kind: dense, out: 128}, {kind: dropout, p: 0.5}},
		doc: "CorBin-FL's MNIST CNN: conv3x3x32, maxpool2, conv3x3x64, maxpool2, fc128, dropout 0.5, fc"},
	"ldpfl-cnn": {image: true, layers: []layer{
		{kind: conv, out: 32, k: 5}, {kind: maxPool},
		{kind: conv, out: 64, k: 5}, {kind: maxPool},
		{kind: dense, out: 512}},
		doc: "LDP-FL's two-layer CNN: conv5x5x32, maxpool2, conv5x5x64, maxpool2, fc512, fc"},
	"vgg-small": {image: true, layers: []layer{
		{kind: conv, out: 32, k: 3, same: true}, {kind: conv, out: 32, k: 3, same: true}, {kind: maxPool},
		{kind: conv, out: 64, k: 3, same: true}, {kind: conv, out: 64, k: 3, same: true}, {kind: maxPool},
		{kind: conv, out: 128, k: 3, same: true}, {kind: conv, out: 128, k: 3, same: true}, {kind: maxPool},
		{kind: dense, out: 128}, {kind: dropout, p: 0.5}},
		doc: "a small VGG for 32x32x3: 2x conv3x3x32, pool, 2x conv3x3x64, pool, 2x conv3x3x128, pool, fc128, dropout 0.5, fc"},
	// DLG's LeNet (Zhu et al. 2019, mit-han-lab/dlg models/vision.py), which
	// iDLG also attacks: strided convolutions instead of pooling and sigmoid
	// activations, so that the gradient is twice differentiable everywhere.
	"lenet": {image: true, layers: []layer{
		{kind: conv, out: 12, k: 5, same: true, stride: 2, sigmoid: true},
		{kind: conv, out: 12, k: 5, same: true, stride: 2, sigmoid: true},
		{kind: conv, out: 12, k: 5, same: true, stride: 1, sigmoid: true}},
		doc: "DLG's LeNet: conv5x5x12 stride 2, conv5x5x12 stride 2, conv5x5x12, all padding 2 and sigmoid, fc"},
}

// TestZooSpecs: every zoo spec compiles to exactly the layers, steps and
// tensors the zoo had in Go, so that a zoo model trains bit for bit as
// before; specOf writes those layers back as the same spec; and each spec
// survives a YAML round trip.
func TestZooSpecs(t *testing.T) {
	if len(zoo) != len(oldArchs) {
		t.Errorf("%d zoo specs, %d architectures before", len(zoo), len(oldArchs))
	}
	for name, a := range oldArchs {
		t.Run(name, func(t *testing.T) {
			input := benchInput(name)
			want, err := assemble(name, a.layers, input, 10)
			if err != nil {
				t.Fatal(err)
			}
			got, err := New(name, input, 10)
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(got.specs, want.specs) {
				t.Errorf("tensors %v, want %v", got.specs, want.specs)
			}
			if len(got.steps) != len(want.steps) {
				t.Fatalf("%d steps, want %d", len(got.steps), len(want.steps))
			}
			for i := range got.steps {
				g, w := got.steps[i], want.steps[i]
				g.at, w.at = 0, 0
				g.stride, w.stride = g.strides(), w.strides()
				if !reflect.DeepEqual(g, w) {
					t.Errorf("step %d: %+v, want %+v", i, g, w)
				}
			}
			s := specOf(name, a.doc, a.layers)
			if z := zoo[name]; !reflect.DeepEqual(s, z) {
				t.Errorf("specOf:\n%s\nzoo:\n%s", s.YAML(), z.YAML())
			}
			back, err := ParseSpec(zoo[name].YAML())
			if err != nil || !reflect.DeepEqual(back, zoo[name]) {
				t.Errorf("YAML round trip: %v\n%s", err, zoo[name].YAML())
			}
		})
	}
}

// TestSpecErrors: every malformed spec, and every layer the engines cannot
// run where it stands, is an error that names the layer and says what is
// wrong.
func TestSpecErrors(t *testing.T) {
	const head = "name: t\nlayers:\n"
	img, vec := []int{12, 12, 1}, []int{20}
	for _, c := range []struct {
		layers string
		input  []int
		want   string
	}{
		{"  - conv: {channels: 4, kernel: 3}\n  - relu\n  - batchnorm\n", img, "layers[2] (batchnorm): unknown layer kind; the engines have conv, dense"},
		{"  - conv: {filters: 4, kernel: 3}\n", img, `layers[0] (conv): unknown setting "filters" (conv takes channels, kernel, stride, padding)`},
		{"  - conv: {channels: 4}\n", img, "layers[0] (conv): needs kernel"},
		{"  - conv: {channels: -4, kernel: 3}\n", img, `layers[0] (conv): channels "-4" must be a positive integer`},
		{"  - conv: {channels: 4, kernel: [3, 5]}\n", img, "layers[0] (conv): kernel must be a single value (square windows only)"},
		{"  - conv: {channels: 4, kernel: 5, padding: 1}\n", img, `layers[0] (conv): padding "1": the engines pad 0 (valid) or kernel/2 = 2 (same)`},
		{"  - relu: {slope: 0.1}\n", img, `layers[0] (relu): takes no settings, got "slope"`},
		{"  - maxpool: {kernel: 3}\n", img, "layers[0] (maxpool): kernel 3, stride 3: the engines pool 2 x 2 windows with stride 2"},
		{"  - dropout: {p: 1}\n", img, `layers[0] (dropout): p "1" must be a number in [0, 1)`},
		{"  - dense: {}\n", img, "layers[0] (dense): needs units"},
		{"  - dense: {units: lots}\n", img, `layers[0] (dense): units "lots" must be a positive integer or classes`},
		{"  - [conv, relu]\n", img, "layers[0]: a layer is a kind (relu) or one kind with its settings"},
		// Order and shapes, for the data's input.
		{"  - conv: {channels: 4, kernel: 3}\n  - flatten\n  - dense: {units: classes}\n", img, "layers[0] (conv 4 3x3): must be followed by relu or sigmoid"},
		{"  - conv: {channels: 4, kernel: 3}\n  - relu\n  - dense: {units: classes}\n", img, "layers[2] (dense classes): its input is [10 10 4]: put a flatten before it"},
		{"  - conv: {channels: 4, kernel: 13}\n  - relu\n  - flatten\n  - dense: {units: classes}\n", img, "layers[0] (conv 4 13x13): kernel 13x13 does not fit its input [12 12 1] (padding 0)"},
		{"  - conv: {channels: 4, kernel: 3}\n  - relu\n  - flatten\n  - dense: {units: classes}\n", vec, "layers[0] (conv 4 3x3): needs an [H W C] input, got [20] (the data are vectors)"},
		{"  - flatten\n  - conv: {channels: 4, kernel: 3}\n  - relu\n  - flatten\n  - dense: {units: classes}\n", img, "layers[1] (conv 4 3x3): needs an [H W C] input, got [144]"},
		{"  - maxpool\n  - flatten\n  - dense: {units: classes}\n", img, "layers[0] (maxpool 2x2): must follow a convolution's relu"},
		{"  - conv: {channels: 4, kernel: 3, stride: 2}\n  - relu\n  - maxpool\n  - flatten\n  - dense: {units: classes}\n", img, "layers[2] (maxpool 2x2): must follow a convolution's relu"},
		{"  - conv: {channels: 4, kernel: 3}\n  - sigmoid\n  - maxpool\n  - flatten\n  - dense: {units: classes}\n", img, "layers[2] (maxpool 2x2): must follow a convolution's relu"},
		{"  - conv: {channels: 4, kernel: 3}\n  - relu\n  - maxpool\n  - maxpool\n  - flatten\n  - dense: {units: classes}\n", img, "layers[3] (maxpool 2x2): must follow"},
		{"  - conv: {channels: 4, kernel: 11}\n  - relu\n  - maxpool\n  - maxpool\n  - flatten\n  - dense: {units: classes}\n", img, "layers[3] (maxpool 2x2): must follow"},
		{"  - conv: {channels: 4, kernel: 11}\n  - relu\n  - maxpool\n  - flatten\n  - dense: {units: classes}\n", []int{12, 11, 1}, "layers[2] (maxpool 2x2): its input [2 1 4] is smaller than the 2x2 window"},
		{"  - conv: {channels: 4, kernel: 3}\n  - relu\n  - dropout\n  - flatten\n  - dense: {units: classes}\n", img, "layers[2] (dropout 0.5): must follow a hidden dense layer's relu"},
		{"  - dense: {units: 8}\n  - sigmoid\n  - dropout\n  - dense: {units: classes}\n", vec, "layers[2] (dropout 0.5): must follow a hidden dense layer's relu"},
		{"  - dense: {units: 8}\n  - relu\n  - dropout\n  - dropout\n  - dense: {units: classes}\n", vec, "layers[3] (dropout 0.5): must follow"},
		{"  - relu\n  - dense: {units: classes}\n", vec, "layers[0] (relu): must follow a conv or dense layer"},
		{"  - dense: {units: 8}\n  - relu\n  - relu\n  - dense: {units: classes}\n", vec, "layers[2] (relu): must follow a conv or dense layer"},
		{"  - dense: {units: 8}\n  - dense: {units: classes}\n", vec, "layers[0] (dense 8): is not the last layer, so it must be followed by relu or sigmoid"},
		{"  - dense: {units: classes}\n  - relu\n  - dense: {units: classes}\n", vec, "layers[0] (dense classes): units: classes is for the last layer only"},
		{"  - dense: {units: 8}\n  - relu\n", vec, "layers[1] (relu): the last layer must be dense"},
		{"  - dense: {units: 8}\n  - relu\n  - flatten\n", vec, "layers[2] (flatten): the last layer must be dense with units: classes"},
		{"  - dense: {units: 7}\n", vec, "layers[0] (dense 7): the last layer gives the logits: 7 units, but the data has 3 classes (write units: classes)"},
	} {
		s, err := ParseSpec([]byte(head + c.layers))
		if err == nil {
			_, err = FromSpec(s, c.input, 3)
		}
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: error %v, want one containing %q", strings.ReplaceAll(c.layers, "\n", " "), err, c.want)
		}
	}
	for _, c := range []struct{ yaml, want string }{
		{"", "empty spec"},
		{"name: t\n", "the spec has no layers"},
		{"name: t\nlayers: []\n", "layers must be a non-empty list"},
		{"name: t\ninput: [28, 28, 1]\nlayers: [flatten]\n", `unknown key "input" in a spec`},
		{"- conv\n", "a spec is a mapping"},
	} {
		if _, err := ParseSpec([]byte(c.yaml)); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%q: error %v, want one containing %q", c.yaml, err, c.want)
		}
	}
}

// TestSpecShapes: a spec's shapes are inferred from the data's input, and
// units: classes takes the data's classes.
func TestSpecShapes(t *testing.T) {
	s, err := ParseSpec([]byte(`name: mine
layers:
  - conv: {channels: 8, kernel: 3, stride: 2}
  - relu
  - conv: {channels: 16, kernel: 3, padding: same}
  - relu
  - maxpool
  - flatten
  - dense: {units: 24}
  - sigmoid
  - dense: {units: 12}
  - relu
  - dropout: {p: 0.25}
  - dense: {units: classes}
`))
	if err != nil {
		t.Fatal(err)
	}
	m, err := FromSpec(s, []int{29, 27, 3}, 7)
	if err != nil {
		t.Fatal(err)
	}
	// 29x27 -conv3 s2-> 14x13 -same-> 14x13 -pool-> 7x6: 7*6*16 = 672.
	var got []string
	for _, ts := range m.Tensors() {
		got = append(got, fmt.Sprintf("%s%v", ts.Name, ts.Shape))
	}
	want := "[conv1/kernel[8 3 3 3] conv1/bias[8] conv2/kernel[16 8 3 3] conv2/bias[16] fc1/kernel[24 672] fc1/bias[24] fc2/kernel[12 24] fc2/bias[12] fc3/kernel[7 12] fc3/bias[7]]"
	if fmt.Sprint(got) != want {
		t.Errorf("tensors %v, want %s", got, want)
	}
	if m.Arch() != "mine" || m.Classes() != 7 {
		t.Errorf("arch %q, %d classes", m.Arch(), m.Classes())
	}
	var at []int
	for _, st := range m.steps {
		at = append(at, st.at)
	}
	if fmt.Sprint(at) != "[0 2 4 6 8 10 11]" {
		t.Errorf("steps at spec layers %v", at)
	}
	sum := m.Summary()
	for _, want := range []string{
		"mine: input [29 27 3], 7 classes",
		"    0  conv 8 3x3 stride 2         [14 13 8]            224  0.weight [8 3 3 3], 0.bias [8]",
		"    4  maxpool 2x2                 [7 6 16]",
		"    5  flatten                     [672]",
		"   11  dense classes               [7]                   91  11.weight [7 12], 11.bias [7]",
		"17935 parameters",
	} {
		if !strings.Contains(sum, want) {
			t.Errorf("summary lacks %q:\n%s", want, sum)
		}
	}
}

// specCombos are networks the zoo does not have, written as specs, that
// put the layers together in ways no zoo model does: a strided relu
// convolution (batch-inner, valid padding), a same convolution after it
// and pooling, a hidden sigmoid dense layer; kernels of 1 and 2 and a
// convolution straight into the logits; a sigmoid convolution into a
// strided relu one with 16 or more channels, and two hidden dense layers
// with dropout between; a deep vector model. TestEnginesAgree and
// TestNativeGradients run them with the zoo.
var specCombos = []struct {
	name, layers string
	input        []int
}{
	{"combo-strided", `
  - conv: {channels: 4, kernel: 3, stride: 2}
  - relu
  - conv: {channels: 5, kernel: 3, padding: same}
  - relu
  - maxpool
  - flatten
  - dense: {units: 7}
  - sigmoid
  - dense: {units: classes}`, []int{13, 12, 2}},
	{"combo-kernels", `
  - conv: {channels: 3, kernel: 1}
  - relu
  - conv: {channels: 8, kernel: 2}
  - relu
  - flatten
  - dense: {units: classes}`, []int{7, 6, 2}},
	{"combo-mixed", `
  - conv: {channels: 6, kernel: 3, padding: same}
  - sigmoid
  - conv: {channels: 20, kernel: 3, stride: 2}
  - relu
  - flatten
  - dense: {units: 10}
  - relu
  - dropout: {p: 0.2}
  - dense: {units: 9}
  - relu
  - dense: {units: classes}`, []int{9, 9, 1}},
	{"combo-vector", `
  - dense: {units: 9}
  - sigmoid
  - dense: {units: 7}
  - relu
  - dropout: {p: 0.3}
  - dense: {units: classes}`, []int{11}},
}

// withSpecCombos adds specCombos to the zoo and smallInputs for the rest
// of the test.
func withSpecCombos(t *testing.T) {
	for _, c := range specCombos {
		s, err := ParseSpec([]byte("name: " + c.name + "\nlayers:" + c.layers + "\n"))
		if err != nil {
			t.Fatal(err)
		}
		zoo[c.name], smallInputs[c.name] = s, c.input
	}
	t.Cleanup(func() {
		for _, c := range specCombos {
			delete(zoo, c.name)
			delete(smallInputs, c.name)
		}
	})
}

// TestTorchTensors: tensors are named after their layer of the spec, as
// a PyTorch nn.Sequential of it names them; ToTorch and FromTorch are
// inverses, and permute a dense layer's columns of a multi-channel image
// from (row, column, channel) to (channel, row, column).
func TestTorchTensors(t *testing.T) {
	m, err := New("cnn2", []int{28, 28, 1}, 10)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, s := range m.TorchTensors() {
		got = append(got, fmt.Sprintf("%s%v", s.Name, s.Shape))
	}
	if want := "[0.weight[6 1 5 5] 0.bias[6] 3.weight[6 6 5 5] 3.bias[6] 7.weight[50 96] 7.bias[50] 9.weight[10 50] 9.bias[10]]"; fmt.Sprint(got) != want {
		t.Errorf("cnn2: %v, want %s", got, want)
	}
	for _, c := range []struct {
		arch  string
		input []int
	}{{"cnn2", []int{28, 28, 1}}, {"mlp", []int{3, 2, 2}}, {"linear", []int{5}}, {"vgg-small", []int{8, 8, 3}}} {
		m, err := New(c.arch, c.input, 4)
		if err != nil {
			t.Fatal(err)
		}
		w := m.Init(2)
		named, err := m.ToTorch(w)
		if err != nil {
			t.Fatal(err)
		}
		back, err := m.FromTorch(append(named[1:], named[0])) // any order
		if err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(back, w) {
			t.Errorf("%s: FromTorch(ToTorch(w)) != w", c.arch)
		}
		if c.arch == "mlp" { // [3 2 2]: column (y, x, c) = (2, 1, 0) is 10 in fedpq, (0, 2, 1) = 5 in PyTorch
			if named[0].Data[5] != w[0][10] || named[0].Data[12+5] != w[0][12+10] {
				t.Errorf("mlp on [3 2 2]: columns not permuted to (c, y, x)")
			}
		} else if !reflect.DeepEqual(named[0].Data, w[0]) {
			t.Errorf("%s: first tensor changed", c.arch)
		}
	}
	w := m.Init(1)
	named, _ := m.ToTorch(w)
	for _, c := range []struct {
		edit func([]Named) []Named
		want string
	}{
		{func(n []Named) []Named { return n[1:] }, "no tensor 0.weight [6 1 5 5]; cnn2 has 0.weight [6 1 5 5], 0.bias [6]"},
		{func(n []Named) []Named { n[0].Name = "conv1.weight"; return n }, `cnn2 has no tensor "conv1.weight"; it has 0.weight [6 1 5 5]`},
		{func(n []Named) []Named { n[2].Shape = []int{6, 6, 25}; return n }, "tensor 3.weight has shape [6 6 25], but cnn2's is [6 6 5 5]"},
		{func(n []Named) []Named { n[1].Data = n[1].Data[:3]; return n }, "tensor 0.bias has 3 values for shape [6]"},
		{func(n []Named) []Named { return append(n, n[0]) }, `tensor "0.weight" given twice`},
		{func(n []Named) []Named { n[1].Data = []float32{0, 0, float32(math.NaN()), 0, 0, 0}; return n }, "is NaN"},
	} {
		n := make([]Named, len(named))
		for i, t := range named {
			n[i] = Named{t.Name, slices.Clone(t.Shape), slices.Clone(t.Data)}
		}
		if _, err := m.FromTorch(c.edit(n)); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("error %v, want one containing %q", err, c.want)
		}
	}
}
