package data

import (
	"archive/zip"
	"bytes"
	"encoding/binary"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// npy is one NPY array's bytes, as NumPy writes it (version 1.0, or 2.0
// with a 4-byte header length).
func npy(t *testing.T, version byte, descr string, shape []int, data []byte) []byte {
	t.Helper()
	var b bytes.Buffer
	if err := writeNPY(&b, descr, shape, data); err != nil {
		t.Fatal(err)
	}
	if version == 1 {
		return b.Bytes()
	}
	raw := b.Bytes()
	hlen := int(binary.LittleEndian.Uint16(raw[8:10]))
	out := append([]byte(npyMagic), 2, 0)
	out = binary.LittleEndian.AppendUint32(out, uint32(hlen))
	return append(out, raw[10:]...)
}

// npz writes an NPZ file of the named arrays.
func npz(t *testing.T, path string, members map[string][]byte) string {
	t.Helper()
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	zw := zip.NewWriter(f)
	keys := make([]string, 0, len(members))
	for k := range members {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	for _, k := range keys {
		w, err := zw.Create(k)
		if err != nil {
			t.Fatal(err)
		}
		w.Write(members[k])
	}
	if err := zw.Close(); err != nil {
		t.Fatal(err)
	}
	f.Close()
	return path
}

func le32f(v ...float32) []byte {
	b := make([]byte, 0, 4*len(v))
	for _, x := range v {
		b = binary.LittleEndian.AppendUint32(b, math.Float32bits(x))
	}
	return b
}

// utf32 is fixed-width NumPy unicode ('<Uw') of the strings.
func utf32(w int, s ...string) []byte {
	b := make([]byte, 4*w*len(s))
	for i, x := range s {
		for j, r := range []rune(x) {
			binary.LittleEndian.PutUint32(b[4*(i*w+j):], uint32(r))
		}
	}
	return b
}

// TestNPZ: float32 features keep their values, uint8 ones are pixels
// scaled by 1/255, big-endian int16 labels are indices, unicode labels are
// class names (sorted), a classes array names the indices in its own
// order, version 2 headers read, and PyTorch's NCHW becomes HWC.
func TestNPZ(t *testing.T) {
	dir := t.TempDir()
	x := npy(t, 1, "<f4", []int{2, 3}, le32f(0.5, -2, 7, 1, 2, 3))
	d, s, err := Read(npz(t, filepath.Join(dir, "a.npz"), map[string][]byte{"x.npy": x, "y.npy": npy(t, 2, ">i2", []int{2}, []byte{0, 1, 0, 0})}), Spec{}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(d.X, []float32{0.5, -2, 7, 1, 2, 3}) || !slices.Equal(d.Y, []int32{1, 0}) || !slices.Equal(s.Classes, []string{"0", "1"}) || !slices.Equal(s.Shape, []int{3}) {
		t.Fatalf("X %v Y %v schema %+v", d.X, d.Y, s)
	}
	d, s, err = Read(npz(t, filepath.Join(dir, "b.npz"), map[string][]byte{
		"x.npy": npy(t, 1, "|u1", []int{2, 2, 1}, []byte{0, 255, 51, 102}),
		"y.npy": npy(t, 1, "<U3", []int{2}, utf32(3, "dog", "cat")),
	}), Spec{}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(d.X, []float32{0, 1, 0.2, 0.4}) || !slices.Equal(d.Y, []int32{1, 0}) || !slices.Equal(s.Classes, []string{"cat", "dog"}) || !slices.Equal(s.Shape, []int{2, 1, 1}) {
		t.Fatalf("uint8 and unicode: X %v Y %v schema %+v", d.X, d.Y, s)
	}
	// Indices into a classes array, in the array's order; NCHW (1, 3, 2, 2).
	chw := make([]float32, 12)
	for i := range chw {
		chw[i] = float32(i)
	}
	d, s, err = Read(npz(t, filepath.Join(dir, "c.npz"), map[string][]byte{
		"x.npy":       npy(t, 1, "<f4", []int{1, 3, 2, 2}, le32f(chw...)),
		"y.npy":       npy(t, 1, "<i8", []int{1}, binary.LittleEndian.AppendUint64(nil, 1)),
		"classes.npy": npy(t, 1, "<U5", []int{2}, utf32(5, "zebra", "ant")),
	}), Spec{}, nil)
	if err != nil {
		t.Fatal(err)
	}
	hwc := []float32{0, 4, 8, 1, 5, 9, 2, 6, 10, 3, 7, 11}
	if !slices.Equal(d.X, hwc) || !slices.Equal(s.Shape, []int{2, 2, 3}) || !slices.Equal(s.Classes, []string{"zebra", "ant"}) || d.Y[0] != 1 {
		t.Fatalf("NCHW and classes: X %v shape %v classes %v Y %v", d.X, s.Shape, s.Classes, d.Y)
	}
	// The same as a directory of x.npy, y.npy and classes.npy.
	sub := filepath.Join(dir, "npydir")
	os.Mkdir(sub, 0o755)
	os.WriteFile(filepath.Join(sub, "x.npy"), npy(t, 1, "<f4", []int{1, 3, 2, 2}, le32f(chw...)), 0o644)
	os.WriteFile(filepath.Join(sub, "y.npy"), npy(t, 1, "<i8", []int{1}, binary.LittleEndian.AppendUint64(nil, 1)), 0o644)
	os.WriteFile(filepath.Join(sub, "classes.npy"), npy(t, 1, "<U5", []int{2}, utf32(5, "zebra", "ant")), 0o644)
	if d2, s2, err := Read(sub, Spec{}, nil); err != nil || !slices.Equal(d2.X, hwc) || !s2.Equal(s) {
		t.Errorf("an NPY directory: %v", err)
	}
}

// TestNPZErrors: what is not an NPZ of x and y, or does not fit the run,
// is an error saying what.
func TestNPZErrors(t *testing.T) {
	x := npy(t, 1, "<f4", []int{2, 1}, le32f(1, 2))
	y := npy(t, 1, "<i8", []int{2}, make([]byte, 16))
	bad := func(descr string, shape []int, data []byte) []byte { return npy(t, 1, descr, shape, data) }
	fortran := bytes.Replace(x, []byte("False"), []byte("True "), 1)
	for _, tc := range []struct {
		name    string
		members map[string][]byte
		s       *Schema
		want    string
	}{
		{"no y", map[string][]byte{"x.npy": x}, nil, "want arrays named x and y"},
		{"fortran order", map[string][]byte{"x.npy": fortran, "y.npy": y}, nil, "Fortran-order"},
		{"objects", map[string][]byte{"x.npy": bad("|O", []int{2, 1}, make([]byte, 16)), "y.npy": y}, nil, "needs pickle"},
		{"float16", map[string][]byte{"x.npy": bad("<f2", []int{2, 1}, make([]byte, 4)), "y.npy": y}, nil, `dtype "<f2" unsupported`},
		{"truncated", map[string][]byte{"x.npy": x[:len(x)-3], "y.npy": y}, nil, "file truncated"},
		{"trailing", map[string][]byte{"x.npy": append(slices.Clone(x), 0), "y.npy": y}, nil, "trailing bytes"},
		{"not npy", map[string][]byte{"x.npy": []byte("hello"), "y.npy": y}, nil, "not an NPY array"},
		{"labels per example", map[string][]byte{"x.npy": x, "y.npy": bad("<i8", []int{3}, make([]byte, 24))}, nil, "want one label per example"},
		{"nan", map[string][]byte{"x.npy": bad("<f4", []int{2, 1}, le32f(1, float32(math.NaN()))), "y.npy": y}, nil, "example 1, feature 0 is NaN"},
		{"negative label", map[string][]byte{"x.npy": x, "y.npy": bad("<i8", []int{2}, append(make([]byte, 8), 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff))}, nil, "label -1 of example 1 is not a class index"},
		{"fractional label", map[string][]byte{"x.npy": x, "y.npy": bad("<f4", []int{2}, le32f(0, 0.5))}, nil, "label 0.5 of example 1"},
		{"label beyond the run", map[string][]byte{"x.npy": x, "y.npy": bad("<i8", []int{2}, binary.LittleEndian.AppendUint64(make([]byte, 8), 2))}, &Schema{Shape: []int{1}, Classes: []string{"a", "b"}}, "label 2 of example 1 is not one of the 2 classes"},
		{"shape not the run's", map[string][]byte{"x.npy": x, "y.npy": y}, &Schema{Shape: []int{2}, Classes: []string{"a", "b"}}, "examples of shape [1], the run's are [2]"},
		{"huge header shape", map[string][]byte{"x.npy": bad("<f8", []int{1 << 20, 1 << 20}, nil)[:128], "y.npy": y}, nil, "exceeds"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, _, err := Read(npz(t, filepath.Join(t.TempDir(), "d.npz"), tc.members), Spec{}, tc.s)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("err = %v, want %q", err, tc.want)
			}
		})
	}
	p := writeFile(t, filepath.Join(t.TempDir(), "fake.npz"), "not a zip")
	if _, _, err := Read(p, Spec{}, nil); err == nil || !strings.Contains(err.Error(), "not an NPZ file") {
		t.Errorf("a text file named .npz: %v", err)
	}
}

// TestNumpyNPZ: arrays written by NumPy itself (np.savez_compressed:
// float64 x, int64 y; np.save: a uint8 image array and string labels)
// read as NumPy holds them. Skips where the system Python has no NumPy
// (Debian package python3-numpy).
func TestNumpyNPZ(t *testing.T) {
	py := "/usr/bin/python3"
	if err := exec.Command(py, "-c", "import numpy").Run(); err != nil {
		if os.Getenv("CI") != "" {
			t.Fatalf("CI without NumPy (Debian package python3-numpy): %v", err)
		}
		t.Skipf("no NumPy for %s (Debian package python3-numpy): %v", py, err)
	}
	dir := t.TempDir()
	script := `
import numpy as np, sys, os
d = sys.argv[1]
x = np.arange(12, dtype=np.float64).reshape(4, 3) / 7
np.savez_compressed(os.path.join(d, "a.npz"), x=x, y=np.array([2, 0, 1, 2]))
os.mkdir(os.path.join(d, "b"))
np.save(os.path.join(d, "b", "x.npy"), np.arange(8, dtype=np.uint8).reshape(2, 2, 2) * 30)
np.save(os.path.join(d, "b", "y.npy"), np.array(["cat", "dog"]))
`
	if out, err := exec.Command(py, "-c", script, dir).CombinedOutput(); err != nil {
		t.Fatalf("numpy: %v\n%s", err, out)
	}
	d, s, err := Read(filepath.Join(dir, "a.npz"), Spec{}, nil)
	if err != nil {
		t.Fatal(err)
	}
	for i, v := range d.X {
		if v != float32(float64(i)/7) {
			t.Fatalf("x[%d] = %v, want %v", i, v, float32(float64(i)/7))
		}
	}
	if !slices.Equal(d.Y, []int32{2, 0, 1, 2}) || len(s.Classes) != 3 {
		t.Errorf("y %v classes %v", d.Y, s.Classes)
	}
	d, s, err = Read(filepath.Join(dir, "b"), Spec{}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(s.Shape, []int{2, 2, 1}) || !slices.Equal(s.Classes, []string{"cat", "dog"}) || d.X[7] != byteScale[210] {
		t.Errorf("np.save uint8 and strings: shape %v classes %v x[7] %v", s.Shape, s.Classes, d.X[7])
	}
}

// FuzzReadNPY: any bytes as x.npy and y.npy are read, or refused with an
// error; never a panic or an allocation the header alone asks for.
func FuzzReadNPY(f *testing.F) {
	f.Add(npy(&testing.T{}, 1, "<f4", []int{2, 1}, le32f(1, 2)), npy(&testing.T{}, 1, "<i8", []int{2}, make([]byte, 16)))
	f.Add(npy(&testing.T{}, 2, "|u1", []int{1, 2, 2}, []byte{1, 2, 3, 4}), npy(&testing.T{}, 1, "<U3", []int{1}, utf32(3, "cat")))
	f.Add(npy(&testing.T{}, 1, ">i2", []int{1, 1, 3, 2, 2}, make([]byte, 24)), []byte(npyMagic))
	f.Fuzz(func(t *testing.T, x, y []byte) {
		xa, err := readNPY(bytes.NewReader(x), "x.npy")
		if err != nil {
			return
		}
		ya, err := readNPY(bytes.NewReader(y), "y.npy")
		if err != nil {
			return
		}
		a := &arrays{x: xa, y: ya}
		d, s, err := a.dataset("fuzz", Spec{}, nil)
		if err == nil && (d.Len()*s.Features() != len(d.X) || s.Validate() != nil && len(s.Classes) >= 2) {
			t.Fatalf("%d examples of %v, %d values; schema %+v", d.Len(), s.Shape, len(d.X), s)
		}
	})
}
