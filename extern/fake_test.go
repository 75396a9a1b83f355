package extern

import (
	"bufio"
	"fmt"
	"math"
	"os"
	"strings"
	"testing"
	"time"
)

// The fake trainer: the test binary itself, started with
// FEDPQ_FAKE_TRAINER set to its mode, speaks the protocol with a model of
// two tensors, w [classes, features] and b [classes], and a training step
// whose result the tests compute: each class's row of w moves by
// lr*epochs times the mean of that class's examples, b by lr*epochs times
// the class's share of the examples, and the loss is seed mod 1000.
// Evaluation counts the examples of class 0 as correct, at loss 0.5.
// extern/testdata/numpy_trainer.py is the same trainer in Python, on the
// adapter's framing.
//
// Modes, comma-separated: hang-start, version, hang-train, crash-train,
// crash-after=N (the Nth train request), garbage, error, nan, missing,
// extra, shape, count, loss-nan, update, slow-exit, other (a wider w).

func TestMain(m *testing.M) {
	if mode, ok := os.LookupEnv("FEDPQ_FAKE_TRAINER"); ok {
		fake(mode)
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// fakeCommand is the command line of a fake trainer in mode.
func fakeCommand(mode string) string {
	return fmt.Sprintf("FEDPQ_FAKE_TRAINER=%q %q -test.run=^$", mode, os.Args[0])
}

type fakeData struct {
	x    [][]float32
	y    []int
	feat int
}

func fake(mode string) {
	modes := map[string]string{}
	for _, m := range strings.Split(mode, ",") {
		k, v, _ := strings.Cut(m, "=")
		modes[k] = v
	}
	has := func(k string) bool { _, ok := modes[k]; return ok }
	in, out := bufio.NewReader(os.Stdin), bufio.NewWriter(os.Stdout)
	if has("hang-start") {
		time.Sleep(time.Hour)
	}
	protocol := Protocol
	if has("version") {
		protocol = 2
	}
	send := func(h *header, body ...[]byte) {
		if err := writeFrame(out, h, body...); err != nil {
			fmt.Fprintln(os.Stderr, "fake:", err)
			os.Exit(4)
		}
	}
	send(&header{Type: "hello", Protocol: protocol, Trainer: "fake " + mode})
	var classes, feat int
	data := map[string]*fakeData{}
	trains := 0
	for {
		f, err := readFrame(in)
		if err != nil {
			fmt.Fprintln(os.Stderr, "fake:", err)
			os.Exit(5)
		}
		h := f.h
		arrays := splitArrays(f)
		switch h.Type {
		case "bye":
			if has("slow-exit") {
				time.Sleep(time.Hour)
			}
			return
		case "setup":
			classes, feat = h.Classes, 1
			for _, d := range h.InputShape {
				feat *= d
			}
			wf := feat
			if has("other") {
				wf++
			}
			w := make([]float32, classes*wf)
			for i := range w {
				w[i] = float32(0.01 * float64(i%7-3))
			}
			b := make([]float32, classes)
			for i := range b {
				b[i] = float32(h.Seed % 5)
			}
			send(&header{Type: "model", Tensors: []array{
				{Name: "w", DType: "float32", Shape: []int{classes, wf}},
				{Name: "b", DType: "float32", Shape: []int{classes}},
			}}, f32Bytes(w), f32Bytes(b))
		case "data":
			d := data[h.Dataset]
			if d == nil {
				d = &fakeData{x: make([][]float32, h.Size), y: make([]int, h.Size), feat: feat}
				data[h.Dataset] = d
			}
			idx, xs, ys := ints(arrays["indices"]), f32s(arrays["x"]), ints(arrays["y"])
			for j, i := range idx {
				d.x[i] = xs[j*feat : (j+1)*feat]
				d.y[i] = ys[j]
			}
			send(&header{Type: "ok"})
		case "train":
			trains++
			switch {
			case has("hang-train"):
				time.Sleep(time.Hour)
			case has("crash-train"), modes["crash-after"] == fmt.Sprint(trains):
				fmt.Fprintln(os.Stderr, "Traceback (most recent call last):")
				fmt.Fprintln(os.Stderr, "RuntimeError: the fake trainer crashed")
				os.Exit(3)
			case has("garbage"):
				fmt.Fprintln(out, "epoch 1: loss 0.25")
				out.Flush()
				time.Sleep(time.Hour)
			case has("error"):
				send(&header{Type: "error", Message: "Traceback (most recent call last):\nValueError: the fake trainer's own error"})
				continue
			}
			send(fakeTrain(h, f32s(arrays["w"]), f32s(arrays["b"]), ints(arrays["indices"]), data[h.Dataset], classes, modes))
		case "evaluate":
			d, idx := data[h.Dataset], ints(arrays["indices"])
			correct := 0
			for _, i := range idx {
				if d.y[i] == 0 {
					correct++
				}
			}
			send(&header{Type: "evaluated", Examples: len(idx), Correct: correct, Loss: 0.5, Seconds: 0.001})
		default:
			send(&header{Type: "error", Message: "unknown message " + h.Type})
		}
	}
}

// fakeTrain is the fake's training step, with the faults of its modes.
func fakeTrain(h header, w, b []float32, idx []int, d *fakeData, classes int, modes map[string]string) (*header, []byte, []byte) {
	has := func(k string) bool { _, ok := modes[k]; return ok }
	nw, nb := fakeStep(h, w, b, idx, d.x, d.y, classes, d.feat)
	r := &header{Type: "trained", Examples: len(idx), Loss: jsonFloat(h.Seed % 1000), Seconds: 0.001, Tensors: []array{
		{Name: "w", DType: "float32", Shape: []int{classes, d.feat}},
		{Name: "b", DType: "float32", Shape: []int{classes}},
	}}
	switch {
	case has("nan"):
		nw[3] = float32(math.NaN())
	case has("missing"):
		r.Tensors = r.Tensors[:1]
		return r, f32Bytes(nw), nil
	case has("extra"):
		r.Tensors = append(r.Tensors, array{Name: "c", DType: "float32", Shape: []int{1}})
		return r, f32Bytes(nw), append(f32Bytes(nb), f32Bytes([]float32{1})...)
	case has("shape"):
		r.Tensors[0].Shape = []int{d.feat, classes}
	case has("count"):
		r.Examples++
	case has("loss-nan"):
		r.Loss = jsonFloat(math.NaN())
	case has("update"):
		r.Result = "update"
		for i := range nw {
			nw[i] -= w[i]
		}
		for i := range nb {
			nb[i] -= b[i]
		}
	}
	return r, f32Bytes(nw), f32Bytes(nb)
}

// fakeStep is the fake trainer's training, which the tests compute too.
func fakeStep(h header, w, b []float32, idx []int, x [][]float32, y []int, classes, feat int) ([]float32, []float32) {
	sum := make([]float64, classes*feat)
	count := make([]float64, classes)
	for _, i := range idx {
		c := y[i]
		count[c]++
		for f, v := range x[i] {
			sum[c*feat+f] += float64(v)
		}
	}
	step := h.LR * float64(h.Epochs) / float64(len(idx))
	nw, nb := make([]float32, len(w)), make([]float32, len(b))
	for i := range w {
		nw[i] = float32(float64(w[i]) + step*sum[i])
	}
	for c := range b {
		nb[c] = float32(float64(b[c]) + step*count[c])
	}
	return nw, nb
}

// splitArrays is a frame's tensors and arrays by name, as bytes.
func splitArrays(f *frame) map[string][]byte {
	out := map[string][]byte{}
	off := 0
	for _, a := range append(append([]array(nil), f.h.Tensors...), f.h.Arrays...) {
		n := 4 * a.elems()
		out[a.Name] = f.body[off : off+n]
		off += n
	}
	return out
}

func ints(b []byte) []int {
	v := make([]int, len(b)/4)
	for i := range v {
		v[i] = int(int32(uint32(b[4*i]) | uint32(b[4*i+1])<<8 | uint32(b[4*i+2])<<16 | uint32(b[4*i+3])<<24))
	}
	return v
}
