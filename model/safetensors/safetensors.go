// Package safetensors reads and writes float32 tensors in the safetensors
// format (https://github.com/huggingface/safetensors): an 8-byte
// little-endian header length N, N bytes of JSON that give each tensor's
// dtype, shape and byte range, and the tensors' bytes, little-endian and
// row-major, one after another. The JSON may hold "__metadata__", a map of
// strings.
//
// It is fedpq's own short implementation: the format is a page long, the
// Go modules for it are unreleased snapshots, and what matters here is
// the validation of a file one did not write, which Read does as the
// format's reference implementation does (offsets contiguous from 0 to
// the end, sizes matching shapes, a bounded header).
//
// Only F32 is read and written: fedpq's models are float32.
package safetensors

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"slices"
	"strconv"
)

// Tensor is one named tensor: its shape and its values in row-major order.
type Tensor struct {
	Name  string
	Shape []int
	Data  []float32
}

// File is what Read returns: the tensors in the order of their bytes in
// the file, and the metadata.
type File struct {
	Tensors  []Tensor
	Metadata map[string]string
}

// Tensor returns the tensor with the given name.
func (f *File) Tensor(name string) (Tensor, bool) {
	for _, t := range f.Tensors {
		if t.Name == name {
			return t, true
		}
	}
	return Tensor{}, false
}

// maxHeader bounds the JSON header, as the reference implementation does.
const maxHeader = 100 << 20

// metadataKey is the header's entry that is not a tensor.
const metadataKey = "__metadata__"

// Write writes tensors, in the given order, and metadata (may be nil). The
// header is padded with spaces to a multiple of 8 bytes, so that the data
// are aligned, as the reference writer does.
func Write(w io.Writer, tensors []Tensor, metadata map[string]string) error {
	var h bytes.Buffer
	h.WriteByte('{')
	if len(metadata) > 0 {
		m, err := json.Marshal(metadata)
		if err != nil {
			return err
		}
		fmt.Fprintf(&h, "%q:%s", metadataKey, m)
	}
	seen := map[string]bool{}
	off := 0
	for i, t := range tensors {
		switch {
		case t.Name == "" || t.Name == metadataKey:
			return fmt.Errorf("safetensors: tensor %d has the name %q", i, t.Name)
		case seen[t.Name]:
			return fmt.Errorf("safetensors: two tensors named %q", t.Name)
		case size(t.Shape) != len(t.Data):
			return fmt.Errorf("safetensors: tensor %s has shape %v but %d values", t.Name, t.Shape, len(t.Data))
		}
		seen[t.Name] = true
		name, _ := json.Marshal(t.Name)
		shape := t.Shape
		if shape == nil {
			shape = []int{}
		}
		dims, _ := json.Marshal(shape)
		if h.Len() > 1 {
			h.WriteByte(',')
		}
		fmt.Fprintf(&h, `%s:{"dtype":"F32","shape":%s,"data_offsets":[%d,%d]}`, name, dims, off, off+4*len(t.Data))
		off += 4 * len(t.Data)
	}
	h.WriteByte('}')
	for h.Len()%8 != 0 {
		h.WriteByte(' ')
	}
	var n [8]byte
	binary.LittleEndian.PutUint64(n[:], uint64(h.Len()))
	if _, err := w.Write(n[:]); err != nil {
		return err
	}
	if _, err := w.Write(h.Bytes()); err != nil {
		return err
	}
	buf := make([]byte, 0, 1<<16)
	for _, t := range tensors {
		for _, v := range t.Data {
			buf = binary.LittleEndian.AppendUint32(buf, math.Float32bits(v))
			if len(buf) == cap(buf) {
				if _, err := w.Write(buf); err != nil {
					return err
				}
				buf = buf[:0]
			}
		}
	}
	_, err := w.Write(buf)
	return err
}

// entry is a tensor's header entry.
type entry struct {
	DType   string `json:"dtype"`
	Shape   []int  `json:"shape"`
	Offsets []int  `json:"data_offsets"`
}

// Read parses a safetensors file. Every error says what is wrong: a
// truncated file, a bad header, an unsupported dtype (only F32 is read),
// offsets that overlap, leave gaps or do not match the shape.
func Read(b []byte) (*File, error) {
	if len(b) < 8 {
		return nil, fmt.Errorf("safetensors: %d bytes, too short for a header", len(b))
	}
	n := binary.LittleEndian.Uint64(b)
	if n > maxHeader || n > uint64(len(b)-8) {
		return nil, fmt.Errorf("safetensors: header of %d bytes in a file of %d (not a safetensors file, or truncated)", n, len(b))
	}
	head, data := b[8:8+n], b[8+n:]
	if len(bytes.TrimSpace(head)) == 0 || bytes.TrimSpace(head)[0] != '{' {
		return nil, errors.New("safetensors: the header is not a JSON object (not a safetensors file?)")
	}
	var raw map[string]json.RawMessage
	if err := json.Unmarshal(head, &raw); err != nil {
		return nil, fmt.Errorf("safetensors: header: %w", err)
	}
	f := &File{}
	if m, ok := raw[metadataKey]; ok {
		if err := json.Unmarshal(m, &f.Metadata); err != nil {
			return nil, fmt.Errorf("safetensors: %s is not a map of strings: %w", metadataKey, err)
		}
		delete(raw, metadataKey)
	}
	type placed struct {
		name string
		e    entry
	}
	var all []placed
	for name, r := range raw {
		var e entry
		dec := json.NewDecoder(bytes.NewReader(r))
		dec.DisallowUnknownFields()
		if err := dec.Decode(&e); err != nil {
			return nil, fmt.Errorf("safetensors: tensor %s: %w", name, err)
		}
		if len(e.Offsets) != 2 {
			return nil, fmt.Errorf("safetensors: tensor %s: data_offsets has %d entries, want 2", name, len(e.Offsets))
		}
		all = append(all, placed{name, e})
	}
	slices.SortFunc(all, func(a, b placed) int { return a.e.Offsets[0] - b.e.Offsets[0] })
	end := 0
	for _, p := range all {
		e := p.e
		if e.DType != "F32" {
			return nil, fmt.Errorf("safetensors: tensor %s is %s; fedpq reads F32 only (in PyTorch: {k: v.float() for k, v in state_dict.items()})", p.name, e.DType)
		}
		if e.Offsets[0] != end {
			return nil, fmt.Errorf("safetensors: tensor %s starts at byte %d of the data, want %d (tensors must follow each other without gaps or overlaps)", p.name, e.Offsets[0], end)
		}
		for _, d := range e.Shape {
			if d < 0 || d > math.MaxInt32 {
				return nil, fmt.Errorf("safetensors: tensor %s has shape %v", p.name, e.Shape)
			}
		}
		nb := e.Offsets[1] - e.Offsets[0]
		if nb < 0 || nb/4 != size(e.Shape) || nb%4 != 0 {
			return nil, fmt.Errorf("safetensors: tensor %s: %d bytes for shape %v of F32", p.name, nb, e.Shape)
		}
		if e.Offsets[1] > len(data) {
			return nil, fmt.Errorf("safetensors: tensor %s ends at byte %d, but the data have %d (truncated file)", p.name, e.Offsets[1], len(data))
		}
		t := Tensor{Name: p.name, Shape: e.Shape, Data: make([]float32, nb/4)}
		src := data[e.Offsets[0]:e.Offsets[1]]
		for i := range t.Data {
			t.Data[i] = math.Float32frombits(binary.LittleEndian.Uint32(src[4*i:]))
		}
		if t.Shape == nil {
			t.Shape = []int{}
		}
		f.Tensors = append(f.Tensors, t)
		end = e.Offsets[1]
	}
	if end != len(data) {
		return nil, fmt.Errorf("safetensors: the tensors cover %d bytes of data, the file has %d", end, len(data))
	}
	return f, nil
}

// size is the number of values of a shape.
func size(shape []int) int {
	n := 1
	for _, d := range shape {
		n *= d
	}
	return n
}

// String is the tensor's name and shape, as errors show it.
func (t Tensor) String() string {
	s := t.Name + " ["
	for i, d := range t.Shape {
		if i > 0 {
			s += " "
		}
		s += strconv.Itoa(d)
	}
	return s + "]"
}
