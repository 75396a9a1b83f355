package transport

import (
	"context"
	"crypto/ed25519"
	"errors"
	"fmt"
	"math"
	"slices"
	"strings"
	"time"

	"github.com/fedpq/fedpq/fl"
	"github.com/fedpq/fedpq/report"
	pb "github.com/fedpq/fedpq/transport/fedpqpb"
)

// A round at the server: waiting for the clients it needs, sending the
// plan, counting uploads and declines, and closing it at its deadline.

// serverRound is the round under way.
type serverRound struct {
	plan   *fl.Plan
	pos    map[uint32]int // client id to position
	state  []int          // per position: waiting, uploaded, refused or gone; its methods below change it
	keyed  []bool         // per position: its key share was relayed
	sealed []bool         // per position: its sealed bits were relayed
	late   []bool         // per position: no key share by the key-share deadline
	setup  int64          // bytes of key shares and sealed bits relayed
	secure *secureRound   // secure rounds: the protocol's state
	phases phases         // how long each of its steps took, for the log
}

// phases times the steps of a round, for the log and the metrics' phase
// histograms: each mark ends a step, which began at the mark before.
type phases struct {
	last    time.Time
	b       strings.Builder
	metrics *ServerMetrics
}

// mark ends the step called name.
func (p *phases) mark(name string) {
	now := time.Now()
	if !p.last.IsZero() {
		if p.b.Len() > 0 {
			p.b.WriteString(", ")
		}
		d := now.Sub(p.last)
		fmt.Fprintf(&p.b, "%s %v", name, d.Round(time.Millisecond))
		p.metrics.observe(name, d)
	}
	p.last = now
}

func (p *phases) String() string { return p.b.String() }

func newServerRound(plan *fl.Plan) *serverRound {
	n := len(plan.Clients)
	rd := &serverRound{plan: plan, pos: map[uint32]int{}, state: make([]int, n),
		keyed: make([]bool, n), sealed: make([]bool, n), late: make([]bool, n)}
	for pos, k := range plan.Clients {
		rd.pos[uint32(k)] = pos
	}
	return rd
}

const (
	waiting = iota
	uploaded
	refused
	gone
)

// A client's state in the round changes only through accept, refuse and
// leave, called by the upload, session, secure and relay code alike: a
// waiting client is the only one whose state moves, and only once.

// accept counts the upload of the waiting client at pos.
func (rd *serverRound) accept(pos int) { rd.move(pos, uploaded) }

// refuse takes the client at pos out of the round for what it sent; it
// reports whether the client was waiting.
func (rd *serverRound) refuse(pos int) bool { return rd.move(pos, refused) }

// leave takes the client at pos out of the round because it left; it
// reports whether the client was waiting.
func (rd *serverRound) leave(pos int) bool { return rd.move(pos, gone) }

func (rd *serverRound) move(pos, to int) bool {
	if rd.state[pos] != waiting {
		return false
	}
	rd.state[pos] = to
	return true
}

// waiting reports whether the round still waits for the client at pos.
func (rd *serverRound) waiting(pos int) bool { return rd.state[pos] == waiting }

// uploaded reports whether the upload of the client at pos counts.
func (rd *serverRound) uploaded(pos int) bool { return rd.state[pos] == uploaded }

// left reports whether the client at pos left the round.
func (rd *serverRound) left(pos int) bool { return rd.state[pos] == gone }

// waitingFor is the positions of the clients the round still waits for.
func (rd *serverRound) waitingFor() []int {
	var out []int
	for pos, st := range rd.state {
		if st == waiting {
			out = append(out, pos)
		}
	}
	return out
}

// gather waits for the clients a round needs, MinClients connected, and
// then up to Gather for the rest, and returns the ids of those connected.
// With the default minimum (the whole fleet) it waits up to Grace, then
// goes on at once with those it has, or, with none, waits for the first
// and then up to Gather for the rest.
// MaxWait, if positive, bounds the wait for the clients needed (the first
// one, after Grace): then the server stops with an error naming who is
// missing. While it waits it logs, every 30 s, who is missing and what it
// will do.
func (s *Server) gather(ctx context.Context) ([]uint32, error) {
	start := time.Now()
	var since, logged time.Time
	atGrace := -1 // how many were connected when the grace ran out
	for {
		s.mu.Lock()
		n, ch := len(s.sessions), s.changed
		s.mu.Unlock()
		waited := time.Since(start)
		need, graceLeft := s.cfg.MinClients, time.Duration(0)
		if s.fleet {
			if graceLeft = s.cfg.Grace - waited; graceLeft <= 0 {
				need = 1
				if atGrace < 0 {
					atGrace = n
				}
			}
		}
		if n >= need {
			if since.IsZero() {
				since = time.Now()
			}
			if n < s.cfg.Run.Clients && atGrace > 0 {
				// The grace was the wait for the rest: no Gather after it.
				s.log.Printf("round %d: going on with %d of %d clients after waiting %v (--grace %v) for %s",
					s.eng.Done()+1, n, s.cfg.Run.Clients, waited.Round(100*time.Millisecond), s.cfg.Grace, s.missing())
				break
			}
			if n == s.cfg.Run.Clients || time.Since(since) >= s.cfg.Gather {
				if atGrace == 0 && n < s.cfg.Run.Clients {
					s.log.Printf("round %d: going on with %d of %d clients after waiting %v (--grace %v ran out with none connected, then --gather %v after the first); missing %s",
						s.eng.Done()+1, n, s.cfg.Run.Clients, waited.Round(100*time.Millisecond), s.cfg.Grace, s.cfg.Gather, s.missing())
				}
				break
			}
		} else {
			since = time.Time{}
			if s.cfg.MaxWait > 0 && waited >= s.cfg.MaxWait {
				return nil, fmt.Errorf("round %d: %d of the %d clients needed connected after waiting %v (--max-wait); missing %s",
					s.eng.Done()+1, n, need, s.cfg.MaxWait, s.missing())
			}
			if time.Since(logged) >= 30*time.Second {
				s.log.Printf("round %d: waiting for clients for %v (%d of %d connected, %d needed): missing %s; %s",
					s.eng.Done()+1, waited.Round(time.Second), n, s.cfg.Run.Clients, need, s.missing(), s.waitPlan(graceLeft, waited))
				logged = time.Now()
			}
		}
		wait := 30*time.Second - time.Since(logged)
		if !since.IsZero() {
			wait = s.cfg.Gather - time.Since(since)
		} else if graceLeft > 0 {
			wait = min(wait, graceLeft)
		}
		if since.IsZero() && s.cfg.MaxWait > 0 {
			wait = min(wait, s.cfg.MaxWait-waited)
		}
		select {
		case <-ch:
		case <-time.After(wait):
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	ids := make([]uint32, 0, len(s.sessions))
	for id := range s.sessions {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	return ids, nil
}

// waitPlan says what a round waiting for clients will do next.
func (s *Server) waitPlan(graceLeft, waited time.Duration) string {
	switch {
	case graceLeft > 0:
		return fmt.Sprintf("going on with those connected in %v", graceLeft.Round(time.Second))
	case s.cfg.MaxWait > 0:
		return fmt.Sprintf("stopping in %v (--max-wait)", (s.cfg.MaxWait - waited).Round(time.Second))
	case s.fleet:
		return "going on as soon as one connects; waiting for ever (--max-wait bounds it)"
	}
	return "waiting for ever (--max-wait bounds it)"
}

// firstTen lists client ids, the first ten of them: one log line however
// many clients a round has.
func firstTen(ids []int) string {
	var b strings.Builder
	for i, id := range ids {
		if i == 10 {
			fmt.Fprintf(&b, " and %d more", len(ids)-10)
			break
		}
		if i > 0 {
			b.WriteString(", ")
		}
		fmt.Fprint(&b, id)
	}
	return b.String()
}

// missing names the clients not connected, the first ten of them.
func (s *Server) missing() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	var ids []int
	for id := range s.cfg.Run.Clients {
		if s.sessions[uint32(id)] == nil {
			ids = append(ids, id)
		}
	}
	return "clients " + firstTen(ids)
}

// runRound runs one round, planned by begin (Engine.Begin among the
// online clients, or an asynchronous buffer's Engine.BeginBuffer): it
// announces the round to those chosen, waits for their uploads until they
// are all in or gone, or the deadline, and ends the round with what it
// has.
func (s *Server) runRound(ctx context.Context, begin func(t int) (*fl.Plan, error), begun time.Time) (report.Round, *phases, error) {
	deadline := time.Now().Add(s.cfg.RoundTimeout)
	s.mu.Lock()
	t := s.eng.Done() + 1
	plan, err := begin(t)
	if err != nil {
		s.mu.Unlock()
		return report.Round{}, nil, err
	}
	s.cfg.Metrics.begin(t, len(plan.Clients), deadline)
	rd := newServerRound(plan)
	rd.phases.last, rd.phases.metrics = begun, s.cfg.Metrics
	rd.phases.mark("gather")
	identity := map[uint32]ed25519.PublicKey{}
	for _, k := range plan.Clients {
		if ss := s.sessions[uint32(k)]; ss != nil {
			identity[uint32(k)] = ss.identity
		}
	}
	rd.secure = newSecureRound(plan, deadline, identity)
	var sa *pb.SecAgg
	if rd.secure != nil {
		sa = rd.secure.announce(plan)
	}
	common := &pb.RoundStart{Ranges: encodeRanges(plan.Ranges), Secagg: sa}
	held := s.async != nil
	if !held {
		// A buffer's members, or an over-selected round's kept clients,
		// trained already, each from the version its task named.
		common.Global = encodeTensors(plan.Global)
	}
	shared, err := encodeShared(common)
	if err != nil {
		s.mu.Unlock()
		return report.Round{}, nil, fmt.Errorf("round %d: encoding its start: %w", t, err)
	}
	s.round = rd
	for pos, k := range plan.Clients {
		if s.sessions[uint32(k)] == nil { // left since it was counted
			rd.leave(pos)
		}
	}
	for pos, k := range plan.Clients {
		if rd.left(pos) {
			continue
		}
		own := &pb.RoundStart{
			Round: uint32(t), Position: uint32(pos), Partner: -1,
			TimeLeftMilli: time.Until(deadline).Milliseconds(),
		}
		if j := plan.Pairing.Partner(pos); j >= 0 && !rd.left(j) {
			own.Partner = int32(plan.Clients[j])
			own.PartnerIdentity = s.sessions[uint32(plan.Clients[j])].identity
		}
		if key, ok := plan.Pairing.SharedKey(pos); ok {
			own.SharedKey = key[:]
		}
		if held {
			own.Version = uint32(t - 1)
			if plan.Staleness != nil {
				own.Version -= uint32(plan.Staleness[pos])
			}
		}
		gi, gs := plan.Pairing.Group(pos)
		own.GroupIndex, own.GroupSize = uint32(gi), uint32(gs)
		s.sessions[uint32(k)].send(newSharedStart(own, shared))
	}
	s.mu.Unlock()
	rd.phases.mark("start")
	s.log.Printf("%s %d: %d clients, %d pairs, deadline in %v", s.step(), t, len(plan.Clients), plan.Pairing.Pairs(), s.cfg.RoundTimeout)

	timer := time.NewTimer(time.Until(deadline))
	defer timer.Stop()
	var keyShares <-chan time.Time
	if plan.Pairing.Pairs() > 0 {
		kt := time.NewTimer(s.cfg.KeyShareTimeout)
		defer kt.Stop()
		keyShares = kt.C
	}
wait:
	for {
		s.mu.Lock()
		var open bool
		var step <-chan time.Time
		if rd.secure != nil {
			// A secure round ends when its protocol does; each step
			// has a deadline of its own.
			open = !s.advance(rd, time.Now())
			step = time.After(time.Until(rd.secure.due))
		} else {
			open = len(rd.waitingFor()) > 0
		}
		ch := s.changed
		s.mu.Unlock()
		if !open {
			break
		}
		select {
		case <-ch:
		case <-step:
		case <-keyShares:
			keyShares = nil
			s.mu.Lock()
			s.keySharesDue(rd)
			s.mu.Unlock()
		case <-timer.C:
			if rd.secure != nil {
				continue // the keys step's deadline
			}
			s.log.Printf("round %d: deadline passed", t)
			break wait
		case <-ctx.Done():
			// Stopping: the round is abandoned (the checkpoint is the
			// last complete round's), and no one is awaited in it.
			s.mu.Lock()
			s.round = nil
			s.mu.Unlock()
			return report.Round{}, nil, ctx.Err()
		}
	}
	if rd.secure == nil {
		rd.phases.mark("uploads")
	}
	s.mu.Lock()
	s.round = nil
	s.notify()
	if rd.secure != nil {
		// No message reaches the round's protocol any more (s.round is
		// nil): its sum is unmasked outside the lock, on all cores.
		s.mu.Unlock()
		plan.Unmask()
		s.mu.Lock()
	}
	defer s.mu.Unlock()
	var late []int
	for _, pos := range rd.waitingFor() {
		late = append(late, plan.Clients[pos])
	}
	if len(late) > 0 {
		s.log.Printf("round %d: no upload by the deadline from %d of %d clients: %s", t, len(late), len(plan.Clients), firstTen(late))
	}
	r, err := s.eng.End(plan)
	rd.phases.mark("aggregate")
	if lossPrivate(s.cfg.Run) {
		r.TrainLoss = math.NaN() // the clients keep it (lossPrivate): null in metrics.jsonl
	}
	r.SetupBytes = rd.setup // what was relayed, signatures and framing included
	if rd.secure != nil {
		if wrong := rd.secure.srv.WrongShares(); len(wrong) > 0 {
			s.log.Printf("round %d: clients %v revealed shares that do not match their commitments; left out", t, wrong)
		}
	}
	return r, &rd.phases, err
}

// decline takes a client that declines the round out of it: no step
// waits for it. s.mu is held.
func (s *Server) decline(sess *session, d *pb.Decline) error {
	rd := s.round
	if rd == nil || d.GetRound() != uint32(rd.plan.T) {
		return fmt.Errorf("declined round %d, which is not under way", d.GetRound())
	}
	pos, ok := rd.pos[sess.id]
	if !ok {
		return fmt.Errorf("round %d: declined, but not chosen", d.GetRound())
	}
	reason := d.GetReason()
	if len(reason) > 300 {
		reason = reason[:300] + "..."
	}
	s.log.Printf("round %d: client %d declined: %q", rd.plan.T, sess.id, reason)
	s.cfg.Metrics.declined()
	if rd.refuse(pos) {
		s.partnerGone(rd, pos)
	}
	if sr := rd.secure; sr != nil {
		delete(sr.survivors, sess.id)
		sr.revealed[sess.id] = true
	}
	s.notify()
	return nil
}

// upload adds sess's upload to the round under way.
func (s *Server) upload(sess *session, u *pb.Upload) error {
	rd := s.round
	if rd == nil || u.GetRound() != uint32(rd.plan.T) {
		return fmt.Errorf("an upload for round %d, which is not under way (replayed or late)", u.GetRound())
	}
	pos, ok := rd.pos[sess.id]
	if !ok {
		return fmt.Errorf("round %d: client %d was not chosen", u.GetRound(), sess.id)
	}
	if !rd.waiting(pos) {
		return fmt.Errorf("round %d: a second upload", u.GetRound())
	}
	var err error
	switch sr := rd.secure; {
	case sr == nil:
		err = rd.plan.Add(pos, fl.Upload{Payloads: u.GetPayloads(), Examples: sess.examples, Loss: u.GetLoss()})
	case sr.step != secureMasked || !sr.kept[sess.id]:
		err = errors.New("a masked upload outside the masking step, or from a client not kept for it")
	default:
		err = rd.plan.AddMasked(pos, u.GetMasked(), u.GetLoss())
	}
	if err != nil {
		rd.refuse(pos)
		err = fmt.Errorf("round %d: %w", u.GetRound(), err)
	} else {
		rd.accept(pos)
		s.cfg.Metrics.uploaded()
	}
	// A client that uploads has sent all it will: if it is refused, or
	// in transfer mode sent no sealed bits, a partner still waiting for
	// it (a follower waits for the leader's bits) stops waiting. A partner
	// that has what it needs is past pairing and ignores this.
	if err != nil || s.sealed != 0 && !rd.sealed[pos] {
		s.partnerGone(rd, pos)
	}
	s.notify()
	return err
}
