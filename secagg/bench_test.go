package secagg

import (
	"fmt"
	"runtime"
	"testing"

	"github.com/fedpq/fedpq/corr"
)

// benchD is the parameter count of the project's MNIST CNN.
const benchD = 25818

// BenchmarkMask: one client's masking step (self mask plus one pairwise
// mask per neighbour) for d = 25818 at 16 bits.
func BenchmarkMask(b *testing.B) {
	for _, c := range []struct {
		name   string
		n, deg int
	}{{"degree8-n100", 100, 8}, {"complete-n16", 16, 0}} {
		b.Run(c.name, func(b *testing.B) {
			_, cl, inbox := shared(b, Params{Bits: 16, Degree: c.deg, Seed: [32]byte{1}}, seq(c.n), "bench")
			id := seq(c.n)[0]
			x := make([]uint64, benchD)
			b.ReportAllocs()
			for b.Loop() {
				c := *cl[id]
				c.step = 1
				if _, err := c.Mask(x, inbox[id]); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/benchD, "ns/param")
		})
	}
}

// BenchmarkUnmask: the server's Sum for 100 clients on a degree-16 graph
// (SparseGraph(100, 0.05, 0.1)) with none or 10% dropped before masking.
func BenchmarkUnmask(b *testing.B) {
	const n = 100
	deg, thr, err := SparseGraph(n, 0.05, 0.1)
	if err != nil {
		b.Fatal(err)
	}
	for _, drop := range []int{0, 10} {
		b.Run(fmt.Sprintf("drop%d%%", drop), func(b *testing.B) {
			p := Params{Bits: 16, Degree: deg, Threshold: thr, Seed: [32]byte{2}}
			srv, cl, inbox := shared(b, p, seq(n), "bench")
			ids := seq(n)
			x := make([]uint64, benchD)
			for _, id := range ids[drop:] {
				y, err := cl[id].Mask(x, inbox[id])
				if err != nil {
					b.Fatal(err)
				}
				if err := srv.AddMasked(id, y); err != nil {
					b.Fatal(err)
				}
			}
			survivors, dropped, _ := srv.Request()
			for _, id := range survivors {
				r, err := cl[id].Unmask(survivors, dropped)
				if err != nil {
					b.Fatal(err)
				}
				if err := srv.AddReveal(id, r); err != nil {
					b.Fatal(err)
				}
			}
			for b.Loop() {
				if _, err := srv.Sum(); err != nil {
					b.Fatal(err)
				}
			}
			per := float64(b.Elapsed().Nanoseconds()) / float64(b.N)
			b.ReportMetric(per/benchD, "ns/param")
			b.ReportMetric(per/float64(len(survivors)), "ns/survivor")
		})
	}
}

// BenchmarkServerMemory: a whole round for 1000 clients on the degree of
// SparseGraph(1000, 0.05, 0.1), d = 25818, 10% dropped before masking and
// 5% after. It reports the heap the server holds once every reveal is in
// (server-B), beside n·d·8 bytes (the naive store of every masked input).
func BenchmarkServerMemory(b *testing.B) {
	const n = 1000
	deg, thr, err := SparseGraph(n, 0.05, 0.1)
	if err != nil {
		b.Fatal(err)
	}
	p := Params{Bits: 16, Degree: deg, Threshold: thr, Seed: [32]byte{3}}
	ids := seq(n)
	x := make([]uint64, benchD)
	for b.Loop() {
		var ms runtime.MemStats
		runtime.GC()
		runtime.ReadMemStats(&ms)
		base := ms.HeapAlloc
		rng := corr.Derive([]byte("memory"), "clients")
		srv, err := NewServer(p, ids)
		if err != nil {
			b.Fatal(err)
		}
		cl := map[uint64]*Client{}
		for _, id := range ids {
			if cl[id], err = NewClient(p, id, ids, rng); err != nil {
				b.Fatal(err)
			}
			if err := srv.AddKeys(id, cl[id].Keys()); err != nil {
				b.Fatal(err)
			}
		}
		for _, id := range ids {
			keys, _ := srv.Keys(id)
			sealed, err := cl[id].Share(keys)
			if err != nil {
				b.Fatal(err)
			}
			if err := srv.AddShares(id, sealed); err != nil {
				b.Fatal(err)
			}
		}
		for k, id := range ids {
			sealed, _ := srv.Shares(id)
			if k%10 == 0 {
				continue // 10% drop before masking
			}
			y, err := cl[id].Mask(x, sealed)
			if err != nil {
				b.Fatal(err)
			}
			if err := srv.AddMasked(id, y); err != nil {
				b.Fatal(err)
			}
		}
		survivors, dropped, _ := srv.Request()
		for k, id := range survivors {
			if k%20 == 0 {
				continue // 5% drop after masking
			}
			r, err := cl[id].Unmask(survivors, dropped)
			if err != nil {
				b.Fatal(err)
			}
			if err := srv.AddReveal(id, r); err != nil {
				b.Fatal(err)
			}
		}
		clear(cl)
		runtime.GC()
		runtime.ReadMemStats(&ms)
		b.ReportMetric(float64(int64(ms.HeapAlloc)-int64(base)), "server-B")
		b.ReportMetric(float64(n*benchD*8), "naive-B")
		if _, err := srv.Sum(); err != nil {
			b.Fatal(err)
		}
		runtime.KeepAlive(srv)
	}
}
