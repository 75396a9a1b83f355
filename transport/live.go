package transport

import (
	"fmt"
	"sync"
	"time"

	"github.com/fedpq/fedpq/privacy"
	"github.com/fedpq/fedpq/report"
)

// live is what the server's live page (page.go) shows of the run: where it
// stands, and a history of its rounds that stays bounded however long the
// run (historyPoints points each of rounds and of accuracy), for a run of
// thousands of rounds is watched as closely as one of ten.
type live struct {
	mu                     sync.Mutex
	started                time.Time
	serving, over          bool
	runRounds, done, round int
	chosen, uploads        int // of the round under way, or the last begun
	deadline               time.Time
	timeout                time.Duration
	target                 float64
	connected, joined      int
	refusals               int // refused joins and messages since the last round completed
	spent                  *privacy.Ledger
	user                   *privacy.UserLevel // the last stated: DP-FedAvg states it at evaluated rounds only
	rounds                 []roundPoint
	accuracy               []accuracyPoint
	// Mode async: clients training and queued now, the last buffer's
	// mean staleness.
	async            bool
	training, queued int
	stale            float64
}

// historyPoints bounds each history: past it, neighbours are merged
// (rounds) or every other one dropped (accuracy), so that a run of 10,000
// rounds keeps at most 2 x 240 points, coarser the older they are.
const historyPoints = 240

// roundPoint is rounds First to Last (one round, or several merged): the
// uploads counted, the clients chosen and the refusals, summed over them.
type roundPoint struct {
	First, Last               int
	Uploads, Chosen, Refusals int
}

type accuracyPoint struct {
	Round    int
	Accuracy float64
}

func (l *live) init() { l.started = time.Now() }

func (l *live) loaded(rounds, done int, target float64, timeout time.Duration) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.runRounds, l.done, l.round, l.target, l.timeout = rounds, done, done, target, timeout
}

func (l *live) setServing(on bool) {
	l.mu.Lock()
	l.serving = on
	l.mu.Unlock()
}

func (l *live) finished() {
	l.mu.Lock()
	l.over = true
	l.mu.Unlock()
}

func (l *live) begin(t, chosen int, deadline time.Time) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.round, l.chosen, l.uploads, l.deadline = t, chosen, 0, deadline
}

func (l *live) uploaded() {
	l.mu.Lock()
	l.uploads++
	l.mu.Unlock()
}

func (l *live) asyncClients(training, queued int) {
	l.mu.Lock()
	l.async, l.training, l.queued = true, training, queued
	l.mu.Unlock()
}

func (l *live) staleness(mean float64) {
	l.mu.Lock()
	l.async, l.stale = true, mean
	l.mu.Unlock()
}

func (l *live) refused() {
	l.mu.Lock()
	l.refusals++
	l.mu.Unlock()
}

func (l *live) clients(connected, joined int) {
	l.mu.Lock()
	l.connected, l.joined = connected, joined
	l.mu.Unlock()
}

// ledger records the privacy spent: g, never nil, is the round's own
// ledger, not changed after.
func (l *live) ledger(g *privacy.Ledger) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.spent = g
	if g.User != nil {
		l.user = g.User
	}
}

// completed adds round r to the history, done rounds of the run done.
func (l *live) completed(done int, r *report.Round) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.done = done
	l.rounds = addRound(l.rounds, roundPoint{First: r.Round, Last: r.Round, Uploads: r.Clients, Chosen: r.Clients + r.Dropped, Refusals: l.refusals})
	l.refusals = 0
	if r.Accuracy != nil {
		l.accuracy = addAccuracy(l.accuracy, accuracyPoint{r.Round, *r.Accuracy})
	}
}

// addRound appends p to h; past historyPoints it merges each pair of
// neighbours, halving h: the older rounds become buckets of several.
func addRound(h []roundPoint, p roundPoint) []roundPoint {
	h = append(h, p)
	if len(h) <= historyPoints {
		return h
	}
	out := h[:0]
	for i := 0; i < len(h); i += 2 {
		q := h[i]
		if i+1 < len(h) {
			n := h[i+1]
			q.Last, q.Uploads, q.Chosen, q.Refusals = n.Last, q.Uploads+n.Uploads, q.Chosen+n.Chosen, q.Refusals+n.Refusals
		}
		out = append(out, q)
	}
	return out
}

// addAccuracy appends p to h; past historyPoints it drops every other
// point, keeping the first and the last (the latest accuracy).
func addAccuracy(h []accuracyPoint, p accuracyPoint) []accuracyPoint {
	h = append(h, p)
	if len(h) <= historyPoints {
		return h
	}
	last := h[len(h)-1]
	out := h[:0]
	for i := 0; i < len(h); i += 2 {
		out = append(out, h[i])
	}
	if out[len(out)-1] != last {
		out = append(out, last)
	}
	return out
}

// snapshot is a copy of l to render outside its lock.
type snapshot struct {
	Now                    time.Time
	Started                time.Time
	Serving, Over          bool
	RunRounds, Done, Round int
	Chosen, Uploads        int
	Deadline               time.Time
	Timeout                time.Duration
	Target                 float64
	Connected, Joined      int
	Refusals               int
	Ledger                 *privacy.Ledger
	User                   *privacy.UserLevel
	Rounds                 []roundPoint
	Accuracy               []accuracyPoint
	Async                  string // mode async: its clients, "" in mode sync
}

func (l *live) snapshot() snapshot {
	l.mu.Lock()
	defer l.mu.Unlock()
	async := ""
	if l.async {
		async = fmt.Sprintf("async (FedBuff): %d clients training, %d updates queued; the last buffer's mean staleness %.2f steps", l.training, l.queued, l.stale)
	}
	return snapshot{Async: async, Now: time.Now(), Started: l.started, Serving: l.serving, Over: l.over,
		RunRounds: l.runRounds, Done: l.done, Round: l.round, Chosen: l.chosen, Uploads: l.uploads,
		Deadline: l.deadline, Timeout: l.timeout, Target: l.target, Connected: l.connected, Joined: l.joined,
		Refusals: l.refusals, Ledger: l.spent, User: l.user,
		Rounds: append([]roundPoint(nil), l.rounds...), Accuracy: append([]accuracyPoint(nil), l.accuracy...)}
}
