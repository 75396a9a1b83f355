package secagg

import (
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	"maps"
	"math"
	"runtime"
	"slices"
	"sync"
	"weak"

	"github.com/fedpq/fedpq/corr"
)

// graph is a round's neighbour graph: the clients in a public random cyclic
// order, each joined to the half clients on either side (all others when
// complete).
type graph struct {
	order    []uint64       // ids in cyclic order
	pos      map[uint64]int // position of each id in order
	half     int            // neighbours on each side
	complete bool
}

// graphs holds the graphs built in this process, weakly, so that the
// clients of one round in one process share one: a graph of 10,000 clients
// is about 0.4 MB, and a fleet of 1,000 of them held 1,000 copies. A graph
// is never changed once built, and is dropped when no client holds it.
var graphs = struct {
	sync.Mutex
	m map[[32]byte]weak.Pointer[graph]
}{m: map[[32]byte]weak.Pointer[graph]{}}

// newGraph returns the graph of round p.Round among ids, from the cache
// when a client of this process has it.
func newGraph(p Params, ids []uint64) (*graph, error) {
	degree, _, err := p.shape(len(ids))
	if err != nil {
		return nil, err
	}
	order := slices.Clone(ids)
	slices.Sort(order)
	for i := 1; i < len(order); i++ {
		if order[i] == order[i-1] {
			return nil, fmt.Errorf("secagg: client id %d listed twice", order[i])
		}
	}
	key := graphKey(p, order, degree)
	graphs.Lock()
	defer graphs.Unlock()
	if g := graphs.m[key].Value(); g != nil {
		return g, nil
	}
	g := buildGraph(p, order, degree)
	graphs.m[key] = weak.Make(g)
	runtime.AddCleanup(g, func(key [32]byte) {
		graphs.Lock()
		defer graphs.Unlock()
		if graphs.m[key].Value() == nil {
			delete(graphs.m, key)
		}
	}, key)
	return g, nil
}

// graphKey is a digest of everything the graph of the sorted ids order
// depends on.
func graphKey(p Params, order []uint64, degree int) [32]byte {
	b := binary.LittleEndian.AppendUint64(p.Seed[:], p.Round)
	b = binary.LittleEndian.AppendUint64(b, uint64(degree))
	for _, id := range order {
		b = binary.LittleEndian.AppendUint64(b, id)
	}
	return sha256.Sum256(b)
}

// buildGraph draws the graph of the sorted ids order.
func buildGraph(p Params, order []uint64, degree int) *graph {
	g := &graph{order: order, half: degree / 2, complete: degree == len(order)-1}
	if !g.complete {
		// The permutation applies to the sorted ids, so the graph does not
		// depend on the order the caller listed them in.
		perm := make([]int, len(order))
		corr.Shuffle(corr.NewStream(kdf(nil, p.Seed, "graph", p.Round)), perm)
		sorted := slices.Clone(order)
		for i, j := range perm {
			g.order[i] = sorted[j]
		}
	}
	g.pos = make(map[uint64]int, len(order))
	for i, id := range g.order {
		g.pos[id] = i
	}
	return g
}

// neighbours returns the sorted neighbours of i, which must be in the graph.
func (g *graph) neighbours(i uint64) []uint64 {
	n := len(g.order)
	if g.complete {
		out := make([]uint64, 0, n-1)
		for _, j := range g.order {
			if j != i {
				out = append(out, j)
			}
		}
		return out
	}
	p := g.pos[i]
	out := make([]uint64, 0, 2*g.half)
	for d := 1; d <= g.half; d++ {
		out = append(out, g.order[(p+d)%n], g.order[(p-d+n)%n])
	}
	slices.Sort(out)
	return out
}

// degree is the number of neighbours of each client.
func (g *graph) degree() int {
	if g.complete {
		return len(g.order) - 1
	}
	return 2 * g.half
}

func (g *graph) adjacent(i, j uint64) bool {
	if i == j {
		return false
	}
	if g.complete {
		return true
	}
	d := g.pos[i] - g.pos[j]
	if d < 0 {
		d = -d
	}
	return min(d, len(g.order)-d) <= g.half
}

// holders returns the share holders of dealer j's secrets, sorted: its
// neighbours and itself. A holder's point, at which its shares evaluate the
// sharing polynomials, is its index here plus one: public, never zero, and
// at most degree+1, which keeps share checks cheap (see check).
func (g *graph) holders(j uint64) []uint64 {
	return slices.Sorted(slices.Values(append(g.neighbours(j), j)))
}

// points returns each of j's holders' points.
func (g *graph) points(j uint64) map[uint64]uint64 {
	hs := g.holders(j)
	x := make(map[uint64]uint64, len(hs))
	for k, h := range hs {
		x[h] = uint64(k + 1)
	}
	return x
}

// consents counts the share holders of x (its neighbours and itself) in
// agreed.
func (g *graph) consents(x uint64, agreed map[uint64]bool) int {
	n := 0
	if g.complete {
		for j, yes := range agreed {
			if _, ok := g.pos[j]; ok && yes {
				n++
			}
		}
		return n
	}
	p, size := g.pos[x], len(g.order)
	for d := -g.half; d <= g.half; d++ {
		if agreed[g.order[((p+d)%size+size)%size]] {
			n++
		}
	}
	return n
}

// certifier returns whether a request is certified for a client: at least t
// of its share holders are in agreed. It remembers its answers.
func (g *graph) certifier(agreed map[uint64]bool, t int) func(uint64) bool {
	if g.complete { // every client's holders are all the clients
		all := g.consents(0, agreed) >= t
		return func(uint64) bool { return all }
	}
	known := map[uint64]bool{}
	return func(x uint64) bool {
		ok, seen := known[x]
		if !seen {
			ok = g.consents(x, agreed) >= t
			known[x] = ok
		}
		return ok
	}
}

// witnesses returns, sorted, the clients whose consents id needs in order
// to unmask (see Client.Unmask): every client within twice the graph's
// half-degree on the ring, the holders of its neighbours' secrets; within
// three times it when a neighbour dropped, whose neighbours' holders count
// too. In a complete graph, every client.
func (g *graph) witnesses(id uint64, dropped []uint64) []uint64 {
	radius := 2 * g.half
	for _, j := range dropped {
		if g.adjacent(id, j) {
			radius = 3 * g.half
			break
		}
	}
	n := len(g.order)
	if g.complete || 2*radius+1 >= n {
		return slices.Clone(g.sorted())
	}
	p := g.pos[id]
	out := make([]uint64, 0, 2*radius+1)
	for d := -radius; d <= radius; d++ {
		out = append(out, g.order[((p+d)%n+n)%n])
	}
	slices.Sort(out)
	return out
}

// sorted returns the round's clients, sorted.
func (g *graph) sorted() []uint64 {
	return slices.Sorted(maps.Keys(g.pos))
}

// connected reports whether the clients members lists, with the edges of
// the graph among them, form one connected graph. It walks positions on
// the ring, O(n·degree) without allocating per edge.
func (g *graph) connected(members []uint64) bool {
	if len(members) == 0 || g.complete {
		return true
	}
	n := len(g.order)
	in := make([]bool, n)
	for _, id := range members {
		in[g.pos[id]] = true
	}
	start := g.pos[members[0]]
	seen := make([]bool, n)
	seen[start] = true
	queue := []int{start}
	reached := 1
	for len(queue) > 0 {
		p := queue[len(queue)-1]
		queue = queue[:len(queue)-1]
		for d := -g.half; d <= g.half; d++ {
			q := ((p+d)%n + n) % n
			if in[q] && !seen[q] {
				seen[q] = true
				reached++
				queue = append(queue, q)
			}
		}
	}
	return reached == len(members)
}

// Neighbours returns client i's neighbours among ids, sorted. The graph is
// complete when p.Degree is 0 or at least len(ids)−1; otherwise it is the
// random Harary graph of Bell et al. (2020): the clients
// are put in a uniformly random cyclic order drawn from p.Seed and p.Round,
// and each is joined to the p.Degree/2 clients on either side. Every client
// has exactly p.Degree neighbours, and the server and every client compute
// the same graph from the public seed.
func Neighbours(p Params, ids []uint64, i uint64) ([]uint64, error) {
	g, err := newGraph(p, ids)
	if err != nil {
		return nil, err
	}
	if _, ok := g.pos[i]; !ok {
		return nil, fmt.Errorf("secagg: client %d is not among the %d clients", i, len(ids))
	}
	return g.neighbours(i), nil
}

// Security and correctness levels of [SparseGraph]: a bad event of either
// kind has probability below 2^-40 (security) or 2^-20 (failure to finish).
const (
	securityBits    = 40
	correctnessBits = 20
)

// SparseGraph returns the smallest even degree, and the threshold to go with
// it, for which a random Harary graph on n clients is secure and correct
// when up to a fraction corrupt of the clients collude with a server that
// may deviate from the protocol and up to a fraction dropout drop out (the
// conditions of Bell et al. 2020, computed as the parameter search of
// Google's SecAgg+ implementation, fcp/secagg/server/graph_parameter_finder.cc,
// with its threshold raised to [MinThreshold]'s):
//
//   - connected: a union bound over the n(n−k−1)/2 pairs of gaps of k/2
//     consecutive clients that would cut the ring, each gap bad with
//     probability (B)_k/(n)_k for B corrupt-or-dropped clients, is below
//     2^-41;
//   - secure: t = MinThreshold(n, k, corrupt), which exceeds the corrupt
//     neighbours of a client except with probability 2^-41/n, and half of
//     its holders plus them;
//   - correct: P[S < t] <= 2^-20/n, S the number of surviving neighbours
//     (k draws from the n−1 others, of which n−1−floor(dropout·n) survive).
//
// The threshold counts neighbours only, so a client's own share is a spare.
// When no degree below n−1 qualifies, the complete graph is tried with the
// same conditions. corrupt + dropout must be at most 0.9, as in the source.
func SparseGraph(n int, corrupt, dropout float64) (degree, threshold int, err error) {
	switch {
	case n < 2:
		return 0, 0, fmt.Errorf("secagg: a graph needs at least 2 clients, not %d", n)
	case corrupt < 0 || dropout < 0 || corrupt+dropout > 0.9 || math.IsNaN(corrupt+dropout) || corrupt >= 1.0/3:
		return 0, 0, fmt.Errorf("secagg: corrupt %v and dropout %v must be non-negative with sum at most 0.9, corrupt below 1/3", corrupt, dropout)
	}
	nc, nd := corruptCount(n, corrupt), corruptCount(n, dropout)
	epsCor := math.Exp(-correctnessBits*math.Ln2) / float64(n)
	for k := 2; ; k += 2 {
		if k >= n-1 {
			k = n - 1
		}
		if k < n-1 && disconnectLog(n, k, nc+nd) >= -(securityBits+1)*math.Ln2 {
			continue
		}
		t := MinThreshold(n, k, corrupt)
		head := 0.0
		for _, p := range hyperPMF(n-1, n-1-nd, k)[:min(t, k+1)] {
			head += p
		}
		if t <= k && head <= epsCor {
			return k, t, nil
		}
		if k == n-1 {
			return 0, 0, fmt.Errorf("secagg: no degree for %d clients meets both conditions with corrupt %v and dropout %v", n, corrupt, dropout)
		}
	}
}

// disconnectLog is the log of a union bound on the probability that
// removing b given clients disconnects a random Harary graph of degree k on
// n clients: it takes two runs of k/2 consecutive removed clients, n(n−k−1)/2
// pairs of places, each all removed with probability (b)_k/(n)_k. It is −Inf
// when b < k, and for the complete graph.
func disconnectLog(n, k, b int) float64 {
	if k >= n-1 || b < k {
		return math.Inf(-1)
	}
	gaps := math.Log(float64(n)) + math.Log(float64(n-k-1)) - math.Ln2
	return gaps + lfact(b) - lfact(b-k) + lfact(n-k) - lfact(n)
}

func lfact(x int) float64 {
	v, _ := math.Lgamma(float64(x) + 1)
	return v
}

// hyperPMF returns P[X = x] for x = 0..k, X the number of marked items in
// k draws without replacement from N items of which K are marked.
func hyperPMF(N, K, k int) []float64 {
	p := make([]float64, k+1)
	for x := range p {
		if x <= K && k-x <= N-K {
			p[x] = math.Exp(lfact(K) - lfact(x) - lfact(K-x) + lfact(N-K) - lfact(k-x) - lfact(N-K-k+x) -
				(lfact(N) - lfact(k) - lfact(N-k)))
		}
	}
	return p
}

var errPhase = errors.New("secagg: step out of order")
