package fl

import (
	"slices"
	"testing"

	"github.com/fedpq/fedpq/corr"
	"github.com/fedpq/fedpq/mech"
	"github.com/fedpq/fedpq/wire"
)

// TestShuffleUnlinks: the shuffler hands the server, for each parameter,
// the same multiset of reports, in an order drawn for that parameter:
// most of the payloads the server receives are no client's upload.
func TestShuffleUnlinks(t *testing.T) {
	m, err := mech.New("ldpq", mech.DefaultConfig())
	if err != nil {
		t.Fatal(err)
	}
	const n, d = 20, 64
	s := &shuffled{m: m, width: 1, ranges: []mech.Range{{Center: 0, Radius: 1}}, sizes: []int{d},
		src: func(tensor int) corr.Source { return corr.Derive([]byte("test"), "shuffle", uint64(tensor)) }}
	src := corr.Derive([]byte("test"), "uploads")
	for range n {
		p := wire.NewPacker(nil, 1)
		for range d {
			p.Put(uint32(src.Uint64() & 1))
		}
		if err := s.add(0, Upload{Payloads: [][]byte{p.Bytes()}, Examples: 1}); err != nil {
			t.Fatal(err)
		}
	}
	out, err := s.shuffle(0, d)
	if err != nil {
		t.Fatal(err)
	}
	column := func(payloads [][]byte, j int) []uint32 {
		var c []uint32
		for _, p := range payloads {
			u, err := wire.NewUnpacker(p, d, 1)
			if err != nil {
				t.Fatal(err)
			}
			for range j {
				u.Next()
			}
			c = append(c, u.Next())
		}
		slices.Sort(c)
		return c
	}
	in := make([][]byte, n)
	for c, u := range s.uploads {
		in[c] = u[0]
	}
	for j := range d {
		if !slices.Equal(column(in, j), column(out, j)) {
			t.Fatalf("parameter %d: the shuffler changed its reports", j)
		}
	}
	same := 0
	for c := range n {
		if slices.Equal(in[c], out[c]) {
			same++
		}
	}
	if same > 1 {
		t.Errorf("%d of %d payloads reach the server as their client sent them", same, n)
	}
}
