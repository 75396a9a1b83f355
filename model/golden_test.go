package model

import (
	"compress/gzip"
	"encoding/json"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"slices"
	"testing"
)

// Golden cross-framework tests: fedpq's local training against PyTorch's.
//
// testdata/golden/torch_golden.py (run with python3-torch; its docstring
// says how) trains PyTorch's nn.Sequential twins of mlp, cnn2, corbin-cnn,
// ldpfl-cnn and lenet (nn.Conv2d with stride and padding, nn.Sigmoid) on
// the first 256 MNIST training images (stored in the
// fixtures, so the tests need neither torch nor the dataset), from initial
// weights and with dropout masks that are splitmix64 hashes both sides
// compute bit for bit (goldenInit, goldenDropout), on batches it stores.
// Each model trains with SGD + momentum and with Adam: mlp, cnn2 and lenet
// 150 steps of batch 16, corbin-cnn and ldpfl-cnn 100 steps of batch 4 (see
// the generator's CASES for the learning rates); mlp and cnn2 also with
// FedProx's proximal term at mu 0.01 and 0.5 (PROX_CASES: the term
// (mu/2) sum ||w - w0||^2 added to the loss, w0 the initial weights, as
// Flower's FedProx does). The fixtures hold
// PyTorch's loss of every step and, after steps 1, 10 and the last, each
// tensor's float64 sum and sum of squares and 256 values at fixed positions
// (goldenPos). TestGoldenTraining runs fedpq's trainer (Trainer.run, on
// each engine) through the plan up to each checkpoint and compares the
// weights, and the mean loss over those steps (run returns the mean; the
// loss of the first step is the first checkpoint's). TestGoldenFedAvg
// replays one FedAvg round of cnn2 with per-parameter clipping over 4
// clients.
//
// Tolerance. Two correct float32 implementations differ by rounding, and
// training carries rounding differences along by an amount that depends
// on the model, the optimizer and the step (Adam's first step moves a
// weight by lr*g/(|g|+1e-8), so a gradient that is zero up to rounding
// moves it by up to lr either way). The generator measures it: it reruns
// every case in float64 and, in float32, from six initial weights
// perturbed by an ulp, and stores per checkpoint and tensor noise = the
// largest max|w - w_alt| / rms over those seven runs. A value of fedpq may
// differ from PyTorch's by
//
//	|w - w_torch| <= (goldenC * noise + goldenFloor) * rms
//
// where goldenFloor = 1e-6 covers the last few roundings of the value
// itself (a float32 ulp is 6e-8 to 1.2e-7 of it, weights are within 2 rms)
// and goldenC = 8 lets fedpq's summation orders differ more from
// PyTorch's than an ulp of the initial weights. The settings are chosen
// (and the generator checks) so that the noise stays at float32 scale: at
// most 1.4e-6 after one step and 6e-5 after the last with SGD, 1.1e-4
// with Adam on mlp and cnn2; in corbin-cnn and ldpfl-cnn, Adam's near-zero
// gradients move some values of the conv2 and fc1 kernels up to 6e-4 from
// the first step on (the other tensors stay below 1e-4). With larger
// learning rates or batches, some ReLU or max-pooling decision on the way
// is a near tie (its two sides within about 1e-6 relative) that rounding
// can flip, and the runs then part: e.g. corbin-cnn with SGD (lr 0.01,
// momentum 0.9) at batch 8, where 3 of 6 perturbed runs part at step 44
// and end with losses 0.1 apart. Such a flip in fedpq would fail the last
// checkpoint only, after passing steps 1 and 10; a wrong formula fails at
// once. The FedAvg round (8 steps per client) takes its noise from the
// float64 round alone.
//
// The sums are checked with what the bound on every value implies for
// them (|d sum| <= tol*rms*n, |d sumsq| <= (2 tol + tol^2) sumsq), so
// that no value outside the sample can be far off; the mean loss over the
// steps within goldenC times the largest loss difference of the seven runs
// plus 1e-6 relative (float32 losses round at 1.2e-7).
//
// What this can and cannot see: momentum off by 0.1%, Adam's epsilon
// 1e-7 instead of 1e-8, and pooling that routes the gradient to every
// tied input (instead of one) each fail by orders of magnitude. Which one
// of exactly tied inputs gets it (PyTorch's first, or the last) changes
// nothing here: on MNIST exact ties come from identical receptive fields
// (blank margins, saturated strokes), whose gradients are the same.
const (
	goldenC     = 8
	goldenFloor = 1e-6
)

// goldenTensor is PyTorch's summary of one tensor.
type goldenTensor struct {
	Sum, Sumsq float64
	Sample     []float64 // the values at goldenPos(n, len(Sample), k)
}

// goldenPos is the position of the k-th of m sampled values of a tensor
// of n: evenly spread, every value when m == n.
func goldenPos(n, m, k int) int { return (2*k + 1) * n / (2 * m) }

type goldenCheckpoint struct {
	Step      int            // after this many steps
	Tensors   []goldenTensor // in Tensors order
	Noise     []float64      // per tensor, the rounding noise (see the tolerance)
	LossNoise float64        `json:"loss_noise"` // the largest loss difference of the seven runs up to Step
}

type goldenCase struct {
	Model, Optimizer string
	LR, Momentum     float64
	ProxMu           float64 `json:"prox_mu"` // FedProx's mu, 0 for none
	Batch            int
	Seed             uint64  // of the initial weights, the batches and the dropout masks
	Batches          [][]int // each step's examples (indices into the 256)
	Losses           []float64
	Checkpoints      []goldenCheckpoint
}

type goldenClient struct {
	Batches [][]int
	Losses  []float64
	Local   []goldenTensor // the client's model after local training
	Noise   []float64
}

type goldenFedAvg struct {
	Model            string
	Seed             uint64
	LR, Momentum     float64
	Batch            int
	Radius           float64
	Clients          []goldenClient
	Global           []goldenTensor // the new global model
	Noise            []float64
	Clipped, Entries int // update entries with |u| > Radius, of all clients' entries
}

func readGolden(t *testing.T, name string, v any) {
	t.Helper()
	f, err := os.Open(filepath.Join("testdata", "golden", name))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	z, err := gzip.NewReader(f)
	if err != nil {
		t.Fatal(err)
	}
	if err := json.NewDecoder(z).Decode(v); err != nil {
		t.Fatalf("%s: %v", name, err)
	}
}

// goldenMNIST returns the fixtures' 256 MNIST images as fedpq reads them
// (float32(b)/255, HWC, which for one channel is PyTorch's order) and
// their labels.
func goldenMNIST(t *testing.T) ([]float32, []int32) {
	var pool struct{ Images, Labels []byte }
	readGolden(t, "mnist256.json.gz", &pool)
	if len(pool.Images) != 256*784 || len(pool.Labels) != 256 {
		t.Fatalf("mnist256: %d pixels and %d labels", len(pool.Images), len(pool.Labels))
	}
	x := make([]float32, len(pool.Images))
	for i, b := range pool.Images {
		x[i] = float32(b) / 255
	}
	y := make([]int32, len(pool.Labels))
	for i, b := range pool.Labels {
		y[i] = int32(b)
	}
	return x, y
}

func splitmix64(x uint64) uint64 {
	x += 0x9e3779b97f4a7c15
	x = (x ^ x>>30) * 0xbf58476d1ce4e5b9
	x = (x ^ x>>27) * 0x94d049bb133111eb
	return x ^ x>>31
}

// uniform24 is the generator's uniform in [0, 1): 24 bits of a hash.
func uniform24(key uint64) float64 { return float64(splitmix64(key)>>40) / (1 << 24) }

// goldenInit is the generator's init_weights: value j of tensor t is
// float32(a * (2u - 1)), u = uniform24(seed ^ t<<32 ^ j), with a =
// sqrt(6/fan_in) for kernels before a ReLU (or lenet's sigmoid), sqrt(6/(fan_in + fan_out)) for
// the logit kernel and 1/sqrt(fan_in) for biases.
func goldenInit(m *Model, seed uint64) [][]float32 {
	specs := m.Tensors()
	ws := make([][]float32, len(specs))
	for ti, s := range specs {
		kernel := specs[ti-ti%2] // kernels and biases alternate
		fanOut := kernel.Shape[0]
		fanIn := kernel.Size() / fanOut
		a := math.Sqrt(6 / float64(fanIn))
		switch {
		case ti%2 == 1:
			a = 1 / math.Sqrt(float64(fanIn))
		case ti == len(specs)-2:
			a = math.Sqrt(6 / float64(fanIn+fanOut))
		}
		ws[ti] = make([]float32, s.Size())
		for j := range ws[ti] {
			u := uniform24(seed ^ uint64(ti)<<32 ^ uint64(j))
			ws[ti][j] = float32(a * (2*u - 1))
		}
	}
	return ws
}

// goldenDropout is the generator's dropout_mask as a plan's dropout: unit
// u of example j at step s, layer l is dropped (0) when uniform24(seed ^
// s<<40 ^ l<<36 ^ j<<20 ^ u) < 0.5, else kept (x2).
func goldenDropout(seed uint64, batches [][]int) func(s, l int, mask []float32) {
	return func(s, l int, mask []float32) {
		n := len(batches[s])
		units := len(mask) / n
		for j := range n {
			for u := range units {
				mask[j*units+u] = 2
				if uniform24(seed^uint64(s)<<40^uint64(l)<<36^uint64(j)<<20^uint64(u)) < 0.5 {
					mask[j*units+u] = 0
				}
			}
		}
	}
}

// TestGoldenMNIST: the fixtures' images and labels are the first 256 of
// MNIST's training set (skipped without the shared datasets).
func TestGoldenMNIST(t *testing.T) {
	gx, gy := goldenMNIST(t)
	x, y := mnist(t, "train", 256)
	if !slices.Equal(gx, x) || !slices.Equal(gy, y) {
		t.Error("testdata/golden/mnist256.json.gz differs from the first 256 MNIST training examples")
	}
}

// goldenEngines are the engines the golden tests compare with PyTorch.
var goldenEngines = []Engine{Native, GoMLX}

// compareWeights checks w against PyTorch's summaries: the sampled values
// within tol[t]*rms and the sums within what that implies (see the
// tolerance above). It returns the largest sampled |w - w_torch| / rms and
// its ratio to the tolerance.
func compareWeights(t *testing.T, what string, m *Model, w [][]float32, want []goldenTensor, tol []float64) (worst, ratio float64) {
	t.Helper()
	bad, worst, ratio := weightDiffs(m, w, want, tol)
	for _, b := range bad {
		t.Errorf("%s: %s", what, b)
	}
	return worst, ratio
}

// weightDiffs is compareWeights's check: it describes each way w is out
// of tolerance.
func weightDiffs(m *Model, w [][]float32, want []goldenTensor, tol []float64) (bad []string, worst, ratio float64) {
	specs := m.Tensors()
	if len(want) != len(specs) || len(tol) != len(specs) {
		return []string{fmt.Sprintf("fixture has %d tensors, %s has %d", len(want), m.Arch(), len(specs))}, math.Inf(1), math.Inf(1)
	}
	for ti, g := range want {
		n := len(w[ti])
		rms := math.Sqrt(g.Sumsq / float64(n))
		out, at, tensorWorst := 0, 0, 0.0
		for k, v := range g.Sample {
			p := goldenPos(n, len(g.Sample), k)
			d := math.Abs(float64(w[ti][p])-v) / rms
			if d > tol[ti] || math.IsNaN(d) {
				out++
			}
			if d > tensorWorst || math.IsNaN(d) {
				tensorWorst, at = d, k
			}
		}
		if out > 0 {
			p := goldenPos(n, len(g.Sample), at)
			bad = append(bad, fmt.Sprintf("%s: %d of %d sampled values off by more than %.2g rms, the most [%d] = %.9g, PyTorch %.9g (%.2g rms)",
				specs[ti].Name, out, len(g.Sample), tol[ti], p, w[ti][p], g.Sample[at], tensorWorst))
		}
		worst = max(worst, tensorWorst)
		ratio = max(ratio, tensorWorst/tol[ti])
		var s, ss float64
		for _, v := range w[ti] {
			s += float64(v)
			ss += float64(v) * float64(v)
		}
		if d := math.Abs(s - g.Sum); !(d <= tol[ti]*rms*float64(n)) {
			bad = append(bad, fmt.Sprintf("%s sums to %.9g, PyTorch %.9g (tolerance %.2g)", specs[ti].Name, s, g.Sum, tol[ti]*rms*float64(n)))
		}
		if d := math.Abs(ss - g.Sumsq); !(d <= (2*tol[ti]+tol[ti]*tol[ti])*g.Sumsq) {
			bad = append(bad, fmt.Sprintf("%s sum of squares %.9g, PyTorch %.9g", specs[ti].Name, ss, g.Sumsq))
		}
	}
	return bad, worst, ratio
}

// goldenTol is the tolerance per tensor for PyTorch's noise.
func goldenTol(noise []float64) []float64 {
	tol := make([]float64, len(noise))
	for i, n := range noise {
		tol[i] = goldenC*n + goldenFloor
	}
	return tol
}

// TestGoldenTraining: from the same weights on the same batches (and
// dropout masks), fedpq's local training of mlp, cnn2, corbin-cnn,
// ldpfl-cnn and lenet with SGD + momentum and with Adam, and of mlp and
// cnn2 with FedProx's term, matches PyTorch's over 100 to 150 steps: the
// mean loss and the weights after steps 1, 10 and the last, on each
// engine (see the tolerance above). For the FedProx cases it also checks
// that the fixture sees the term: training without it, with its sign
// flipped, or with mu doubled or halved (a lost or extra factor 2) fails
// the last checkpoint.
func TestGoldenTraining(t *testing.T) {
	x, y := goldenMNIST(t)
	var cases []goldenCase
	readGolden(t, "train.json.gz", &cases)
	prox := 0
	for _, c := range cases {
		if c.ProxMu > 0 {
			prox++
		}
	}
	if len(cases) != 18 || prox != 8 {
		t.Fatalf("%d training cases, %d of them FedProx; want 18 and 8", len(cases), prox)
	}
	for _, e := range goldenEngines {
		for _, c := range cases {
			name := fmt.Sprintf("%s/%s/%s", e, c.Model, c.Optimizer)
			if c.ProxMu > 0 {
				name += fmt.Sprintf("/prox%g", c.ProxMu)
			}
			t.Run(name, func(t *testing.T) {
				m, err := New(c.Model, []int{28, 28, 1}, 10)
				if err != nil {
					t.Fatal(err)
				}
				tr, err := m.NewTrainerOn(e, Optimizer{Name: c.Optimizer, LR: c.LR, Momentum: c.Momentum})
				if err != nil {
					t.Fatal(err)
				}
				init := goldenInit(m, c.Seed)
				for _, cp := range c.Checkpoints {
					pl := plan{batch: c.Batch, batches: c.Batches[:cp.Step], dropout: goldenDropout(c.Seed, c.Batches), mu: c.ProxMu}
					w, loss, err := tr.run(t.Context(), init, x, y, pl)
					if err != nil {
						t.Fatal(err)
					}
					want := 0.0
					for _, l := range c.Losses[:cp.Step] {
						want += l / float64(cp.Step)
					}
					if d := math.Abs(loss - want); !(d <= goldenC*cp.LossNoise+goldenFloor*want) {
						t.Errorf("step %d: mean loss %.7f, PyTorch %.7f", cp.Step, loss, want)
					}
					worst, ratio := compareWeights(t, fmt.Sprintf("step %d", cp.Step), m, w, cp.Tensors, goldenTol(cp.Noise))
					t.Logf("step %3d: mean loss %.6f (PyTorch %+.1e), weights off by up to %.1e rms (%.0f%% of the tolerance)",
						cp.Step, loss, loss-want, worst, 100*ratio)
				}
				if c.ProxMu > 0 && e == Native {
					proxMatters(t, tr, c, init, x, y)
				}
			})
		}
	}
}

// proxMatters checks that case c's last checkpoint fails with FedProx's
// term left out, of the wrong sign, or off by a factor of 2 either way
// (run on one engine: it tests the fixture, not the engine).
func proxMatters(t *testing.T, tr *Trainer, c goldenCase, init [][]float32, x []float32, y []int32) {
	t.Helper()
	last := c.Checkpoints[len(c.Checkpoints)-1]
	for _, mu := range []float64{0, -c.ProxMu, 2 * c.ProxMu, c.ProxMu / 2} {
		pl := plan{batch: c.Batch, batches: c.Batches, dropout: goldenDropout(c.Seed, c.Batches), mu: mu}
		w, _, err := tr.run(t.Context(), init, x, y, pl)
		if err != nil {
			t.Logf("mu %g instead of %g: %v", mu, c.ProxMu, err)
			continue
		}
		bad, worst, ratio := weightDiffs(tr.Model(), w, last.Tensors, goldenTol(last.Noise))
		if len(bad) == 0 {
			t.Errorf("mu %g instead of %g passes the check (weights off by up to %.1e rms)", mu, c.ProxMu, worst)
			continue
		}
		t.Logf("mu %g instead of %g: weights off by up to %.1e rms, %.0f times the tolerance", mu, c.ProxMu, worst, ratio)
	}
}

// TestGoldenFedAvg: one FedAvg round of cnn2 as ../shared/anchors/torch_fl.py
// runs it with clipping: 4 clients train the global model (SGD lr 0.1,
// momentum 0.5 reset per client, 2 epochs of 4 batches of 10), each
// update is clipped to [-0.05, 0.05] per parameter, and the global model
// moves by their mean. Each client's local model, the new global model
// and the number of clipped entries match PyTorch's (the clients' mean
// losses to 1e-5 relative). The count may differ only by entries whose
// |update| is within the tolerance of the radius.
func TestGoldenFedAvg(t *testing.T) {
	x, y := goldenMNIST(t)
	var f goldenFedAvg
	readGolden(t, "fedavg.json.gz", &f)
	m, err := New(f.Model, []int{28, 28, 1}, 10)
	if err != nil {
		t.Fatal(err)
	}
	global := goldenInit(m, f.Seed)
	for _, e := range goldenEngines {
		t.Run(string(e), func(t *testing.T) {
			tr, err := m.NewTrainerOn(e, Optimizer{Name: "sgd", LR: f.LR, Momentum: f.Momentum})
			if err != nil {
				t.Fatal(err)
			}
			r := float32(f.Radius)
			sum := make([][]float32, len(global))
			for i := range sum {
				sum[i] = make([]float32, len(global[i]))
			}
			clipped, near, entries := 0, 0, 0
			for k, c := range f.Clients {
				local, loss, err := tr.run(t.Context(), global, x, y, plan{batch: f.Batch, batches: c.Batches})
				if err != nil {
					t.Fatal(err)
				}
				want := 0.0
				for _, l := range c.Losses {
					want += l / float64(len(c.Losses))
				}
				if math.Abs(loss-want) > 1e-5*want {
					t.Errorf("client %d: mean loss %.7f, PyTorch %.7f", k, loss, want)
				}
				tol := goldenTol(c.Noise)
				compareWeights(t, fmt.Sprintf("client %d", k), m, local, c.Local, tol)
				for i := range local {
					rms := math.Sqrt(c.Local[i].Sumsq / float64(len(local[i])))
					for j, w := range local[i] {
						u := w - global[i][j]
						if math.Abs(math.Abs(float64(u))-f.Radius) <= tol[i]*rms {
							near++
						}
						if u > r || u < -r {
							clipped++
						}
						sum[i][j] += min(max(u, -r), r)
					}
					entries += len(local[i])
				}
			}
			next := make([][]float32, len(global))
			for i := range global {
				next[i] = make([]float32, len(global[i]))
				for j, w := range global[i] {
					next[i][j] = w + sum[i][j]/float32(len(f.Clients))
				}
			}
			worst, ratio := compareWeights(t, "new global model", m, next, f.Global, goldenTol(f.Noise))
			if entries != f.Entries || max(clipped-f.Clipped, f.Clipped-clipped) > near {
				t.Errorf("%d of %d update entries clipped, PyTorch %d of %d (%d near the radius)", clipped, entries, f.Clipped, f.Entries, near)
			}
			t.Logf("new global model off by up to %.1e rms (%.0f%% of the tolerance); %d of %d entries clipped (PyTorch %d), %d near the radius",
				worst, 100*ratio, clipped, entries, f.Clipped, near)
		})
	}
}
