package fl

import (
	"context"
	"fmt"
	"math"
	"strconv"

	"github.com/fedpq/fedpq/corr"
	"github.com/fedpq/fedpq/internal/spec"
	"github.com/fedpq/fedpq/mech"
	"github.com/fedpq/fedpq/model"
)

// Attack is what a Byzantine client does, within the support: every
// message it sends is one an honest client could send, so the decoders
// accept it and only aggregation can bound it (docs/security.md,
// "Poisoning within the support"). It exists to measure robust
// aggregation: the simulation makes a fixed set of clients attack
// (Config.Byzantine), and a deployed client can attack by itself
// (transport.ClientConfig.Byzantine). The server is never told.
//
// The kinds:
//   - sign-flip: the update (trained minus global) is negated, then
//     encoded as an honest client's would be (randomization included);
//   - scale:S: the update is multiplied by S, then encoded honestly (at
//     S = 100, clipping puts most of it at the range's edge; none does not
//     clip, and the server refuses a value beyond its support);
//   - label-flip: the client trains on the labels C-1-y (C classes), then
//     encodes honestly;
//   - constant: every round the same input, the upper edge c + r of each
//     tensor's range, encoded with randomness that is the same every
//     round (the private coins of a stream fixed for the run; a paired
//     client encodes alone, ignoring its partner); whatever the model;
//   - extreme: every round, the most extreme message an honest client
//     could send against the honest update's direction (mech.Extremal).
type Attack struct {
	Kind  string  // "" (none), or one of the kinds above without ":S"
	Scale float64 // scale:S: the factor S
}

// Attack kinds.
const (
	SignFlip  = "sign-flip"
	ScaleBy   = "scale"
	LabelFlip = "label-flip"
	Constant  = "constant"
	Extreme   = "extreme"
)

// ParseAttack reads an attack: "" (none), sign-flip, scale:S (S finite and
// not 0), label-flip, constant or extreme.
func ParseAttack(s string) (Attack, error) {
	p := spec.Parse(s)
	switch p.Kind {
	case "":
		if p.HasArgs {
			break
		}
		return Attack{}, nil
	case SignFlip, LabelFlip, Constant, Extreme:
		if p.HasArgs {
			return Attack{}, fmt.Errorf("fl: byzantine %q: %s takes no argument", s, p.Kind)
		}
		return Attack{Kind: p.Kind}, nil
	case ScaleBy:
		f, err := p.Numbers()
		if err != nil || len(f) != 1 || f[0] == 0 || math.IsInf(f[0], 0) || math.IsNaN(f[0]) {
			return Attack{}, fmt.Errorf("fl: byzantine %q: want scale:S with S a finite number other than 0, such as scale:100", s)
		}
		return Attack{Kind: p.Kind, Scale: f[0]}, nil
	}
	return Attack{}, fmt.Errorf("fl: byzantine %q: want sign-flip, scale:S, label-flip, constant or extreme (empty: none)", s)
}

// String is the attack as ParseAttack reads it.
func (a Attack) String() string {
	if a.Kind == ScaleBy {
		return ScaleBy + ":" + strconv.FormatFloat(a.Scale, 'g', -1, 64)
	}
	return a.Kind
}

// Check reports an attack that mechanism m cannot carry out: extreme needs
// a mechanism with an extreme message.
func (a Attack) Check(m mech.Mechanism) error {
	if a.Kind != Extreme {
		return nil
	}
	if _, err := mech.ExtremeOf(m); err != nil {
		return fmt.Errorf("fl: byzantine extreme: %w", err)
	}
	return nil
}

// FlipLabels returns a copy of y with every label l replaced by
// classes-1-l: what a label-flip attacker trains on. y itself, which
// other clients share, is left alone.
func FlipLabels(y []int32, classes int) ([]int32, error) {
	if classes < 2 {
		return nil, fmt.Errorf("fl: byzantine label-flip needs at least 2 classes, the data has %d", classes)
	}
	f := make([]int32, len(y))
	for i, l := range y {
		if l < 0 || int(l) >= classes {
			return nil, fmt.Errorf("fl: byzantine label-flip: label %d of example %d is not one of the %d classes", l, i, classes)
		}
		f[i] = int32(classes-1) - l
	}
	return f, nil
}

// Encode is the package's Encode for a client that attacks: local is its
// trained weights (label-flip: trained on flipped labels), overwritten.
// fixed is the constant attack's randomness, a stream that starts at the
// same place every round (a fresh corr.Derive of one key per client and
// run); the other kinds ignore it. The zero Attack is Encode.
func (a Attack) Encode(m mech.Mechanism, input string, global, local [][]float32, ranges []mech.Range, slot mech.Slot, fixed corr.Source) ([][]byte, error) {
	switch a.Kind {
	case SignFlip, ScaleBy:
		s := a.Scale
		if a.Kind == SignFlip {
			s = -1
		}
		if input == ClippedUpdates || input == ClippedLayers { // the scaled update, clipped as any
			if err := scaledInputs("weights", global, local, s); err != nil {
				return nil, err
			}
			return Encode(m, input, global, local, ranges, slot)
		}
		if err := scaledInputs(input, global, local, s); err != nil {
			return nil, err
		}
		return encodeTensors(m, local, ranges, slot)
	case Constant, Extreme:
		if input == ClippedUpdates || input == ClippedLayers {
			return nil, fmt.Errorf("fl: byzantine %s is defined per tensor and range, not for DP-FedAvg's clipped updates", a.Kind)
		}
	}
	switch a.Kind {
	case Constant:
		return constantMessage(m, local, ranges, slot, fixed)
	case Extreme:
		return extremeMessage(m, global, local, ranges, slot)
	}
	return Encode(m, input, global, local, ranges, slot)
}

// scaledInputs turns local in place into what a client whose update is
// scaled by s encodes: s (local - global) in updates mode, global +
// s (local - global) in weights mode, computed in float64 and rounded once
// to float32. A result beyond float32 is an error, clearer than the
// mechanism's refusal of an Inf.
func scaledInputs(perturb string, global, local [][]float32, s float64) error {
	if err := toInputs("weights", global, local); err != nil { // checks the shapes only
		return err
	}
	for i, w := range local {
		for j, v := range w {
			g := float64(global[i][j])
			x := s * (float64(v) - g)
			if perturb == "weights" {
				x += g
			}
			if math.IsInf(float64(float32(x)), 0) {
				return fmt.Errorf("fl: byzantine scale %g: tensor %d value %d becomes %g, beyond float32", s, i, j, x)
			}
			w[j] = float32(x)
		}
	}
	return nil
}

// constantMessage encodes the upper edge of each tensor's range with the
// fixed randomness: for the one-bit mechanisms the payload is then the
// same every round whatever the range (the edge's threshold does not
// depend on it), for sdq too (the edge's index is the top one whatever
// the dither), and for none and gaussian as long as the range is.
func constantMessage(m mech.Mechanism, local [][]float32, ranges []mech.Range, slot mech.Slot, fixed corr.Source) ([][]byte, error) {
	if len(ranges) != len(local) {
		return nil, fmt.Errorf("fl: %d tensors and %d ranges", len(local), len(ranges))
	}
	s := mech.Slot{Private: fixed}
	if c := m.Coupling(); c == mech.Grouped || c == mech.Dithered {
		s.Shared, s.Index, s.Size = slot.Shared, slot.Index, slot.Size
	}
	for i, w := range local {
		edge := float32(ranges[i].Center + ranges[i].Radius)
		for j := range w {
			w[j] = edge
		}
	}
	return encodeTensors(m, local, ranges, s)
}

// extremeMessage writes, per tensor, the extreme message against the
// client's honest update local - global (the direction global - local).
func extremeMessage(m mech.Mechanism, global, local [][]float32, ranges []mech.Range, slot mech.Slot) ([][]byte, error) {
	x, err := mech.ExtremeOf(m)
	if err != nil {
		return nil, fmt.Errorf("fl: byzantine extreme: %w", err)
	}
	if err := toInputs("updates", global, local); err != nil {
		return nil, err
	}
	if len(ranges) != len(local) {
		return nil, fmt.Errorf("fl: %d tensors and %d ranges", len(local), len(ranges))
	}
	payloads := make([][]byte, len(local))
	for i, u := range local {
		for j := range u {
			u[j] = -u[j]
		}
		if payloads[i], err = x.Extreme(nil, u, ranges[i], slot); err != nil {
			return nil, fmt.Errorf("tensor %d: %w", i, err)
		}
	}
	return payloads, nil
}

// byzantine draws which of n clients attack: round(fraction n) of them,
// uniformly at random from the secret, the same set for the whole run.
func byzantine(secret []byte, n int, fraction float64) []bool {
	k := int(math.Round(fraction * float64(n)))
	if k == 0 {
		return nil
	}
	perm := make([]int, n)
	corr.Shuffle(corr.Derive(secret, "byzantine"), perm)
	b := make([]bool, n)
	for _, i := range perm[:k] {
		b[i] = true
	}
	return b
}

// ValidateByzantine checks the attack's settings for a run of n clients.
func (c *Config) ValidateByzantine(n int) error {
	f := c.ByzantineFraction
	switch {
	case !(f >= 0 && f < 0.5):
		return fmt.Errorf("fl: byzantine fraction %v must be in [0, 0.5)", f)
	case f > 0 && c.Byzantine.Kind == "":
		return fmt.Errorf("fl: byzantine fraction %v without an attack: name one (byzantine: sign-flip, scale:S, label-flip, constant or extreme)", f)
	case f > 0 && math.Round(f*float64(n)) == 0:
		return fmt.Errorf("fl: byzantine fraction %v of %d clients rounds to no client: at least %.3g makes one", f, n, 0.5/float64(n))
	}
	return nil
}

// attacker reports whether client k attacks.
func (e *Engine) attacker(k int) bool { return e.byz != nil && e.byz[k] }

// attacking wraps honest so that the run's attackers encode as they
// attack; every other client's upload is honest's.
func (e *Engine) attacking(honest encoder) encoder {
	return func(k int, p *Plan, base, local [][]float32, slot mech.Slot) ([][]byte, error) {
		if !e.attacker(k) {
			return honest(k, p, base, local, slot)
		}
		return e.cfg.Byzantine.Encode(e.m, e.cfg.Input(), base, local, p.Ranges, slot,
			corr.Derive(e.secret, "byzantine-constant", uint64(k)))
	}
}

// flipping is a worker's Trainer in a label-flip run: the attackers
// (TrainConfig.Client) train on the flipped labels, the others on y.
type flipping struct {
	Trainer
	byz     []bool
	flipped []int32
}

func (f flipping) Train(ctx context.Context, weights [][]float32, x []float32, y []int32, idx []int, cfg model.TrainConfig) ([][]float32, float64, error) {
	if f.byz[cfg.Client] {
		y = f.flipped
	}
	return f.Trainer.Train(ctx, weights, x, y, idx, cfg)
}

// setByzantine chooses the run's attackers and, where there are any, wraps
// encoding, and for label-flip training, in their attack: a mechanism must
// be able to carry it out.
func (e *Engine) setByzantine(n int) error {
	if err := e.cfg.ValidateByzantine(n); err != nil {
		return err
	}
	if err := e.cfg.Byzantine.Check(e.m); err != nil {
		return err
	}
	if e.byz = byzantine(e.secret, n, e.cfg.ByzantineFraction); e.byz == nil {
		return nil
	}
	e.encode = e.attacking(e.encode)
	if e.cfg.Byzantine.Kind != LabelFlip {
		return nil
	}
	if e.task.Data == nil || e.task.Data.Train == nil {
		return fmt.Errorf("fl: byzantine label-flip needs the clients' training data (a simulation)")
	}
	train := e.task.Data.Train
	flipped, err := FlipLabels(train.Y, train.Classes)
	if err != nil {
		return err
	}
	trainers := make([]Trainer, len(e.task.Trainers)) // the caller's slice stays as it was
	for w, tr := range e.task.Trainers {
		trainers[w] = flipping{tr, e.byz, flipped}
	}
	e.task.Trainers = trainers
	return nil
}
