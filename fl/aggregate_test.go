package fl

import (
	"math"
	"testing"

	"github.com/fedpq/fedpq/data"
	"github.com/fedpq/fedpq/mech"
)

// TestDitherPerTensor: with equal weights, a dithered upload of several
// tensors decodes each tensor with its own part of the client's dither
// stream, as the client drew it: the round's mean is the mean of the
// clients' uploads decoded one by one, in tensor order.
func TestDitherPerTensor(t *testing.T) {
	for _, name := range []string{"sdq", "jopeq", "laplace+sdq"} {
		cfg := baseConfig()
		cfg.Mechanism, cfg.Weighting = name, "mean"
		cfg.Mech.Rate = 2
		task := fakeTask(4, 1, func(int) int { return 1 })
		task.Model = twoTensors{}
		task.Data = &data.Federated{Train: task.Data.Train, Test: task.Data.Test}
		e, err := New(cfg, task)
		if err != nil {
			t.Fatal(err)
		}
		p, err := e.Begin(1, nil)
		if err != nil {
			t.Fatal(err)
		}
		m, err := mech.New(name, cfg.Mech)
		if err != nil {
			t.Fatal(err)
		}
		want := [][]float64{make([]float64, 2), make([]float64, 2)}
		for pos := range p.Clients {
			local := [][]float32{{0.1, -0.5}, {0.3, float32(pos) / 4}}
			slot, err := p.Pairing.ClientSlot(pos, 4)
			if err != nil {
				t.Fatal(err)
			}
			payloads, err := Encode(m, "weights", p.Global, local, p.Ranges, slot)
			if err != nil {
				t.Fatal(err)
			}
			if err := p.Add(pos, Upload{Payloads: payloads, Examples: 1, Loss: 0.1}); err != nil {
				t.Fatal(err)
			}
			server := p.Pairing.ServerSlot(pos) // one stream, read tensor after tensor
			for i, pl := range payloads {
				s, err := m.NewSum(len(want[i]), p.Ranges[i])
				if err != nil {
					t.Fatal(err)
				}
				dec := make([]float64, len(want[i]))
				if err := s.Add(pl, server); err != nil {
					t.Fatal(err)
				}
				if err := s.Mean(dec); err != nil {
					t.Fatal(err)
				}
				for j, v := range dec {
					want[i][j] += v / float64(len(p.Clients))
				}
			}
		}
		got, err := p.agg.mean()
		if err != nil {
			t.Fatal(err)
		}
		for i := range want {
			for j := range want[i] {
				if math.Abs(got[i][j]-want[i][j]) > 1e-9 {
					t.Errorf("%s: tensor %d [%d]: round mean %v, the clients' decoded mean %v", name, i, j, got[i][j], want[i][j])
				}
			}
		}
	}
}
