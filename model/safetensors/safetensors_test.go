package safetensors

import (
	"bytes"
	"encoding/binary"
	"math"
	"reflect"
	"strings"
	"testing"
)

func sample() []Tensor {
	return []Tensor{
		{Name: "0.weight", Shape: []int{2, 3}, Data: []float32{1, -2, 3.5, float32(math.Inf(1)), 0, -0.25}},
		{Name: "0.bias", Shape: []int{2}, Data: []float32{7, 8}},
		{Name: "scalar", Shape: []int{}, Data: []float32{42}},
	}
}

// TestRoundTrip: what Write writes, Read reads back, in order, with the
// metadata; the data start 8-byte aligned.
func TestRoundTrip(t *testing.T) {
	var b bytes.Buffer
	meta := map[string]string{"format": "pt", "fedpq.model": "name: x"}
	if err := Write(&b, sample(), meta); err != nil {
		t.Fatal(err)
	}
	if n := binary.LittleEndian.Uint64(b.Bytes()); (8+n)%8 != 0 {
		t.Errorf("header of %d bytes: data not aligned", n)
	}
	f, err := Read(b.Bytes())
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(f.Tensors, sample()) || !reflect.DeepEqual(f.Metadata, meta) {
		t.Errorf("read back %+v %v", f.Tensors, f.Metadata)
	}
	if tt, ok := f.Tensor("0.bias"); !ok || tt.String() != "0.bias [2]" {
		t.Errorf("Tensor(0.bias) = %v, %v", tt, ok)
	}
}

// TestKnownBytes: a file written by hand from the format's description
// (the layout the reference implementation writes) reads as expected.
func TestKnownBytes(t *testing.T) {
	head := `{"b":{"dtype":"F32","shape":[1],"data_offsets":[8,12]},"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}}`
	var file []byte
	file = binary.LittleEndian.AppendUint64(file, uint64(len(head)))
	file = append(file, head...)
	for _, v := range []float32{1.5, -3, 0.125} {
		file = binary.LittleEndian.AppendUint32(file, math.Float32bits(v))
	}
	f, err := Read(file)
	if err != nil {
		t.Fatal(err)
	}
	want := []Tensor{{Name: "a", Shape: []int{2}, Data: []float32{1.5, -3}}, {Name: "b", Shape: []int{1}, Data: []float32{0.125}}}
	if !reflect.DeepEqual(f.Tensors, want) {
		t.Errorf("got %+v, want %+v", f.Tensors, want)
	}
}

// TestBadFiles: every malformed file is an error that says what is wrong.
func TestBadFiles(t *testing.T) {
	file := func(head string, data int) []byte {
		b := binary.LittleEndian.AppendUint64(nil, uint64(len(head)))
		return append(append(b, head...), make([]byte, data)...)
	}
	var good bytes.Buffer
	if err := Write(&good, sample(), nil); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name string
		b    []byte
		want string
	}{
		{"empty", nil, "too short"},
		{"huge header", binary.LittleEndian.AppendUint64(nil, 1<<40), "not a safetensors file, or truncated"},
		{"truncated", good.Bytes()[:good.Len()-4], "(truncated file)"},
		{"not JSON", file("[1, 2]", 0), "not a JSON object"},
		{"bad JSON", file(`{"a": {"dtype": "F32"`, 0), "header"},
		{"F16", file(`{"a":{"dtype":"F16","shape":[2],"data_offsets":[0,4]}}`, 4), "tensor a is F16; fedpq reads F32 only"},
		{"gap", file(`{"a":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}}`, 8), "starts at byte 4 of the data, want 0"},
		{"overlap", file(`{"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},"b":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}}`, 8), "want 8"},
		{"shape", file(`{"a":{"dtype":"F32","shape":[3],"data_offsets":[0,8]}}`, 8), "8 bytes for shape [3]"},
		{"negative", file(`{"a":{"dtype":"F32","shape":[-2],"data_offsets":[0,8]}}`, 8), "has shape [-2]"},
		{"past the end", file(`{"a":{"dtype":"F32","shape":[4],"data_offsets":[0,16]}}`, 8), "ends at byte 16, but the data have 8"},
		{"trailing data", file(`{"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}}`, 8), "cover 4 bytes of data, the file has 8"},
		{"offsets", file(`{"a":{"dtype":"F32","shape":[1],"data_offsets":[0]}}`, 4), "data_offsets has 1 entries"},
		{"unknown field", file(`{"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4],"x":1}}`, 4), "unknown field"},
		{"metadata", file(`{"__metadata__":{"a":1}}`, 0), "not a map of strings"},
	} {
		if _, err := Read(c.b); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: error %v, want one containing %q", c.name, err, c.want)
		}
	}
	for _, ts := range [][]Tensor{
		{{Name: "a", Shape: []int{2}, Data: []float32{1}}},
		{{Name: "a", Shape: []int{1}, Data: []float32{1}}, {Name: "a", Shape: []int{1}, Data: []float32{1}}},
		{{Name: "__metadata__", Shape: []int{1}, Data: []float32{1}}},
	} {
		if err := Write(&bytes.Buffer{}, ts, nil); err == nil {
			t.Errorf("Write(%v): no error", ts)
		}
	}
}

// FuzzRead: no input makes Read panic, and what it accepts writes back to
// a file it reads the same.
func FuzzRead(f *testing.F) {
	var good bytes.Buffer
	Write(&good, sample(), map[string]string{"k": "v"})
	f.Add(good.Bytes())
	f.Fuzz(func(t *testing.T, b []byte) {
		r, err := Read(b)
		if err != nil {
			return
		}
		var again bytes.Buffer
		if err := Write(&again, r.Tensors, r.Metadata); err != nil {
			t.Fatal(err)
		}
		r2, err := Read(again.Bytes())
		if err != nil || len(r2.Tensors) != len(r.Tensors) {
			t.Fatalf("rewritten file: %v", err)
		}
	})
}
