package dme

import (
	"context"
	"math"
	"testing"

	"github.com/fedpq/fedpq/mech"
)

func config(name string) Config {
	c := mech.DefaultConfig()
	return Config{
		Mechanism: name, Mech: c, Clients: 40, Dim: 500, Trials: 4,
		Input: Input{Kind: "uniform", Span: true}, Range: mech.Range{Center: 0.1, Radius: 0.5}, Seed: 7,
	}
}

// TestReproducible: the same seed gives bit-identical results whatever the
// number of workers; another seed gives other numbers.
func TestReproducible(t *testing.T) {
	for _, name := range []string{"ldpq", "corbin", "cq", "none"} {
		c := config(name)
		c.Workers = 1
		a, err := Run(context.Background(), c, nil)
		if err != nil {
			t.Fatal(err)
		}
		c.Workers = 3
		b, _ := Run(context.Background(), c, nil)
		if a.MSE != b.MSE || a.Bias != b.Bias {
			t.Errorf("%s: workers 1 and 3 differ: %v %v", name, a.MSE, b.MSE)
		}
		c.Seed++
		d, _ := Run(context.Background(), c, nil)
		if name != "none" && d.MSE == a.MSE {
			t.Errorf("%s: seeds 7 and 8 gave the same MSE", name)
		}
	}
}

// TestTheory: for mechanisms with closed forms the measured MSE is within 4
// standard errors of the exact expectation given the inputs and pairing,
// including inputs that need clipping (normal with a wide spread).
func TestTheory(t *testing.T) {
	for _, name := range []string{"ldpq", "corbin", "augcorbin", "coq"} {
		for _, in := range []Input{{Kind: "uniform", Span: true}, {Kind: "normal", A: 0.2, B: 0.6}, {Kind: "const", A: 0.6}} {
			c := config(name)
			c.Input = in
			c.Trials = 10
			r, err := Run(context.Background(), c, nil)
			if err != nil {
				t.Fatal(err)
			}
			if r.MSETheory == nil {
				t.Fatalf("%s: no theory", name)
			}
			if d := math.Abs(r.MSE - *r.MSETheory); d > 4*r.MSEStderr {
				t.Errorf("%s %v: MSE %.5g, theory %.5g, stderr %.2g", name, in, r.MSE, *r.MSETheory, r.MSEStderr)
			}
		}
	}
}

// TestCorBinBeatsLDPQ: at eps = 1 a pair's antithetic errors cut the MSE of
// the mean well below independent ldpq (about 4x for uniform inputs).
func TestCorBinBeatsLDPQ(t *testing.T) {
	l, _ := Run(context.Background(), config("ldpq"), nil)
	c, _ := Run(context.Background(), config("corbin"), nil)
	if c.MSE > l.MSE/2 {
		t.Errorf("corbin MSE %v, ldpq %v: want less than half", c.MSE, l.MSE)
	}
}

// TestTransferMode: the papers' protocol (the leader sends sealed bits)
// costs what it should and estimates as well as the derived mode.
func TestTransferMode(t *testing.T) {
	c := config("corbin")
	d, err := Run(context.Background(), c, nil)
	if err != nil {
		t.Fatal(err)
	}
	c.Transfer = true
	x, err := Run(context.Background(), c, nil)
	if err != nil {
		t.Fatal(err)
	}
	if d.SharedMode != "derived" || d.SharedSetupBytesPerPair != 64 {
		t.Errorf("derived mode: %q, %v bytes per pair", d.SharedMode, d.SharedSetupBytesPerPair)
	}
	// 5 bits x 500 parameters = 2500 bits = 40 words of 64 bits; plus the tag.
	if want := 64.0 + 40*8 + 16; x.SharedMode != "transfer" || x.SharedSetupBytesPerPair != want {
		t.Errorf("transfer mode: %q, %v bytes per pair, want %v", x.SharedMode, x.SharedSetupBytesPerPair, want)
	}
	if math.Abs(x.MSE-*x.MSETheory) > 4*x.MSEStderr {
		t.Errorf("transfer mode MSE %v, theory %v", x.MSE, *x.MSETheory)
	}
}

func TestErrors(t *testing.T) {
	bad := []func(*Config){
		func(c *Config) { c.Mechanism = "nonesuch" },
		func(c *Config) { c.Clients = 0 },
		func(c *Config) { c.Dim = 0 },
		func(c *Config) { c.Trials = 0 },
		func(c *Config) { c.Range.Radius = 0 },
		func(c *Config) { c.Mech.Epsilon = -1 },
	}
	for i, f := range bad {
		c := config("ldpq")
		f(&c)
		if _, err := Run(context.Background(), c, nil); err == nil {
			t.Errorf("case %d: no error", i)
		}
	}
	for _, s := range []string{"", "const", "const:x", "uniform:2,1", "normal:0,-1", "zipf:1"} {
		if _, err := ParseInput(s); err == nil {
			t.Errorf("input %q accepted", s)
		}
	}
	for _, s := range []string{"const:0.5", "uniform", "uniform:-1,1", "normal:0,0.1"} {
		in, err := ParseInput(s)
		if err != nil || in.String() != s {
			t.Errorf("input %q: %v, %v", s, in, err)
		}
	}
}

// TestNoneUnclipped: none sends values outside the range as they are, so its
// estimate stays exact and its theory has no clipping term.
func TestNoneUnclipped(t *testing.T) {
	c := config("none")
	c.Input = Input{Kind: "normal", A: 0.5, B: 2}
	r, err := Run(context.Background(), c, nil)
	if err != nil {
		t.Fatal(err)
	}
	if r.MSE > 1e-12 || *r.MSETheory != 0 {
		t.Errorf("none beyond the range: MSE %v, theory %v", r.MSE, *r.MSETheory)
	}
}
