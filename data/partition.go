package data

import (
	"cmp"
	"fmt"
	"math"
	"slices"

	"github.com/fedpq/fedpq/corr"
	"github.com/fedpq/fedpq/internal/spec"
)

// Every partition draws from its own corr stream of the seed, so a partition
// depends on the seed alone and never on what else the run drew before it.
// Each client's indices are returned sorted: a client's data is a set, and
// ascending indices gather from memory in order.

// IID splits 0..n-1 uniformly at random into clients parts of equal size
// without replacement (the papers' IID setting); the n mod clients left over
// go one each to the first clients, so sizes differ by at most one.
func IID(n, clients int, seed uint64) ([][]int, error) {
	if clients < 1 || n < clients {
		return nil, fmt.Errorf("data: IID of %d examples among %d clients: need at least one client and one example per client", n, clients)
	}
	perm := make([]int, n)
	corr.Shuffle(corr.Derive(corr.SeedSecret(seed), "data/iid"), perm)
	parts := make([][]int, clients)
	start := 0
	for k := range parts {
		size := n / clients
		if k < n%clients {
			size++
		}
		parts[k] = sorted(perm[start : start+size])
		start += size
	}
	return parts, nil
}

// Dirichlet splits examples non-IID by label (Hsu et al. 2019): for every
// class it draws client proportions p ~ Dirichlet(alpha, ..., alpha) and
// deals that class's examples, shuffled, in those proportions. Small alpha
// gives each client few classes; large alpha approaches an IID split. A
// client left with no example takes one at random from the largest client,
// so every client can train; that moves at most clients-1 examples.
func Dirichlet(labels []int32, classes, clients int, alpha float64, seed uint64) ([][]int, error) {
	if clients < 1 || len(labels) < clients {
		return nil, fmt.Errorf("data: Dirichlet split of %d examples among %d clients: need at least one client and one example per client", len(labels), clients)
	}
	if !(alpha > 0) || math.IsInf(alpha, 1) {
		return nil, fmt.Errorf("data: Dirichlet alpha %v: want a positive finite number", alpha)
	}
	byClass, err := groupByClass(labels, classes)
	if err != nil {
		return nil, err
	}
	src := corr.Derive(corr.SeedSecret(seed), "data/dirichlet")
	parts := make([][]int, clients)
	logp := make([]float64, clients)
	for _, idx := range byClass {
		if len(idx) == 0 {
			continue
		}
		perm := make([]int, len(idx))
		corr.Shuffle(src, perm)
		// Proportions are drawn as log-gammas and normalized in log space:
		// with alpha far below 1 the gammas themselves underflow to zero.
		top := math.Inf(-1)
		for k := range logp {
			logp[k] = logGamma(src, alpha)
			top = max(top, logp[k])
		}
		total := 0.0
		for k := range logp {
			logp[k] = math.Exp(logp[k] - top)
			total += logp[k]
		}
		acc, start := 0.0, 0
		for k := range parts {
			acc += logp[k]
			end := int(math.Round(acc / total * float64(len(idx))))
			if k == clients-1 {
				end = len(idx)
			}
			end = max(end, start)
			for _, j := range perm[start:end] {
				parts[k] = append(parts[k], idx[j])
			}
			start = end
		}
	}
	for k := range parts {
		if len(parts[k]) > 0 {
			continue
		}
		big := 0
		for j := range parts {
			if len(parts[j]) > len(parts[big]) {
				big = j
			}
		}
		p := parts[big]
		i := int(corr.Below(src, uint64(len(p))))
		parts[k] = []int{p[i]}
		p[i] = p[len(p)-1]
		parts[big] = p[:len(p)-1]
	}
	for _, p := range parts {
		slices.Sort(p)
	}
	return parts, nil
}

// Shards is McMahan et al.'s pathological non-IID split: sort the examples by
// label, cut them into clients*shardsPerClient shards of consecutive examples
// (sizes differ by at most one, so none is dropped), and deal each client
// shardsPerClient shards at random. With MNIST, 100 clients and 2 shards each
// most clients see two digits.
func Shards(labels []int32, clients, shardsPerClient int, seed uint64) ([][]int, error) {
	n := len(labels)
	if clients < 1 || shardsPerClient < 1 || clients*shardsPerClient > n {
		return nil, fmt.Errorf("data: %d shards for each of %d clients from %d examples: need at least one shard each and one example per shard", shardsPerClient, clients, n)
	}
	order := make([]int, n)
	for i := range order {
		order[i] = i
	}
	// Stable, so examples of one label keep their file order as in the paper.
	slices.SortStableFunc(order, func(a, b int) int { return cmp.Compare(labels[a], labels[b]) })
	total := clients * shardsPerClient
	perm := make([]int, total)
	corr.Shuffle(corr.Derive(corr.SeedSecret(seed), "data/shards"), perm)
	parts := make([][]int, clients)
	for k := range parts {
		for _, s := range perm[k*shardsPerClient : (k+1)*shardsPerClient] {
			parts[k] = append(parts[k], order[s*n/total:(s+1)*n/total]...)
		}
		slices.Sort(parts[k])
	}
	return parts, nil
}

// Split draws a validation set of round(frac*n) examples uniformly at random
// and returns the rest as the training set, both sorted.
func Split(n int, frac float64, seed uint64) (train, val []int, err error) {
	if n < 0 || !(frac >= 0 && frac <= 1) {
		return nil, nil, fmt.Errorf("data: validation split of %v of %d examples: want 0 <= frac <= 1", frac, n)
	}
	perm := make([]int, n)
	corr.Shuffle(corr.Derive(corr.SeedSecret(seed), "data/split"), perm)
	nv := int(math.Round(frac * float64(n)))
	return sorted(perm[nv:]), sorted(perm[:nv]), nil
}

// sorted returns a sorted copy of p.
func sorted(p []int) []int {
	q := slices.Clone(p)
	slices.Sort(q)
	return q
}

// groupByClass lists the examples of each class, checking every label.
func groupByClass(labels []int32, classes int) ([][]int, error) {
	if classes < 1 {
		return nil, fmt.Errorf("data: %d classes: want at least one", classes)
	}
	byClass := make([][]int, classes)
	for i, l := range labels {
		if l < 0 || int(l) >= classes {
			return nil, fmt.Errorf("data: label %d of example %d is outside [0, %d)", l, i, classes)
		}
		byClass[l] = append(byClass[l], i)
	}
	return byClass, nil
}

// logGamma returns the logarithm of a Gamma(a, 1) variate: Marsaglia and
// Tsang's method for a >= 1, and for a < 1 their boost
// Gamma(a) = Gamma(a+1) * U^(1/a), taken in logs so it cannot underflow.
func logGamma(src *corr.Stream, a float64) float64 {
	if a < 1 {
		u := 1 - src.Float64() // in (0, 1]
		return logGamma(src, a+1) + math.Log(u)/a
	}
	d := a - 1.0/3
	c := 1 / math.Sqrt(9*d)
	for {
		x := src.NormFloat64()
		v := 1 + c*x
		if v <= 0 {
			continue
		}
		v = v * v * v
		u := 1 - src.Float64()
		if math.Log(u) < 0.5*x*x+d-d*v+d*math.Log(v) {
			return math.Log(d * v)
		}
	}
}

// ParsePartition reads a partition of a dataset among clients: iid,
// dirichlet:ALPHA or shards:K (alpha and K positive).
func ParsePartition(s string) (kind string, arg float64, err error) {
	p := spec.Parse(s)
	kind = p.Kind
	switch {
	case kind == "iid" && !p.HasArgs:
		return kind, 0, nil
	case (kind == "dirichlet" || kind == "shards") && p.HasArgs:
		v, err := p.Numbers()
		if err != nil || len(v) != 1 || !(v[0] > 0) || math.IsInf(v[0], 1) || kind == "shards" && v[0] != math.Trunc(v[0]) {
			return "", 0, fmt.Errorf("data: partition %q: %q must be a positive number (an integer for shards)", s, p.Args)
		}
		return kind, v[0], nil
	}
	return "", 0, fmt.Errorf("data: partition %q: want iid, dirichlet:ALPHA or shards:K", s)
}

// Partition splits examples with these labels among clients as spec says
// (ParsePartition): IID, Dirichlet or Shards, from the seed.
func Partition(spec string, labels []int32, classes, clients int, seed uint64) ([][]int, error) {
	kind, arg, err := ParsePartition(spec)
	if err != nil {
		return nil, err
	}
	switch kind {
	case "iid":
		return IID(len(labels), clients, seed)
	case "dirichlet":
		return Dirichlet(labels, classes, clients, arg, seed)
	}
	return Shards(labels, clients, int(arg), seed)
}
