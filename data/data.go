// Package data loads the datasets fedpq trains on and splits them among
// clients.
//
// Real datasets (MNIST, Fashion-MNIST, CIFAR-10) are read from their original
// distribution files, validated, and checked against the official MD5 sums, so
// that every experiment runs on exactly the data the papers used. The
// synthetic benchmark of FedProx needs no files, so a run works anywhere.
// Every random choice (partitions, synthetic data) comes from corr streams
// derived from a seed, so a run is reproducible on any machine.
package data

import (
	"fmt"
	"os"
	"strings"

	"github.com/fedpq/fedpq/internal/spec"
)

// Dataset is a labelled set held in memory. Example i's features are
// X[i*F:(i+1)*F], F = Features() = product of Shape. Images are height,
// width, channels (row-major HWC) with pixel values scaled to [0,1].
// Y[i] is in [0, Classes).
type Dataset struct {
	Name    string
	X       []float32
	Y       []int32
	Shape   []int
	Classes int
	// Names are the class names in label order, where the data name them
	// (Read); nil: "0", "1", ... (ClassNames).
	Names []string
}

// Len is the number of examples.
func (d *Dataset) Len() int { return len(d.Y) }

// Features is the number of features of one example.
func (d *Dataset) Features() int {
	f := 1
	for _, s := range d.Shape {
		f *= s
	}
	return f
}

// Federated is what a run trains on: the train and test sets, and, for
// datasets that are federated by nature (synthetic), each client's train
// indices. Natural is nil where the dataset defines no clients; the run then
// partitions Train itself (IID, Dirichlet, Shards).
type Federated struct {
	Train, Test *Dataset
	Natural     [][]int
}

// HasOwnClients reports whether the dataset name defines its own clients
// (Federated.Natural): the synthetic benchmark does, the image sets do not.
// It lets a run choose its partition before loading anything.
func HasOwnClients(name string) bool {
	return spec.Parse(strings.ToLower(name)).Kind == "synthetic"
}

// CheckName reports a dataset name Load does not know, before anything is
// loaded: a bad setting to fix, not a failure to load.
func CheckName(name string) error {
	_, _, _, err := parseName(name)
	return err
}

// parseName splits a dataset name into its base and, for synthetic, its
// alpha and beta (1, 1 by default).
func parseName(name string) (base string, alpha, beta float64, err error) {
	p := spec.Parse(strings.ToLower(name))
	base = p.Kind
	switch {
	case (base == "mnist" || base == "fashion-mnist" || base == "cifar10") && p.Args == "":
		return base, 0, 0, nil
	case base == "synthetic" && p.Args == "":
		return base, 1, 1, nil
	case base == "synthetic":
		if nums, err := p.Numbers(); err == nil && len(nums) == 2 {
			return base, nums[0], nums[1], nil
		}
		return "", 0, 0, fmt.Errorf("data: %q: want synthetic:ALPHA,BETA, e.g. synthetic:0.5,0.5", name)
	}
	return "", 0, 0, fmt.Errorf("data: unknown dataset %q (want mnist, fashion-mnist, cifar10, synthetic or synthetic:ALPHA,BETA)", name)
}

// EnvDir is the environment variable that names the data directory when no
// flag does.
const EnvDir = "FEDPQ_DATA"

// Dir resolves the data directory: flag if not empty, else $FEDPQ_DATA, else
// ./data. The order lets a command line override a shell's setting.
func Dir(flag string) string {
	if flag != "" {
		return flag
	}
	if d := os.Getenv(EnvDir); d != "" {
		return d
	}
	return "data"
}

// Options tell Load where files are and how to generate synthetic data.
type Options struct {
	// Dir is the data directory (see Dir); empty means Dir("").
	Dir string
	// Clients is the number of clients of a synthetic dataset; ignored by
	// the real datasets, which the run partitions itself.
	Clients int
	// Seed makes synthetic data reproducible; ignored by the real datasets.
	Seed uint64
	// Offline forbids downloading missing files: Load fails at once with a
	// message naming the files. Tests and air-gapped machines set it.
	Offline bool
}

// Load returns a dataset by name:
//
//   - "mnist", "fashion-mnist": the IDX gzip files (train-images-idx3-ubyte.gz,
//     train-labels-idx1-ubyte.gz, t10k-images-idx3-ubyte.gz,
//     t10k-labels-idx1-ubyte.gz) in DIR/mnist/ or DIR/fashion-mnist/, or
//     directly in DIR;
//   - "cifar10": the binary version (data_batch_1.bin..data_batch_5.bin,
//     test_batch.bin) in DIR/cifar-10-batches-bin/ or DIR/cifar10/;
//   - "synthetic" or "synthetic:ALPHA,BETA": FedProx's Synthetic(alpha, beta)
//     with o.Clients clients from o.Seed; alpha = beta = 1 by default.
//
// Missing real files are downloaded from the official locations (and their
// MD5 checked) unless o.Offline is set.
func Load(name string, o Options) (*Federated, error) {
	base, alpha, beta, err := resolve(name, &o)
	if err != nil {
		return nil, err
	}
	switch base {
	case "mnist":
		return loadIDX(mnist, o)
	case "fashion-mnist":
		return loadIDX(fashionMNIST, o)
	case "cifar10":
		return loadCIFAR(o)
	}
	return Synthetic(alpha, beta, o.Clients, o.Seed)
}

// LoadLabels is Load for a process that partitions the training set but
// trains on none of it (a deployed server): the test set in full and, of
// the training set, its labels, shape and classes alone (Train.X is nil;
// Train.Len() counts its labels). The training images of MNIST and
// Fashion-MNIST are neither read nor downloaded; CIFAR-10's, which hold
// its labels, are read a record at a time and dropped. Synthetic data,
// generated rather than read, is Load's, whole. LoadExamples reads the
// training examples the process needs after all (held-out ones).
func LoadLabels(name string, o Options) (*Federated, error) {
	base, _, _, err := resolve(name, &o)
	if err != nil {
		return nil, err
	}
	switch base {
	case "mnist":
		return loadIDXLabels(mnist, o)
	case "fashion-mnist":
		return loadIDXLabels(fashionMNIST, o)
	case "cifar10":
		paths, err := locateCIFAR(o)
		if err != nil {
			return nil, err
		}
		return readCIFARLabels(paths, cifarPerFile)
	}
	return Load(name, o)
}

// LoadExamples is Subset(Load(name, o).Train, idx), the training examples
// idx in that order, read without holding the others: of MNIST,
// Fashion-MNIST and CIFAR-10 only those examples are ever decoded.
func LoadExamples(name string, o Options, idx []int) (*Dataset, error) {
	base, _, _, err := resolve(name, &o)
	if err != nil {
		return nil, err
	}
	switch base {
	case "mnist":
		return loadIDXExamples(mnist, o, idx)
	case "fashion-mnist":
		return loadIDXExamples(fashionMNIST, o, idx)
	case "cifar10":
		paths, err := locateCIFAR(o)
		if err != nil {
			return nil, err
		}
		return readCIFARExamples(paths, cifarPerFile, idx)
	}
	f, err := Load(name, o)
	if err != nil {
		return nil, err
	}
	for _, i := range idx {
		if i < 0 || i >= f.Train.Len() {
			return nil, fmt.Errorf("data: %s: example %d of %d", name, i, f.Train.Len())
		}
	}
	return Subset(f.Train, idx), nil
}

// resolve is what Load, LoadLabels and LoadExamples do first: the data
// directory defaulted in o, and the dataset's name parsed.
func resolve(name string, o *Options) (base string, alpha, beta float64, err error) {
	if o.Dir == "" {
		o.Dir = Dir("")
	}
	return parseName(name)
}
