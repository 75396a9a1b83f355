package fl

import (
	"context"
	"errors"
	"fmt"
	"math"
	"runtime"
	"sort"
	"sync"
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
	cfg      Config
	task     Task
	m        mech.Mechanism
	opt      ServerOptimizer
	moments  [][]float32 // the server optimizer's, after the last round
	ldp      bool
	secret   []byte
	specs    []model.TensorSpec
	params   int
	global   [][]float32
	prevUpd  [][]float32 // updates mode: the last estimated update, for ranges
	radii    []float64   // range adaptive: each tensor's radius for the next round
	best     [][]float32
	bestAcc  float64
	since    int   // evaluations since the best
	joined   []int // rounds each client took part in
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
	m, err := mech.New(cfg.Mechanism, cfg.Mech)
	if err != nil {
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
	if cfg.Range.Kind == "adaptive" {
		if err := e.checkAdaptive(); err != nil {
			return nil, err
		}
		e.radii = make([]float64, len(e.specs))
		for i := range e.radii {
			e.radii[i] = cfg.Range.Radius
		}
	}
	for _, s := range e.specs {
		e.params += size(s.Shape)
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
// was restored), calling observe after each.
func (e *Engine) Run(ctx context.Context, observe func(report.Round) error) error {
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

// upload is one simulated client's upload for a round.
type upload struct {
	pos int // the client's position in the round
	Upload
	err error
}

// round runs round t: every sampled client that does not drop out trains
// and uploads, in parallel over the workers.
func (e *Engine) round(ctx context.Context, t int) (report.Round, error) {
	p, err := e.Begin(t, nil)
	if err != nil {
		return report.Round{}, err
	}
	sel := p.Clients
	dropped := e.dropouts(t, len(sel))

	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	jobs := make(chan int)
	out := make(chan upload, e.cfg.Workers)
	var wg sync.WaitGroup
	for w := range min(e.cfg.Workers, len(e.task.Trainers)) {
		wg.Add(1)
		go func(tr Trainer) {
			defer wg.Done()
			for pos := range jobs {
				u := e.client(ctx, tr, p, pos)
				select {
				case out <- u:
				case <-ctx.Done():
					return
				}
			}
		}(e.task.Trainers[w])
	}
	go func() {
		defer close(jobs)
		for pos := range sel {
			if dropped[pos] {
				continue
			}
			select {
			case jobs <- pos:
			case <-ctx.Done():
				return
			}
		}
	}()
	go func() { wg.Wait(); close(out) }()

	// The server: add uploads in position order, so float sums are
	// reproducible; at most about Workers uploads wait out of order.
	pending := map[int]upload{}
	next := 0
	var firstErr error
	for u := range out {
		pending[u.pos] = u
		for ; next < len(sel); next++ {
			if dropped[next] {
				continue
			}
			u, ok := pending[next]
			if !ok {
				break
			}
			delete(pending, next)
			if firstErr != nil {
				continue
			}
			// An attacker whose message left the support (scale:S
			// under none, which does not clip, beyond its 1000 r) is
			// refused and the round goes on without it, counted as
			// dropped, as a deployed server does; any other refusal is
			// a bug, and stops the run.
			if u.err == nil {
				if err := p.Add(u.pos, u.Upload); err != nil && !e.attacker(sel[u.pos]) {
					u.err = err
				}
			}
			if u.err != nil {
				firstErr = fmt.Errorf("client %d: %w", sel[u.pos], u.err)
				cancel()
			}
		}
	}
	if firstErr != nil {
		return report.Round{}, firstErr
	}
	if err := ctx.Err(); err != nil {
		return report.Round{}, err
	}
	return e.End(p)
}

// sample draws round t's clients from those online: a uniformly random
// subset of ClientsPerRound, in increasing order.
func (e *Engine) sample(t int, online []int) []int {
	k := e.cfg.ClientsPerRound
	if k <= 0 || k >= len(online) {
		return append([]int(nil), online...)
	}
	perm := make([]int, len(online))
	corr.Shuffle(corr.Derive(e.secret, "sample", uint64(t)), perm)
	sel := perm[:k]
	sort.Ints(sel)
	for i, j := range sel {
		sel[i] = online[j]
	}
	return sel
}

// dropouts draws which of the round's clients drop out before uploading.
// They were paired all the same: a partner left alone is an exact ldpq
// client, and the mean divides by the uploads received.
func (e *Engine) dropouts(t, n int) []bool {
	d := make([]bool, n)
	if e.cfg.Dropout == 0 {
		return d
	}
	src := corr.Derive(e.secret, "dropout", uint64(t))
	for i := range d {
		d[i] = src.Float64() < e.cfg.Dropout
	}
	return d
}

// client trains the client at position pos of round p from the global
// model and encodes its weights or update, tensor by tensor.
func (e *Engine) client(ctx context.Context, tr Trainer, p *Plan, pos int) upload {
	k := p.Clients[pos]
	u := upload{pos: pos, Upload: Upload{Examples: e.examples[k]}}
	train := e.task.Data.Train
	local, loss, err := tr.Train(ctx, p.Global, train.X, train.Y, e.task.Clients[k],
		model.TrainConfig{Epochs: e.cfg.Epochs, Batch: e.cfg.Batch, Seed: seedOf(e.secret, "local", p.T, k), Client: k, Round: p.T, ProxMu: e.cfg.ProxMu})
	if err != nil {
		u.err = err
		return u
	}
	u.Loss = loss
	slot, err := p.Pairing.ClientSlot(pos, e.params)
	if err != nil {
		u.err = err
		return u
	}
	u.Payloads, u.err = e.encode(k, p, local, slot)
	return u
}

// seedOf derives a 64-bit seed for one purpose of client k in round t.
func seedOf(secret []byte, purpose string, t, k int) uint64 {
	return corr.Derive(secret, purpose, uint64(t), uint64(k)).Uint64()
}

// bits is the payload size of one client's upload.
func (e *Engine) bits() int {
	b := 0
	for _, s := range e.specs {
		b += e.m.Bits(size(s.Shape))
	}
	return b
}

// update applies the round's estimate to the global model through the
// server optimizer, unless the estimate, or the model, update or moments it
// makes once written as float32, is not finite (a float64 that fits can
// still overflow a float32): then it returns why and leaves the model, the
// moments and the last update as they were. So the global model is always
// finite, whatever the clients sent.
func (e *Engine) update(est [][]float64) error {
	for i, x := range est {
		for j, v := range x {
			if math.IsNaN(v) || math.IsInf(v, 0) {
				return fmt.Errorf("aggregate not applied: tensor %s[%d] of the estimate is %v", e.specs[i].Name, j, v)
			}
			if e.cfg.Perturb == "updates" && math.IsInf(float64(float32(v)), 0) {
				return fmt.Errorf("aggregate not applied: tensor %s[%d] of the update is %g, beyond float32", e.specs[i].Name, j, v)
			}
		}
	}
	next, moments := e.opt.Step(e.global, est, e.moments)
	for i, t := range next {
		for j, v := range t {
			if math.IsInf(float64(float32(v)), 0) || math.IsNaN(v) {
				return fmt.Errorf("aggregate not applied: tensor %s[%d] of the model would be %v (the estimate %g overflows float32)", e.specs[i].Name, j, float32(v), est[i][j])
			}
		}
	}
	for i, t := range moments {
		for j, v := range t {
			if math.IsInf(float64(v), 0) || math.IsNaN(float64(v)) {
				return fmt.Errorf("aggregate not applied: the %s's moment %d of tensor %s[%d] would be %v", e.opt, i/len(e.specs), e.specs[i%len(e.specs)].Name, j, v)
			}
		}
	}
	for i, g := range e.global {
		for j := range g {
			g[j] = float32(next[i][j])
		}
	}
	e.moments = moments
	if e.cfg.Perturb == "updates" {
		e.prevUpd = make([][]float32, len(est))
		for i, v := range est {
			e.prevUpd[i] = make([]float32, len(v))
			for j, x := range v {
				e.prevUpd[i][j] = float32(x)
			}
		}
	}
	return nil
}

// evaluate scores the global model on the test set and applies patience,
// judged on the validation split when there is one.
func (e *Engine) evaluate(r *report.Round) error {
	test := e.task.Data.Test
	acc, loss, err := e.task.Trainers[0].Evaluate(e.global, test.X, test.Y, nil)
	if err != nil {
		return err
	}
	r.Accuracy, r.Loss = &acc, &loss
	judged := acc
	if v := e.task.Validation; v != nil {
		train := e.task.Data.Train
		val, _, err := e.task.Trainers[0].Evaluate(e.global, train.X, train.Y, v)
		if err != nil {
			return err
		}
		r.ValAccuracy, judged = &val, val
	}
	if judged > e.bestAcc {
		e.bestAcc, e.since = judged, 0
		e.best = clone(e.global)
		return nil
	}
	e.since++
	// There may be no best to reload: a NaN accuracy beats nothing, and a
	// restored State may carry a best accuracy without its model.
	if e.cfg.Patience > 0 && e.since >= e.cfg.Patience && e.best != nil {
		e.global = clone(e.best)
		e.moments = nil // they led away from the best: the optimizer starts afresh
		e.since = 0
		r.Restored = true
	}
	return nil
}

func clone(w [][]float32) [][]float32 {
	c := make([][]float32, len(w))
	for i, v := range w {
		c[i] = append([]float32(nil), v...)
	}
	return c
}

// most is the number of rounds of the client that took part in the most.
func (e *Engine) most() int {
	most := 0
	for _, n := range e.joined {
		most = max(most, n)
	}
	return most
}

// spent is the per-parameter eps the most-used client has spent, by basic
// composition over the rounds it took part in.
func (e *Engine) spent() float64 { return float64(e.most()) * e.cfg.Mech.Epsilon }

// Ledger is the privacy spent by the client that took part in the most
// rounds (nil when the mechanism is not LDP), and the rounds each client
// took part in.
func (e *Engine) Ledger() (*privacy.Ledger, []int, error) {
	if !e.ldp {
		return nil, e.joined, nil
	}
	l, err := privacy.Account(privacy.Budget{Mechanism: e.cfg.Mechanism, Epsilon: e.cfg.Mech.Epsilon, MechDelta: e.mechDelta()},
		e.params, e.most(), e.cfg.LedgerDelta)
	if err != nil {
		return nil, e.joined, err
	}
	return &l, e.joined, nil
}

// mechDelta is the gaussian mechanism's delta per parameter per round.
func (e *Engine) mechDelta() float64 {
	if e.cfg.Mech.Delta > 0 {
		return e.cfg.Mech.Delta
	}
	return mech.DefaultConfig().Delta
}
