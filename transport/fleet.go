package transport

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log"
	"os"
	"runtime"
	"runtime/debug"
	"sync"
	"sync/atomic"
	"time"

	"github.com/fedpq/fedpq/data"
	"github.com/fedpq/fedpq/experiment"
	"github.com/fedpq/fedpq/fl"
	"github.com/fedpq/fedpq/model"
)

// A fleet is many clients in one process: each keeps what makes it a
// client of its own (its identity key, its randomness, its state file,
// its data and its gRPC session), and they share what can be shared
// read-only (the run's configuration, the model, a shared dataset read
// once) and a few trainers, so that a thousand clients do not hold, or
// train, a thousand models at once.

// FleetConfig is how a fleet runs its clients.
type FleetConfig struct {
	// Clients are the clients' own settings, each as for a client alone
	// (its ID, Key, State, Data, Secret); Log is ignored: the fleet logs.
	// None may have an external Trainer, one process per client.
	Clients []ClientConfig
	// Workers is how many clients train or encode at once, each with a
	// trainer of its own (0: GOMAXPROCS).
	Workers int
	// Every is how often the fleet logs its summary line (0: 10 s).
	Every time.Duration
	Log   *log.Logger
}

// Fleet runs many clients in one process.
type Fleet struct {
	cfg     FleetConfig
	log     *log.Logger
	clients []*Client
	stats   fleetStats
	lines   *limitedWriter
	work    chan struct{} // a token per worker, held while training or encoding
	disk    chan struct{} // a token per state file being written

	mu       sync.Mutex
	yaml     string            // the configuration the shared part was built for
	train    *data.Dataset     // a shared dataset's training set, read once
	parts    [][]int           // each client's examples in train
	base     *experiment.Setup // the run's model and settings
	trainers chan fl.Trainer
}

// fleetStats counts what the fleet's clients did, for its summary line.
type fleetStats struct {
	connected, finished, failed atomic.Int64
	round                       atomic.Uint32 // the latest round any client started
	started, uploaded, accepted atomic.Int64  // in that round
	refused, declined           atomic.Int64  // in that round
	// ended, if not nil, is told a round's counts when a newer one begins.
	ended func(t uint32, counts string)
}

// counts is the latest round's counts, for the log.
func (s *fleetStats) counts() string {
	return fmt.Sprintf("%d started, %d uploaded, %d accepted, %d refused, %d declined",
		s.started.Load(), s.uploaded.Load(), s.accepted.Load(), s.refused.Load(), s.declined.Load())
}

// begin moves the counts to round t, if t is newer than the latest.
func (s *fleetStats) begin(t uint32) {
	for {
		cur := s.round.Load()
		if t <= cur && cur != 0 {
			break
		}
		if s.round.CompareAndSwap(cur, t) {
			if cur != 0 && s.ended != nil {
				s.ended(cur, s.counts())
			}
			s.started.Store(0)
			s.uploaded.Store(0)
			s.accepted.Store(0)
			s.refused.Store(0)
			s.declined.Store(0)
			break
		}
	}
	if s.round.Load() == t {
		s.started.Add(1)
	}
}

// count adds to one of round t's counts, if t is the latest round.
func (s *fleetStats) count(t uint32, n *atomic.Int64) {
	if s.round.Load() == t {
		n.Add(1)
	}
}

// NewFleet checks every client's settings.
func NewFleet(cfg FleetConfig) (*Fleet, error) {
	if len(cfg.Clients) == 0 {
		return nil, errors.New("a fleet of no clients")
	}
	if cfg.Workers <= 0 {
		cfg.Workers = runtime.GOMAXPROCS(0)
	}
	if cfg.Every <= 0 {
		cfg.Every = 10 * time.Second
	}
	if cfg.Log == nil {
		cfg.Log = log.New(os.Stderr, "fedpq fleet: ", log.LstdFlags)
	}
	f := &Fleet{cfg: cfg, log: cfg.Log, work: make(chan struct{}, cfg.Workers), disk: make(chan struct{}, fleetWrites)}
	f.stats.ended = func(t uint32, counts string) { f.log.Printf("round %d, as a later round began: %s", t, counts) }
	// The clients' own lines (a partner that left, a refusal) go to the
	// fleet's log at a bounded rate; the summary line says how many were
	// left out.
	f.lines = &limitedWriter{w: cfg.Log.Writer(), limit: fleetLines, every: cfg.Every}
	seen := map[int]bool{}
	for _, cc := range cfg.Clients {
		if cc.Trainer != "" {
			return nil, fmt.Errorf("client %d: an external trainer runs one process per client; a fleet trains with fedpq's engine", cc.ID)
		}
		if seen[cc.ID] {
			return nil, fmt.Errorf("client %d twice in the fleet", cc.ID)
		}
		seen[cc.ID] = true
		cc.Log = log.New(f.lines, fmt.Sprintf("%sclient %d: ", cfg.Log.Prefix(), cc.ID), cfg.Log.Flags())
		c, err := NewClient(cc)
		if err != nil {
			return nil, fmt.Errorf("client %d: %w", cc.ID, err)
		}
		c.fleet, c.state.disk = f, f.disk
		f.clients = append(f.clients, c)
	}
	return f, nil
}

// fleetWrites is how many of a fleet's clients write their state files
// at once.
const fleetWrites = 8

// fleetLines is how many of the clients' own log lines the fleet passes
// on per summary interval.
const fleetLines = 20

// FleetResult is how a fleet's clients ended.
type FleetResult struct {
	Finished int   // clients that saw the run to its end
	Rounds   int   // rounds of the run, as the server said at its end
	Err      error // the first client's error that ended it, if any did
	Failed   int   // clients that ended with an error
}

// Run runs every client until each has seen the run's end or failed, and
// logs a summary line every cfg.Every meanwhile.
func (f *Fleet) Run(ctx context.Context) FleetResult {
	done := make(chan struct{})
	go f.report(done)
	var (
		wg  sync.WaitGroup
		mu  sync.Mutex
		res FleetResult
	)
	for _, c := range f.clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			fin, err := c.Run(ctx)
			mu.Lock()
			defer mu.Unlock()
			if err != nil {
				f.stats.failed.Add(1)
				res.Failed++
				if res.Err == nil {
					res.Err = fmt.Errorf("client %d: %w", c.cfg.ID, err)
				}
				return
			}
			f.stats.finished.Add(1)
			res.Finished++
			res.Rounds = max(res.Rounds, int(fin.GetRounds()))
		}()
	}
	wg.Wait()
	close(done)
	f.summary()
	return res
}

// report logs the summary line every cfg.Every until done.
func (f *Fleet) report(done <-chan struct{}) {
	tick := time.NewTicker(f.cfg.Every)
	defer tick.Stop()
	for {
		select {
		case <-tick.C:
			f.summary()
		case <-done:
			return
		}
	}
}

// summary logs one line of where the fleet's clients are.
func (f *Fleet) summary() {
	s := &f.stats
	var r runtime.MemStats
	runtime.ReadMemStats(&r)
	round := ""
	if t := s.round.Load(); t > 0 {
		round = fmt.Sprintf("; round %d: %s", t, s.counts())
	}
	skipped := ""
	if n := f.lines.reset(); n > 0 {
		skipped = fmt.Sprintf("; %d client log lines not shown", n)
	}
	f.log.Printf("%d clients: %d connected, %d finished, %d failed%s; heap %d MiB%s",
		len(f.clients), s.connected.Load(), s.finished.Load(), s.failed.Load(), round, r.HeapInuse>>20, skipped)
}

// setup is client c's side of the run whose configuration is y (parsed
// into cfg): the part every client shares is built once, by the first
// client to ask, and each client gets its own examples.
func (f *Fleet) setup(y string, cfg experiment.Config, c *Client) (*experiment.Setup, fl.Trainer, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.base != nil && y != f.yaml {
		return nil, nil, errors.New("the server is now running another configuration than the fleet's other clients")
	}
	if cfg.Own() {
		// Each client reads its own dataset into the run's schema.
		su, err := experiment.NewClientSetup(cfg, c.cfg.ID, c.cfg.Data)
		if err != nil {
			return nil, nil, err
		}
		if f.base == nil {
			if err := f.build(y, su); err != nil {
				return nil, nil, err
			}
		}
		return su, f.trainer(), nil
	}
	if f.base == nil {
		// A shared dataset is read and partitioned once; each client keeps
		// only the indices of its partition.
		base, err := experiment.NewSetup(cfg)
		if err != nil {
			return nil, nil, err
		}
		f.train, f.parts = base.Data.Train, base.Clients
		base.Data = nil // the test set: the server evaluates, not the clients
		if err := f.build(y, base); err != nil {
			return nil, nil, err
		}
		debug.FreeOSMemory()
	}
	k := c.cfg.ID
	if k < 0 || k >= len(f.parts) {
		return nil, nil, fmt.Errorf("client %d: the run has clients 0 to %d", k, len(f.parts)-1)
	}
	su := *f.base
	su.Data = &data.Federated{Train: f.train}
	su.Clients = [][]int{f.parts[k]}
	return &su, f.trainer(), nil
}

// build makes the shared part from the first client's setup: the model
// and the workers' trainers. f.mu is held.
func (f *Fleet) build(y string, su *experiment.Setup) error {
	f.trainers = make(chan fl.Trainer, f.cfg.Workers)
	for range f.cfg.Workers {
		tr, err := su.Worker()
		if err != nil {
			return err
		}
		f.trainers <- tr
	}
	base := *su
	base.Clients, base.Validation = nil, nil
	f.yaml, f.base = y, &base
	return nil
}

// trainer is the fleet's pool of trainers as one fl.Trainer.
func (f *Fleet) trainer() fl.Trainer { return pooled{f.trainers} }

// pooled trains with whichever of the pool's trainers is free, so that
// no more than the pool's size train at once.
type pooled struct{ pool chan fl.Trainer }

func (p pooled) Train(ctx context.Context, w [][]float32, x []float32, y []int32, idx []int, cfg model.TrainConfig) ([][]float32, float64, error) {
	var tr fl.Trainer
	select {
	case tr = <-p.pool:
	case <-ctx.Done():
		return nil, 0, ctx.Err()
	}
	defer func() { p.pool <- tr }()
	return tr.Train(ctx, w, x, y, idx, cfg)
}

func (p pooled) Evaluate(w [][]float32, x []float32, y []int32, idx []int) (float64, float64, error) {
	tr := <-p.pool
	defer func() { p.pool <- tr }()
	return tr.Evaluate(w, x, y, idx)
}

// busy runs fn holding one of the fleet's worker tokens (CPU-bound work:
// encoding, masking), or at once for a client alone.
func (c *Client) busy(fn func()) {
	if c.fleet == nil {
		fn()
		return
	}
	c.fleet.work <- struct{}{}
	defer func() { <-c.fleet.work }()
	fn()
}

// routine logs a line of a client's usual course (joined, trained,
// uploaded, accepted): a client alone logs it, a fleet's client leaves it
// to the fleet's summary line.
func (c *Client) routine(format string, args ...any) {
	if c.fleet == nil {
		c.log.Printf(format, args...)
	}
}

// note counts an event of round t for the fleet's summary line; a client
// alone counts nothing.
func (c *Client) note(t uint32, what func(*fleetStats) *atomic.Int64) {
	if c.fleet != nil {
		c.fleet.stats.count(t, what(&c.fleet.stats))
	}
}

// limitedWriter passes on at most limit lines per interval and counts the
// rest.
type limitedWriter struct {
	w       io.Writer
	limit   int
	every   time.Duration
	mu      sync.Mutex
	start   time.Time
	n       int
	dropped int
}

func (l *limitedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	now := time.Now()
	if now.Sub(l.start) >= l.every {
		l.start, l.n = now, 0
	}
	l.n += bytes.Count(p, []byte{'\n'})
	if l.n > l.limit {
		l.dropped++
		return len(p), nil
	}
	return l.w.Write(p)
}

// reset returns how many lines were dropped since the last reset.
func (l *limitedWriter) reset() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	n := l.dropped
	l.dropped = 0
	return n
}
