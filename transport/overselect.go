package transport

import (
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/fedpq/fedpq/fl"
)

// Over-selection in a deployed synchronous run (over_select F), as
// production federated learning does it (Bonawitz et al., "Towards
// federated learning at scale", 2019): round t's sample is drawn as a
// simulation draws it (fl.Engine.Oversample: ceil(clients_per_round
// (1 + F)) of the clients connected, from the run's secret), and each
// client of it gets a Task of the current model, as in mode async: it
// trains, says Ready and holds its weights. The first clients_per_round
// to be Ready are kept, and the round begins among them
// (fl.Engine.BeginKept) once they are, or once no task is left in flight,
// or at the round's deadline with at least one Ready: pairs, a secure
// round, dropouts and the deadline are any round's, and each kept client
// encodes the weights it holds. The others' tasks are withdrawn with a
// Discard that says why: they send nothing and are charged nothing, and a
// late Ready is ignored. The server learns which clients finished first,
// timing it sees in any round anyway.

// overSelected runs round t (the next) among the clients online, by
// over-selection, and records it; it reports whether the run stops there.
// If no client of its sample could be given a task, or none finished,
// nothing is recorded, and the caller samples the round again.
func (s *Server) overSelected(ctx context.Context, online []int, begun time.Time) (stop bool, _ error) {
	t := s.eng.Done() + 1
	sample, err := s.eng.Oversample(t, online)
	if err != nil {
		return false, err
	}
	deadline := time.Now().Add(s.cfg.RoundTimeout)
	s.mu.Lock()
	a := s.async
	clear(a.sampled)
	for _, u := range a.queue { // weights of no round: not this sample's
		if ss := s.sessions[u.id]; ss != nil {
			s.discard(ss, u.version, fmt.Sprintf("weights trained from model version %d are not for round %d's sample", u.version, t), "invalid")
		}
	}
	a.queue = nil
	for _, k := range sample {
		id := uint32(k)
		if ss := s.sessions[id]; ss == nil || ss.ctx.Err() != nil || a.busy(id) {
			continue // gone, or still finishing a task withdrawn before
		}
		a.sampled[id] = true
		s.give(id, 0) // the round's deadline bounds it
	}
	tasked := len(a.sampled)
	s.cfg.Metrics.asyncClients(len(a.tasks), len(a.queue))
	ch := s.changed
	s.mu.Unlock()
	if tasked == 0 {
		s.log.Printf("round %d: none of its %d over-selected clients can take a task (gone, or finishing a task withdrawn before); sampling again after the next change", t, len(sample))
		select {
		case <-ch:
		case <-time.After(30 * time.Second):
		case <-ctx.Done():
			return false, ctx.Err()
		}
		return false, nil
	}
	s.log.Printf("round %d: %d clients over-selected for %d places, %d given a task", t, len(sample), s.cfg.Run.ClientsPerRound, tasked)
	kept, cut, err := s.firstReady(ctx, t, tasked, deadline)
	if err != nil || len(kept) == 0 {
		return false, err
	}
	r, took, err := s.runRound(ctx, func(t int) (*fl.Plan, error) { return s.eng.BeginKept(t, online, kept) }, begun)
	r.Cut = cut
	stop, err = s.record(r, took, err)
	s.mu.Lock()
	clear(s.async.members)
	s.mu.Unlock()
	return stop, err
}

// firstReady waits until clients_per_round of round t's tasked clients
// are Ready, or no task is in flight, or the deadline passes with one
// Ready at least; it keeps the first clients_per_round Ready (their ids,
// increasing), withdraws the other tasks and discards the other weights,
// and returns how many it cut. None kept: all withdrawn, and the round is
// to be sampled again.
func (s *Server) firstReady(ctx context.Context, t, tasked int, deadline time.Time) (kept []int, cut int, err error) {
	p := s.cfg.Run.ClientsPerRound
	for {
		s.mu.Lock()
		a := s.async
		late := !time.Now().Before(deadline)
		if len(a.queue) >= p || len(a.tasks) == 0 || late {
			break // s.mu is held
		}
		ch := s.changed
		s.mu.Unlock()
		select {
		case <-ch:
		case <-time.After(time.Until(deadline)):
		case <-ctx.Done():
			s.mu.Lock()
			s.withdrawAll(t, "the server is stopping")
			s.mu.Unlock()
			return nil, 0, ctx.Err()
		}
	}
	defer s.mu.Unlock()
	a := s.async
	n := min(p, len(a.queue))
	why := fmt.Sprintf("over-selected: round %d kept the first %d clients to finish; nothing sent, nothing charged", t, n)
	if n < p {
		why = fmt.Sprintf("over-selected: round %d began with the %d clients that had finished by its deadline, or before all others had answered or left; nothing sent, nothing charged", t, n)
	}
	if n == 0 {
		s.log.Printf("round %d: none of its %d clients given a task finished by its deadline; sampling again", t, tasked)
		s.withdrawAll(t, fmt.Sprintf("not Ready by round %d's deadline: the round is sampled again; nothing sent, nothing charged", t))
		return nil, 0, nil
	}
	for _, u := range a.queue[:n] {
		kept = append(kept, int(u.id))
		a.members[u.id] = true
	}
	slices.Sort(kept)
	for _, u := range a.queue[n:] {
		if ss := s.sessions[u.id]; ss != nil {
			s.discard(ss, u.version, why, "over_selected")
		}
		cut++
	}
	a.queue = nil
	cut += s.withdrawAll(t, why)
	clear(a.sampled)
	s.cfg.Metrics.asyncClients(len(a.tasks), len(a.queue))
	return kept, cut, nil
}

// withdrawAll withdraws every task in flight, telling each client why;
// a late Ready for it is ignored. It returns how many. s.mu is held.
func (s *Server) withdrawAll(t int, why string) int {
	a := s.async
	n := 0
	for id, tk := range a.tasks {
		a.end(id)
		a.withdrawn[id] = tk.version
		if ss := s.sessions[id]; ss != nil {
			s.discard(ss, tk.version, why, "over_selected")
		}
		n++
	}
	return n
}
