package main

import (
	"context"
	"fmt"
	"io"
	"strings"

	"github.com/fedpq/fedpq/data"
	"github.com/fedpq/fedpq/experiment"
	"github.com/fedpq/fedpq/split"
)

func init() {
	commands["split"] = command{
		summary: "write per-client datasets from one dataset, for fedpq run --data and fedpq client --data",
		run:     runSplit,
	}
}

const splitDescription = `Writes one dataset per client from one dataset, so that a deployment (or a
simulation of one) can be prepared and tried on one machine. The source is a
built-in dataset (mnist, fashion-mnist, cifar10, from --data-dir) or the path
of a dataset in any format fedpq reads (an ImageFolder, a CSV, an NPZ file,
...; docs/data.md). Its training examples are split among --clients clients
(iid, dirichlet:ALPHA or shards:K, from --seed) and each client's written to
OUT/client-K; the test set (the dataset's own, --test, or --test-fraction held
out at random) to OUT/test; OUT/manifest.json and OUT/README.md say what was
written and how to run it:

  fedpq run --data OUT                          the clients simulated
  fedpq server --test-data OUT/test ...         the server reads only this
  fedpq client --data OUT/client-K ...          each client only its own

A CSV is written as CSV files, its rows as they are; --client-column writes
all clients' rows in one file, OUT/train.csv, with a column naming each row's
client (LEAF's convention). The same flags write the same files.
`

func runSplit(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlags("split", "--from DATASET --clients N --out DIR [flags]", splitDescription, stderr)
	from := fs.String("from", "", "what to split: mnist, fashion-mnist, cifar10, or the path of a dataset")
	dataDir := fs.String("data-dir", "", "directory of a built-in dataset's files (default $FEDPQ_DATA, else ./data)")
	test := fs.String("test", "", "the test set of a dataset given by path (default: --test-fraction of it, held out)")
	testFraction := fs.Float64("test-fraction", 0.2, "without --test, the fraction of a dataset given by path held out as the test set")
	clients := fs.Int("clients", 10, "number of clients")
	partition := fs.String("partition", "iid", "how the examples are split: iid, dirichlet:ALPHA or shards:K")
	format := fs.String("format", "", "what is written: imagefolder, npz or csv (default: csv for a CSV, imagefolder for 8-bit images, else npz)")
	clientColumn := fs.String("client-column", "", "CSV: write every client's rows in OUT/train.csv with this column naming each row's client")
	seed := fs.Uint64("seed", 1, "seed of the partition and the held-out test set")
	out := fs.String("out", "", "directory to write into (new, or empty)")
	quiet := fs.Bool("quiet", false, "no progress on stderr")
	var own experiment.OwnData
	dataFormat := fs.String("data-format", "", "the format of --from and --test: imagefolder, csv, npz, npy, idx or cifar (default: from the path)")
	fs.StringVar(&own.LabelColumn, "label-column", "", "CSV: the label's column (default: label, else target)")
	fs.Var(&own.Classes, "classes", "comma-separated class names in label order (default: those of the data)")
	fs.StringVar(&own.ImageSize, "image-size", "", "images of --from: HEIGHTxWIDTH to resize every image to (default: their own, which must agree)")
	fs.IntVar(&own.Channels, "channels", 0, "images of --from: 1 (grey) or 3 (RGB); 0: grey if every image is")
	if err := parse(fs, args); err != nil {
		return err
	}
	if *from == "" || *out == "" {
		return badValue{fmt.Errorf("--from and --out are needed")}
	}
	c := experiment.Config{OwnData: own}
	c.DataFormat = *dataFormat
	sp, err := c.Spec()
	if err != nil {
		return badValue{err}
	}
	f, err := data.ParseFormat(*format)
	if err != nil {
		return badValue{err}
	}
	progress := func(done, total int) {}
	if !*quiet {
		progress = splitProgress(stderr, isTerminal(stderr))
	}
	m, err := split.Write(split.Options{
		From: *from, DataDir: *dataDir, Spec: sp, Test: *test, TestFraction: *testFraction, Clients: *clients,
		Partition: *partition, Format: f, ClientColumn: *clientColumn, Seed: *seed, Out: *out, Progress: progress,
	})
	if err != nil {
		return err
	}
	m.Command = "fedpq split " + strings.Join(args, " ")
	if err := m.Save(*out); err != nil {
		return err
	}
	least, most := m.Clients[0].Examples, 0
	for _, p := range m.Clients {
		least, most = min(least, p.Examples), max(most, p.Examples)
	}
	fmt.Fprintf(stdout, "%s: %d clients (%s, seed %d) of %d to %d examples, and a test set of %d, written in %s as %s; %s says how to run them\n",
		*from, len(m.Clients), m.Partition, m.Seed, least, most, m.Test.Examples, *out, m.Format, *out+"/README.md")
	return nil
}

// splitProgress shows the clients written: one line rewritten on a
// terminal, else a line at each tenth (for logs).
func splitProgress(w io.Writer, terminal bool) func(done, total int) {
	last := -1
	return func(done, total int) {
		switch {
		case terminal:
			fmt.Fprintf(w, "\rsplit: client %d of %d written", done, total)
			if done == total {
				fmt.Fprintln(w)
			}
		case 10*done/total != last:
			last = 10 * done / total
			fmt.Fprintf(w, "split: %d of %d clients written\n", done, total)
		}
	}
}
