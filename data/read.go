package data

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
)

// Detect tells a dataset's format from its path: a directory holding
// x.npy and y.npy is npy, one holding an IDX images file (NAME-idx3-ubyte,
// gzipped or not) is idx, one with subdirectories an imagefolder; a file
// named .csv or .csv.gz is csv, .npz npz, *-idx3-ubyte[.gz] idx and .bin a
// CIFAR batch. Anything else is an error that asks for the format by name.
func Detect(path string) (Format, error) {
	st, err := os.Stat(path)
	if err != nil {
		return "", fmt.Errorf("data: %w", err)
	}
	if st.IsDir() {
		if exists(filepath.Join(path, "x.npy")) {
			return FormatNPY, nil
		}
		entries, err := os.ReadDir(path)
		if err != nil {
			return "", fmt.Errorf("data: %w", err)
		}
		sub := false
		for _, e := range entries {
			if strings.Contains(e.Name(), "idx3-ubyte") && !e.IsDir() {
				return FormatIDX, nil
			}
			sub = sub || (e.IsDir() && !strings.HasPrefix(e.Name(), "."))
		}
		if sub {
			return FormatImageFolder, nil
		}
		return "", fmt.Errorf("data: %s: cannot tell its format: a directory of a dataset holds class subdirectories of images (imagefolder), x.npy and y.npy (npy) or IDX files (idx); name the format with data_format, or a client's --data-format", path)
	}
	name := strings.ToLower(filepath.Base(path))
	switch {
	case strings.HasSuffix(name, ".csv") || strings.HasSuffix(name, ".csv.gz"):
		return FormatCSV, nil
	case strings.HasSuffix(name, ".npz"):
		return FormatNPZ, nil
	case strings.HasSuffix(name, ".npy"):
		return "", fmt.Errorf("data: %s: an NPY file holds one array; give the directory that holds x.npy and y.npy, or an .npz file with arrays x and y", path)
	case strings.Contains(name, "idx3-ubyte"):
		return FormatIDX, nil
	case strings.HasSuffix(name, ".bin"):
		return FormatCIFAR, nil
	}
	return "", fmt.Errorf("data: %s: cannot tell its format from its name (.csv, .csv.gz, .npz, *-idx3-ubyte, .bin); name it with data_format, or a client's --data-format (%s)", path, formatList())
}

func formatList() string {
	s := make([]string, len(Formats))
	for i, f := range Formats {
		s[i] = string(f)
	}
	return strings.Join(s, ", ")
}

func exists(path string) bool {
	_, err := os.Stat(path)
	return err == nil
}

// Read reads the one dataset at path, in the format sp names or, if none,
// the one Detect finds: an ImageFolder, a CSV, an NPZ file, a directory of
// x.npy and y.npy, an IDX images file with its labels, or a CIFAR-10 batch.
// With s nil it resolves the schema from this dataset and sp (what a run
// does with its evaluation set); with s given it reads the data into s,
// and anything that does not fit (a label not among its classes, a
// category not among a column's, another shape or columns) is an error
// (what each client does). It returns the dataset and its schema.
func Read(path string, sp Spec, s *Schema) (*Dataset, *Schema, error) {
	d, rs, _, err := read(path, sp, s)
	return d, rs, err
}

func read(path string, sp Spec, s *Schema) (*Dataset, *Schema, []string, error) {
	if err := sp.Validate(); err != nil {
		return nil, nil, nil, err
	}
	if s != nil {
		if err := s.Validate(); err != nil {
			return nil, nil, nil, err
		}
	}
	format := sp.Format
	if format == FormatAuto {
		var err error
		if format, err = Detect(path); err != nil {
			return nil, nil, nil, err
		}
	}
	name := strings.TrimSuffix(filepath.Base(path), filepath.Ext(path))
	var d *Dataset
	var rs *Schema
	var clients []string
	var err error
	switch format {
	case FormatImageFolder:
		d, rs, err = readImageFolder(path, sp, s)
	case FormatCSV:
		var t *Table
		if t, err = readTable(path); err == nil {
			d, rs, clients, err = t.dataset(name, sp, s)
		}
	case FormatNPZ, FormatNPY:
		var a *arrays
		if format == FormatNPZ {
			a, err = readNPZ(path)
		} else {
			a, err = readNPYDir(path)
		}
		if err == nil {
			d, rs, err = a.dataset(name, sp, s)
		}
	case FormatIDX:
		d, rs, err = readIDXSet(path, sp, s)
	case FormatCIFAR:
		d, rs, err = readCIFARBatch(path, sp, s)
	}
	if err != nil {
		if !strings.HasPrefix(err.Error(), "data: ") {
			err = fmt.Errorf("data: %w", err)
		}
		return nil, nil, nil, err
	}
	if s != nil && !s.Equal(rs) { // unreachable: each reader fits s
		return nil, nil, nil, fmt.Errorf("data: %s: read with schema %v, not the run's %v", path, rs, s)
	}
	return d, rs, clients, nil
}

// readIDXSet reads an IDX images file ([n, h, w] or [n, h, w, c] bytes,
// pixels) and its labels file ([n] bytes): path is the images file (the
// labels are the file of the same name with labels-idx1 for images-idx3)
// or a directory holding exactly one of each.
func readIDXSet(path string, sp Spec, s *Schema) (*Dataset, *Schema, error) {
	images, labels, err := idxPair(path)
	if err != nil {
		return nil, nil, err
	}
	dims, pix, err := readIDXFile(images, "")
	if err != nil {
		return nil, nil, err
	}
	if len(dims) != 3 && len(dims) != 4 {
		return nil, nil, fmt.Errorf("%s: IDX images of dimensions %v, want [n height width] or [n height width channels]", images, dims)
	}
	ldims, lbl, err := readIDXFile(labels, "")
	if err != nil {
		return nil, nil, err
	}
	if len(ldims) != 1 || ldims[0] != dims[0] {
		return nil, nil, fmt.Errorf("%s: labels of dimensions %v, want [%d] (one per image of %s)", labels, ldims, dims[0], images)
	}
	shape := append(slices.Clone(dims[1:]), 1)[:3]
	if len(dims) == 4 {
		shape = slices.Clone(dims[1:])
	}
	if s != nil && !slices.Equal(shape, s.Shape) {
		return nil, nil, fmt.Errorf("%s: images of shape %v, the run's examples are %v", images, shape, s.Shape)
	}
	y := make([]int32, len(lbl))
	for i, v := range lbl {
		y[i] = int32(v)
	}
	classes, err := indexLabels(y, s, sp.Classes)
	if err != nil {
		return nil, nil, fmt.Errorf("%s: %w", labels, err)
	}
	d := &Dataset{Name: filepath.Base(images), X: scaleBytes(pix), Y: y, Shape: shape, Classes: len(classes), Names: classes}
	return d, &Schema{Shape: slices.Clone(shape), Classes: classes}, nil
}

// idxPair finds the images and labels files of an IDX dataset.
func idxPair(path string) (images, labels string, err error) {
	st, err := os.Stat(path)
	if err != nil {
		return "", "", err
	}
	if !st.IsDir() {
		dir, base := filepath.Split(path)
		lb := strings.Replace(base, "images-idx3", "labels-idx1", 1)
		if lb == base {
			return "", "", fmt.Errorf("%s: not an IDX images file (NAME-images-idx3-ubyte, as MNIST's): its labels file cannot be found by name", path)
		}
		for _, cand := range []string{lb, strings.TrimSuffix(lb, ".gz"), lb + ".gz"} {
			if exists(filepath.Join(dir, cand)) {
				return path, filepath.Join(dir, cand), nil
			}
		}
		return "", "", fmt.Errorf("%s: no labels file %s beside it", path, filepath.Join(dir, lb))
	}
	entries, err := os.ReadDir(path)
	if err != nil {
		return "", "", err
	}
	var imgs, lbls []string
	for _, e := range entries {
		switch n := e.Name(); {
		case strings.Contains(n, "idx3-ubyte"):
			imgs = append(imgs, n)
		case strings.Contains(n, "idx1-ubyte"):
			lbls = append(lbls, n)
		}
	}
	if len(imgs) != 1 || len(lbls) != 1 {
		return "", "", fmt.Errorf("%s: %d IDX images files %v and %d labels files %v: an IDX dataset is one of each; give the images file itself", path, len(imgs), imgs, len(lbls), lbls)
	}
	return filepath.Join(path, imgs[0]), filepath.Join(path, lbls[0]), nil
}

// readCIFARBatch reads one CIFAR-10 binary batch file of any number of
// records, classes "0" to "9" unless the schema or sp names them.
func readCIFARBatch(path string, sp Spec, s *Schema) (*Dataset, *Schema, error) {
	st, err := os.Stat(path)
	if err != nil {
		return nil, nil, err
	}
	if st.Size() == 0 || st.Size()%cifarRecord != 0 {
		return nil, nil, fmt.Errorf("%s: %d bytes, not a whole number of CIFAR-10 records of %d bytes (1 label byte, 3072 pixels; CIFAR-100's records of 2 label bytes are unsupported)", path, st.Size(), cifarRecord)
	}
	n := int(st.Size() / cifarRecord)
	shape := []int{cifarSide, cifarSide, 3}
	if s != nil && !slices.Equal(shape, s.Shape) {
		return nil, nil, fmt.Errorf("%s: CIFAR images of shape %v, the run's examples are %v", path, shape, s.Shape)
	}
	d, err := readCIFARFile(path, n)
	if err != nil {
		return nil, nil, err
	}
	d.Name = filepath.Base(path)
	declared := sp.Classes
	if declared == nil && s == nil {
		declared = indexNames(10)
	}
	classes, err := indexLabels(d.Y, s, declared)
	if err != nil {
		return nil, nil, fmt.Errorf("%s: %w", path, err)
	}
	d.Classes, d.Names = len(classes), classes
	return d, &Schema{Shape: shape, Classes: classes}, nil
}

// clientEntry names a client's dataset in a per-client directory: client-K,
// with an extension or not (client-3, client-3.csv, client-3.npz).
var clientEntry = regexp.MustCompile(`^client-(\d+)(\.[A-Za-z0-9.]+)?$`)

// ClientNumber is K of a per-client directory's entry named client-K,
// with an extension or not, as fedpq split names them.
func ClientNumber(name string) (int, bool) {
	m := clientEntry.FindStringSubmatch(name)
	if m == nil {
		return 0, false
	}
	k, err := strconv.Atoi(m[1])
	return k, err == nil && k <= 1<<20
}

// ClientPaths lists the datasets of a per-client directory: its entries
// client-0, client-1, ... client-(N-1), each a dataset of its own (a
// directory or a file), in client order. Other entries (the test set, a
// README) are not clients. A gap or a client named twice is an error.
func ClientPaths(dir string) ([]string, error) {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil, fmt.Errorf("data: %w", err)
	}
	byK := map[int]string{}
	for _, e := range entries {
		k, ok := ClientNumber(e.Name())
		if !ok {
			if clientEntry.MatchString(e.Name()) {
				return nil, fmt.Errorf("data: %s: client number of %s out of range", dir, e.Name())
			}
			continue
		}
		if prev, ok := byK[k]; ok {
			return nil, fmt.Errorf("data: %s: client %d is both %s and %s", dir, k, prev, e.Name())
		}
		byK[k] = e.Name()
	}
	if len(byK) == 0 {
		return nil, fmt.Errorf("data: %s holds no client-K entries: a directory of clients' data holds client-0, client-1, ... (one dataset each, as fedpq split writes them)", dir)
	}
	paths := make([]string, len(byK))
	for k := range paths {
		n, ok := byK[k]
		if !ok {
			return nil, fmt.Errorf("data: %s: %d clients' entries, but no client-%d: clients are numbered 0 to N-1", dir, len(byK), k)
		}
		paths[k] = filepath.Join(dir, n)
	}
	return paths, nil
}

// ReadClients reads the data of every client of a simulated run, fitting
// s: path is a per-client directory (ClientPaths; each client's dataset in
// any format) or a CSV file whose column sp.ClientColumn names each row's
// client (LEAF's natural clients). Clients are numbered 0 to N-1, in the
// directory's order or by the client column's values (ordered by number
// where every value is an integer, else as text). It returns the clients'
// examples in one dataset, each client's indices into it, and each
// client's name (its entry, or its value in the client column).
func ReadClients(path string, sp Spec, s *Schema) (*Dataset, [][]int, []string, error) {
	if s == nil {
		return nil, nil, nil, errors.New("data: ReadClients needs the run's schema")
	}
	if err := sp.Validate(); err != nil {
		return nil, nil, nil, err
	}
	st, err := os.Stat(path)
	if err != nil {
		return nil, nil, nil, fmt.Errorf("data: %w", err)
	}
	if !st.IsDir() {
		return readClientColumn(path, sp, s)
	}
	paths, err := ClientPaths(path)
	if err != nil {
		return nil, nil, nil, err
	}
	sets := make([]*Dataset, len(paths))
	names := make([]string, len(paths))
	for k, p := range paths {
		if sets[k], _, err = Read(p, sp, s); err != nil {
			return nil, nil, nil, fmt.Errorf("%w (client %d)", err, k)
		}
		names[k] = filepath.Base(p)
	}
	all, parts := concat(sets, s)
	return all, parts, names, nil
}

// readClientColumn reads a CSV with a client column.
func readClientColumn(path string, sp Spec, s *Schema) (*Dataset, [][]int, []string, error) {
	if f := sp.Format; f != FormatAuto && f != FormatCSV {
		return nil, nil, nil, fmt.Errorf("data: %s: the clients' data in one file is a CSV with a client column, not %s; or give a directory of client-K datasets", path, f)
	}
	if sp.ClientColumn == "" {
		return nil, nil, nil, fmt.Errorf("data: %s is one file: the clients' data in one CSV needs client_column, the column naming each row's client; or give a directory of client-K datasets", path)
	}
	t, err := readTable(path)
	if err != nil {
		return nil, nil, nil, fmt.Errorf("data: %w", err)
	}
	if t.column(sp.ClientColumn) < 0 {
		return nil, nil, nil, fmt.Errorf("data: %s: no client column %q among the columns %s", path, sp.ClientColumn, short(t.header))
	}
	d, _, clients, err := t.dataset(filepath.Base(path), sp, s)
	if err != nil {
		return nil, nil, nil, fmt.Errorf("data: %w", err)
	}
	names := distinct(clients)
	index := make(map[string]int, len(names))
	for k, n := range names {
		index[n] = k
	}
	parts := make([][]int, len(names))
	for i, c := range clients {
		parts[index[c]] = append(parts[index[c]], i)
	}
	return d, parts, names, nil
}

// concat puts datasets of one schema end to end, and returns where each
// one's examples are.
func concat(sets []*Dataset, s *Schema) (*Dataset, [][]int) {
	n := 0
	for _, d := range sets {
		n += d.Len()
	}
	f := s.Features()
	all := &Dataset{Name: "clients", X: make([]float32, 0, n*f), Y: make([]int32, 0, n),
		Shape: slices.Clone(s.Shape), Classes: len(s.Classes), Names: slices.Clone(s.Classes)}
	parts := make([][]int, len(sets))
	for k, d := range sets {
		for i := range d.Len() {
			parts[k] = append(parts[k], all.Len()+i)
		}
		all.X = append(all.X, d.X...)
		all.Y = append(all.Y, d.Y...)
	}
	return all, parts
}

// Subset is a new dataset of d's examples idx, in that order.
func Subset(d *Dataset, idx []int) *Dataset {
	f := d.Features()
	s := &Dataset{Name: d.Name, X: make([]float32, 0, len(idx)*f), Y: make([]int32, 0, len(idx)),
		Shape: slices.Clone(d.Shape), Classes: d.Classes, Names: slices.Clone(d.Names)}
	for _, i := range idx {
		s.X = append(s.X, d.X[i*f:(i+1)*f]...)
		s.Y = append(s.Y, d.Y[i])
	}
	return s
}
