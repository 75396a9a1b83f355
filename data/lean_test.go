package data

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// sameDataset fails t unless got is want, bit for bit: the same examples,
// labels, shape, classes and names.
func sameDataset(t *testing.T, what string, got, want *Dataset) {
	t.Helper()
	if got.Name != want.Name || !slices.Equal(got.Shape, want.Shape) || got.Classes != want.Classes || !slices.Equal(got.Names, want.Names) {
		t.Errorf("%s: %s %v %d classes %v, want %s %v %d classes %v", what, got.Name, got.Shape, got.Classes, got.Names, want.Name, want.Shape, want.Classes, want.Names)
	}
	if !slices.Equal(got.Y, want.Y) {
		t.Errorf("%s: %d labels differ from the %d wanted", what, len(got.Y), len(want.Y))
	}
	if !slices.Equal(got.X, want.X) {
		t.Errorf("%s: %d features differ from the %d wanted", what, len(got.X), len(want.X))
	}
}

// leanIdx is a set of training examples to read alone: out of order, one
// twice, the first and the last.
func leanIdx(n int) []int { return []int{n - 1, 7, 0, 123 % n, 7, n / 2} }

// TestLoadLabels: MNIST's LoadLabels is Load's test set and training
// labels, without the training images (Train.X nil, and the images file
// is not even looked for: a directory without it loads); LoadExamples is
// Subset of Load's training set, bit for bit, and an example out of range
// is an error.
func TestLoadLabels(t *testing.T) {
	needShared(t, "mnist")
	o := Options{Dir: sharedDir, Offline: true}
	full, err := Load("mnist", o)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	for _, f := range mnist.files[1:] {
		src, err := filepath.Abs(filepath.Join(sharedDir, "mnist", f.name))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.Symlink(src, filepath.Join(dir, f.name)); err != nil {
			t.Fatal(err)
		}
	}
	lean, err := LoadLabels("mnist", Options{Dir: dir, Offline: true})
	if err != nil {
		t.Fatalf("LoadLabels without the training images: %v", err)
	}
	if lean.Train.X != nil || lean.Train.Len() != 60000 {
		t.Errorf("LoadLabels: train X of %d, %d labels: want no X, 60000 labels", len(lean.Train.X), lean.Train.Len())
	}
	sameDataset(t, "LoadLabels test", lean.Test, full.Test)
	sameDataset(t, "LoadLabels train", lean.Train, &Dataset{Name: full.Train.Name, Y: full.Train.Y, Shape: full.Train.Shape, Classes: full.Train.Classes})

	idx := leanIdx(60000)
	got, err := LoadExamples("mnist", o, idx)
	if err != nil {
		t.Fatal(err)
	}
	sameDataset(t, "LoadExamples", got, Subset(full.Train, idx))
	if _, err := LoadExamples("mnist", o, []int{60000}); err == nil || !strings.Contains(err.Error(), "example 60000 of 60000") {
		t.Errorf("LoadExamples of example 60000: %v", err)
	}
}

// TestLoadLabelsSynthetic: synthetic data, generated, is Load's whole,
// and LoadExamples is Subset of it.
func TestLoadLabelsSynthetic(t *testing.T) {
	o := Options{Clients: 5, Seed: 3}
	full, err := Load("synthetic", o)
	if err != nil {
		t.Fatal(err)
	}
	lean, err := LoadLabels("synthetic", o)
	if err != nil {
		t.Fatal(err)
	}
	sameDataset(t, "train", lean.Train, full.Train)
	sameDataset(t, "test", lean.Test, full.Test)
	idx := leanIdx(full.Train.Len())
	got, err := LoadExamples("synthetic", o, idx)
	if err != nil {
		t.Fatal(err)
	}
	sameDataset(t, "LoadExamples", got, Subset(full.Train, idx))
}

// TestCIFARLabels: CIFAR-10's LoadLabels and LoadExamples on files of a few
// records are readCIFAR's test set, training labels and examples.
func TestCIFARLabels(t *testing.T) {
	const perFile = 3
	paths, _ := writeCIFAR(t, t.TempDir(), perFile)
	full, err := readCIFAR(paths, perFile)
	if err != nil {
		t.Fatal(err)
	}
	lean, err := readCIFARLabels(paths, perFile)
	if err != nil {
		t.Fatal(err)
	}
	if lean.Train.X != nil {
		t.Errorf("train X of %d, want none", len(lean.Train.X))
	}
	sameDataset(t, "test", lean.Test, full.Test)
	sameDataset(t, "train labels", lean.Train, &Dataset{Name: full.Train.Name, Y: full.Train.Y, Shape: full.Train.Shape, Classes: full.Train.Classes})
	idx := leanIdx(5 * perFile)
	got, err := readCIFARExamples(paths, perFile, idx)
	if err != nil {
		t.Fatal(err)
	}
	sameDataset(t, "examples", got, Subset(full.Train, idx))
	if _, err := readCIFARExamples(paths, perFile, []int{-1}); err == nil {
		t.Error("example -1: no error")
	}
}

// TestParseIDXRows: the rows kept are scaleBytes of parseIDX's payload
// there, and a stream parseIDX refuses (short, or with trailing bytes) is
// refused too, whichever rows are kept.
func TestParseIDXRows(t *testing.T) {
	payload := make([]byte, 5*2*3)
	for i := range payload {
		payload[i] = byte(37 * i)
	}
	good := idxBytes([]int{5, 2, 3}, payload)
	idx := []int{4, 1, 1, 0}
	dims, x, err := parseIDXRows(strings.NewReader(string(good)), idx)
	checkRows(t, dims, x, err, payload, idx)
	p := filepath.Join(t.TempDir(), "x.gz")
	if err := os.WriteFile(p, gzipped(good), 0o644); err != nil {
		t.Fatal(err)
	}
	dims, x, err = readIDXRows(p, "", idx)
	checkRows(t, dims, x, err, payload, idx)
	for name, b := range map[string][]byte{"short": good[:len(good)-1], "trailing": append(slices.Clone(good), 0)} {
		for _, keep := range [][]int{nil, {0}, {4}} {
			if _, _, err := parseIDXRows(strings.NewReader(string(b)), keep); err == nil {
				t.Errorf("%s, rows %v: no error", name, keep)
			}
		}
	}
	if _, _, err := parseIDXRows(strings.NewReader(string(good)), []int{5}); err == nil || !strings.Contains(err.Error(), "example 5 of 5") {
		t.Errorf("row 5 of 5: %v", err)
	}
}

func checkRows(t *testing.T, dims []int, x []float32, err error, payload []byte, idx []int) {
	t.Helper()
	if err != nil || !slices.Equal(dims, []int{5, 2, 3}) {
		t.Fatalf("dims %v, err %v", dims, err)
	}
	all := scaleBytes(payload)
	var want []float32
	for _, i := range idx {
		want = append(want, all[i*6:(i+1)*6]...)
	}
	if !slices.Equal(x, want) {
		t.Errorf("rows %v = %v, want %v", idx, x, want)
	}
}

// BenchmarkLoadMNIST: what a simulation (Load) and a deployed server
// (LoadLabels) allocate and take to read MNIST.
func BenchmarkLoadMNIST(b *testing.B) {
	if _, err := os.Stat(filepath.Join(sharedDir, "mnist")); err != nil {
		b.Skip(err)
	}
	o := Options{Dir: sharedDir, Offline: true}
	for _, l := range []struct {
		name string
		load func(string, Options) (*Federated, error)
	}{{"Load", Load}, {"LoadLabels", LoadLabels}} {
		b.Run(l.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if _, err := l.load("mnist", o); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
