package privacy_test

import (
	"encoding/binary"
	"encoding/json"
	"fmt"
	"math/rand/v2"

	"github.com/fedpq/fedpq/privacy"
)

// stepSource is a run's noise source re-derived at every step from the
// run's secret and the step, as a server would with corr.Derive(secret,
// purpose, step): a checkpoint then needs only the tree's State.
type stepSource struct {
	secret [32]byte
	r      *rand.Rand
}

func (s *stepSource) at(step int) {
	seed := s.secret
	binary.LittleEndian.PutUint64(seed[24:], uint64(step))
	s.r = rand.New(rand.NewChaCha8(seed))
}

func (s *stepSource) NormFloat64() float64 { return s.r.NormFloat64() }

// A DP-FTRL server: calibrate the noise multiplier for eps = 8 at delta =
// 1e-6 over 1000 rounds in which a client takes part at most 10 times, at
// least 99 rounds apart; add the tree's noise to each round's prefix sum of
// clipped updates; checkpoint and restore the tree mid-run; report one
// client's guarantee from the rounds it took part in.
func ExampleTree() {
	const rounds, d, clip = 1000, 4, 1.0
	opt := privacy.TreeOptions{}
	z, err := privacy.TreeNoiseMultiplier(8, 1e-6, rounds, 10, 99, opt)
	if err != nil {
		panic(err)
	}
	fmt.Printf("noise multiplier %.4f\n", z)

	src := &stepSource{secret: [32]byte{1, 2, 3}}
	tree, err := privacy.NewTree(d, z*clip, src, opt)
	if err != nil {
		panic(err)
	}
	noise := make([]float64, d)
	var checkpoint []byte
	for t := 1; t <= 600; t++ {
		src.at(t)
		if err := tree.Next(noise); err != nil {
			panic(err)
		}
		// release the t-th prefix sum of the clipped updates plus noise
		if t == 500 {
			if checkpoint, err = json.Marshal(tree.State()); err != nil {
				panic(err)
			}
		}
	}
	at600 := append([]float64(nil), noise...)

	var state privacy.TreeState
	if err := json.Unmarshal(checkpoint, &state); err != nil {
		panic(err)
	}
	restored, err := privacy.RestoreTree(state, src)
	if err != nil {
		panic(err)
	}
	for t := 501; t <= 600; t++ {
		src.at(t)
		if err := restored.Next(noise); err != nil {
			panic(err)
		}
	}
	fmt.Println("restored run identical at round 600:", fmt.Sprint(noise) == fmt.Sprint(at600))

	client, err := privacy.TreeClient([]int{7, 260, 513, 900}, rounds, z, 1e-6, opt)
	if err != nil {
		panic(err)
	}
	worst, err := privacy.TreeWorstCase(rounds, 10, 99, z, 1e-6, opt)
	if err != nil {
		panic(err)
	}
	fmt.Printf("client: sensitivity %.4f C, rho %.4f, eps %.4f\n", client.Sensitivity, client.Rho, client.Eps)
	fmt.Printf("worst:  sensitivity %.4f C (%d rounds), eps %.4f\n", worst.Sensitivity, worst.Participations, worst.Eps)
	// Output:
	// noise multiplier 6.7540
	// restored run identical at round 600: true
	// client: sensitivity 5.5678 C, rho 0.3398, eps 3.9276
	// worst:  sensitivity 10.3441 C (10 rounds), eps 8.0000
}
