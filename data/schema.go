package data

import (
	"cmp"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
)

// Format is the file format of a user's dataset (Read).
type Format string

// The formats Read knows. FormatAuto detects the format from the path.
const (
	FormatAuto        Format = ""
	FormatImageFolder Format = "imagefolder" // one subdirectory of PNG/JPEG images per class
	FormatCSV         Format = "csv"         // a header, feature columns and a label column
	FormatNPZ         Format = "npz"         // NumPy's np.savez: arrays x and y
	FormatNPY         Format = "npy"         // a directory holding x.npy and y.npy
	FormatIDX         Format = "idx"         // an IDX images file and its labels file
	FormatCIFAR       Format = "cifar"       // one CIFAR-10 binary batch file
)

// Formats lists the formats by name.
var Formats = []Format{FormatImageFolder, FormatCSV, FormatNPZ, FormatNPY, FormatIDX, FormatCIFAR}

// ParseFormat reads a format name; "" and "auto" detect it.
func ParseFormat(s string) (Format, error) {
	if s == "" || s == "auto" {
		return FormatAuto, nil
	}
	if f := Format(strings.ToLower(s)); slices.Contains(Formats, f) {
		return f, nil
	}
	return "", fmt.Errorf("data: format %q: want auto, imagefolder, csv, npz, npy, idx or cifar", s)
}

// The feature scalings of a CSV's numeric columns.
const (
	ScaleStandard = "standard" // (v - mean) / standard deviation
	ScaleMinMax   = "minmax"   // (v - min) / (max - min), in [0, 1]
	ScaleNone     = "none"     // v as it is
)

// Spec says how to read a user's dataset: its format and, for CSV, what
// its columns are; for images, the size and channels to give them; and the
// class names where the user declares them. Every field may be left zero:
// the format is then detected and the rest taken from the data.
type Spec struct {
	Format Format
	// LabelColumn names a CSV's label column; "" takes the column named
	// label, else target.
	LabelColumn string
	// Categorical names a CSV's columns of categories: each becomes one
	// feature per category (one-hot). Every other column is a number.
	Categorical []string
	// ClientColumn names a CSV's column saying which client each row
	// belongs to (ReadClients); it is not a feature.
	ClientColumn string
	// Scaling is how a CSV's numeric columns are scaled: ScaleStandard
	// ("" means the same), ScaleMinMax or ScaleNone; the statistics come
	// from the dataset the schema is resolved from.
	Scaling string
	// ImageSize, height and width, is the size every image is resized to;
	// zero: the images' own, which must all agree.
	ImageSize [2]int
	// Channels is 1 (grey) or 3 (RGB); 0: 1 if every image of the dataset
	// the schema is resolved from is grey, else 3.
	Channels int
	// Classes are the class names, in label order; nil: from the data.
	Classes []string
}

// Validate checks sp's settings on their own.
func (sp Spec) Validate() error {
	if _, err := ParseFormat(string(sp.Format)); err != nil {
		return err
	}
	switch sp.Scaling {
	case "", ScaleStandard, ScaleMinMax, ScaleNone:
	default:
		return fmt.Errorf("data: feature scaling %q: want standard, minmax or none", sp.Scaling)
	}
	if sp.Channels != 0 && sp.Channels != 1 && sp.Channels != 3 {
		return fmt.Errorf("data: %d channels: want 1 (grey), 3 (RGB) or 0 (from the data)", sp.Channels)
	}
	if (sp.ImageSize[0] == 0) != (sp.ImageSize[1] == 0) || sp.ImageSize[0] < 0 || sp.ImageSize[1] < 0 {
		return fmt.Errorf("data: image size %dx%d: want HEIGHTxWIDTH, both positive", sp.ImageSize[0], sp.ImageSize[1])
	}
	if sp.Classes != nil {
		if err := checkClassNames(sp.Classes); err != nil {
			return err
		}
	}
	for _, c := range sp.Categorical {
		if c == sp.LabelColumn || (c == sp.ClientColumn && c != "") {
			return fmt.Errorf("data: column %q is declared categorical and is the label or client column", c)
		}
	}
	return nil
}

// ParseImageSize reads HEIGHTxWIDTH (or one number for a square); ""
// is zero, the images' own size.
func ParseImageSize(s string) ([2]int, error) {
	if s == "" {
		return [2]int{}, nil
	}
	h, w, ok := strings.Cut(strings.ToLower(s), "x")
	if !ok {
		w = h
	}
	hi, err1 := strconv.Atoi(strings.TrimSpace(h))
	wi, err2 := strconv.Atoi(strings.TrimSpace(w))
	if err1 != nil || err2 != nil || hi < 1 || wi < 1 || hi > 1<<14 || wi > 1<<14 {
		return [2]int{}, fmt.Errorf("data: image size %q: want HEIGHTxWIDTH such as 28x28 (each 1 to 16384)", s)
	}
	return [2]int{hi, wi}, nil
}

// Schema is what every client's data and the server's evaluation set must
// agree on, so that all of them build the same model: the shape of one
// example, the class names in label order and, for a CSV, how each column
// becomes features. A run resolves it from its evaluation set (or the user
// declares it) and records it in its config.yaml, which a deployed server
// sends every client; a client reads its own data into it, and data that
// do not fit it are an error.
type Schema struct {
	Shape   []int    `yaml:"shape,flow" json:"shape"`
	Classes []string `yaml:"classes,flow" json:"classes"`
	// Columns, for a CSV, are its feature columns in feature order; nil
	// for arrays and images, whose values are the features.
	Columns []Column `yaml:"columns,omitempty" json:"columns,omitempty"`
}

// Column is one feature column of a CSV: numeric, the feature
// (value - Shift) / Scale; or categorical, one feature per category that is
// 1 for the row's category and 0 for the others.
type Column struct {
	Name       string   `yaml:"name" json:"name"`
	Categories []string `yaml:"categories,flow,omitempty" json:"categories,omitempty"`
	Shift      float64  `yaml:"shift,omitempty" json:"shift,omitempty"`
	Scale      float64  `yaml:"scale,omitempty" json:"scale,omitempty"`
}

// Features is the number of features of one example.
func (s *Schema) Features() int { return product(s.Shape) }

// Validate checks that s is a schema a model can be built from: a positive
// shape, at least two distinct class names and, for a CSV, columns whose
// features make up the shape.
func (s *Schema) Validate() error {
	if len(s.Shape) == 0 {
		return errors.New("data: schema: no shape")
	}
	for _, d := range s.Shape {
		if d < 1 {
			return fmt.Errorf("data: schema: shape %v has a dimension below 1", s.Shape)
		}
	}
	if len(s.Classes) < 2 {
		return fmt.Errorf("data: schema: %d classes %v: want at least 2", len(s.Classes), s.Classes)
	}
	if err := checkClassNames(s.Classes); err != nil {
		return fmt.Errorf("data: schema: %w", err)
	}
	if s.Columns == nil {
		return nil
	}
	f, seen := 0, map[string]bool{}
	for _, c := range s.Columns {
		if c.Name == "" || seen[c.Name] {
			return fmt.Errorf("data: schema: column %q is empty or named twice", c.Name)
		}
		seen[c.Name] = true
		switch {
		case c.Categories != nil:
			if err := unique(c.Categories); err != nil {
				return fmt.Errorf("data: schema: column %q: %w", c.Name, err)
			}
			f += len(c.Categories)
		case !(c.Scale > 0) || !finite(c.Scale) || !finite(c.Shift):
			return fmt.Errorf("data: schema: numeric column %q has shift %v and scale %v: want finite numbers, scale positive", c.Name, c.Shift, c.Scale)
		default:
			f++
		}
	}
	if len(s.Shape) != 1 || s.Shape[0] != f {
		return fmt.Errorf("data: schema: columns make %d features, the shape says %v", f, s.Shape)
	}
	return nil
}

// Equal reports whether s and o are the same schema.
func (s *Schema) Equal(o *Schema) bool {
	return slices.Equal(s.Shape, o.Shape) && slices.Equal(s.Classes, o.Classes) &&
		slices.EqualFunc(s.Columns, o.Columns, func(a, b Column) bool {
			return a.Name == b.Name && slices.Equal(a.Categories, b.Categories) && a.Shift == b.Shift && a.Scale == b.Scale
		})
}

// SchemaOf is the schema of a dataset whose values are its features (a
// built-in dataset, arrays or images), with class names "0", "1", ....
func SchemaOf(d *Dataset) *Schema {
	return &Schema{Shape: slices.Clone(d.Shape), Classes: d.ClassNames()}
}

// ClassNames is the dataset's class names: those it was read with, else
// "0", "1", ... for its Classes.
func (d *Dataset) ClassNames() []string {
	if d.Names != nil {
		return slices.Clone(d.Names)
	}
	return indexNames(d.Classes)
}

func indexNames(n int) []string {
	names := make([]string, n)
	for i := range names {
		names[i] = strconv.Itoa(i)
	}
	return names
}

// checkClassNames wants distinct, non-empty names that can name a
// directory (ImageFolder): no slash, not "." or "..".
func checkClassNames(names []string) error {
	for _, n := range names {
		if n == "" || n == "." || n == ".." || strings.ContainsAny(n, "/\\\x00") {
			return fmt.Errorf("class name %q: want a non-empty name without slashes (it names an ImageFolder directory)", n)
		}
	}
	return unique(names)
}

func unique(names []string) error {
	seen := map[string]bool{}
	for _, n := range names {
		if seen[n] {
			return fmt.Errorf("%q is named twice", n)
		}
		seen[n] = true
	}
	return nil
}

// sortNames sorts names in place: by number where every name is an
// integer (so "10" comes after "9"), else as strings. Class names,
// categories and clients are ordered this way wherever they come from the
// data.
func sortNames(names []string) {
	nums := make(map[string]int64, len(names))
	for _, n := range names {
		v, err := strconv.ParseInt(n, 10, 64)
		if err != nil {
			slices.Sort(names)
			return
		}
		nums[n] = v
	}
	slices.SortFunc(names, func(a, b string) int { return cmp.Compare(nums[a], nums[b]) })
}

// distinct returns the distinct values of vals, ordered by sortNames.
func distinct(vals []string) []string {
	seen := map[string]bool{}
	var out []string
	for _, v := range vals {
		if !seen[v] {
			seen[v] = true
			out = append(out, v)
		}
	}
	sortNames(out)
	return out
}

func product(shape []int) int {
	f := 1
	for _, s := range shape {
		f *= s
	}
	return f
}

func finite(v float64) bool { return v-v == 0 }

// labeler turns the labels of a dataset into indices of a class list: the
// schema's, or one resolved from the labels themselves.
type labeler struct {
	classes []string
	index   map[string]int32
}

func newLabeler(classes []string) *labeler {
	l := &labeler{classes: classes, index: make(map[string]int32, len(classes))}
	for i, c := range classes {
		l.index[c] = int32(i)
	}
	return l
}

// resolveClasses is the class list for named labels: s's if there is a
// schema, else the declared one, else the labels' distinct values.
func resolveClasses(s *Schema, declared, labels []string) []string {
	switch {
	case s != nil:
		return s.Classes
	case declared != nil:
		return declared
	}
	return distinct(labels)
}

// name maps a class name to its label, or says it is none of the classes.
func (l *labeler) name(n string) (int32, error) {
	if i, ok := l.index[n]; ok {
		return i, nil
	}
	return 0, fmt.Errorf("label %q is not one of the classes %s", n, short(l.classes))
}

// indexLabels checks labels that are already indices (arrays, IDX, CIFAR)
// against the class list, which is s's, else the declared one, else "0" to
// the largest label.
func indexLabels(y []int32, s *Schema, declared []string) ([]string, error) {
	var classes []string
	switch {
	case s != nil:
		classes = s.Classes
	case declared != nil:
		classes = declared
	default:
		top := int32(0)
		for _, v := range y {
			top = max(top, v)
		}
		classes = indexNames(int(top) + 1)
	}
	for i, v := range y {
		if v < 0 || int(v) >= len(classes) {
			return nil, fmt.Errorf("label %d of example %d is not one of the %d classes %s", v, i, len(classes), short(classes))
		}
	}
	return classes, nil
}

// short renders a list for an error message, eliding the middle of a long
// one.
func short(names []string) string {
	if len(names) <= 12 {
		return "[" + strings.Join(names, " ") + "]"
	}
	return "[" + strings.Join(names[:6], " ") + " ... " + strings.Join(names[len(names)-3:], " ") + fmt.Sprintf("] (%d)", len(names))
}
