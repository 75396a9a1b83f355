// Package frame is the trainer protocol's framing (docs/trainer.md): a
// magic, the lengths of a JSON Header and of a body of little-endian
// float32 and int32 arrays, then both. Package extern speaks it to trainer
// processes; package externtest's fake trainer speaks it back.
package frame

import (
	"bufio"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"strconv"
)

// Protocol is the version of the trainer protocol this package speaks
// (docs/trainer.md). A trainer's hello must name it.
const Protocol = 1

// magic opens every frame, so that anything else on the trainer's stdout
// (a stray print) is caught at once rather than read as a length.
const magic = "fqtr"

// MaxHeader and MaxBody bound a frame's parts.
const (
	MaxHeader = 1 << 20 // bytes of a frame's JSON header
	MaxBody   = 1 << 36 // bytes of a frame's arrays
)

// Array describes one array of a frame's body: its name, element type
// ("float32" or "int32", little-endian) and shape. The body holds the
// header's tensors, then its arrays, back to back in the order listed.
type Array struct {
	Name  string `json:"name"`
	DType string `json:"dtype"`
	Shape []int  `json:"shape"`
}

// Elems is the number of elements of the array, or -1 for a shape with a
// negative dimension or too many elements.
func (a Array) Elems() int {
	n := 1
	for _, d := range a.Shape {
		if d < 0 || (d > 0 && n > MaxBody/d) {
			return -1
		}
		n *= d
	}
	return n
}

// Header is a message's JSON header. One struct holds the fields of every
// message; each message uses some of them (docs/trainer.md lists which).
// Unknown fields are ignored, so that a newer trainer can add some.
type Header struct {
	Type     string `json:"type"`
	Protocol int    `json:"protocol,omitempty"`
	Trainer  string `json:"trainer,omitempty"` // hello: the trainer's name, for logs

	// setup
	Seed       uint64 `json:"seed,omitempty"`
	InputShape []int  `json:"input_shape,omitempty"`
	Classes    int    `json:"classes,omitempty"`
	Threads    int    `json:"threads,omitempty"`

	// data, train, evaluate
	Dataset string `json:"dataset,omitempty"`
	Size    int    `json:"size,omitempty"` // data: examples in the whole dataset

	// train
	Client      int     `json:"client,omitempty"`
	Round       int     `json:"round,omitempty"`
	Epochs      int     `json:"epochs,omitempty"`
	Batch       int     `json:"batch,omitempty"`
	Optimizer   string  `json:"optimizer,omitempty"`
	LR          float64 `json:"lr,omitempty"`
	Momentum    float64 `json:"momentum,omitempty"`
	WeightDecay float64 `json:"weight_decay,omitempty"`
	ProxMu      float64 `json:"prox_mu,omitempty"` // FedProx's mu; absent: 0

	// trained, evaluated
	Examples int     `json:"examples,omitempty"`
	Correct  int     `json:"correct,omitempty"`
	Loss     Float   `json:"loss,omitempty"`
	Seconds  float64 `json:"seconds,omitempty"` // time spent in the user's code
	Result   string  `json:"result,omitempty"`  // trained: "weights" (default) or "update"

	// error
	Message string `json:"message,omitempty"`

	Tensors []Array `json:"tensors,omitempty"` // float32 model tensors
	Arrays  []Array `json:"arrays,omitempty"`  // other arrays (indices, examples, labels)
}

// Float is a JSON number, or one of the strings "nan", "inf" and
// "-inf": JSON has no non-finite numbers, and a trainer must still be able
// to say that its loss is NaN.
type Float float64

func (f Float) MarshalJSON() ([]byte, error) {
	v := float64(f)
	switch {
	case math.IsNaN(v):
		return []byte(`"nan"`), nil
	case math.IsInf(v, 1):
		return []byte(`"inf"`), nil
	case math.IsInf(v, -1):
		return []byte(`"-inf"`), nil
	}
	return strconv.AppendFloat(nil, v, 'g', -1, 64), nil
}

func (f *Float) UnmarshalJSON(b []byte) error {
	var s string
	if json.Unmarshal(b, &s) == nil {
		switch s {
		case "nan":
			*f = Float(math.NaN())
		case "inf":
			*f = Float(math.Inf(1))
		case "-inf":
			*f = Float(math.Inf(-1))
		default:
			return fmt.Errorf("number %q: want a number, nan, inf or -inf", s)
		}
		return nil
	}
	var v float64
	if err := json.Unmarshal(b, &v); err != nil {
		return err
	}
	*f = Float(v)
	return nil
}

// Frame is one message: its header and its body, the arrays' bytes.
type Frame struct {
	H    Header
	Body []byte
}

// BodySize is the number of body bytes the header's arrays take, or an
// error for an unknown element type or an impossible shape.
func (h *Header) BodySize() (int, error) {
	n := 0
	for _, a := range append(append([]Array(nil), h.Tensors...), h.Arrays...) {
		if a.DType != "float32" && a.DType != "int32" {
			return 0, fmt.Errorf("array %q has element type %q, want float32 or int32", a.Name, a.DType)
		}
		e := a.Elems()
		if e < 0 || n+4*e > MaxBody {
			return 0, fmt.Errorf("array %q has shape %v", a.Name, a.Shape)
		}
		n += 4 * e
	}
	return n, nil
}

// Write writes a frame: the magic, the header's length (uint32) and
// the body's (uint64), little-endian, then the JSON header and the body.
// body is written piece by piece, so that large arrays are not copied
// into one buffer.
func Write(w *bufio.Writer, h *Header, body ...[]byte) error {
	hb, err := json.Marshal(h)
	if err != nil {
		return err
	}
	n := 0
	for _, b := range body {
		n += len(b)
	}
	if want, err := h.BodySize(); err != nil || want != n {
		return fmt.Errorf("internal: a %s frame with %d body bytes for arrays of %d (%v)", h.Type, n, want, err)
	}
	var pre [16]byte
	copy(pre[:4], magic)
	binary.LittleEndian.PutUint32(pre[4:8], uint32(len(hb)))
	binary.LittleEndian.PutUint64(pre[8:16], uint64(n))
	w.Write(pre[:])
	w.Write(hb)
	for _, b := range body {
		w.Write(b)
	}
	return w.Flush()
}

// ErrFraming is a frame that breaks the protocol's framing: after one, the
// stream cannot be trusted and the process is stopped.
var ErrFraming = errors.New("not a protocol frame")

// Read reads one frame and checks that its body is exactly the size
// its header's arrays take. An EOF before the first byte is io.EOF.
func Read(r *bufio.Reader) (*Frame, error) {
	var pre [16]byte
	if _, err := io.ReadFull(r, pre[:]); err != nil {
		if err == io.ErrUnexpectedEOF {
			return nil, fmt.Errorf("%w: the stream ended after %q", ErrFraming, Printable(pre[:]))
		}
		return nil, err
	}
	if string(pre[:4]) != magic {
		more, _ := r.Peek(min(r.Buffered(), 60))
		return nil, fmt.Errorf("%w: it starts %q (a print to stdout? the trainer must write only frames there)", ErrFraming, Printable(append(pre[:], more...)))
	}
	hn := binary.LittleEndian.Uint32(pre[4:8])
	bn := binary.LittleEndian.Uint64(pre[8:16])
	if hn > MaxHeader || bn > MaxBody {
		return nil, fmt.Errorf("%w: a header of %d bytes and a body of %d (at most %d and %d)", ErrFraming, hn, bn, MaxHeader, uint64(MaxBody))
	}
	hb := make([]byte, hn)
	if _, err := io.ReadFull(r, hb); err != nil {
		return nil, fmt.Errorf("%w: the stream ended inside a header of %d bytes", ErrFraming, hn)
	}
	f := &Frame{}
	if err := json.Unmarshal(hb, &f.H); err != nil {
		return nil, fmt.Errorf("%w: its header is not the JSON of a message: %v", ErrFraming, err)
	}
	want, err := f.H.BodySize()
	if err != nil {
		return nil, fmt.Errorf("%w: %s message: %v", ErrFraming, f.H.Type, err)
	}
	if uint64(want) != bn {
		return nil, fmt.Errorf("%w: a %s message with a body of %d bytes, but its arrays take %d", ErrFraming, f.H.Type, bn, want)
	}
	f.Body = make([]byte, bn)
	if _, err := io.ReadFull(r, f.Body); err != nil {
		return nil, fmt.Errorf("%w: the stream ended inside a %s message's body of %d bytes", ErrFraming, f.H.Type, bn)
	}
	return f, nil
}

// Printable is b with bytes that are not printable ASCII replaced by '.'.
func Printable(b []byte) string {
	out := make([]byte, len(b))
	for i, c := range b {
		if c < 0x20 || c > 0x7e {
			c = '.'
		}
		out[i] = c
	}
	return string(out)
}

// F32Bytes is v as little-endian bytes.
func F32Bytes(v []float32) []byte {
	b := make([]byte, 4*len(v))
	for i, x := range v {
		binary.LittleEndian.PutUint32(b[4*i:], math.Float32bits(x))
	}
	return b
}

// I32Bytes is v as little-endian int32 bytes; every value must fit.
func I32Bytes(v []int) []byte {
	b := make([]byte, 4*len(v))
	for i, x := range v {
		binary.LittleEndian.PutUint32(b[4*i:], uint32(int32(x)))
	}
	return b
}

// F32s decodes little-endian float32 values from b.
func F32s(b []byte) []float32 {
	v := make([]float32, len(b)/4)
	for i := range v {
		v[i] = math.Float32frombits(binary.LittleEndian.Uint32(b[4*i:]))
	}
	return v
}

// Ints decodes little-endian int32 values from b.
func Ints(b []byte) []int {
	v := make([]int, len(b)/4)
	for i := range v {
		v[i] = int(int32(binary.LittleEndian.Uint32(b[4*i:])))
	}
	return v
}

// Split is a frame's tensors and arrays by name, as bytes.
func (f *Frame) Split() map[string][]byte {
	out := map[string][]byte{}
	off := 0
	for _, a := range append(append([]Array(nil), f.H.Tensors...), f.H.Arrays...) {
		n := 4 * a.Elems()
		out[a.Name] = f.Body[off : off+n]
		off += n
	}
	return out
}
