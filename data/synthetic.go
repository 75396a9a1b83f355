package data

import (
	"fmt"
	"math"
	"runtime"
	"sync"

	"github.com/fedpq/fedpq/corr"
)

// Synthetic(alpha, beta)'s fixed sizes, as in FedProx's generate_synthetic.py.
const (
	synthFeatures = 60
	synthClasses  = 10
	// synthTrainFrac is the share of each client's examples it trains on;
	// the script keeps int(0.9 * n) for training and the rest for testing.
	synthTrainFrac = 0.9
	// synthMaxExamples bounds the total (about 4 GB of features). Client
	// sizes are lognormal and unbounded; only a freak draw exceeds this.
	synthMaxExamples = 1 << 24
)

// Synthetic generates FedProx's Synthetic(alpha, beta) (Li et al., "Federated
// Optimization in Heterogeneous Networks", MLSys 2020, section 5.1, following
// the repository's data/synthetic_*/generate_synthetic.py). For client k:
//
//	u_k ~ N(0, alpha²), B_k ~ N(0, beta²)   (the script's scales are standard deviations)
//	W_k ~ N(u_k, 1) in R^{60x10}, b_k ~ N(u_k, 1) in R^10
//	v_k ~ N(B_k, 1) in R^60
//	x ~ N(v_k, Sigma), Sigma diagonal with Sigma_jj = j^-1.2 (j = 1..60)
//	y = argmax softmax(W_k^T x + b_k)
//
// Client k has floor(exp(4 + 2 z_k)) + 50 examples, z_k ~ N(0, 1) (the
// script's lognormal(4, 2) power law), of which the first floor(0.9 n_k)
// train and the rest test. The examples of a client are i.i.d., so taking the
// first 90% is the script's shuffle-then-split in distribution. alpha governs
// how much the clients' models differ, beta how much their inputs do.
//
// Train holds every client's train examples, client by client, and Natural[k]
// their indices; Test pools the clients' test examples. Each client draws
// from its own corr stream, so the result depends on the seed alone and is
// generated in parallel.
func Synthetic(alpha, beta float64, clients int, seed uint64) (*Federated, error) {
	if clients < 1 {
		return nil, fmt.Errorf("data: synthetic needs the number of clients (got %d)", clients)
	}
	if !(alpha >= 0 && beta >= 0) || math.IsInf(alpha, 1) || math.IsInf(beta, 1) {
		return nil, fmt.Errorf("data: synthetic(%v, %v): alpha and beta must be finite and non-negative", alpha, beta)
	}
	secret := corr.SeedSecret(seed)
	prior := corr.Derive(secret, "data/synthetic/prior")
	type client struct {
		n, train        int
		u, b            float64
		trainAt, testAt int
	}
	cs := make([]client, clients)
	nTrain, nTest := 0, 0
	for k := range cs {
		c := &cs[k]
		c.n = int(math.Exp(4+2*prior.NormFloat64())) + 50
		if c.n > synthMaxExamples {
			return nil, fmt.Errorf("data: synthetic: client %d drew %d examples, over the limit of %d; use another seed", k, c.n, synthMaxExamples)
		}
		c.u = alpha * prior.NormFloat64()
		c.b = beta * prior.NormFloat64()
		c.train = int(synthTrainFrac * float64(c.n))
		c.trainAt, c.testAt = nTrain, nTest
		nTrain += c.train
		nTest += c.n - c.train
		if nTrain+nTest > synthMaxExamples {
			return nil, fmt.Errorf("data: synthetic: %d clients drew over %d examples in all; use fewer clients or another seed", clients, synthMaxExamples)
		}
	}
	name := fmt.Sprintf("synthetic:%g,%g", alpha, beta)
	newSet := func(n int) *Dataset {
		return &Dataset{Name: name, X: make([]float32, n*synthFeatures), Y: make([]int32, n), Shape: []int{synthFeatures}, Classes: synthClasses}
	}
	train, test := newSet(nTrain), newSet(nTest)
	natural := make([][]int, clients)

	var sd [synthFeatures]float64 // standard deviations, sqrt(j^-1.2)
	for j := range sd {
		sd[j] = math.Pow(float64(j+1), -0.6)
	}
	gen := func(k int) {
		c := cs[k]
		src := corr.Derive(secret, "data/synthetic/client", uint64(k))
		var v [synthFeatures]float64
		var w [synthFeatures][synthClasses]float64
		var b [synthClasses]float64
		for j := range v {
			v[j] = c.b + src.NormFloat64()
		}
		for j := range w {
			for l := range w[j] {
				w[j][l] = c.u + src.NormFloat64()
			}
		}
		for l := range b {
			b[l] = c.u + src.NormFloat64()
		}
		var x [synthFeatures]float64
		for i := range c.n {
			for j := range x {
				x[j] = v[j] + sd[j]*src.NormFloat64()
			}
			// argmax of the logits is the argmax of their softmax, without
			// the overflow exp can hit for large alpha.
			best, arg := math.Inf(-1), 0
			for l := range b {
				z := b[l]
				for j := range x {
					z += x[j] * w[j][l]
				}
				if z > best {
					best, arg = z, l
				}
			}
			d, at := train, c.trainAt+i
			if i >= c.train {
				d, at = test, c.testAt+i-c.train
			}
			for j := range x {
				d.X[at*synthFeatures+j] = float32(x[j])
			}
			d.Y[at] = int32(arg)
		}
		natural[k] = make([]int, c.train)
		for i := range natural[k] {
			natural[k][i] = c.trainAt + i
		}
	}
	next := make(chan int)
	var wg sync.WaitGroup
	for range min(runtime.GOMAXPROCS(0), clients) {
		wg.Go(func() {
			for k := range next {
				gen(k)
			}
		})
	}
	for k := range cs {
		next <- k
	}
	close(next)
	wg.Wait()
	return &Federated{Train: train, Test: test, Natural: natural}, nil
}
