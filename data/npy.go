package data

import (
	"archive/zip"
	"bufio"
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"unicode/utf8"
)

// NumPy's NPY format (numpy.lib.format, version 1.0 to 3.0): the magic
// "\x93NUMPY", a major and minor version byte, the header's length (2
// bytes little-endian in version 1, 4 in versions 2 and 3), the header, a
// Python dict literal {'descr': ..., 'fortran_order': ..., 'shape': (...)},
// then the array's data in C order. An NPZ file (np.savez,
// np.savez_compressed) is a zip archive of NPY files, one per array,
// named NAME.npy.

const npyMagic = "\x93NUMPY"

// maxNPYBytes bounds the data an NPY header may announce, as maxIDXBytes
// does for IDX: a corrupt header is an error, not an allocation.
const maxNPYBytes = 1 << 32

// npyArray is an NPY array as read: its type, shape and raw data.
type npyArray struct {
	name  string // for errors: the file or archive member
	order binary.ByteOrder
	kind  byte // f, i, u, b, U, S
	size  int  // bytes per element
	shape []int
	raw   []byte
}

var (
	npyDescr   = regexp.MustCompile(`['"]descr['"]\s*:\s*['"]([^'"]*)['"]`)
	npyFortran = regexp.MustCompile(`['"]fortran_order['"]\s*:\s*(True|False)`)
	npyShape   = regexp.MustCompile(`['"]shape['"]\s*:\s*\(([^)]*)\)`)
)

// readNPY decodes one NPY stream; anything that is not a C-order array of
// numbers, booleans or fixed-width strings, with exactly the data its
// header announces, is an error.
func readNPY(r io.Reader, name string) (*npyArray, error) {
	var head [10]byte
	if _, err := io.ReadFull(r, head[:8]); err != nil || string(head[:6]) != npyMagic {
		return nil, fmt.Errorf("%s: not an NPY array (no \\x93NUMPY magic)", name)
	}
	var hlen int
	switch head[6] {
	case 1:
		if _, err := io.ReadFull(r, head[8:10]); err != nil {
			return nil, fmt.Errorf("%s: NPY header: %w", name, truncated(err))
		}
		hlen = int(binary.LittleEndian.Uint16(head[8:10]))
	case 2, 3:
		var l [4]byte
		if _, err := io.ReadFull(r, l[:]); err != nil {
			return nil, fmt.Errorf("%s: NPY header: %w", name, truncated(err))
		}
		hlen = int(binary.LittleEndian.Uint32(l[:]))
		if hlen > 1<<20 {
			return nil, fmt.Errorf("%s: NPY header of %d bytes", name, hlen)
		}
	default:
		return nil, fmt.Errorf("%s: NPY version %d.%d unsupported (want 1, 2 or 3)", name, head[6], head[7])
	}
	hb := make([]byte, hlen)
	if _, err := io.ReadFull(r, hb); err != nil {
		return nil, fmt.Errorf("%s: NPY header: %w", name, truncated(err))
	}
	a, err := parseNPYHeader(string(hb), name)
	if err != nil {
		return nil, err
	}
	n := a.size
	for _, d := range a.shape {
		if d < 0 || (d > 0 && n > maxNPYBytes/d) {
			return nil, fmt.Errorf("%s: NPY shape %v exceeds %d bytes", name, a.shape, int64(maxNPYBytes))
		}
		n *= d
	}
	if a.raw, err = readExactly(r, n); err != nil {
		return nil, fmt.Errorf("%s: NPY data (shape %v, %d bytes): %w", name, a.shape, n, truncated(err))
	}
	var extra [1]byte
	switch _, err := io.ReadFull(r, extra[:]); {
	case err == nil:
		return nil, fmt.Errorf("%s: NPY data (shape %v): trailing bytes after %d bytes", name, a.shape, n)
	case err != io.EOF:
		return nil, fmt.Errorf("%s: %w", name, err)
	}
	return a, nil
}

// parseNPYHeader reads the header's dict.
func parseNPYHeader(h, name string) (*npyArray, error) {
	d, f, s := npyDescr.FindStringSubmatch(h), npyFortran.FindStringSubmatch(h), npyShape.FindStringSubmatch(h)
	if d == nil || f == nil || s == nil {
		if strings.Contains(h, "'descr': [") {
			return nil, fmt.Errorf("%s: a structured NPY array (record dtype) is unsupported: save plain arrays x and y", name)
		}
		return nil, fmt.Errorf("%s: NPY header %q lacks descr, fortran_order or shape", name, strings.TrimSpace(h))
	}
	if f[1] == "True" {
		return nil, fmt.Errorf("%s: a Fortran-order NPY array is unsupported: save np.ascontiguousarray(a)", name)
	}
	a := &npyArray{name: name}
	for _, p := range strings.Split(s[1], ",") {
		if p = strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(p), "L")); p == "" {
			continue
		}
		v, err := strconv.Atoi(p)
		if err != nil {
			return nil, fmt.Errorf("%s: NPY shape (%s): %q is not a dimension", name, s[1], p)
		}
		a.shape = append(a.shape, v)
	}
	descr := d[1]
	if len(descr) < 2 {
		return nil, fmt.Errorf("%s: NPY dtype %q unsupported", name, descr)
	}
	switch descr[0] {
	case '<', '|', '=':
		a.order = binary.LittleEndian
	case '>':
		a.order = binary.BigEndian
	default:
		return nil, fmt.Errorf("%s: NPY dtype %q unsupported", name, descr)
	}
	a.kind = descr[1]
	size, err := strconv.Atoi(descr[2:])
	ok := err == nil && size > 0
	switch a.kind {
	case 'f':
		ok = ok && (size == 4 || size == 8)
	case 'i', 'u':
		ok = ok && (size == 1 || size == 2 || size == 4 || size == 8)
	case 'b':
		ok = ok && size == 1
	case 'U':
		size *= 4 // UTF-32 code units
	case 'S':
	default:
		ok = false
	}
	if !ok {
		hint := ""
		if a.kind == 'O' {
			hint = " (an object array needs pickle: save numbers or fixed-width strings, np.array(labels, dtype=str))"
		}
		return nil, fmt.Errorf("%s: NPY dtype %q unsupported%s: want float32/64, (u)int8-64, bool or fixed-width strings", name, descr, hint)
	}
	a.size = size
	return a, nil
}

// len is the number of elements.
func (a *npyArray) len() int { return len(a.raw) / a.size }

// number is element i as a float64, for numeric kinds.
func (a *npyArray) number(i int) float64 {
	b := a.raw[i*a.size : (i+1)*a.size]
	switch a.kind {
	case 'f':
		if a.size == 4 {
			return float64(math.Float32frombits(a.order.Uint32(b)))
		}
		return math.Float64frombits(a.order.Uint64(b))
	case 'b':
		return float64(b[0])
	}
	var u uint64
	switch a.size {
	case 1:
		u = uint64(b[0])
	case 2:
		u = uint64(a.order.Uint16(b))
	case 4:
		u = uint64(a.order.Uint32(b))
	default:
		u = a.order.Uint64(b)
	}
	if a.kind == 'i' {
		shift := 64 - 8*a.size
		return float64(int64(u<<shift) >> shift)
	}
	return float64(u)
}

// text is element i of a string array, without NumPy's padding NULs.
func (a *npyArray) text(i int) (string, error) {
	b := a.raw[i*a.size : (i+1)*a.size]
	if a.kind == 'S' {
		return string(bytes.TrimRight(b, "\x00")), nil
	}
	var sb strings.Builder
	for j := 0; j < len(b); j += 4 {
		r := rune(a.order.Uint32(b[j:]))
		if r == 0 {
			break
		}
		if !utf8.ValidRune(r) {
			return "", fmt.Errorf("%s: element %d is not valid text", a.name, i)
		}
		sb.WriteRune(r)
	}
	return sb.String(), nil
}

func (a *npyArray) isText() bool { return a.kind == 'U' || a.kind == 'S' }

// arrays are the x, y and optional classes arrays of an NPZ file or an
// NPY directory.
type arrays struct{ x, y, classes *npyArray }

// readNPZ reads the arrays x, y and, if present, classes of an NPZ file.
func readNPZ(path string) (*arrays, error) {
	zr, err := zip.OpenReader(path)
	if err != nil {
		if errors.Is(err, zip.ErrFormat) {
			return nil, fmt.Errorf("%s: not an NPZ file (a zip archive of .npy arrays, as np.savez writes): %w", path, err)
		}
		return nil, err
	}
	defer zr.Close()
	var a arrays
	var names []string
	for _, f := range zr.File {
		names = append(names, f.Name)
		var dst **npyArray
		switch f.Name {
		case "x.npy":
			dst = &a.x
		case "y.npy":
			dst = &a.y
		case "classes.npy":
			dst = &a.classes
		default:
			continue
		}
		rc, err := f.Open()
		if err != nil {
			return nil, fmt.Errorf("%s: %s: %w", path, f.Name, err)
		}
		*dst, err = readNPY(bufio.NewReader(rc), path+":"+f.Name)
		rc.Close()
		if err != nil {
			return nil, err
		}
	}
	if a.x == nil || a.y == nil {
		return nil, fmt.Errorf("%s: holds %v; want arrays named x and y (np.savez(path, x=X, y=Y))", path, names)
	}
	return &a, nil
}

// readNPYDir reads x.npy, y.npy and, if present, classes.npy in dir.
func readNPYDir(dir string) (*arrays, error) {
	var a arrays
	for _, m := range []struct {
		name     string
		dst      **npyArray
		optional bool
	}{{"x.npy", &a.x, false}, {"y.npy", &a.y, false}, {"classes.npy", &a.classes, true}} {
		p := filepath.Join(dir, m.name)
		f, err := os.Open(p)
		if m.optional && errors.Is(err, os.ErrNotExist) {
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("%s: an NPY dataset is a directory holding x.npy and y.npy: %w", dir, err)
		}
		*m.dst, err = readNPY(bufio.NewReader(f), p)
		f.Close()
		if err != nil {
			return nil, err
		}
	}
	return &a, nil
}

// dataset turns the arrays into a dataset fitting s (or sp, resolving the
// schema where s is nil). x is (n, features...) of numbers: uint8 values
// are pixels and scaled by 1/255, others taken as they are. Its example
// shape is (F) for a 2-D x, (H, W, 1) for a 3-D one and (H, W, C) for a
// 4-D one, except that a 4-D x whose second axis is 1 or 3 and last is
// not is PyTorch's (N, C, H, W) and is transposed to HWC. y is (n) or
// (n, 1): integer labels (indices of classes, if the arrays have them) or
// strings (class names).
func (a *arrays) dataset(name string, sp Spec, s *Schema) (*Dataset, *Schema, error) {
	x, y := a.x, a.y
	if x.isText() || len(x.shape) < 2 || len(x.shape) > 4 || slices.Contains(x.shape[1:], 0) {
		return nil, nil, fmt.Errorf("%s: x of shape %v and kind %q: want numbers of shape (examples, features...), 2 to 4 dimensions, none of them 0 but the first", x.name, x.shape, x.kind)
	}
	n := x.shape[0]
	if !(len(y.shape) == 1 || (len(y.shape) == 2 && y.shape[1] == 1)) || y.shape[0] != n {
		return nil, nil, fmt.Errorf("%s: y of shape %v for x of shape %v: want one label per example, shape (%d)", y.name, y.shape, x.shape, n)
	}
	if n == 0 {
		return nil, nil, fmt.Errorf("%s: no examples", x.name)
	}
	shape, at := exampleShape(x.shape)
	if s != nil && (s.Columns != nil || !slices.Equal(shape, s.Shape)) {
		return nil, nil, fmt.Errorf("%s: examples of shape %v, the run's are %v", x.name, shape, s.Shape)
	}
	f := product(shape)
	d := &Dataset{Name: name, X: make([]float32, n*f), Y: make([]int32, n), Shape: shape}
	for i := range n {
		for j := range f {
			v := x.number(i*f + at(j))
			if !finite(v) {
				return nil, nil, fmt.Errorf("%s: example %d, feature %d is %v: features must be finite numbers", x.name, i, j, v)
			}
			if x.kind == 'u' && x.size == 1 {
				d.X[i*f+j] = byteScale[uint8(v)]
			} else {
				d.X[i*f+j] = float32(v)
			}
		}
	}
	classes, err := a.labels(d.Y, sp, s)
	if err != nil {
		return nil, nil, err
	}
	d.Classes, d.Names = len(classes), classes
	return d, &Schema{Shape: slices.Clone(shape), Classes: classes}, nil
}

// labels fills y from the arrays' labels and returns the class list.
func (a *arrays) labels(y []int32, sp Spec, s *Schema) ([]string, error) {
	names, err := a.labelNames()
	if err != nil {
		return nil, err
	}
	if names == nil { // indices
		for i := range y {
			v := a.y.number(i)
			if v != math.Trunc(v) || v < 0 || v > math.MaxInt32 {
				return nil, fmt.Errorf("%s: label %v of example %d is not a class index", a.y.name, v, i)
			}
			y[i] = int32(v)
		}
		classes, err := indexLabels(y, s, sp.Classes)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", a.y.name, err)
		}
		return classes, nil
	}
	classes := resolveClasses(s, sp.Classes, names)
	if a.classes != nil && s == nil && sp.Classes == nil {
		classes, _ = a.classNames()
	}
	lab := newLabeler(classes)
	for i, n := range names {
		if y[i], err = lab.name(n); err != nil {
			return nil, fmt.Errorf("%s: example %d: %w", a.y.name, i, err)
		}
	}
	return classes, nil
}

// labelNames is each example's class name where the arrays name them (y of
// strings, or indices into a classes array), nil where y holds indices.
func (a *arrays) labelNames() ([]string, error) {
	n := a.y.len()
	if a.y.isText() {
		names := make([]string, n)
		for i := range names {
			var err error
			if names[i], err = a.y.text(i); err != nil {
				return nil, err
			}
		}
		return names, nil
	}
	if a.classes == nil {
		return nil, nil
	}
	classes, err := a.classNames()
	if err != nil {
		return nil, err
	}
	names := make([]string, n)
	for i := range names {
		v := a.y.number(i)
		if v != math.Trunc(v) || v < 0 || int(v) >= len(classes) {
			return nil, fmt.Errorf("%s: label %v of example %d is not an index of the %d classes of %s", a.y.name, v, i, len(classes), a.classes.name)
		}
		names[i] = classes[int(v)]
	}
	return names, nil
}

// classNames reads the classes array: distinct strings.
func (a *arrays) classNames() ([]string, error) {
	c := a.classes
	if !c.isText() || len(c.shape) != 1 {
		return nil, fmt.Errorf("%s: classes of shape %v and kind %q: want a 1-D array of class names", c.name, c.shape, c.kind)
	}
	names := make([]string, c.len())
	for i := range names {
		var err error
		if names[i], err = c.text(i); err != nil {
			return nil, err
		}
	}
	if err := checkClassNames(names); err != nil {
		return nil, fmt.Errorf("%s: %w", c.name, err)
	}
	return names, nil
}

// exampleShape is one example's HWC shape for x's shape, and where the
// j-th HWC value of an example is in x's order.
func exampleShape(xs []int) ([]int, func(int) int) {
	id := func(j int) int { return j }
	switch len(xs) {
	case 2:
		return []int{xs[1]}, id
	case 3:
		return []int{xs[1], xs[2], 1}, id
	}
	c, h, w := xs[1], xs[2], xs[3]
	if (c == 1 || c == 3) && w != 1 && w != 3 { // NCHW
		return []int{h, w, c}, func(j int) int {
			p, ch := j/c, j%c
			return ch*h*w + p
		}
	}
	return []int{xs[1], xs[2], xs[3]}, id
}

// writeNPZ writes examples idx of d to path as an uncompressed NPZ file
// (as np.savez writes it: quick to write and to read) with x (uint8 where
// every value is an 8-bit pixel, else float32, in d's shape), y (int64
// indices) and classes (the class names).
func writeNPZ(path string, d *Dataset, idx []int) error {
	f := d.Features()
	x := make([]float32, 0, len(idx)*f)
	y := make([]int64, len(idx))
	for j, i := range idx {
		x = append(x, d.X[i*f:(i+1)*f]...)
		y[j] = int64(d.Y[i])
	}
	xs := append([]int{len(idx)}, d.Shape...)
	var xb []byte
	descr := "|u1"
	if pix, err := pixelBytes(x); err == nil {
		xb = pix
	} else {
		descr = "<f4"
		xb = make([]byte, 4*len(x))
		for i, v := range x {
			binary.LittleEndian.PutUint32(xb[4*i:], math.Float32bits(v))
		}
	}
	yb := make([]byte, 8*len(y))
	for i, v := range y {
		binary.LittleEndian.PutUint64(yb[8*i:], uint64(v))
	}
	names := d.ClassNames()
	width := 1
	for _, n := range names {
		width = max(width, utf8.RuneCountInString(n))
	}
	cb := make([]byte, 4*width*len(names))
	for i, n := range names {
		j := 0
		for _, r := range n {
			binary.LittleEndian.PutUint32(cb[4*(i*width+j):], uint32(r))
			j++
		}
	}
	out, err := os.Create(path)
	if err != nil {
		return err
	}
	zw := zip.NewWriter(out)
	for _, m := range []struct {
		name, descr string
		shape       []int
		data        []byte
	}{{"x.npy", descr, xs, xb}, {"y.npy", "<i8", []int{len(y)}, yb}, {"classes.npy", "<U" + strconv.Itoa(width), []int{len(names)}, cb}} {
		w, err := zw.CreateHeader(&zip.FileHeader{Name: m.name, Method: zip.Store})
		if err == nil {
			err = writeNPY(w, m.descr, m.shape, m.data)
		}
		if err != nil {
			out.Close()
			return err
		}
	}
	err = zw.Close()
	if cerr := out.Close(); err == nil {
		err = cerr
	}
	return err
}

// writeNPY writes one array in NPY version 1.0, its header padded so that
// the data start at a multiple of 64 bytes, as NumPy does.
func writeNPY(w io.Writer, descr string, shape []int, data []byte) error {
	dims := make([]string, len(shape))
	for i, d := range shape {
		dims[i] = strconv.Itoa(d)
	}
	tuple := strings.Join(dims, ", ")
	if len(shape) == 1 {
		tuple += ","
	}
	h := fmt.Sprintf("{'descr': '%s', 'fortran_order': False, 'shape': (%s), }", descr, tuple)
	pad := 64 - (len(npyMagic)+4+len(h)+1)%64
	h += strings.Repeat(" ", pad%64) + "\n"
	var head bytes.Buffer
	head.WriteString(npyMagic)
	head.Write([]byte{1, 0})
	binary.Write(&head, binary.LittleEndian, uint16(len(h)))
	head.WriteString(h)
	if _, err := w.Write(head.Bytes()); err != nil {
		return err
	}
	_, err := w.Write(data)
	return err
}
