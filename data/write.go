package data

import (
	"fmt"
	"os"
)

// Write writes the examples idx of d to path in format: an ImageFolder
// directory of PNG files (8-bit grey or RGB images only, which PNG holds
// exactly), an NPZ file (x, y and classes) or a CSV (columns x0, x1, ...
// and label). With clientColumn (CSV only), the CSV has a last column of
// that name holding client(j) for its j-th row. What it writes, Read reads
// back as the same examples, and the same class names.
func Write(path string, format Format, d *Dataset, idx []int, clientColumn string, client func(j int) string) error {
	if clientColumn != "" && format != FormatCSV {
		return fmt.Errorf("data: a client column is written in a CSV, not %s", format)
	}
	switch format {
	case FormatImageFolder:
		if err := os.Mkdir(path, 0o755); err != nil {
			return fmt.Errorf("data: %w", err)
		}
		return writeImageFolder(path, d, idx)
	case FormatNPZ:
		return writeNPZ(path, d, idx)
	case FormatCSV:
		return writeCSV(path, d, idx, clientColumn, client)
	}
	return fmt.Errorf("data: cannot write %q: want imagefolder, npz or csv", format)
}

// Ext is the file name extension of a dataset written in format.
func Ext(format Format) string {
	switch format {
	case FormatNPZ:
		return ".npz"
	case FormatCSV:
		return ".csv"
	}
	return ""
}

// ReadTable reads a CSV file as it is, for writing parts of it again
// (fedpq split): its header and rows (scikit-learn's layout read as
// readTable says).
func ReadTable(path string) (*Table, error) {
	t, err := readTable(path)
	if err != nil {
		return nil, fmt.Errorf("data: %w", err)
	}
	return t, nil
}

// Len is the number of rows.
func (t *Table) Len() int { return len(t.rows) }

// Labels is every row's label, as an index of the classes it returns: the
// declared ones of sp or the file, else the label column's values
// (sortNames order).
func (t *Table) Labels(sp Spec) ([]int32, []string, error) {
	li, err := t.labelColumn(sp)
	if err != nil {
		return nil, nil, fmt.Errorf("data: %w", err)
	}
	vals := t.values(li)
	classes := resolveClasses(nil, t.declared(sp), vals)
	lab := newLabeler(classes)
	y := make([]int32, len(vals))
	for r, v := range vals {
		if y[r], err = lab.name(v); err != nil {
			return nil, nil, fmt.Errorf("data: %s: line %d: %w", t.path, t.lines[r], err)
		}
	}
	return y, classes, nil
}

// Write writes the header and rows idx to path as a CSV, with a client
// column as Write says.
func (t *Table) Write(path string, idx []int, clientColumn string, client func(j int) string) error {
	return t.write(path, idx, clientColumn, client)
}

// Subset is a table of the rows idx, in that order.
func (t *Table) Subset(idx []int) *Table {
	s := &Table{path: t.path, header: t.header, classes: t.classes}
	for _, i := range idx {
		s.rows = append(s.rows, t.rows[i])
		s.lines = append(s.lines, t.lines[i])
	}
	return s
}
