package data

import (
	"archive/tar"
	"bufio"
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
	paths, err := locateCIFAR(o)
	if err != nil {
		return nil, err
	}
	return readCIFAR(paths, cifarPerFile)
}

// locateCIFAR finds (or downloads) the six batch files.
func locateCIFAR(o Options) ([]string, error) {
	want := make([][]string, len(cifarFiles))
	for i, f := range cifarFiles {
		want[i] = []string{f}
	}
	return locate("cifar10", o, []string{"cifar-10-batches-bin", "cifar10"}, want, fetchCIFAR)
}

// readCIFAR decodes the five train files and the test file (in cifarFiles'
// order), each of which must hold exactly perFile records. Load asks for the
// published 10000, so a truncated or padded file is an error; tests pass a
// small count to exercise the same decoder on files of a few records instead
// of writing 180 MB.
func readCIFAR(paths []string, perFile int) (*Federated, error) {
	train := newCIFAR(5 * perFile)
	test, err := readCIFARFile(paths[5], perFile)
	err = errors.Join(err, scanCIFARTrain(paths[:5], perFile, train.Y, func(i int, rec []byte) {
		cifarImage(train.X[i*3*cifarPixels:(i+1)*3*cifarPixels], rec)
	}))
	if err != nil {
		return nil, err
	}
	return &Federated{Train: train, Test: test}, nil
}

// readCIFARLabels is LoadLabels of CIFAR-10 (perFile records a file, as
// readCIFAR): the test set, and the training set's labels, its images
// read record by record and dropped (the labels are among them).
func readCIFARLabels(paths []string, perFile int) (*Federated, error) {
	train := newCIFAR(0)
	train.X, train.Y = nil, make([]int32, 5*perFile)
	test, err := readCIFARFile(paths[5], perFile)
	err = errors.Join(err, scanCIFARTrain(paths[:5], perFile, train.Y, func(int, []byte) {}))
	if err != nil {
		return nil, err
	}
	return &Federated{Train: train, Test: test}, nil
}

// readCIFARExamples is LoadExamples of CIFAR-10 (perFile records a file,
// as readCIFAR): the training examples idx, in that order.
func readCIFARExamples(paths []string, perFile int, idx []int) (*Dataset, error) {
	n := 5 * perFile
	at := map[int][]int{} // example -> its positions in idx
	for p, i := range idx {
		if i < 0 || i >= n {
			return nil, fmt.Errorf("data: cifar10: example %d of %d", i, n)
		}
		at[i] = append(at[i], p)
	}
	all := make([]int32, n)
	d := newCIFAR(len(idx))
	err := scanCIFARTrain(paths[:5], perFile, all, func(i int, rec []byte) {
		for _, p := range at[i] {
			cifarImage(d.X[p*3*cifarPixels:(p+1)*3*cifarPixels], rec)
		}
	})
	if err != nil {
		return nil, err
	}
	for p, i := range idx {
		d.Y[p] = all[i]
	}
	return d, nil
}

// readCIFARFile decodes one batch file of perFile records.
func readCIFARFile(path string, perFile int) (*Dataset, error) {
	test := newCIFAR(perFile)
	err := scanCIFARFile(path, perFile, func(r int, rec []byte) {
		test.Y[r] = int32(rec[0])
		cifarImage(test.X[r*3*cifarPixels:(r+1)*3*cifarPixels], rec)
	})
	return test, err
}

// scanCIFARTrain reads the five train files concurrently, their labels
// into y and each record, numbered across the files, to image.
func scanCIFARTrain(paths []string, perFile int, y []int32, image func(i int, rec []byte)) error {
	errs := make([]error, len(paths))
	var wg sync.WaitGroup
	for f, p := range paths {
		wg.Go(func() {
			errs[f] = scanCIFARFile(p, perFile, func(r int, rec []byte) {
				y[f*perFile+r] = int32(rec[0])
				image(f*perFile+r, rec)
			})
		})
	}
	wg.Wait()
	return errors.Join(errs...)
}

func newCIFAR(n int) *Dataset {
	return &Dataset{Name: "cifar10", X: make([]float32, n*3*cifarPixels), Y: make([]int32, n), Shape: []int{cifarSide, cifarSide, 3}, Classes: 10}
}

// scanCIFARFile reads one batch file of perFile records, one record at a
// time, and hands each (its label checked) to record, which must not keep
// it.
func scanCIFARFile(path string, perFile int, record func(r int, rec []byte)) error {
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return err
	}
	if st.Size() != int64(perFile*cifarRecord) {
		return fmt.Errorf("%s: %d bytes, want %d (%d records of %d bytes): the file is truncated or not a CIFAR-10 binary batch", path, st.Size(), perFile*cifarRecord, perFile, cifarRecord)
	}
	br := bufio.NewReaderSize(f, 1<<16)
	rec := make([]byte, cifarRecord)
	for r := range perFile {
		if _, err := io.ReadFull(br, rec); err != nil {
			return fmt.Errorf("%s: record %d: %w", path, r, truncated(err))
		}
		if rec[0] >= 10 {
			return fmt.Errorf("%s: record %d has label %d, want 0..9", path, r, rec[0])
		}
		record(r, rec)
	}
	return nil
}

// cifarImage decodes a record's image (three planes, CHW) into out (HWC,
// [0,1]).
func cifarImage(out []float32, rec []byte) {
	for c := range 3 {
		plane := rec[1+c*cifarPixels : 1+(c+1)*cifarPixels]
		for p, v := range plane {
			out[3*p+c] = byteScale[v]
		}
	}
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
