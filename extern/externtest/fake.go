// Package externtest is a fake external trainer for tests: the test
// binary itself, started again with an environment variable set, speaks
// the trainer protocol (docs/trainer.md) without Python or torch, and
// fails in each of the ways a real trainer can.
//
// A test package that starts fakes calls Main first in its TestMain, and
// gives Command(mode) as a run's trainer:
//
//	func TestMain(m *testing.M) { externtest.Main(); os.Exit(m.Run()) }
//
// The fake's model is a linear classifier of two tensors, w [classes,
// features] and b [classes] (the shapes of fedpq's `linear` model), and its
// evaluation is that model's: the accuracy of argmax(w x + b) and the mean
// cross-entropy. Its training is not gradient descent but a step the tests
// can compute (Step): each class's row of w moves by lr*epochs/(1+mu)
// times the mean of that class's examples, b by lr*epochs/(1+mu) times the
// class's share (mu the request's FedProx prox_mu, which shrinks the step
// as a proximal term of weight mu would on a loss of curvature 1); its
// loss is the seed mod 1000. extern/testdata/numpy_trainer.py is the
// same trainer in Python, on the adapter's framing.
package externtest

import (
	"bufio"
	"fmt"
	"math"
	"os"
	"strings"
	"time"

	"github.com/fedpq/fedpq/extern/internal/frame"
)

// env holds the fake's modes in the process that is the fake.
const env = "FEDPQ_FAKE_TRAINER"

// Command is the command line of a fake trainer in mode: comma-separated
// faults of hang-start, version (protocol 2), hang-train, crash-train,
// crash-after=N (at its Nth train request), garbage (a line on stdout),
// error (an error reply), nan, missing, extra, shape, count (a wrong
// example count), loss-nan, update (replies with its update), slow-exit
// (ignores bye), other (describes a wider w), wrong-eval (evaluates w
// transposed); "" for none.
func Command(mode string) string {
	return fmt.Sprintf("%s=%q exec %q -test.run=^$", env, mode, os.Args[0])
}

// Main runs the fake trainer and exits, in a process started by Command;
// elsewhere it returns at once.
func Main() {
	mode, ok := os.LookupEnv(env)
	if !ok {
		return
	}
	if err := serve(mode); err != nil {
		fmt.Fprintln(os.Stderr, "fake trainer:", err)
		os.Exit(4)
	}
	os.Exit(0)
}

type dataset struct {
	x [][]float32
	y []int
}

type fake struct {
	modes         map[string]string
	out           *bufio.Writer
	classes, feat int
	data          map[string]*dataset
	trains        int
}

func (f *fake) has(k string) bool { _, ok := f.modes[k]; return ok }

func (f *fake) send(h *frame.Header, body ...[]byte) error { return frame.Write(f.out, h, body...) }

func serve(mode string) error {
	f := &fake{modes: map[string]string{}, out: bufio.NewWriter(os.Stdout), data: map[string]*dataset{}}
	for _, m := range strings.Split(mode, ",") {
		k, v, _ := strings.Cut(m, "=")
		f.modes[k] = v
	}
	if f.has("hang-start") {
		time.Sleep(time.Hour)
	}
	protocol := frame.Protocol
	if f.has("version") {
		protocol = 2
	}
	if err := f.send(&frame.Header{Type: "hello", Protocol: protocol, Trainer: "fake " + mode}); err != nil {
		return err
	}
	in := bufio.NewReader(os.Stdin)
	for {
		fr, err := frame.Read(in)
		if err != nil {
			return err
		}
		if fr.H.Type == "bye" {
			if f.has("slow-exit") {
				time.Sleep(time.Hour)
			}
			return nil
		}
		if err := f.handle(fr); err != nil {
			return err
		}
	}
}

func (f *fake) handle(fr *frame.Frame) error {
	h, arrays := fr.H, fr.Split()
	switch h.Type {
	case "setup":
		f.classes, f.feat = h.Classes, 1
		for _, d := range h.InputShape {
			f.feat *= d
		}
		wf := f.feat
		if f.has("other") {
			wf++
		}
		w, b := Init(f.classes, wf, h.Seed)
		return f.send(&frame.Header{Type: "model", Tensors: []frame.Array{
			{Name: "w", DType: "float32", Shape: []int{f.classes, wf}},
			{Name: "b", DType: "float32", Shape: []int{f.classes}},
		}}, frame.F32Bytes(w), frame.F32Bytes(b))
	case "data":
		d := f.data[h.Dataset]
		if d == nil {
			d = &dataset{x: make([][]float32, h.Size), y: make([]int, h.Size)}
			f.data[h.Dataset] = d
		}
		idx, xs, ys := frame.Ints(arrays["indices"]), frame.F32s(arrays["x"]), frame.Ints(arrays["y"])
		for j, i := range idx {
			d.x[i] = xs[j*f.feat : (j+1)*f.feat]
			d.y[i] = ys[j]
		}
		return f.send(&frame.Header{Type: "ok"})
	case "train":
		return f.train(h, arrays)
	case "evaluate":
		d, idx := f.data[h.Dataset], frame.Ints(arrays["indices"])
		w, b := frame.F32s(arrays["w"]), frame.F32s(arrays["b"])
		correct, loss := Evaluate(w, b, d.x, d.y, idx, f.classes, f.has("wrong-eval"))
		return f.send(&frame.Header{Type: "evaluated", Examples: len(idx), Correct: correct, Loss: frame.Float(loss), Seconds: 1e-4})
	}
	return f.send(&frame.Header{Type: "error", Message: "unknown message " + h.Type})
}

// train answers a train request, with the faults of the fake's modes.
func (f *fake) train(h frame.Header, arrays map[string][]byte) error {
	f.trains++
	switch {
	case f.has("hang-train"):
		time.Sleep(time.Hour)
	case f.has("crash-train"), f.modes["crash-after"] == fmt.Sprint(f.trains):
		fmt.Fprintln(os.Stderr, "Traceback (most recent call last):")
		fmt.Fprintln(os.Stderr, "RuntimeError: the fake trainer crashed")
		os.Exit(3)
	case f.has("garbage"):
		fmt.Fprintln(f.out, "epoch 1: loss 0.25")
		f.out.Flush()
		time.Sleep(time.Hour)
	case f.has("error"):
		return f.send(&frame.Header{Type: "error", Message: "Traceback (most recent call last):\nValueError: the fake trainer's own error"})
	}
	w, b := frame.F32s(arrays["w"]), frame.F32s(arrays["b"])
	idx := frame.Ints(arrays["indices"])
	d := f.data[h.Dataset]
	nw, nb := Step(w, b, d.x, d.y, idx, f.classes, h.LR, h.Epochs, h.ProxMu)
	r := &frame.Header{Type: "trained", Examples: len(idx), Loss: frame.Float(h.Seed % 1000), Seconds: 1e-4, Tensors: []frame.Array{
		{Name: "w", DType: "float32", Shape: []int{f.classes, f.feat}},
		{Name: "b", DType: "float32", Shape: []int{f.classes}},
	}}
	body := [][]byte{nil, frame.F32Bytes(nb)}
	switch {
	case f.has("nan"):
		nw[3] = float32(math.NaN())
	case f.has("missing"):
		r.Tensors, body = r.Tensors[:1], body[:1]
	case f.has("extra"):
		r.Tensors = append(r.Tensors, frame.Array{Name: "c", DType: "float32", Shape: []int{1}})
		body = append(body, frame.F32Bytes([]float32{1}))
	case f.has("shape"):
		r.Tensors[0].Shape = []int{f.feat, f.classes}
	case f.has("count"):
		r.Examples++
	case f.has("loss-nan"):
		r.Loss = frame.Float(math.NaN())
	case f.has("update"):
		r.Result = "update"
		for i := range nw {
			nw[i] -= w[i]
		}
		for i := range nb {
			nb[i] -= b[i]
		}
		body[1] = frame.F32Bytes(nb)
	}
	body[0] = frame.F32Bytes(nw)
	return f.send(r, body...)
}

// Init is the fake's initial model: w[i] = 0.01 (i mod 7 - 3), b the seed
// mod 5.
func Init(classes, feat int, seed uint64) (w, b []float32) {
	w = make([]float32, classes*feat)
	for i := range w {
		w[i] = float32(0.01 * float64(i%7-3))
	}
	b = make([]float32, classes)
	for i := range b {
		b[i] = float32(seed % 5)
	}
	return w, b
}

// Step is the fake's training of w [classes, features] and b on the
// examples idx of (x, y).
func Step(w, b []float32, x [][]float32, y []int, idx []int, classes int, lr float64, epochs int, mu float64) ([]float32, []float32) {
	feat := len(w) / classes
	sum := make([]float64, len(w))
	count := make([]float64, classes)
	for _, i := range idx {
		c := y[i]
		count[c]++
		for j, v := range x[i] {
			sum[c*feat+j] += float64(v)
		}
	}
	step := lr * float64(epochs) / float64(len(idx)) / (1 + mu)
	nw, nb := make([]float32, len(w)), make([]float32, len(b))
	for i := range w {
		nw[i] = float32(float64(w[i]) + step*sum[i])
	}
	for c := range b {
		nb[c] = float32(float64(b[c]) + step*count[c])
	}
	return nw, nb
}

// Evaluate is the fake's evaluation: the number of examples idx that
// argmax(w x + b) classifies right, and the mean cross-entropy; wrong reads
// w transposed, a model that is not fedpq's linear.
func Evaluate(w, b []float32, x [][]float32, y []int, idx []int, classes int, wrong bool) (correct int, loss float64) {
	feat := len(w) / classes
	logits := make([]float64, classes)
	for _, i := range idx {
		best := 0
		for c := range logits {
			z := float64(b[c])
			for j, v := range x[i] {
				k := c*feat + j
				if wrong {
					k = j*classes + c
				}
				z += float64(w[k]) * float64(v)
			}
			logits[c] = z
			if z > logits[best] {
				best = c
			}
		}
		if best == y[i] {
			correct++
		}
		m := logits[best]
		s := 0.0
		for _, z := range logits {
			s += math.Exp(z - m)
		}
		loss += m + math.Log(s) - logits[y[i]]
	}
	return correct, loss / float64(len(idx))
}
