package fl

import (
	"context"
	"errors"
	"fmt"
	"math"
	"runtime"
	"time"

	"github.com/fedpq/fedpq/corr"
	"github.com/fedpq/fedpq/data"
	"github.com/fedpq/fedpq/mech"
	"github.com/fedpq/fedpq/model"
	"github.com/fedpq/fedpq/privacy"
	"github.com/fedpq/fedpq/report"
	"github.com/fedpq/fedpq/robust"
)

// Trainer trains and evaluates one worker's copy of the model;
// *model.Trainer is one.
type Trainer interface {
	Train(ctx context.Context, weights [][]float32, x []float32, y []int32, idx []int, cfg model.TrainConfig) ([][]float32, float64, error)
	Evaluate(weights [][]float32, x []float32, y []int32, idx []int) (acc, loss float64, err error)
}

// Config is everything about a federated run that the round engine uses.
type Config struct {
	Rounds    int
	Dropout   float64 // probability that a sampled client drops out before it uploads
	Mechanism string
	Mech      mech.Config
	Transfer  bool // paired mechanisms: the leader sends its shared bits, sealed
	// Perturb is "weights" (clients send their trained weights, as LDP-FL
	// and CorBin-FL do) or "updates" (trained minus global, as JoPEQ does).
	Perturb string
	// Strategy is what the server decides each round: which clients, the
	// range, the local objective, the aggregation and the server step.
	Strategy
	// Patience reloads the best global model seen after this many
	// evaluations without a better accuracy (CorBin-FL); 0 never reloads.
	Patience  int
	EvalEvery int // evaluate on the test set every this many rounds (and at the last)
	Epochs    int // local epochs
	Batch     int // local minibatch size
	Seed      uint64
	Workers   int // clients trained in parallel (0: all cores)
	// LedgerDelta is the delta of the ledger's composed bounds
	// (advanced, optimal and zCDP composition).
	LedgerDelta float64
	// SecureAggregation masks the uploads' integer fields with SecAgg+
	// (package secagg), so that the server learns only their sum. It needs
	// a mechanism whose decode is affine in integer fields (mech.Integer)
	// and equal weights.
	SecureAggregation bool
	// SecureSumOnly, in a simulation under secure aggregation, adds the
	// uploads' integer fields modulo 2^k as the protocol's unmasking
	// returns them, without running the protocol: the same models and
	// ledger, bit for bit, without its cost (at 600 clients a round,
	// seconds of key agreement and dealing; TFF's and the papers' DDG and
	// Skellam simulations do the same). The rounds' setup bytes and
	// seconds then leave the protocol out. It needs every client to
	// upload (no dropout): which rounds the protocol loses to dropouts
	// only running it shows.
	SecureSumOnly bool
	// Shuffle puts LDP-FL's trusted shuffler between the clients and the
	// server: each parameter's reports reach it unlinked from their
	// clients and from each other. It needs a mechanism with a
	// fixed-width report per parameter that decodes on its own, and equal
	// weights.
	Shuffle bool
	// Byzantine is the attack of the ByzantineFraction of the clients
	// (rounded to a whole number of clients, chosen from the run's secret
	// and fixed for the run); the zero Attack and 0 are an honest run.
	Byzantine         Attack
	ByzantineFraction float64
	// DP is user-level DP-FedAvg: each client's whole update clipped in
	// L2 norm, noise on the round's sum; the zero DPFedAvg is off.
	DP DPFedAvg
}

// Model is what the engine needs of an architecture; *model.Model is one.
type Model interface {
	Tensors() []model.TensorSpec
	Init(seed uint64) [][]float32
}

// Task is what is trained: the model, one Trainer per worker, the data and
// each client's examples.
type Task struct {
	Model    Model
	Trainers []Trainer
	Data     *data.Federated
	Clients  [][]int // client k's examples in Data.Train
	// Remote is the number of clients of a server, whose clients hold
	// their own data and Enroll; Clients is then nil.
	Remote int
	// Validation is examples of Data.Train that no client holds, on which
	// patience selects the model; nil: patience looks at the test set.
	Validation []int
	// Secret seeds every round's randomness: sampling, pairing, group
	// order, and the keys of the dithers and group bits a server shares
	// with its clients. Nil derives it from the seed, which a simulation
	// wants (reproducible) and a server must not (its clients learn the
	// seed from the configuration).
	Secret []byte
	// RunID names a server's run; secure rounds bind their graph's seed
	// to it (secagg.SessionSeed). Nil in a simulation.
	RunID []byte
}

func (c *Config) validate(clients int) error {
	switch {
	case c.Rounds < 1:
		return fmt.Errorf("fl: rounds %d must be at least 1", c.Rounds)
	case clients < 1:
		return errors.New("fl: no clients")
	case !(c.Dropout >= 0 && c.Dropout < 1):
		return fmt.Errorf("fl: dropout %v must be in [0, 1)", c.Dropout)
	case c.Perturb != "weights" && c.Perturb != "updates":
		return fmt.Errorf("fl: perturb %q: want weights or updates", c.Perturb)
	case c.Patience < 0:
		return fmt.Errorf("fl: patience %d must not be negative", c.Patience)
	case !(c.LedgerDelta > 0 && c.LedgerDelta < 1):
		return fmt.Errorf("fl: ledger delta %v must be in (0, 1)", c.LedgerDelta)
	case c.EvalEvery < 1:
		return fmt.Errorf("fl: eval-every %d must be at least 1", c.EvalEvery)
	case c.Epochs < 1 || c.Batch < 1:
		return fmt.Errorf("fl: epochs (%d) and batch (%d) must be at least 1", c.Epochs, c.Batch)
	case c.SecureSumOnly && !c.SecureAggregation:
		return errors.New("fl: secure-sum-only computes a secure round's sum without its protocol: it needs secure aggregation")
	case c.SecureSumOnly && c.Dropout > 0:
		return fmt.Errorf("fl: secure-sum-only computes the sum the protocol unmasks when every client uploads; with dropout %v only running the protocol shows which rounds it loses", c.Dropout)
	}
	return c.Strategy.validate()
}

// Weight is the FedAvg weight the engine gives a client that trains on n
// examples: n, or MaxExamples if that is smaller.
func (e *Engine) Weight(n int) int { return e.cfg.weight(n) }

// Engine runs federated training. Its state (the global model, the best
// model and the privacy each client has spent) is all it keeps between
// rounds; clients' models exist only while they are trained and encoded.
type Engine struct {
	cfg     Config
	task    Task
	m       mech.Mechanism
	opt     ServerOptimizer
	moments [][]float32 // the server optimizer's, after the last round
	ldp     bool
	secret  []byte
	specs   []model.TensorSpec
	params  int
	sizes   []int   // what a client encodes: each tensor's size, or under DP-FedAvg the model's
	clip    float64 // DP-FedAvg: the next round's clip
	global  [][]float32
	prevUpd [][]float32 // updates mode: the last estimated update, for ranges
	radii   []float64   // range adaptive: each tensor's radius for the next round
	best    [][]float32
	bestAcc float64
	since   int   // evaluations since the best
	joined  []int // rounds each client took part in
	// ledger is privacy.Account's answer for the most-sampled client's
	// rounds (its Rounds), kept until they change: its optimal
	// composition costs milliseconds, and an asynchronous run of small
	// buffers asks for it at every step, mostly for the same rounds.
	ledger   *privacy.Ledger
	examples []int // each client's number of examples
	done     int   // rounds completed
	// minSum and minAlone are the fewest uploads any round summed, and
	// the fewest of them from clients whose partner's message was not in
	// the sum (-1: no round yet): what a server that sees only sums
	// (secure aggregation, a shuffler) has to hide a client among.
	minSum, minAlone int
	start            time.Time
	before           time.Duration // wall time of the run before it was restored
	byz              []bool        // the clients that attack (byzantine.go); nil: none
	encode           encoder       // honest, or wrapped by the attackers
	// DP-FedAvg: the accountant of the rounds for whoever gets the
	// models, and an L2 mechanism's shares of the noise in a round's sum
	// and the chance that a round has more clients (noiseShares).
	acct   *privacy.Accountant
	shares int
	tail   float64
	// DP-FTRL: the tree, its source, and its noise on the last prefix sum.
	tree     *privacy.Tree
	treeSrc  *normalStream
	treeLast []float64
	// clock is the simulation's speed model (nil: none), now the virtual
	// time in seconds at the end of the last round or buffer, and async an
	// asynchronous run's clients in flight (async.go).
	clock *clock
	now   float64
	async *asyncLoop
}

// elapsed is the run's wall time so far, across restarts.
func (e *Engine) elapsed() float64 { return (e.before + time.Since(e.start)).Seconds() }

// New prepares a run: it validates the configuration and draws the initial
// global model from the seed.
func New(cfg Config, task Task) (*Engine, error) {
	n := len(task.Clients)
	if task.Clients == nil {
		n = task.Remote
	}
	if err := cfg.validate(n); err != nil {
		return nil, err
	}
	if len(task.Trainers) == 0 {
		return nil, errors.New("fl: no trainer")
	}
	examples := make([]int, n)
	for k, idx := range task.Clients {
		if len(idx) == 0 {
			return nil, fmt.Errorf("fl: client %d has no examples", k)
		}
		examples[k] = cfg.weight(len(idx))
	}
	if err := cfg.validateDPSettings(); err != nil {
		return nil, err
	}
	params := 0
	for _, s := range task.Model.Tensors() {
		params += size(s.Shape)
	}
	if err := cfg.PrepareDP(n, params); err != nil {
		return nil, err
	}
	m, err := mech.New(cfg.Mechanism, cfg.Mech)
	if err != nil {
		return nil, err
	}
	if err := cfg.validateDP(m); err != nil {
		return nil, err
	}
	info, _ := mech.Lookup(cfg.Mechanism)
	opt := cfg.Optimizer
	if opt == nil {
		if opt, err = NewServerOptimizer(cfg.Server, cfg.Perturb); err != nil {
			return nil, err
		}
	}
	if cfg.Workers <= 0 {
		cfg.Workers = runtime.GOMAXPROCS(0)
	}
	e := &Engine{
		cfg: cfg, task: task, m: m, opt: opt, ldp: info.LDP,
		secret:   task.Secret,
		specs:    task.Model.Tensors(),
		global:   task.Model.Init(cfg.Seed),
		joined:   make([]int, n),
		bestAcc:  math.Inf(-1),
		examples: examples,
		start:    time.Now(),
		minAlone: -1,
	}
	if e.secret == nil {
		e.secret = corr.SeedSecret(cfg.Seed)
	}
	e.encode = e.honest
	if cfg.SecureAggregation {
		if err := e.checkSecure(); err != nil {
			return nil, err
		}
	}
	if cfg.SecureSumOnly && task.Clients == nil {
		return nil, errors.New("fl: secure-sum-only is for simulations: a deployed server's clients run the protocol themselves")
	}
	if cfg.Shuffle {
		if err := e.checkShuffle(); err != nil {
			return nil, err
		}
	}
	if _, mean := cfg.Aggregator.(robust.Mean); mean {
		e.cfg.Aggregator = nil // the streaming mean: the model's size in memory, not n times it
	}
	if e.cfg.Aggregator != nil {
		if err := e.checkAggregator(); err != nil {
			return nil, err
		}
	}
	if err := checkInit(e.specs, e.global); err != nil {
		return nil, err
	}
	if err := e.setByzantine(n); err != nil {
		return nil, err
	}
	if err := e.setMode(n); err != nil {
		return nil, err
	}
	if cfg.Range.Kind == "adaptive" {
		if err := e.checkAdaptive(); err != nil {
			return nil, err
		}
		e.radii = make([]float64, len(e.specs))
		for i := range e.radii {
			e.radii[i] = cfg.Range.Radius
		}
	}
	var tensors []int
	for _, s := range e.specs {
		e.params += size(s.Shape)
		tensors = append(tensors, size(s.Shape))
	}
	e.sizes = cfg.Encoded(tensors)
	if cfg.DP.on() {
		e.clip = cfg.DP.Clip
		if _, err := e.updateNoise(); err != nil {
			return nil, err
		}
		e.acct = privacy.NewAccountant(privacy.Auto)
		if _, l2 := m.(mech.L2); l2 && cfg.DP.Noise > 0 {
			e.shares, e.tail = cfg.noiseShares(n)
		}
		if cfg.DP.Tree && cfg.DP.Noise > 0 {
			e.treeSrc, e.treeLast = &normalStream{}, make([]float64, e.params)
			if e.tree, err = privacy.NewTree(e.params, cfg.DP.Noise*cfg.DP.Clip, e.treeSrc, privacy.TreeOptions{}); err != nil {
				return nil, err
			}
		}
	}
	return e, nil
}

// checkInit checks a model's initial weights against its tensors: an
// external trainer's model (package extern) comes from another process.
func checkInit(specs []model.TensorSpec, w [][]float32) error {
	if len(w) != len(specs) {
		return fmt.Errorf("fl: the model's initial weights have %d tensors, its description %d", len(w), len(specs))
	}
	for i, s := range specs {
		if len(w[i]) != size(s.Shape) {
			return fmt.Errorf("fl: the model's initial tensor %s has %d values, want %d (shape %v)", s.Name, len(w[i]), size(s.Shape), s.Shape)
		}
		for j, v := range w[i] {
			if math.IsNaN(float64(v)) || math.IsInf(float64(v), 0) {
				return fmt.Errorf("fl: the model's initial tensor %s value %d is %v", s.Name, j, v)
			}
		}
	}
	return nil
}

func size(shape []int) int {
	n := 1
	for _, d := range shape {
		n *= d
	}
	return n
}

// Global is the current global model.
func (e *Engine) Global() [][]float32 { return e.global }

// Run trains the rounds left of cfg.Rounds (all of them, unless the engine
// was restored), calling observe after each; in mode async, the buffers
// (async.go).
func (e *Engine) Run(ctx context.Context, observe func(report.Round) error) error {
	if e.cfg.async() {
		return e.runAsync(ctx, observe)
	}
	for t := e.done + 1; t <= e.cfg.Rounds; t++ {
		r, err := e.round(ctx, t)
		if err != nil {
			return fmt.Errorf("round %d: %w", t, err)
		}
		if observe != nil {
			if err := observe(r); err != nil {
				return err
			}
		}
	}
	return nil
}

// Done is the number of rounds completed.
func (e *Engine) Done() int { return e.done }

// Rounds is the number of rounds the run has in all.
func (e *Engine) Rounds() int { return e.cfg.Rounds }
