// Package model is fedpq's model zoo and local trainer.
//
// Nothing outside this package sees how a step is computed: a model's
// parameters cross the package boundary as one flat []float32 per tensor,
// in the fixed order of Model.Tensors, which is what the mechanisms
// quantize and the round engine averages.
//
// A Trainer computes on one of two engines with the same semantics
// (PyTorch's): Native, the default, runs fedpq's own kernels, every matrix
// product one call of model/internal/gemm (AVX-512/AVX2 assembly over
// offset-table views, so im2col and transposes copy nothing) and every other
// pass one fused loop; GoMLX runs hand-differentiated GoMLX graphs on its
// pure-Go backend, the reference the native engine is tested against and
// the path to XLA. Both keep what they prepare per batch size and swap
// weights per client. docs/models.md gives the layouts, the golden tests
// against PyTorch and the measured step times.
package model

import (
	"embed"
	"fmt"
	"io/fs"
	"math"
	"slices"

	"github.com/fedpq/fedpq/corr"
)

// TensorSpec names one parameter tensor and gives its shape, in PyTorch's
// layouts: dense kernels are [out, in], convolution kernels [out channels,
// in channels, kh, kw], biases [out]. The first dense layer after a
// convolution reads the activations flattened in (channel, row, column)
// order, as PyTorch flattens NCHW tensors.
type TensorSpec struct {
	Name  string
	Shape []int
}

// Size is the number of elements of the tensor.
func (s TensorSpec) Size() int {
	n := 1
	for _, d := range s.Shape {
		n *= d
	}
	return n
}

// layerKind is one step of a sequential architecture.
type layerKind int

const (
	dense   layerKind = iota // fully connected, then ReLU (or sigmoid) unless it is the last layer
	conv                     // k x k convolution with a stride, then ReLU (or sigmoid)
	maxPool                  // 2 x 2 max pooling, stride 2 (floor for odd sizes); follows a conv
	dropout                  // inverted dropout with probability p (training only)
)

// layer describes one step; out is the units or channels of dense and conv.
// A Spec compiles to layers (Spec.compile): what the engines run.
type layer struct {
	kind    layerKind
	out     int
	k       int     // conv kernel size
	same    bool    // conv with zero padding k/2 (which keeps the size at stride 1)
	stride  int     // conv stride; 0 is 1
	sigmoid bool    // conv or hidden dense: sigmoid instead of ReLU (twice differentiable, as the attack papers' LeNet); no pooling or dropout after it
	p       float64 // dropout probability
	at      int     // the layer's position in its Spec (its conv or dense entry), which names its exported tensors
}

// zoo holds the built-in architectures, each a spec in model/zoo (embedded
// in the binary), by name. It is filled by init, after the variables that
// ParseSpec reads (through yaml's Unmarshaler, which Go's initialization
// order does not see).
var zoo map[string]Spec

func init() { zoo = loadZoo() }

//go:embed zoo/*.yaml
var zooFiles embed.FS

func loadZoo() map[string]Spec {
	files, err := fs.Glob(zooFiles, "zoo/*.yaml")
	if err != nil {
		panic(err)
	}
	z := map[string]Spec{}
	for _, f := range files {
		b, err := zooFiles.ReadFile(f)
		if err != nil {
			panic(err)
		}
		s, err := ParseSpec(b)
		if err != nil {
			panic(fmt.Sprintf("model: built-in %s: %v", f, err)) // TestZoo parses them all
		}
		z[s.Name] = s
	}
	return z
}

// Names lists the architectures New accepts (the zoo), sorted.
func Names() []string {
	names := make([]string, 0, len(zoo))
	for n := range zoo {
		names = append(names, n)
	}
	slices.Sort(names)
	return names
}

// Describe returns a one-line description of an architecture, or "" for an
// unknown name.
func Describe(arch string) string { return zoo[arch].Description }

// ZooSpec returns the spec of a built-in architecture.
func ZooSpec(arch string) (Spec, bool) {
	s, ok := zoo[arch]
	s.Layers = slices.Clone(s.Layers)
	return s, ok
}

// step is one resolved layer: its kind, its parameter tensors (indices into
// Model.specs, -1 when none) and the activation shape it produces.
type step struct {
	layer
	w, b   int   // kernel and bias tensor indices
	in     []int // input activation shape (without the batch axis)
	outDim []int // output activation shape
	last   bool  // the final dense layer: no ReLU
	pool   bool  // conv: the next step is a maxPool, computed with this step
}

// Model is an architecture resolved for one input shape and number of
// classes. It holds no weights: weights are [][]float32 in the order of
// Tensors. A Model is immutable and safe for concurrent use.
type Model struct {
	arch    string
	spec    Spec
	shapes  [][]int // each spec layer's output shape
	input   []int
	classes int
	specs   []TensorSpec
	steps   []step
}

// New resolves architecture arch of the zoo (Names) for inputs of shape
// input (e.g. [28 28 1] for MNIST, images HWC, or [60] for feature
// vectors) and classes outputs. The dense architectures flatten any input;
// the CNNs need [H W C] inputs large enough for their convolutions and
// poolings. FromSpec builds a network of one's own.
func New(arch string, input []int, classes int) (*Model, error) {
	s, ok := zoo[arch]
	if !ok {
		return nil, &SpecError{fmt.Sprintf("model: unknown architecture %q (have %v, or a spec file: docs/models.md#specs)", arch, Names())}
	}
	return FromSpec(s, input, classes)
}

// assemble resolves layers (without the logits layer, which it adds) for
// the input shape and classes: each step's activation shape and
// parameter tensors. Spec.compile has checked the layers; the checks here
// guard the engines' assumptions all the same.
func assemble(arch string, layers []layer, input []int, classes int) (*Model, error) {
	if err := checkIO(arch, input, classes); err != nil {
		return nil, err
	}
	m := &Model{arch: arch, input: slices.Clone(input), classes: classes}
	cur := slices.Clone(input)
	layers = append(slices.Clone(layers), layer{kind: dense, out: classes})
	nconv, ndense := 0, 0
	for i, l := range layers {
		s := step{layer: l, w: -1, b: -1, in: cur, last: i == len(layers)-1}
		switch l.kind {
		case conv:
			nconv++
			if len(cur) != 3 {
				return nil, fmt.Errorf("model: %s needs an [H W C] input, got %v", arch, input)
			}
			h, w, c := cur[0], cur[1], cur[2]
			if l.same {
				h, w = h+l.k/2*2, w+l.k/2*2
			}
			if h < l.k || w < l.k {
				return nil, fmt.Errorf("model: %s: input %v too small for conv%d", arch, input, nconv)
			}
			h, w = (h-l.k)/l.strides()+1, (w-l.k)/l.strides()+1
			s.w = m.add(fmt.Sprintf("conv%d/kernel", nconv), l.out, c, l.k, l.k)
			s.b = m.add(fmt.Sprintf("conv%d/bias", nconv), l.out)
			cur = []int{h, w, l.out}
		case maxPool:
			if i == 0 || layers[i-1].kind != conv {
				return nil, fmt.Errorf("model: %s: pooling must follow a convolution", arch)
			}
			if prev := layers[i-1]; prev.sigmoid || prev.strides() > 1 {
				// Neither engine implements it: no architecture needs it.
				return nil, fmt.Errorf("model: %s: pooling after a strided or sigmoid convolution", arch)
			}
			m.steps[i-1].pool = true
			if cur[0] < 2 || cur[1] < 2 {
				return nil, fmt.Errorf("model: %s: input %v too small to pool", arch, input)
			}
			cur = []int{cur[0] / 2, cur[1] / 2, cur[2]}
		case dense:
			ndense++
			in := 1
			for _, d := range cur {
				in *= d
			}
			s.w = m.add(fmt.Sprintf("fc%d/kernel", ndense), l.out, in)
			s.b = m.add(fmt.Sprintf("fc%d/bias", ndense), l.out)
			cur = []int{l.out}
		case dropout:
			if i > 0 && layers[i-1].sigmoid {
				// The native engine keeps only the masked output.
				return nil, fmt.Errorf("model: %s: dropout after a sigmoid layer", arch)
			}
		}
		s.outDim = cur
		m.steps = append(m.steps, s)
	}
	return m, nil
}

// strides is the conv's stride.
func (l layer) strides() int { return max(l.stride, 1) }

func (m *Model) add(name string, shape ...int) int {
	m.specs = append(m.specs, TensorSpec{Name: name, Shape: shape})
	return len(m.specs) - 1
}

// Arch is the architecture's name.
func (m *Model) Arch() string { return m.arch }

// Input is the shape of one example (a copy).
func (m *Model) Input() []int { return slices.Clone(m.input) }

// Features is the number of float32 values of one example.
func (m *Model) Features() int {
	n := 1
	for _, d := range m.input {
		n *= d
	}
	return n
}

// Classes is the number of outputs.
func (m *Model) Classes() int { return m.classes }

// Tensors lists the parameter tensors in their fixed order: for each layer
// in forward order, its kernel then its bias. The slice is a copy.
func (m *Model) Tensors() []TensorSpec {
	out := make([]TensorSpec, len(m.specs))
	for i, s := range m.specs {
		out[i] = TensorSpec{Name: s.Name, Shape: slices.Clone(s.Shape)}
	}
	return out
}

// NumParams is the total number of parameters.
func (m *Model) NumParams() int {
	n := 0
	for _, s := range m.specs {
		n += s.Size()
	}
	return n
}

// Init returns deterministic initial weights, one fresh slice per tensor:
// kernels followed by a ReLU get He-uniform values (U(-a, a), a =
// sqrt(6/fan_in)), which keeps activations' variance through ReLU layers
// (lenet's sigmoid kernels get the same: a pre-activation of standard
// deviation near 0.7, far from the sigmoid's flat tails);
// the last (logit) layer gets Glorot-uniform values (a = sqrt(6/(fan_in +
// fan_out))); biases start at zero. The values come from the corr stream
// Derive(SeedSecret(seed), "model init", tensor index), so the same seed
// gives the same weights on every machine.
func (m *Model) Init(seed uint64) [][]float32 {
	ws := make([][]float32, len(m.specs))
	for i, s := range m.specs {
		ws[i] = make([]float32, s.Size())
	}
	secret := corr.SeedSecret(seed)
	for _, st := range m.steps {
		if st.w < 0 {
			continue
		}
		shape := m.specs[st.w].Shape
		fanOut := shape[0]
		fanIn := m.specs[st.w].Size() / fanOut
		a := math.Sqrt(6 / float64(fanIn))
		if st.last {
			a = math.Sqrt(6 / float64(fanIn+fanOut))
		}
		src := corr.Derive(secret, "model init", uint64(st.w))
		w := ws[st.w]
		for j := range w {
			// 53 random bits give a uniform float64 in [0, 1).
			u := float64(src.Uint64()>>11) / (1 << 53)
			w[j] = float32((2*u - 1) * a)
		}
	}
	return ws
}

// check validates weights against the model: count, lengths and finiteness.
func (m *Model) check(weights [][]float32) error {
	if len(weights) != len(m.specs) {
		return fmt.Errorf("model: %d weight tensors, %s has %d", len(weights), m.arch, len(m.specs))
	}
	for i, w := range weights {
		if len(w) != m.specs[i].Size() {
			return fmt.Errorf("model: tensor %d (%s) has %d values, want %d (shape %v)",
				i, m.specs[i].Name, len(w), m.specs[i].Size(), m.specs[i].Shape)
		}
		if j := nonFinite(w); j >= 0 {
			return fmt.Errorf("model: tensor %d (%s) value %d is %v", i, m.specs[i].Name, j, w[j])
		}
	}
	return nil
}

// image reports whether the model's first layer is a convolution, whose
// graphs read batches as [C, B, H, W] rather than [features, B].
func (m *Model) image() bool { return m.steps[0].kind == conv }

// batchShape is the feature-major shape of a batch of b inputs.
func (m *Model) batchShape(b int) []int {
	if m.image() {
		return []int{m.input[2], b, m.input[0], m.input[1]}
	}
	return []int{m.Features(), b}
}

// dropoutShapes are the feature-major shapes of the dropout masks of a
// training batch of b examples.
func (m *Model) dropoutShapes(b int) [][]int {
	var out [][]int
	for _, st := range m.steps {
		if st.kind == dropout {
			out = append(out, append(slices.Clone(st.outDim), b))
		}
	}
	return out
}

// nonFinite returns the index of the first NaN or infinity in v, or -1. It
// tests the exponent bits directly: a weight swap checks every parameter,
// and math.IsNaN/IsInf on float64 conversions took half of a swap's time.
//
// Eight values at a time, one branch per eight: an exponent of all ones
// is the only one that carries into bit 31 when 1 is added to it, so the
// OR of those sums has bit 31 set exactly when one of them is not finite.
func nonFinite(v []float32) int {
	const exp, one = 0x7f800000, 0x00800000
	j := 0
	for ; j+8 <= len(v); j += 8 {
		b := v[j : j+8 : j+8]
		s := (math.Float32bits(b[0])&exp + one) | (math.Float32bits(b[1])&exp + one) |
			(math.Float32bits(b[2])&exp + one) | (math.Float32bits(b[3])&exp + one) |
			(math.Float32bits(b[4])&exp + one) | (math.Float32bits(b[5])&exp + one) |
			(math.Float32bits(b[6])&exp + one) | (math.Float32bits(b[7])&exp + one)
		if s&0x80000000 != 0 {
			break
		}
	}
	for ; j < len(v); j++ {
		if math.Float32bits(v[j])&exp == exp {
			return j
		}
	}
	return -1
}
