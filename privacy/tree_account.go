package privacy

import (
	"fmt"
	"math"
	"math/bits"
)

// What tree aggregation (tree.go) guarantees one client.
//
// Every node of the tree is released once, as the sum of the clipped
// updates of its block of steps plus N(0, sigma^2 I); the noisy prefix
// sums, and every model computed from them, are functions of the released
// nodes. Neighbouring runs differ in one client's whole contribution: its
// clipped updates (L2 norm at most C each) are present at its steps or
// absent (add/remove, the paper's user-level relation; replacing them by
// other updates doubles the sensitivity: pass half the noise multiplier).
// The nodes then differ by at most c_v C at node v, c_v the number of the
// client's steps in v's block, so the released nodes are the Gaussian
// mechanism with L2 sensitivity
//
//	Delta = C sqrt(sum over released nodes v of c_v^2),
//
// run adaptively (each update may depend on the models before it), which
// composes like the non-adaptive one (Kairouz et al. 2021, Appendix D;
// Denisov, McMahan, Rush, Smith and Thakurta 2022 for linear
// mechanisms on adaptive streams). With sigma = z C that is mu-GDP with
// mu = Delta/sigma (Dong, Roth and Su 2022), rho-zCDP with rho = mu^2/2
// (Bun and Steinke 2016), and (eps, delta)-DP exactly when
//
//	delta >= Phi(-eps/mu + mu/2) - e^eps Phi(-eps/mu - mu/2)
//
// (Balle and Wang 2018; GaussianDelta). This holds against anyone who sees
// the released sums or models (other clients, the public, whoever gets the
// model), for a server that clips, adds this noise honestly and keeps it
// secret; the server itself sees the sums before noise. No amplification
// by sampling or shuffling is claimed: the clients may come in any order.
// It assumes the participation is bounded: TreeClient counts the steps a
// client did take, which is its guarantee when it takes part does
// not depend on the noise (device availability, the time of day);
// otherwise it is an ex-post account, and TreeWorstCase, which bounds every
// pattern allowed by a limit on participations and their separation, is
// the guarantee (fully adaptive composition of Gaussian mechanisms, Smith
// and Thakurta 2022, since the worst case bounds sum c_v^2 whatever is
// chosen).
//
// Which nodes are released: the vanilla tree releases only the nodes that
// prefix sums use, the left children (a block [(i-1)2^h+1, i 2^h] with i
// odd); Efficient (Honaker) releases every complete block; with Restart,
// each tree's. tensorflow_privacy's accountant counts every node for both,
// which for the vanilla tree is an upper bound.

// A TreeGuarantee is what a tree's releases guarantee one client.
type TreeGuarantee struct {
	Sensitivity    float64 `json:"sensitivity"`    // L2, in units of the clip norm C
	Participations int     `json:"participations"` // the client's steps, or the worst pattern's
	Mu             float64 `json:"mu"`             // mu-GDP: Sensitivity / noise multiplier
	Rho            float64 `json:"rho"`            // rho-zCDP: mu^2/2
	Eps            float64 `json:"eps"`            // the least eps at Delta (relative 1e-12, never below)
	Delta          float64 `json:"delta"`
}

// TreeClient is the user-level guarantee, after total steps, of a client
// that took part at the given steps (1-based, increasing) in a tree run
// with options o and noise multiplier z (sigma = z C). A client that took
// part in no step has eps 0.
func TreeClient(steps []int, total int, z, delta float64, o TreeOptions) (TreeGuarantee, error) {
	sq, err := treeSquares(steps, total, o)
	if err != nil {
		return TreeGuarantee{}, err
	}
	return treeGuarantee(sq, len(steps), z, delta)
}

// TreeWorstCase is the guarantee after total steps for every client that
// takes part at most maxParticipation times with at least minSeparation
// steps strictly between any two of its steps (TreeMaxSensitivity).
func TreeWorstCase(total, maxParticipation, minSeparation int, z, delta float64, o TreeOptions) (TreeGuarantee, error) {
	if err := checkTreeNoise(z, delta); err != nil {
		return TreeGuarantee{}, err
	}
	sq, n, err := treeMaxSquares(total, maxParticipation, minSeparation, o)
	if err != nil {
		return TreeGuarantee{}, err
	}
	return treeGuarantee(sq, n, z, delta)
}

// TreeNoiseMultiplier is the smallest z (relative 1e-13) with which a
// tree run for total steps is (eps, delta)-DP for every client allowed by
// the participation limit (TreeWorstCase): the analytic Gaussian
// calibration of the worst-case sensitivity. Every eps > 0 is reachable at
// every delta in (0, 1) with a large enough z, so it refuses only settings
// out of range, and a target no float64 z reaches.
func TreeNoiseMultiplier(eps, delta float64, total, maxParticipation, minSeparation int, o TreeOptions) (float64, error) {
	if err := checkEpsilon(eps); err != nil {
		return 0, fmt.Errorf("privacy: tree target: %w", err)
	}
	if err := checkDelta(delta); err != nil {
		return 0, fmt.Errorf("privacy: tree target: %w", err)
	}
	sq, _, err := treeMaxSquares(total, maxParticipation, minSeparation, o)
	if err != nil {
		return 0, err
	}
	z, err := AnalyticGaussianSigma(eps, delta, math.Sqrt(float64(sq)))
	if err != nil {
		return 0, fmt.Errorf("privacy: tree target eps %v, delta %v with sensitivity %v: %w", eps, delta, math.Sqrt(float64(sq)), err)
	}
	return z, nil
}

func checkTreeNoise(z, delta float64) error {
	if !(z > 0) || math.IsInf(z, 0) {
		return fmt.Errorf("privacy: tree noise multiplier %v must be positive and finite", z)
	}
	if err := checkDelta(delta); err != nil {
		return fmt.Errorf("privacy: tree: %w", err)
	}
	return nil
}

func treeGuarantee(sq int64, n int, z, delta float64) (TreeGuarantee, error) {
	if err := checkTreeNoise(z, delta); err != nil {
		return TreeGuarantee{}, err
	}
	s := math.Sqrt(float64(sq))
	mu := s / z
	g := TreeGuarantee{Sensitivity: s, Participations: n, Mu: mu, Rho: mu * mu / 2, Delta: delta}
	if mu > 0 {
		g.Eps = gdpEpsilon(mu, delta)
	}
	if math.IsInf(g.Eps, 0) || math.IsNaN(g.Eps) {
		return TreeGuarantee{}, fmt.Errorf("privacy: tree: mu %v gives no finite eps at delta %v", mu, delta)
	}
	return g, nil
}

// gdpEpsilon is the least eps >= 0 (to a relative 1e-12, the upper end of
// a bisection, so never below the truth as computed) at which mu-GDP is
// (eps, delta)-DP: the Gaussian mechanism of sigma 1 and sensitivity mu.
func gdpEpsilon(mu, delta float64) float64 {
	target := math.Log(delta)
	over := func(eps float64) bool { return logGaussianDelta(eps, 1, mu) > target }
	if !over(0) {
		return 0
	}
	// Phi(-eps/mu + mu/2) <= exp(-(eps/mu - mu/2)^2/2) reaches delta here.
	hi := mu*mu/2 + mu*math.Sqrt(-2*target)
	for over(hi) && !math.IsInf(hi, 0) {
		hi *= 2
	}
	lo := 0.0
	for hi-lo > 1e-12*hi {
		if mid := lo + (hi-lo)/2; over(mid) {
			lo = mid
		} else {
			hi = mid
		}
	}
	return hi
}

// TreeSensitivity is the L2 sensitivity, in units of the clip norm C, of
// the nodes a tree with options o has released after total steps, for a
// client that took part at the given steps (1-based, strictly
// increasing): sqrt(sum over released nodes v of c_v^2).
func TreeSensitivity(steps []int, total int, o TreeOptions) (float64, error) {
	sq, err := treeSquares(steps, total, o)
	return math.Sqrt(float64(sq)), err
}

func checkTreeTotal(total int, o TreeOptions) error {
	if total < 1 {
		return fmt.Errorf("privacy: tree total steps %d must be at least 1", total)
	}
	return o.check()
}

// treeSquares is TreeSensitivity squared: per tree, per level h, the
// client's steps grouped by their block at that level.
func treeSquares(steps []int, total int, o TreeOptions) (int64, error) {
	if err := checkTreeTotal(total, o); err != nil {
		return 0, err
	}
	for i, s := range steps {
		if s < 1 || s > total {
			return 0, fmt.Errorf("privacy: tree step %d (position %d) is out of range 1..%d (total steps)", s, i, total)
		}
		if i > 0 && s <= steps[i-1] {
			return 0, fmt.Errorf("privacy: tree step %d (position %d) is not after step %d: steps must increase", s, i, steps[i-1])
		}
	}
	per := o.Restart
	if per == 0 {
		per = total
	}
	var sum int64
	for i := 0; i < len(steps); {
		start := (steps[i] - 1) / per * per // the tree's steps are start+1 ..
		size := min(per, total-start)
		j := i
		for j < len(steps) && steps[j] <= start+size {
			j++
		}
		for h := 0; 1<<h <= size; h++ {
			for a := i; a < j; {
				block := (steps[a] - start - 1) >> h // 0-based index of the block
				b := a
				for b < j && (steps[b]-start-1)>>h == block {
					b++
				}
				if (block+1)<<h <= size && (o.Efficient || block%2 == 0) {
					sum += int64(b-a) * int64(b-a)
				}
				a = b
			}
		}
		i = j
	}
	return sum, nil
}

// TreeMaxSensitivity is the largest TreeSensitivity, after total steps,
// over every pattern of at most maxParticipation steps with at least
// minSeparation steps strictly between any two (steps s < s' with
// s' - s - 1 >= minSeparation; 0 allows consecutive steps): the paper's
// max_participation and min_separation (Appendix D.2). A limit larger than
// total steps can hold at that separation is no error: at most k then
// means as many as fit.
//
// It is exact, not a bound: a dynamic program over the blocks of the tree
// (tensorflow_privacy's _tree_sensitivity_square_sum does the same for
// every node; this one also counts only the vanilla tree's left children
// and handles restarts), checked against brute force. Its tables have
// k (b+1)^2 entries for k participations and separation b (those above
// 2^24 are refused), and it takes tens of milliseconds for T = 1000, k =
// 10, b = 99, and one to three seconds for T = 10,000, k = 10, b = 999.
func TreeMaxSensitivity(total, maxParticipation, minSeparation int, o TreeOptions) (float64, error) {
	sq, _, err := treeMaxSquares(total, maxParticipation, minSeparation, o)
	return math.Sqrt(float64(sq)), err
}

// treeMaxTable is the most entries one table of the dynamic program may
// have (128 MiB).
const treeMaxTable = 1 << 24

// treeMaxSquares is TreeMaxSensitivity squared and the number of steps of
// a pattern that attains it.
func treeMaxSquares(total, k, minSeparation int, o TreeOptions) (int64, int, error) {
	if err := checkTreeTotal(total, o); err != nil {
		return 0, 0, err
	}
	if k < 1 {
		return 0, 0, fmt.Errorf("privacy: tree max participation %d must be at least 1", k)
	}
	if minSeparation < 0 {
		return 0, 0, fmt.Errorf("privacy: tree min separation %d must be at least 0", minSeparation)
	}
	b := min(minSeparation, total) // more leaves room for one step only, as total does
	p := sepDP{k: min(k, 1+(total-1)/(b+1)), b: b}
	if g := int64(min(p.b, total-1) + 1); g*g*int64(p.k) > treeMaxTable {
		return 0, 0, fmt.Errorf("privacy: tree worst case for min separation %d and max participation %d over %d steps needs a table of %d entries, above %d",
			minSeparation, k, total, g*g*int64(p.k), treeMaxTable)
	}
	per := o.Restart
	if per == 0 || per > total {
		per = total
	}
	var all *sepBlock
	full := p.forest(per, o.Efficient)
	for q := total / per; q > 0; q >>= 1 { // all trees of per steps: full^q
		if q&1 == 1 {
			all = p.concat(all, full)
		}
		if q > 1 {
			full = p.concat(full, full)
		}
	}
	if r := total % per; r > 0 {
		all = p.concat(all, p.forest(r, o.Efficient))
	}
	best, arg := int64(0), 0
	for n := 1; n <= all.nmax; n++ {
		if v := all.at(n, 0, 0); v > best {
			best, arg = v, n
		}
	}
	return best, arg, nil
}

// sepDP is the dynamic program of TreeMaxSensitivity for at most k
// participations with at least b steps between two.
type sepDP struct{ k, b int }

// A sepBlock is the program's table for a block of consecutive steps: at
// (n, a, e) the largest sum of c_v^2 over the released nodes inside the
// block, over the patterns of n steps in it with at least a of its steps
// before the first and e after the last, or -1 where none fits. a and e
// run below g = min(b, size-1) + 1: larger ones leave no room, and no
// constraint asks for more than b.
type sepBlock struct {
	size, nmax, g int
	best          []int64   // at ((n-1) g + a) g + e, n in 1..nmax
	brk           [][]int32 // breaks, at (n-1) g + a
}

func (s *sepBlock) at(n, a, e int) int64 {
	if n == 0 {
		return 0
	}
	if n > s.nmax || a >= s.g || e >= s.g {
		return -1
	}
	return s.best[((n-1)*s.g+a)*s.g+e]
}

// block is an empty table for size steps.
func (p sepDP) block(size int) *sepBlock {
	s := &sepBlock{size: size, nmax: min(p.k, 1+(size-1)/(p.b+1)), g: min(p.b, size-1) + 1}
	s.best = make([]int64, s.nmax*s.g*s.g)
	for i := range s.best {
		s.best[i] = -1
	}
	return s
}

// root is s with a released node over the whole block: n^2 more.
func (p sepDP) root(s *sepBlock) *sepBlock {
	r := sepBlock{size: s.size, nmax: s.nmax, g: s.g, best: append([]int64(nil), s.best...)}
	for n := 1; n <= r.nmax; n++ {
		row := r.best[(n-1)*r.g*r.g : n*r.g*r.g]
		for i, v := range row {
			if v >= 0 {
				row[i] = v + int64(n*n)
			}
		}
	}
	return &r
}

// concat is the table of L's steps followed by R's, with no node over
// both. A pattern with steps on both sides has some x in 0..b with at
// least x steps of L after its last there and b-x of R before its first.
// As x grows L's value can only fall and R's only rise, so of each run of
// x over which L's value stays the same only the last can be best: those
// are L's breaks, a few per row where b is hundreds.
func (p sepDP) concat(L, R *sepBlock) *sepBlock {
	if L == nil {
		return R
	}
	out := p.block(L.size + R.size)
	xlo := max(0, p.b-R.g+1) // below it R has no room for b-x steps before its first
	for n := 1; n <= out.nmax; n++ {
		for a := 0; a < out.g; a++ {
			row := out.best[((n-1)*out.g+a)*out.g:][:out.g]
			for e := range row {
				row[e] = max(R.at(n, max(0, a-L.size), e), L.at(n, a, max(0, e-R.size)))
			}
			if a >= L.g {
				continue // L has no room for a step
			}
			for n1 := max(1, n-R.nmax); n1 <= min(n-1, L.nmax); n1++ {
				lrow := L.best[((n1-1)*L.g+a)*L.g:][:L.g]
				rtab := R.best[(n-n1-1)*R.g*R.g:][:R.g*R.g]
				for _, x := range L.breaks(n1, a) {
					if int(x) < xlo {
						continue
					}
					lv, rrow := lrow[x], rtab[(p.b-int(x))*R.g:][:R.g]
					for e := range min(out.g, R.g) {
						if rv := rrow[e]; rv >= 0 && lv+rv > row[e] {
							row[e] = lv + rv
						}
					}
				}
			}
		}
	}
	return out
}

// breaks is the x at which L's value for n steps and a before the first
// is about to fall (or become infeasible), increasing; computed once.
func (s *sepBlock) breaks(n, a int) []int32 {
	if s.brk == nil {
		s.brk = make([][]int32, s.nmax*s.g)
	}
	i := (n-1)*s.g + a
	if s.brk[i] == nil {
		row := s.best[i*s.g:][:s.g]
		b := []int32{}
		for x, v := range row {
			if v >= 0 && (x+1 == len(row) || row[x+1] < v) {
				b = append(b, int32(x))
			}
		}
		s.brk[i] = b
	}
	return s.brk[i]
}

// forest is the table of one tree over size steps: its complete blocks of
// the binary digits of size, largest first, each with its root released
// (a forest root is a left child). Only the tables it still needs are
// kept: the complete blocks of size's digits and the current level's.
func (p sepDP) forest(size int, efficient bool) *sepBlock {
	leaf := p.block(1)
	leaf.best[0] = 0
	// sub is a complete block of 2^h steps with its root released, hid
	// (vanilla) the same without: a right child.
	sub, hid := p.root(leaf), leaf
	parts := make([]*sepBlock, bits.Len(uint(size)))
	for h := range parts {
		if size>>h&1 == 1 {
			parts[h] = sub
		}
		if h+1 < len(parts) {
			right := hid
			if efficient {
				right = sub
			}
			c := p.concat(sub, right)
			sub, hid = p.root(c), c
		}
	}
	var f *sepBlock
	for h := len(parts) - 1; h >= 0; h-- {
		if parts[h] != nil {
			f = p.concat(f, parts[h])
		}
	}
	return f
}
