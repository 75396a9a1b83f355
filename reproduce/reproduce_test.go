package reproduce

import (
	"context"
	"encoding/json"
	"errors"
	"math"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"

	"github.com/fedpq/fedpq/corr"
)

// TestRegistry: every experiment is complete, and unknown names are errors.
func TestRegistry(t *testing.T) {
	if len(List()) < 4 {
		t.Fatalf("only %d experiments", len(List()))
	}
	for _, e := range List() {
		if e.Paper == "" || e.Reproduces == "" || e.What == "" || e.QuickTime == "" || e.FullTime == "" || e.run == nil {
			t.Errorf("%s: incomplete %+v", e.Name, e)
		}
		if got, err := Lookup(e.Name); err != nil || got.Name != e.Name {
			t.Errorf("Lookup(%q): %v", e.Name, err)
		}
	}
	if _, err := Lookup("nonesuch"); !errors.Is(err, ErrUnknown) || !strings.Contains(err.Error(), "corbin-mse") {
		t.Errorf("Lookup(nonesuch): %v", err)
	}
}

// TestSameNumbersAnyCores: a run gives the same numbers on one core as on
// several, and writes them.
func TestSameNumbersAnyCores(t *testing.T) {
	e, _ := Lookup("corbin-mse")
	var out [2][]byte
	for i, procs := range []int{1, 3} {
		old := runtime.GOMAXPROCS(procs)
		dir := t.TempDir()
		_, err := e.Run(context.Background(), Options{Quick: true, Out: dir})
		runtime.GOMAXPROCS(old)
		if err != nil {
			t.Fatal(err)
		}
		b, err := os.ReadFile(filepath.Join(dir, "corbin-mse.json"))
		if err != nil {
			t.Fatal(err)
		}
		var r struct{ Rows json.RawMessage }
		if err := json.Unmarshal(b, &r); err != nil {
			t.Fatal(err)
		}
		out[i] = r.Rows
		if md, err := os.ReadFile(filepath.Join(dir, "corbin-mse.md")); err != nil || !strings.HasPrefix(string(md), "### corbin-mse: CorBin-FL") {
			t.Errorf("corbin-mse.md: %v %q", err, md)
		}
	}
	if string(out[0]) != string(out[1]) {
		t.Error("1 and 3 cores gave different numbers")
	}
}

// TestRandomizedResponse: the two randomized-response baselines of mvu-dme
// are eps-LDP exactly by their probabilities, unbiased, and their sampled
// variance matches the closed form.
func TestRandomizedResponse(t *testing.T) {
	for _, eps := range []float64{1, 5} {
		b := bitwiseRR{b: 3, eps: eps}
		p := b.flip()
		// Each bit's two output probabilities differ by (1-p)/p, and the 3
		// bits compose to e^eps.
		if got := 3 * math.Log((1-p)/p); math.Abs(got-eps) > 1e-12 {
			t.Errorf("bitwise eps %v: %v", eps, got)
		}
		k := newKRR(3, eps)
		other := (1 - k.keep) / float64(k.k-1)
		if got := math.Log(k.keep / other); math.Abs(got-eps) > 1e-12 {
			t.Errorf("k-RR eps %v: %v", eps, got)
		}
		for _, m := range []scalarMech{levelScalar("rr", b), levelScalar("krr", k)} {
			for _, x := range []float64{-1, -0.3, 0.5, 1} {
				src := func(string) *corr.Stream { return corr.Derive(corr.SeedSecret(3), "test", math.Float64bits(x)) }
				ys, _ := m.run(x, 200000, src)
				var mean float64
				sq := make([]float64, len(ys))
				for i, y := range ys {
					mean += y / float64(len(ys))
					sq[i] = (y - x) * (y - x)
				}
				v, se := meanStderr(sq)
				want := m.exact(x)
				if math.Abs(v-want) > 4*se || math.Abs(mean-x) > 4*math.Sqrt(want/float64(len(ys))) {
					t.Errorf("%s eps %v x %v: mean %v, variance %v ± %v, exact %v", m.name, eps, x, mean, v, se, want)
				}
			}
		}
	}
}

func TestTable(t *testing.T) {
	tb := newTable("name", ">value")
	tb.add("a|b", "")
	want := "| name | value |\n|---|---:|\n| a\\|b | - |\n"
	if got := tb.String(); got != want {
		t.Errorf("got %q, want %q", got, want)
	}
}
