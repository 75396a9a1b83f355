package dme

import (
	"fmt"

	"github.com/fedpq/fedpq/corr"
	"github.com/fedpq/fedpq/internal/spec"
	"github.com/fedpq/fedpq/mech"
)

// Input is the distribution of every client's parameters, drawn
// independently per client and coordinate.
type Input struct {
	Kind string  // "const", "uniform" or "normal"
	A, B float64 // const: A; uniform: [A, B); normal: mean A, deviation B
	// Span marks a bare "uniform": [A, B) is then the clipping range.
	Span bool
}

// ParseInput reads const:V, uniform (the clipping range), uniform:A,B or
// normal:MU,SIGMA.
func ParseInput(s string) (Input, error) {
	p := spec.Parse(s)
	nums, err := p.Numbers()
	if err != nil {
		return Input{}, fmt.Errorf("dme: input %q: %w", s, err)
	}
	kind := p.Kind
	switch {
	case kind == "const" && len(nums) == 1:
		return Input{Kind: kind, A: nums[0]}, nil
	case kind == "uniform" && len(nums) == 0:
		return Input{Kind: kind, Span: true}, nil
	case kind == "uniform" && len(nums) == 2 && nums[0] < nums[1]:
		return Input{Kind: kind, A: nums[0], B: nums[1]}, nil
	case kind == "normal" && len(nums) == 2 && nums[1] >= 0:
		return Input{Kind: kind, A: nums[0], B: nums[1]}, nil
	}
	return Input{}, fmt.Errorf("dme: input %q: want const:V, uniform, uniform:A,B (A<B) or normal:MU,SIGMA (SIGMA>=0)", s)
}

func (in Input) String() string {
	switch {
	case in.Kind == "const":
		return fmt.Sprintf("const:%g", in.A)
	case in.Span:
		return "uniform"
	}
	return fmt.Sprintf("%s:%g,%g", in.Kind, in.A, in.B)
}

// draw fills w from src.
func (in Input) draw(src *corr.Stream, rg mech.Range, w []float32) {
	a, b := in.A, in.B
	if in.Span {
		a, b = rg.Center-rg.Radius, rg.Center+rg.Radius
	}
	for i := range w {
		switch in.Kind {
		case "const":
			w[i] = float32(a)
		case "uniform":
			w[i] = float32(a + (b-a)*src.Float64())
		case "normal":
			w[i] = float32(a + b*src.NormFloat64())
		}
	}
}
