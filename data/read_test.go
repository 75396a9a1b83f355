package data

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// TestDetect: the format from the path, and an error that asks for it by
// name where the path does not tell.
func TestDetect(t *testing.T) {
	dir := t.TempDir()
	mk := func(p string) string {
		p = filepath.Join(dir, p)
		os.MkdirAll(filepath.Dir(p), 0o755)
		os.WriteFile(p, nil, 0o644)
		return p
	}
	mk("npy/x.npy")
	mk("idx/train-images-idx3-ubyte.gz")
	mk("folder/cat/1.png")
	mk("empty/README")
	for _, tc := range []struct {
		path string
		want Format
		err  string
	}{
		{filepath.Join(dir, "npy"), FormatNPY, ""},
		{filepath.Join(dir, "idx"), FormatIDX, ""},
		{filepath.Join(dir, "folder"), FormatImageFolder, ""},
		{mk("a.CSV"), FormatCSV, ""},
		{mk("a.csv.gz"), FormatCSV, ""},
		{mk("a.npz"), FormatNPZ, ""},
		{mk("t10k-images-idx3-ubyte"), FormatIDX, ""},
		{mk("data_batch_1.bin"), FormatCIFAR, ""},
		{mk("x.npy"), "", "an NPY file holds one array"},
		{mk("a.parquet"), "", "name it with data_format"},
		{filepath.Join(dir, "empty"), "", "cannot tell its format"},
		{filepath.Join(dir, "nothing"), "", "no such file"},
	} {
		got, err := Detect(tc.path)
		if got != tc.want || (err == nil) != (tc.err == "") || err != nil && !strings.Contains(err.Error(), tc.err) {
			t.Errorf("%s: %q, %v; want %q, %q", tc.path, got, err, tc.want, tc.err)
		}
	}
	if _, err := ParseFormat("parquet"); err == nil {
		t.Error("ParseFormat(parquet) passed")
	}
}

// TestIDXAndCIFARFiles: an IDX images file with its labels file beside it,
// or the directory holding the pair, and a CIFAR batch of any number of
// records, each read as one dataset.
func TestIDXAndCIFARFiles(t *testing.T) {
	dir := t.TempDir()
	os.WriteFile(filepath.Join(dir, "a-images-idx3-ubyte.gz"), gzipped(idxBytes([]int{2, 2, 1}, []byte{0, 255, 51, 0})), 0o644)
	os.WriteFile(filepath.Join(dir, "a-labels-idx1-ubyte"), idxBytes([]int{2}, []byte{3, 1}), 0o644)
	for _, p := range []string{filepath.Join(dir, "a-images-idx3-ubyte.gz"), dir} {
		d, s, err := Read(p, Spec{}, nil)
		if err != nil {
			t.Fatal(err)
		}
		if !slices.Equal(d.X, []float32{0, 1, 0.2, 0}) || !slices.Equal(d.Y, []int32{3, 1}) || !slices.Equal(s.Shape, []int{2, 1, 1}) || len(s.Classes) != 4 {
			t.Errorf("%s: X %v Y %v schema %+v", p, d.X, d.Y, s)
		}
	}
	_, _, err := Read(dir, Spec{}, &Schema{Shape: []int{2, 1, 1}, Classes: []string{"a", "b"}})
	if err == nil || !strings.Contains(err.Error(), "label 3 of example 0 is not one of the 2 classes") {
		t.Errorf("a label beyond the run's classes: %v", err)
	}
	os.Remove(filepath.Join(dir, "a-labels-idx1-ubyte"))
	if _, _, err := Read(filepath.Join(dir, "a-images-idx3-ubyte.gz"), Spec{}, nil); err == nil || !strings.Contains(err.Error(), "no labels file") {
		t.Errorf("without labels: %v", err)
	}

	paths, files := writeCIFAR(t, t.TempDir(), 2)
	d, s, err := Read(paths[0], Spec{}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if d.Len() != 2 || !slices.Equal(s.Shape, []int{32, 32, 3}) || len(s.Classes) != 10 || d.Y[1] != int32(files[0][cifarRecord]) {
		t.Errorf("CIFAR batch: %d examples, schema %+v", d.Len(), s)
	}
	os.WriteFile(paths[1], files[1][:cifarRecord+5], 0o644)
	if _, _, err := Read(paths[1], Spec{}, nil); err == nil || !strings.Contains(err.Error(), "not a whole number of CIFAR-10 records") {
		t.Errorf("a cut batch: %v", err)
	}
}

// TestWriteReadBack: every format Write writes reads back as the same
// examples with the same class names, in the order written (an
// ImageFolder in class order); writing non-pixels as PNG is refused.
func TestWriteReadBack(t *testing.T) {
	d := &Dataset{Name: "src", Shape: []int{2, 2, 3}, Classes: 3, Names: []string{"ant", "bee", "cat"}}
	for i := range 5 {
		for j := range 12 {
			d.X = append(d.X, byteScale[(i*37+j*11)%256])
		}
		d.Y = append(d.Y, int32((i*2)%3))
	}
	idx := []int{4, 0, 3}
	byClass := slices.Clone(idx) // an ImageFolder reads back by class, then in the order written
	slices.SortStableFunc(byClass, func(a, b int) int { return int(d.Y[a] - d.Y[b]) })
	dir := t.TempDir()
	for _, f := range []Format{FormatImageFolder, FormatNPZ, FormatCSV} {
		t.Run(string(f), func(t *testing.T) {
			p := filepath.Join(dir, "out"+Ext(f))
			if err := Write(p, f, d, idx, "", nil); err != nil {
				t.Fatal(err)
			}
			sp := Spec{Classes: d.Names}
			if f == FormatCSV {
				sp.Scaling = ScaleNone
			}
			got, _, err := Read(p, sp, nil)
			if err != nil {
				t.Fatal(err)
			}
			want := Subset(d, idx)
			if f == FormatImageFolder {
				want = Subset(d, byClass)
			} else if f == FormatCSV {
				want.Shape = []int{12}
			}
			if !slices.Equal(got.X, want.X) || !slices.Equal(got.Y, want.Y) || !slices.Equal(got.Shape, want.Shape) || !slices.Equal(got.Names, d.Names) {
				t.Errorf("read back %v %v %v %v, want %v %v %v", got.Shape, got.Names, got.Y, got.X[:6], want.Shape, want.Y, want.X[:6])
			}
			os.RemoveAll(p)
		})
	}
	half := &Dataset{Name: "h", Shape: []int{1, 1, 1}, Classes: 2, X: []float32{0.5}, Y: []int32{0}}
	if err := Write(filepath.Join(dir, "h"), FormatImageFolder, half, []int{0}, "", nil); err == nil || !strings.Contains(err.Error(), "not an 8-bit pixel") {
		t.Errorf("0.5 as a PNG pixel: %v", err)
	}
}

// TestReadClients: a directory of client-K datasets in mixed formats, and
// a CSV with a client column, each give every client its examples in one
// dataset; a gap in the numbering, a client with another shape, and a CSV
// without a client column are errors.
func TestReadClients(t *testing.T) {
	dir := t.TempDir()
	s := &Schema{Shape: []int{2, 2, 1}, Classes: []string{"0", "1"}}
	d := &Dataset{Name: "src", Shape: []int{2, 2, 1}, Classes: 2, X: make([]float32, 5*4), Y: []int32{0, 1, 1, 0, 1}}
	for i := range d.X {
		d.X[i] = byteScale[i]
	}
	if err := Write(filepath.Join(dir, "client-0"), FormatImageFolder, d, []int{0, 1}, "", nil); err != nil {
		t.Fatal(err)
	}
	if err := Write(filepath.Join(dir, "client-1.npz"), FormatNPZ, d, []int{2, 3, 4}, "", nil); err != nil {
		t.Fatal(err)
	}
	writeFile(t, filepath.Join(dir, "README.md"), "not a client")
	all, parts, names, err := ReadClients(dir, Spec{}, s)
	if err != nil {
		t.Fatal(err)
	}
	if all.Len() != 5 || fmt.Sprint(parts) != "[[0 1] [2 3 4]]" || !slices.Equal(names, []string{"client-0", "client-1.npz"}) || !slices.Equal(all.Y, d.Y) || !slices.Equal(all.X, d.X) {
		t.Fatalf("%d examples, parts %v, names %v, Y %v", all.Len(), parts, names, all.Y)
	}
	if _, _, _, err := ReadClients(dir, Spec{}, &Schema{Shape: []int{4}, Classes: s.Classes}); err == nil || !strings.Contains(err.Error(), "(client 0)") {
		t.Errorf("a schema of another shape: %v", err)
	}
	os.Rename(filepath.Join(dir, "client-1.npz"), filepath.Join(dir, "client-2.npz"))
	if _, _, _, err := ReadClients(dir, Spec{}, s); err == nil || !strings.Contains(err.Error(), "no client-1") {
		t.Errorf("clients 0 and 2: %v", err)
	}
	if _, _, _, err := ReadClients(t.TempDir(), Spec{}, s); err == nil || !strings.Contains(err.Error(), "holds no client-K entries") {
		t.Errorf("an empty directory: %v", err)
	}

	csvPath := writeFile(t, filepath.Join(dir, "users.csv"), tinyCSV)
	sp := Spec{Categorical: []string{"colour"}, ClientColumn: "user"}
	_, cs, err := Read(csvPath, sp, nil)
	if err != nil {
		t.Fatal(err)
	}
	all, parts, names, err = ReadClients(csvPath, sp, cs)
	if err != nil {
		t.Fatal(err)
	}
	if all.Len() != 4 || fmt.Sprint(parts) != "[[1 2] [0 3]]" || !slices.Equal(names, []string{"ann", "bob"}) {
		t.Errorf("client column: parts %v names %v", parts, names)
	}
	sp.ClientColumn = "owner"
	if _, _, _, err := ReadClients(csvPath, sp, cs); err == nil || !strings.Contains(err.Error(), `no client column "owner"`) {
		t.Errorf("a CSV without its client column: %v", err)
	}
	sp.ClientColumn = ""
	if _, _, _, err := ReadClients(csvPath, sp, cs); err == nil || !strings.Contains(err.Error(), "needs client_column") {
		t.Errorf("a CSV without client column: %v", err)
	}
}
