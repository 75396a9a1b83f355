package data

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/fedpq/fedpq/corr"
)

// writeCIFAR writes the six batch files into dir, each of perFile records
// in the binary format (label byte, then R, G and B planes of 32x32), with
// pseudo-random pixels and labels, and returns the paths and the bytes.
func writeCIFAR(t *testing.T, dir string, perFile int) ([]string, [][]byte) {
	t.Helper()
	src := corr.Derive(corr.SeedSecret(9), "test/cifar")
	paths := make([]string, len(cifarFiles))
	files := make([][]byte, len(cifarFiles))
	for i, name := range cifarFiles {
		b := make([]byte, perFile*cifarRecord)
		src.Read(b)
		for r := range perFile {
			b[r*cifarRecord] %= 10
		}
		paths[i], files[i] = filepath.Join(dir, name), b
		if err := os.WriteFile(paths[i], b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return paths, files
}

// TestCIFARRoundTrip: records written in the binary format come back with
// their labels, and every pixel lands at its HWC place scaled by 1/255:
// X[((r*32+h)*32+w)*3+c] = byte[1 + c*1024 + h*32 + w] / 255.
func TestCIFARRoundTrip(t *testing.T) {
	const perFile = 3
	paths, files := writeCIFAR(t, t.TempDir(), perFile)
	f, err := readCIFAR(paths, perFile)
	if err != nil {
		t.Fatal(err)
	}
	if f.Train.Len() != 5*perFile || f.Test.Len() != perFile || f.Train.Features() != 3072 || f.Train.Classes != 10 {
		t.Fatalf("train %d, test %d, features %d", f.Train.Len(), f.Test.Len(), f.Train.Features())
	}
	for i, b := range files {
		d, base := f.Train, i*perFile
		if i == 5 {
			d, base = f.Test, 0
		}
		for r := range perFile {
			rec := b[r*cifarRecord:]
			if d.Y[base+r] != int32(rec[0]) {
				t.Fatalf("file %d record %d: label %d, want %d", i, r, d.Y[base+r], rec[0])
			}
			for c := range 3 {
				for h := range 32 {
					for w := range 32 {
						got := d.X[(((base+r)*32+h)*32+w)*3+c]
						if want := float32(rec[1+c*1024+h*32+w]) / 255; got != want {
							t.Fatalf("file %d record %d pixel (%d,%d,%d) = %v, want %v", i, r, h, w, c, got, want)
						}
					}
				}
			}
		}
	}
}

// TestCIFARInvalid: a file one byte short, and a label of 10, are errors
// naming the file; so is Load on files holding fewer than the published
// 10000 records, found here in the alternative directory DIR/cifar10.
func TestCIFARInvalid(t *testing.T) {
	dir := t.TempDir()
	paths, files := writeCIFAR(t, dir, 2)
	os.WriteFile(paths[2], files[2][:len(files[2])-1], 0o644)
	if _, err := readCIFAR(paths, 2); err == nil || !strings.Contains(err.Error(), paths[2]) || !strings.Contains(err.Error(), "truncated") {
		t.Errorf("short file: %v", err)
	}
	files[2][cifarRecord] = 10
	os.WriteFile(paths[2], files[2], 0o644)
	if _, err := readCIFAR(paths, 2); err == nil || !strings.Contains(err.Error(), "label 10") {
		t.Errorf("label 10: %v", err)
	}

	root := t.TempDir()
	os.Mkdir(filepath.Join(root, "cifar10"), 0o755)
	writeCIFAR(t, filepath.Join(root, "cifar10"), 2)
	_, err := Load("cifar10", Options{Dir: root, Offline: true})
	if err == nil || !strings.Contains(err.Error(), filepath.Join(root, "cifar10", "data_batch_1.bin")) || !strings.Contains(err.Error(), "want 30730000") {
		t.Errorf("Load of 2-record files: %v", err)
	}
}

// TestExtractCIFAR: the batch files come out of an archive laid out like the
// official one; other members (the readme, a stray file elsewhere) do not.
func TestExtractCIFAR(t *testing.T) {
	dir := t.TempDir()
	var buf bytes.Buffer
	zw := gzip.NewWriter(&buf)
	tw := tar.NewWriter(zw)
	members := map[string]string{
		"cifar-10-batches-bin/data_batch_1.bin": "one",
		"cifar-10-batches-bin/test_batch.bin":   "test",
		"cifar-10-batches-bin/readme.html":      "readme",
		"elsewhere/data_batch_2.bin":            "stray",
	}
	for _, name := range []string{"cifar-10-batches-bin/data_batch_1.bin", "cifar-10-batches-bin/test_batch.bin", "cifar-10-batches-bin/readme.html", "elsewhere/data_batch_2.bin"} {
		tw.WriteHeader(&tar.Header{Name: name, Mode: 0o644, Size: int64(len(members[name])), Typeflag: tar.TypeReg})
		tw.Write([]byte(members[name]))
	}
	tw.Close()
	zw.Close()
	archive := filepath.Join(dir, "a.tar.gz")
	os.WriteFile(archive, buf.Bytes(), 0o644)
	if err := extractCIFAR(archive, dir); err != nil {
		t.Fatal(err)
	}
	entries, _ := os.ReadDir(dir)
	var names []string
	for _, e := range entries {
		names = append(names, e.Name())
	}
	if strings.Join(names, " ") != "a.tar.gz data_batch_1.bin test_batch.bin" {
		t.Errorf("extracted %v", names)
	}
	if b, _ := os.ReadFile(filepath.Join(dir, "test_batch.bin")); string(b) != "test" {
		t.Errorf("test_batch.bin holds %q", b)
	}
}
