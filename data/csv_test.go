package data

import (
	"bytes"
	"compress/gzip"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/fedpq/fedpq/data/datatest"
)

func writeFile(t *testing.T, path, text string) string {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

const tinyCSV = `age,colour,user,label
20,red,bob,yes
40,blue,ann,no
30,red,ann,yes
10,green,bob,no
`

// TestCSV: the label column, a categorical column (one-hot over its values
// in order), the client column left out of the features, and standard
// scaling with the file's own mean and standard deviation (here 25 and
// sqrt(125)); a client's file read into that schema is scaled with the
// same statistics, not its own.
func TestCSV(t *testing.T) {
	dir := t.TempDir()
	sp := Spec{Categorical: []string{"colour"}, ClientColumn: "user"}
	d, s, err := Read(writeFile(t, filepath.Join(dir, "all.csv"), tinyCSV), sp, nil)
	if err != nil {
		t.Fatal(err)
	}
	sd := math.Sqrt(125)
	want := &Schema{Shape: []int{4}, Classes: []string{"no", "yes"}, Columns: []Column{
		{Name: "age", Shift: 25, Scale: sd}, {Name: "colour", Categories: []string{"blue", "green", "red"}}}}
	if !s.Equal(want) {
		t.Fatalf("schema %+v, want %+v", s, want)
	}
	if !slices.Equal(d.Y, []int32{1, 0, 1, 0}) {
		t.Errorf("labels %v", d.Y)
	}
	row := []float32{float32((20 - 25) / sd), 0, 0, 1}
	if !slices.Equal(d.X[:4], row) {
		t.Errorf("row 1 %v, want %v", d.X[:4], row)
	}
	// A client's own file, with columns in another order and no client
	// column, fits the schema with the run's statistics.
	c, _, err := Read(writeFile(t, filepath.Join(dir, "client.csv"), "label,colour,age\nyes,green,25\n"), Spec{Categorical: []string{"colour"}}, s)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(c.X, []float32{0, 0, 1, 0}) || c.Y[0] != 1 {
		t.Errorf("client row %v label %d", c.X, c.Y[0])
	}
	for _, tc := range []struct{ scaling, row string }{{ScaleMinMax, "0.3333"}, {ScaleNone, "20"}} {
		_, s, err := Read(filepath.Join(dir, "all.csv"), Spec{Categorical: sp.Categorical, ClientColumn: "user", Scaling: tc.scaling}, nil)
		if err != nil {
			t.Fatal(err)
		}
		if tc.scaling == ScaleMinMax && (s.Columns[0].Shift != 10 || s.Columns[0].Scale != 30) ||
			tc.scaling == ScaleNone && (s.Columns[0].Shift != 0 || s.Columns[0].Scale != 1) {
			t.Errorf("%s: column age %+v", tc.scaling, s.Columns[0])
		}
	}
}

// TestCSVErrors: each thing wrong with a CSV is an error naming the line
// and column, never a panic or a value made up.
func TestCSVErrors(t *testing.T) {
	run := &Schema{Shape: []int{2}, Classes: []string{"no", "yes"}, Columns: []Column{{Name: "a", Scale: 1}, {Name: "b", Scale: 1}}}
	cat := &Schema{Shape: []int{2}, Classes: []string{"no", "yes"}, Columns: []Column{{Name: "c", Categories: []string{"x", "y"}}}}
	for _, tc := range []struct {
		name, text string
		sp         Spec
		s          *Schema
		want       string
	}{
		{"nan", "a,b,label\n1,NaN,yes\n", Spec{}, nil, `line 2, column "b": "NaN" is not a finite number`},
		{"inf", "a,b,label\n1,2,yes\n1,-Inf,no\n", Spec{}, nil, `line 3, column "b": "-Inf" is not a finite number`},
		{"missing", "a,b,label\n1,,yes\n", Spec{}, nil, "empty (missing values are not supported"},
		{"text in a number", "a,b,label\n1,red,yes\n", Spec{}, nil, `"red" is not a number; a column of categories is declared in categorical_columns`},
		{"ragged", "a,b,label\n1,2,yes\n1,2\n", Spec{}, nil, "line 3 has 2 fields, the header 3"},
		{"header twice", "a,a,label\n1,2,yes\n", Spec{}, nil, `"a" is named twice`},
		{"header empty", "a,,label\n1,2,yes\n", Spec{}, nil, "column 2 of the header is empty"},
		{"no label", "a,b,c\n1,2,3\n", Spec{}, nil, "no column named label or target"},
		{"named label absent", "a,b,label\n1,2,yes\n", Spec{LabelColumn: "y"}, nil, `no label column "y"`},
		{"categorical absent", "a,b,label\n1,2,yes\n", Spec{Categorical: []string{"z"}}, nil, `categorical column "z"`},
		{"empty", "", Spec{}, nil, "empty: a CSV needs a header"},
		{"header only", "a,b,label\n", Spec{}, nil, "a header and no rows"},
		{"label not a class", "a,b,label\n1,2,maybe\n", Spec{}, run, `line 2: label "maybe" is not one of the classes [no yes]`},
		{"declared classes", "a,b,label\n1,2,maybe\n", Spec{Classes: []string{"no", "yes"}}, nil, `label "maybe" is not one of the classes`},
		{"column not in the run", "a,b,z,label\n1,2,3,yes\n", Spec{}, run, `column "z" is not one of the run's feature columns`},
		{"column of the run absent", "a,label\n1,yes\n", Spec{}, run, `no column "b", one of the run's feature columns`},
		{"category not in the run", "c,label\nz,yes\n", Spec{}, cat, `"z" is not one of its categories [x y]`},
		{"csv for an image run", "a,label\n1,yes\n", Spec{}, &Schema{Shape: []int{2, 2, 1}, Classes: []string{"no", "yes"}}, "the run's examples are arrays or images"},
		{"bad quote", "a,b,label\n1,\"2,yes\n", Spec{}, nil, "quote"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := writeFile(t, filepath.Join(t.TempDir(), "d.csv"), tc.text)
			_, _, err := Read(p, tc.sp, tc.s)
			if err == nil || !strings.Contains(err.Error(), tc.want) || !strings.HasPrefix(err.Error(), "data: ") {
				t.Errorf("err = %v, want %q", err, tc.want)
			}
		})
	}
}

// TestCSVGzipAndSklearnLayout: a gzipped CSV reads as the plain one; a
// file in scikit-learn's layout (first line: examples, features, class
// names; labels as class indices) reads with columns x0, x1, ... and the
// class names, and a count that disagrees with its first line is an error.
func TestCSVGzipAndSklearnLayout(t *testing.T) {
	dir := t.TempDir()
	var gz bytes.Buffer
	zw := gzip.NewWriter(&gz)
	zw.Write([]byte(tinyCSV))
	zw.Close()
	p := filepath.Join(dir, "t.csv.gz")
	os.WriteFile(p, gz.Bytes(), 0o644)
	d, _, err := Read(p, Spec{Categorical: []string{"colour", "user"}}, nil)
	if err != nil || d.Len() != 4 || d.Features() != 6 {
		t.Fatalf("gzipped: %v", err)
	}
	sk := writeFile(t, filepath.Join(dir, "sk.csv"), "3,2,setosa,versicolor\n1.5,2,0\n2.5,4,1\n3.5,6,1\n")
	d, s, err := Read(sk, Spec{Scaling: ScaleNone}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(names(s.Columns), []string{"x0", "x1"}) || !slices.Equal(s.Classes, []string{"setosa", "versicolor"}) ||
		!slices.Equal(d.Y, []int32{0, 1, 1}) || !slices.Equal(d.X, []float32{1.5, 2, 2.5, 4, 3.5, 6}) {
		t.Fatalf("scikit-learn layout: schema %+v, X %v, Y %v", s, d.X, d.Y)
	}
	for _, bad := range []struct{ text, want string }{
		{"4,2,setosa,versicolor\n1.5,2,0\n", "1 rows, the header (scikit-learn's layout) says 4"},
		{"1,2,setosa,versicolor\n1.5,2,2\n", `label "2" is not an index of the header's 2 classes`},
	} {
		_, _, err := Read(writeFile(t, filepath.Join(dir, "bad.csv"), bad.text), Spec{}, nil)
		if err == nil || !strings.Contains(err.Error(), bad.want) {
			t.Errorf("%q: %v, want %q", bad.text, err, bad.want)
		}
	}
}

// TestSklearnCSVs: scikit-learn's bundled breast cancer, wine and iris sets
// read as they ship, with their published sizes, classes and class counts
// (sklearn's documentation: breast cancer 212 malignant, 357 benign; wine
// 59, 71, 48; iris 50 each), and standard-scaled features of mean 0 and
// standard deviation 1 in every column.
func TestSklearnCSVs(t *testing.T) {
	dir := datatest.Sklearn(t)
	for _, tc := range []struct {
		file     string
		n, f     int
		classes  []string
		perClass []int
	}{
		{"breast_cancer.csv", 569, 30, []string{"malignant", "benign"}, []int{212, 357}},
		{"wine_data.csv", 178, 13, []string{"class_0", "class_1", "class_2"}, []int{59, 71, 48}},
		{"iris.csv", 150, 4, []string{"setosa", "versicolor", "virginica"}, []int{50, 50, 50}},
	} {
		t.Run(tc.file, func(t *testing.T) {
			d, s, err := Read(filepath.Join(dir, tc.file), Spec{}, nil)
			if err != nil {
				t.Fatal(err)
			}
			if d.Len() != tc.n || d.Features() != tc.f || !slices.Equal(s.Classes, tc.classes) {
				t.Fatalf("%d examples of %d features, classes %v", d.Len(), d.Features(), s.Classes)
			}
			count := make([]int, len(tc.classes))
			for _, y := range d.Y {
				count[y]++
			}
			if !slices.Equal(count, tc.perClass) {
				t.Errorf("examples per class %v, want %v", count, tc.perClass)
			}
			for j := range tc.f {
				var sum, sq float64
				for i := range tc.n {
					v := float64(d.X[i*tc.f+j])
					sum, sq = sum+v, sq+v*v
				}
				mean := sum / float64(tc.n)
				if sdev := math.Sqrt(sq/float64(tc.n) - mean*mean); math.Abs(mean) > 1e-4 || math.Abs(sdev-1) > 1e-4 {
					t.Errorf("feature %d: mean %v, standard deviation %v after scaling", j, mean, sdev)
				}
			}
		})
	}
}
