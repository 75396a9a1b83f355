package split

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/fedpq/fedpq/data"
)

// csvSource writes a CSV of 40 rows: a numeric column, a column of
// categories, and a label of 3 classes.
func csvSource(t *testing.T) string {
	t.Helper()
	var b strings.Builder
	b.WriteString("size,colour,label\n")
	for i := range 40 {
		fmt.Fprintf(&b, "%d,%s,%s\n", i, []string{"red", "blue"}[i%2], []string{"a", "b", "c"}[i%3])
	}
	p := filepath.Join(t.TempDir(), "src.csv")
	if err := os.WriteFile(p, []byte(b.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

// tree is every file under dir and its bytes.
func tree(t *testing.T, dir string) map[string][]byte {
	t.Helper()
	files := map[string][]byte{}
	err := filepath.WalkDir(dir, func(p string, e os.DirEntry, err error) error {
		if err != nil || e.IsDir() {
			return err
		}
		b, err := os.ReadFile(p)
		rel, _ := filepath.Rel(dir, p)
		files[rel] = b
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	return files
}

// TestCSVSplit: a CSV is split into client-K.csv files and test.csv that
// hold its rows as they were (every row exactly once, the header kept);
// the clients' data read back as the clients a run would see, with the
// manifest's counts; the same seed writes the same bytes, another seed
// other ones.
func TestCSVSplit(t *testing.T) {
	src := csvSource(t)
	write := func(seed uint64) (string, *Manifest) {
		out := filepath.Join(t.TempDir(), "out")
		m, err := Write(Options{From: src, Clients: 4, Partition: "dirichlet:1", TestFraction: 0.25, Seed: seed, Out: out})
		if err != nil {
			t.Fatal(err)
		}
		if err := m.Save(out); err != nil {
			t.Fatal(err)
		}
		return out, m
	}
	out, m := write(7)
	files := tree(t, out)
	var rows []string
	for name, b := range files {
		if !strings.HasSuffix(name, ".csv") {
			continue
		}
		lines := strings.Split(strings.TrimSpace(string(b)), "\n")
		if lines[0] != "size,colour,label" {
			t.Errorf("%s: header %q", name, lines[0])
		}
		rows = append(rows, lines[1:]...)
	}
	want := strings.Split(strings.TrimSpace(string(must(os.ReadFile(src)))), "\n")[1:]
	slices.Sort(rows)
	slices.Sort(want)
	if !slices.Equal(rows, want) {
		t.Errorf("the written files hold %d rows, not the source's %d, each once", len(rows), len(want))
	}
	if m.Test.Examples != 10 || len(m.Clients) != 4 || m.Format != "csv" || !slices.Equal(m.Classes, []string{"a", "b", "c"}) {
		t.Fatalf("manifest %+v", m)
	}
	sp := data.Spec{Categorical: []string{"colour"}}
	_, s, err := data.Read(filepath.Join(out, m.Test.Path), sp, nil)
	if err != nil {
		t.Fatal(err)
	}
	all, parts, _, err := data.ReadClients(out, sp, s)
	if err != nil {
		t.Fatal(err)
	}
	for k, p := range parts {
		count := make([]int, 3)
		for _, i := range p {
			count[all.Y[i]]++
		}
		if !slices.Equal(count, m.Clients[k].PerClass) || m.Clients[k].Examples != len(p) {
			t.Errorf("client %d reads back %v, the manifest says %v", k, count, m.Clients[k].PerClass)
		}
	}
	var back Manifest
	if err := json.Unmarshal(files["manifest.json"], &back); err != nil || back.MaxExamples != m.MaxExamples {
		t.Errorf("manifest.json: %v, %+v", err, back)
	}
	if readme := string(files["README.md"]); !strings.Contains(readme, "fedpq run --data "+out) || !strings.Contains(readme, "fedpq client --data "+filepath.Join(out, "client-K.csv")) {
		t.Errorf("README.md:\n%s", readme)
	}

	again, _ := write(7)
	if a, b := tree(t, again), files; len(a) != len(b) {
		t.Errorf("seed 7 twice: %d and %d files", len(a), len(b))
	} else {
		for name := range b {
			if name != "README.md" && !bytes.Equal(a[name], b[name]) { // README names the directory
				t.Errorf("seed 7 twice: %s differs", name)
			}
		}
	}
	other, _ := write(8)
	if bytes.Equal(tree(t, other)["client-0.csv"], files["client-0.csv"]) {
		t.Error("seeds 7 and 8 wrote the same client-0.csv")
	}
}

// TestClientColumnSplit: --client-column writes every client's rows in
// train.csv with a column naming the client, which reads back as the same
// clients.
func TestClientColumnSplit(t *testing.T) {
	out := filepath.Join(t.TempDir(), "out")
	m, err := Write(Options{From: csvSource(t), Clients: 3, Partition: "iid", TestFraction: 0.25, ClientColumn: "user", Seed: 1, Out: out})
	if err != nil {
		t.Fatal(err)
	}
	sp := data.Spec{Categorical: []string{"colour"}, ClientColumn: "user"}
	_, s, err := data.Read(filepath.Join(out, "test.csv"), sp, nil)
	if err != nil {
		t.Fatal(err)
	}
	_, parts, names, err := data.ReadClients(filepath.Join(out, "train.csv"), sp, s)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(names, []string{"0", "1", "2"}) || len(parts[0]) != m.Clients[0].Examples || len(parts[2]) != 10 {
		t.Errorf("clients %v of %d, %d, %d examples; manifest %+v", names, len(parts[0]), len(parts[1]), len(parts[2]), m.Clients)
	}
}

// TestImageSplit: images split into ImageFolders (the default for 8-bit
// images) and NPZ files read back as the source's examples, every one
// exactly once.
func TestImageSplit(t *testing.T) {
	src := &data.Dataset{Name: "src", Shape: []int{2, 2, 1}, Classes: 2, Names: []string{"cat", "dog"}}
	for i := range 30 {
		for j := range 4 {
			src.X = append(src.X, float32((i*4+j)%256)/255)
		}
		src.Y = append(src.Y, int32(i%2))
	}
	srcPath := filepath.Join(t.TempDir(), "src.npz")
	if err := data.Write(srcPath, data.FormatNPZ, src, allOf(30), "", nil); err != nil {
		t.Fatal(err)
	}
	for _, f := range []data.Format{data.FormatAuto, data.FormatNPZ} {
		out := filepath.Join(t.TempDir(), "out")
		m, err := Write(Options{From: srcPath, Clients: 3, Partition: "shards:2", TestFraction: 0.2, Format: f, Seed: 3, Out: out})
		if err != nil {
			t.Fatal(err)
		}
		if f == data.FormatAuto && m.Format != "imagefolder" {
			t.Errorf("8-bit images written as %s by default", m.Format)
		}
		test, s, err := data.Read(filepath.Join(out, m.Test.Path), data.Spec{}, nil)
		if err != nil {
			t.Fatal(err)
		}
		all, _, _, err := data.ReadClients(out, data.Spec{}, s)
		if err != nil {
			t.Fatal(err)
		}
		if !slices.Equal(s.Classes, src.Names) || all.Len()+test.Len() != 30 {
			t.Fatalf("%s: classes %v, %d + %d examples", m.Format, s.Classes, all.Len(), test.Len())
		}
		seen := map[float32]bool{} // each example's first pixel is its own
		for _, d := range []*data.Dataset{all, test} {
			for i := range d.Len() {
				v := d.X[4*i]
				if seen[v] || d.Y[i] != int32(int(v*255+0.5)/4%2) {
					t.Fatalf("%s: example with first pixel %v twice or with label %d", m.Format, v, d.Y[i])
				}
				seen[v] = true
			}
		}
	}
}

// TestSplitErrors: what cannot be split is refused before anything is
// written, saying why.
func TestSplitErrors(t *testing.T) {
	src := csvSource(t)
	full := t.TempDir()
	os.WriteFile(filepath.Join(full, "x"), nil, 0o644)
	ok := Options{From: src, Clients: 2, Partition: "iid", TestFraction: 0.2, Seed: 1}
	for _, tc := range []struct {
		name string
		edit func(o *Options)
		want string
	}{
		{"out not empty", func(o *Options) { o.Out = full }, "exists and is not empty"},
		{"bad partition", func(o *Options) { o.Partition = "dirichlet:0" }, "must be a positive number"},
		{"csv as npz", func(o *Options) { o.Format = data.FormatNPZ }, "is split into CSV files"},
		{"too many clients", func(o *Options) { o.Clients = 100 }, "100 clients, but"},
		{"test fraction", func(o *Options) { o.TestFraction = 1 }, "test fraction 1"},
		{"no clients", func(o *Options) { o.Clients = 0 }, "0 clients"},
		{"synthetic", func(o *Options) { o.From = "synthetic" }, "generated with its own clients"},
		{"missing file", func(o *Options) { o.From = filepath.Join(full, "none.csv") }, "no such file"},
		{"client column in npz", func(o *Options) { o.ClientColumn, o.Format = "user", data.FormatNPZ }, "written in a CSV"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			o := ok
			o.Out = filepath.Join(t.TempDir(), "out")
			tc.edit(&o)
			_, err := Write(o)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("err = %v, want %q", err, tc.want)
			}
			if o.Out != full {
				if _, err := os.Stat(o.Out); err == nil {
					t.Errorf("%s was written", o.Out)
				}
			}
		})
	}
}

func must[T any](v T, err error) T {
	if err != nil {
		panic(err)
	}
	return v
}
