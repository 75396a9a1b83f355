// Package secagg is a secure summation protocol in the style of SecAgg+
// (Bell, Bonawitz, Gascón, Lepoint, Raykova 2020, "Secure Single-Server
// Aggregation with (Poly)Logarithmic Overhead"), itself a sparse-graph version
// of Bonawitz et al. 2017, "Practical Secure Aggregation for
// Privacy-Preserving Machine Learning". Clients hold vectors in Z_{2^k}; the
// server learns the sum, mod 2^k, of the vectors of the clients that
// completed the masking round, and nothing else about them.
//
// # Protocol
//
// Clients are the vertices of a public neighbour graph (see [Neighbours]).
// Each round has four steps:
//
//  0. AdvertiseKeys: each client makes two X25519 key pairs, c (to seal
//     shares to its neighbours) and s (for pairwise masks), the s key derived
//     from a 32-byte seed.
//  1. ShareKeys: each client draws a self-mask seed b and splits b and its s
//     seed into t-of-m Shamir shares (m = its advertised neighbours plus
//     itself), and seals each neighbour's shares with AES-256-GCM under a key
//     derived by HKDF-SHA256 from the X25519 agreement of the c keys, the
//     session seed, the round and both ids.
//  2. MaskedInput: client i sends y_i = x_i + PRG(b_i) + Σ_j ±PRG(s_ij) mod 2^k
//     over the neighbours j that shared keys, + when i < j and − otherwise,
//     s_ij the X25519 agreement of the s keys. Pairwise masks cancel in the
//     sum of two clients that both send y.
//  3. Unmask: the server names the survivors U (sent y) and the dropped D
//     (shared keys, sent no y). Each survivor reveals its shares of b_j for
//     the j in U and of the s seed for the j in D. From t shares the server
//     rebuilds them, removes the self masks of U and the masks between U and D.
//
// # What it protects, and under which assumptions
//
// The server is honest but curious: it follows the protocol (relays messages
// faithfully, names the same U and D to every client) and tries to learn
// more from what it sees. Up to t−1 of any client's neighbours may collude
// with it; they learn nothing about an honest client's vector beyond the sum
// the server obtains, provided the honest clients that sent y form a
// connected graph (Bell et al.; see [SparseGraph] for a degree and
// threshold that make this hold with probability 1 − 2^-40). Clients may drop
// out at any step: the sum is still recovered when every survivor has t
// living share holders among its neighbours and itself, and every dropped
// client has t among its neighbours.
//
// A client refuses to reveal both kinds of share of the same client (which
// would expose that client's y unmasked), to answer twice, and to answer when
// fewer than t of its share holders survived (Bonawitz et al. §4). Against a
// malicious server that shows different U to different clients these checks
// are not enough on their own: Bonawitz et al. §6 add signatures and a
// consistency round, which this package leaves to its caller (the caller
// signs and relays the advertised keys and the lists).
//
// The server's state is O(d + n·degree): it folds each masked vector into a
// running sum as it arrives.
package secagg

import (
	"errors"
	"fmt"
)

// Params are a round's public settings, the same at the server and every
// client.
type Params struct {
	// Bits is k: vectors live in Z_{2^k}, 1 <= k <= 64.
	Bits int
	// Threshold is t, the number of shares that rebuild a client's secret.
	// Zero selects floor(2m/3)+1 with m = degree+1 share holders: more than
	// two thirds, the margin Bonawitz et al. take against an active server,
	// and more than any t−1 colluders; it tolerates ceil(m/3)−1 lost holders.
	// [SparseGraph] gives a smaller one for a stated corruption rate.
	Threshold int
	// Degree is the number of neighbours per client: 0, or anything from n−1
	// up, gives the complete graph; otherwise an even number, giving a random
	// Harary graph (see [Neighbours]).
	Degree int
	// Seed is the public session seed: it draws the graph and salts every
	// key derivation. A fresh one per session.
	Seed [32]byte
	// Round separates the keys and masks of the rounds of one session.
	Round uint64
}

// Validate reports settings that no number of clients can use.
func (p Params) Validate() error {
	if p.Bits < 1 || p.Bits > 64 {
		return fmt.Errorf("secagg: bits %d outside 1..64", p.Bits)
	}
	if p.Threshold < 0 {
		return fmt.Errorf("secagg: threshold %d is negative", p.Threshold)
	}
	if p.Degree < 0 {
		return fmt.Errorf("secagg: degree %d is negative", p.Degree)
	}
	return nil
}

// shape returns the degree and threshold in force for n clients.
func (p Params) shape(n int) (degree, threshold int, err error) {
	if err := p.Validate(); err != nil {
		return 0, 0, err
	}
	if n < 1 {
		return 0, 0, errors.New("secagg: no clients")
	}
	degree = p.Degree
	if degree == 0 || degree >= n-1 {
		degree = n - 1
	} else if degree%2 != 0 {
		return 0, 0, fmt.Errorf("secagg: degree %d must be even (a Harary graph joins each client to degree/2 clients on each side) or at least n-1 = %d", degree, n-1)
	}
	threshold = p.Threshold
	if threshold == 0 {
		threshold = 2*(degree+1)/3 + 1
	}
	if threshold > degree+1 {
		return 0, 0, fmt.Errorf("secagg: threshold %d exceeds the %d share holders of a client (degree %d plus itself)", threshold, degree+1, degree)
	}
	return degree, threshold, nil
}

// mask is 2^k − 1.
func (p Params) mask() uint64 { return uint64(1)<<p.Bits - 1 }
