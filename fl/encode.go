package fl

import (
	"fmt"

	"github.com/fedpq/fedpq/mech"
)

// encoder turns client k's trained weights local into its upload's
// payloads for round p, with its slot. A run's is honest, wrapped by its
// attackers where it has any (byzantine.go), so that an honest client's
// upload never passes through an attack.
type encoder func(k int, p *Plan, local [][]float32, slot mech.Slot) ([][]byte, error)

// honest is what every honest client sends: Encode, in the round's ranges.
func (e *Engine) honest(_ int, p *Plan, local [][]float32, slot mech.Slot) ([][]byte, error) {
	return Encode(e.m, e.cfg.Perturb, p.Global, local, p.Ranges, slot)
}

// Encode turns a client's trained weights into its upload's payloads: the
// weights, or in updates mode their difference from the global model
// (computed in place in local), each tensor encoded by the mechanism in its
// range with the client's slot.
func Encode(m mech.Mechanism, perturb string, global, local [][]float32, ranges []mech.Range, slot mech.Slot) ([][]byte, error) {
	if err := toInputs(perturb, global, local); err != nil {
		return nil, err
	}
	return encodeTensors(m, local, ranges, slot)
}

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
