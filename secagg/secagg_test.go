package secagg

import (
	"bytes"
	"crypto/ecdh"
	"fmt"
	"maps"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"

	"github.com/fedpq/fedpq/corr"
	"gonum.org/v1/gonum/stat/distuv"
)

func seq(n int) []uint64 {
	ids := make([]uint64, n)
	for i := range ids {
		ids[i] = uint64(3*i + 7) // not 0..n-1, to catch index/id mix-ups
	}
	return ids
}

// randomInputs returns n vectors of length d below 2^bits.
func randomInputs(ids []uint64, d, bits int, label string) map[uint64][]uint64 {
	src := corr.Derive([]byte(label), "inputs")
	m := Params{Bits: bits}.mask()
	in := map[uint64][]uint64{}
	for _, id := range ids {
		x := make([]uint64, d)
		src.Fill(x)
		for i := range x {
			x[i] &= m
		}
		in[id] = x
	}
	return in
}

func plainSum(in map[uint64][]uint64, skip []uint64, bits int) []uint64 {
	var out []uint64
	for id, x := range in {
		if slices.Contains(skip, id) {
			continue
		}
		if out == nil {
			out = make([]uint64, len(x))
		}
		add(out, x)
	}
	m := Params{Bits: bits}.mask()
	for i := range out {
		out[i] &= m
	}
	return out
}

// shared plays steps 0 and 1 for ids and returns the server, the clients
// and each client's delivered sealed shares.
func shared(t testing.TB, p Params, ids []uint64, label string) (*Server, map[uint64]*Client, map[uint64]map[uint64][]byte) {
	t.Helper()
	rng := corr.Derive([]byte(label), "clients")
	srv, err := NewServer(p, ids)
	if err != nil {
		t.Fatal(err)
	}
	cl := map[uint64]*Client{}
	for _, id := range ids {
		if cl[id], err = NewClient(p, id, ids, rng); err != nil {
			t.Fatal(err)
		}
		if err := srv.AddKeys(id, cl[id].Keys()); err != nil {
			t.Fatal(err)
		}
	}
	for _, id := range ids {
		keys, err := srv.Keys(id)
		if err != nil {
			t.Fatal(err)
		}
		sealed, err := cl[id].Share(keys)
		if err != nil {
			t.Fatal(err)
		}
		if err := srv.AddShares(id, sealed); err != nil {
			t.Fatal(err)
		}
	}
	inbox := map[uint64]map[uint64][]byte{}
	for _, id := range ids {
		if inbox[id], err = srv.Shares(id); err != nil {
			t.Fatal(err)
		}
	}
	return srv, cl, inbox
}

// TestMaskedUniform: one client's masked message for a fixed, far from
// uniform input is uniform on Z_2^7: chi-square over 128 cells of 2^18
// coordinates, below the 1−1e-3 quantile of chi-square(127) (about 181.99).
// The same statistic on the input itself must exceed it, so the test can
// fail.
func TestMaskedUniform(t *testing.T) {
	const bits, d = 7, 1 << 18
	p := Params{Bits: bits, Seed: [32]byte{1}}
	ids := seq(3)
	_, cl, inbox := shared(t, p, ids, "uniform")
	x := make([]uint64, d)
	for i := range x {
		x[i] = uint64(i%3) * 5 // three values only
	}
	y, err := cl[ids[0]].Mask(x, inbox[ids[0]])
	if err != nil {
		t.Fatal(err)
	}
	crit := distuv.ChiSquared{K: 127}.Quantile(1 - 1e-3)
	chi := func(v []uint64) float64 {
		var c [128]float64
		for _, u := range v {
			c[u]++
		}
		e := float64(len(v)) / 128
		s := 0.0
		for _, o := range c {
			s += (o - e) * (o - e) / e
		}
		return s
	}
	if got := chi(y); got > crit {
		t.Errorf("masked message chi-square %.1f > %.1f", got, crit)
	}
	if got := chi(x); got <= crit {
		t.Errorf("the test has no power: input chi-square %.1f <= %.1f", got, crit)
	}
}

// TestExactSum: unmasking gives the exact sum mod 2^k without dropouts.
func TestExactSum(t *testing.T) {
	for _, n := range []int{1, 2, 3, 10, 100} {
		for _, bits := range []int{1, 7, 16, 64} {
			degrees := []int{0}
			if n == 100 {
				degrees = append(degrees, 12)
			}
			for _, deg := range degrees {
				if n == 100 && deg == 0 && bits != 7 {
					continue // the complete graph on 100 is slow; once is enough
				}
				p := Params{Bits: bits, Degree: deg, Seed: [32]byte{byte(n), byte(bits)}, Round: 3}
				label := fmt.Sprint(n, bits, deg)
				in := randomInputs(seq(n), 64, bits, label)
				got, err := Run(p, in, nil, nil, corr.Derive([]byte(label), "rng"))
				if err != nil {
					t.Fatalf("n=%d k=%d degree=%d: %v", n, bits, deg, err)
				}
				if want := plainSum(in, nil, bits); !slices.Equal(got, want) {
					t.Errorf("n=%d k=%d degree=%d: sum differs", n, bits, deg)
				}
			}
		}
	}
}

// outcome predicts whether a round with these dropouts must finish, from
// the protocol's conditions: every revealer sees t surviving holders, every
// survivor's self-mask seed has t revealers among its holders, and every
// dropped client with a surviving neighbour has t revealers among its
// neighbours.
func outcome(g *graph, t int, ids []uint64, before, after map[uint64]bool) bool {
	survive := func(i uint64) bool { return !before[i] }
	reveal := func(i uint64) bool { return !before[i] && !after[i] }
	count := func(i uint64, self bool, f func(uint64) bool) int {
		c := 0
		if self && f(i) {
			c++
		}
		for _, j := range g.neighbours(i) {
			if f(j) {
				c++
			}
		}
		return c
	}
	for _, i := range ids {
		switch {
		case reveal(i) && count(i, true, survive) < t:
			return false
		case survive(i) && count(i, true, reveal) < t:
			return false
		case !survive(i) && count(i, false, survive) > 0 && count(i, false, reveal) < t:
			return false
		}
	}
	return slices.ContainsFunc(ids, survive)
}

// TestAnySurvivors: for every assignment of 6 clients to stay, drop before
// masking, or drop after masking (3^6 rounds, complete graph, t = 4), the
// round gives the exact sum of the maskers exactly when the threshold
// conditions hold, and otherwise fails with an error naming the threshold;
// then the same over 300 random dropout patterns on a sparse graph.
func TestAnySurvivors(t *testing.T) {
	check := func(p Params, ids []uint64, before, after []uint64, label string) bool {
		in := randomInputs(ids, 16, p.Bits, label)
		got, err := Run(p, in, before, after, corr.Derive([]byte(label), "rng"))
		g, gerr := newGraph(p, ids)
		if gerr != nil {
			t.Fatal(gerr)
		}
		_, thr, _ := p.shape(len(ids))
		want := outcome(g, thr, ids, set(before), set(after))
		switch {
		case want && err != nil:
			t.Errorf("before %v after %v: %v", before, after, err)
		case want && !slices.Equal(got, plainSum(in, before, p.Bits)):
			t.Errorf("before %v after %v: wrong sum", before, after)
		case !want && err == nil:
			t.Errorf("before %v after %v: finished below the threshold", before, after)
		case !want && !strings.Contains(err.Error(), "threshold") && !strings.Contains(err.Error(), "no masked input"):
			t.Errorf("before %v after %v: unclear error %q", before, after, err)
		}
		return want
	}
	ids := seq(6)
	p := Params{Bits: 16, Threshold: 4, Seed: [32]byte{9}}
	ok := 0
	for code := range 729 {
		var before, after []uint64
		c := code
		for _, id := range ids {
			switch c % 3 {
			case 1:
				before = append(before, id)
			case 2:
				after = append(after, id)
			}
			c /= 3
		}
		if check(p, ids, before, after, fmt.Sprint("complete", code)) {
			ok++
		}
	}
	if ok == 0 || ok == 729 {
		t.Errorf("%d of 729 complete-graph patterns finish: the test does not exercise both sides", ok)
	}

	ids = seq(30)
	p = Params{Bits: 7, Degree: 6, Threshold: 5, Seed: [32]byte{10}}
	r := rand.New(rand.NewPCG(1, 2))
	ok = 0
	for trial := range 300 {
		var before, after []uint64
		rate := 0.25 * r.Float64()
		for _, id := range ids {
			switch u := r.Float64(); {
			case u < rate:
				before = append(before, id)
			case u < 2*rate:
				after = append(after, id)
			}
		}
		if check(p, ids, before, after, fmt.Sprint("sparse", trial)) {
			ok++
		}
	}
	if ok < 30 || ok > 270 {
		t.Errorf("%d of 300 sparse patterns finish: the test does not exercise both sides", ok)
	}
}

// TestRefusals: a client reveals nothing to a server that asks for both
// kinds of share of one client, that names fewer than t survivors among its
// share holders, that leaves it out of the survivors, or that asks twice.
func TestRefusals(t *testing.T) {
	ids := seq(5)
	p := Params{Bits: 8, Threshold: 3, Seed: [32]byte{2}}
	for _, c := range []struct {
		name               string
		survivors, dropped []uint64
		want               string
	}{
		{"both kinds", ids, ids[1:2], "both"},
		{"below threshold", ids[:2], ids[2:], "threshold"},
		{"not a survivor", ids[1:], ids[:1], "survivor"},
	} {
		_, cl, inbox := shared(t, p, ids, c.name)
		c0 := cl[ids[0]]
		if _, err := c0.Mask(make([]uint64, 4), inbox[ids[0]]); err != nil {
			t.Fatal(err)
		}
		r, err := c0.Unmask(c.survivors, c.dropped)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: err = %v, want it to mention %q", c.name, err, c.want)
		}
		if r.Self != nil || r.Pair != nil {
			t.Errorf("%s: revealed shares while refusing", c.name)
		}
		if _, err := c0.Unmask(ids, nil); err == nil {
			t.Errorf("%s: answered a second request", c.name)
		}
	}
	// An honest request is answered once, and only once.
	_, cl, inbox := shared(t, p, ids, "twice")
	c0 := cl[ids[0]]
	if _, err := c0.Mask(make([]uint64, 4), inbox[ids[0]]); err != nil {
		t.Fatal(err)
	}
	if _, err := c0.Unmask(ids[:4], ids[4:]); err != nil {
		t.Fatal(err)
	}
	if _, err := c0.Unmask(ids[:3], ids[3:]); err == nil {
		t.Error("answered a second request with a different dropped set")
	}
}

// TestSharesBelowThreshold: any t of a secret's shares rebuild it; t−1 do
// not: recovery refuses them, and interpolating them as if the threshold
// were t−1 never gives the secret.
func TestSharesBelowThreshold(t *testing.T) {
	const thr = 5
	holders := seq(8)
	var secret [32]byte
	copy(secret[:], "a 32-byte self-mask seed, b_i...")
	rng := corr.Derive([]byte("shamir"), "test")
	shares, err := split(secret, thr, holders, rng)
	if err != nil {
		t.Fatal(err)
	}
	r := rand.New(rand.NewPCG(3, 4))
	for range 50 {
		perm := r.Perm(len(holders))
		pick := func(k int) map[uint64][]byte {
			m := map[uint64][]byte{}
			for _, i := range perm[:k] {
				m[holders[i]] = shares[i]
			}
			return m
		}
		if got, err := recoverSecret(thr, pick(thr)); err != nil || got != secret {
			t.Fatalf("t shares %v: %v", slices.Sorted(maps.Keys(pick(thr))), err)
		}
		if _, err := recoverSecret(thr, pick(thr-1)); err == nil || !strings.Contains(err.Error(), "threshold") {
			t.Fatalf("t-1 shares: err = %v", err)
		}
		if got, err := recoverSecret(thr-1, pick(thr-1)); err == nil && got == secret {
			t.Fatal("t-1 shares gave the secret")
		}
	}
}

// TestServerBelowThreshold: the server's Sum names the client whose secret
// has fewer than t revealed shares.
func TestServerBelowThreshold(t *testing.T) {
	ids := seq(5)
	p := Params{Bits: 8, Threshold: 3, Seed: [32]byte{5}}
	srv, cl, inbox := shared(t, p, ids, "server")
	for _, id := range ids[:4] { // ids[4] drops before masking
		y, err := cl[id].Mask(make([]uint64, 4), inbox[id])
		if err != nil {
			t.Fatal(err)
		}
		if err := srv.AddMasked(id, y); err != nil {
			t.Fatal(err)
		}
	}
	survivors, dropped, err := srv.Request()
	if err != nil {
		t.Fatal(err)
	}
	for _, id := range ids[:2] { // two reveals, threshold 3
		r, err := cl[id].Unmask(survivors, dropped)
		if err != nil {
			t.Fatal(err)
		}
		if err := srv.AddReveal(id, r); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := srv.Sum(); err == nil || !strings.Contains(err.Error(), "2 shares, threshold 3") {
		t.Errorf("Sum with 2 of 3 shares: %v", err)
	}
	r, err := cl[ids[2]].Unmask(survivors, dropped)
	if err != nil {
		t.Fatal(err)
	}
	if err := srv.AddReveal(ids[2], r); err != nil {
		t.Fatal(err)
	}
	if got, err := srv.Sum(); err != nil || !slices.Equal(got, make([]uint64, 4)) {
		t.Errorf("Sum with 3 shares: %v %v", got, err)
	}
}

// TestGraph: the random Harary graph is symmetric, every client has exactly
// Degree neighbours, the graph does not depend on the order of ids but does
// on the seed, and SparseGraph's degree grows like log n.
func TestGraph(t *testing.T) {
	ids := seq(50)
	p := Params{Bits: 8, Degree: 8, Seed: [32]byte{7}}
	g, err := newGraph(p, ids)
	if err != nil {
		t.Fatal(err)
	}
	rev := slices.Clone(ids)
	slices.Reverse(rev)
	other := p
	other.Seed[0]++
	same := true
	for _, i := range ids {
		nb := g.neighbours(i)
		if len(nb) != 8 || slices.Contains(nb, i) {
			t.Fatalf("client %d has neighbours %v", i, nb)
		}
		for _, j := range nb {
			if !slices.Contains(g.neighbours(j), i) || !g.adjacent(i, j) {
				t.Fatalf("%d-%d is one-sided", i, j)
			}
		}
		if r, _ := Neighbours(p, rev, i); !slices.Equal(r, nb) {
			t.Fatalf("client %d: graph depends on the order of ids", i)
		}
		if o, _ := Neighbours(other, ids, i); !slices.Equal(o, nb) {
			same = false
		}
	}
	if same {
		t.Error("graph does not depend on the seed")
	}
	if _, err := Neighbours(Params{Bits: 8, Degree: 7}, ids, ids[0]); err == nil {
		t.Error("accepted an odd sparse degree")
	}
	prev := 0
	for _, n := range []int{100, 1000, 10000, 100000} {
		k, thr, err := SparseGraph(n, 0.05, 0.1)
		if err != nil || k%2 != 0 || k > 60 || thr < 2 || thr > k || k < prev {
			t.Errorf("SparseGraph(%d, 0.05, 0.1) = %d, %d, %v", n, k, thr, err)
		}
		prev = k
	}
}

// TestBadInput: clear errors for bad settings and messages.
func TestBadInput(t *testing.T) {
	ids := seq(4)
	for _, p := range []Params{{Bits: 0}, {Bits: 65}, {Bits: 8, Threshold: -1}, {Bits: 8, Threshold: 5}, {Bits: 8, Degree: -2}} {
		if _, err := NewServer(p, ids); err == nil {
			t.Errorf("%+v accepted", p)
		}
	}
	if _, err := NewServer(Params{Bits: 8}, []uint64{1, 2, 1}); err == nil {
		t.Error("duplicate ids accepted")
	}
	p := Params{Bits: 4}
	srv, cl, inbox := shared(t, p, ids, "bad")
	if _, err := cl[ids[0]].Mask([]uint64{16}, inbox[ids[0]]); err == nil {
		t.Error("input 16 accepted at 4 bits")
	}
	if err := srv.AddMasked(ids[1], []uint64{1, 16}); err == nil {
		t.Error("masked value 16 accepted at 4 bits")
	}
	bad := maps.Clone(inbox[ids[1]])
	for j, ct := range bad {
		ct = slices.Clone(ct)
		ct[5] ^= 1
		bad[j] = ct
		break
	}
	if _, err := cl[ids[1]].Mask([]uint64{1}, bad); err == nil {
		t.Error("tampered shares accepted")
	}
}

// TestSmallOrderKeys: keys that are points of small order, with which any
// agreement is all zeros, are refused by the server, so that no client
// can make its neighbours' key agreements fail and knock them out of the
// round.
func TestSmallOrderKeys(t *testing.T) {
	ids := seq(3)
	srv, err := NewServer(Params{Bits: 8}, ids)
	if err != nil {
		t.Fatal(err)
	}
	good := func() []byte {
		k, err := ecdh.X25519().NewPrivateKey(bytes.Repeat([]byte{3}, 32))
		if err != nil {
			t.Fatal(err)
		}
		return k.PublicKey().Bytes()
	}()
	one := make([]byte, 32)
	one[0] = 1 // the point u = 1, of order 4
	for _, bad := range [][]byte{make([]byte, 32), one} {
		if err := srv.AddKeys(ids[0], Advertised{C: bad, S: good}); err == nil {
			t.Errorf("c key %x accepted", bad)
		}
		if err := srv.AddKeys(ids[0], Advertised{C: good, S: bad}); err == nil {
			t.Errorf("s key %x accepted", bad)
		}
	}
	if err := srv.AddKeys(ids[0], Advertised{C: good, S: good}); err != nil {
		t.Errorf("good keys refused: %v", err)
	}
}
