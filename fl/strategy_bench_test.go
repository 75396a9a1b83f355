package fl

import (
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/fedpq/fedpq/corr"
	"github.com/fedpq/fedpq/mech"
)

// benchModel is corbin-cnn's size (225,034 parameters) in two tensors.
func benchModel(rng *rand.Rand) ([][]float32, [][]float64) {
	sizes := []int{225_000, 34}
	w, est := make([][]float32, len(sizes)), make([][]float64, len(sizes))
	for i, n := range sizes {
		w[i], est[i] = make([]float32, n), make([]float64, n)
		for j := range n {
			w[i][j] = float32(rng.NormFloat64() * 0.05)
			est[i][j] = rng.NormFloat64() * 0.01
		}
	}
	return w, est
}

// BenchmarkServerOptimizers times one server step of each optimizer on a
// model of corbin-cnn's size, moments included.
func BenchmarkServerOptimizers(b *testing.B) {
	global, est := benchModel(rand.New(rand.NewPCG(1, 2)))
	for _, name := range ServerOptimizers {
		b.Run(name, func(b *testing.B) {
			c := DefaultServerConfig()
			c.Name, c.LR = name, 0.1
			opt, err := NewServerOptimizer(c, "updates")
			if err != nil {
				b.Fatal(err)
			}
			_, moments := opt.Step(global, est, nil)
			b.ResetTimer()
			for range b.N {
				_, moments = opt.Step(global, est, moments)
			}
		})
	}
}

// BenchmarkAdaptiveSpread times the adaptive range's denoised spread of
// one round's estimate of corbin-cnn's size, for a mechanism alone and in
// pairs.
func BenchmarkAdaptiveSpread(b *testing.B) {
	_, est := benchModel(rand.New(rand.NewPCG(3, 4)))
	for _, name := range []string{"ldpq", "corbin"} {
		b.Run(name, func(b *testing.B) {
			m, err := mech.New(name, mech.DefaultConfig())
			if err != nil {
				b.Fatal(err)
			}
			alone := 50
			if name == "corbin" {
				alone = 0
			}
			for range b.N {
				for _, t := range est {
					if _, err := spread(m, t, mech.Range{Radius: 0.05}, 50, alone); err != nil {
						b.Fatal(err)
					}
				}
			}
		})
	}
}

// BenchmarkAttackEncode times a Byzantine client's message of
// corbin-cnn's size under ldpq, beside the honest encoding.
func BenchmarkAttackEncode(b *testing.B) {
	global, _ := benchModel(rand.New(rand.NewPCG(5, 6)))
	local, _ := benchModel(rand.New(rand.NewPCG(7, 8)))
	m, err := mech.New("ldpq", mech.DefaultConfig())
	if err != nil {
		b.Fatal(err)
	}
	ranges := []mech.Range{{Radius: 0.05}, {Radius: 0.05}}
	for _, spec := range []string{"", "sign-flip", "scale:3", "constant", "extreme"} {
		a, err := ParseAttack(spec)
		if err != nil {
			b.Fatal(err)
		}
		name := spec
		if name == "" {
			name = "honest"
		}
		b.Run(name, func(b *testing.B) {
			for i := range b.N {
				slot := mech.Slot{Private: corr.Derive([]byte("bench"), "private", uint64(i))}
				l := [][]float32{append([]float32(nil), local[0]...), append([]float32(nil), local[1]...)}
				fixed := corr.Derive([]byte("bench"), "constant")
				if _, err := a.Encode(m, "updates", global, l, ranges, slot, fixed); err != nil {
					b.Fatal(fmt.Errorf("%s: %w", name, err))
				}
			}
		})
	}
}
