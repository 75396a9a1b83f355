package fl

import (
	"fmt"
	"math"

	"github.com/fedpq/fedpq/mech"
)

// encoder turns client k's trained weights local, trained from the model
// base (p.Global in a round, the model it started from in an asynchronous
// buffer), into its upload's payloads for round p, with its slot. A run's is honest, wrapped by its
// attackers where it has any (byzantine.go), so that an honest client's
// upload never passes through an attack.
type encoder func(k int, p *Plan, base, local [][]float32, slot mech.Slot) ([][]byte, error)

// honest is what every honest client sends: Encode, in the round's ranges.
func (e *Engine) honest(_ int, p *Plan, base, local [][]float32, slot mech.Slot) ([][]byte, error) {
	return Encode(e.m, e.cfg.Input(), base, local, p.Ranges, slot)
}

// Encode turns a client's trained weights into its upload's payloads, as
// input (Config.Input) says: the weights, their difference from the
// global model (computed in place in local), each tensor encoded by the
// mechanism in its range with the client's slot; or, ClippedUpdates, that
// difference as one vector clipped to the one range's radius in L2 norm,
// encoded whole.
func Encode(m mech.Mechanism, input string, global, local [][]float32, ranges []mech.Range, slot mech.Slot) ([][]byte, error) {
	if input == ClippedUpdates || input == ClippedLayers {
		flat, err := clippedInput(global, local, ranges, input == ClippedLayers)
		if err != nil {
			return nil, err
		}
		return encodeTensors(m, flat, ranges[:len(flat)], slot)
	}
	if err := toInputs(input, global, local); err != nil {
		return nil, err
	}
	return encodeTensors(m, local, ranges, slot)
}

// clippedInput is a DP-FedAvg client's one vector: its update local -
// global clipped in L2 norm to the round's first range's radius, whole or,
// perLayer, each tensor to its share (ClippedLayers); with an adaptive
// clip, whether no clipping was needed: 1 or 0 in a vector of its own
// (a second range, indicatorRange), or, for an L2 mechanism (a second
// range {0, s}, indicatorScale), +s or -s as the vector's last
// coordinate, the update clipped to sqrt(C'^2 - s^2) so that the whole
// vector stays within the first range's C'.
func clippedInput(global, local [][]float32, ranges []mech.Range, perLayer bool) ([][]float32, error) {
	if err := toInputs("weights", global, local); err != nil { // checks the shapes only
		return nil, err
	}
	inside := len(ranges) == 2 && ranges[1].Center == 0 && ranges[1].Radius > 0 && ranges[1].Radius < ranges[0].Radius
	if len(ranges) < 1 || len(ranges) > 2 || ranges[0].Center != 0 || ranges[0].Validate() != nil ||
		len(ranges) == 2 && ranges[1] != indicatorRange && !inside {
		return nil, fmt.Errorf("fl: a clipped update takes the ranges {0, clip} and, for an adaptive clip, %v or {0, s < clip}; not %v", indicatorRange, ranges)
	}
	n := 0
	for _, w := range local {
		n += len(w)
	}
	clip := ranges[0].Radius
	if inside {
		s := ranges[1].Radius
		clip = math.Sqrt((clip - s) * (clip + s))
	}
	flat := make([]float32, n, n+1)
	unclipped, err := true, error(nil)
	if perLayer {
		at := 0
		for i, w := range local {
			share := clip * math.Sqrt(float64(len(w))/float64(n))
			within, err := clipUpdate(flat[at:at+len(w)], global[i:i+1], local[i:i+1], share)
			if err != nil {
				return nil, err
			}
			unclipped = unclipped && within
			at += len(w)
		}
	} else if unclipped, err = clipUpdate(flat, global, local, clip); err != nil {
		return nil, err
	}
	switch {
	case len(ranges) == 1:
		return [][]float32{flat}, nil
	case inside:
		s := float32(ranges[1].Radius)
		if !unclipped {
			s = -s
		}
		return [][]float32{append(flat, s)}, nil
	}
	b := float32(0)
	if unclipped {
		b = 1
	}
	return [][]float32{flat, {b}}, nil
}

// indicatorRange is the range of the one value an adaptive clip asks of
// each client: whether its update was within the clip.
var indicatorRange = mech.Range{Center: 0.5, Radius: 0.5}

// toInputs turns local, a client's trained weights, in place into what
// it encodes: the weights themselves, or in updates mode their difference
// from the global model.
func toInputs(perturb string, global, local [][]float32) error {
	if len(local) != len(global) {
		return fmt.Errorf("fl: %d tensors, %d global", len(local), len(global))
	}
	for i, w := range local {
		if len(w) != len(global[i]) {
			return fmt.Errorf("fl: tensor %d has %d values, the model %d", i, len(w), len(global[i]))
		}
	}
	if perturb == "updates" {
		for i, w := range local {
			for j := range w {
				w[j] -= global[i][j]
			}
		}
	}
	return nil
}

// encodeTensors encodes each tensor of in by the mechanism in its range
// with the client's slot.
func encodeTensors(m mech.Mechanism, in [][]float32, ranges []mech.Range, slot mech.Slot) ([][]byte, error) {
	if len(ranges) != len(in) {
		return nil, fmt.Errorf("fl: %d tensors and %d ranges", len(in), len(ranges))
	}
	payloads := make([][]byte, len(in))
	for i, w := range in {
		var err error
		if payloads[i], err = m.Encode(nil, w, ranges[i], slot); err != nil {
			return nil, fmt.Errorf("tensor %d: %w", i, err)
		}
	}
	return payloads, nil
}
