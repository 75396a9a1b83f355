package mech

import (
	"fmt"
	"math"
)

// L2 is implemented by the mechanisms of user-level DP-FedAvg (McMahan et
// al. 2018): ddgauss and skellam when Config.Noise is positive, and pbm.
// Encode takes a client's whole update flattened into one vector of n
// parameters and clipped by the round engine to L2 norm rg.Radius around
// rg.Center (the engine passes center 0); it clips nothing per parameter
// and refuses a vector whose norm exceeds the bound by more than float32
// rounding (l2Input). One round's sum of Config.Clients clients is Rényi
// differentially private against the server that sees only that sum, as
// secure aggregation lets it.
//
// The neighbouring relation is zero-out (Kairouz, McMahan, Song, Thakkar,
// Thakurta and Xu 2021, "Practical and private (deep) learning without
// sampling or shuffling"): one client's vector replaced by the zero
// vector, the client still taking part and adding its share of the noise,
// so the count of clients, which the server learns, is the same on both
// sides. It is how the removal of one client's data is modelled when each
// client adds part of the noise. RDP bounds both orders of the pair (the
// divergence of the sum with the client's vector from the sum with its
// zero vector, and the reverse), as a symmetric relation needs. It holds
// if at least Config.Clients clients add their noise honestly (fewer:
// weaker), and it is not LDP: a client's message alone carries 1/Clients
// of the noise.
//
// The sum's noise has standard deviation Config.Noise times rg.Radius per
// parameter (in the input's units), for every L2 mechanism, so that they
// compare at equal noise multiplier; their RDP curves differ by what the
// discrete noise, the rounding and the clipping cost against a Gaussian
// of that standard deviation, whose RDP is alpha/(2 z^2).
type L2 interface {
	Mechanism
	// RDP is a bound on the Rényi divergence of order alpha > 1 of one
	// round's sum for the zero-out of one client's vector of n
	// parameters (both orders). It errs for alpha <= 1 or not finite,
	// n < 1 or beyond the mechanism's largest vector.
	RDP(alpha float64, n int) (float64, error)
	// SumRDP is RDP for a sum that holds the noise of only clients
	// honest clients, each adding the share Encode adds (sized for
	// Config.Clients): the bound against a server that sees a round with
	// fewer honest shares than the noise is sized for. SumRDP(alpha, n,
	// Config.Clients) is RDP(alpha, n); clients must be at least 1.
	SumRDP(alpha float64, n, clients int) (float64, error)
}

// Replacer is an L2 mechanism whose curve is also stated for replacing
// one client's vector by another, the relation of fixed-size sampling:
// ddgauss and skellam, whose noise does not depend on the data, so a
// replacement moves the sum by the difference of two rounded vectors,
// within twice the zero-out's sensitivities. (pbm's trials are biased by
// the data: a replacement changes the law of the target's trials, not a
// shift, and its accounting covers zero-out only.)
type Replacer interface {
	L2
	// ReplaceRDP and SumReplaceRDP are RDP and SumRDP for the
	// replacement of one client's vector.
	ReplaceRDP(alpha float64, n int) (float64, error)
	SumReplaceRDP(alpha float64, n, clients int) (float64, error)
}

// l2NormSlack is how far above the bound an input's norm may be, as a
// fraction of the bound: four float32 ulps, more than the rounding of a
// vector that was clipped in float64 and stored in float32 (each
// coordinate moves by a relative 2^-24 at most, so the norm does too).
const l2NormSlack = 0x1p-22

// l2Input returns w - rg.Center in float64 and checks it against the L2
// bound rg.Radius: a norm above the bound by more than l2NormSlack is
// refused; one above it by less is scaled onto the bound, so that the
// vector the mechanism uses has norm at most rg.Radius (up to the
// rounding of the scaling, which the mechanisms' margins cover).
func l2Input(name string, w []float32, rg Range) ([]float64, error) {
	if err := rg.Validate(); err != nil {
		return nil, err
	}
	if err := checkInput(w); err != nil {
		return nil, err
	}
	x := make([]float64, len(w))
	var s float64
	for i, v := range w {
		x[i] = float64(v) - rg.Center
		s += x[i] * x[i]
	}
	norm := math.Sqrt(s)
	if math.IsInf(s, 0) || norm > rg.Radius*(1+l2NormSlack) {
		return nil, fmt.Errorf("mech: %s: the vector's L2 norm %v exceeds the bound %v (the range's radius): clip it first", name, norm, rg.Radius)
	}
	if norm > rg.Radius {
		f := rg.Radius / norm
		for i := range x {
			x[i] *= f
		}
	}
	return x, nil
}

// checkNoise is the check of an L2 mechanism's noise multiplier.
func checkNoise(name string, z float64) error {
	if !(z > 0) || math.IsInf(z, 0) {
		return fmt.Errorf("mech: %s: noise multiplier %v must be positive and finite", name, z)
	}
	return nil
}

// checkOrder is the check of an RDP order and a vector length.
func checkOrder(name string, alpha float64, n, maxN int) error {
	if !(alpha > 1) || math.IsInf(alpha, 0) {
		return fmt.Errorf("mech: %s: Rényi order %v must be above 1 and finite", name, alpha)
	}
	if n < 1 || n > maxN {
		return fmt.Errorf("mech: %s: vector of %d parameters: want 1 to %d", name, n, maxN)
	}
	return nil
}
