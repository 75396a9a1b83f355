package secagg

import (
	"runtime"
	"testing"
)

// TestGraphShared: the clients of one round in one process share its
// graph, whatever order they list the ids in; another round, seed or set
// of clients has its own; and a graph no client holds leaves the cache.
func TestGraphShared(t *testing.T) {
	ids := make([]uint64, 200)
	for i := range ids {
		ids[i] = uint64(3 * i)
	}
	p := Params{Bits: 20, Degree: 20, Threshold: 12, Round: 4}
	p.Seed[0] = 1
	a, err := newGraph(p, ids)
	if err != nil {
		t.Fatal(err)
	}
	reversed := make([]uint64, len(ids))
	for i, id := range ids {
		reversed[len(ids)-1-i] = id
	}
	b, _ := newGraph(p, reversed)
	if a != b {
		t.Error("two clients of one round built two graphs")
	}
	q := p
	q.Round++
	r := p
	r.Seed[0] = 2
	for _, other := range []struct {
		p   Params
		ids []uint64
	}{{q, ids}, {r, ids}, {p, ids[1:]}} {
		if g, _ := newGraph(other.p, other.ids); g == a {
			t.Errorf("round %d, seed %x, %d clients: given the graph of another round", other.p.Round, other.p.Seed[0], len(other.ids))
		}
	}
	key := graphKey(p, ids, p.Degree)
	a, b = nil, nil
	for range 5 {
		runtime.GC()
		graphs.Lock()
		_, held := graphs.m[key]
		graphs.Unlock()
		if !held {
			return
		}
	}
	t.Error("graphs no client holds stay in the cache")
}
