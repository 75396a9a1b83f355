package privacy

import (
	"bytes"
	"encoding/gob"
	"encoding/json"
	"math"
	"math/bits"
	"math/rand/v2"
	"strings"
	"testing"
)

// recorder is a NormalSource that records what it gives.
type recorder struct {
	src  *rand.Rand
	seen []float64
}

func (r *recorder) NormFloat64() float64 {
	v := r.src.NormFloat64()
	r.seen = append(r.seen, v)
	return v
}

func chacha(seed byte) *rand.ChaCha8 { return rand.NewChaCha8([32]byte{seed, 'f', 't', 'r', 'l'}) }

// prefixBlocks is the binary decomposition of steps lo..hi into dyadic
// blocks, largest first, as [first, last] pairs: for 1..6, [1,4] and [5,6].
func prefixBlocks(lo, hi int) [][2]int {
	var out [][2]int
	for n := hi - lo + 1; n > 0; {
		p := 1 << (bits.Len(uint(n)) - 1)
		out = append(out, [2]int{lo, lo + p - 1})
		lo, n = lo+p, n-p
	}
	return out
}

// treeStart is the first step of the tree that step t (1-based) is in.
func treeStart(t int, o TreeOptions) int {
	if o.Restart == 0 {
		return 1
	}
	return (t-1)/o.Restart*o.Restart + 1
}

// TestTreeNodes checks the vanilla tree's noise at every step against its
// definition: with one draw vector per step, the node of the block that
// ends at step s holds step s's draws, and prefix sum t's noise is the sum
// of the nodes of its blocks (since the last restart).
func TestTreeNodes(t *testing.T) {
	const d, steps, sigma = 3, 70, 0.5
	for _, o := range []TreeOptions{{}, {Restart: 5}, {Restart: 8}, {Restart: 1}} {
		rec := &recorder{src: rand.New(chacha(1))}
		tr, err := NewTree(d, sigma, rec, o)
		if err != nil {
			t.Fatal(err)
		}
		got := make([]float64, d)
		for s := 1; s <= steps; s++ {
			if err := tr.Next(got); err != nil {
				t.Fatal(err)
			}
			for i := range d {
				want := 0.0
				for _, b := range prefixBlocks(treeStart(s, o), s) {
					want += sigma * rec.seen[(b[1]-1)*d+i]
				}
				if math.Abs(got[i]-want) > 1e-12 {
					t.Fatalf("%+v step %d coordinate %d: noise %v, want %v", o, s, i, got[i], want)
				}
			}
		}
		if len(rec.seen) != steps*d {
			t.Errorf("%+v: %d draws for %d steps of dimension %d", o, len(rec.seen), steps, d)
		}
	}
}

// honaker is an offline reference for the efficient tree: the nodes of
// every complete block of one tree of n steps, numbered in the order the
// online tree draws them (at step s the leaf, then each block that ends at
// s, upwards), each block's estimate the best linear unbiased one from its
// subtree (Honaker 2015): the inverse-variance mean of its own node
// (variance sigma^2) and its children's estimates (variance 2 V_{h-1}).
func honaker(draws []float64, n int, sigma float64) map[[2]int]float64 {
	est := map[[2]int]float64{}
	v := []float64{sigma * sigma}
	next := 0
	for s := 1; s <= n; s++ {
		for h := 0; s%(1<<h) == 0; h++ {
			b := [2]int{s - 1<<h + 1, s}
			z := sigma * draws[next]
			next++
			if h == 0 {
				est[b] = z
				continue
			}
			if len(v) <= h {
				v = append(v, 1/(1/(sigma*sigma)+1/(2*v[h-1])))
			}
			mid := b[0] + 1<<(h-1)
			children := est[[2]int{b[0], mid - 1}] + est[[2]int{mid, b[1]}]
			est[b] = v[h] * (z/(sigma*sigma) + children/(2*v[h-1]))
		}
	}
	return est
}

// TestTreeHonaker checks the efficient tree's noise, with d = 1, against
// the offline reference: the sum over prefix t's blocks of their
// estimates, to 1e-12.
func TestTreeHonaker(t *testing.T) {
	const steps, sigma = 45, 1.7
	for _, o := range []TreeOptions{{Efficient: true}, {Efficient: true, Restart: 6}} {
		rec := &recorder{src: rand.New(chacha(2))}
		tr, err := NewTree(1, sigma, rec, o)
		if err != nil {
			t.Fatal(err)
		}
		got := make([]float64, 1)
		used := 0 // draws of the trees before the current one
		for s := 1; s <= steps; s++ {
			start := treeStart(s, o)
			if s == start && s > 1 {
				used += 2*(s-1-treeStart(s-1, o)+1) - bits.OnesCount(uint(s-1-treeStart(s-1, o)+1))
			}
			if err := tr.Next(got); err != nil {
				t.Fatal(err)
			}
			est := honaker(rec.seen[used:], s-start+1, sigma)
			want := 0.0
			for _, b := range prefixBlocks(1, s-start+1) {
				want += est[b]
			}
			if math.Abs(got[0]-want) > 1e-12*max(1, math.Abs(want)) {
				t.Fatalf("%+v step %d: noise %v, want %v", o, s, got[0], want)
			}
		}
	}
}

// TestTreeCovariance checks the noise's law by sampling: over d = 200,000
// coordinates (independent, identically distributed), the sample
// covariance of the noises of steps s and t is sigma^2 times the number of
// nodes the two prefix sums share (its variance at s = t: the number of
// nodes covering s), within 5 standard errors, sqrt((V_s V_t + C_st^2)/d)
// for a Gaussian pair; and for the efficient tree the variance is sigma^2
// sum over prefix t's blocks of 2^h/(2^(h+1) - 1), below the vanilla one.
// A node used at the wrong step or a restart missed moves a covariance by
// sigma^2, about 100 standard errors.
func TestTreeCovariance(t *testing.T) {
	if testing.Short() {
		t.Skip("sampling")
	}
	const d, steps, sigma = 200_000, 12, 1.5
	for _, o := range []TreeOptions{{}, {Restart: 5}, {Efficient: true}, {Efficient: true, Restart: 7}} {
		tr, err := NewTree(d, sigma, rand.New(chacha(3)), o)
		if err != nil {
			t.Fatal(err)
		}
		noise := make([][]float64, steps)
		for s := range noise {
			noise[s] = make([]float64, d)
			if err := tr.Next(noise[s]); err != nil {
				t.Fatal(err)
			}
		}
		want := func(s, u int) float64 { // s <= u, 1-based
			if treeStart(s, o) != treeStart(u, o) {
				return 0
			}
			shared := 0.0
			for _, a := range prefixBlocks(treeStart(s, o), s) {
				for _, b := range prefixBlocks(treeStart(u, o), u) {
					if a == b {
						w := 1.0
						if o.Efficient {
							p := float64(a[1] - a[0] + 1)
							w = p / (2*p - 1)
						}
						shared += w
					}
				}
			}
			return sigma * sigma * shared
		}
		for s := 1; s <= steps; s++ {
			for u := s; u <= steps; u++ {
				if o.Efficient && u != s {
					continue // the estimates of a block and its ancestors are correlated; TestTreeHonaker checks them
				}
				c := 0.0
				for i := range d {
					c += noise[s-1][i] * noise[u-1][i]
				}
				c /= d
				w := want(s, u)
				se := math.Sqrt((want(s, s)*want(u, u) + w*w) / d)
				if math.Abs(c-w) > 5*se {
					t.Errorf("%+v: covariance of steps %d and %d is %.5f, want %.5f (standard error %.5f)", o, s, u, c, w, se)
				}
			}
		}
	}
}

// TestTreeMemory checks that a tree keeps at most floor(log2 t) + 1
// vectors, the binary digits of its step in its tree, and allocates no
// more.
func TestTreeMemory(t *testing.T) {
	for _, o := range []TreeOptions{{}, {Efficient: true}, {Restart: 100}} {
		tr, err := NewTree(4, 1, rand.New(chacha(4)), o)
		if err != nil {
			t.Fatal(err)
		}
		dst := make([]float64, 4)
		for s := 1; s <= 1000; s++ {
			if err := tr.Next(dst); err != nil {
				t.Fatal(err)
			}
			l := o.local(s)
			if len(tr.nodes) != bits.OnesCount(uint(l)) {
				t.Fatalf("%+v step %d: %d nodes, want %d", o, s, len(tr.nodes), bits.OnesCount(uint(l)))
			}
			if n := len(tr.nodes) + len(tr.spare); n > bits.Len(uint(s))+1 {
				t.Fatalf("%+v step %d: %d vectors held, more than floor(log2 %d) + 2", o, s, n, s)
			}
		}
	}
}

// TestTreeCheckpoint checks that a tree restored from its State, through
// JSON and through gob, with its source restored too, continues bit for
// bit as the tree that was not stopped.
func TestTreeCheckpoint(t *testing.T) {
	const d = 5
	for _, o := range []TreeOptions{{}, {Efficient: true}, {Restart: 4}, {Efficient: true, Restart: 3}} {
		src := chacha(5)
		tr, err := NewTree(d, 0.7, rand.New(src), o)
		if err != nil {
			t.Fatal(err)
		}
		dst := make([]float64, d)
		for range 23 {
			if err := tr.Next(dst); err != nil {
				t.Fatal(err)
			}
		}
		saved, err := src.MarshalBinary()
		if err != nil {
			t.Fatal(err)
		}
		js, err := json.Marshal(tr.State())
		if err != nil {
			t.Fatal(err)
		}
		var gb bytes.Buffer
		if err := gob.NewEncoder(&gb).Encode(tr.State()); err != nil {
			t.Fatal(err)
		}
		var want [][]float64
		for range 30 {
			if err := tr.Next(dst); err != nil {
				t.Fatal(err)
			}
			want = append(want, append([]float64(nil), dst...))
		}
		var fromJSON, fromGob TreeState
		if err := json.Unmarshal(js, &fromJSON); err != nil {
			t.Fatal(err)
		}
		if err := gob.NewDecoder(&gb).Decode(&fromGob); err != nil {
			t.Fatal(err)
		}
		for name, st := range map[string]TreeState{"json": fromJSON, "gob": fromGob} {
			src := new(rand.ChaCha8)
			if err := src.UnmarshalBinary(saved); err != nil {
				t.Fatal(err)
			}
			back, err := RestoreTree(st, rand.New(src))
			if err != nil {
				t.Fatalf("%+v %s: %v", o, name, err)
			}
			if back.Step() != 23 {
				t.Fatalf("%+v %s: restored at step %d, want 23", o, name, back.Step())
			}
			for k, w := range want {
				if err := back.Next(dst); err != nil {
					t.Fatal(err)
				}
				for i := range dst {
					if math.Float64bits(dst[i]) != math.Float64bits(w[i]) {
						t.Fatalf("%+v %s: step %d coordinate %d is %v after restoring, %v without", o, name, 24+k, i, dst[i], w[i])
					}
				}
			}
		}
	}
}

// TestTreeBadInput checks that bad settings, buffers and states are
// refused with an error naming what is wrong.
func TestTreeBadInput(t *testing.T) {
	src := rand.New(chacha(6))
	for _, c := range []struct {
		d     int
		sigma float64
		src   NormalSource
		o     TreeOptions
		want  string
	}{
		{0, 1, src, TreeOptions{}, "dimension 0"},
		{-3, 1, src, TreeOptions{}, "dimension -3"},
		{2, 0, src, TreeOptions{}, "sigma 0"},
		{2, -1, src, TreeOptions{}, "sigma -1"},
		{2, math.NaN(), src, TreeOptions{}, "sigma NaN"},
		{2, math.Inf(1), src, TreeOptions{}, "sigma +Inf"},
		{2, 1, nil, TreeOptions{}, "source"},
		{2, 1, src, TreeOptions{Restart: -2}, "restart -2"},
	} {
		if _, err := NewTree(c.d, c.sigma, c.src, c.o); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("NewTree(%d, %v, %+v): error %v, want one naming %q", c.d, c.sigma, c.o, err, c.want)
		}
	}
	tr, err := NewTree(3, 1, src, TreeOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if err := tr.Next(make([]float64, 2)); err == nil || !strings.Contains(err.Error(), "length 2") {
		t.Errorf("Next with a short buffer: %v", err)
	}
	if tr.Step() != 0 {
		t.Errorf("a refused Next took a step")
	}
	for range 6 {
		if err := tr.Next(make([]float64, 3)); err != nil {
			t.Fatal(err)
		}
	}
	good := tr.State()
	for _, c := range []struct {
		edit func(*TreeState)
		want string
	}{
		{func(s *TreeState) { s.Step = -1 }, "step -1"},
		{func(s *TreeState) { s.Step = 7 }, "want 3"},
		{func(s *TreeState) { s.Levels = []int{1, 2} }, "levels [1 2]"},
		{func(s *TreeState) { s.Nodes = s.Nodes[:1] }, "1 nodes"},
		{func(s *TreeState) { s.Nodes[1] = s.Nodes[1][:2] }, "length 2"},
		{func(s *TreeState) { s.Nodes[0][2] = math.Inf(-1) }, "coordinate 2 is -Inf"},
		{func(s *TreeState) { s.Dim = 0 }, "dimension 0"},
		{func(s *TreeState) { s.Sigma = 0 }, "sigma 0"},
		{func(s *TreeState) { s.Options.Restart = 4 }, "want 1"},
	} {
		s := tr.State()
		c.edit(&s)
		if _, err := RestoreTree(s, src); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("RestoreTree of a bad state: error %v, want one naming %q", err, c.want)
		}
	}
	if _, err := RestoreTree(good, src); err != nil {
		t.Errorf("RestoreTree of a good state: %v", err)
	}
}
