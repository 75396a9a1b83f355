package privacy_test

import (
	"fmt"

	"github.com/fedpq/fedpq/privacy"
)

// One parameter, one round, delta = 1e-6: the epsilon of an ldpq client
// against a server that sees only the sum of n clients' bits, by the
// privacy blanket and exactly (SecureSumEpsilon: the exact worst case up to
// 10,000 clients, the blanket above).
func ExampleSecureSumEpsilon() {
	fmt.Println("eps0 =        1               2               4")
	fmt.Println("n      blanket   exact blanket   exact blanket   exact")
	for _, n := range []int{10, 100, 1000, 10_000, 100_000} {
		fmt.Printf("%-6d", n)
		for _, eps0 := range []float64{1, 2, 4} {
			blanket, err := privacy.SecureSumBlanket(eps0, n, 1e-6)
			if err != nil {
				panic(err)
			}
			eps, err := privacy.SecureSumEpsilon(eps0, n, 1e-6)
			if err != nil {
				panic(err)
			}
			fmt.Printf(" %7.4f %7.4f", blanket, eps)
		}
		fmt.Println()
	}
	// Output:
	// eps0 =        1               2               4
	// n      blanket   exact blanket   exact blanket   exact
	// 10      1.0000  1.0000  2.0000  2.0000  4.0000  4.0000
	// 100     0.5161  0.4837  1.6664  1.6064  4.0000  4.0000
	// 1000    0.1487  0.1266  0.3971  0.3233  1.8529  1.6910
	// 10000   0.0432  0.0357  0.1144  0.0870  0.4108  0.3146
	// 100000  0.0124  0.0124  0.0332  0.0332  0.1182  0.1182
}

// Composed over rounds (one parameter), delta = 1e-6.
func ExampleComposeSecureSum() {
	for _, c := range []struct {
		eps0      float64
		n, rounds int
	}{{1, 100, 100}, {1, 1000, 100}, {4, 1000, 100}, {4, 100_000, 100}} {
		eps, err := privacy.ComposeSecureSum(c.eps0, c.n, c.rounds, 1e-6)
		if err != nil {
			panic(err)
		}
		local, _ := privacy.Optimal(c.eps0, c.rounds, 1e-6)
		fmt.Printf("eps0 %v, n %d, %d rounds: %.3f (local guarantee composed: %.1f)\n", c.eps0, c.n, c.rounds, eps, local)
	}
	// A whole upload of ldpq in the quick start's shape: 610 parameters,
	// 100 clients, one round and 40 rounds, at ledger_delta 1e-5.
	for _, k := range []int{610, 40 * 610} {
		eps, err := privacy.ComposeSecureSum(1, 100, k, 1e-5)
		if err != nil {
			panic(err)
		}
		local, _ := privacy.Optimal(1, k, 1e-5)
		fmt.Printf("eps0 1, n 100, k %d: %.1f (local guarantee composed: %.1f)\n", k, eps, local)
	}
	// Output:
	// eps0 1, n 100, 100 rounds: 6.391 (local guarantee composed: 83.5)
	// eps0 1, n 1000, 100 rounds: 1.760 (local guarantee composed: 83.5)
	// eps0 4, n 1000, 100 rounds: 20.313 (local guarantee composed: 400.0)
	// eps0 4, n 100000, 100 rounds: 1.393 (local guarantee composed: 400.0)
	// eps0 1, n 100, k 610: 17.6 (local guarantee composed: 371.6)
	// eps0 1, n 100, k 24400: 283.3 (local guarantee composed: 11862.9)
}

// A paired client (corbin, coq, augcorbin's pairs), delta = 1e-6, against
// the number of clients of the round that quantize alone.
func ExamplePairedSecureSumEpsilon() {
	for _, alone := range []int{0, 100, 1000, 100_000} {
		fmt.Printf("alone %-7d", alone)
		for _, eps0 := range []float64{1, 4} {
			eps, err := privacy.PairedSecureSumEpsilon(eps0, alone, 1e-6)
			if err != nil {
				panic(err)
			}
			fmt.Printf(" eps0=%v: %7.4f", eps0, eps)
		}
		fmt.Println()
	}
	// Output:
	// alone 0       eps0=1:    +Inf eps0=4:    +Inf
	// alone 100     eps0=1:  1.0118 eps0=4:    +Inf
	// alone 1000    eps0=1:  0.1905 eps0=4:  1.9777
	// alone 100000  eps0=1:  0.0127 eps0=4:  0.1187
}
