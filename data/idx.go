package data

import (
	"bufio"
	"compress/gzip"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"
	"sync"
)

// maxIDXBytes bounds the payload an IDX header may announce, so a corrupt
// header is an error rather than an attempt to allocate terabytes. The
// largest file fedpq reads (Fashion-MNIST's train images) is 47 MB.
const maxIDXBytes = 1 << 30

// parseIDX decodes an IDX stream of unsigned bytes (element type 0x08, the
// only type MNIST-style datasets use): the magic number 0x0000 08 NDIMS, NDIMS
// big-endian uint32 dimensions, then exactly their product of bytes. Anything
// else (other magic, a zero dimension, short or trailing data) is an error,
// never a panic, so a damaged download is caught before training on it.
func parseIDX(r io.Reader) (dims []int, payload []byte, err error) {
	dims, size, err := parseIDXHeader(r)
	if err != nil {
		return nil, nil, err
	}
	payload, err = readExactly(r, size)
	if err != nil {
		return nil, nil, fmt.Errorf("IDX data (%v, %d bytes): %w", dims, size, truncated(err))
	}
	if err := idxEnd(r, dims, size); err != nil {
		return nil, nil, err
	}
	return dims, payload, nil
}

// parseIDXHeader reads an IDX stream's magic number and dimensions
// (parseIDX's checks), and returns the dimensions and the payload's size.
func parseIDXHeader(r io.Reader) (dims []int, size int, err error) {
	var magic [4]byte
	if _, err := io.ReadFull(r, magic[:]); err != nil {
		return nil, 0, fmt.Errorf("IDX header: %w", truncated(err))
	}
	if magic[0] != 0 || magic[1] != 0 {
		return nil, 0, fmt.Errorf("not an IDX file (magic %02x%02x%02x%02x)", magic[0], magic[1], magic[2], magic[3])
	}
	if magic[2] != 0x08 {
		return nil, 0, fmt.Errorf("IDX element type 0x%02x unsupported (want 0x08, unsigned byte)", magic[2])
	}
	nd := int(magic[3])
	if nd < 1 || nd > 4 {
		return nil, 0, fmt.Errorf("IDX with %d dimensions unsupported (want 1 to 4)", nd)
	}
	raw := make([]byte, 4*nd)
	if _, err := io.ReadFull(r, raw); err != nil {
		return nil, 0, fmt.Errorf("IDX dimensions: %w", truncated(err))
	}
	dims = make([]int, nd)
	size = 1
	for i := range dims {
		d := int(binary.BigEndian.Uint32(raw[4*i:]))
		if d == 0 {
			return nil, 0, fmt.Errorf("IDX dimension %d is zero", i)
		}
		if d > maxIDXBytes/size {
			return nil, 0, fmt.Errorf("IDX dimensions %v exceed %d bytes", dimsOf(raw), maxIDXBytes)
		}
		dims[i] = d
		size *= d
	}
	return dims, size, nil
}

// idxEnd checks that an IDX stream ends after its payload of size bytes.
func idxEnd(r io.Reader, dims []int, size int) error {
	var extra [1]byte
	switch _, err := io.ReadFull(r, extra[:]); {
	case err == nil:
		return fmt.Errorf("IDX data (%v): trailing bytes after %d bytes", dims, size)
	case err != io.EOF:
		// A gzip stream reports a bad checksum only here, at its end.
		return fmt.Errorf("IDX data (%v): %w", dims, err)
	}
	return nil
}

// parseIDXRows is parseIDX for a stream of examples (its first dimension)
// of which it keeps only the examples idx, in idx's order, each scaled to
// [0,1] as scaleBytes does: what scaleBytes of parseIDX's payload holds at
// those examples, without ever holding the rest. It reads the whole stream
// and checks it as parseIDX does.
func parseIDXRows(r io.Reader, idx []int) (dims []int, x []float32, err error) {
	dims, size, err := parseIDXHeader(r)
	if err != nil {
		return nil, nil, err
	}
	n, row := dims[0], size/dims[0]
	for _, i := range idx {
		if i < 0 || i >= n {
			return nil, nil, fmt.Errorf("IDX data (%v): example %d of %d", dims, i, n)
		}
	}
	// The positions of idx in the order of their examples, so that one
	// pass over the stream fills them all (an example asked for twice too).
	order := make([]int, len(idx))
	for p := range order {
		order[p] = p
	}
	slices.SortStableFunc(order, func(a, b int) int { return idx[a] - idx[b] })
	x = make([]float32, len(idx)*row)
	buf := make([]byte, row)
	next := 0
	for i := range n {
		if _, err := io.ReadFull(r, buf); err != nil {
			return nil, nil, fmt.Errorf("IDX data (%v, %d bytes): %w", dims, size, truncated(err))
		}
		for ; next < len(order) && idx[order[next]] == i; next++ {
			out := x[order[next]*row : (order[next]+1)*row]
			for j, v := range buf {
				out[j] = byteScale[v]
			}
		}
	}
	if err := idxEnd(r, dims, size); err != nil {
		return nil, nil, err
	}
	return dims, x, nil
}

// dimsOf renders raw big-endian dimensions for an error message.
func dimsOf(raw []byte) []uint32 {
	d := make([]uint32, len(raw)/4)
	for i := range d {
		d[i] = binary.BigEndian.Uint32(raw[4*i:])
	}
	return d
}

// truncated names an early end of input as truncation.
func truncated(err error) error {
	if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
		return errors.New("file truncated")
	}
	return err
}

// readExactly reads n bytes, growing its buffer as data arrives rather than
// trusting n up front: a header that lies about its size fails at the end of
// the data instead of allocating what it claims.
func readExactly(r io.Reader, n int) ([]byte, error) {
	buf := make([]byte, 0, min(n, 1<<20))
	for len(buf) < n {
		if len(buf) == cap(buf) {
			grown := make([]byte, len(buf), min(n, 2*cap(buf)))
			copy(grown, buf)
			buf = grown
		}
		k, err := io.ReadFull(r, buf[len(buf):cap(buf)])
		buf = buf[:len(buf)+k]
		if err != nil {
			return nil, err
		}
	}
	return buf, nil
}

// readIDXFile reads an IDX file, gzip-compressed or not (told apart by the
// gzip magic, not the name). When wantMD5 is not empty the file's MD5 is
// computed as it is read, at no extra pass, and a mismatch is an error.
func readIDXFile(path, wantMD5 string) (dims []int, payload []byte, err error) {
	err = readIDX(path, wantMD5, func(r io.Reader) (err error) {
		dims, payload, err = parseIDX(r)
		return err
	})
	return dims, payload, err
}

// readIDXRows is readIDXFile for a file of examples of which only idx are
// kept (parseIDXRows).
func readIDXRows(path, wantMD5 string, idx []int) (dims []int, x []float32, err error) {
	err = readIDX(path, wantMD5, func(r io.Reader) (err error) {
		dims, x, err = parseIDXRows(r, idx)
		return err
	})
	return dims, x, err
}

// readIDX opens an IDX file for parse, uncompressing it where it is gzip,
// and checks its MD5 (where wantMD5 is not empty) once parse has read it.
func readIDX(path, wantMD5 string, parse func(io.Reader) error) error {
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	defer f.Close()
	sum := newSum(wantMD5)
	br := bufio.NewReaderSize(io.TeeReader(f, sum), 1<<16)
	var r io.Reader = br
	if head, _ := br.Peek(2); len(head) == 2 && head[0] == 0x1f && head[1] == 0x8b {
		zr, err := gzip.NewReader(br)
		if err != nil {
			return fmt.Errorf("%s: %w", path, err)
		}
		r = zr
	}
	if err := parse(r); err != nil {
		return fmt.Errorf("%s: %w", path, err)
	}
	if _, err := io.Copy(io.Discard, br); err != nil {
		return fmt.Errorf("%s: %w", path, err)
	}
	return sum.check(path)
}

// idxSet describes an MNIST-style dataset: four IDX files in the order train
// images, train labels, test images, test labels.
type idxSet struct {
	name        string
	subdirs     []string // where to look under the data directory, in order
	mirrors     []string // base URLs, tried in order
	files       [4]remoteFile
	train, test int
	rows, cols  int
	classes     int
}

// The MD5s are the official ones, also recorded in shared/datasets/SOURCES.md.
var (
	mnist = &idxSet{
		name:    "mnist",
		subdirs: []string{"mnist", "", "MNIST/raw"},
		mirrors: []string{
			"https://ossci-datasets.s3.amazonaws.com/mnist/",
			"https://storage.googleapis.com/cvdf-datasets/mnist/",
			"http://yann.lecun.com/exdb/mnist/",
		},
		files: [4]remoteFile{
			{"train-images-idx3-ubyte.gz", "f68b3c2dcbeaaa9fbdd348bbdeb94873"},
			{"train-labels-idx1-ubyte.gz", "d53e105ee54ea40749a09fcbcd1e9432"},
			{"t10k-images-idx3-ubyte.gz", "9fb629c4189551a2d022fa330f9573f3"},
			{"t10k-labels-idx1-ubyte.gz", "ec29112dd5afa0611ce80d1b7f02629c"},
		},
		train: 60000, test: 10000, rows: 28, cols: 28, classes: 10,
	}
	fashionMNIST = &idxSet{
		name:    "fashion-mnist",
		subdirs: []string{"fashion-mnist", "", "FashionMNIST/raw"},
		mirrors: []string{"http://fashion-mnist.s3-website.eu-central-1.amazonaws.com/"},
		files: [4]remoteFile{
			{"train-images-idx3-ubyte.gz", "8d4fb7e6c68d591d4c3dfef9ec88bf0d"},
			{"train-labels-idx1-ubyte.gz", "25c81989df183df01b3e8a0aad5dffbe"},
			{"t10k-images-idx3-ubyte.gz", "bef4ecab320f06d8554ea6380940ec79"},
			{"t10k-labels-idx1-ubyte.gz", "bb300cfdad3c16e7a12a480ee83cd310"},
		},
		train: 60000, test: 10000, rows: 28, cols: 28, classes: 10,
	}
)

// loadIDX finds (or downloads) the set's files and decodes the train and test
// halves concurrently.
func loadIDX(s *idxSet, o Options) (*Federated, error) {
	paths, err := s.locate(o, 0, 1, 2, 3)
	if err != nil {
		return nil, err
	}
	var train, test *Dataset
	var errTrain, errTest error
	var wg sync.WaitGroup
	wg.Go(func() { train, errTrain = s.decode(paths[0], paths[1], s.files[0], s.files[1], s.train) })
	test, errTest = s.decode(paths[2], paths[3], s.files[2], s.files[3], s.test)
	wg.Wait()
	if err := errors.Join(errTrain, errTest); err != nil {
		return nil, err
	}
	return &Federated{Train: train, Test: test}, nil
}

// loadIDXLabels is LoadLabels of the set: its training images are neither
// fetched nor read.
func loadIDXLabels(s *idxSet, o Options) (*Federated, error) {
	paths, err := s.locate(o, 1, 2, 3)
	if err != nil {
		return nil, err
	}
	y, err := s.labels(paths[0], s.files[1], s.train)
	if err != nil {
		return nil, err
	}
	test, err := s.decode(paths[1], paths[2], s.files[2], s.files[3], s.test)
	if err != nil {
		return nil, err
	}
	return &Federated{Train: &Dataset{Name: s.name, Y: y, Shape: []int{s.rows, s.cols, 1}, Classes: s.classes}, Test: test}, nil
}

// loadIDXExamples is LoadExamples of the set: its training images read in
// one pass that keeps only idx.
func loadIDXExamples(s *idxSet, o Options, idx []int) (*Dataset, error) {
	paths, err := s.locate(o, 0, 1)
	if err != nil {
		return nil, err
	}
	dims, x, err := readIDXRows(paths[0], officialMD5(paths[0], s.files[0]), idx)
	if err != nil {
		return nil, err
	}
	if err := s.checkImages(paths[0], dims, s.train); err != nil {
		return nil, err
	}
	all, err := s.labels(paths[1], s.files[1], s.train)
	if err != nil {
		return nil, err
	}
	y := make([]int32, len(idx))
	for p, i := range idx {
		y[p] = all[i]
	}
	return &Dataset{Name: s.name, X: x, Y: y, Shape: []int{s.rows, s.cols, 1}, Classes: s.classes}, nil
}

// locate finds (or downloads) the set's files of the given indices in
// s.files, and returns their paths in that order.
func (s *idxSet) locate(o Options, files ...int) ([]string, error) {
	names := make([][]string, len(files))
	for i, f := range files {
		// An uncompressed copy (what gunzip leaves) is accepted too.
		names[i] = []string{s.files[f].name, strings.TrimSuffix(s.files[f].name, ".gz")}
	}
	return locate(s.name, o, s.subdirs, names, func(dir string, missing []int) error {
		for _, i := range missing {
			if err := fetchMirrors(s.mirrors, s.files[files[i]], dir); err != nil {
				return err
			}
		}
		return nil
	})
}

// decode reads one images file and its labels file and checks that they
// agree with each other and with the dataset's published sizes.
func (s *idxSet) decode(imgPath, lblPath string, imgFile, lblFile remoteFile, n int) (*Dataset, error) {
	dims, pix, err := readIDXFile(imgPath, officialMD5(imgPath, imgFile))
	if err != nil {
		return nil, err
	}
	if err := s.checkImages(imgPath, dims, n); err != nil {
		return nil, err
	}
	y, err := s.labels(lblPath, lblFile, n)
	if err != nil {
		return nil, err
	}
	return &Dataset{Name: s.name, X: scaleBytes(pix), Y: y, Shape: []int{s.rows, s.cols, 1}, Classes: s.classes}, nil
}

// checkImages checks an images file's dimensions against the published
// ones: n images of the set's rows and columns.
func (s *idxSet) checkImages(imgPath string, dims []int, n int) error {
	if len(dims) != 3 || dims[0] != n || dims[1] != s.rows || dims[2] != s.cols {
		return fmt.Errorf("%s: images of dimensions %v, want [%d %d %d]", imgPath, dims, n, s.rows, s.cols)
	}
	return nil
}

// labels reads a labels file of n labels, each below the set's classes.
func (s *idxSet) labels(lblPath string, lblFile remoteFile, n int) ([]int32, error) {
	ldims, lbl, err := readIDXFile(lblPath, officialMD5(lblPath, lblFile))
	if err != nil {
		return nil, err
	}
	if len(ldims) != 1 || ldims[0] != n {
		return nil, fmt.Errorf("%s: labels of dimensions %v, want [%d] (one per image)", lblPath, ldims, n)
	}
	y := make([]int32, n)
	for i, l := range lbl {
		if int(l) >= s.classes {
			return nil, fmt.Errorf("%s: label %d of example %d is not below %d", lblPath, l, i, s.classes)
		}
		y[i] = int32(l)
	}
	return y, nil
}

// officialMD5 is f's checksum when path is the official (gzip) file; an
// uncompressed copy has no published checksum and is checked by structure
// alone.
func officialMD5(path string, f remoteFile) string {
	if strings.HasSuffix(path, f.name) {
		return f.md5
	}
	return ""
}

// byteScale maps a pixel byte to [0,1].
var byteScale = func() (t [256]float32) {
	for i := range t {
		t[i] = float32(i) / 255
	}
	return t
}()

// scaleBytes converts pixels to float32 in [0,1].
func scaleBytes(b []byte) []float32 {
	x := make([]float32, len(b))
	for i, v := range b {
		x[i] = byteScale[v]
	}
	return x
}
