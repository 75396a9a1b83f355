// Package split writes per-client datasets from one dataset (fedpq split):
// a directory with one dataset per client, client-0 to client-(N-1), and
// the server's test set, test, in a format the readers of package data
// read back, with a manifest and a README that say what was written. So a
// user can prepare a deployment, or a simulation of one, on one machine:
// fedpq run --data DIR, fedpq server --test-data DIR/test and
// fedpq client --data DIR/client-K read the result as it is.
package split

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/fedpq/fedpq/data"
)

// Options say what to split, how, and where to write it.
type Options struct {
	// From is a built-in dataset (mnist, fashion-mnist, cifar10), read
	// from DataDir, or the path of a dataset in any format data.Read
	// reads (Spec says how).
	From    string
	DataDir string
	Offline bool // no downloads of a built-in dataset's files
	Spec    data.Spec
	// Test is the path of the test set of a dataset given by path; ""
	// holds out TestFraction of it at random. A built-in dataset has its
	// own test set.
	Test         string
	TestFraction float64
	Clients      int
	Partition    string // iid, dirichlet:ALPHA or shards:K (data.Partition)
	// Format is what is written: imagefolder, npz or csv; "" writes a
	// CSV as CSV (its rows as they are), images as an ImageFolder and
	// anything else as NPZ.
	Format data.Format
	// ClientColumn, with a CSV, writes the clients' rows in one file,
	// train.csv, with this column naming each row's client (LEAF's
	// convention) rather than a file per client.
	ClientColumn string
	Seed         uint64
	Out          string // a directory that does not exist, or is empty
	// Progress, if not nil, is called after each client is written.
	Progress func(done, total int)
}

// Manifest says what was written; it is written as manifest.json.
type Manifest struct {
	Command      string   `json:"command,omitempty"`
	Source       string   `json:"source"`
	TestSource   string   `json:"test_source"`
	Partition    string   `json:"partition"`
	Seed         uint64   `json:"seed"`
	Format       string   `json:"format"`
	Classes      []string `json:"classes"`
	Shape        []int    `json:"shape,omitempty"` // of an example, where known before the run's schema (not a CSV's)
	Test         Part     `json:"test"`
	Clients      []Part   `json:"clients"`
	ClientColumn string   `json:"client_column,omitempty"`
	// MaxExamples is the largest client's examples: the max_examples a
	// deployment of these clients would state.
	MaxExamples int `json:"max_examples"`
}

// Part is one dataset written: where, how many examples, and how many of
// each class.
type Part struct {
	Path     string `json:"path"`
	Examples int    `json:"examples"`
	PerClass []int  `json:"per_class"`
}

// source is what is split: decoded examples, or a CSV's rows as they are.
type source struct {
	name    string
	d       *data.Dataset // nil for a CSV
	table   *data.Table
	labels  []int32
	classes []string
}

func (s *source) len() int { return len(s.labels) }

// write writes the examples idx of s to path in format.
func (s *source) write(path string, f data.Format, idx []int, column string, client func(int) string) error {
	if s.table != nil {
		return s.table.Write(path, idx, column, client)
	}
	return data.Write(path, f, s.d, idx, column, client)
}

// Write splits o.From among o.Clients clients and writes the result in
// o.Out: client-K (with the format's extension) for each client, or
// train.csv with a client column, test, manifest.json and README.md. It
// returns the manifest. The same options write the same files, bit for
// bit, from the seed.
func Write(o Options) (*Manifest, error) {
	if err := o.check(); err != nil {
		return nil, err
	}
	train, test, err := o.read()
	if err != nil {
		return nil, err
	}
	if o.Format == data.FormatAuto {
		o.Format = defaultFormat(train)
	}
	if train.table != nil && o.Format != data.FormatCSV {
		return nil, fmt.Errorf("split: %s is a CSV: it is split into CSV files, its columns kept as they are (the run encodes them); not %s", o.From, o.Format)
	}
	if o.Clients > train.len() {
		return nil, fmt.Errorf("split: %d clients, but %s has %d training examples", o.Clients, o.From, train.len())
	}
	parts, err := data.Partition(o.Partition, train.labels, len(train.classes), o.Clients, o.Seed)
	if err != nil {
		return nil, fmt.Errorf("split: %w", err)
	}
	if err := os.MkdirAll(o.Out, 0o755); err != nil {
		return nil, fmt.Errorf("split: %w", err)
	}
	m := &Manifest{Source: o.From, TestSource: test.name, Partition: o.Partition, Seed: o.Seed, Format: string(o.Format),
		Classes: train.classes, ClientColumn: o.ClientColumn}
	if train.d != nil {
		m.Shape = train.d.Shape
	}
	ext := data.Ext(o.Format)
	m.Test = Part{Path: "test" + ext, Examples: test.len(), PerClass: perClass(test, allOf(test.len()))}
	if err := test.write(filepath.Join(o.Out, m.Test.Path), o.Format, allOf(test.len()), "", nil); err != nil {
		return nil, err
	}
	for k, idx := range parts {
		m.Clients = append(m.Clients, Part{Path: fmt.Sprintf("client-%d%s", k, ext), Examples: len(idx), PerClass: perClass(train, idx)})
		m.MaxExamples = max(m.MaxExamples, len(idx))
	}
	if o.ClientColumn != "" {
		if err := writeOneFile(o, train, parts, m); err != nil {
			return nil, err
		}
	} else {
		for k, idx := range parts {
			if err := train.write(filepath.Join(o.Out, m.Clients[k].Path), o.Format, idx, "", nil); err != nil {
				return nil, err
			}
			if o.Progress != nil {
				o.Progress(k+1, len(parts))
			}
		}
	}
	return m, nil
}

// writeOneFile writes every client's rows in train.csv, client by client,
// with the client column.
func writeOneFile(o Options, train *source, parts [][]int, m *Manifest) error {
	var rows []int
	var owner []string
	for k, idx := range parts {
		rows = append(rows, idx...)
		for range idx {
			owner = append(owner, fmt.Sprint(k))
		}
		m.Clients[k].Path = fmt.Sprintf("train.csv (%s %d)", o.ClientColumn, k)
	}
	err := train.write(filepath.Join(o.Out, "train.csv"), o.Format, rows, o.ClientColumn, func(j int) string { return owner[j] })
	if err == nil && o.Progress != nil {
		o.Progress(len(parts), len(parts))
	}
	return err
}

// check validates the options before anything is read.
func (o *Options) check() error {
	switch {
	case o.From == "":
		return errors.New("split: no dataset to split: give a built-in dataset (mnist, fashion-mnist, cifar10) or a path")
	case o.Clients < 1:
		return fmt.Errorf("split: %d clients: want at least 1", o.Clients)
	case o.Out == "":
		return errors.New("split: no output directory")
	case !(o.TestFraction > 0 && o.TestFraction < 1):
		return fmt.Errorf("split: test fraction %v: want it in (0, 1)", o.TestFraction)
	case o.ClientColumn != "" && o.Format != data.FormatAuto && o.Format != data.FormatCSV:
		return fmt.Errorf("split: a client column is written in a CSV, not %s", o.Format)
	}
	if _, _, err := data.ParsePartition(o.Partition); err != nil {
		return fmt.Errorf("split: %w", err)
	}
	if o.Format != data.FormatAuto && data.Ext(o.Format) == "" && o.Format != data.FormatImageFolder {
		return fmt.Errorf("split: cannot write %s: want imagefolder, npz or csv", o.Format)
	}
	if err := o.Spec.Validate(); err != nil {
		return err
	}
	if entries, err := os.ReadDir(o.Out); err == nil && len(entries) > 0 {
		return fmt.Errorf("split: %s exists and is not empty: split writes into a new or empty directory, never over another split", o.Out)
	}
	return nil
}

// read reads the training and test sources.
func (o *Options) read() (train, test *source, err error) {
	if data.CheckName(o.From) == nil && !exists(o.From) {
		if data.HasOwnClients(o.From) {
			return nil, nil, fmt.Errorf("split: %s is generated with its own clients; fedpq run --dataset %s needs no files", o.From, o.From)
		}
		if o.Test != "" {
			return nil, nil, fmt.Errorf("split: %s has its own test set; --test is for a dataset given by path", o.From)
		}
		fed, err := data.Load(o.From, data.Options{Dir: data.Dir(o.DataDir), Offline: o.Offline})
		if err != nil {
			return nil, nil, err
		}
		return decoded(o.From, fed.Train), decoded(o.From+" test set", fed.Test), nil
	}
	format := o.Spec.Format
	if format == data.FormatAuto {
		if format, err = data.Detect(o.From); err != nil {
			return nil, nil, err
		}
	}
	if format == data.FormatCSV {
		return o.readCSV()
	}
	d, s, err := data.Read(o.From, o.Spec, nil)
	if err != nil {
		return nil, nil, err
	}
	all := decoded(o.From, d)
	if o.Test == "" {
		return holdOut(all, o.TestFraction, o.Seed)
	}
	td, _, err := data.Read(o.Test, o.Spec, s)
	if err != nil {
		return nil, nil, err
	}
	return all, decoded(o.Test, td), nil
}

// readCSV reads a CSV source as rows, to be written as they are.
func (o *Options) readCSV() (train, test *source, err error) {
	t, err := data.ReadTable(o.From)
	if err != nil {
		return nil, nil, err
	}
	y, classes, err := t.Labels(o.Spec)
	if err != nil {
		return nil, nil, err
	}
	all := &source{name: o.From, table: t, labels: y, classes: classes}
	if o.Test == "" {
		return holdOut(all, o.TestFraction, o.Seed)
	}
	tt, err := data.ReadTable(o.Test)
	if err != nil {
		return nil, nil, err
	}
	sp := o.Spec
	sp.Classes = classes
	ty, _, err := tt.Labels(sp)
	if err != nil {
		return nil, nil, err
	}
	return all, &source{name: o.Test, table: tt, labels: ty, classes: classes}, nil
}

// holdOut draws a test set of round(frac*n) examples at random
// (data.Split's stream of the seed) and leaves the rest for the clients.
func holdOut(all *source, frac float64, seed uint64) (train, test *source, err error) {
	keep, held, err := data.Split(all.len(), frac, seed)
	if err != nil {
		return nil, nil, err
	}
	if len(held) == 0 || len(keep) == 0 {
		return nil, nil, fmt.Errorf("split: a test fraction of %v of %d examples leaves %d for the test set and %d for the clients", frac, all.len(), len(held), len(keep))
	}
	return all.subset(keep, all.name), all.subset(held, fmt.Sprintf("%v of %s", frac, all.name)), nil
}

// subset is the source restricted to examples idx.
func (s *source) subset(idx []int, name string) *source {
	out := &source{name: name, classes: s.classes, labels: make([]int32, len(idx))}
	for j, i := range idx {
		out.labels[j] = s.labels[i]
	}
	if s.d != nil {
		out.d = data.Subset(s.d, idx)
		out.d.Names = s.classes
		return out
	}
	out.table = s.table.Subset(idx)
	return out
}

func decoded(name string, d *data.Dataset) *source {
	return &source{name: name, d: d, labels: d.Y, classes: d.ClassNames()}
}

// defaultFormat is a CSV for a CSV, an ImageFolder for 8-bit images and
// NPZ otherwise.
func defaultFormat(s *source) data.Format {
	if s.table != nil {
		return data.FormatCSV
	}
	if sh := s.d.Shape; len(sh) == 3 && (sh[2] == 1 || sh[2] == 3) && data.Pixels(s.d) {
		return data.FormatImageFolder
	}
	return data.FormatNPZ
}

func perClass(s *source, idx []int) []int {
	n := make([]int, len(s.classes))
	for _, i := range idx {
		n[s.labels[i]]++
	}
	return n
}

func allOf(n int) []int {
	idx := make([]int, n)
	for i := range idx {
		idx[i] = i
	}
	return idx
}

func exists(path string) bool {
	_, err := os.Stat(path)
	return err == nil
}

// Save writes the manifest as manifest.json and a README.md beside what
// was written in dir.
func (m *Manifest) Save(dir string) error {
	b, err := json.MarshalIndent(m, "", "  ")
	if err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(dir, "manifest.json"), append(b, '\n'), 0o644); err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(dir, "README.md"), []byte(m.readme(dir)), 0o644)
}

// readme is README.md: what was written and how to use it.
func (m *Manifest) readme(dir string) string {
	var b strings.Builder
	fmt.Fprintf(&b, "# %d clients' data from %s\n\n", len(m.Clients), m.Source)
	if m.Command != "" {
		fmt.Fprintf(&b, "Written by `%s`.\n\n", m.Command)
	}
	fmt.Fprintf(&b, "- partition: %s, seed %d; format: %s\n", m.Partition, m.Seed, m.Format)
	fmt.Fprintf(&b, "- classes (%d): %s\n", len(m.Classes), strings.Join(m.Classes, ", "))
	if m.Shape != nil {
		fmt.Fprintf(&b, "- examples of shape %v\n", m.Shape)
	}
	fmt.Fprintf(&b, "- the server's test set: `%s`, %d examples (from %s)\n", m.Test.Path, m.Test.Examples, m.TestSource)
	sizes := make([]int, len(m.Clients))
	total := 0
	for k, c := range m.Clients {
		sizes[k] = c.Examples
		total += c.Examples
	}
	slices.Sort(sizes)
	fmt.Fprintf(&b, "- %d clients, %d examples in all: %d to %d each (median %d); manifest.json has each client's examples per class\n\n",
		len(m.Clients), total, sizes[0], sizes[len(sizes)-1], sizes[len(sizes)/2])
	b.WriteString("| client | path | examples | examples per class |\n|---:|---|---:|---|\n")
	for k, c := range m.Clients {
		if k == 10 && len(m.Clients) > 12 {
			fmt.Fprintf(&b, "| ... | %d more | | |\n", len(m.Clients)-10)
			break
		}
		fmt.Fprintf(&b, "| %d | `%s` | %d | %v |\n", k, c.Path, c.Examples, c.PerClass)
	}
	column, where := "", dir
	if m.ClientColumn != "" {
		column = " --client-column " + m.ClientColumn
		where = filepath.Join(dir, "train.csv") + " --test-data " + filepath.Join(dir, m.Test.Path)
	}
	fmt.Fprintf(&b, "\nSimulate the clients on one machine (the test set is read from `%s`):\n\n", m.Test.Path)
	fmt.Fprintf(&b, "```sh\nfedpq run --data %s%s --model MODEL\n```\n\n", where, column)
	fmt.Fprintf(&b, "Deploy them: the server reads only the test set, each client only its own data\n(docs/data.md, docs/deployment.md):\n\n")
	fmt.Fprintf(&b, "```sh\nfedpq server --test-data %s --clients %d --max-examples %d --model MODEL --token TOKEN ...\n",
		filepath.Join(dir, m.Test.Path), len(m.Clients), m.MaxExamples)
	if m.ClientColumn == "" {
		fmt.Fprintf(&b, "fedpq client --data %s --server HOST:PORT --token TOKEN    # client K, K = 0 ... %d\n", filepath.Join(dir, "client-K"+data.Ext(data.Format(m.Format))), len(m.Clients)-1)
	}
	b.WriteString("```\n")
	return b.String()
}
