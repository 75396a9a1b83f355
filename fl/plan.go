package fl

import (
	"fmt"
	"math"

	"github.com/fedpq/fedpq/mech"
	"github.com/fedpq/fedpq/privacy"
	"github.com/fedpq/fedpq/report"
	"github.com/fedpq/fedpq/secagg"
)

// Plan is one round as the server runs it: what it announces when the
// round begins, and the streaming aggregate of the uploads it receives.
// The simulation and the deployed server both run rounds through a Plan;
// only where the uploads come from differs.
type Plan struct {
	T       int
	Clients []int        // the round's clients by id, increasing: Clients[i] is at position i
	Ranges  []mech.Range // each tensor's clipping range, public
	Pairing *Pairing     // the pairing or group order, and the server's slots
	Global  [][]float32  // the model the clients start from; read only
	agg     roundSum
	got     []bool // positions whose upload was added
	loss    float64
}

// MaxLoss is the largest training loss an upload may report: the trainer
// computes in float32, so an honest client's loss is at most float32's
// largest value (a diverged one is Inf or NaN, refused too). The round's
// mean of such losses stays finite.
const MaxLoss = math.MaxFloat32

// Upload is one client's message for a round: a payload per tensor, with
// the number of examples it trained on (FedAvg's weight) and its training
// loss.
type Upload struct {
	Payloads [][]byte
	Examples int
	Loss     float64
}

// Begin starts round t among the clients online (ids; nil means all):
// it samples the round's clients from them, draws the pairing or group
// order and chooses the ranges.
func (e *Engine) Begin(t int, online []int) (*Plan, error) {
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
	sel := e.sample(t, online)
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
		agg, err = e.newAggregate(ranges, sel, pairing.ServerSlot)
	}
	if err != nil {
		return nil, err
	}
	return &Plan{
		T: t, Clients: sel, Ranges: ranges, Global: e.global, Pairing: pairing,
		agg: agg, got: make([]bool, len(sel)),
	}, nil
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

// SecAgg is a secure round's protocol server, settings and beacon link
// (secagg.Beacon), which a deployed server drives with its clients'
// messages; nil when the round is not secure.
func (p *Plan) SecAgg() (*secagg.Server, secagg.Params, [32]byte) {
	if s, ok := p.agg.(*secure); ok {
		return s.server, s.params, s.link
	}
	return nil, secagg.Params{}, [32]byte{}
}

// MaskedBytes is the size of a masked upload in a secure round.
func (p *Plan) MaskedBytes() int {
	if s, ok := p.agg.(*secure); ok {
		return (s.total()*s.bits + 7) / 8
	}
	return 0
}

// AddMasked adds the masked upload of the client at position pos to a
// secure round of a deployed server (its fields packed by PackFields),
// with its training loss.
func (p *Plan) AddMasked(pos int, masked []byte, loss float64) error {
	s, ok := p.agg.(*secure)
	switch {
	case !ok:
		return fmt.Errorf("round %d is not secure", p.T)
	case pos < 0 || pos >= len(p.got):
		return fmt.Errorf("position %d is not in round %d", pos, p.T)
	case p.got[pos]:
		return fmt.Errorf("a second upload from client %d in round %d", p.Clients[pos], p.T)
	case !(loss >= 0 && loss <= MaxLoss): // NaN too
		return fmt.Errorf("training loss %v is not in [0, %g]", loss, MaxLoss)
	}
	if err := s.addMasked(pos, masked); err != nil {
		return err
	}
	p.got[pos] = true
	p.loss += loss
	return nil
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

// Received is the number of uploads added.
func (p *Plan) Received() int { return p.agg.count() }

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
			if err := e.update(est); err != nil {
				r.Discarded = err.Error()
			} else if e.radii != nil {
				if err := e.adapt(est, p.Ranges, received, p.alone()); err != nil {
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
	}
	if received > 0 {
		alone := p.alone()
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
	r.SetupBytes = int64(p.Pairing.Pairs() * SetupBytes(e.m, e.params, e.cfg.Transfer))
	if sec, ok := p.agg.(*secure); ok {
		r.SetupBytes += sec.setup
	}
	if e.ldp {
		r.Epsilon = e.cfg.Mech.Epsilon
		r.EpsilonSpent = e.spent()
		l, _, err := e.Ledger()
		if err != nil {
			return r, err
		}
		if e.m.Alone() > 0 { // AugCorBin: some clients quantize alone by design
			e.central(l, p)
		}
		if e.cfg.SecureAggregation || e.cfg.Shuffle {
			if err := e.hidden(l, p.T == e.cfg.Rounds); err != nil {
				return r, err
			}
		}
		r.Privacy = l
	} else if _, modular := e.m.(mech.Modular); modular && e.cfg.SecureAggregation {
		// ddgauss and skellam: no guarantee from one message, a central
		// one from the secure sum.
		l := &privacy.Ledger{Rounds: e.most(), Parameters: e.params, Delta: e.cfg.LedgerDelta}
		if err := e.hidden(l, p.T == e.cfg.Rounds); err != nil {
			return r, err
		}
		r.Privacy = l
	}
	if p.T%e.cfg.EvalEvery == 0 || p.T == e.cfg.Rounds {
		if err := e.evaluate(&r); err != nil {
			return r, err
		}
	}
	e.done = p.T
	r.Seconds = e.elapsed()
	return r, nil
}

// Enroll records that client k, which holds its own data (a server's
// client), trains on the given number of examples: its weight is
// Weight(examples).
func (e *Engine) Enroll(k, examples int) error {
	if k < 0 || k >= len(e.examples) {
		return fmt.Errorf("fl: client %d: the run has clients 0 to %d", k, len(e.examples)-1)
	}
	if examples < 1 {
		return fmt.Errorf("fl: client %d has no examples", k)
	}
	e.examples[k] = e.cfg.weight(examples)
	return nil
}

// central adds augcorbin's user-level central bound for round p to l: the
// round's mean over the uploads received, of which those whose sender
// quantized alone make the noise.
func (e *Engine) central(l *privacy.Ledger, p *Plan) {
	if e.cfg.Weighting != "mean" {
		l.CentralNote = "the central bound is for equal weights (weighting: mean)"
		return
	}
	alone := 0
	for pos, ok := range p.got {
		if ok && p.Pairing.Partner(pos) < 0 {
			alone++
		}
	}
	if alone == 0 {
		l.CentralNote = "no client quantized alone"
		return
	}
	eps, err := privacy.AugCorBinCentral(e.cfg.Mech.Epsilon, e.cfg.LedgerDelta, alone, e.params)
	if err != nil {
		l.CentralNote = err.Error()
		return
	}
	l.Central = privacy.NewBound(eps, e.cfg.LedgerDelta)
}
