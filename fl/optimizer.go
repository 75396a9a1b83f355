package fl

import (
	"fmt"
	"math"
)

// ServerOptimizer is how a round's estimate moves the global model: the
// server's half of a strategy (the other is how the round's messages
// become one estimate, Strategy.Aggregator). Reddi et al., "Adaptive
// Federated Optimization" (ICLR 2021), treat the estimated mean update,
// the pseudo-gradient, as a gradient that a server optimizer steps along:
//
//	delta = est - global (Perturb "weights") or est ("updates")
//	fedavg:      global += lr delta
//	fedavgm:     m = beta1 m + delta;                      global += lr m
//	fedadagrad:  m = beta1 m + (1-beta1) delta; v += delta^2
//	fedadam:     m likewise; v = beta2 v + (1-beta2) delta^2
//	fedyogi:     m likewise; v -= (1-beta2) delta^2 sign(v - delta^2)
//	             and then global += lr m / (sqrt(v) + tau)
//
// with m starting at 0 and v at tau^2 (their Algorithm 2, without bias
// correction). Every step reads only the estimate, which the server
// already holds: it is post-processing, and changes no privacy guarantee.
//
// A ServerOptimizer keeps no state of its own: its moments go in and come
// out of Step, so that the engine checkpoints them with the model and
// adopts them only with a step it accepts.
type ServerOptimizer interface {
	// Step returns the global model after a round whose estimate is est,
	// and the moments after it from those before (nil in the first round,
	// and after patience reloads the best model). It changes none of its
	// arguments.
	Step(global [][]float32, est [][]float64, moments [][]float32) (next [][]float64, after [][]float32)
	// Moments is the number of moments it keeps per model tensor.
	Moments() int
	String() string
}

// ServerConfig names a ServerOptimizer and its hyperparameters.
type ServerConfig struct {
	// Name is fedavg, fedavgm, fedadam, fedyogi or fedadagrad.
	Name string
	// LR is the server learning rate (the configuration's global_lr).
	LR float64
	// Beta1 is fedavgm's momentum and the adaptive optimizers' first
	// moment decay; Beta2 the second moment's (fedadam, fedyogi); Tau the
	// adaptivity floor of the adaptive ones.
	Beta1, Beta2, Tau float64
}

// DefaultServerConfig is FedAvg at learning rate 1, with Reddi et al.'s
// beta1 0.9, beta2 0.99 and tau 1e-3 for the optimizers that read them.
func DefaultServerConfig() ServerConfig {
	return ServerConfig{Name: "fedavg", LR: 1, Beta1: 0.9, Beta2: 0.99, Tau: 1e-3}
}

// ServerOptimizers are the names NewServerOptimizer knows.
var ServerOptimizers = []string{"fedavg", "fedavgm", "fedadam", "fedyogi", "fedadagrad"}

// NewServerOptimizer returns the optimizer c names for estimates of
// perturb's kind (weights or updates).
func NewServerOptimizer(c ServerConfig, perturb string) (ServerOptimizer, error) {
	if perturb != "weights" && perturb != "updates" {
		return nil, fmt.Errorf("fl: perturb %q: want weights or updates", perturb)
	}
	if c.Name == "fedavg" {
		// Weights mode mixes the two models, so a step beyond 1 would
		// extrapolate past the estimate.
		if !(c.LR > 0 && c.LR <= 1) {
			return nil, fmt.Errorf("fl: fedavg's global learning rate %v must be in (0, 1]", c.LR)
		}
		return fedAvg{lr: c.LR, weights: perturb == "weights"}, nil
	}
	switch {
	case !(c.LR > 0) || math.IsInf(c.LR, 0):
		return nil, fmt.Errorf("fl: %s's server learning rate %v must be positive and finite", c.Name, c.LR)
	case !(c.Beta1 >= 0 && c.Beta1 < 1):
		return nil, fmt.Errorf("fl: %s's beta1 %v must be in [0, 1)", c.Name, c.Beta1)
	}
	a := adaptive{c: c, weights: perturb == "weights"}
	switch c.Name {
	case "fedavgm":
		return a, nil
	case "fedadam", "fedyogi", "fedadagrad":
		if c.Name != "fedadagrad" && !(c.Beta2 >= 0 && c.Beta2 < 1) {
			return nil, fmt.Errorf("fl: %s's beta2 %v must be in [0, 1)", c.Name, c.Beta2)
		}
		if !(c.Tau > 0) || math.IsInf(c.Tau, 0) {
			return nil, fmt.Errorf("fl: %s's tau %v must be positive and finite", c.Name, c.Tau)
		}
		return a, nil
	}
	return nil, fmt.Errorf("fl: server optimizer %q: want one of %v", c.Name, ServerOptimizers)
}

// fedAvg is the global learning rate of LDP-FL and CorBin-FL: the new
// model mixes the old with the estimate (weights), or adds the scaled
// estimated update (updates).
type fedAvg struct {
	lr      float64
	weights bool
}

func (fedAvg) Moments() int { return 0 }

func (f fedAvg) String() string { return fmt.Sprintf("fedavg (lr %g)", f.lr) }

func (f fedAvg) Step(global [][]float32, est [][]float64, _ [][]float32) ([][]float64, [][]float32) {
	next := make([][]float64, len(global))
	for i, g := range global {
		next[i] = make([]float64, len(g))
		for j, w := range g {
			if f.weights {
				next[i][j] = (1-f.lr)*float64(w) + f.lr*est[i][j]
			} else {
				next[i][j] = float64(w) + f.lr*est[i][j]
			}
		}
	}
	return next, nil
}

// adaptive is FedAvgM and Reddi et al.'s adaptive optimizers. Their
// moments are one tensor per model tensor for fedavgm (m), two for the
// others (m, then v).
type adaptive struct {
	c       ServerConfig
	weights bool
}

func (a adaptive) Moments() int {
	if a.c.Name == "fedavgm" {
		return 1
	}
	return 2
}

func (a adaptive) String() string {
	switch a.c.Name {
	case "fedavgm":
		return fmt.Sprintf("fedavgm (lr %g, momentum %g)", a.c.LR, a.c.Beta1)
	case "fedadagrad":
		return fmt.Sprintf("fedadagrad (lr %g, beta1 %g, tau %g)", a.c.LR, a.c.Beta1, a.c.Tau)
	}
	return fmt.Sprintf("%s (lr %g, beta1 %g, beta2 %g, tau %g)", a.c.Name, a.c.LR, a.c.Beta1, a.c.Beta2, a.c.Tau)
}

func (a adaptive) Step(global [][]float32, est [][]float64, moments [][]float32) ([][]float64, [][]float32) {
	n := len(global)
	second := a.Moments() == 2
	after := make([][]float32, a.Moments()*n)
	next := make([][]float64, n)
	c := a.c
	for i, g := range global {
		next[i] = make([]float64, len(g))
		m := make([]float32, len(g))
		var v []float32
		if second {
			v = make([]float32, len(g))
		}
		for j, w := range g {
			d := est[i][j]
			if a.weights {
				d -= float64(w)
			}
			var m0, v0 float64
			if moments != nil {
				m0 = float64(moments[i][j])
				if second {
					v0 = float64(moments[n+i][j])
				}
			} else {
				v0 = c.Tau * c.Tau
			}
			if !second { // FedAvgM: heavy-ball momentum on the pseudo-gradient
				m[j] = float32(c.Beta1*m0 + d)
				next[i][j] = float64(w) + c.LR*float64(m[j])
				continue
			}
			m1 := c.Beta1*m0 + (1-c.Beta1)*d
			d2 := d * d
			var v1 float64
			switch c.Name {
			case "fedadagrad":
				v1 = v0 + d2
			case "fedadam":
				v1 = c.Beta2*v0 + (1-c.Beta2)*d2
			case "fedyogi":
				v1 = v0 - (1-c.Beta2)*d2*sign(v0-d2)
			}
			m[j], v[j] = float32(m1), float32(v1)
			// The step reads the moments as stored, so that a run resumed
			// from a checkpoint steps exactly as one that was not stopped.
			next[i][j] = float64(w) + c.LR*float64(m[j])/(math.Sqrt(float64(v[j]))+c.Tau)
		}
		after[i] = m
		if second {
			after[n+i] = v
		}
	}
	return next, after
}

func sign(x float64) float64 {
	switch {
	case x > 0:
		return 1
	case x < 0:
		return -1
	}
	return 0
}
