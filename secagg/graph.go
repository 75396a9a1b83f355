package secagg

import (
	"errors"
	"fmt"
	"math"
	"slices"

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
	g := &graph{order: order, half: degree / 2, complete: degree == len(ids)-1}
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
	return g, nil
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
// when up to a fraction corrupt of the clients collude with the server and
// up to a fraction dropout drop out (the conditions of Bell et al. 2020, as
// computed by the parameter search of Google's SecAgg+ implementation,
// fcp/secagg/server/graph_parameter_finder.cc):
//
//   - connected: a union bound over the n(n−k−1)/2 pairs of gaps of k/2
//     consecutive clients that would cut the ring, each gap bad with
//     probability (B)_k/(n)_k for B corrupt-or-dropped clients, is below
//     2^-41;
//   - secure: t is the least value with P[A >= t] <= 2^-41/n, A the number of
//     corrupt neighbours of a client (hypergeometric: k draws from the n−1
//     others, of which floor(corrupt·n) are corrupt);
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
	case corrupt < 0 || dropout < 0 || corrupt+dropout > 0.9 || math.IsNaN(corrupt+dropout):
		return 0, 0, fmt.Errorf("secagg: corrupt %v and dropout %v must be non-negative with sum at most 0.9", corrupt, dropout)
	}
	const tiny = 1e-14 // keeps rounding from going the insecure way
	nc := int(math.Floor((corrupt + tiny) * float64(n)))
	nd := int(math.Floor((dropout + tiny) * float64(n)))
	logSec := -(securityBits + 1) * math.Ln2
	epsSec := math.Exp(logSec) / float64(n)
	epsCor := math.Exp(-correctnessBits*math.Ln2) / float64(n)
	for k := 2; ; k += 2 {
		if k >= n-1 {
			k = n - 1
		}
		if k < n-1 && k <= nc+nd {
			gaps := math.Log(float64(n)) + math.Log(float64(n-k-1)) - math.Ln2
			bad := lfact(nc+nd) - lfact(nc+nd-k) + lfact(n-k) - lfact(n)
			if gaps+bad >= logSec {
				continue
			}
		}
		// t: the least value with P[A >= t] <= epsSec.
		a := hyperPMF(n-1, nc, k)
		t, tail := k+1, 0.0
		for ; t > 0 && tail+a[t-1] <= epsSec; t-- {
			tail += a[t-1]
		}
		head := 0.0
		for _, p := range hyperPMF(n-1, n-1-nd, k)[:min(t, k+1)] {
			head += p
		}
		if t <= k && head <= epsCor {
			return k, max(t, 2), nil
		}
		if k == n-1 {
			return 0, 0, fmt.Errorf("secagg: no degree for %d clients meets both conditions with corrupt %v and dropout %v", n, corrupt, dropout)
		}
	}
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
