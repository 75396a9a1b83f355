package fl

import (
	"fmt"
	"math"

	"github.com/fedpq/fedpq/robust"
)

// Strategy is what the server decides in each round, in the spirit of
// Flower's Strategy (configure_fit, aggregate_fit): what the round asks of
// its clients, how their decoded messages become one estimate, and how the
// estimate moves the global model. Each decision is a part of its own, an
// interface where there is a family to choose from (robust.Rule,
// ServerOptimizer: fedpq's, or the caller's own), so that any mechanism
// runs under any strategy that can see what it needs. What a mechanism
// asks of a round comes from its own interfaces (mech.Variancer,
// mech.Integer, mech.RandomizedResponse), never from its name. The simulation and the deployed server run the same
// Strategy through Engine.Begin, Plan.Add and Engine.End; only where the
// uploads come from differs.
//
// Every part reads only what the server already holds, so no strategy
// changes a privacy guarantee: each is post-processing of the clients'
// messages, and the ledger of a run is the same whatever its strategy.
type Strategy struct {
	// What a round asks of its clients (Engine.Begin).

	// ClientsPerRound is the number of clients sampled per round,
	// uniformly from those online; 0, or more than there are: all.
	ClientsPerRound int
	// Sampling is how: "fixed" (or ""), exactly ClientsPerRound of them,
	// or "poisson", each client online independently with probability
	// q = ClientsPerRound / the clients enrolled, so that a round has
	// ClientsPerRound clients on average. Either is the server's secret,
	// uniform draw, which is what amplification by sampling asks.
	Sampling string
	// Range is the clipping range of each tensor, public: the server
	// announces it with the model.
	Range RangeRule
	// ProxMu is FedProx's mu, passed to every client's local training
	// (model.TrainConfig.ProxMu); 0: plain local training.
	ProxMu float64

	// How the round's decoded messages become one estimate (Plan.Add and
	// Engine.End).

	// Weighting is "examples" (FedAvg: each client weighs its number of
	// examples) or "mean" (every upload counts the same).
	Weighting string
	// MaxExamples caps a client's FedAvg weight: a client with more
	// examples, or claiming more, is weighed as MaxExamples (0: no cap).
	MaxExamples int
	// Aggregator replaces the streaming mean where the mean will not do
	// (package robust); nil is the streaming mean. It needs each client's
	// message and equal weights: neither secure aggregation nor the
	// shuffler, and weighting mean.
	Aggregator robust.Rule

	// How the estimate moves the global model (Engine.End).

	// Server names a server optimizer of fedpq's and its hyperparameters:
	// FedAvg at the global learning rate lambda (global = (1-lambda) global
	// + lambda estimate for weights, global += lambda estimate for
	// updates), or one of Reddi et al.'s on the pseudo-gradient
	// (NewServerOptimizer).
	Server ServerConfig
	// Optimizer, when not nil, is a ServerOptimizer of the caller's own,
	// used in place of the one Server names.
	Optimizer ServerOptimizer
}

func (s Strategy) validate() error {
	switch {
	case s.ClientsPerRound < 0:
		return fmt.Errorf("fl: clients per round %d must not be negative", s.ClientsPerRound)
	case s.Sampling != "" && s.Sampling != "fixed" && s.Sampling != "poisson":
		return fmt.Errorf("fl: sampling %q: want fixed or poisson", s.Sampling)
	case s.Weighting != "examples" && s.Weighting != "mean":
		return fmt.Errorf("fl: weighting %q: want examples or mean", s.Weighting)
	case s.MaxExamples < 0:
		return fmt.Errorf("fl: max examples %d must not be negative", s.MaxExamples)
	case !(s.ProxMu >= 0) || math.IsInf(s.ProxMu, 0):
		return fmt.Errorf("fl: prox_mu %v must be finite and at least 0", s.ProxMu)
	}
	return s.Range.validate()
}

// weight is the FedAvg weight of a client with n examples: n, capped at
// MaxExamples.
func (s Strategy) weight(n int) int {
	if s.MaxExamples > 0 {
		return min(n, s.MaxExamples)
	}
	return n
}
