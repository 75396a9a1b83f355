package fl

import (
	"errors"
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

	// When the server steps (round.go, async.go), and on what clock.

	// Mode is "sync" (or ""), rounds that each wait for their clients, or
	// "async", FedBuff's buffered asynchronous training (async.go):
	// Concurrency clients train at once, each from the model current when
	// it starts, and the server steps every Buffer uploads; each buffer is
	// one of the run's Rounds.
	Mode        string
	Concurrency int // async: clients training at once (M)
	Buffer      int // async: uploads per server step (K), at most Concurrency
	// Staleness weighs an asynchronous upload by how many server steps
	// old its model is (its staleness s); the zero value is constant.
	Staleness Staleness
	// MaxStaleness refuses an asynchronous upload more than this many
	// steps stale before it sends its payload: it costs its client no
	// privacy, and the report counts it as refused. 0: no limit.
	MaxStaleness int
	// Speed is a simulation's model of its clients' speeds (speed.go),
	// which drives a virtual clock: a synchronous round lasts as long as
	// its slowest uploading client. The zero Speed is no clock (sync) or
	// DefaultAsyncSpeed (async).
	Speed Speed
	// OverSelect, in a synchronous run, samples ceil(ClientsPerRound (1 +
	// OverSelect)) clients and keeps the ClientsPerRound that finish
	// first; the others are dropped before they are paired or send
	// anything. A simulation ranks them on its speed model's clock (it
	// needs one); a deployed server gives each a task and keeps the first
	// to say they are done (Oversample, BeginKept). 0: no over-selection.
	OverSelect float64
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
	if err := s.ValidateMode(); err != nil {
		return err
	}
	return s.Range.validate()
}

// ValidateMode checks the settings of the mode, the clock and
// over-selection against each other: New does, and a configuration can
// before its data is loaded.
func (s Strategy) ValidateMode() error {
	switch {
	case s.Mode != "" && s.Mode != "sync" && s.Mode != "async":
		return fmt.Errorf("fl: mode %q: want sync or async", s.Mode)
	case !(s.OverSelect >= 0 && s.OverSelect <= 10):
		return fmt.Errorf("fl: over_select %v must be in [0, 10]", s.OverSelect)
	case s.MaxStaleness < 0:
		return fmt.Errorf("fl: max_staleness %d must not be negative (0: no limit)", s.MaxStaleness)
	}
	if !s.async() {
		switch {
		case s.Concurrency != 0 || s.Buffer != 0 || s.MaxStaleness != 0 || !s.Staleness.constant():
			return errors.New("fl: concurrency, buffer, staleness and max_staleness are for mode async; a synchronous round takes clients_per_round")
		case s.OverSelect > 0 && s.ClientsPerRound == 0:
			return errors.New("fl: over_select samples more than clients_per_round clients: set clients_per_round below the clients")
		case s.OverSelect > 0 && s.Sampling == "poisson":
			return errors.New("fl: over_select keeps a fixed number of clients: it does not go with poisson sampling")
		}
		return nil
	}
	switch {
	case s.Concurrency < 1 || s.Buffer < 1:
		return fmt.Errorf("fl: mode async needs concurrency (clients training at once, %d) and buffer (uploads per server step, %d) of at least 1", s.Concurrency, s.Buffer)
	case s.Buffer > s.Concurrency:
		return fmt.Errorf("fl: buffer %d is more than concurrency %d: a buffer fills with uploads of different clients, at most concurrency of them training at once", s.Buffer, s.Concurrency)
	case s.ClientsPerRound != 0 || s.Sampling == "poisson":
		return errors.New("fl: mode async starts a client whenever one finishes, concurrency at a time: clients_per_round and sampling are for mode sync")
	case s.OverSelect != 0:
		return errors.New("fl: over_select is for mode sync: an asynchronous server never waits for the slowest")
	}
	return nil
}

// async reports whether the run trains asynchronously.
func (s Strategy) async() bool { return s.Mode == "async" }

// weight is the FedAvg weight of a client with n examples: n, capped at
// MaxExamples.
func (s Strategy) weight(n int) int {
	if s.MaxExamples > 0 {
		return min(n, s.MaxExamples)
	}
	return n
}
