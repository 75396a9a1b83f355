package fl

import (
	"cmp"
	"container/heap"
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"

	"github.com/fedpq/fedpq/corr"
	"github.com/fedpq/fedpq/report"
)

// An asynchronous run (Strategy.Mode "async") is FedBuff (Nguyen et al.,
// AISTATS 2022) on the virtual clock of its speed model: Concurrency
// clients train at once, each from the model current when it starts; when
// one finishes, its upload is s = (server steps now) - (steps when it
// started) steps stale: refused, before it sends anything, past
// MaxStaleness, else it joins the open buffer. Whenever clients are
// neither training nor waiting in the open buffer, replacements drawn
// uniformly among them from the run's secret start at once, with the
// current model; when the buffer holds Buffer uploads the server steps,
// and the clients started then train from the new model. Each buffer is
// one of the run's rounds (report.Round, EvalEvery, checkpoints), begun
// with BeginBuffer: its members are paired, or form a secure round, among
// themselves, and each encodes against the model it trained from.
//
// A client's training does not depend on later events, so it runs as soon
// as the client starts, in parallel over the workers; what it trains, and
// every event's time, derive from the run's secret alone, so a run is
// reproducible from its seed whatever the number of workers.

// asyncLoop is an asynchronous run's clients in flight between server
// steps, and the model versions they started from.
type asyncLoop struct {
	flight  jobQueue
	busy    []bool // by client: in flight or in the open buffer
	idle    int    // clients not busy
	bases   map[int]*snapshot
	draws   uint64 // replacements drawn so far: each draw's stream
	refused int    // uploads refused since the last step
	// The run's training: a trainer per worker, and the goroutines
	// training, waited for when the loop stops.
	pool chan Trainer
	ctx  context.Context
	wg   sync.WaitGroup
}

// snapshot is a model version that clients in flight started from:
// memory for at most Concurrency models, released with its last client.
type snapshot struct {
	w    [][]float32
	refs int
}

// job is one client's training, from model version version, started at
// start and finished at finish on the clock.
type job struct {
	k, version    int
	start, finish float64
	base          *snapshot
	done          chan struct{} // closed once local, loss and err are set
	local         [][]float32
	loss          float64
	err           error
	stop          atomic.Bool // released before it trained: skip it
}

// jobQueue orders the jobs in flight by finish time, then client id (a
// client has one job at a time): a heap.Interface.
type jobQueue []*job

func (q jobQueue) Len() int { return len(q) }
func (q jobQueue) Less(i, j int) bool {
	if q[i].finish != q[j].finish {
		return q[i].finish < q[j].finish
	}
	return q[i].k < q[j].k
}
func (q jobQueue) Swap(i, j int) { q[i], q[j] = q[j], q[i] }
func (q *jobQueue) Push(x any)   { *q = append(*q, x.(*job)) }
func (q *jobQueue) Pop() any {
	old := *q
	j := old[len(old)-1]
	*q = old[:len(old)-1]
	return j
}

func newAsyncLoop(n int) *asyncLoop {
	return &asyncLoop{busy: make([]bool, n), idle: n, bases: map[int]*snapshot{}}
}

// setMode checks an asynchronous run's and a speed model's settings
// against the rest of the run, and sets its clock.
func (e *Engine) setMode(n int) error {
	sim := e.task.Clients != nil
	if e.cfg.async() && sim && e.cfg.Speed.Kind == "" {
		sp, err := ParseSpeed(DefaultAsyncSpeed)
		if err != nil {
			return err
		}
		e.cfg.Speed = sp
	}
	if e.cfg.Speed.Kind != "" && !sim {
		return errors.New("fl: a speed model drives a simulation's clock; a deployed server's clients take the time they take")
	}
	var err error
	if e.clock, err = newClock(e.cfg.Speed, e.secret, n); err != nil {
		return err
	}
	if e.cfg.OverSelect > 0 && sim && !e.cfg.async() && e.cfg.Speed.Kind == "" {
		return errors.New("fl: over_select keeps the clients that finish first, which in a simulation needs a speed model (speed tail:0.1:10, say)")
	}
	if e.cfg.OverSelect > 0 && e.cfg.DP.on() {
		return errors.New("fl: over_select keeps the fastest clients, not a secret uniform sample: DP-FedAvg's amplification by sampling would not hold")
	}
	if !e.cfg.async() {
		return nil
	}
	switch {
	case e.cfg.Concurrency > n:
		return fmt.Errorf("fl: concurrency %d is more than the run's %d clients", e.cfg.Concurrency, n)
	case e.cfg.DP.on():
		return errors.New("fl: DP-FedAvg with mode async: its accounting amplifies by a secret uniform sample of the clients, and an asynchronous buffer is filled by whoever finishes first; use mode sync, or a per-message LDP mechanism without clip")
	case !e.cfg.Staleness.constant() && (e.cfg.SecureAggregation || e.cfg.Shuffle):
		return errors.New("fl: a staleness weighting needs each upload on its own, and secure aggregation and the shuffler give the server only their sum: use staleness constant (and max_staleness to bound it)")
	case !e.cfg.Staleness.constant() && e.cfg.Aggregator != nil:
		return errors.New("fl: a robust aggregator weighs every upload the same, so it cannot weigh them by staleness: use staleness constant (and max_staleness to bound it)")
	}
	return nil
}

// BeginBuffer begins asynchronous buffer t (the run's t-th server step)
// among the clients whose uploads fill it, by id, increasing; versions[i]
// is the number of steps completed when clients[i] started (its model's
// version). It shares Begin's ranges, pairing and aggregate: a paired
// mechanism pairs the buffer's members, and a secure run makes the buffer
// a secure round among them. Each member encodes against the model it
// trained from; the Plan's Staleness gives each one's, and its upload
// weighs w y + (1 - w) neutral, w its staleness weight and neutral the
// current model in weights mode (FedAsync's mixing), 0 in updates mode
// (FedBuff's down-weighting), so that a stale upload moves the model less.
// The simulation and a deployed asynchronous server both run buffers
// through BeginBuffer, Plan.Add and Engine.End.
func (e *Engine) BeginBuffer(t int, clients, versions []int) (*Plan, error) {
	switch {
	case !e.cfg.async():
		return nil, errors.New("fl: a buffer is a step of mode async")
	case t != e.done+1:
		return nil, fmt.Errorf("fl: buffer %d begun after buffer %d", t, e.done)
	case len(clients) < 1 || len(clients) != len(versions):
		return nil, fmt.Errorf("fl: buffer %d has %d clients and %d versions", t, len(clients), len(versions))
	}
	staleness := make([]int, len(clients))
	var weights []float64
	for i, k := range clients {
		switch {
		case k < 0 || k >= len(e.examples) || e.examples[k] < 1:
			return nil, fmt.Errorf("fl: client %d is not enrolled", k)
		case i > 0 && k <= clients[i-1]:
			return nil, fmt.Errorf("fl: buffer %d's clients are not in increasing order (%d after %d)", t, k, clients[i-1])
		case versions[i] < 0 || versions[i] > e.done:
			return nil, fmt.Errorf("fl: client %d trained from model version %d; the server has made %d steps", k, versions[i], e.done)
		}
		staleness[i] = e.done - versions[i]
		if w := e.cfg.Staleness.Weight(staleness[i]); w != 1 {
			if weights == nil {
				weights = make([]float64, len(clients))
				for j := range weights {
					weights[j] = 1
				}
			}
			weights[i] = w
		}
	}
	p, err := e.plan(t, slices.Clone(clients), len(e.examples), weights)
	if err != nil {
		return nil, err
	}
	p.Staleness = staleness
	return p, nil
}

// runAsync runs the buffers left of cfg.Rounds, calling observe after each.
func (e *Engine) runAsync(ctx context.Context, observe func(report.Round) error) error {
	if e.clock == nil {
		return errors.New("fl: an asynchronous simulation runs on a speed model's clock; a deployed server drives BeginBuffer itself")
	}
	if e.async == nil {
		e.async = newAsyncLoop(len(e.examples))
	}
	a := e.async
	ctx, cancel := context.WithCancel(ctx)
	defer func() {
		cancel()
		a.wg.Wait()
	}()
	a.ctx = ctx
	a.pool = make(chan Trainer, len(e.task.Trainers))
	for _, tr := range e.task.Trainers[:min(e.cfg.Workers, len(e.task.Trainers))] {
		a.pool <- tr
	}
	for _, j := range a.flight { // restored from a checkpoint: train them afresh
		e.launch(j)
	}
	var buf []*job
	for e.done < e.cfg.Rounds {
		// As a synchronous run stops after the round under way: a step
		// whose members had all trained would not otherwise see it.
		if err := ctx.Err(); err != nil {
			return err
		}
		e.fill()
		if len(a.flight) == 0 {
			return errors.New("fl: no client in flight") // unreachable: Buffer <= Concurrency
		}
		j := heap.Pop(&a.flight).(*job)
		e.now = j.finish
		if s := e.done - j.version; e.cfg.MaxStaleness > 0 && s > e.cfg.MaxStaleness {
			a.refused++
			a.release(j)
			continue
		}
		buf = append(buf, j)
		if len(buf) < e.cfg.Buffer {
			continue
		}
		t := e.done + 1
		r, err := e.step(ctx, buf)
		for _, j := range buf {
			a.release(j)
		}
		buf = nil
		if err != nil {
			return fmt.Errorf("buffer %d: %w", t, err)
		}
		r.Refused, a.refused = a.refused, 0
		if observe != nil {
			if err := observe(r); err != nil {
				return err
			}
		}
	}
	return nil
}

// fill starts clients until Concurrency are in flight or none is idle:
// each drawn uniformly among the idle clients, in increasing order of id,
// from the run's secret, and trained from the current model.
func (e *Engine) fill() {
	a := e.async
	for len(a.flight) < e.cfg.Concurrency && a.idle > 0 {
		i := int(corr.Below(corr.Derive(e.secret, "async-start", a.draws), uint64(a.idle)))
		a.draws++
		k := 0
		for ; ; k++ {
			if !a.busy[k] {
				if i == 0 {
					break
				}
				i--
			}
		}
		j := &job{k: k, version: e.done, start: e.now, finish: e.now + e.clock.time(k, e.done+1)}
		j.base = a.ref(e.done, e.global)
		a.busy[k] = true
		a.idle--
		heap.Push(&a.flight, j)
		e.launch(j)
	}
}

// ref is version v's snapshot, taken from w if no client holds it yet,
// with one more client holding it.
func (a *asyncLoop) ref(v int, w [][]float32) *snapshot {
	s := a.bases[v]
	if s == nil {
		s = &snapshot{w: clone(w)}
		a.bases[v] = s
	}
	s.refs++
	return s
}

// release frees job j's client (idle again), its result and its hold on
// its model version.
func (a *asyncLoop) release(j *job) {
	j.stop.Store(true)
	j.local = nil
	a.busy[j.k] = false
	a.idle++
	if j.base.refs--; j.base.refs == 0 {
		delete(a.bases, j.version)
	}
}

// launch trains job j on the next free worker, in the background.
func (e *Engine) launch(j *job) {
	a := e.async
	j.done = make(chan struct{})
	a.wg.Add(1)
	go func() {
		defer a.wg.Done()
		defer close(j.done)
		var tr Trainer
		select {
		case tr = <-a.pool:
		case <-a.ctx.Done():
			j.err = a.ctx.Err()
			return
		}
		defer func() { a.pool <- tr }()
		if j.stop.Load() {
			return
		}
		j.local, j.loss, j.err = e.train(a.ctx, tr, j.base.w, j.k, j.version+1)
	}()
}

// step is the server's step on the full buffer buf: the buffer begun
// among its members, each one's training awaited and encoded against its
// own model, the uploads added in position order (a member that drops out
// sends nothing: under secure aggregation, a dropout of its secure round),
// and the buffer ended.
func (e *Engine) step(ctx context.Context, buf []*job) (report.Round, error) {
	slices.SortFunc(buf, func(a, b *job) int { return cmp.Compare(a.k, b.k) })
	clients, versions := make([]int, len(buf)), make([]int, len(buf))
	for i, j := range buf {
		clients[i], versions[i] = j.k, j.version
	}
	p, err := e.BeginBuffer(e.done+1, clients, versions)
	if err != nil {
		return report.Round{}, err
	}
	dropped := e.dropouts(p.T, len(buf))
	ups := make([]upload, len(buf))
	err = parallel(len(buf), e.cfg.Workers, func(pos int) error {
		j := buf[pos]
		if dropped[pos] {
			return nil
		}
		select {
		case <-j.done:
		case <-ctx.Done():
			return ctx.Err()
		}
		if j.err != nil {
			return fmt.Errorf("client %d: %w", j.k, j.err)
		}
		ups[pos] = e.encodeAt(p, pos, j.base.w, j.local, j.loss)
		return nil
	})
	if err != nil {
		return report.Round{}, err
	}
	for pos, u := range ups {
		if dropped[pos] {
			continue
		}
		// As in a round: an attacker's upload out of the support is
		// refused and the buffer goes on without it; any other refusal
		// is a bug.
		if u.err == nil {
			if err := p.Add(pos, u.Upload); err != nil && !e.attacker(clients[pos]) {
				u.err = err
			}
		}
		if u.err != nil {
			return report.Round{}, fmt.Errorf("client %d: %w", clients[pos], u.err)
		}
	}
	return e.End(p)
}
