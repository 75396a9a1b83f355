package fl

import (
	"fmt"
	"math"

	"github.com/fedpq/fedpq/mech"
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
	// Staleness is, in an asynchronous buffer (Engine.BeginBuffer), each
	// position's staleness: the server steps made since its client
	// started; nil in a round.
	Staleness []int
	agg       roundSum
	got       []bool // positions whose upload was added
	loss      float64
	online    int // the clients the round was drawn from
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

// SecAgg is a secure round's protocol server, settings and beacon link
// (secagg.Beacon), which a deployed server drives with its clients'
// messages; nil when the round is not secure.
func (p *Plan) SecAgg() (*secagg.Server, secagg.Params, [32]byte) {
	if s, ok := p.agg.(*secure); ok {
		return s.server, s.params, s.link
	}
	return nil, secagg.Params{}, [32]byte{}
}

// Unmask removes the masks from a secure round's sum of uploads (secagg's
// Server.Sum, which checks the revealed shares and rebuilds the secrets
// on all cores), for End, which then only decodes it, and releases the
// protocol's state (secagg's Server.Release): a deployed server calls it
// once no message can reach the round's protocol, outside its lock. It
// does nothing for a round that is not secure or has no upload, and End
// unmasks the sum itself when it was not called.
func (p *Plan) Unmask() {
	if s, ok := p.agg.(*secure); ok && s.count() > 0 && !s.unmasked {
		s.sum, s.sumErr = s.unmaskedSum()
		s.unmasked = true
		s.server.Release()
	}
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

// Received is the number of uploads added.
func (p *Plan) Received() int { return p.agg.count() }

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
