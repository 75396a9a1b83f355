package data

import (
	"math"
	"slices"
	"testing"

	"github.com/fedpq/fedpq/corr"
)

// checkPartition fails unless parts are disjoint, cover 0..n-1, and are
// each sorted.
func checkPartition(t *testing.T, parts [][]int, n int) {
	t.Helper()
	seen := make([]bool, n)
	total := 0
	for k, p := range parts {
		if !slices.IsSorted(p) {
			t.Errorf("client %d: indices not sorted", k)
		}
		for _, i := range p {
			if i < 0 || i >= n || seen[i] {
				t.Fatalf("client %d: index %d out of range or repeated", k, i)
			}
			seen[i] = true
		}
		total += len(p)
	}
	if total != n {
		t.Errorf("partition covers %d of %d examples", total, n)
	}
}

// TestIID: disjoint and complete, sizes within one of each other, the same
// seed gives the same partition and another seed another, and impossible
// requests are errors.
func TestIID(t *testing.T) {
	for _, c := range []struct{ n, clients int }{{60000, 100}, {1003, 10}, {7, 7}} {
		p, err := IID(c.n, c.clients, 1)
		if err != nil {
			t.Fatal(err)
		}
		if len(p) != c.clients {
			t.Fatalf("%d parts, want %d", len(p), c.clients)
		}
		checkPartition(t, p, c.n)
		for _, q := range p {
			if len(q) != c.n/c.clients && len(q) != c.n/c.clients+1 {
				t.Errorf("n=%d clients=%d: a client has %d", c.n, c.clients, len(q))
			}
		}
		again, _ := IID(c.n, c.clients, 1)
		if !equalParts(p, again) {
			t.Errorf("n=%d: same seed, different partition", c.n)
		}
	}
	a, _ := IID(1000, 10, 1)
	b, _ := IID(1000, 10, 2)
	if equalParts(a, b) {
		t.Error("seeds 1 and 2 give the same partition")
	}
	for _, c := range []struct{ n, clients int }{{5, 6}, {5, 0}} {
		if _, err := IID(c.n, c.clients, 1); err == nil {
			t.Errorf("IID(%d, %d) did not fail", c.n, c.clients)
		}
	}
}

func equalParts(a, b [][]int) bool {
	return slices.EqualFunc(a, b, slices.Equal)
}

// blockLabels returns classes*per labels, sorted: per examples of class 0,
// then of class 1, and so on.
func blockLabels(classes, per int) []int32 {
	l := make([]int32, classes*per)
	for i := range l {
		l[i] = int32(i / per)
	}
	return l
}

// classShares returns, for each client, the fraction of its examples in
// each class.
func classShares(parts [][]int, labels []int32, classes int) [][]float64 {
	s := make([][]float64, len(parts))
	for k, p := range parts {
		s[k] = make([]float64, classes)
		for _, i := range p {
			s[k][labels[i]] += 1 / float64(len(p))
		}
	}
	return s
}

// TestDirichlet: with 10 classes of 1000 examples among 10 clients, the
// partition is disjoint and complete for every alpha. With alpha = 0.1 it
// is skewed: on average a client's largest class holds over 45% of its data
// (seeds 1-5 give 54-67%; IID would give about 10%). With alpha = 1000 it is
// near-uniform: every client's share of every class is within 0.03 of 0.1
// (the Dirichlet's spread is 0.003, the multinomial dealing's about 0.01, so
// this is a 3-sigma bound), and client sizes within 10% of 1000. With
// alpha = 0.001 and 100 clients most clients would draw nothing; each still
// gets at least one example. The same seed repeats the partition.
func TestDirichlet(t *testing.T) {
	labels := blockLabels(10, 1000)
	for seed := uint64(1); seed <= 5; seed++ {
		skew, err := Dirichlet(labels, 10, 10, 0.1, seed)
		if err != nil {
			t.Fatal(err)
		}
		checkPartition(t, skew, len(labels))
		top := 0.0
		for _, s := range classShares(skew, labels, 10) {
			top += slices.Max(s) / 10
		}
		if top < 0.45 {
			t.Errorf("alpha 0.1, seed %d: mean largest-class share %.2f, want > 0.45", seed, top)
		}

		flat, err := Dirichlet(labels, 10, 10, 1000, seed)
		if err != nil {
			t.Fatal(err)
		}
		checkPartition(t, flat, len(labels))
		for k, s := range classShares(flat, labels, 10) {
			if slices.Min(s) < 0.07 || slices.Max(s) > 0.13 || len(flat[k]) < 900 || len(flat[k]) > 1100 {
				t.Errorf("alpha 1000, seed %d: client %d has %d examples, class shares %.3f", seed, k, len(flat[k]), s)
			}
		}
	}

	tiny, err := Dirichlet(labels, 10, 100, 0.001, 3)
	if err != nil {
		t.Fatal(err)
	}
	checkPartition(t, tiny, len(labels))
	for k, p := range tiny {
		if len(p) == 0 {
			t.Errorf("alpha 0.001: client %d is empty", k)
		}
	}
	again, _ := Dirichlet(labels, 10, 100, 0.001, 3)
	if !equalParts(tiny, again) {
		t.Error("same seed, different partition")
	}
	for _, tc := range []struct {
		labels      []int32
		clients     int
		alpha       float64
		description string
	}{
		{labels, 10, 0, "alpha 0"},
		{labels, 10, math.Inf(1), "alpha inf"},
		{labels[:5], 10, 1, "fewer examples than clients"},
		{[]int32{0, 10}, 1, 1, "label out of range"},
	} {
		if _, err := Dirichlet(tc.labels, 10, tc.clients, tc.alpha, 1); err == nil {
			t.Errorf("%s: no error", tc.description)
		}
	}
}

// TestShards: with 10 classes of 100 examples, 50 clients of 2 shards cut
// 100 pure shards of 10, so every client holds 20 examples of 1 or 2 labels,
// and most hold 2. With sizes that do not divide, shards differ by at most
// one example and none is lost. The same seed repeats the partition.
func TestShards(t *testing.T) {
	labels := blockLabels(10, 100)
	// Shuffle the file order: Shards must sort by label itself.
	perm := make([]int, len(labels))
	corr.Shuffle(corr.Derive(corr.SeedSecret(1), "test"), perm)
	shuffled := make([]int32, len(labels))
	for i, j := range perm {
		shuffled[i] = labels[j]
	}
	p, err := Shards(shuffled, 50, 2, 7)
	if err != nil {
		t.Fatal(err)
	}
	checkPartition(t, p, len(labels))
	two := 0
	for k, s := range classShares(p, shuffled, 10) {
		n := 0
		for _, x := range s {
			if x > 0 {
				n++
			}
		}
		if len(p[k]) != 20 || n < 1 || n > 2 {
			t.Errorf("client %d: %d examples of %d labels, want 20 of 1 or 2", k, len(p[k]), n)
		}
		if n == 2 {
			two++
		}
	}
	if two < 40 {
		t.Errorf("%d of 50 clients have two labels (expected about 45)", two)
	}
	again, _ := Shards(shuffled, 50, 2, 7)
	if !equalParts(p, again) {
		t.Error("same seed, different partition")
	}

	odd, err := Shards(blockLabels(7, 13), 4, 3, 1)
	if err != nil {
		t.Fatal(err)
	}
	checkPartition(t, odd, 91)
	for k, q := range odd {
		if len(q) < 3*(91/12) || len(q) > 3*(91/12+1) {
			t.Errorf("client %d has %d examples", k, len(q))
		}
	}
	if _, err := Shards(labels, 600, 2, 1); err == nil {
		t.Error("1200 shards of 1000 examples: no error")
	}
}

// TestSplit: the validation set has round(frac*n) examples, the two sets
// are disjoint and complete, and the seed fixes them.
func TestSplit(t *testing.T) {
	train, val, err := Split(1000, 0.15, 4)
	if err != nil {
		t.Fatal(err)
	}
	if len(val) != 150 || len(train) != 850 {
		t.Errorf("sizes %d/%d", len(train), len(val))
	}
	checkPartition(t, [][]int{train, val}, 1000)
	t2, v2, _ := Split(1000, 0.15, 4)
	if !slices.Equal(train, t2) || !slices.Equal(val, v2) {
		t.Error("same seed, different split")
	}
	if _, _, err := Split(10, 1.5, 1); err == nil {
		t.Error("frac 1.5: no error")
	}
}
