package privacy_test

import (
	"encoding/json"
	"fmt"

	"github.com/fedpq/fedpq/privacy"
)

// DP-FedAvg with 100 of 1,000 clients per round (Poisson sampling, rate
// 0.1), noise multiplier 1, for 1,000 rounds: one client's guarantee at
// delta 1e-5, composed round by round as the run goes, saved and restored
// as a checkpoint would.
func ExampleAccountant() {
	round := privacy.PoissonSampled{Rate: 0.1, Event: privacy.Gaussian{Z: 1}}
	acct := privacy.NewAccountant(privacy.Auto)
	for r := 1; r <= 1000; r++ {
		if err := acct.Compose(round); err != nil {
			panic(err)
		}
		if r == 500 {
			eps, err := acct.Epsilon(1e-5)
			if err != nil {
				panic(err)
			}
			fmt.Printf("after %d rounds: eps %.2f\n", r, eps)
		}
	}
	saved, err := json.Marshal(acct)
	if err != nil {
		panic(err)
	}
	var resumed privacy.Accountant
	if err := json.Unmarshal(saved, &resumed); err != nil {
		panic(err)
	}
	g, err := resumed.Guarantee(1e-5)
	if err != nil {
		panic(err)
	}
	fmt.Printf("after 1000 rounds: eps %.2f at delta %g by %v, %s\n", g.Eps, g.Delta, g.Method, g.Relation)
	rdp := privacy.NewAccountant(privacy.RDP)
	if err := rdp.Compose(privacy.Composed{Event: round, Count: 1000}); err != nil {
		panic(err)
	}
	eps, _ := rdp.Epsilon(1e-5)
	fmt.Printf("the RDP accountant says %.2f\n", eps)
	// Output:
	// after 500 rounds: eps 16.56
	// after 1000 rounds: eps 25.20 at delta 1e-05 by pld, add/remove one client
	// the RDP accountant says 27.16
}

// The noise multiplier for a budget: the same run at eps 5, delta 1e-5.
func ExampleNoiseMultiplier() {
	z, err := privacy.NoiseMultiplier(5, 1e-5, func(z float64) privacy.Event {
		return privacy.Composed{Event: privacy.PoissonSampled{Rate: 0.1, Event: privacy.Gaussian{Z: z}}, Count: 1000}
	})
	if err != nil {
		panic(err)
	}
	fmt.Printf("z = %.3f\n", z)
	// Output:
	// z = 2.944
}
