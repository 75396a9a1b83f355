package data

import (
	"slices"
	"testing"
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
