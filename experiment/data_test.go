package experiment

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/fedpq/fedpq/data"
)

// writeOwn writes the quick start's data (Synthetic(1,1), 30 natural
// clients) as a directory of client-K.npz files with test.npz beside
// them, and as one CSV with a client column (features as they are) with
// test.csv; it returns the directory and the CSV.
func writeOwn(t *testing.T, c Config) (dir, csv string) {
	t.Helper()
	fed, err := data.Load(c.Dataset, data.Options{Clients: c.Clients, Seed: c.Seed})
	if err != nil {
		t.Fatal(err)
	}
	dir = t.TempDir()
	var rows []int
	var owner []string
	for k, idx := range fed.Natural {
		if err := data.Write(filepath.Join(dir, fmt.Sprintf("client-%d.npz", k)), data.FormatNPZ, fed.Train, idx, "", nil); err != nil {
			t.Fatal(err)
		}
		rows = append(rows, idx...)
		for range idx {
			owner = append(owner, fmt.Sprint(k))
		}
	}
	all := allOf(fed.Test)
	if err := data.Write(filepath.Join(dir, "test.npz"), data.FormatNPZ, fed.Test, all, "", nil); err != nil {
		t.Fatal(err)
	}
	csvDir := t.TempDir()
	csv = filepath.Join(csvDir, "train.csv")
	if err := data.Write(csv, data.FormatCSV, fed.Train, rows, "user", func(j int) string { return owner[j] }); err != nil {
		t.Fatal(err)
	}
	if err := data.Write(filepath.Join(csvDir, "test.csv"), data.FormatCSV, fed.Test, all, "", nil); err != nil {
		t.Fatal(err)
	}
	return dir, csv
}

// TestOwnDataMatchesDataset: the quick start's own data, written out as a
// directory of clients' NPZ files or as a CSV with a client column (and
// no feature scaling), trains exactly as the built-in dataset does: the
// same accuracy every round, bit for bit. The run records what it
// resolved (clients, max_examples, the schema) in its config.yaml, which
// sets up the same run again.
func TestOwnDataMatchesDataset(t *testing.T) {
	base := quick(t)
	want, err := Run(context.Background(), base, nil)
	if err != nil {
		t.Fatal(err)
	}
	dir, csv := writeOwn(t, base)
	for _, tc := range []struct {
		name string
		own  OwnData
	}{
		{"npz directory", OwnData{Data: dir}},
		{"csv with client column", OwnData{Data: csv, TestData: filepath.Join(filepath.Dir(csv), "test.csv"), ClientColumn: "user", FeatureScaling: "none"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := quick(t)
			c.OwnData = tc.own
			c.Clients = 0 // as many as the data has
			got, err := Run(context.Background(), c, nil)
			if err != nil {
				t.Fatal(err)
			}
			if got.FinalAccuracy != want.FinalAccuracy || got.BestAccuracy != want.BestAccuracy {
				t.Errorf("accuracy %v (best %v) on the own data, %v (best %v) on the dataset", got.FinalAccuracy, got.BestAccuracy, want.FinalAccuracy, want.BestAccuracy)
			}
			rec := Default()
			if err := Load(filepath.Join(c.Out, "config.yaml"), &rec); err != nil {
				t.Fatal(err)
			}
			if rec.Clients != 30 || rec.MaxExamples < 50 || rec.Schema == nil || !slices.Equal(rec.Schema.Shape, []int{60}) ||
				len(rec.Schema.Classes) != 10 || rec.Dataset != "" || rec.Partition != "natural" || rec.TestData == "" {
				t.Errorf("config.yaml records %+v", rec)
			}
			su, err := NewSetup(rec)
			if err != nil {
				t.Fatal(err)
			}
			if !su.Config.Schema.Equal(rec.Schema) || len(su.Clients) != 30 {
				t.Errorf("config.yaml sets up schema %+v and %d clients", su.Config.Schema, len(su.Clients))
			}
		})
	}
}

// TestOwnDataSetups: a deployed server reads only the evaluation set and
// resolves the schema; a client reads only its own file into it; and each
// setting that cannot work is refused, saying why.
func TestOwnDataSetups(t *testing.T) {
	base := quick(t)
	dir, _ := writeOwn(t, base)
	server := base
	server.TestData, server.MaxExamples = filepath.Join(dir, "test.npz"), 500
	su, err := NewServerSetup(server)
	if err != nil {
		t.Fatal(err)
	}
	if su.Clients != nil || su.Data.Train.Len() != 0 || su.Data.Test.Len() < 100 || su.Config.Schema == nil || su.Config.Partition != "natural" {
		t.Fatalf("server setup: clients %v, train %d, test %d, config %+v", su.Clients, su.Data.Train.Len(), su.Data.Test.Len(), su.Config)
	}
	// The client gets the configuration as the server sent it.
	y, err := su.Config.YAML()
	if err != nil {
		t.Fatal(err)
	}
	sent := Default()
	if err := Parse(y, &sent); err != nil {
		t.Fatal(err)
	}
	cl, err := NewClientSetup(sent, 3, filepath.Join(dir, "client-3.npz"))
	if err != nil {
		t.Fatal(err)
	}
	own, _, _ := data.Read(filepath.Join(dir, "client-3.npz"), data.Spec{}, nil)
	if cl.Data.Test != nil || cl.Data.Train.Len() != own.Len() || len(cl.Clients) != 1 || len(cl.Clients[0]) != own.Len() || cl.Model.NumParams() != 610 {
		t.Errorf("client setup: train %d (its file %d), %d parameters", cl.Data.Train.Len(), own.Len(), cl.Model.NumParams())
	}
	// A partition client keeps only its partition.
	part, err := NewClientSetup(base, 2, "")
	if err != nil {
		t.Fatal(err)
	}
	if full, _ := NewSetup(base); part.Data.Train.Len() != len(full.Clients[2]) || part.Data.Test != nil {
		t.Errorf("partition client: %d examples, its partition %d", part.Data.Train.Len(), len(full.Clients[2]))
	}

	other := writeFile(t, t.TempDir(), "c.csv", "a,label\n1,0\n2,1\n")
	noSchema := sent
	noSchema.Schema = nil
	for _, tc := range []struct {
		name string
		err  func() error
		want string
	}{
		{"client data of another shape", func() error { _, err := NewClientSetup(sent, 1, other); return err }, "against the run's schema"},
		{"client without data", func() error { _, err := NewClientSetup(sent, 1, ""); return err }, "give --data"},
		{"client id beyond the run", func() error { _, err := NewClientSetup(sent, 30, other); return err }, "client 30: the run has clients 0 to 29"},
		{"client data on a partitioned run", func() error { _, err := NewClientSetup(base, 1, other); return err }, "give --partition K/N"},
		{"server config without schema", func() error { _, err := NewClientSetup(noSchema, 1, other); return err }, "no schema"},
		{"server given the clients' data", func() error {
			c := server
			c.Data = dir
			_, err := NewServerSetup(c)
			return err
		}, "remove data from the server's configuration"},
		{"server without max_examples", func() error {
			c := server
			c.MaxExamples = 0
			_, err := NewServerSetup(c)
			return err
		}, "needs max_examples"},
		{"clients unlike the data", func() error {
			c := base
			c.Data, c.Clients = dir, 7
			_, err := NewSetup(c)
			return err
		}, "clients 7, but"},
		{"no test set", func() error {
			c := base
			c.Data = filepath.Dir(other)
			_, err := NewSetup(c)
			return err
		}, "give test_data"},
		{"iid partition of own data", func() error {
			c := base
			c.Data, c.Partition = dir, "iid"
			return c.Validate()
		}, "each client's data is its own"},
		{"a dataset and own data", func() error {
			c := base
			c.Data, c.Dataset = dir, "mnist"
			return c.Validate()
		}, "not both"},
		{"validation fraction with own data", func() error {
			c := base
			c.Data, c.Validation = dir, 0.1
			return c.Validate()
		}, "give validation_data"},
		{"negative max_examples", func() error {
			c := base
			c.MaxExamples = -1
			return c.Validate()
		}, "must not be negative"},
	} {
		if err := tc.err(); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v, want %q", tc.name, err, tc.want)
		}
	}
}

// TestValidationData: a validation set is the engine's held-out examples,
// after the clients'; the schema's statistics come from it.
func TestValidationData(t *testing.T) {
	dir := t.TempDir()
	writeFile(t, dir, "client-0.csv", "a,label\n1,x\n3,y\n")
	writeFile(t, dir, "client-1.csv", "a,label\n2,y\n")
	writeFile(t, dir, "test.csv", "a,label\n0,x\n9,y\n")
	val := writeFile(t, dir, "val.csv", "a,label\n10,x\n20,y\n30,y\n")
	c := quick(t)
	c.Data, c.ValidationData, c.Clients, c.Dataset = dir, val, 0, ""
	su, err := NewSetup(c)
	if err != nil {
		t.Fatal(err)
	}
	col := su.Config.Schema.Columns[0]
	if su.Data.Train.Len() != 6 || !slices.Equal(su.Validation, []int{3, 4, 5}) || col.Shift != 20 || fmt.Sprint(su.Clients) != "[[0 1] [2]]" || su.Config.MaxExamples != 2 {
		t.Errorf("train %d, validation %v, column %+v, clients %v, max_examples %d", su.Data.Train.Len(), su.Validation, col, su.Clients, su.Config.MaxExamples)
	}
}

func writeFile(t *testing.T, dir, name, text string) string {
	t.Helper()
	p := filepath.Join(dir, name)
	if err := os.WriteFile(p, []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}
