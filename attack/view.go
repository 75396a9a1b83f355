// Package attack measures what a server learns of a client's training
// images from the messages it receives: gradient-inversion attacks (DLG:
// Zhu, Liu and Han, "Deep leakage from gradients", NeurIPS 2019; iDLG:
// Zhao, Mopuri and Bilen, "iDLG: improved deep leakage from gradients",
// 2020) run against the server's decoded view of an upload, scored by SSIM,
// MSE and label accuracy against the true images.
//
// The observer is an honest-but-curious server: it knows the model's
// weights, the mechanism, the public ranges and what it shares with the
// client (a dither), and it sees the upload; it does not see the client's
// private coins or a pair's shared bits. The attack is empirical: a failed
// reconstruction is evidence, not a guarantee; the guarantees are the
// mechanisms' eps (docs/privacy.md), and package audit tests those.
package attack

import (
	"context"
	"fmt"
	"math"
	"strings"

	"github.com/fedpq/fedpq/corr"
	"github.com/fedpq/fedpq/fl"
	"github.com/fedpq/fedpq/mech"
	"github.com/fedpq/fedpq/model"
)

// Batch is one client's training examples, laid out as package data does.
type Batch struct {
	X []float32 // examples back to back (images HWC, pixels in [0, 1])
	Y []int32
}

// Upload says what a client sends and how it is clipped.
type Upload struct {
	// Message is "gradient" (the gradient of the batch's mean loss, as
	// FedSGD sends) or "update" (the weights after one SGD step of rate LR
	// minus the weights before, as FedAvg with one local step sends).
	Message string
	LR      float64
	// Range is "oracle" (each tensor's range is the min and max of the
	// true message: nothing is clipped, the attacker's best case) or
	// "fixed:C,R" (every tensor's range is [C-R, C+R]).
	Range string
}

// ranges returns the range of each of the n tensors of the clients'
// messages msgs under the rule.
func (u Upload) ranges(n int, msgs [][][]float32) ([]mech.Range, error) {
	out := make([]mech.Range, n)
	if u.Range == "oracle" {
		for i := range out {
			lo, hi := math.Inf(1), math.Inf(-1)
			for _, m := range msgs {
				for _, v := range m[i] {
					lo, hi = min(lo, float64(v)), max(hi, float64(v))
				}
			}
			out[i] = mech.Range{Center: (lo + hi) / 2, Radius: max((hi-lo)/2, minRadius)}
		}
		return out, nil
	}
	rule, err := fl.ParseRange(u.Range)
	if err == nil && rule.Kind != "fixed" || err != nil && !strings.HasPrefix(u.Range, "fixed:") {
		return nil, fmt.Errorf("attack: range %q: want oracle or fixed:C,R", u.Range)
	}
	if err != nil {
		return nil, err // a fixed range fl refuses, with fl's reason
	}
	for i := range out {
		out[i] = mech.Range{Center: rule.Center, Radius: rule.Radius}
	}
	return out, nil
}

// Validate reports an Upload that View cannot use.
func (u Upload) Validate() error {
	if u.Message != "gradient" && u.Message != "update" {
		return fmt.Errorf("attack: message %q: want gradient or update", u.Message)
	}
	if u.Message == "update" && !(u.LR > 0 && u.LR < math.Inf(1)) {
		return fmt.Errorf("attack: learning rate %v must be positive", u.LR)
	}
	_, err := u.ranges(0, nil)
	return err
}

// minRadius keeps an oracle range valid for a tensor whose message is
// constant (a zero gradient).
const minRadius = 1e-12

// View returns the server's estimate of the clients' mean gradient at
// weights w, decoded from their uploads exactly as the round engine decodes
// them: each client trains one SGD step on its batch (the Trainer, as in a
// run), encodes its message with package fl's Encode and its round slot,
// and the server adds the payloads to the mechanism's Sums with its own
// slots and takes the mean. An update message is scaled back by -1/LR, so
// the attack always matches a gradient.
//
// With one batch the view is one client's upload, with the mechanism's
// lone client (an unpaired client of a paired mechanism: its exact
// one-message law). With two batches and a paired mechanism, the two
// clients form a pair, and the view is the pair's decoded mean: what the
// server learns from both messages together. seed draws the round's coins.
func View(ctx context.Context, m *model.Model, w [][]float32, mk mech.Mechanism, up Upload, batches []Batch, seed uint64) ([][]float32, error) {
	if err := up.Validate(); err != nil {
		return nil, err
	}
	if len(batches) == 0 {
		return nil, fmt.Errorf("attack: no batch")
	}
	lr := up.LR
	if up.Message == "gradient" {
		lr = 1 // the gradient is the step of rate 1
	}
	tr, err := m.NewTrainer(model.Optimizer{Name: "sgd", LR: lr})
	if err != nil {
		return nil, err
	}
	msgs := make([][][]float32, len(batches))
	for k, b := range batches {
		idx := make([]int, len(b.Y))
		for i := range idx {
			idx[i] = i
		}
		// One epoch of one batch: one plain SGD step, w - lr*g.
		local, _, err := tr.Train(ctx, w, b.X, b.Y, idx, model.TrainConfig{Epochs: 1, Batch: len(b.Y), Seed: seed})
		if err != nil {
			return nil, err
		}
		for i := range local {
			for j := range local[i] {
				local[i][j] -= w[i][j]
				if up.Message == "gradient" {
					local[i][j] = -local[i][j]
				}
			}
		}
		msgs[k] = local
	}
	ranges, err := up.ranges(len(w), msgs)
	if err != nil {
		return nil, err
	}
	n := 0
	for _, t := range w {
		n += len(t)
	}
	secret := corr.SeedSecret(seed)
	pairing := fl.NewPairing(mk, secret, 1, len(batches), false)
	sums := make([]mech.Sum, len(w))
	for i, t := range w {
		s, err := mk.NewSum(len(t), ranges[i])
		if err != nil {
			return nil, err
		}
		sums[i] = s
	}
	for k, msg := range msgs {
		slot, err := pairing.ClientSlot(k, n)
		if err != nil {
			return nil, err
		}
		// "weights": msg is encoded as it is; w only gives the shapes.
		payloads, err := fl.Encode(mk, "weights", w, msg, ranges, slot)
		if err != nil {
			return nil, err
		}
		server := pairing.ServerSlot(k)
		for i, p := range payloads {
			if err := sums[i].Add(p, server); err != nil {
				return nil, fmt.Errorf("attack: decoding tensor %d: %w", i, err)
			}
		}
	}
	view := make([][]float32, len(w))
	for i, s := range sums {
		est := make([]float64, len(w[i]))
		if err := s.Mean(est); err != nil {
			return nil, err
		}
		view[i] = make([]float32, len(est))
		for j, v := range est {
			if up.Message == "update" {
				v = -v / lr
			}
			view[i][j] = float32(v)
		}
	}
	return view, nil
}
