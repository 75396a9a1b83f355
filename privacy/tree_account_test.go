package privacy

import (
	"fmt"
	"math"
	"math/bits"
	"math/rand/v2"
	"strings"
	"testing"
)

// releasedBlocks lists, independently of tree_account.go's index
// arithmetic, the blocks of steps whose nodes a tree with options o has
// released after total steps: for the vanilla tree the union of the
// blocks of every prefix sum, for the efficient one every dyadic block of
// each complete subtree of the forest; per tree when restarting.
func releasedBlocks(total int, o TreeOptions) [][2]int {
	seen := map[[2]int]bool{}
	var out [][2]int
	add := func(b [2]int) {
		if !seen[b] {
			seen[b] = true
			out = append(out, b)
		}
	}
	for start := 1; start <= total; {
		end := total
		if o.Restart > 0 {
			end = min(total, start+o.Restart-1)
		}
		if o.Efficient {
			for _, top := range prefixBlocks(start, end) {
				for n := top[1] - top[0] + 1; n >= 1; n /= 2 {
					for lo := top[0]; lo <= top[1]; lo += n {
						add([2]int{lo, lo + n - 1})
					}
				}
			}
		} else {
			for t := start; t <= end; t++ {
				for _, b := range prefixBlocks(start, t) {
					add(b)
				}
			}
		}
		start = end + 1
	}
	return out
}

// bruteSquares is sum over released blocks of (steps of mask in it)^2,
// steps 1..total as the bits of mask.
func bruteSquares(mask uint, blocks [][2]int) int64 {
	var sum int64
	for _, b := range blocks {
		c := int64(bits.OnesCount(mask >> (b[0] - 1) & (1<<(b[1]-b[0]+1) - 1)))
		sum += c * c
	}
	return sum
}

func maskSteps(mask uint) []int {
	var s []int
	for m := mask; m != 0; m &= m - 1 {
		s = append(s, bits.TrailingZeros(m)+1)
	}
	return s
}

// TestTreeSensitivityBruteForce checks, for every total of 1 to 12 steps,
// the vanilla and efficient trees, with and without restarts: the exact
// sensitivity of every participation pattern against the released blocks
// listed independently, and the worst case for every limit k = 1..T+1 and
// separation b = 0..T+1 against the largest over all patterns that keep
// to it, with the number of steps of a pattern that attains it.
func TestTreeSensitivityBruteForce(t *testing.T) {
	for total := 1; total <= 12; total++ {
		for _, o := range []TreeOptions{{}, {Efficient: true}, {Restart: 3}, {Restart: 4}, {Efficient: true, Restart: 5}} {
			blocks := releasedBlocks(total, o)
			// worst[k][b], and which pattern sizes attain it
			worst := make([][]int64, total+2)
			for k := range worst {
				worst[k] = make([]int64, total+2)
			}
			sizes := map[[3]int64]bool{} // (k, b, n) attains worst[k][b]
			for mask := uint(0); mask < 1<<total; mask++ {
				steps := maskSteps(mask)
				want := bruteSquares(mask, blocks)
				got, err := treeSquares(steps, total, o)
				if err != nil {
					t.Fatal(err)
				}
				if got != want {
					t.Fatalf("T %d %+v steps %v: sum of squares %d, brute force %d", total, o, steps, got, want)
				}
				if s, _ := TreeSensitivity(steps, total, o); s != math.Sqrt(float64(want)) {
					t.Fatalf("T %d %+v steps %v: sensitivity %v, want sqrt(%d)", total, o, steps, s, want)
				}
				gap := total + 1 // the least number of steps between two of the pattern's (any, for one step)
				for i := 1; i < len(steps); i++ {
					gap = min(gap, steps[i]-steps[i-1]-1)
				}
				for k := max(1, len(steps)); k <= total+1; k++ {
					for b := 0; b <= min(gap, total+1); b++ {
						if want > worst[k][b] {
							worst[k][b] = want
						}
					}
				}
			}
			for mask := uint(1); mask < 1<<total; mask++ { // the sizes that attain each worst case
				steps := maskSteps(mask)
				gap := total + 1
				for i := 1; i < len(steps); i++ {
					gap = min(gap, steps[i]-steps[i-1]-1)
				}
				v := bruteSquares(mask, blocks)
				for k := len(steps); k <= total+1; k++ {
					for b := 0; b <= min(gap, total+1); b++ {
						if v == worst[k][b] {
							sizes[[3]int64{int64(k), int64(b), int64(len(steps))}] = true
						}
					}
				}
			}
			for k := 1; k <= total+1; k++ {
				for b := 0; b <= total+1; b++ {
					got, n, err := treeMaxSquares(total, k, b, o)
					if err != nil {
						t.Fatal(err)
					}
					if got != worst[k][b] {
						t.Fatalf("T %d %+v k %d b %d: worst sum of squares %d, brute force %d", total, o, k, b, got, worst[k][b])
					}
					if !sizes[[3]int64{int64(k), int64(b), int64(n)}] {
						t.Errorf("T %d %+v k %d b %d: no pattern of %d steps attains %d", total, o, k, b, n, got)
					}
				}
			}
		}
	}
}

// TestTreeWorstCaseLarger checks the worst case against brute force for
// 16 steps, where blocks of 8 and 16 make the separations interact over
// several levels, and that random patterns that keep to a limit never
// exceed it for 1000 steps.
func TestTreeWorstCaseLarger(t *testing.T) {
	if testing.Short() {
		t.Skip("65,536 patterns")
	}
	const total = 16
	for _, o := range []TreeOptions{{}, {Efficient: true}} {
		blocks := releasedBlocks(total, o)
		for _, kb := range [][2]int{{3, 2}, {4, 3}, {5, 1}, {2, 6}, {16, 0}} {
			var want int64
			for mask := uint(1); mask < 1<<total; mask++ {
				steps := maskSteps(mask)
				ok := len(steps) <= kb[0]
				for i := 1; i < len(steps) && ok; i++ {
					ok = steps[i]-steps[i-1]-1 >= kb[1]
				}
				if v := bruteSquares(mask, blocks); ok && v > want {
					want = v
				}
			}
			got, _, err := treeMaxSquares(total, kb[0], kb[1], o)
			if err != nil {
				t.Fatal(err)
			}
			if got != want {
				t.Errorf("T 16 %+v k %d b %d: worst %d, brute force %d", o, kb[0], kb[1], got, want)
			}
		}
	}
	rng := rand.New(rand.NewPCG(1, 2))
	for _, o := range []TreeOptions{{}, {Efficient: true}, {Restart: 250}} {
		const total, k, b = 1000, 10, 49
		worst, _, err := treeMaxSquares(total, k, b, o)
		if err != nil {
			t.Fatal(err)
		}
		var most int64
		for range 2000 {
			var steps []int
			for s := 1 + rng.IntN(100); s <= total && len(steps) < k; s += b + 1 + rng.IntN(60) {
				steps = append(steps, s)
			}
			v, err := treeSquares(steps, total, o)
			if err != nil {
				t.Fatal(err)
			}
			most = max(most, v)
		}
		if most > worst {
			t.Errorf("%+v: a pattern within k %d b %d has sum of squares %d above the worst case %d", o, k, b, most, worst)
		}
	}
}

// TestTreePublished checks the worst case for every node (the efficient
// tree's) against tensorflow_privacy's tree_aggregation_accountant_test:
// its toy cases (test4 is the paper's example where the greedy pattern is
// not the worst), a step in every leaf (sum over the trees of the forest
// of 2^h (2^(h+1) - 1)), two consecutive steps (2 + 4 floor(log2 T)), and
// one step per restarted tree (floor(log2 R) + 1 each, as
// compute_rdp_tree_restart counts). The vanilla tree's worst case is never
// above it, and equal for one step (the first leaf is a left child at
// every level).
func TestTreePublished(t *testing.T) {
	all := TreeOptions{Efficient: true}
	for _, c := range []struct {
		k, b, total int
		want        int64
	}{{1, 7, 8, 4}, {3, 3, 9, 11}, {3, 2, 7, 9}, {8, 2, 24, 88}} {
		if got, _, err := treeMaxSquares(c.total, c.k, c.b, all); err != nil || got != c.want {
			t.Errorf("k %d b %d T %d: %d (%v), published %d", c.k, c.b, c.total, got, err, c.want)
		}
	}
	for _, total := range []int{3, 8, 11, 19} {
		var want int64
		for h := range bits.Len(uint(total)) {
			if total>>h&1 == 1 {
				want += int64(1<<h) * int64(1<<(h+1)-1)
			}
		}
		if got, _, err := treeMaxSquares(total, total, 0, all); err != nil || got != want {
			t.Errorf("every step of %d: %d (%v), published %d", total, got, err, want)
		}
		if got, _, err := treeMaxSquares(total, 2, 0, all); err != nil || got != int64(2+4*(bits.Len(uint(total))-1)) {
			t.Errorf("two steps of %d: %d (%v), published %d", total, got, err, 2+4*(bits.Len(uint(total))-1))
		}
	}
	for _, k := range []int{11, 19, 200} {
		if got, _, err := treeMaxSquares(8, k, 0, all); err != nil || got != 120 {
			t.Errorf("k %d over 8 steps: %d (%v), published 120", k, got, err)
		}
	}
	if got, _, err := treeMaxSquares(160, 4, 39, TreeOptions{Restart: 40, Efficient: true}); err != nil || got != 4*6 {
		t.Errorf("one step in each of 4 trees of 40: %d (%v), want 24", got, err)
	}
	for _, kbt := range [][3]int{{1, 0, 100}, {1, 0, 1000}, {3, 5, 100}, {10, 49, 1000}, {1000, 0, 1000}} {
		e, _, err1 := treeMaxSquares(kbt[2], kbt[0], kbt[1], all)
		v, _, err2 := treeMaxSquares(kbt[2], kbt[0], kbt[1], TreeOptions{})
		if err1 != nil || err2 != nil || v > e || (kbt[0] == 1 && v != e) {
			t.Errorf("k %d b %d T %d: vanilla %d, every node %d (%v, %v)", kbt[0], kbt[1], kbt[2], v, e, err1, err2)
		}
		if kbt[0] == 1 && e != int64(bits.Len(uint(kbt[2]))) {
			t.Errorf("one step of %d: %d, want floor(log2 T) + 1 = %d", kbt[2], e, bits.Len(uint(kbt[2])))
		}
	}
}

// gdpDeltaClosed is the exact delta(eps) of mu-GDP in its closed form.
func gdpDeltaClosed(eps, mu float64) float64 {
	phi := func(x float64) float64 { return 0.5 * math.Erfc(-x/math.Sqrt2) }
	return phi(-eps/mu+mu/2) - math.Exp(eps)*phi(-eps/mu-mu/2)
}

// TestTreeEpsilonClosedForm checks a client's guarantee: rho =
// Delta^2/(2 z^2) as GaussianRho has it, the delta of the closed form at
// the returned eps equals the target to 1e-9, a 1e-9 smaller eps misses
// it, the returned eps is never below the truth (GaussianDelta at it is
// at most delta), and the exact conversion is below the zCDP one. The
// paper's StackOverflow setting (one tree of 1600 steps, z = 1.13, delta
// 1e-6), for which tensorflow_privacy's RDP accounting asserts eps <
// 19.74, is among the cases.
func TestTreeEpsilonClosedForm(t *testing.T) {
	type pattern struct {
		steps []int
		total int
		o     TreeOptions
	}
	for _, p := range []pattern{
		{[]int{1}, 1600, TreeOptions{}},
		{[]int{3, 9, 10, 40}, 64, TreeOptions{}},
		{[]int{1, 2, 3, 4, 5, 6, 7, 8}, 8, TreeOptions{Efficient: true}},
		{[]int{5, 105, 205, 305, 405}, 1000, TreeOptions{Restart: 100}},
	} {
		for _, z := range []float64{0.5, 1.13, 3, 10} {
			for _, delta := range []float64{1e-3, 1e-5, 1e-6, 1e-8} {
				g, err := TreeClient(p.steps, p.total, z, delta, p.o)
				if err != nil {
					t.Fatal(err)
				}
				name := fmt.Sprintf("steps %v of %d %+v z %v delta %v", p.steps, p.total, p.o, z, delta)
				s, _ := TreeSensitivity(p.steps, p.total, p.o)
				rho, _ := GaussianRho(z, s)
				if g.Sensitivity != s || g.Mu != s/z || math.Abs(g.Rho-rho) > 1e-15*rho || g.Participations != len(p.steps) {
					t.Errorf("%s: %+v, want sensitivity %v, mu %v, rho %v", name, g, s, s/z, rho)
				}
				if d := gdpDeltaClosed(g.Eps, g.Mu); math.Abs(d-delta) > 1e-9*delta {
					t.Errorf("%s: eps %v has delta %v in closed form, want %v", name, g.Eps, d, delta)
				}
				if d := gdpDeltaClosed(g.Eps*(1-1e-9), g.Mu); !(d > delta) {
					t.Errorf("%s: eps %v is not the least: %v gives delta %v", name, g.Eps, g.Eps*(1-1e-9), d)
				}
				if d, _ := GaussianDelta(g.Eps, z, s); d > delta {
					t.Errorf("%s: eps %v is below the truth: delta %v", name, g.Eps, d)
				}
				if zc, _ := ZCDPEpsilon(g.Rho, delta); g.Eps >= zc {
					t.Errorf("%s: exact eps %v not below zCDP's %v", name, g.Eps, zc)
				}
				if p.total == 1600 && z == 1.13 && delta == 1e-6 && !(g.Eps < 19.74) {
					t.Errorf("StackOverflow: eps %v, RDP's bound is 19.74", g.Eps)
				}
			}
		}
	}
	if g, err := TreeClient(nil, 10, 1, 1e-5, TreeOptions{}); err != nil || g != (TreeGuarantee{Delta: 1e-5}) {
		t.Errorf("a client with no steps: %+v, %v; want eps 0", g, err)
	}
}

// TestTreeNoiseMultiplier checks the calibration: the worst case at the
// returned z meets the target, and 0.1% less noise does not.
func TestTreeNoiseMultiplier(t *testing.T) {
	for _, c := range []struct {
		eps, delta  float64
		total, k, b int
		o           TreeOptions
	}{
		{1, 1e-5, 1000, 1, 0, TreeOptions{}},
		{8, 1e-6, 1000, 10, 99, TreeOptions{}},
		{2, 1e-8, 500, 5, 49, TreeOptions{Efficient: true}},
		{0.5, 1e-5, 400, 4, 99, TreeOptions{Restart: 100}},
	} {
		z, err := TreeNoiseMultiplier(c.eps, c.delta, c.total, c.k, c.b, c.o)
		if err != nil {
			t.Fatal(err)
		}
		g, err := TreeWorstCase(c.total, c.k, c.b, z, c.delta, c.o)
		if err != nil {
			t.Fatal(err)
		}
		if g.Eps > c.eps*(1+1e-9) || g.Eps < c.eps*(1-1e-6) {
			t.Errorf("%+v: z %v gives eps %v", c, z, g.Eps)
		}
		if d, _ := GaussianDelta(c.eps, 0.999*z, g.Sensitivity); d <= c.delta {
			t.Errorf("%+v: 0.999 z still meets the target (delta %v)", c, d)
		}
	}
}

// TestTreeAccountBadInput checks that bad settings are refused with an
// error naming the setting.
func TestTreeAccountBadInput(t *testing.T) {
	ok := TreeOptions{}
	for _, c := range []struct {
		name string
		err  error
		want string
	}{
		{"total 0", second(TreeSensitivity([]int{1}, 0, ok)), "total steps 0"},
		{"step 0", second(TreeSensitivity([]int{0, 3}, 5, ok)), "step 0 (position 0) is out of range 1..5"},
		{"step past total", second(TreeSensitivity([]int{2, 6}, 5, ok)), "step 6 (position 1) is out of range 1..5"},
		{"repeated step", second(TreeSensitivity([]int{2, 2}, 5, ok)), "step 2 (position 1) is not after step 2"},
		{"steps out of order", second(TreeSensitivity([]int{4, 3}, 5, ok)), "steps must increase"},
		{"restart", second(TreeSensitivity([]int{1}, 5, TreeOptions{Restart: -1})), "restart -1"},
		{"k 0", second(TreeMaxSensitivity(10, 0, 1, ok)), "max participation 0"},
		{"b -1", second(TreeMaxSensitivity(10, 2, -1, ok)), "min separation -1"},
		{"total -1", second(TreeMaxSensitivity(-1, 2, 1, ok)), "total steps -1"},
		{"huge table", second(TreeMaxSensitivity(100_000, 2, 5000, ok)), "min separation 5000"},
		{"z 0", second(TreeClient([]int{1}, 5, 0, 1e-5, ok)), "noise multiplier 0"},
		{"z NaN", second(TreeClient([]int{1}, 5, math.NaN(), 1e-5, ok)), "noise multiplier NaN"},
		{"delta 0", second(TreeClient([]int{1}, 5, 1, 0, ok)), "delta 0"},
		{"delta 1", second(TreeWorstCase(5, 1, 0, 1, 1, ok)), "delta 1"},
		{"worst z", second(TreeWorstCase(5, 1, 0, -2, 1e-5, ok)), "noise multiplier -2"},
		{"target eps", second(TreeNoiseMultiplier(0, 1e-5, 5, 1, 0, ok)), "epsilon 0"},
		{"target delta", second(TreeNoiseMultiplier(1, 2, 5, 1, 0, ok)), "delta 2"},
		{"target k", second(TreeNoiseMultiplier(1, 1e-5, 5, -1, 0, ok)), "max participation -1"},
	} {
		if c.err == nil || !strings.Contains(c.err.Error(), c.want) {
			t.Errorf("%s: error %v, want one naming %q", c.name, c.err, c.want)
		}
	}
}

func second[T any](_ T, err error) error { return err }
