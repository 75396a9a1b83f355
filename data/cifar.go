package data

import (
	"archive/tar"
	"compress/gzip"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"sync"
)

// The binary version of CIFAR-10: each record is one label byte then the
// 32x32 image as three 1024-byte planes (red, green, blue; CHW), and each of
// the six files holds 10000 records.
const (
	cifarSide    = 32
	cifarPixels  = cifarSide * cifarSide
	cifarRecord  = 1 + 3*cifarPixels
	cifarPerFile = 10000
)

var (
	// cifarFiles are the five train batches then the test batch.
	cifarFiles = []string{"data_batch_1.bin", "data_batch_2.bin", "data_batch_3.bin", "data_batch_4.bin", "data_batch_5.bin", "test_batch.bin"}
	// cifarArchive is the official archive; its members carry no published
	// checksums, so the archive's MD5 vouches for them at download, and
	// files found on disk are checked by their exact size.
	cifarArchive = remoteFile{"cifar-10-binary.tar.gz", "c32a1d4ab5d03f1284b67883e8d87530"}
	cifarURL     = "https://www.cs.toronto.edu/~kriz/"
)

// loadCIFAR finds (or downloads) the six batch files and decodes them.
func loadCIFAR(o Options) (*Federated, error) {
	want := make([][]string, len(cifarFiles))
	for i, f := range cifarFiles {
		want[i] = []string{f}
	}
	paths, err := locate("cifar10", o, []string{"cifar-10-batches-bin", "cifar10"}, want, fetchCIFAR)
	if err != nil {
		return nil, err
	}
	return readCIFAR(paths, cifarPerFile)
}

// readCIFAR decodes the five train files and the test file (in cifarFiles'
// order), each of which must hold exactly perFile records. Load asks for the
// published 10000, so a truncated or padded file is an error; tests pass a
// small count to exercise the same decoder on files of a few records instead
// of writing 180 MB.
func readCIFAR(paths []string, perFile int) (*Federated, error) {
	train := newCIFAR(5 * perFile)
	test := newCIFAR(perFile)
	errs := make([]error, len(paths))
	var wg sync.WaitGroup
	for i, p := range paths {
		d, at := train, i*perFile
		if i == 5 {
			d, at = test, 0
		}
		wg.Go(func() {
			errs[i] = readCIFARFile(p, perFile, d.X[at*3*cifarPixels:(at+perFile)*3*cifarPixels], d.Y[at:at+perFile])
		})
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	return &Federated{Train: train, Test: test}, nil
}

func newCIFAR(n int) *Dataset {
	return &Dataset{Name: "cifar10", X: make([]float32, n*3*cifarPixels), Y: make([]int32, n), Shape: []int{cifarSide, cifarSide, 3}, Classes: 10}
}

// readCIFARFile decodes one batch file into x (HWC, [0,1]) and y.
func readCIFARFile(path string, perFile int, x []float32, y []int32) error {
	b, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	if len(b) != perFile*cifarRecord {
		return fmt.Errorf("%s: %d bytes, want %d (%d records of %d bytes): the file is truncated or not a CIFAR-10 binary batch", path, len(b), perFile*cifarRecord, perFile, cifarRecord)
	}
	for r := range perFile {
		rec := b[r*cifarRecord : (r+1)*cifarRecord]
		if rec[0] >= 10 {
			return fmt.Errorf("%s: record %d has label %d, want 0..9", path, r, rec[0])
		}
		y[r] = int32(rec[0])
		out := x[r*3*cifarPixels : (r+1)*3*cifarPixels]
		for c := range 3 {
			plane := rec[1+c*cifarPixels : 1+(c+1)*cifarPixels]
			for p, v := range plane {
				out[3*p+c] = byteScale[v]
			}
		}
	}
	return nil
}

// fetchCIFAR downloads the official archive into dir, checks its MD5, and
// extracts the batch files there; the archive is removed afterwards.
func fetchCIFAR(dir string, _ []int) error {
	archive := filepath.Join(dir, cifarArchive.name)
	if err := download(cifarURL+cifarArchive.name, archive, cifarArchive.md5); err != nil {
		return err
	}
	defer os.Remove(archive)
	return extractCIFAR(archive, dir)
}

// extractCIFAR writes the archive's batch files (cifar-10-batches-bin/NAME)
// into dir, each through a temporary file so that an interrupted extraction
// leaves no partial batch behind.
func extractCIFAR(archive, dir string) error {
	f, err := os.Open(archive)
	if err != nil {
		return err
	}
	defer f.Close()
	zr, err := gzip.NewReader(f)
	if err != nil {
		return fmt.Errorf("%s: %w", archive, err)
	}
	tr := tar.NewReader(zr)
	for {
		h, err := tr.Next()
		if err == io.EOF {
			return nil
		}
		if err != nil {
			return fmt.Errorf("%s: %w", archive, err)
		}
		name := filepath.Base(h.Name)
		if h.Typeflag != tar.TypeReg || h.Name != "cifar-10-batches-bin/"+name || !slices.Contains(cifarFiles, name) {
			continue
		}
		if err := writeAtomic(filepath.Join(dir, name), tr); err != nil {
			return err
		}
	}
}

// writeAtomic copies r to a temporary file beside dst and renames it there.
func writeAtomic(dst string, r io.Reader) error {
	tmp, err := os.CreateTemp(filepath.Dir(dst), ".fedpq-extract-*")
	if err != nil {
		return err
	}
	defer os.Remove(tmp.Name()) // fails harmlessly once renamed
	_, err = io.Copy(tmp, r)
	if cerr := tmp.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("%s: %w", dst, err)
	}
	return os.Rename(tmp.Name(), dst)
}
