package fl

import (
	"fmt"
	"math"
	"strings"

	"github.com/fedpq/fedpq/internal/spec"
)

// Staleness is how an asynchronous run weighs an upload trained from a
// model s server steps old: constant (every upload weighs 1), poly:A,
// (1+s)^-A, or hinge:A:B, 1 for s <= B and 1/(A(s-B)+1) beyond: the forms
// of FedAsync (Xie et al. 2019, section 5.2) that FedBuff (Nguyen et al.,
// AISTATS 2022) uses, with poly:0.5 its experiments' choice.
type Staleness struct {
	Kind string // "constant" (or ""), "poly" or "hinge"
	A, B float64
}

// ParseStaleness reads a staleness weighting: constant, poly:A or
// hinge:A:B (hinge:A,B alike).
func ParseStaleness(s string) (Staleness, error) {
	p := spec.Parse(s)
	p.Args = strings.ReplaceAll(p.Args, ":", ",")
	f, err := p.Numbers()
	bad := func(why string) error {
		return fmt.Errorf("fl: staleness %q: %s; want constant, poly:A ((1+s)^-A, A >= 0) or hinge:A:B (1 up to staleness B, then 1/(A(s-B)+1))", s, why)
	}
	if err != nil {
		return Staleness{}, bad(err.Error())
	}
	st := Staleness{Kind: p.Kind}
	switch {
	case p.Kind == "" || p.Kind == "constant":
		if len(f) != 0 {
			return Staleness{}, bad("constant takes no argument")
		}
		st.Kind = "constant"
	case p.Kind == "poly" && len(f) == 1:
		st.A = f[0]
	case p.Kind == "hinge" && len(f) == 2:
		st.A, st.B = f[0], f[1]
	default:
		return Staleness{}, bad("unknown kind, or the wrong number of arguments")
	}
	if !(st.A >= 0 && st.A <= 1e6) || !(st.B >= 0 && st.B <= 1e9) {
		return Staleness{}, bad("A and B must be finite and at least 0")
	}
	return st, nil
}

// String is the weighting as ParseStaleness reads it.
func (st Staleness) String() string {
	switch st.Kind {
	case "poly":
		return fmt.Sprintf("poly:%g", st.A)
	case "hinge":
		return fmt.Sprintf("hinge:%g:%g", st.A, st.B)
	}
	return "constant"
}

// constant reports whether every upload weighs 1 whatever its staleness.
func (st Staleness) constant() bool {
	return st.Kind == "" || st.Kind == "constant" || st.A == 0
}

// Weight is the weight of an upload s server steps stale, in (0, 1].
func (st Staleness) Weight(s int) float64 {
	switch st.Kind {
	case "poly":
		return math.Pow(1+float64(s), -st.A)
	case "hinge":
		if float64(s) <= st.B {
			return 1
		}
		return 1 / (st.A*(float64(s)-st.B) + 1)
	}
	return 1
}
