package privacy

import (
	"fmt"
	"math"
	"math/bits"
)

// This file holds DP-FTRL's noise: tree aggregation of the prefix sums of
// the clipped model updates (Kairouz, McMahan, Song, Thakkar, Thakurta and
// Xu, "Practical and private (deep) learning without sampling or
// shuffling", ICML 2021, Algorithm 1; the binary mechanism of Dwork, Naor,
// Pitassi and Rothblum 2010 and Chan, Shi and Song 2011). tree_account.go
// holds what it guarantees. Banded matrix factorization (Choquette-Choo et
// al. 2023) adds less noise for the same guarantee but needs its strategy
// matrix optimized per run; it is not here.

// NormalSource is a stream of independent standard normal variates, such
// as corr's streams or math/rand/v2's generators. The tree's privacy rests
// on it: give it a cryptographically strong stream whose seed serves
// nothing else.
type NormalSource interface {
	NormFloat64() float64
}

// TreeOptions are a tree's settings. The noise (NewTree) and its
// accounting (TreeClient, TreeWorstCase, TreeNoiseMultiplier) take the same
// value, so that the guarantee is computed for the tree that ran.
type TreeOptions struct {
	// Restart starts a new tree every Restart steps (the paper's
	// DP-FTRL-TreeRestart, Appendix D, with a restart at each epoch);
	// then Tree.Next's noise is that of the sum since the last restart.
	// 0 is one tree for the whole run.
	Restart int `json:"restart,omitempty"`
	// Efficient estimates each prefix sum from every node of the tree,
	// not only the O(log t) that cover it: Honaker's estimator ("Efficient
	// use of differentially private binary trees", 2015), as in
	// tensorflow_privacy's EfficientTreeAggregator. A block of 2^h steps
	// then has noise variance sigma^2 2^h/(2^(h+1)-1) instead of sigma^2
	// (2/3 of it at h = 1, half for large h), for up to twice the normal
	// draws; but every node of the tree is released, so the accounting
	// counts the right children too, and with several participations the
	// sensitivity is larger than the vanilla tree's.
	Efficient bool `json:"efficient,omitempty"`
}

func (o TreeOptions) check() error {
	if o.Restart < 0 {
		return fmt.Errorf("privacy: tree restart %d must be 0 (never) or a number of steps >= 1", o.Restart)
	}
	return nil
}

// local is step t's position in its tree, 1-based (t >= 1).
func (o TreeOptions) local(t int) int {
	if o.Restart == 0 {
		return t
	}
	return (t-1)%o.Restart + 1
}

// A Tree is the online noise of tree aggregation for the prefix sums of
// vectors of dimension d. Each node of the binary tree over the steps (a
// dyadic block of steps) holds an independent N(0, sigma^2 I_d); the t-th
// prefix sum x_1 + ... + x_t is the sum of the blocks that the binary
// digits of t give (for t = 6: steps 1-4 and 5-6), and its noise is the
// sum of those blocks' nodes. Only the nodes of the current decomposition
// are kept: at most floor(log2 t) + 1 vectors, O(d log T) memory, and one
// new node (d normal draws; up to two on average with Efficient) per
// step.
//
// A server releases x_1 + ... + x_t + Next's noise at step t (or, to apply
// one update per round as tensorflow_privacy's TreeResidualSumQuery does,
// x_t plus the difference of Next's noises at t and t-1, taking the noise
// before a restart as 0). What that guarantees, for which neighbouring
// relation, is tree_account.go's: TreeClient and TreeWorstCase.
//
// Checkpoints: State is the tree's whole state apart from its source, and
// RestoreTree continues from it with a source that continues where the
// saved one stopped. A source that cannot be saved (corr's AES-CTR
// streams) can instead be derived afresh before each Next from the run's
// secret and the step (Step()+1): each step's draws are made within its
// Next, so the tree's State is then the whole checkpoint. A Tree is not
// safe for concurrent use.
type Tree struct {
	d      int
	sigma  float64
	opt    TreeOptions
	src    NormalSource
	step   int         // steps taken
	levels []int       // the levels of the nodes covering the current tree's prefix, highest first
	nodes  [][]float64 // their noise (Efficient: Honaker's unnormalised estimates)
	spare  [][]float64 // buffers of nodes dropped, for reuse
}

// NewTree is the noise of a tree for vectors of dimension d with N(0,
// sigma^2) per coordinate and node; for DP-FTRL with clip norm C and noise
// multiplier z, sigma = z C.
func NewTree(d int, sigma float64, src NormalSource, o TreeOptions) (*Tree, error) {
	if d < 1 {
		return nil, fmt.Errorf("privacy: tree dimension %d must be at least 1", d)
	}
	if !(sigma > 0) || math.IsInf(sigma, 0) {
		return nil, fmt.Errorf("privacy: tree sigma %v must be positive and finite", sigma)
	}
	if src == nil {
		return nil, fmt.Errorf("privacy: tree needs a normal source")
	}
	if err := o.check(); err != nil {
		return nil, err
	}
	return &Tree{d: d, sigma: sigma, opt: o, src: src}, nil
}

// Step is the number of steps taken: Next's last noise was for prefix
// sum Step().
func (t *Tree) Step() int { return t.step }

// Next takes the next step, t = Step()+1, and writes into dst (length d)
// the noise to add to the t-th prefix sum (since the last restart).
func (t *Tree) Next(dst []float64) error {
	if len(dst) != t.d {
		return fmt.Errorf("privacy: tree noise buffer has length %d, want the dimension %d", len(dst), t.d)
	}
	l := t.opt.local(t.step + 1)
	if l == 1 {
		t.drop(len(t.nodes))
	}
	// The nodes of levels 0..j-1, the top j of the stack, are the left
	// children that the new node at level j = trailing zeros of l covers.
	j := bits.TrailingZeros(uint(l))
	u := t.buffer()
	for i := range u {
		u[i] = t.sigma * t.src.NormFloat64()
	}
	for h := 0; h < j; h++ {
		// The vanilla tree never uses a right child: its new node is the
		// fresh draw above, and the children are dropped.
		top := len(t.nodes) - 1
		if t.opt.Efficient {
			// Honaker: the parent's estimate is its own noise plus the mean
			// of its children's (tensorflow_privacy's order of draws).
			left := t.nodes[top]
			for i := range u {
				u[i] = t.sigma*t.src.NormFloat64() + 0.5*(left[i]+u[i])
			}
		}
		t.drop(1)
	}
	t.levels = append(t.levels, j)
	t.nodes = append(t.nodes, u)
	t.step++
	t.sum(dst)
	return nil
}

// sum writes the noise of the current prefix: the nodes on the stack,
// highest first, each scaled by its weight.
func (t *Tree) sum(dst []float64) {
	for k, node := range t.nodes {
		w := t.weight(t.levels[k])
		switch {
		case k == 0 && w == 1:
			copy(dst, node)
		case k == 0:
			for i, v := range node {
				dst[i] = w * v
			}
		case w == 1:
			for i, v := range node {
				dst[i] += v
			}
		default:
			for i, v := range node {
				dst[i] += w * v
			}
		}
	}
}

// weight is 1 for the vanilla tree, and for Honaker's estimate at level h
// 1/(2 - 2^-h): its stored value is sigma z + (left + right)/2 recursively,
// which carries the node's sum 2 - 2^-h times.
func (t *Tree) weight(h int) float64 {
	if !t.opt.Efficient || h == 0 {
		return 1
	}
	p := math.Ldexp(1, h)
	return p / (2*p - 1)
}

// buffer is a d-vector for a new node, reusing one dropped.
func (t *Tree) buffer() []float64 {
	if n := len(t.spare); n > 0 {
		b := t.spare[n-1]
		t.spare = t.spare[:n-1]
		return b
	}
	return make([]float64, t.d)
}

// drop removes the top n nodes of the stack, keeping their buffers.
func (t *Tree) drop(n int) {
	k := len(t.nodes) - n
	t.spare = append(t.spare, t.nodes[k:]...)
	clear(t.nodes[k:])
	t.nodes, t.levels = t.nodes[:k], t.levels[:k]
}

// TreeState is a Tree's checkpoint: its settings, the steps taken and the
// noise of the nodes it keeps, exactly (encoding/json and encoding/gob
// both round-trip float64 exactly). Its source's position is not in it;
// see Tree.
type TreeState struct {
	Dim     int         `json:"dim"`
	Sigma   float64     `json:"sigma"`
	Options TreeOptions `json:"options"`
	Step    int         `json:"step"`
	Levels  []int       `json:"levels"` // highest first: the binary digits of the step within its tree
	Nodes   [][]float64 `json:"nodes"`  // one vector of Dim per level
}

// State is a copy of the tree's state.
func (t *Tree) State() TreeState {
	s := TreeState{Dim: t.d, Sigma: t.sigma, Options: t.opt, Step: t.step,
		Levels: append([]int(nil), t.levels...), Nodes: make([][]float64, len(t.nodes))}
	for k, n := range t.nodes {
		s.Nodes[k] = append([]float64(nil), n...)
	}
	return s
}

// RestoreTree is the tree of state s, drawing its next nodes from src. It
// checks that s is a state some tree could be in: the levels are the
// binary digits of the step within its tree and every node a finite
// vector of the dimension.
func RestoreTree(s TreeState, src NormalSource) (*Tree, error) {
	t, err := NewTree(s.Dim, s.Sigma, src, s.Options)
	if err != nil {
		return nil, err
	}
	if s.Step < 0 {
		return nil, fmt.Errorf("privacy: tree state step %d is negative", s.Step)
	}
	var want []int
	if s.Step > 0 {
		l := uint(s.Options.local(s.Step))
		for h := bits.Len(l) - 1; h >= 0; h-- {
			if l>>h&1 == 1 {
				want = append(want, h)
			}
		}
	}
	if len(s.Levels) != len(want) || len(s.Nodes) != len(want) {
		return nil, fmt.Errorf("privacy: tree state at step %d has %d levels and %d nodes, want %d (levels %v)",
			s.Step, len(s.Levels), len(s.Nodes), len(want), want)
	}
	for k, h := range want {
		if s.Levels[k] != h {
			return nil, fmt.Errorf("privacy: tree state at step %d has levels %v, want %v", s.Step, s.Levels, want)
		}
		if len(s.Nodes[k]) != s.Dim {
			return nil, fmt.Errorf("privacy: tree state node %d has length %d, want the dimension %d", k, len(s.Nodes[k]), s.Dim)
		}
		for i, v := range s.Nodes[k] {
			if math.IsNaN(v) || math.IsInf(v, 0) {
				return nil, fmt.Errorf("privacy: tree state node %d coordinate %d is %v", k, i, v)
			}
		}
	}
	t.step = s.Step
	t.levels = append([]int(nil), want...)
	t.nodes = make([][]float64, len(want))
	for k, n := range s.Nodes {
		t.nodes[k] = append([]float64(nil), n...)
	}
	return t, nil
}
