package attack

import (
	"context"
	"errors"
	"fmt"
	"math"
	"slices"
	"sort"

	"gonum.org/v1/gonum/optimize"

	"github.com/fedpq/fedpq/corr"
	"github.com/fedpq/fedpq/model"
)

// Method is a gradient-inversion attack.
type Method struct {
	// Name is "dlg" (images and soft labels learnt together, Zhu et al.
	// 2019) or "idlg" (labels read off the last layer's bias gradient
	// first, then images learnt for them, Zhao et al. 2020).
	Name string
	// Iterations is the number of L-BFGS iterations per start (DLG and
	// iDLG minimize with L-BFGS).
	Iterations int
	// Starts is the number of random starting guesses; the guess whose
	// gradient matches the view best wins, which the attacker can see
	// without the true images.
	Starts int
}

// Validate reports a Method that Reconstruct cannot run.
func (a Method) Validate() error {
	if a.Name != "dlg" && a.Name != "idlg" {
		return fmt.Errorf("attack: method %q: want dlg or idlg", a.Name)
	}
	if a.Iterations < 1 || a.Starts < 1 {
		return fmt.Errorf("attack: %d iterations and %d starts, want at least 1 each", a.Iterations, a.Starts)
	}
	return nil
}

// Reconstruction is an attack's guess of a batch.
type Reconstruction struct {
	X      []float32 // the guessed examples, clamped to the data's [0, 1]
	Labels []int32
	// Distance is the final gradient distance over the view's squared
	// norm: near 0, the guess explains the view.
	Distance    float64
	Evaluations int // evaluations of the objective and its gradient
}

// Reconstruct guesses the batch of n examples whose mean gradient at
// weights w is view, by minimizing the gradient distance of package
// model's Inverter with L-BFGS (gonum's) from Starts random guesses (pixels
// uniform in [0, 1], label logits standard normal), seeded by seed. labels,
// if not nil, are the batch's true labels, given to the attacker (as
// JoPEQ's evaluation gives them to iDLG); nil lets the method find them.
// progress, if not nil, is called after every evaluation with the number
// done so far and the most there will be.
func (a Method) Reconstruct(ctx context.Context, m *model.Model, w, view [][]float32, n int, labels []int32, seed uint64, progress func(done, most int)) (Reconstruction, error) {
	if err := a.Validate(); err != nil {
		return Reconstruction{}, err
	}
	if labels != nil && len(labels) != n {
		return Reconstruction{}, fmt.Errorf("attack: %d labels given for %d examples", len(labels), n)
	}
	learn := a.Name == "dlg" && labels == nil
	inv, err := m.NewInverter(n, learn)
	if err != nil {
		return Reconstruction{}, err
	}
	if err := inv.SetTarget(w, view); err != nil {
		return Reconstruction{}, err
	}
	var norm float64
	for _, t := range view {
		for _, v := range t {
			norm += float64(v) * float64(v)
		}
	}
	if !(norm > 0) || math.IsInf(norm, 0) {
		return Reconstruction{}, fmt.Errorf("attack: the view's norm is %v: nothing to match", norm)
	}
	f, c := m.Features(), m.Classes()
	known := labels
	if !learn && known == nil {
		if known, err = InferLabels(view[len(view)-1], n); err != nil {
			return Reconstruction{}, err
		}
	}
	// Most evaluations: gonum's line search takes a few per iteration.
	most := a.Starts * a.Iterations * evalsPerIteration
	best := Reconstruction{Distance: math.Inf(1)}
	done := 0
	for s := range a.Starts {
		rng := corr.Derive(corr.SeedSecret(seed), "attack start", uint64(s))
		vars := make([]float64, n*f)
		for i := range vars {
			vars[i] = rng.Float64()
		}
		if learn {
			for range n * c {
				vars = append(vars, rng.NormFloat64())
			}
		}
		probs := make([]float64, n*c)
		for i, y := range known {
			probs[i*c+int(y)] = 1
		}
		grad := make([]float64, len(vars))
		last := make([]float64, len(vars))
		lastD := math.NaN()
		var evalErr error
		eval := func(x []float64) float64 {
			if !math.IsNaN(lastD) && slices.Equal(x, last) {
				return lastD
			}
			if learn {
				copy(probs, x[n*f:])
			}
			var gl []float64
			if learn {
				gl = grad[n*f:]
			}
			d, err := inv.Match(x[:n*f], probs, grad[:n*f], gl)
			if err != nil {
				evalErr = err
				return math.NaN()
			}
			for i := range grad {
				grad[i] /= norm
			}
			copy(last, x)
			lastD = d / norm
			done++
			if progress != nil {
				progress(done, most)
			}
			return lastD
		}
		prob := optimize.Problem{
			Func: eval,
			Grad: func(g, x []float64) {
				eval(x)
				copy(g, grad)
			},
			Status: func() (optimize.Status, error) {
				if err := ctx.Err(); err != nil {
					return optimize.Failure, err
				}
				if evalErr != nil {
					return optimize.Failure, evalErr
				}
				return optimize.NotTerminated, nil
			},
		}
		// L-BFGS stops where its line search fails, which the kinks of
		// ReLU models make frequent; it then starts afresh (memory
		// cleared) from where it stopped, until the budget is spent.
		budget := a.Iterations * evalsPerIteration
		used := 0
		var res *optimize.Result
		for used < budget {
			settings := &optimize.Settings{
				FuncEvaluations: budget - used,
				Converger:       optimize.NeverTerminate{},
			}
			r, err := optimize.Minimize(prob, vars, settings, &optimize.LBFGS{Store: 100})
			if err := ctx.Err(); err != nil {
				return Reconstruction{}, err
			}
			if evalErr != nil {
				return Reconstruction{}, evalErr
			}
			if r == nil || (err != nil && !isStop(err)) {
				return Reconstruction{}, fmt.Errorf("attack: L-BFGS: %w", err)
			}
			if res != nil && !(r.F < res.F) {
				break // no progress from a fresh start: a (local) match
			}
			res = r
			used += r.FuncEvaluations
			copy(vars, r.X)
			if err == nil {
				break
			}
		}
		if !(res.F < best.Distance) {
			continue
		}
		best = Reconstruction{Distance: res.F, X: make([]float32, n*f), Labels: known}
		for i, v := range res.X[:n*f] {
			best.X[i] = float32(min(max(v, 0), 1))
		}
		if learn {
			best.Labels = make([]int32, n)
			for i := range n {
				row := res.X[n*f+i*c : n*f+(i+1)*c]
				best.Labels[i] = int32(argmax(row))
			}
		}
	}
	best.Evaluations = done
	if best.X == nil {
		return Reconstruction{}, errors.New("attack: no start reached a finite distance")
	}
	return best, nil
}

// evalsPerIteration bounds the evaluations of one L-BFGS iteration: its
// line search rarely needs more than a few.
const evalsPerIteration = 4

// isStop reports gonum's errors that only say why it stopped early (a line
// search that cannot improve, which is where a match ends).
func isStop(err error) bool {
	return errors.Is(err, optimize.ErrLinesearcherFailure) || errors.Is(err, optimize.ErrNoProgress)
}

// InferLabels is iDLG's label inference, extended to batches: the gradient
// of the mean cross-entropy with respect to the last layer's bias is
// mean_i (softmax_i - onehot(y_i)), negative only at the batch's labels
// while the model is far from fitting them. It returns the n classes with
// the most negative entries of that gradient (bias), in increasing order
// of class; batches whose labels repeat get a class once, as in
// GradInversion (Yin et al. 2021).
func InferLabels(bias []float32, n int) ([]int32, error) {
	if n < 1 || n > len(bias) {
		return nil, fmt.Errorf("attack: %d labels from %d classes", n, len(bias))
	}
	idx := make([]int, len(bias))
	for i := range idx {
		idx[i] = i
	}
	sort.SliceStable(idx, func(a, b int) bool { return bias[idx[a]] < bias[idx[b]] })
	out := make([]int32, n)
	for i := range out {
		out[i] = int32(idx[i])
	}
	slices.Sort(out)
	return out, nil
}

func argmax(v []float64) int {
	k := 0
	for i, x := range v {
		if x > v[k] {
			k = i
		}
	}
	return k
}
