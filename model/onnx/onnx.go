// Package onnx writes a fedpq model as an ONNX graph and reads the weights
// of one back.
//
// The graph (Marshal) has one node per layer of the model's spec, named
// after it ("3:conv"), in ONNX opset 13 (IR version 8, what python3-onnx
// 1.12's checker knows): Conv, Relu, Sigmoid, MaxPool (2 x 2, stride 2,
// floor), Flatten (axis 1) and Gemm (transB = 1: y = x W^T + b, as
// PyTorch's Linear). Dropout, the identity outside training, has no node
// (as in torch.onnx.export of a model in eval mode; runtimes such as
// onnx-gomlx lack the operator); the spec in the metadata keeps it. The
// weights are
// initializers named and laid out as model.TorchTensors, the names of a
// PyTorch nn.Sequential of the spec. The input "input" is [N, C, H, W]
// float32 for image data (PyTorch's layout; fedpq's data are [H, W, C] per
// example) or [N, F] for vectors, N free; the output "logits" is
// [N, classes], before the softmax. The model's metadata_props hold the
// spec ("fedpq.spec", YAML), the data's input shape ("fedpq.input", HWC)
// and classes ("fedpq.classes").
package onnx

import (
	"errors"
	"fmt"
	"maps"
	"math"
	"slices"
	"strconv"
	"strings"

	"google.golang.org/protobuf/proto"

	"github.com/fedpq/fedpq/model"
	pb "github.com/fedpq/fedpq/model/onnx/internal/onnxpb"
)

// Versions of what Marshal writes.
const (
	IRVersion = 8
	Opset     = 13
)

// Names of the graph's input and output.
const (
	Input  = "input"
	Output = "logits"
)

// Metadata keys of a model that Marshal writes.
const (
	MetaSpec    = "fedpq.spec"
	MetaInput   = "fedpq.input"
	MetaClasses = "fedpq.classes"
)

// Marshal returns the ONNX ModelProto of m with weights (in the order of
// m.Tensors), serialized. doc is the model's doc_string (where it came
// from); meta (may be nil) adds metadata_props to the spec, input and
// classes that Marshal writes.
func Marshal(m *model.Model, weights [][]float32, doc string, meta map[string]string) ([]byte, error) {
	named, err := m.ToTorch(weights)
	if err != nil {
		return nil, err
	}
	g := &pb.GraphProto{Name: proto.String(m.Arch())}
	for _, t := range named {
		g.Initializer = append(g.Initializer, tensor(t))
	}
	in := m.Input()
	inShape := []int64{-1, int64(m.Features())}
	if len(in) == 3 {
		inShape = []int64{-1, int64(in[2]), int64(in[0]), int64(in[1])}
	}
	g.Input = []*pb.ValueInfoProto{value(Input, inShape)}
	g.Output = []*pb.ValueInfoProto{value(Output, []int64{-1, int64(m.Classes())})}
	spec := m.Spec()
	x := Input
	for i, l := range spec.Layers {
		out := fmt.Sprintf("%d:%s", i, l.Kind)
		if i == len(spec.Layers)-1 {
			out = Output
		}
		n := &pb.NodeProto{Name: proto.String(fmt.Sprintf("%d:%s", i, l.Kind)), Input: []string{x}, Output: []string{out}}
		w, b := fmt.Sprintf("%d.weight", i), fmt.Sprintf("%d.bias", i)
		switch l.Kind {
		case "conv":
			n.OpType = proto.String("Conv")
			n.Input = append(n.Input, w, b)
			p := int64(l.Padding)
			n.Attribute = []*pb.AttributeProto{ints("kernel_shape", int64(l.Kernel), int64(l.Kernel)),
				ints("strides", int64(max(l.Stride, 1)), int64(max(l.Stride, 1))), ints("pads", p, p, p, p),
				ints("dilations", 1, 1), integer("group", 1)}
		case "relu":
			n.OpType = proto.String("Relu")
		case "sigmoid":
			n.OpType = proto.String("Sigmoid")
		case "maxpool":
			n.OpType = proto.String("MaxPool")
			n.Attribute = []*pb.AttributeProto{ints("kernel_shape", 2, 2), ints("strides", 2, 2), ints("pads", 0, 0, 0, 0)}
		case "flatten":
			n.OpType = proto.String("Flatten")
			n.Attribute = []*pb.AttributeProto{integer("axis", 1)}
		case "dense":
			n.OpType = proto.String("Gemm")
			n.Input = append(n.Input, w, b)
			n.Attribute = []*pb.AttributeProto{integer("transB", 1)}
		case "dropout":
			continue // the identity outside training, left out as torch.onnx.export leaves it out
		default:
			return nil, fmt.Errorf("onnx: layer %d: no ONNX operator for %q", i, l.Kind)
		}
		g.Node = append(g.Node, n)
		x = out
	}
	dims := make([]string, len(in))
	for i, d := range in {
		dims[i] = strconv.Itoa(d)
	}
	props := maps.Clone(meta)
	if props == nil {
		props = map[string]string{}
	}
	props[MetaSpec], props[MetaInput], props[MetaClasses] = string(spec.YAML()), strings.Join(dims, ","), strconv.Itoa(m.Classes())
	mp := &pb.ModelProto{
		IrVersion:    proto.Int64(IRVersion),
		OpsetImport:  []*pb.OperatorSetIdProto{{Domain: proto.String(""), Version: proto.Int64(Opset)}},
		ProducerName: proto.String("fedpq"),
		DocString:    proto.String(doc),
		Graph:        g,
	}
	for _, k := range slices.Sorted(maps.Keys(props)) {
		mp.MetadataProps = append(mp.MetadataProps, &pb.StringStringEntryProto{Key: proto.String(k), Value: proto.String(props[k])})
	}
	return proto.Marshal(mp)
}

// tensor is t as a float32 initializer with its bytes in raw_data.
func tensor(t model.Named) *pb.TensorProto {
	dims := make([]int64, len(t.Shape))
	for i, d := range t.Shape {
		dims[i] = int64(d)
	}
	raw := make([]byte, 0, 4*len(t.Data))
	for _, v := range t.Data {
		b := math.Float32bits(v)
		raw = append(raw, byte(b), byte(b>>8), byte(b>>16), byte(b>>24))
	}
	return &pb.TensorProto{Name: proto.String(t.Name), Dims: dims, DataType: proto.Int32(int32(pb.TensorProto_FLOAT)), RawData: raw}
}

// value is a float32 tensor's ValueInfo; a negative dimension is the
// batch, named N.
func value(name string, shape []int64) *pb.ValueInfoProto {
	s := &pb.TensorShapeProto{}
	for _, d := range shape {
		dim := &pb.TensorShapeProto_Dimension{Value: &pb.TensorShapeProto_Dimension_DimValue{DimValue: d}}
		if d < 0 {
			dim.Value = &pb.TensorShapeProto_Dimension_DimParam{DimParam: "N"}
		}
		s.Dim = append(s.Dim, dim)
	}
	return &pb.ValueInfoProto{Name: proto.String(name), Type: &pb.TypeProto{Value: &pb.TypeProto_TensorType{
		TensorType: &pb.TypeProto_Tensor{ElemType: proto.Int32(int32(pb.TensorProto_FLOAT)), Shape: s}}}}
}

func ints(name string, v ...int64) *pb.AttributeProto {
	return &pb.AttributeProto{Name: proto.String(name), Type: pb.AttributeProto_INTS.Enum(), Ints: v}
}

func integer(name string, v int64) *pb.AttributeProto {
	return &pb.AttributeProto{Name: proto.String(name), Type: pb.AttributeProto_INT.Enum(), I: proto.Int64(v)}
}

// Initializers reads the float32 initializers of a serialized ONNX model,
// in the order of the file: the weights, named as the model that wrote
// them names them (model.FromTorch takes them, for a model exported by
// fedpq or by torch.onnx.export of the same nn.Sequential). An initializer
// that is not float32, or whose data are external or do not match its
// shape, is an error that names it.
func Initializers(b []byte) ([]model.Named, error) {
	var mp pb.ModelProto
	if err := proto.Unmarshal(b, &mp); err != nil {
		return nil, fmt.Errorf("onnx: not an ONNX model: %w", err)
	}
	if mp.Graph == nil {
		return nil, errors.New("onnx: the model has no graph (not an ONNX model?)")
	}
	var out []model.Named
	for _, t := range mp.Graph.Initializer {
		name := t.GetName()
		if t.GetDataLocation() == pb.TensorProto_EXTERNAL {
			return nil, fmt.Errorf("onnx: initializer %s keeps its data in an external file; save the model with its weights inside", name)
		}
		if dt := pb.TensorProto_DataType(t.GetDataType()); dt != pb.TensorProto_FLOAT {
			return nil, fmt.Errorf("onnx: initializer %s is %v; fedpq reads FLOAT (float32) weights", name, dt)
		}
		n := model.Named{Name: name, Shape: make([]int, len(t.Dims))}
		size := 1
		for i, d := range t.Dims {
			if d < 0 || d > math.MaxInt32 {
				return nil, fmt.Errorf("onnx: initializer %s has dimensions %v", name, t.Dims)
			}
			n.Shape[i] = int(d)
			size *= int(d)
		}
		switch raw := t.GetRawData(); {
		case raw != nil:
			if len(raw) != 4*size {
				return nil, fmt.Errorf("onnx: initializer %s has %d bytes for shape %v", name, len(raw), n.Shape)
			}
			n.Data = make([]float32, size)
			for i := range n.Data {
				n.Data[i] = math.Float32frombits(uint32(raw[4*i]) | uint32(raw[4*i+1])<<8 | uint32(raw[4*i+2])<<16 | uint32(raw[4*i+3])<<24)
			}
		default:
			if len(t.FloatData) != size {
				return nil, fmt.Errorf("onnx: initializer %s has %d values for shape %v", name, len(t.FloatData), n.Shape)
			}
			n.Data = slices.Clone(t.FloatData)
		}
		out = append(out, n)
	}
	return out, nil
}
