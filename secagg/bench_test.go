package secagg

import (
	"fmt"
	"runtime"
	"testing"

	"github.com/fedpq/fedpq/corr"
)

// benchD is the parameter count of the project's MNIST MLP.
const benchD = 25818

// BenchmarkMask: one client's masking step (self mask plus one pairwise
// mask per partner) for d = 25818 at 16 bits.
func BenchmarkMask(b *testing.B) {
	for _, c := range []struct {
		name string
		n    int
	}{{"sparse-n100", 100}, {"complete-n16", 16}} {
		b.Run(c.name, func(b *testing.B) {
			p := benchParams(c.n)
			ids := seq(c.n)
			_, cl, partners := shared(b, p, ids, "bench")
			x := make([]uint64, benchD)
			b.ReportAllocs()
			for b.Loop() {
				c := *cl[ids[0]]
				c.step = 2
				if _, err := c.Mask(x, partners[ids[0]]); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/benchD, "ns/param")
		})
	}
}

// benchParams are fl's settings for n clients: the complete graph up to
// 64, else SparseGraph(n, 0.05, 0.1).
func benchParams(n int) Params {
	p := Params{Bits: 16, Seed: [32]byte{1}}
	if n > completeForTest {
		var err error
		if p.Degree, p.Threshold, err = SparseGraph(n, 0.05, 0.1); err != nil {
			panic(err)
		}
	}
	return p
}

// BenchmarkCheck: one client's CheckShares step, opening and checking every
// dealing against its commitments.
func BenchmarkCheck(b *testing.B) {
	for _, n := range []int{16, 64, 100, 1000} {
		b.Run(fmt.Sprintf("n%d", n), func(b *testing.B) {
			p := benchParams(n)
			ids := seq(n)
			rng := corr.Derive([]byte("check"), "clients")
			srv, _ := NewServer(p, ids)
			cl := map[uint64]*Client{}
			for _, id := range ids {
				cl[id], _ = NewClient(p, testPolicy, id, ids, rng)
				srv.AddKeys(id, cl[id].Keys())
			}
			for _, id := range ids {
				keys, _ := srv.Keys(id)
				d, err := cl[id].Share(keys)
				if err != nil {
					b.Fatal(err)
				}
				srv.AddShares(id, d)
			}
			in, _ := srv.Deliveries(ids[0])
			for b.Loop() {
				c := *cl[ids[0]]
				if _, err := c.Check(in); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkRound: a whole round in memory (every client's and the server's
// side), d = 610 (the quick start's model) at 16 bits.
func BenchmarkRound(b *testing.B) {
	for _, n := range []int{100, 1000} {
		b.Run(fmt.Sprintf("n%d", n), func(b *testing.B) {
			p := benchParams(n)
			ids := seq(n)
			in := randomInputs(ids, 610, p.Bits, "round")
			for b.Loop() {
				if _, err := Run(p, in, nil, corr.Derive([]byte("round"), "clients")); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkUnmask: the server's Sum on SparseGraph(n, 0.05, 0.1), with
// every survivor honest, 10% of the clients dropped before masking, or 5% of
// the survivors revealing a wrong share of every secret they hold.
func BenchmarkUnmask(b *testing.B) {
	for _, c := range []struct {
		n, drop, wrong int // drop and wrong in percent
	}{{100, 0, 0}, {100, 10, 0}, {100, 0, 5}, {1000, 0, 0}, {1000, 0, 5}} {
		b.Run(fmt.Sprintf("n%d/drop%d%%/wrong%d%%", c.n, c.drop, c.wrong), func(b *testing.B) {
			p := benchParams(c.n)
			ids := seq(c.n)
			srv, cl, partners := shared(b, p, ids, "bench")
			x := make([]uint64, benchD)
			for _, id := range ids[c.n*c.drop/100:] {
				y, err := cl[id].Mask(x, partners[id])
				if err != nil {
					b.Fatal(err)
				}
				if err := srv.AddMasked(id, y); err != nil {
					b.Fatal(err)
				}
			}
			req := reveal(b, srv, cl, func(k int) bool { return c.wrong > 0 && k%(100/c.wrong) == 0 })
			for b.Loop() {
				if _, err := srv.Sum(); err != nil {
					b.Fatal(err)
				}
			}
			found := len(srv.WrongShares())
			if c.wrong > 0 && found == 0 {
				b.Fatal("no wrong share found")
			}
			per := float64(b.Elapsed().Nanoseconds()) / float64(b.N)
			b.ReportMetric(per/benchD, "ns/param")
			b.ReportMetric(per/float64(len(req.Survivors)), "ns/survivor")
			b.ReportMetric(float64(found), "blamed")
		})
	}
}

// BenchmarkServerMemory: a whole round for n clients on the degree of
// SparseGraph(n, 0.05, 0.1), 10% dropped before masking and 5% after. It
// reports the heap the server holds once every reveal is in (server-B, and
// per client), beside n·d·8 bytes (the naive store of every masked input).
// n = 1000 masks d = 25818 parameters; n = 10000, d = 610, since masking
// is most of its minutes of setup and the server holds one d-vector
// however many clients there are. -short leaves n = 10000 out.
func BenchmarkServerMemory(b *testing.B) {
	for _, c := range []struct{ n, d int }{{1000, benchD}, {10000, 610}} {
		b.Run(fmt.Sprintf("n%d", c.n), func(b *testing.B) {
			if c.n > 1000 && testing.Short() {
				b.Skip("minutes of setup")
			}
			p := benchParams(c.n)
			ids := seq(c.n)
			x := make([]uint64, c.d)
			for b.Loop() {
				var ms runtime.MemStats
				runtime.GC()
				runtime.ReadMemStats(&ms)
				base := ms.HeapAlloc
				srv, cl, partners := shared(b, p, ids, "memory")
				for k, id := range ids {
					if k%10 == 0 {
						continue // 10% drop before masking
					}
					y, err := cl[id].Mask(x, partners[id])
					if err != nil {
						b.Fatal(err)
					}
					if err := srv.AddMasked(id, y); err != nil {
						b.Fatal(err)
					}
				}
				k := 0
				if _, err := unmask(b, srv, cl, func(uint64) bool { k++; return k%20 != 0 }); err != nil {
					b.Fatal(err)
				}
				clear(cl)
				clear(partners)
				runtime.GC()
				runtime.ReadMemStats(&ms)
				held := float64(int64(ms.HeapAlloc) - int64(base))
				b.ReportMetric(held, "server-B")
				b.ReportMetric(held/float64(c.n), "server-B/client")
				b.ReportMetric(float64(c.n*c.d*8), "naive-B")
				runtime.KeepAlive(srv)
			}
		})
	}
}
