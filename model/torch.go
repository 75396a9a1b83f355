package model

import (
	"fmt"
	"slices"
	"strings"
)

// Named is a tensor as a file holds it: a name, a shape and its values in
// row-major order.
type Named struct {
	Name  string
	Shape []int
	Data  []float32
}

// TorchTensors lists the model's parameter tensors as PyTorch names them
// in the nn.Sequential of the model's spec, where layer i of the spec is
// module i: "i.weight" and "i.bias" for each conv and dense layer, in the
// order of Tensors. Their shapes are PyTorch's (and fedpq's): Conv2d
// weights [out, in, kh, kw] (OIHW), Linear weights [out, in], biases
// [out]. The one layout that differs is a dense layer that reads an image
// input directly (a dense model on images with more than one channel):
// fedpq's kernel columns follow the data's (row, column, channel) order,
// PyTorch's nn.Flatten of an NCHW tensor (channel, row, column); ToTorch
// and FromTorch permute them.
func (m *Model) TorchTensors() []TensorSpec {
	out := m.Tensors()
	for _, st := range m.steps {
		if st.w >= 0 {
			out[st.w].Name = fmt.Sprintf("%d.weight", st.at)
			out[st.b].Name = fmt.Sprintf("%d.bias", st.at)
		}
	}
	return out
}

// hwcInput reports whether the first layer is dense and reads an image of
// several channels, whose kernel columns ToTorch permutes.
func (m *Model) hwcInput() bool {
	return m.steps[0].kind == dense && len(m.input) == 3 && m.input[2] > 1
}

// ToTorch returns weights (in the order of Tensors) as PyTorch holds them:
// named and shaped as TorchTensors, the first dense kernel's columns
// permuted to (channel, row, column) where the model reads images with
// dense layers. It checks the weights as Train does.
func (m *Model) ToTorch(weights [][]float32) ([]Named, error) {
	if err := m.check(weights); err != nil {
		return nil, err
	}
	specs := m.TorchTensors()
	out := make([]Named, len(specs))
	for i, s := range specs {
		out[i] = Named{Name: s.Name, Shape: s.Shape, Data: slices.Clone(weights[i])}
	}
	if m.hwcInput() {
		st := m.steps[0]
		out[st.w].Data = m.permuteColumns(weights[st.w], true)
	}
	return out, nil
}

// FromTorch is the inverse of ToTorch: weights in the order of Tensors from
// tensors named and shaped as TorchTensors (in any order). A missing,
// extra, misshapen or non-finite tensor is an error that names it and says
// what the model has.
func (m *Model) FromTorch(tensors []Named) ([][]float32, error) {
	specs := m.TorchTensors()
	index := map[string]int{}
	for i, s := range specs {
		index[s.Name] = i
	}
	w := make([][]float32, len(specs))
	for _, t := range tensors {
		i, ok := index[t.Name]
		switch {
		case !ok:
			return nil, fmt.Errorf("model: %s has no tensor %q; it has %s", m.arch, t.Name, listTensors(specs))
		case w[i] != nil:
			return nil, fmt.Errorf("model: tensor %q given twice", t.Name)
		case !slices.Equal(t.Shape, specs[i].Shape):
			return nil, fmt.Errorf("model: tensor %s has shape %v, but %s's is %v", t.Name, t.Shape, m.arch, specs[i].Shape)
		case len(t.Data) != specs[i].Size():
			return nil, fmt.Errorf("model: tensor %s has %d values for shape %v", t.Name, len(t.Data), t.Shape)
		}
		w[i] = slices.Clone(t.Data)
	}
	for i, s := range specs {
		if w[i] == nil {
			return nil, fmt.Errorf("model: no tensor %s %v; %s has %s", s.Name, s.Shape, m.arch, listTensors(specs))
		}
	}
	if m.hwcInput() {
		st := m.steps[0]
		w[st.w] = m.permuteColumns(w[st.w], false)
	}
	if err := m.check(w); err != nil {
		return nil, err
	}
	return w, nil
}

// permuteColumns maps the first dense kernel's columns from the data's
// (y, x, c) order to PyTorch's (c, y, x) order (toTorch) or back.
func (m *Model) permuteColumns(k []float32, toTorch bool) []float32 {
	h, wd, c := m.input[0], m.input[1], m.input[2]
	f := h * wd * c
	out := make([]float32, len(k))
	for o := range len(k) / f {
		row, dst := k[o*f:(o+1)*f], out[o*f:(o+1)*f]
		for y := range h {
			for x := range wd {
				for ch := range c {
					hwc, chw := (y*wd+x)*c+ch, (ch*h+y)*wd+x
					if toTorch {
						dst[chw] = row[hwc]
					} else {
						dst[hwc] = row[chw]
					}
				}
			}
		}
	}
	return out
}

// listTensors names tensors with their shapes: "0.weight [6 1 5 5], ...".
func listTensors(specs []TensorSpec) string {
	var parts []string
	for _, s := range specs {
		parts = append(parts, fmt.Sprintf("%s %v", s.Name, s.Shape))
	}
	return strings.Join(parts, ", ")
}
