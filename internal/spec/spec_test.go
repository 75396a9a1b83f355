package spec

import (
	"slices"
	"testing"
)

// TestParse: the kind ends at the first colon, and "k:" is told from "k"
// (an attack that takes no argument refuses the first).
func TestParse(t *testing.T) {
	want := map[string]Spec{
		"iid":           {Kind: "iid"},
		"iid:":          {Kind: "iid", HasArgs: true},
		"fixed:0,0.075": {Kind: "fixed", Args: "0,0.075", HasArgs: true},
		"a:b:c":         {Kind: "a", Args: "b:c", HasArgs: true},
		":":             {HasArgs: true},
		"":              {},
	}
	for in, w := range want {
		if got := Parse(in); got != w {
			t.Errorf("Parse(%q) = %+v, want %+v", in, got, w)
		}
	}
}

// TestNumbers: space around a number is allowed, and the error quotes the
// first argument that is not one as it was written.
func TestNumbers(t *testing.T) {
	for _, c := range []struct {
		in   string
		want []float64
		err  string
	}{
		{"k", nil, ""},
		{"k:", nil, ""},
		{"k:1", []float64{1}, ""},
		{"k:0, 0.075", []float64{0, 0.075}, ""},
		{"k: -1e3 ,2", []float64{-1000, 2}, ""},
		{"k:1,x", nil, `"x" is not a number`},
		{"k:1, x", nil, `" x" is not a number`},
		{"k:1,", nil, `"" is not a number`},
		{"k:1;2", nil, `"1;2" is not a number`},
	} {
		got, err := Parse(c.in).Numbers()
		switch {
		case c.err != "" && (err == nil || err.Error() != c.err):
			t.Errorf("Numbers of %q: error %v, want %q", c.in, err, c.err)
		case c.err == "" && (err != nil || !slices.Equal(got, c.want)):
			t.Errorf("Numbers of %q = %v, %v; want %v", c.in, got, err, c.want)
		}
	}
}
