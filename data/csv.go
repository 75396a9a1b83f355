package data

import (
	"bufio"
	"compress/gzip"
	"encoding/csv"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"slices"
	"strconv"
	"strings"
)

// Table is a CSV file as read: its header and its rows, each as long as
// the header, and the line each row starts on (for errors).
type Table struct {
	path   string
	header []string
	rows   [][]string
	lines  []int
	// classes are the class names the file itself declares, in label
	// order (scikit-learn's layout), or nil.
	classes []string
}

// readTable reads a CSV file (gzip-compressed or not, told by its magic
// bytes). Its first line is the header, naming every column, distinct and
// not empty; every row has as many fields. scikit-learn's bundled data
// sets (sklearn/datasets/data/*.csv) have another first line: the number
// of examples, the number of features, then the class names, the label
// being the last column's class index; readTable reads that layout too,
// naming the columns x0, x1, ... and the label target, whose values become
// the class names.
func readTable(path string) (*Table, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	br := bufio.NewReaderSize(f, 1<<16)
	var r io.Reader = br
	if head, _ := br.Peek(2); len(head) == 2 && head[0] == 0x1f && head[1] == 0x8b {
		zr, err := gzip.NewReader(br)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", path, err)
		}
		r = zr
	}
	cr := csv.NewReader(r)
	cr.FieldsPerRecord = -1
	cr.TrimLeadingSpace = true
	t := &Table{path: path}
	header, err := cr.Read()
	if err == io.EOF {
		return nil, fmt.Errorf("%s: empty: a CSV needs a header line naming its columns", path)
	}
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	header[0] = strings.TrimPrefix(header[0], "\ufeff") // a spreadsheet's byte-order mark
	sk := sklearnHeader(header)
	if sk != nil {
		t.header = append(indexedNames("x", sk.features), "target")
		t.classes = sk.classes
	} else {
		t.header = header
		for i, h := range header {
			if h == "" {
				return nil, fmt.Errorf("%s: column %d of the header is empty: a CSV's first line names every column", path, i+1)
			}
		}
		if err := unique(header); err != nil {
			return nil, fmt.Errorf("%s: header: column %w: a CSV's first line names every column once", path, err)
		}
	}
	for {
		rec, err := cr.Read()
		if err == io.EOF {
			break
		}
		if err != nil {
			return nil, fmt.Errorf("%s: %w", path, err)
		}
		line, _ := cr.FieldPos(0)
		if len(rec) != len(t.header) {
			return nil, fmt.Errorf("%s: line %d has %d fields, the header %d", path, line, len(rec), len(t.header))
		}
		if sk != nil {
			k, err := strconv.Atoi(rec[len(rec)-1])
			if err != nil || k < 0 || k >= len(sk.classes) {
				return nil, fmt.Errorf("%s: line %d: label %q is not an index of the header's %d classes", path, line, rec[len(rec)-1], len(sk.classes))
			}
			rec[len(rec)-1] = sk.classes[k]
		}
		t.rows = append(t.rows, rec)
		t.lines = append(t.lines, line)
	}
	if sk != nil && len(t.rows) != sk.examples {
		return nil, fmt.Errorf("%s: %d rows, the header (scikit-learn's layout) says %d", path, len(t.rows), sk.examples)
	}
	if len(t.rows) == 0 {
		return nil, fmt.Errorf("%s: a header and no rows", path)
	}
	return t, nil
}

// sklearnLayout is what the first line of a scikit-learn CSV says.
type sklearnLayout struct {
	examples, features int
	classes            []string
}

// sklearnHeader recognizes scikit-learn's first line: two counts, then at
// least two class names, none of them a number.
func sklearnHeader(h []string) *sklearnLayout {
	if len(h) < 4 {
		return nil
	}
	n, err1 := strconv.Atoi(h[0])
	f, err2 := strconv.Atoi(h[1])
	if err1 != nil || err2 != nil || n < 1 || f < 1 {
		return nil
	}
	for _, c := range h[2:] {
		if _, err := strconv.ParseFloat(c, 64); err == nil || c == "" {
			return nil
		}
	}
	return &sklearnLayout{examples: n, features: f, classes: slices.Clone(h[2:])}
}

func indexedNames(prefix string, n int) []string {
	names := make([]string, n)
	for i := range names {
		names[i] = prefix + strconv.Itoa(i)
	}
	return names
}

// declared is the class list declared by sp, else by the file, or nil.
func (t *Table) declared(sp Spec) []string {
	if sp.Classes != nil {
		return sp.Classes
	}
	return t.classes
}

// column is the position of the named column, or -1.
func (t *Table) column(name string) int { return slices.Index(t.header, name) }

// labelColumn is the label's column: the one sp names, else label, else
// target.
func (t *Table) labelColumn(sp Spec) (int, error) {
	if sp.LabelColumn != "" {
		if i := t.column(sp.LabelColumn); i >= 0 {
			return i, nil
		}
		return -1, fmt.Errorf("%s: no label column %q among the columns %s", t.path, sp.LabelColumn, short(t.header))
	}
	for _, n := range []string{"label", "target"} {
		if i := t.column(n); i >= 0 {
			return i, nil
		}
	}
	return -1, fmt.Errorf("%s: no column named label or target: name the label's column with label_column (the columns are %s)", t.path, short(t.header))
}

// dataset encodes the Table as examples fitting s, or, where s is nil,
// resolves the schema from the Table and sp: every column but the label
// and the client column is a feature, numeric unless sp declares it
// categorical; categories and classes are the values found, ordered by
// sortNames; numeric columns are scaled by sp.Scaling with this Table's
// statistics. It also returns each row's client (the client column's
// value), or nil if sp names no client column or the table has none (a
// test set, or one client's own file, need not).
func (t *Table) dataset(name string, sp Spec, s *Schema) (*Dataset, *Schema, []string, error) {
	li, err := t.labelColumn(sp)
	if err != nil {
		return nil, nil, nil, err
	}
	ci := -1
	if sp.ClientColumn != "" {
		if ci = t.column(sp.ClientColumn); ci == li {
			return nil, nil, nil, fmt.Errorf("%s: column %q is both the label and the client column", t.path, sp.ClientColumn)
		}
	}
	cols, at, err := t.featureColumns(sp, s, li, ci)
	if err != nil {
		return nil, nil, nil, err
	}
	labels := t.values(li)
	classes := resolveClasses(s, t.declared(sp), labels)
	lab := newLabeler(classes)
	f := 0
	for _, c := range cols {
		f += max(1, len(c.Categories))
	}
	n := len(t.rows)
	d := &Dataset{Name: name, X: make([]float32, n*f), Y: make([]int32, n), Shape: []int{f}, Classes: len(classes), Names: classes}
	for r, row := range t.rows {
		if d.Y[r], err = lab.name(row[li]); err != nil {
			return nil, nil, nil, fmt.Errorf("%s: line %d: %w", t.path, t.lines[r], err)
		}
		x := d.X[r*f : (r+1)*f]
		j := 0
		for k, c := range cols {
			v := row[at[k]]
			if c.Categories == nil {
				num, err := t.number(r, at[k], v)
				if err != nil {
					return nil, nil, nil, err
				}
				x[j] = float32((num - c.Shift) / c.Scale)
				j++
				continue
			}
			p := slices.Index(c.Categories, v)
			if p < 0 {
				return nil, nil, nil, fmt.Errorf("%s: line %d, column %q: %q is not one of its categories %s", t.path, t.lines[r], c.Name, v, short(c.Categories))
			}
			x[j+p] = 1
			j += len(c.Categories)
		}
	}
	var clients []string
	if ci >= 0 {
		clients = t.values(ci)
	}
	return d, &Schema{Shape: []int{f}, Classes: classes, Columns: cols}, clients, nil
}

// featureColumns is how each feature column becomes features, and where
// each is in the Table: s's columns, which the Table must have exactly,
// else resolved from the Table as dataset says.
func (t *Table) featureColumns(sp Spec, s *Schema, li, ci int) ([]Column, []int, error) {
	var at []int
	if s != nil {
		if s.Columns == nil {
			return nil, nil, fmt.Errorf("%s: a CSV, but the run's examples are arrays or images of shape %v", t.path, s.Shape)
		}
		for _, c := range s.Columns {
			i := t.column(c.Name)
			if i < 0 {
				return nil, nil, fmt.Errorf("%s: no column %q, one of the run's feature columns", t.path, c.Name)
			}
			at = append(at, i)
		}
		for i, h := range t.header {
			if i != li && i != ci && !slices.Contains(at, i) {
				return nil, nil, fmt.Errorf("%s: column %q is not one of the run's feature columns %s", t.path, h, short(names(s.Columns)))
			}
		}
		return s.Columns, at, nil
	}
	for _, c := range sp.Categorical {
		if i := t.column(c); i < 0 || i == li || i == ci {
			return nil, nil, fmt.Errorf("%s: categorical column %q is not a feature column of %s", t.path, c, short(t.header))
		}
	}
	var cols []Column
	for i, h := range t.header {
		if i == li || i == ci {
			continue
		}
		at = append(at, i)
		if slices.Contains(sp.Categorical, h) {
			cols = append(cols, Column{Name: h, Categories: distinct(t.values(i))})
			continue
		}
		c := Column{Name: h, Scale: 1}
		if sp.Scaling != ScaleNone {
			lo, hi, mean, sd := math.Inf(1), math.Inf(-1), 0.0, 0.0
			for r, row := range t.rows { // Welford's mean and variance
				v, err := t.number(r, i, row[i])
				if err != nil {
					return nil, nil, err
				}
				lo, hi = min(lo, v), max(hi, v)
				d := v - mean
				mean += d / float64(r+1)
				sd += d * (v - mean)
			}
			sd = math.Sqrt(sd / float64(len(t.rows)))
			switch {
			case sp.Scaling == ScaleMinMax && hi > lo:
				c.Shift, c.Scale = lo, hi-lo
			case sp.Scaling == ScaleMinMax:
				c.Shift = lo
			case sd > 0:
				c.Shift, c.Scale = mean, sd
			default:
				c.Shift = mean
			}
		}
		cols = append(cols, c)
	}
	if len(cols) == 0 {
		return nil, nil, fmt.Errorf("%s: no feature columns besides the label (and client) column", t.path)
	}
	return cols, at, nil
}

// number parses the value of row r, column i.
func (t *Table) number(r, i int, v string) (float64, error) {
	num, err := strconv.ParseFloat(v, 64)
	if err != nil || !finite(num) {
		what := "not a number"
		if err == nil {
			what = "not a finite number"
		} else if v == "" {
			what = "empty (missing values are not supported: fill or drop them)"
		}
		return 0, fmt.Errorf("%s: line %d, column %q: %q is %s; a column of categories is declared in categorical_columns", t.path, t.lines[r], t.header[i], v, what)
	}
	return num, nil
}

// values is column i of every row.
func (t *Table) values(i int) []string {
	v := make([]string, len(t.rows))
	for r, row := range t.rows {
		v[r] = row[i]
	}
	return v
}

func names(cols []Column) []string {
	n := make([]string, len(cols))
	for i, c := range cols {
		n[i] = c.Name
	}
	return n
}

// write writes the header and the rows idx to path, as a CSV; with
// clientColumn, a last column of that name holds client(j) for the j-th
// row written.
func (t *Table) write(path string, idx []int, clientColumn string, client func(j int) string) error {
	return writeCSVFile(path, func(w *csv.Writer) error {
		h := t.header
		if clientColumn != "" {
			if slices.Contains(h, clientColumn) {
				return fmt.Errorf("data: %s already has a column %q", t.path, clientColumn)
			}
			h = append(slices.Clone(h), clientColumn)
		}
		if err := w.Write(h); err != nil {
			return err
		}
		for j, i := range idx {
			row := t.rows[i]
			if clientColumn != "" {
				row = append(slices.Clone(row), client(j))
			}
			if err := w.Write(row); err != nil {
				return err
			}
		}
		return nil
	})
}

// writeCSV writes examples idx of d as a CSV: columns x0, x1, ... with
// the features (shortest float32 text that reads back exactly) and label
// with the class name.
func writeCSV(path string, d *Dataset, idx []int, clientColumn string, client func(j int) string) error {
	f := d.Features()
	classes := d.ClassNames()
	return writeCSVFile(path, func(w *csv.Writer) error {
		h := append(indexedNames("x", f), "label")
		if clientColumn != "" {
			h = append(h, clientColumn)
		}
		if err := w.Write(h); err != nil {
			return err
		}
		row := make([]string, len(h))
		for j, i := range idx {
			for k, v := range d.X[i*f : (i+1)*f] {
				row[k] = strconv.FormatFloat(float64(v), 'g', -1, 32)
			}
			row[f] = classes[d.Y[i]]
			if clientColumn != "" {
				row[f+1] = client(j)
			}
			if err := w.Write(row); err != nil {
				return err
			}
		}
		return nil
	})
}

func writeCSVFile(path string, rows func(*csv.Writer) error) error {
	out, err := os.Create(path)
	if err != nil {
		return err
	}
	bw := bufio.NewWriter(out)
	w := csv.NewWriter(bw)
	err = rows(w)
	w.Flush()
	err = errors.Join(err, w.Error(), bw.Flush(), out.Close())
	return err
}
