package fl

import (
	"context"
	"errors"
	"fmt"
	"math"
	"slices"
	"sort"
	"sync"

	"github.com/fedpq/fedpq/corr"
	"github.com/fedpq/fedpq/model"
	"github.com/fedpq/fedpq/report"
)

// upload is one simulated client's upload for a round.
type upload struct {
	pos int // the client's position in the round
	Upload
	err error
}

// round runs round t: the server begins it, every sampled client that does
// not drop out trains and uploads, in parallel over the workers, and the
// server adds the uploads and ends it.
func (e *Engine) round(ctx context.Context, t int) (report.Round, error) {
	p, err := e.Begin(t, nil)
	if err != nil {
		return report.Round{}, err
	}
	sel := p.Clients
	dropped := e.dropouts(t, len(sel))
	if e.clock != nil {
		e.now += e.clock.roundTime(t, sel, dropped)
	}

	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	out := e.uploads(ctx, p, dropped)

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

// Begin starts round t among the clients online (ids; nil means all):
// it samples the round's clients from them (Oversample), keeps, where
// the run over-selects, the ClientsPerRound that finish first on the
// speed model's clock, and begins the round among them (BeginKept): it
// draws the pairing or group order and chooses the ranges.
func (e *Engine) Begin(t int, online []int) (*Plan, error) {
	sel, err := e.Oversample(t, online)
	if err != nil {
		return nil, err
	}
	if e.cfg.OverSelect > 0 {
		if e.clock == nil {
			return nil, errors.New("fl: an over-selected round with no clock to rank its clients: a deployed server runs Oversample, then BeginKept with the first to finish")
		}
		sel = e.fastest(t, sel)
	}
	return e.BeginKept(t, online, sel)
}

// Oversample draws round t's clients from those online (ids; nil means
// all), in increasing order: ceil(ClientsPerRound (1 + OverSelect)) of
// them where the run over-selects, else the round's clients themselves.
// The draw is the run's secret's, the same whoever asks; a deployed
// server gives each a task and keeps those that finish first
// (BeginKept).
func (e *Engine) Oversample(t int, online []int) ([]int, error) {
	online, err := e.online(t, online)
	if err != nil {
		return nil, err
	}
	return e.sample(t, online), nil
}

// BeginKept begins round t among kept, the clients of its sample
// (Oversample, among the same online) that it keeps, by id, increasing:
// at most ClientsPerRound of them where the run over-selects, else the
// whole sample. It draws the pairing or group order among them and
// chooses the ranges; the clients sampled and not kept take no part.
func (e *Engine) BeginKept(t int, online, kept []int) (*Plan, error) {
	online, err := e.online(t, online)
	if err != nil {
		return nil, err
	}
	if err := e.budget(t, len(online)); err != nil {
		return nil, err
	}
	sel := e.sample(t, online)
	switch {
	case e.cfg.OverSelect == 0 && !slices.Equal(kept, sel):
		return nil, fmt.Errorf("fl: round %d keeps %d clients, but the run does not over-select: it is begun among its whole sample of %d", t, len(kept), len(sel))
	case e.cfg.OverSelect > 0 && len(kept) > e.cfg.ClientsPerRound:
		return nil, fmt.Errorf("fl: round %d keeps %d clients, more than clients_per_round %d", t, len(kept), e.cfg.ClientsPerRound)
	}
	for i, k := range kept {
		switch {
		case i > 0 && k <= kept[i-1]:
			return nil, fmt.Errorf("fl: round %d's kept clients are not in increasing order (%d after %d)", t, k, kept[i-1])
		case !inSorted(sel, k):
			return nil, fmt.Errorf("fl: round %d keeps client %d, which its sample does not hold", t, k)
		}
	}
	return e.plan(t, slices.Clone(kept), len(online), nil)
}

func inSorted(s []int, x int) bool {
	_, ok := slices.BinarySearch(s, x)
	return ok
}

// online checks that round t is the next and that the clients online
// (nil: all) are enrolled, and returns them.
func (e *Engine) online(t int, online []int) ([]int, error) {
	if t != e.done+1 {
		return nil, fmt.Errorf("fl: round %d begun after round %d", t, e.done)
	}
	if online == nil {
		online = make([]int, len(e.examples))
		for k := range online {
			online[k] = k
		}
	}
	for _, k := range online {
		if k < 0 || k >= len(e.examples) || e.examples[k] < 1 {
			return nil, fmt.Errorf("fl: client %d is not enrolled", k)
		}
	}
	return online, nil
}

// plan begins round (or buffer) t among the clients sel, drawn from
// online: it chooses the ranges, draws the pairing or group order and
// opens the aggregate, weighing each position's upload by its staleness
// weight (nil: 1).
func (e *Engine) plan(t int, sel []int, online int, stale []float64) (*Plan, error) {
	ranges, err := e.ranges()
	if err != nil {
		return nil, err
	}
	pairing := NewPairing(e.m, e.secret, uint64(t), len(sel), e.cfg.Transfer)
	var agg roundSum
	switch {
	case e.cfg.SecureAggregation:
		agg, err = e.newSecure(t, ranges, sel, pairing.ServerSlot)
	case e.cfg.Shuffle:
		agg, err = e.newShuffled(t, ranges)
	case e.cfg.Aggregator != nil:
		agg = e.newRobust(ranges, pairing.ServerSlot)
	default:
		agg, err = e.newAggregate(ranges, sel, pairing.ServerSlot, stale)
	}
	if err != nil {
		return nil, err
	}
	return &Plan{
		T: t, Clients: sel, Ranges: ranges, Global: e.global, Pairing: pairing,
		agg: agg, got: make([]bool, len(sel)), online: online,
	}, nil
}

// sample draws round t's clients from those online, in increasing order:
// a uniformly random subset of ClientsPerRound, or under Poisson sampling
// each with probability q = ClientsPerRound over the clients enrolled.
func (e *Engine) sample(t int, online []int) []int {
	if q := e.cfg.rate(len(e.examples)); q < 1 && e.cfg.Sampling == "poisson" {
		src := corr.Derive(e.secret, "sample", uint64(t))
		var sel []int
		for _, k := range online {
			if src.Float64() < q {
				sel = append(sel, k)
			}
		}
		return sel
	}
	k := e.cfg.ClientsPerRound
	if e.cfg.OverSelect > 0 && k > 0 {
		k = int(math.Ceil(float64(k) * (1 + e.cfg.OverSelect)))
	}
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

// rate is the probability that a round samples a given client of n
// enrolled: 1 when every client online takes part.
func (c *Config) rate(n int) float64 {
	if k := c.ClientsPerRound; k > 0 && k < n {
		return float64(k) / float64(n)
	}
	return 1
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

// uploads trains the round's clients that do not drop out, in parallel over
// the workers, and sends their uploads, in the order they are done, on the
// channel it returns, closed once all are sent or ctx is done.
func (e *Engine) uploads(ctx context.Context, p *Plan, dropped []bool) <-chan upload {
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
		for pos := range p.Clients {
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
	return out
}

// client trains the client at position pos of round p from the global
// model and encodes its weights or update, tensor by tensor.
func (e *Engine) client(ctx context.Context, tr Trainer, p *Plan, pos int) upload {
	local, loss, err := e.train(ctx, tr, p.Global, p.Clients[pos], p.T)
	if err != nil {
		return upload{pos: pos, err: err}
	}
	return e.encodeAt(p, pos, p.Global, local, loss)
}

// encodeAt is the upload of the client at position pos of p, which
// trained local, with training loss loss, from the model base.
func (e *Engine) encodeAt(p *Plan, pos int, base, local [][]float32, loss float64) upload {
	k := p.Clients[pos]
	u := upload{pos: pos, Upload: Upload{Examples: e.examples[k], Loss: loss}}
	slot, err := p.Pairing.ClientSlot(pos, e.params)
	if err != nil {
		u.err = err
		return u
	}
	u.Payloads, u.err = e.encode(k, p, base, local, slot)
	return u
}

// train trains client k's job of round t (asynchronous: the job that
// starts from model version t-1) from the model base.
func (e *Engine) train(ctx context.Context, tr Trainer, base [][]float32, k, t int) ([][]float32, float64, error) {
	train := e.task.Data.Train
	return tr.Train(ctx, base, train.X, train.Y, e.task.Clients[k],
		model.TrainConfig{Epochs: e.cfg.Epochs, Batch: e.cfg.Batch, Seed: seedOf(e.secret, "local", t, k), Client: k, Round: t, ProxMu: e.cfg.ProxMu})
}

// seedOf derives a 64-bit seed for one purpose of client k in round t.
func seedOf(secret []byte, purpose string, t, k int) uint64 {
	return corr.Derive(secret, purpose, uint64(t), uint64(k)).Uint64()
}

// Add decodes the upload of the client at position pos into the round's
// aggregate. An upload that is refused (a second one from the same client,
// a wrong size, a value no honest client sends, a training loss that is not
// a number in [0, MaxLoss]) leaves the aggregate as it was: the round goes
// on without it.
func (p *Plan) Add(pos int, u Upload) error {
	switch {
	case pos < 0 || pos >= len(p.got):
		return fmt.Errorf("position %d is not in round %d", pos, p.T)
	case p.got[pos]:
		return fmt.Errorf("a second upload from client %d in round %d", p.Clients[pos], p.T)
	case u.Examples < 1:
		return fmt.Errorf("upload trained on %d examples", u.Examples)
	case !(u.Loss >= 0 && u.Loss <= MaxLoss): // NaN too
		return fmt.Errorf("training loss %v is not in [0, %g]", u.Loss, MaxLoss)
	}
	if err := p.agg.add(pos, u); err != nil {
		return err
	}
	p.got[pos] = true
	p.loss += u.Loss
	return nil
}

// End finishes the round: the global update from the uploads received (the
// mean divides by their number), the privacy ledger, and the evaluation.
// An aggregate that is not finite, or that would make the float32 model
// not finite, is not applied: the round is discarded, with the reason in
// the report's Discarded, the model stays as it was, and the run goes on.
func (e *Engine) End(p *Plan) (report.Round, error) {
	received := p.agg.count()
	r := report.Round{Round: p.T, Clients: received, Dropped: len(p.Clients) - received}
	for _, rg := range p.Ranges {
		r.RangeRadius = append(r.RangeRadius, rg.Radius)
	}
	if received > 0 {
		alone := p.alone()
		shares, err := e.topUp(p, received)
		if err != nil {
			return r, err
		}
		r.NoiseShares = shares
		est, err := p.agg.mean()
		_, secured := p.agg.(*secure)
		_, robustRound := p.agg.(*robustSum)
		switch {
		case err != nil && secured:
			// Too few survivors to unmask the sum: the round is lost,
			// not the run.
			r.Discarded = "secure aggregation: " + err.Error()
		case err != nil && robustRound:
			// Too few uploads for the rule's assumptions: likewise.
			r.Discarded = err.Error()
		case err != nil:
			return r, err
		default:
			if e.cfg.DP.on() {
				if est, err = e.privatize(p, est, received, shares); err != nil {
					return r, err
				}
			}
			if err := e.update(est); err != nil {
				r.Discarded = err.Error()
			} else if e.radii != nil {
				if err := e.adapt(est, p.Ranges, received, alone); err != nil {
					return r, err
				}
			}
		}
		bits := e.bits()
		if sec, ok := p.agg.(*secure); ok {
			bits = sec.uploadBits()
		}
		r.TrainLoss = p.loss / float64(received)
		r.UplinkBits = int64(received) * int64(bits)
		r.UplinkBitsPerParam = float64(bits) / float64(e.params)
		if e.minSum == 0 || received < e.minSum {
			e.minSum = received
		}
		if e.minAlone < 0 || alone < e.minAlone {
			e.minAlone = alone
		}
	}
	// A discarded round's clients are charged all the same: their
	// messages were sent, and whoever saw them (the server, an
	// eavesdropper) learnt what they reveal.
	for pos, ok := range p.got {
		if ok {
			e.joined[p.Clients[pos]]++
		}
	}
	if e.cfg.DP.on() && e.cfg.DP.Noise > 0 {
		if err := e.accountRound(p); err != nil {
			return r, err
		}
	}
	r.SetupBytes = int64(p.Pairing.Pairs() * SetupBytes(e.m, e.params, e.cfg.Transfer))
	if sec, ok := p.agg.(*secure); ok {
		r.SetupBytes += sec.setup
	}
	if err := e.account(&r, p); err != nil {
		return r, err
	}
	if p.T%e.cfg.EvalEvery == 0 || p.T == e.cfg.Rounds {
		if err := e.evaluate(&r); err != nil {
			return r, err
		}
	}
	e.done = p.T
	r.Seconds = e.elapsed()
	if e.clock != nil {
		r.Clock = e.now
	}
	for pos, s := range p.Staleness {
		if p.got[pos] {
			r.Staleness += float64(s) / float64(received)
			r.MaxStaleness = max(r.MaxStaleness, s)
		}
	}
	return r, nil
}

// alone is the number of uploads added whose sender has no partner, or
// whose partner's upload is not in the sum.
func (p *Plan) alone() int {
	n := 0
	for pos, ok := range p.got {
		if j := p.Pairing.Partner(pos); ok && (j < 0 || !p.got[j]) {
			n++
		}
	}
	return n
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

// bits is the payload size of one client's upload.
func (e *Engine) bits() int {
	b := 0
	for _, n := range e.sizes {
		b += e.m.Bits(n)
	}
	return b
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
