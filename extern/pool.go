// Package extern trains fedpq's clients in the user's own framework: a
// trainer process (a PyTorch script, with the adapter in python/) that
// speaks a small protocol on its stdin and stdout (docs/trainer.md). It
// implements the round engine's seams, fl.Model (the trainer describes
// the model's named tensors and their initial values) and fl.Trainer
// (train a client from given weights on given examples; evaluate), so
// that fedpq keeps everything that protects the client: ranges, clipping,
// encoding, pairing, secure aggregation and the ledger. Nothing a trainer
// returns leaves fedpq before the round engine has clipped and encoded it.
//
// A Pool keeps a few trainer processes, started once and reused for every
// client and round: each Trainer it hands out owns one process, which it
// restarts if the process died. A trainer is sent each dataset's examples
// once (the examples a request needs that it does not hold yet), and then
// indices; every train request carries the client's seed, so that a
// result does not depend on which process computed it.
//
// The trainer runs on the client's side and is trusted by that client
// only. Every reply is checked before use: the tensors the model has and
// no others, each of its shape, finite values, the example count sent,
// a finite loss; a trainer that hangs, exits or breaks the framing is
// stopped and the error names it, with its last lines of stderr.
package extern

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"slices"
	"sync"
	"time"

	"github.com/fedpq/fedpq/extern/internal/frame"
	"github.com/fedpq/fedpq/model"
)

// Protocol is the version of the trainer protocol fedpq speaks
// (docs/trainer.md); a trainer's hello must name it.
const Protocol = frame.Protocol

// Spec is what a pool's trainers are set up with: the seed of the initial
// model, one example's shape (HWC for images, as fedpq's datasets hold
// them), the number of classes, and the local optimizer's settings, which
// every train request carries.
type Spec struct {
	Seed      uint64
	Input     []int
	Classes   int
	Optimizer model.Optimizer
}

// Pool is a set of trainer processes running one command, and the model
// they train. It is an fl.Model: Tensors are the trainer's, Init the
// values it drew for the spec's seed.
type Pool struct {
	opts Options
	spec Spec

	specs []model.TensorSpec // the model as the first trainer described it
	init  [][]float32
	name  string // the trainer's name, from its hello

	mu       sync.Mutex
	trainers []*Trainer
	closed   bool

	// closing is cancelled when Close gives up waiting: every process
	// still running is then stopped.
	closing context.Context
	stop    context.CancelFunc
}

// NewPool starts the first trainer of the command in o and has it
// describe its model for spec. More trainers start as Trainer hands them
// out.
func NewPool(o Options, spec Spec) (*Pool, error) {
	if o.Timeout == 0 {
		o.Timeout = DefaultTimeout
	}
	if o.Timeout < 0 {
		return nil, fmt.Errorf("trainer timeout %v must be positive", o.Timeout)
	}
	if spec.Classes < 2 || len(spec.Input) == 0 {
		return nil, fmt.Errorf("trainer: a model of %d classes for inputs of shape %v", spec.Classes, spec.Input)
	}
	p := &Pool{opts: o, spec: spec}
	p.closing, p.stop = context.WithCancel(context.Background())
	t := p.newTrainer()
	t.mu.Lock()
	err := t.ensure()
	t.mu.Unlock()
	if err != nil {
		t.close()
		return nil, err
	}
	return p, nil
}

// Tensors lists the model's tensors, as the trainer named and shaped them.
func (p *Pool) Tensors() []model.TensorSpec {
	out := make([]model.TensorSpec, len(p.specs))
	for i, s := range p.specs {
		out[i] = model.TensorSpec{Name: s.Name, Shape: slices.Clone(s.Shape)}
	}
	return out
}

// Init returns the initial weights the trainer drew for the pool's seed
// (a fresh copy); for another seed, nil (the round engine refuses it).
func (p *Pool) Init(seed uint64) [][]float32 {
	if seed != p.spec.Seed {
		return nil
	}
	out := make([][]float32, len(p.init))
	for i, w := range p.init {
		out[i] = slices.Clone(w)
	}
	return out
}

// Name is the trainer's name for itself, from its hello.
func (p *Pool) Name() string { return p.name }

// Command is the command line the pool's trainers run.
func (p *Pool) Command() string { return p.opts.Command }

// Trainer hands out the next trainer: the first is the one NewPool
// started; each later one starts a process of its own, in the background
// (its first request waits for it). A Trainer is not safe for concurrent
// use: give each worker its own.
func (p *Pool) Trainer() (*Trainer, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return nil, errors.New("trainer: the pool is closed")
	}
	if len(p.trainers) == 1 && !p.trainers[0].handed {
		p.trainers[0].handed = true
		return p.trainers[0], nil
	}
	t := p.newTrainerLocked()
	t.handed = true
	t.mu.Lock()
	go func() {
		defer t.mu.Unlock()
		t.startErr = t.ensure()
	}()
	return t, nil
}

func (p *Pool) newTrainer() *Trainer {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.newTrainerLocked()
}

func (p *Pool) newTrainerLocked() *Trainer {
	t := &Trainer{pool: p, id: len(p.trainers)}
	p.trainers = append(p.trainers, t)
	return t
}

// MinStartTimeout is the least time a trainer has for its start (its
// hello, and its setup reply): importing a framework such as torch can
// take long on a busy machine, longer than a short Options.Timeout meant
// to catch a hung request.
var MinStartTimeout = time.Minute

// startTimeout bounds a trainer's hello and setup reply.
func (p *Pool) startTimeout() time.Duration { return max(p.opts.Timeout, MinStartTimeout) }

// threads is the threads each trainer is asked to use: Options.Threads,
// or the machine's cores shared among the trainers handed out.
func (p *Pool) threads() int {
	if p.opts.Threads > 0 {
		return p.opts.Threads
	}
	p.mu.Lock()
	n := len(p.trainers)
	p.mu.Unlock()
	return max(1, runtime.NumCPU()/max(n, 1))
}

// Stats sums the pool's trainers' counts.
func (p *Pool) Stats() Stats {
	p.mu.Lock()
	ts := slices.Clone(p.trainers)
	p.mu.Unlock()
	var s Stats
	for _, t := range ts {
		s.add(t.Stats())
	}
	s.Trainers = len(ts)
	return s
}

// Close stops every trainer: each is sent a bye and given a few seconds
// to exit before it is killed. A trainer still starting, or in the middle
// of a request, is killed after the same few seconds.
func (p *Pool) Close() error {
	p.mu.Lock()
	p.closed = true
	ts := slices.Clone(p.trainers)
	p.mu.Unlock()
	kill := time.AfterFunc(closeGrace, p.stop)
	defer kill.Stop()
	var wg sync.WaitGroup
	for _, t := range ts {
		wg.Add(1)
		go func() { defer wg.Done(); t.close() }()
	}
	wg.Wait()
	return nil
}

// Stats count what a trainer did, and where the time went: Seconds is the
// wall time of its train and evaluate calls as fedpq saw them (sending
// examples and weights, the process switches, reading and checking the
// reply, and the trainer's own code); UserSeconds the part the trainer
// reports spending in the user's code. Their difference is the
// protocol's cost.
type Stats struct {
	Trainers     int     `json:"trainers"`      // handed out
	Starts       int     `json:"starts"`        // processes started (restarts included)
	StartSeconds float64 `json:"start_seconds"` // until their setup replies, summed
	Requests     int     `json:"requests"`      // train and evaluate requests answered
	Seconds      float64 `json:"seconds"`
	UserSeconds  float64 `json:"user_seconds"`
	BytesSent    int64   `json:"bytes_sent"`     // to the trainers, examples included
	BytesRead    int64   `json:"bytes_received"` // from them
	Examples     int64   `json:"examples_sent"`  // examples (rows) sent
	DataSeconds  float64 `json:"data_seconds"`   // of Seconds, sending examples (once per process and example)
}

// Overhead is the protocol's share of the requests' time:
// (Seconds-UserSeconds)/UserSeconds.
func (s Stats) Overhead() float64 {
	if s.UserSeconds <= 0 {
		return 0
	}
	return (s.Seconds - s.UserSeconds) / s.UserSeconds
}

func (s *Stats) add(o Stats) {
	s.Starts += o.Starts
	s.StartSeconds += o.StartSeconds
	s.Requests += o.Requests
	s.Seconds += o.Seconds
	s.UserSeconds += o.UserSeconds
	s.BytesSent += o.BytesSent
	s.BytesRead += o.BytesRead
	s.Examples += o.Examples
	s.DataSeconds += o.DataSeconds
}

// describe checks a setup reply's tensors and values; the first trainer's
// reply defines the pool's model, and every later one must describe the
// same tensors.
func (p *Pool) describe(t *Trainer, f *frame.Frame) error {
	bad := func(format string, a ...any) error {
		return &ReplyError{Trainer: t.proc.label(), What: "setup", Reason: fmt.Sprintf(format, a...)}
	}
	if f.H.Type != "model" {
		return bad("a %q message, want model", f.H.Type)
	}
	if len(f.H.Arrays) > 0 || len(f.H.Tensors) == 0 {
		return bad("%d tensors and %d other arrays: a model is one or more float32 tensors", len(f.H.Tensors), len(f.H.Arrays))
	}
	specs := make([]model.TensorSpec, len(f.H.Tensors))
	seen := map[string]bool{}
	for i, a := range f.H.Tensors {
		if a.DType != "float32" {
			return bad("tensor %q is %s, want float32", a.Name, a.DType)
		}
		if a.Name == "" || seen[a.Name] {
			return bad("tensor %d's name %q is empty or repeated", i, a.Name)
		}
		if a.Elems() < 1 {
			return bad("tensor %q has shape %v: no values", a.Name, a.Shape)
		}
		seen[a.Name] = true
		specs[i] = model.TensorSpec{Name: a.Name, Shape: slices.Clone(a.Shape)}
	}
	if p.specs == nil {
		ws, err := t.tensors(f, specs, "setup")
		if err != nil {
			return err
		}
		p.specs, p.init, p.name = specs, ws, t.hello
		return nil
	}
	if why := sameSpecs(p.specs, specs); why != "" {
		return bad("it describes another model than trainer 0 did: %s", why)
	}
	return nil
}

// sameSpecs says how b differs from a, or "" where they are the same
// tensors in the same order.
func sameSpecs(a, b []model.TensorSpec) string {
	if len(a) != len(b) {
		return fmt.Sprintf("%d tensors, not %d", len(b), len(a))
	}
	for i := range a {
		if a[i].Name != b[i].Name || !slices.Equal(a[i].Shape, b[i].Shape) {
			return fmt.Sprintf("tensor %d is %s %v, not %s %v", i, b[i].Name, b[i].Shape, a[i].Name, a[i].Shape)
		}
	}
	return ""
}

// elapsed is the seconds since t.
func elapsed(t time.Time) float64 { return time.Since(t).Seconds() }
