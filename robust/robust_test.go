package robust

import (
	"fmt"
	"math"
	"math/rand/v2"
	"runtime"
	"slices"
	"strings"
	"testing"
)

// columnsOf turns columns (one per coordinate, one value per client) into
// the rows a Rule takes.
func columnsOf(cols ...[]float32) [][]float32 {
	rows := make([][]float32, len(cols[0]))
	for i := range rows {
		for _, c := range cols {
			rows[i] = append(rows[i], c[i])
		}
	}
	return rows
}

// aggregate runs r and fails the test on an error.
func aggregate(t *testing.T, r Rule, rows [][]float32) []float64 {
	t.Helper()
	out := make([]float64, len(rows[0]))
	if err := r.Aggregate(rows, out); err != nil {
		t.Fatalf("%v: %v", r, err)
	}
	return out
}

func TestParse(t *testing.T) {
	for _, tc := range []struct {
		spec string
		want Rule
	}{
		{"", Mean{}},
		{"mean", Mean{}},
		{"median", Median{}},
		{"trimmed-mean:0.1", TrimmedMean{Beta: 0.1}},
		{"trimmed-mean:0", TrimmedMean{}},
		{"krum:2", Krum{F: 2}},
		{"krum:0", Krum{}},
		{"multi-krum:2,5", MultiKrum{F: 2, M: 5}},
		{"bulyan:1", Bulyan{F: 1}},
		{"norm-bounded:3.5", NormBounded{C: 3.5}},
		{"norm-bounded", NormBounded{}},
		{" multi-krum: 1, 4 ", MultiKrum{F: 1, M: 4}},
	} {
		r, err := Parse(tc.spec)
		if err != nil || r != tc.want {
			t.Errorf("Parse(%q) = %v, %v; want %v", tc.spec, r, err, tc.want)
			continue
		}
		// The spec a Rule prints reads back as the same Rule.
		if back, err := Parse(r.String()); err != nil || back != r {
			t.Errorf("Parse(%q.String() = %q) = %v, %v", tc.spec, r.String(), back, err)
		}
	}
	for spec, want := range map[string]string{
		"mode":                 "unknown aggregator",
		"median:1":             "takes 0 parameter(s), got 1",
		"krum":                 "takes 1 parameter(s), got 0",
		"multi-krum:2":         "takes 2 parameter(s), got 1",
		"trimmed-mean:0.5":     "must be in [0, 0.5)",
		"trimmed-mean:-0.1":    "must be in [0, 0.5)",
		"trimmed-mean:NaN":     "must be in [0, 0.5)",
		"trimmed-mean:a":       `B "a" is not a number`,
		"krum:-1":              "F = -1 must be at least 0",
		"krum:1.5":             `"1.5" is not an integer`,
		"multi-krum:1,0":       "M = 0 must be at least 1",
		"bulyan:-2":            "F = -2 must be at least 0",
		"norm-bounded:0":       "must be positive and finite",
		"norm-bounded:+Inf":    "must be positive and finite",
		"norm-bounded:-1":      "must be positive and finite",
		"norm-bounded:1,2":     "takes 1 parameter(s), got 2",
		"trimmed-mean:0.1,0.2": "takes 1 parameter(s), got 2",
		"mean:":                "takes 0 parameter(s), got 1",
		"bulyan:":              `F "" is not an integer`,
		"multi-krum:1,x":       `M "x" is not an integer`,
	} {
		if _, err := Parse(spec); err == nil || !strings.Contains(err.Error(), want) || !strings.HasPrefix(err.Error(), "robust: ") {
			t.Errorf("Parse(%q) = %v, want an error with %q", spec, err, want)
		}
	}
}

func TestMedian(t *testing.T) {
	// Even n: the mean of the two middle values; equal values; a column
	// whose middle values are equal.
	got := aggregate(t, Median{}, columnsOf(
		[]float32{3, 1, 4, 1},
		[]float32{5, 5, 5, 5},
		[]float32{-2, 7, 0, 7},
		[]float32{7, 0, 7, -2},
	))
	if want := []float64{2, 5, 3.5, 3.5}; !slices.Equal(got, want) {
		t.Errorf("median of 4 = %v, want %v", got, want)
	}
	got = aggregate(t, Median{}, columnsOf([]float32{9, 2, 7, 2, 5}, []float32{1, 1, 0, 0, 0}))
	if want := []float64{5, 0}; !slices.Equal(got, want) {
		t.Errorf("median of 5 = %v, want %v", got, want)
	}
}

func TestTrimmedMean(t *testing.T) {
	col := []float32{0, 10, 0, 1, 1, 10, 1, 0, 1, 1} // sorted: 0 0 0 1 1 1 1 1 10 10
	for _, tc := range []struct {
		beta float64
		want float64
	}{
		{0, 2.5},           // the mean
		{0.1, 15.0 / 8},    // drops one 0 and one 10
		{0.2, 5.0 / 6},     // drops 0 0 and 10 10
		{0.3, 1},           // 0.3*10 rounds below 3 in float64; still 3 each end
		{0.45, 1},          // 4 each end: the two middle values
		{0.29999, 5.0 / 6}, // floor(2.9999) = 2
	} {
		got := aggregate(t, TrimmedMean{Beta: tc.beta}, columnsOf(col))
		if got[0] != tc.want {
			t.Errorf("trimmed-mean:%v = %v, want %v", tc.beta, got[0], tc.want)
		}
	}
	for _, tc := range []struct {
		beta    float64
		n, want int
	}{
		{0.1, 10, 1}, {0.1, 9, 0}, {0.3, 10, 3}, {0.2, 15, 3}, {0.35, 20, 7}, {0.25, 4, 1},
		{0.49, 100, 49}, {0.1, 30, 3}, {0.7 / 10, 100, 7}, {0, 5, 0},
	} {
		if got := (TrimmedMean{Beta: tc.beta}).Trimmed(tc.n); got != tc.want {
			t.Errorf("TrimmedMean{%v}.Trimmed(%d) = %d, want %d", tc.beta, tc.n, got, tc.want)
		}
	}
}

// TestSelectAgainstSort checks the quickselect behind Median and
// TrimmedMean against a full sort, on columns long enough to take its
// partition path, with few distinct values (as one-bit messages have) and
// many. Values are small integers, so every sum is exact.
func TestSelectAgainstSort(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for trial := range 3000 {
		n := 1 + rng.IntN(200)
		distinct := []int{2, 3, 1000}[trial%3]
		col := make([]float32, n)
		for i := range col {
			col[i] = float32(rng.IntN(distinct) - distinct/2)
		}
		sorted := slices.Sorted(slices.Values(col))
		want := float64(sorted[n/2])
		if n%2 == 0 {
			want = (float64(sorted[n/2-1]) + want) / 2
		}
		if got := median(keys(col)); got != want {
			t.Fatalf("median(%v) = %v, want %v", col, got, want)
		}
		k := rng.IntN((n + 1) / 2)
		var s float64
		for _, v := range sorted[k : n-k] {
			s += float64(v)
		}
		if got, want := trimmedMean(keys(col), k), s/float64(n-2*k); got != want {
			t.Fatalf("trimmedMean(%v, %d) = %v, want %v", col, k, got, want)
		}
	}
}

// TestNthWorstCase feeds the quickselect inputs that defeat a
// median-of-three pivot; its sort fallback keeps the answer right.
func TestNthWorstCase(t *testing.T) {
	n := 1 << 12
	col := make([]float32, n)
	for i := range col { // the "median-of-3 killer" sequence
		if i%2 == 0 {
			col[i] = float32(i / 2)
		} else {
			col[i] = float32(n/2 + i/2)
		}
	}
	for _, k := range []int{0, n / 2, n - 1, 7} {
		c := keys(col)
		nth(c, k)
		if value(c[k]) != float64(k) || value(slices.Max(c[:k+1])) != float64(k) || value(slices.Min(c[k:])) != float64(k) {
			t.Errorf("nth(killer, %d) put %v there", k, value(c[k]))
		}
	}
}

// keys returns the keys of col's values.
func keys(col []float32) []uint32 {
	k := make([]uint32, len(col))
	for i, v := range col {
		k[i] = key(v)
	}
	return k
}

// TestKeyOrder checks that keys order float32 values as < does, and that
// value inverts key.
func TestKeyOrder(t *testing.T) {
	rng := rand.New(rand.NewPCG(9, 10))
	special := []float32{0, float32(math.Copysign(0, -1)), 1, -1, math.MaxFloat32, -math.MaxFloat32,
		math.SmallestNonzeroFloat32, -math.SmallestNonzeroFloat32, float32(math.Inf(1)), float32(math.Inf(-1))}
	for range 100000 {
		a, b := math.Float32frombits(rng.Uint32()), math.Float32frombits(rng.Uint32())
		if rng.IntN(4) == 0 {
			a, b = special[rng.IntN(len(special))], special[rng.IntN(len(special))]
		}
		if a != a || b != b {
			continue // NaN: the rules refuse it before selecting
		}
		if float64(a) != value(key(a)) {
			t.Fatalf("value(key(%v)) = %v", a, value(key(a)))
		}
		if a < b && !(key(a) < key(b)) || a > b && !(key(a) > key(b)) {
			t.Fatalf("keys of %v and %v: %#x, %#x", a, b, key(a), key(b))
		}
	}
}

func TestKrumNeighbours(t *testing.T) {
	// n = 5, f = 1: the score sums the n-f-2 = 2 nearest squared
	// distances. Row 1 (4) scores 1+9 = 10, the least; with 3 neighbours
	// (n-f-1) row 0 (7) would win with 9+16+16 = 41, and with 4 (n-f) too.
	rows := columnsOf([]float32{7, 4, 11, 12, 3})
	if got := aggregate(t, Krum{F: 1}, rows); got[0] != 4 {
		t.Errorf("krum:1 picked %v, want 4 (row 1)", got[0])
	}
	// Multi-Krum, M = 2: rows 1 (10) and 2 or 4 (17 each; the lower
	// index, 2, wins the tie): (4 + 11)/2.
	if got := aggregate(t, MultiKrum{F: 1, M: 2}, rows); got[0] != 7.5 {
		t.Errorf("multi-krum:1,2 = %v, want 7.5", got[0])
	}
	if got := aggregate(t, MultiKrum{F: 1, M: 5}, rows); got[0] != 7.4 {
		t.Errorf("multi-krum:1,5 = %v, want the mean 7.4", got[0])
	}
	// Krum's output is a client's message exactly.
	rows = [][]float32{{0.1, 0.2, 0.3}, {0.1, 0.25, 0.3}, {1e30, -1e30, 1e30}, {0.15, 0.2, 0.3}, {0.1, 0.2, 0.35}}
	got := aggregate(t, Krum{F: 1}, rows)
	if want := []float64{float64(float32(0.1)), float64(float32(0.2)), float64(float32(0.3))}; !slices.Equal(got, want) {
		t.Errorf("krum:1 = %v, want row 0 %v", got, want)
	}
}

func TestBulyan(t *testing.T) {
	// n = 7, f = 1: theta = 5 chosen by repeated Krum, beta = 3 averaged.
	// Scores (4 neighbours of 7): 3 has 1+4+9+36 = 50, the least; then 4
	// (3 of 6: 25+16+9 = 50); then 1 (2 of 5: 1+64 = 65); then 0 and 9
	// tie at 81 (1 of 4), 0 wins on its index; then of 9, 50, 60, 50
	// (nearest 60: 100, as 60's; 9's is 1681). Chosen: 0 1 3 4 50;
	// median 3; the 3 closest: 3, 4, 1.
	rows := columnsOf([]float32{0, 1, 3, 4, 9, 50, 60})
	if got := aggregate(t, Bulyan{F: 1}, rows); math.Abs(got[0]-8.0/3) > 1e-15 {
		t.Errorf("bulyan:1 = %v, want 8/3", got[0])
	}
	dist, err := distances(rows)
	if err != nil {
		t.Fatal(err)
	}
	if got, want := bulyanSelect(dist, 7, 5, 1), []int{0, 1, 2, 3, 5}; !slices.Equal(got, want) {
		t.Errorf("bulyan:1 chose rows %v, want %v", got, want)
	}
	for _, tc := range []struct {
		col  []float32
		beta int
		want float64
	}{
		{[]float32{100, 1, 3, 2, 4}, 3, 3},        // 3, then the tie 2 and 4, both fit
		{[]float32{1, 2, 3, 10, 11}, 3, 2},        // 3, 2, 1
		{[]float32{0, 2, 4, 5}, 3, 11.0 / 3},      // median 3: the tie 2, 4, then 5
		{[]float32{0, 2, 4}, 2, 2},                // 2, then the tie 0 and 4 shares one place
		{[]float32{-1, -1, 1, 1}, 2, 0},           // one-bit values at a tie: the midpoint
		{[]float32{-1, -1, -1, 1, 1, 1, 1}, 3, 1}, // the majority's value
		{[]float32{5, 5, 5, 5}, 2, 5},
	} {
		if got := closestMean(keys(tc.col), tc.beta); math.Abs(got-tc.want) > 1e-15 {
			t.Errorf("closestMean(%v, %d) = %v, want %v", tc.col, tc.beta, got, tc.want)
		}
	}
}

func TestNormBounded(t *testing.T) {
	rows := [][]float32{{3, 4}, {0, 1}, {0, 0}, {-30, 40}}
	// Norms 5, 1, 0, 50 at C = 2: scaled by 2/5, 1, 1, 1/25.
	got := aggregate(t, NormBounded{C: 2}, rows)
	want := []float64{(1.2 + 0 + 0 - 1.2) / 4, (1.6 + 1 + 0 + 1.6) / 4}
	for j := range want {
		if math.Abs(got[j]-want[j]) > 1e-15 {
			t.Errorf("norm-bounded:2 = %v, want %v", got, want)
		}
	}
	// Without C the bound is the median norm, (1+5)/2 = 3: scaled by 3/5,
	// 1, 1, 3/50.
	got = aggregate(t, NormBounded{}, rows)
	want = []float64{(1.8 + 0 + 0 - 1.8) / 4, (2.4 + 1 + 0 + 2.4) / 4}
	for j := range want {
		if math.Abs(got[j]-want[j]) > 1e-15 {
			t.Errorf("norm-bounded = %v, want %v", got, want)
		}
	}
	// With an odd count the median is the middle norm: 5 of 1, 5, 50.
	// While fewer than half the rows attack, the median norm is at most
	// the largest honest norm, and so is the output's norm, however huge
	// the attackers' rows (the mean's is 1e30 f/n).
	rng := rand.New(rand.NewPCG(5, 6))
	const n, d = 15, 300
	for _, f := range []int{1, 7} {
		for _, spread := range []bool{false, true} {
			rows := honestAndByzantine(rng, n, f, d, 1e30, spread)
			var largest float64
			for _, r := range rows[:n-f] {
				largest = max(largest, norm(r))
			}
			if got := norm64(aggregate(t, NormBounded{}, rows)); got > largest*(1+1e-12) {
				t.Errorf("f = %d (spread %v): output norm %v, more than the largest honest norm %v", f, spread, got, largest)
			}
		}
	}
	odd := [][]float32{{3, 4}, {0, 1}, {-30, 40}}
	got = aggregate(t, NormBounded{}, odd)
	want = []float64{(3 + 0 - 3) / 3.0, (4 + 1 + 4) / 3.0}
	for j := range want {
		if math.Abs(got[j]-want[j]) > 1e-15 {
			t.Errorf("norm-bounded of three rows = %v, want %v", got, want)
		}
	}
}

func norm(r []float32) float64 {
	var ss float64
	for _, v := range r {
		ss += float64(v) * float64(v)
	}
	return math.Sqrt(ss)
}

func norm64(r []float64) float64 {
	var ss float64
	for _, v := range r {
		ss += v * v
	}
	return math.Sqrt(ss)
}

// honestAndByzantine returns n-f honest rows, uniform in [-1, 1], and f
// rows of value v, either all alike or each in its own direction.
func honestAndByzantine(rng *rand.Rand, n, f, d int, v float32, spread bool) [][]float32 {
	rows := make([][]float32, n)
	for i := range rows {
		rows[i] = make([]float32, d)
		for j := range rows[i] {
			switch {
			case i < n-f:
				rows[i][j] = float32(2*rng.Float64() - 1)
			case spread && (i+j)%2 == 1:
				rows[i][j] = -v
			default:
				rows[i][j] = v
			}
		}
	}
	return rows
}

// TestResilience checks each rule's documented guarantee with f
// Byzantine rows of huge values: the output stays within the honest
// rows' range per coordinate, and Krum's is an honest row. The mean,
// with the same rows, leaves it: the check can fail.
func TestResilience(t *testing.T) {
	const n, d = 15, 3000 // d spans two blocks
	rng := rand.New(rand.NewPCG(3, 4))
	for _, v := range []float32{1e30, math.MaxFloat32, 5} {
		for _, spread := range []bool{false, true} {
			for _, tc := range []struct {
				r Rule
				f int
			}{
				{Median{}, 7}, {TrimmedMean{Beta: 0.2}, 3}, {Krum{F: 6}, 6}, {MultiKrum{F: 6, M: 9}, 6},
				{Bulyan{F: 3}, 3},
			} {
				rows := honestAndByzantine(rng, n, tc.f, d, v, spread)
				got := aggregate(t, tc.r, rows)
				if msg := outsideHonest(got, rows[:n-tc.f]); msg != "" {
					t.Errorf("%v, %d rows of ±%v (spread %v): %s", tc.r, tc.f, v, spread, msg)
				}
				if _, ok := tc.r.(Krum); ok && !slices.ContainsFunc(rows[:n-tc.f], func(r []float32) bool { return sameRow(got, r) }) {
					t.Errorf("%v, %d rows of ±%v (spread %v): output is no honest row", tc.r, tc.f, v, spread)
				}
			}
		}
	}
	rows := honestAndByzantine(rng, n, 1, d, 1e30, false)
	if msg := outsideHonest(aggregate(t, Mean{}, rows), rows[:n-1]); msg == "" {
		t.Error("the mean stayed within the honest range with a row of 1e30")
	}
	// Norm-bounded: the output's norm is at most C whatever the rows.
	rows = honestAndByzantine(rng, n, 3, d, 1e30, true)
	got := aggregate(t, NormBounded{C: 2}, rows)
	var ss float64
	for _, v := range got {
		ss += v * v
	}
	if math.Sqrt(ss) > 2*(1+1e-12) {
		t.Errorf("norm-bounded:2 output has norm %v", math.Sqrt(ss))
	}
}

// outsideHonest says where out leaves the per-coordinate range of honest.
func outsideHonest(out []float64, honest [][]float32) string {
	for j, v := range out {
		lo, hi := math.Inf(1), math.Inf(-1)
		for _, r := range honest {
			lo, hi = min(lo, float64(r[j])), max(hi, float64(r[j]))
		}
		if v < lo || v > hi {
			return fmt.Sprintf("coordinate %d: %v outside the honest range [%v, %v]", j, v, lo, hi)
		}
	}
	return ""
}

func sameRow(out []float64, r []float32) bool {
	for j, v := range r {
		if out[j] != float64(v) {
			return false
		}
	}
	return true
}

func TestErrors(t *testing.T) {
	rows := func(n int) [][]float32 {
		r := make([][]float32, n)
		for i := range r {
			r[i] = []float32{float32(i), 1}
		}
		return r
	}
	all := []Rule{Mean{}, Median{}, TrimmedMean{Beta: 0.1}, Krum{F: 1}, MultiKrum{F: 1, M: 2}, Bulyan{F: 1}, NormBounded{C: 1}}
	for _, tc := range []struct {
		r    Rule
		rows [][]float32
		want string
	}{
		{Krum{F: 1}, rows(4), "krum with f = 1 needs more than 2f+2 = 4 messages, got 4"},
		{Krum{F: 0}, rows(2), "needs more than 2f+2 = 2 messages, got 2"},
		{MultiKrum{F: 2, M: 3}, rows(6), "multi-krum with f = 2 needs more than 2f+2 = 6 messages, got 6"},
		{MultiKrum{F: 1, M: 6}, rows(5), "M = 6 is more than the 5 messages"},
		{Bulyan{F: 1}, rows(6), "bulyan with f = 1 needs at least 4f+3 = 7 messages, got 6"},
		{Bulyan{F: 2}, rows(10), "needs at least 4f+3 = 11 messages, got 10"},
		{TrimmedMean{Beta: 0.6}, rows(5), "B = 0.6 must be in [0, 0.5)"},
		{NormBounded{C: -1}, rows(5), "C = -1 must be positive"},
		{Krum{F: -1}, rows(5), "F = -1 must be at least 0"},
	} {
		err := tc.r.Aggregate(tc.rows, make([]float64, 2))
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%v on %d rows: %v, want %q", tc.r, len(tc.rows), err, tc.want)
		}
	}
	for _, r := range all {
		if err := r.Aggregate(nil, make([]float64, 2)); err == nil || !strings.Contains(err.Error(), "no messages") {
			t.Errorf("%v on no rows: %v", r, err)
		}
		bad := rows(11)
		bad[3] = []float32{1}
		if err := r.Aggregate(bad, make([]float64, 2)); err == nil || !strings.Contains(err.Error(), "message 3 has 1 values, want 2") {
			t.Errorf("%v with a short row: %v", r, err)
		}
		for _, v := range []float32{float32(math.NaN()), float32(math.Inf(1)), float32(math.Inf(-1))} {
			bad := rows(11)
			bad[5] = []float32{0, v}
			if err := r.Aggregate(bad, make([]float64, 2)); err == nil || !strings.Contains(err.Error(), fmt.Sprintf("message 5 has %v at 1", v)) {
				t.Errorf("%v with %v: %v", r, v, err)
			}
		}
	}
}

// TestDeterministic checks that a rule's output does not depend on how
// many goroutines compute it: bit for bit, over several blocks.
func TestDeterministic(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 6))
	rows := honestAndByzantine(rng, 23, 2, 3*blockSize+17, 1e3, true)
	for _, r := range []Rule{Mean{}, Median{}, TrimmedMean{Beta: 0.1}, Krum{F: 2}, MultiKrum{F: 2, M: 10}, Bulyan{F: 2}, NormBounded{C: 3}} {
		var outs [2][]float64
		for i, procs := range []int{1, 4} {
			old := runtime.GOMAXPROCS(procs)
			outs[i] = aggregate(t, r, rows)
			runtime.GOMAXPROCS(old)
		}
		if !slices.Equal(outs[0], outs[1]) {
			t.Errorf("%v differs between 1 and 4 goroutines", r)
		}
	}
}

// TestNames checks that Names lists every rule Parse knows, with its
// parameters.
func TestNames(t *testing.T) {
	if len(Names()) != len(rules) {
		t.Errorf("Names() has %d rules, Parse %d", len(Names()), len(rules))
	}
	for _, n := range Names() {
		name, params, _ := strings.Cut(strings.Trim(n, "]"), ":")
		name, optional := strings.CutSuffix(name, "[")
		if optional != rules[name].optional {
			t.Errorf("Names() lists %q; Parse's parameters are optional: %v", n, rules[name].optional)
		}
		if r, ok := rules[name]; !ok || r.params != params {
			t.Errorf("Names() lists %q; Parse knows %q with parameters %q", n, name, r.params)
		}
	}
}
