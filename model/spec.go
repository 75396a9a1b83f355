package model

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"go.yaml.in/yaml/v3"
)

// Spec is a sequential network of the layers the engines implement, as a
// user writes it in YAML (docs/models.md#specs):
//
//	name: my-cnn
//	layers:
//	  - conv: {channels: 16, kernel: 3, padding: same}
//	  - relu
//	  - maxpool
//	  - flatten
//	  - dense: {units: 64}
//	  - relu
//	  - dropout: {p: 0.25}
//	  - dense: {units: classes}
//
// The input shape and the number of classes come from the data (FromSpec);
// every other shape is inferred. The zoo's architectures are specs of the
// same kind (ZooSpec). Layer i of a spec is module i of the PyTorch
// nn.Sequential with the same layers, which is how an export names its
// tensors (TorchTensors).
type Spec struct {
	Name        string
	Description string
	Layers      []Layer
}

// Layer is one entry of a Spec. Kind is one of LayerKinds; the other
// fields are its settings, zero where they do not apply.
type Layer struct {
	Kind     string
	Channels int     // conv: output channels
	Kernel   int     // conv, maxpool: the window's side (square windows)
	Stride   int     // conv (default 1), maxpool (default Kernel)
	Padding  int     // conv: zero padding on every side: 0 ("valid") or Kernel/2 ("same")
	Units    int     // dense: outputs; 0 in the last layer means the data's classes
	P        float64 // dropout: the probability of zeroing a unit
}

// LayerKinds are the layers a Spec may use: those the native engine (and
// the GoMLX reference) implement.
var LayerKinds = []string{"conv", "dense", "maxpool", "relu", "sigmoid", "dropout", "flatten"}

// layerKeys are the settings each kind takes in YAML.
var layerKeys = map[string][]string{
	"conv":    {"channels", "kernel", "stride", "padding"},
	"dense":   {"units"},
	"maxpool": {"kernel", "stride"},
	"dropout": {"p"},
}

// ParseSpec reads a spec from YAML (see Spec). Errors name the line and
// the layer (layers[i], counted from 0) and say what is wrong.
func ParseSpec(b []byte) (Spec, error) {
	var s Spec
	dec := yaml.NewDecoder(bytes.NewReader(b))
	err := dec.Decode(&s)
	if errors.Is(err, io.EOF) {
		return s, &SpecError{"model: empty spec: it needs a list of layers"}
	}
	return s, err
}

// LoadSpec reads a spec file. A spec without a name is named after the
// file (net.yaml: net).
func LoadSpec(path string) (Spec, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return Spec{}, fmt.Errorf("model spec: %w", err)
	}
	s, err := ParseSpec(b)
	if err != nil {
		msg := fmt.Sprintf("model spec %s: %s", path, strings.TrimPrefix(err.Error(), "model: "))
		if errors.As(err, new(*SpecError)) {
			return s, &SpecError{msg}
		}
		return s, errors.New(msg)
	}
	if s.Name == "" {
		s.Name = strings.TrimSuffix(filepath.Base(path), filepath.Ext(path))
	}
	return s, nil
}

// IsSpecFile reports whether a model setting names a spec file rather
// than an architecture: it ends in .yaml or .yml.
func IsSpecFile(model string) bool {
	ext := strings.ToLower(filepath.Ext(model))
	return ext == ".yaml" || ext == ".yml"
}

// SpecError is a spec that cannot be built: malformed, or with a layer the
// engines cannot run where it stands or that does not fit its input. Its
// message names the layer; commands report it as a usage error.
type SpecError struct{ msg string }

func (e *SpecError) Error() string { return e.msg }

// UnmarshalYAML reads a spec from its YAML node, checking every key and
// value (yaml.Unmarshaler).
func (s *Spec) UnmarshalYAML(n *yaml.Node) error {
	if err := s.unmarshal(n); err != nil {
		return &SpecError{err.Error()}
	}
	return nil
}

func (s *Spec) unmarshal(n *yaml.Node) error {
	if n.Kind != yaml.MappingNode {
		return fmt.Errorf("model: line %d: a spec is a mapping with name, description and layers", n.Line)
	}
	*s = Spec{}
	seen := false
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, v := n.Content[i], n.Content[i+1]
		switch k.Value {
		case "name", "description":
			if v.Kind != yaml.ScalarNode {
				return fmt.Errorf("model: line %d: %s must be a string", v.Line, k.Value)
			}
			if k.Value == "name" {
				s.Name = v.Value
			} else {
				s.Description = v.Value
			}
		case "layers":
			if v.Kind != yaml.SequenceNode || len(v.Content) == 0 {
				return fmt.Errorf("model: line %d: layers must be a non-empty list", v.Line)
			}
			for j, ln := range v.Content {
				l, err := parseLayer(ln)
				if err != nil {
					return fmt.Errorf("model: line %d: layers[%d]%s", ln.Line, j, err)
				}
				s.Layers = append(s.Layers, l)
			}
			seen = true
		default:
			return fmt.Errorf("model: line %d: unknown key %q in a spec (it has name, description and layers; the input shape and classes come from the data)", k.Line, k.Value)
		}
	}
	if !seen {
		return fmt.Errorf("model: line %d: the spec has no layers", n.Line)
	}
	return nil
}

// parseLayer reads one layer: a bare kind ("relu") or a mapping of one kind
// to its settings ("conv: {channels: 6, kernel: 5}"). Its errors start
// with the layer's kind, for the caller to prefix with its position.
func parseLayer(n *yaml.Node) (Layer, error) {
	var kind string
	var args *yaml.Node
	switch {
	case n.Kind == yaml.ScalarNode:
		kind = n.Value
	case n.Kind == yaml.MappingNode && len(n.Content) == 2:
		kind, args = n.Content[0].Value, n.Content[1]
	default:
		return Layer{}, errors.New(": a layer is a kind (relu) or one kind with its settings (conv: {channels: 6, kernel: 5})")
	}
	if !slices.Contains(LayerKinds, kind) {
		return Layer{}, fmt.Errorf(" (%s): unknown layer kind; the engines have %s", kind, strings.Join(LayerKinds, ", "))
	}
	l := Layer{Kind: kind}
	if args != nil && args.Kind != yaml.MappingNode && !(args.Kind == yaml.ScalarNode && args.Tag == "!!null") {
		return l, fmt.Errorf(" (%s): its settings must be a mapping such as {%s: ...}", kind, firstKey(kind))
	}
	set := map[string]string{}
	if args != nil && args.Kind == yaml.MappingNode {
		for i := 0; i+1 < len(args.Content); i += 2 {
			k, v := args.Content[i].Value, args.Content[i+1]
			if !slices.Contains(layerKeys[kind], k) {
				if len(layerKeys[kind]) == 0 {
					return l, fmt.Errorf(" (%s): takes no settings, got %q", kind, k)
				}
				return l, fmt.Errorf(" (%s): unknown setting %q (%s takes %s)", kind, k, kind, strings.Join(layerKeys[kind], ", "))
			}
			if v.Kind != yaml.ScalarNode {
				return l, fmt.Errorf(" (%s): %s must be a single value (square windows only)", kind, k)
			}
			set[k] = v.Value
		}
	}
	if err := l.settings(set); err != nil {
		return l, fmt.Errorf(" (%s): %w", kind, err)
	}
	return l, nil
}

func firstKey(kind string) string {
	if k := layerKeys[kind]; len(k) > 0 {
		return k[0]
	}
	return "..."
}

// settings fills l from its YAML settings, with the defaults.
func (l *Layer) settings(set map[string]string) error {
	posInt := func(key string, def int) (int, error) {
		v, ok := set[key]
		if !ok {
			if def == 0 {
				return 0, fmt.Errorf("needs %s", key)
			}
			return def, nil
		}
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 {
			return 0, fmt.Errorf("%s %q must be a positive integer", key, v)
		}
		return n, nil
	}
	var err error
	switch l.Kind {
	case "conv":
		if l.Channels, err = posInt("channels", 0); err != nil {
			return err
		}
		if l.Kernel, err = posInt("kernel", 0); err != nil {
			return err
		}
		if l.Stride, err = posInt("stride", 1); err != nil {
			return err
		}
		switch p := set["padding"]; p {
		case "", "valid", "0":
		case "same":
			l.Padding = l.Kernel / 2
		default:
			n, err := strconv.Atoi(p)
			if err != nil || n != l.Kernel/2 {
				return fmt.Errorf("padding %q: the engines pad 0 (valid) or kernel/2 = %d (same) on every side", p, l.Kernel/2)
			}
			l.Padding = n
		}
	case "dense":
		v, ok := set["units"]
		if !ok {
			return errors.New("needs units (a number, or classes for the last layer)")
		}
		if v != "classes" {
			if l.Units, err = posInt("units", 0); err != nil {
				return fmt.Errorf("units %q must be a positive integer or classes", v)
			}
		}
	case "maxpool":
		if l.Kernel, err = posInt("kernel", 2); err != nil {
			return err
		}
		if l.Stride, err = posInt("stride", l.Kernel); err != nil {
			return err
		}
		if l.Kernel != 2 || l.Stride != 2 {
			return fmt.Errorf("kernel %d, stride %d: the engines pool 2 x 2 windows with stride 2", l.Kernel, l.Stride)
		}
	case "dropout":
		l.P = 0.5 // PyTorch's default
		if v, ok := set["p"]; ok {
			p, err := strconv.ParseFloat(v, 64)
			if err != nil || !(p >= 0 && p < 1) {
				return fmt.Errorf("p %q must be a number in [0, 1)", v)
			}
			l.P = p
		}
	}
	return nil
}

// MarshalYAML writes the spec in the form ParseSpec reads (yaml.Marshaler):
// parameterless layers as bare kinds, the others as one-line mappings.
func (s Spec) MarshalYAML() (any, error) {
	str := func(v string) *yaml.Node { return &yaml.Node{Kind: yaml.ScalarNode, Value: v} }
	n := &yaml.Node{Kind: yaml.MappingNode}
	n.Content = append(n.Content, str("name"), str(s.Name))
	if s.Description != "" {
		n.Content = append(n.Content, str("description"), str(s.Description))
	}
	list := &yaml.Node{Kind: yaml.SequenceNode}
	for _, l := range s.Layers {
		kv := l.keyValues()
		if len(kv) == 0 {
			list.Content = append(list.Content, str(l.Kind))
			continue
		}
		args := &yaml.Node{Kind: yaml.MappingNode, Style: yaml.FlowStyle}
		for _, x := range kv {
			args.Content = append(args.Content, str(x[0]), str(x[1]))
		}
		list.Content = append(list.Content, &yaml.Node{Kind: yaml.MappingNode, Content: []*yaml.Node{str(l.Kind), args}})
	}
	n.Content = append(n.Content, str("layers"), list)
	return n, nil
}

// YAML is the spec as a YAML document (MarshalYAML).
func (s Spec) YAML() []byte {
	var b bytes.Buffer
	enc := yaml.NewEncoder(&b)
	enc.SetIndent(2)
	if err := enc.Encode(s); err != nil {
		panic(err) // MarshalYAML builds only strings
	}
	return b.Bytes()
}

// keyValues are l's settings as YAML writes them, defaults left out.
func (l Layer) keyValues() [][2]string {
	itoa := strconv.Itoa
	switch l.Kind {
	case "conv":
		kv := [][2]string{{"channels", itoa(l.Channels)}, {"kernel", itoa(l.Kernel)}}
		if l.Stride > 1 {
			kv = append(kv, [2]string{"stride", itoa(l.Stride)})
		}
		if l.Padding > 0 {
			kv = append(kv, [2]string{"padding", "same"})
		}
		return kv
	case "dense":
		if l.Units == 0 {
			return [][2]string{{"units", "classes"}}
		}
		return [][2]string{{"units", itoa(l.Units)}}
	case "dropout":
		return [][2]string{{"p", strconv.FormatFloat(l.P, 'g', -1, 64)}}
	}
	return nil
}

// String is the layer as a short phrase: "conv 6 5x5", "maxpool 2x2".
func (l Layer) String() string {
	switch l.Kind {
	case "conv":
		s := fmt.Sprintf("conv %d %dx%d", l.Channels, l.Kernel, l.Kernel)
		if l.Stride > 1 {
			s += fmt.Sprintf(" stride %d", l.Stride)
		}
		if l.Padding > 0 {
			s += " same"
		}
		return s
	case "dense":
		if l.Units == 0 {
			return "dense classes"
		}
		return fmt.Sprintf("dense %d", l.Units)
	case "maxpool":
		return "maxpool 2x2"
	case "dropout":
		return fmt.Sprintf("dropout %g", l.P)
	}
	return l.Kind
}

// FromSpec builds spec s for inputs of shape input ([H W C] images, or
// [F] feature vectors) and classes outputs, inferring every shape in
// between. A layer the engines cannot run there, or that does not fit its
// input, is an error that names it (layers[i], from 0) and says why.
func FromSpec(s Spec, input []int, classes int) (*Model, error) {
	name := s.Name
	if name == "" {
		name = "spec"
	}
	if err := checkIO(name, input, classes); err != nil {
		return nil, err
	}
	layers, shapes, err := s.compile(input, classes)
	if err != nil {
		return nil, &SpecError{fmt.Sprintf("model: %s: %v", name, err)}
	}
	m, err := assemble(name, layers, input, classes)
	if err != nil {
		return nil, err
	}
	m.spec, m.shapes = s, shapes
	m.spec.Layers = slices.Clone(s.Layers)
	m.steps[len(m.steps)-1].at = len(s.Layers) - 1 // the logits
	return m, nil
}

// compile checks s's order and shapes for the given input and turns it
// into the engines' layers: each activation fused into the conv or dense
// layer before it, pooling a step of its own after a conv, flatten implied
// by the dense layer after it, and the last dense layer (the logits)
// left for assemble to add. Each layer records its position in s.
func (s Spec) compile(input []int, classes int) ([]layer, [][]int, error) {
	if len(s.Layers) == 0 {
		return nil, nil, errors.New("the spec has no layers")
	}
	var out []layer
	shapes := make([][]int, len(s.Layers)) // each layer's output
	cur := slices.Clone(input)
	// after is what the previous entry of s left: "conv", "conv-pooled"
	// (a relu conv that may be pooled), "dense" (a hidden dense layer with
	// its activation), "dropout", "pool", "flatten" or "" at the input.
	after := ""
	for i := 0; i < len(s.Layers); i++ {
		l := s.Layers[i]
		at := func(format string, a ...any) error {
			return fmt.Errorf("layers[%d] (%s): %s", i, l, fmt.Sprintf(format, a...))
		}
		act := ""
		if i+1 < len(s.Layers) {
			act = s.Layers[i+1].Kind
		}
		switch l.Kind {
		case "conv":
			if len(cur) != 3 {
				return nil, nil, at("needs an [H W C] input, got %v%s", cur, flatHint(after))
			}
			if l.Padding != 0 && l.Padding != l.Kernel/2 {
				return nil, nil, at("padding %d: the engines pad 0 or kernel/2 = %d", l.Padding, l.Kernel/2)
			}
			if act != "relu" && act != "sigmoid" {
				return nil, nil, at("must be followed by relu or sigmoid (the engines fuse the activation into the convolution; they have no linear convolution)")
			}
			h, w := cur[0]+2*l.Padding, cur[1]+2*l.Padding
			if h < l.Kernel || w < l.Kernel {
				return nil, nil, at("kernel %dx%d does not fit its input %v (padding %d)", l.Kernel, l.Kernel, cur, l.Padding)
			}
			st := max(l.Stride, 1)
			cur = []int{(h-l.Kernel)/st + 1, (w-l.Kernel)/st + 1, l.Channels}
			out = append(out, layer{kind: conv, out: l.Channels, k: l.Kernel, same: l.Padding > 0, stride: st, sigmoid: act == "sigmoid", at: i})
			after = "conv"
			if act == "relu" && st == 1 {
				after = "conv-poolable"
			}
			shapes[i], shapes[i+1] = cur, cur
			i++ // the activation
		case "maxpool":
			if after != "conv-poolable" {
				return nil, nil, at("must follow a convolution's relu (conv, relu, maxpool); the engines pool nothing else (not a strided or sigmoid convolution, nor another pooling)")
			}
			if cur[0] < 2 || cur[1] < 2 {
				return nil, nil, at("its input %v is smaller than the 2x2 window", cur)
			}
			cur = []int{cur[0] / 2, cur[1] / 2, cur[2]}
			shapes[i] = cur
			out = append(out, layer{kind: maxPool, at: i})
			after = "pool"
		case "flatten":
			cur = []int{product(cur)}
			shapes[i] = cur
			after = "flatten"
		case "dense":
			if len(cur) != 1 {
				return nil, nil, at("its input is %v: put a flatten before it", cur)
			}
			units := l.Units
			if i == len(s.Layers)-1 {
				if units != 0 && units != classes {
					return nil, nil, at("the last layer gives the logits: %d units, but the data has %d classes (write units: classes)", units, classes)
				}
				shapes[i] = []int{classes}
				continue // assemble adds the logits layer
			}
			if units == 0 {
				return nil, nil, at("units: classes is for the last layer only; give a number")
			}
			if act != "relu" && act != "sigmoid" {
				return nil, nil, at("is not the last layer, so it must be followed by relu or sigmoid (the engines have no linear hidden layer)")
			}
			cur = []int{units}
			out = append(out, layer{kind: dense, out: units, sigmoid: act == "sigmoid", at: i})
			after = "dense-" + act
			shapes[i], shapes[i+1] = cur, cur
			i++
		case "dropout":
			if after != "dense-relu" {
				return nil, nil, at("must follow a hidden dense layer's relu (dense, relu, dropout): the engines fuse dropout into it")
			}
			shapes[i] = cur
			out = append(out, layer{kind: dropout, p: l.P, at: i})
			after = "dropout"
		case "relu", "sigmoid":
			return nil, nil, at("must follow a conv or dense layer (it is that layer's activation)")
		default:
			return nil, nil, at("unknown layer kind; the engines have %s", strings.Join(LayerKinds, ", "))
		}
	}
	if last := s.Layers[len(s.Layers)-1]; last.Kind != "dense" {
		return nil, nil, fmt.Errorf("layers[%d] (%s): the last layer must be dense with units: classes (the logits; the loss applies the softmax)", len(s.Layers)-1, last)
	}
	return out, shapes, nil
}

// flatHint says why an input is flat when a convolution finds it so.
func flatHint(after string) string {
	if after == "" {
		return " (the data are vectors)"
	}
	return ""
}

// product is the product of d's entries.
func product(d []int) int {
	n := 1
	for _, v := range d {
		n *= v
	}
	return n
}

// specOf writes layers (as archs lists them, without the logits layer) as
// the equivalent spec: each activation after its layer, a flatten before
// the first dense layer.
func specOf(name, doc string, layers []layer) Spec {
	s := Spec{Name: name, Description: doc}
	flat := false
	for _, l := range layers {
		act := Layer{Kind: "relu"}
		if l.sigmoid {
			act.Kind = "sigmoid"
		}
		switch l.kind {
		case conv:
			pad := 0
			if l.same {
				pad = l.k / 2
			}
			s.Layers = append(s.Layers, Layer{Kind: "conv", Channels: l.out, Kernel: l.k, Stride: l.strides(), Padding: pad}, act)
		case maxPool:
			s.Layers = append(s.Layers, Layer{Kind: "maxpool", Kernel: 2, Stride: 2})
		case dense:
			if !flat {
				s.Layers = append(s.Layers, Layer{Kind: "flatten"})
				flat = true
			}
			s.Layers = append(s.Layers, Layer{Kind: "dense", Units: l.out}, act)
		case dropout:
			s.Layers = append(s.Layers, Layer{Kind: "dropout", P: l.p})
		}
	}
	if !flat {
		s.Layers = append(s.Layers, Layer{Kind: "flatten"})
	}
	s.Layers = append(s.Layers, Layer{Kind: "dense"})
	return s
}

// Spec is the spec the model was built from (a copy).
func (m *Model) Spec() Spec {
	s := m.spec
	s.Layers = slices.Clone(s.Layers)
	return s
}

// checkIO checks an input shape and a class count.
func checkIO(name string, input []int, classes int) error {
	if classes < 2 {
		return fmt.Errorf("model: %d classes, need at least 2", classes)
	}
	if len(input) == 0 {
		return fmt.Errorf("model: %s: empty input shape", name)
	}
	for _, d := range input {
		if d <= 0 || d > math.MaxInt32 {
			return fmt.Errorf("model: %s: input shape %v has a non-positive dimension", name, input)
		}
	}
	return nil
}

// Summary is the model as a table: each layer of its spec with its output
// shape (an example's: HWC for images) and its tensors as PyTorch names
// them, then the parameter count.
func (m *Model) Summary() string {
	var b strings.Builder
	tensors := m.TorchTensors()
	byLayer := map[int][]string{}
	params := map[int]int{}
	for _, st := range m.steps {
		if st.w >= 0 {
			for _, t := range []TensorSpec{tensors[st.w], tensors[st.b]} {
				byLayer[st.at] = append(byLayer[st.at], fmt.Sprintf("%s %v", t.Name, t.Shape))
				params[st.at] += t.Size()
			}
		}
	}
	fmt.Fprintf(&b, "%s: input %v, %d classes\n", m.arch, m.input, m.classes)
	fmt.Fprintf(&b, "%5s  %-27s %-13s %10s  %s\n", "layer", "kind", "output", "parameters", "tensors")
	for i, l := range m.spec.Layers {
		p := ""
		if params[i] > 0 {
			p = strconv.Itoa(params[i])
		}
		fmt.Fprintf(&b, "%5d  %-27s %-13s %10s  %s\n", i, l, fmt.Sprint(m.shapes[i]), p, strings.Join(byLayer[i], ", "))
	}
	fmt.Fprintf(&b, "%d parameters\n", m.NumParams())
	return b.String()
}
