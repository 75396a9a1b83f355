package onnx

import (
	"bytes"
	"os"
	"path/filepath"
	"reflect"
	"strconv"
	"strings"
	"testing"

	"google.golang.org/protobuf/proto"

	"github.com/fedpq/fedpq/internal/pycheck"
	"github.com/fedpq/fedpq/model"
	pb "github.com/fedpq/fedpq/model/onnx/internal/onnxpb"
	"github.com/fedpq/fedpq/model/safetensors"
)

// specNet is a network of one's own, as a user writes it: a strided relu
// convolution, a same one and pooling, a sigmoid hidden layer, dropout.
const specNet = `name: mine
layers:
  - conv: {channels: 4, kernel: 3, stride: 2}
  - relu
  - conv: {channels: 5, kernel: 3, padding: same}
  - relu
  - maxpool
  - flatten
  - dense: {units: 12}
  - sigmoid
  - dense: {units: 9}
  - relu
  - dropout: {p: 0.25}
  - dense: {units: classes}
`

type exportCase struct {
	name    string
	m       *model.Model
	classes int
}

// cases are every zoo model on its natural input, a dense model reading
// a 3-channel image (whose first kernel's columns are permuted), and a
// spec of one's own.
func cases(t *testing.T) []exportCase {
	var out []exportCase
	add := func(name string, m *model.Model, err error) {
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, exportCase{name, m, m.Classes()})
	}
	for _, arch := range model.Names() {
		in := []int{28, 28, 1}
		if arch == "vgg-small" {
			in = []int{32, 32, 3}
		}
		m, err := model.New(arch, in, 10)
		add(arch, m, err)
	}
	m, err := model.New("mlp", []int{6, 5, 3}, 4)
	add("mlp-rgb", m, err)
	s, err := model.ParseSpec([]byte(specNet))
	if err != nil {
		t.Fatal(err)
	}
	m, err = model.FromSpec(s, []int{13, 12, 2}, 7)
	add("spec", m, err)
	return out
}

// TestRoundTrip: the initializers of a model's graph are its weights, in
// PyTorch's names and layouts; and the graph has one node per spec layer
// but dropout, with the documented input and output.
func TestRoundTrip(t *testing.T) {
	for _, c := range cases(t) {
		w := c.m.Init(5)
		b, err := Marshal(c.m, w, "test", map[string]string{"k": "v"})
		if err != nil {
			t.Fatal(err)
		}
		named, err := Initializers(b)
		if err != nil {
			t.Fatal(err)
		}
		back, err := c.m.FromTorch(named)
		if err != nil || !reflect.DeepEqual(back, w) {
			t.Errorf("%s: FromTorch(Initializers(Marshal(w))) != w: %v", c.name, err)
		}
		var mp pb.ModelProto
		if err := proto.Unmarshal(b, &mp); err != nil {
			t.Fatal(err)
		}
		spec := c.m.Spec()
		var kinds []string
		for _, l := range spec.Layers {
			if l.Kind != "dropout" { // no node
				kinds = append(kinds, l.Kind)
			}
		}
		var nodes []string
		for _, n := range mp.Graph.Node {
			_, kind, _ := strings.Cut(n.GetName(), ":")
			nodes = append(nodes, kind)
		}
		if !reflect.DeepEqual(nodes, kinds) {
			t.Errorf("%s: nodes %v for layers %v", c.name, nodes, kinds)
		}
		if in, out := mp.Graph.Input[0].GetName(), mp.Graph.Output[0].GetName(); in != Input || out != Output {
			t.Errorf("%s: input %q, output %q", c.name, in, out)
		}
		props := map[string]string{}
		for _, p := range mp.MetadataProps {
			props[p.GetKey()] = p.GetValue()
		}
		if props["k"] != "v" || props[MetaClasses] != strconv.Itoa(c.classes) || props[MetaSpec] != string(spec.YAML()) {
			t.Errorf("%s: metadata %v", c.name, props)
		}
	}
}

// TestBadFiles: what is not a model of float32 weights inside the file is
// an error that says so.
func TestBadFiles(t *testing.T) {
	m, _ := model.New("linear", []int{4}, 3)
	good, err := Marshal(m, m.Init(1), "", nil)
	if err != nil {
		t.Fatal(err)
	}
	edit := func(f func(*pb.TensorProto)) []byte {
		var mp pb.ModelProto
		proto.Unmarshal(good, &mp)
		f(mp.Graph.Initializer[0])
		b, _ := proto.Marshal(&mp)
		return b
	}
	for _, c := range []struct {
		name string
		b    []byte
		want string
	}{
		{"garbage", []byte("not a model at all"), "not an ONNX model"},
		{"no graph", nil, "has no graph"},
		{"double", edit(func(t *pb.TensorProto) { t.DataType = proto.Int32(int32(pb.TensorProto_DOUBLE)) }), "initializer 1.weight is DOUBLE; fedpq reads FLOAT"},
		{"external", edit(func(t *pb.TensorProto) { t.DataLocation = pb.TensorProto_EXTERNAL.Enum() }), "external file"},
		{"short", edit(func(t *pb.TensorProto) { t.RawData = t.RawData[:8] }), "has 8 bytes for shape [3 4]"},
		{"float_data", edit(func(t *pb.TensorProto) { t.RawData, t.FloatData = nil, []float32{1} }), "has 1 values for shape [3 4]"},
		{"dims", edit(func(t *pb.TensorProto) { t.Dims = []int64{-3, 4} }), "has dimensions [-3 4]"},
	} {
		if _, err := Initializers(c.b); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: error %v, want one containing %q", c.name, err, c.want)
		}
	}
	// float_data in place of raw_data is read as well (other writers use it).
	b := edit(func(t *pb.TensorProto) {
		t.FloatData = make([]float32, 12)
		for i := range t.FloatData {
			t.FloatData[i] = float32(i)
		}
		t.RawData = nil
	})
	named, err := Initializers(b)
	if err != nil || named[0].Data[11] != 11 {
		t.Errorf("float_data: %v %v", named, err)
	}
}

// TestPyTorch writes every case as fedpq export does, with a check set of
// examples and fedpq's accuracy and loss on them, and runs
// python/checks/check_export.py: the ONNX checker, the graph's logits against
// the nn.Sequential of the spec, and PyTorch's loss and accuracy against
// fedpq's. A dense model on a 3-channel image exported without its
// columns permuted must fail the last check.
func TestPyTorch(t *testing.T) {
	pycheck.Require(t)
	var dirs []string
	var rgb exportCase
	for _, c := range cases(t) {
		dir := filepath.Join(t.TempDir(), c.name)
		w := c.m.Init(3)
		named, err := c.m.ToTorch(w)
		if err != nil {
			t.Fatal(err)
		}
		writeExport(t, dir, c.m, w, named)
		dirs = append(dirs, dir)
		if c.name == "mlp-rgb" {
			rgb = c
		}
	}
	out, ok := pycheck.Check(t, dirs[0], dirs[1:]...)
	if !ok || strings.Count(out, "ok   accuracy") != len(dirs) || !strings.Contains(out, "all checks passed") {
		t.Fatalf("check_export.py:\n%s", out)
	}
	t.Log(out)
	dir := t.TempDir()
	w := rgb.m.Init(3)
	named, _ := rgb.m.ToTorch(w)
	for i := range named {
		named[i].Data = w[i] // fedpq's (row, column, channel) columns
	}
	writeExport(t, dir, rgb.m, w, named)
	if out, ok := pycheck.Check(t, dir); ok || !strings.Contains(out, "FAIL accuracy") {
		t.Errorf("unpermuted columns pass:\n%s", out)
	}
}

// writeExport writes model.onnx, model.safetensors (the given tensors) and
// check.safetensors (64 examples, fedpq's accuracy and loss on them).
func writeExport(t *testing.T, dir string, m *model.Model, w [][]float32, named []model.Named) {
	t.Helper()
	meta := map[string]string{"format": "pt", MetaSpec: string(m.Spec().YAML()), MetaClasses: strconv.Itoa(m.Classes())}
	var dims []string
	for _, d := range m.Input() {
		dims = append(dims, strconv.Itoa(d))
	}
	meta[MetaInput] = strings.Join(dims, ",")
	ob, err := Marshal(m, w, "test", meta)
	if err != nil {
		t.Fatal(err)
	}
	var ts []safetensors.Tensor
	for _, n := range named {
		ts = append(ts, safetensors.Tensor(n))
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	write(t, filepath.Join(dir, "model.safetensors"), ts, meta)
	if err := os.WriteFile(filepath.Join(dir, "model.onnx"), ob, 0o644); err != nil {
		t.Fatal(err)
	}
	const n = 64
	f := m.Features()
	x, y := make([]float32, n*f), make([]int32, n)
	s := uint64(7)
	for i := range x {
		s = s*6364136223846793005 + 1442695040888963407
		x[i] = float32(s>>40) / (1 << 24)
	}
	yf := make([]float32, n)
	for i := range y {
		y[i] = int32(i % m.Classes())
		yf[i] = float32(y[i])
	}
	tr, err := m.NewTrainer(model.Optimizer{Name: "sgd", LR: 0.1})
	if err != nil {
		t.Fatal(err)
	}
	acc, loss, err := tr.Evaluate(w, x, y, nil)
	if err != nil {
		t.Fatal(err)
	}
	write(t, filepath.Join(dir, "check.safetensors"),
		[]safetensors.Tensor{{Name: "x", Shape: []int{n, f}, Data: x}, {Name: "y", Shape: []int{n}, Data: yf}},
		map[string]string{"fedpq.test_accuracy": strconv.FormatFloat(acc, 'g', -1, 64), "fedpq.test_loss": strconv.FormatFloat(loss, 'g', -1, 64)})
}

func write(t *testing.T, path string, ts []safetensors.Tensor, meta map[string]string) {
	t.Helper()
	var b bytes.Buffer
	if err := safetensors.Write(&b, ts, meta); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, b.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
}
