package data

import (
	"bytes"
	"compress/gzip"
	"crypto/md5"
	"encoding/hex"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// idxBytes builds an IDX file of unsigned bytes with the given dimensions
// and payload.
func idxBytes(dims []int, payload []byte) []byte {
	b := []byte{0, 0, 0x08, byte(len(dims))}
	for _, d := range dims {
		b = append(b, byte(d>>24), byte(d>>16), byte(d>>8), byte(d))
	}
	return append(b, payload...)
}

func gzipped(b []byte) []byte {
	var buf bytes.Buffer
	w := gzip.NewWriter(&buf)
	w.Write(b)
	w.Close()
	return buf.Bytes()
}

// TestParseIDX: a well-formed file decodes to its dimensions and payload,
// and every kind of damage is an error that says what is wrong.
func TestParseIDX(t *testing.T) {
	payload := []byte{1, 2, 3, 4, 5, 6}
	good := idxBytes([]int{2, 3}, payload)
	dims, got, err := parseIDX(bytes.NewReader(good))
	if err != nil || len(dims) != 2 || dims[0] != 2 || dims[1] != 3 || !bytes.Equal(got, payload) {
		t.Fatalf("parseIDX = %v, %v, %v", dims, got, err)
	}
	for _, tc := range []struct {
		name, want string
		b          []byte
	}{
		{"empty", "truncated", nil},
		{"short header", "truncated", good[:3]},
		{"bad magic", "not an IDX", append([]byte{1, 0}, good[2:]...)},
		{"float type", "element type 0x0d", append([]byte{0, 0, 0x0d}, good[3:]...)},
		{"no dimensions", "0 dimensions", []byte{0, 0, 8, 0}},
		{"short dimensions", "truncated", good[:9]},
		{"zero dimension", "is zero", idxBytes([]int{2, 0}, nil)},
		{"huge", "exceed", idxBytes([]int{1 << 16, 1 << 16}, nil)},
		{"truncated data", "truncated", good[:len(good)-1]},
		{"trailing data", "trailing", append(append([]byte{}, good...), 7)},
	} {
		_, _, err := parseIDX(bytes.NewReader(tc.b))
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: err = %v, want one mentioning %q", tc.name, err, tc.want)
		}
	}
}

// TestReadIDXFile: gzip and plain files both read; a truncated gzip stream,
// a corrupt gzip checksum and an MD5 mismatch are errors naming the file.
func TestReadIDXFile(t *testing.T) {
	dir := t.TempDir()
	raw := idxBytes([]int{3}, []byte{7, 8, 9})
	gz := gzipped(raw)
	sum := md5.Sum(gz)
	write := func(name string, b []byte) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, b, 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	for _, p := range []string{write("plain", raw), write("ok.gz", gz)} {
		dims, got, err := readIDXFile(p, "")
		if err != nil || len(dims) != 1 || dims[0] != 3 || !bytes.Equal(got, []byte{7, 8, 9}) {
			t.Errorf("%s: %v %v %v", p, dims, got, err)
		}
	}
	if _, _, err := readIDXFile(filepath.Join(dir, "ok.gz"), hex.EncodeToString(sum[:])); err != nil {
		t.Errorf("right md5: %v", err)
	}
	badSum := gzipped(raw)
	badSum[len(badSum)-5] ^= 1 // the CRC-32 in the gzip trailer
	for _, tc := range []struct {
		name, md5, want string
		b               []byte
	}{
		{"cut.gz", "", "truncated", gz[:len(gz)/2]},
		{"crc.gz", "", "checksum", badSum},
		{"md5.gz", strings.Repeat("0", 32), "md5", gz},
	} {
		p := write(tc.name, tc.b)
		_, _, err := readIDXFile(p, tc.md5)
		if err == nil || !strings.Contains(err.Error(), tc.want) || !strings.Contains(err.Error(), p) {
			t.Errorf("%s: err = %v, want one naming the file and %q", tc.name, err, tc.want)
		}
	}
}

// TestLoadIDXInconsistent: files that parse but disagree with the dataset
// (wrong image size, label count not the image count, a label of 10) are
// rejected with a message naming the problem.
func TestLoadIDXInconsistent(t *testing.T) {
	small := &idxSet{name: "tiny", subdirs: []string{""}, files: [4]remoteFile{{name: "ti"}, {name: "tl"}, {name: "si"}, {name: "sl"}}, train: 2, test: 1, rows: 2, cols: 2, classes: 10}
	for _, tc := range []struct {
		name, want string
		files      [4][]byte
	}{
		{"ok", "", [4][]byte{idxBytes([]int{2, 2, 2}, make([]byte, 8)), idxBytes([]int{2}, []byte{0, 9}), idxBytes([]int{1, 2, 2}, make([]byte, 4)), idxBytes([]int{1}, []byte{3})}},
		{"image size", "want [2 2 2]", [4][]byte{idxBytes([]int{2, 1, 4}, make([]byte, 8)), idxBytes([]int{2}, []byte{0, 9}), idxBytes([]int{1, 2, 2}, make([]byte, 4)), idxBytes([]int{1}, []byte{3})}},
		{"label count", "one per image", [4][]byte{idxBytes([]int{2, 2, 2}, make([]byte, 8)), idxBytes([]int{1}, []byte{0}), idxBytes([]int{1, 2, 2}, make([]byte, 4)), idxBytes([]int{1}, []byte{3})}},
		{"label value", "label 10", [4][]byte{idxBytes([]int{2, 2, 2}, make([]byte, 8)), idxBytes([]int{2}, []byte{0, 10}), idxBytes([]int{1, 2, 2}, make([]byte, 4)), idxBytes([]int{1}, []byte{3})}},
	} {
		dir := t.TempDir()
		for i, b := range tc.files {
			if err := os.WriteFile(filepath.Join(dir, small.files[i].name), b, 0o644); err != nil {
				t.Fatal(err)
			}
		}
		f, err := loadIDX(small, Options{Dir: dir, Offline: true})
		switch {
		case tc.want == "" && err != nil:
			t.Errorf("%s: %v", tc.name, err)
		case tc.want == "" && (f.Train.Len() != 2 || f.Test.Y[0] != 3 || f.Train.Y[1] != 9):
			t.Errorf("%s: decoded %+v", tc.name, f.Train)
		case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
			t.Errorf("%s: err = %v, want one mentioning %q", tc.name, err, tc.want)
		}
	}
}

// TestMissingFiles: with no files and downloads off, Load names the missing
// files, the directories it searched, and the flag and variable to set.
func TestMissingFiles(t *testing.T) {
	dir := t.TempDir()
	for _, tc := range []struct{ name, file, sub string }{
		{"mnist", "t10k-labels-idx1-ubyte.gz", "mnist"},
		{"fashion-mnist", "train-images-idx3-ubyte.gz", "fashion-mnist"},
		{"cifar10", "data_batch_3.bin", "cifar-10-batches-bin"},
	} {
		_, err := Load(tc.name, Options{Dir: dir, Offline: true})
		if err == nil {
			t.Fatalf("%s: loaded from an empty directory", tc.name)
		}
		for _, want := range []string{tc.file, filepath.Join(dir, tc.sub), "--data-dir", "$FEDPQ_DATA"} {
			if !strings.Contains(err.Error(), want) {
				t.Errorf("%s: error %q does not mention %q", tc.name, err, want)
			}
		}
	}
}

// FuzzParseIDX: no input makes the parser panic, and what it accepts is
// consistent: the payload is the product of the dimensions.
func FuzzParseIDX(f *testing.F) {
	f.Add(idxBytes([]int{2, 3}, []byte{1, 2, 3, 4, 5, 6}))
	f.Add(idxBytes([]int{1}, []byte{9}))
	f.Add([]byte{0, 0, 8, 3, 0, 0, 0, 1})
	f.Fuzz(func(t *testing.T, b []byte) {
		dims, payload, err := parseIDX(bytes.NewReader(b))
		if err != nil {
			return
		}
		n := 1
		for _, d := range dims {
			n *= d
		}
		if n != len(payload) || 4+4*len(dims)+n != len(b) {
			t.Fatalf("dims %v, payload %d bytes, input %d", dims, len(payload), len(b))
		}
	})
}
