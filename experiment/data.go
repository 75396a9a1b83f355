package experiment

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"go.yaml.in/yaml/v3"

	"github.com/fedpq/fedpq/data"
)

// OwnData are the settings of a run whose clients bring their own data
// rather than a partition of a shared Dataset (docs/data.md). In a
// simulation, Data holds every client's data; in a deployment each client
// gives its own (fedpq client --data) and the server holds only TestData
// and ValidationData. Every key is empty by default, and a config.yaml
// without them reads as before.
type OwnData struct {
	// Data is the clients' data of a simulation: a directory of client-K
	// datasets, or a CSV with ClientColumn.
	Data string `yaml:"data,omitempty"`
	// TestData is the evaluation set, the only data a deployed server
	// reads (with ValidationData); "": Data's entry named test.
	TestData string `yaml:"test_data,omitempty"`
	// ValidationData, if set, is the set on which patience selects the
	// model; the schema's statistics come from it rather than TestData.
	ValidationData string `yaml:"validation_data,omitempty"`
	// DataFormat names the data's format (data.Formats); "": detected.
	DataFormat         string `yaml:"data_format,omitempty"`
	LabelColumn        string `yaml:"label_column,omitempty"`
	CategoricalColumns Names  `yaml:"categorical_columns,omitempty"`
	ClientColumn       string `yaml:"client_column,omitempty"`
	FeatureScaling     string `yaml:"feature_scaling,omitempty"`
	ImageSize          string `yaml:"image_size,omitempty"`
	Channels           int    `yaml:"channels,omitempty"`
	Classes            Names  `yaml:"classes,omitempty"`
	// MaxExamples is the most examples a client's FedAvg weight counts:
	// a larger claim is weighed as MaxExamples (0: no cap but the
	// partition, where the run partitions a shared dataset).
	MaxExamples int `yaml:"max_examples,omitempty"`
	// Schema is what every client's data must fit: declared, or resolved
	// from the evaluation set and recorded in config.yaml (YAML only).
	Schema *data.Schema `yaml:"schema,omitempty"`
}

// Names is a list of names, kept as one comma-separated string (so that
// a Config stays comparable): in YAML a sequence or a comma-separated
// string, as a flag comma-separated.
type Names string

// List is the names, each trimmed; nil for none.
func (n Names) List() []string {
	if strings.TrimSpace(string(n)) == "" {
		return nil
	}
	l := strings.Split(string(n), ",")
	for i := range l {
		l[i] = strings.TrimSpace(l[i])
	}
	return l
}

// UnmarshalYAML reads a sequence of names or a comma-separated string.
func (n *Names) UnmarshalYAML(v *yaml.Node) error {
	if v.Kind == yaml.SequenceNode {
		var s []string
		if err := v.Decode(&s); err != nil {
			return err
		}
		for _, x := range s {
			if strings.Contains(x, ",") {
				return fmt.Errorf("line %d: name %q: a name cannot hold a comma", v.Line, x)
			}
		}
		*n = Names(strings.Join(s, ","))
		return nil
	}
	var s string
	if err := v.Decode(&s); err != nil {
		return err
	}
	return n.Set(s)
}

// MarshalYAML writes the names as a sequence.
func (n Names) MarshalYAML() (any, error) {
	node := &yaml.Node{Kind: yaml.SequenceNode, Style: yaml.FlowStyle}
	for _, s := range n.List() {
		node.Content = append(node.Content, &yaml.Node{Kind: yaml.ScalarNode, Value: s})
	}
	return node, nil
}

func (n *Names) String() string { return string(*n) }

// Set reads comma-separated names.
func (n *Names) Set(s string) error {
	*n = Names(strings.Join(Names(s).List(), ","))
	return nil
}

// Type names the flag's type in docs/config.md.
func (n *Names) Type() string { return "list" }

// Own reports whether the run's clients bring their own data (data, or a
// deployed server's test_data) rather than a partition of dataset.
func (c Config) Own() bool { return c.Data != "" || c.TestData != "" }

// Spec is how the run reads its own data.
func (c Config) Spec() (data.Spec, error) {
	f, err := data.ParseFormat(c.DataFormat)
	if err != nil {
		return data.Spec{}, err
	}
	size, err := data.ParseImageSize(c.ImageSize)
	if err != nil {
		return data.Spec{}, err
	}
	sp := data.Spec{
		Format: f, LabelColumn: c.LabelColumn, Categorical: c.CategoricalColumns.List(), ClientColumn: c.ClientColumn,
		Scaling: c.FeatureScaling, ImageSize: size, Channels: c.Channels, Classes: c.Classes.List(),
	}
	return sp, sp.Validate()
}

// validateData checks the own-data keys on their own.
func (c Config) validateData() error {
	if _, err := c.Spec(); err != nil {
		return err
	}
	if c.MaxExamples < 0 {
		return fmt.Errorf("max_examples %d must not be negative (0: no cap)", c.MaxExamples)
	}
	if c.Schema != nil {
		if err := c.Schema.Validate(); err != nil {
			return err
		}
	}
	if !c.Own() {
		if c.ValidationData != "" || c.Schema != nil {
			return errors.New("validation_data and schema are for a run with its own data (data, or test_data): a partition of dataset has the dataset's own")
		}
		return nil
	}
	if c.Dataset != "" && c.Dataset != Default().Dataset {
		return fmt.Errorf("dataset %s and data or test_data: a run trains on a partition of a dataset or on its clients' own data, not both", c.Dataset)
	}
	if p := c.Partition; p != "" && p != AutoPartition && p != "natural" {
		return fmt.Errorf("partition %s with data or test_data: each client's data is its own; fedpq split re-splits a dataset among clients", p)
	}
	if c.Validation != 0 {
		return errors.New("validation: with data or test_data the server holds out nothing from the clients; give validation_data")
	}
	return nil
}

// ResolveData returns c with its own data's paths resolved: dataset
// cleared, and test_data, where empty, the entry of data named test (as
// fedpq split writes it), with a line that says so ("" where nothing
// changed). It loads nothing.
func (c Config) ResolveData() (Config, string, error) {
	if !c.Own() {
		return c, "", nil
	}
	c.Dataset = ""
	if c.TestData != "" {
		return c, "", nil
	}
	if st, err := os.Stat(c.Data); err == nil && st.IsDir() {
		entries, _ := os.ReadDir(c.Data)
		for _, e := range entries {
			if n := e.Name(); n == "test" || strings.HasPrefix(n, "test.") {
				c.TestData = filepath.Join(c.Data, n)
				return c, "test_data: " + c.TestData + " (beside the clients' data)", nil
			}
		}
	}
	return c, "", fmt.Errorf("test_data: the evaluation set is needed: give test_data, or put it beside the clients' data as %s", filepath.Join(c.Data, "test"))
}

// DatasetName names the run's data in its summary: the dataset, or the
// clients' own data.
func (c Config) DatasetName() string {
	switch {
	case c.Data != "":
		return filepath.Base(c.Data)
	case c.TestData != "":
		return "clients' own data"
	}
	return c.Dataset
}

// evaluationSets reads the run's test set and, if any, its validation set,
// and returns them with the schema: c's, else resolved from the validation
// set if there is one (its statistics are not the test set's), else from
// the test set.
func (c Config) evaluationSets() (test, val *data.Dataset, s *data.Schema, err error) {
	sp, err := c.Spec()
	if err != nil {
		return nil, nil, nil, err
	}
	s = c.Schema
	if c.ValidationData != "" {
		if val, s, err = data.Read(c.ValidationData, sp, s); err != nil {
			return nil, nil, nil, fmt.Errorf("validation_data: %w", err)
		}
	}
	if test, s, err = data.Read(c.TestData, sp, s); err != nil {
		return nil, nil, nil, fmt.Errorf("test_data: %w", err)
	}
	if len(s.Classes) < 2 {
		return nil, nil, nil, fmt.Errorf("test_data: the evaluation set has %d class %v: declare the run's classes", len(s.Classes), s.Classes)
	}
	return test, val, s, nil
}

// withValidation puts the validation set after train's examples, and
// returns where it is (nil without one): the engine evaluates patience on
// examples of Data.Train that no client holds.
func withValidation(train, val *data.Dataset) (*data.Dataset, []int) {
	if val == nil {
		return train, nil
	}
	out := data.Subset(train, nil)
	out.X = append(slices.Clip(train.X), val.X...)
	out.Y = append(slices.Clip(train.Y), val.Y...)
	idx := make([]int, val.Len())
	for i := range idx {
		idx[i] = train.Len() + i
	}
	return out, idx
}

// newOwnSetup is NewSetup for a simulation whose clients bring their own
// data (c.Data): the schema from the evaluation set, every client's data
// read into it, clients as many as the data has (c.Clients 0, or equal),
// and max_examples, where 0, the largest client's examples (the cap a
// deployment of this configuration would state).
func newOwnSetup(c Config) (*Setup, error) {
	if c.Data == "" {
		return nil, errors.New("test_data without data: a simulation needs the clients' data (a deployed server reads test_data alone)")
	}
	test, val, s, err := c.evaluationSets()
	if err != nil {
		return nil, err
	}
	sp, _ := c.Spec()
	train, clients, _, err := data.ReadClients(c.Data, sp, s)
	if err != nil {
		return nil, fmt.Errorf("data: %w", err)
	}
	if c.Clients != 0 && c.Clients != len(clients) {
		return nil, fmt.Errorf("clients %d, but %s holds %d clients' data (clients 0 takes them all)", c.Clients, c.Data, len(clients))
	}
	c.Clients, c.Schema = len(clients), s
	if c.MaxExamples == 0 {
		for _, p := range clients {
			c.MaxExamples = max(c.MaxExamples, len(p))
		}
	}
	return c.setupWith(train, test, val, clients)
}

// NewServerSetup is the setup of a deployed server. Where the run
// partitions a shared dataset, it is NewSetup's, keeping of the training
// set only the held-out validation examples (and each client's partition
// as indices, for the weight cap): the dataset is read by data.LoadLabels,
// and the validation examples alone by data.LoadExamples, so that the
// server never holds the training set it does not train on. Where the clients bring their own data,
// the server reads only test_data and validation_data, resolves the schema
// (recorded in its Config, which the clients are sent), and needs the
// clients' number and, for FedAvg weights, max_examples stated.
func NewServerSetup(c Config) (*Setup, error) {
	if !c.Own() {
		su, err := newSetup(c, data.LoadLabels)
		if err != nil {
			return nil, err
		}
		train := data.Subset(su.Data.Train, nil)
		if su.Validation != nil {
			if train, err = data.LoadExamples(su.Config.Dataset, su.Config.dataOptions(), su.Validation); err != nil {
				su.Close()
				return nil, err
			}
			su.Validation = allOf(train)
		}
		su.Data = &data.Federated{Train: train, Test: su.Data.Test}
		return su, nil
	}
	c, _ = c.ResolvePartition()
	switch {
	case c.Data != "":
		return nil, fmt.Errorf("data %s: in a deployment each client reads its own (fedpq client --data) and the server reads only test_data: remove data from the server's configuration", c.Data)
	case c.Clients < 1:
		return nil, fmt.Errorf("clients %d: a server must be told how many clients the run has", c.Clients)
	case c.Weighting == "examples" && c.MaxExamples == 0:
		return nil, errors.New("weighting examples with the clients' own data needs max_examples, the most examples one client's weight may count (docs/security.md); or weighting mean")
	}
	if err := c.Validate(); err != nil {
		return nil, err
	}
	c, err := c.ResolveModel()
	if err != nil {
		return nil, err
	}
	test, val, s, err := c.evaluationSets()
	if err != nil {
		return nil, err
	}
	c.Schema = s
	return c.setupWith(&data.Dataset{Name: "none", Shape: s.Shape, Classes: len(s.Classes)}, test, val, nil)
}

// NewClientSetup builds deployed client k's side of the run c, as its
// server sent it: the client's examples, and only those, in Data.Train
// (Clients[0] lists them all), the model and the engine's configuration.
// Where the clients bring their own data, they are read from path into
// the run's schema (c.DataFormat, if set, names their format); where the
// run partitions a shared dataset, path is "" and the client takes
// partition k of its copy (in c.DataDir).
func NewClientSetup(c Config, k int, path string) (*Setup, error) {
	if !c.Own() {
		if path != "" {
			return nil, fmt.Errorf("--data %s: the run partitions %s among its clients: give --partition K/N and --data-dir", path, c.Dataset)
		}
		su, err := NewSetup(c)
		if err != nil {
			return nil, err
		}
		if k < 0 || k >= len(su.Clients) {
			return nil, fmt.Errorf("client %d: the run has clients 0 to %d", k, len(su.Clients)-1)
		}
		own := data.Subset(su.Data.Train, su.Clients[k])
		su.Data = &data.Federated{Train: own}
		su.Clients, su.Validation = [][]int{allOf(own)}, nil
		return su, nil
	}
	switch {
	case path == "":
		return nil, errors.New("the run's clients bring their own data: give --data PATH")
	case c.Schema == nil:
		return nil, errors.New("the server's configuration has no schema: it must resolve one from its test_data")
	case k < 0 || k >= c.Clients:
		return nil, fmt.Errorf("client %d: the run has clients 0 to %d", k, c.Clients-1)
	}
	c, err := c.ResolveModel()
	if err != nil {
		return nil, err
	}
	sp, err := c.Spec()
	if err != nil {
		return nil, err
	}
	own, _, err := data.Read(path, sp, c.Schema)
	if err != nil {
		return nil, fmt.Errorf("%w (against the run's schema: %d classes %v, examples of shape %v)", err, len(c.Schema.Classes), c.Schema.Classes, c.Schema.Shape)
	}
	return c.setupWith(own, nil, nil, [][]int{allOf(own)})
}

// setupWith is the setup of c (schema resolved) on the given sets.
func (c Config) setupWith(train, test, val *data.Dataset, clients [][]int) (*Setup, error) {
	train, vidx := withValidation(train, val)
	su := &Setup{Data: &data.Federated{Train: train, Test: test}, Clients: clients, Validation: vidx}
	return c.build(su, c.Schema.Shape, len(c.Schema.Classes))
}

func allOf(d *data.Dataset) []int {
	idx := make([]int, d.Len())
	for i := range idx {
		idx[i] = i
	}
	return idx
}
