// Package secagg is a secure summation protocol in the style of SecAgg+
// (Bell, Bonawitz, Gascón, Lepoint, Raykova 2020, "Secure Single-Server
// Aggregation with (Poly)Logarithmic Overhead"), itself a sparse-graph version
// of Bonawitz et al. 2017, "Practical Secure Aggregation for
// Privacy-Preserving Machine Learning", made robust: a client that sends
// garbage at any step, deals or reveals wrong shares, or leaves, costs the
// round only its own input. Clients hold vectors in Z_{2^k}; the server
// learns the sum, mod 2^k, of the vectors of the clients that completed the
// masking step, and nothing else about them.
//
// # Protocol
//
// Clients are the vertices of a public neighbour graph (see [Neighbours]).
// Each round has six steps, and a seventh for disputed dealings:
//
//  0. AdvertiseKeys: each client makes an X25519 key pair c, to seal shares
//     to its neighbours, and a mask key s, a ristretto255 scalar whose
//     public key is S = g^s.
//  1. ShareKeys: each client draws a self-mask seed b, splits b and s into
//     t-of-m Shamir shares (m = its neighbours that advertised valid keys,
//     and itself), publishes Feldman commitments to both polynomials (the
//     commitment to s's constant term is S itself), and seals each
//     neighbour's two shares with AES-256-GCM under a key derived by
//     HKDF-SHA256 from the X25519 agreement, the session seed, the round and
//     both ids, bound to the commitments.
//  2. CheckShares: each client opens and checks every share it was dealt
//     (each dealing signed by its dealer, checked by the caller) against
//     the dealer's commitments, and names the dealers whose shares fail.
//     A dealer complained of discloses the complainers' shares in the
//     clear, which the server checks against its commitments (Feldman's
//     complaint round), or is left out. The server keeps the clients that
//     dealt to every neighbour with keys, answered every complaint, and
//     whose secrets at least t holders can rebuild, and tells each its
//     partners: the kept neighbours it exchanged shares with.
//  3. MaskedInput: client i sends y_i = x_i + PRG(b_i) + Σ_j ±PRG(s_ij) mod
//     2^k over its partners j, + when i < j and − otherwise, s_ij the
//     agreement g^{s_i s_j}. Pairwise masks cancel in the sum.
//  4. Consistency: the server names the survivors U (sent y) and the
//     dropped D (kept, partnered, sent no y). Each survivor checks the
//     request (it is a survivor, the lists are disjoint, every partner is
//     in one of them, at least t−1 of its partners survive, U is connected
//     in the graph) and consents to it; its caller signs the request's
//     digest. Bonawitz et al. §6.
//  5. Unmask: a survivor reveals its share of b_j for a j in U when at
//     least t of j's share holders consented to its request, and of s_j for
//     a j in D when that holds for j and each of j's neighbours. The
//     server checks each share against the commitments, rebuilds every
//     secret from t right shares, and removes the self masks of U and the
//     masks between U and D.
//
// # What it protects, and under which assumptions
//
// Against the server and up to t−1 colluding share holders of a client, the
// client's vector stays hidden beyond the sum of the honest survivors,
// provided those form a connected graph (Bell et al.). A server that
// deviates from the protocol (chooses the clients and a client's partners,
// names different U and D to different clients, drops clients at will)
// can rebuild either a client's self mask or the pair masks on its input,
// never both, when, as a client's [Policy] demands, the threshold exceeds
// half of the share holders plus the colluders among them, and the
// colluders by two: an honest client consents to one request, so at most
// one request gathers t consents among any client's holders; the self mask
// of V is revealed only under that request, the mask key of V's partner j
// only under the one for j's neighbours, V among them, so the same; and no
// request both names V a survivor and drops all its honest partners with t
// consents among V's holders (see [Client.Unmask] for the count). Signatures
// and identities are the caller's: package transport signs each client's
// keys, dealings, complaints and consent with its enrolled Ed25519 key.
//
// Clients may drop out at any step: the sum is still recovered when every
// survivor has t living, honest share holders among its neighbours and
// itself, and every dropped client has t among its neighbours.
//
// The server's state is O(d + n·degree·t): it folds each masked vector into
// a running sum as it arrives, and keeps the commitments.
package secagg

import (
	"errors"
	"fmt"
	"math"
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
	// key derivation. A fresh one per session, which the server must not be
	// able to choose after it has seen the clients' keys.
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

// Policy is what a client demands of a round before it takes part: settings
// under which a server that deviates from the protocol, with a fraction of
// the clients colluding with it, learns no more than the sum. A client
// checks it in [NewClient], before it sends anything.
type Policy struct {
	// Corrupt is the fraction of a round's clients that may collude with
	// the server. The threshold must exceed both the colluders among a
	// client's share holders and half of its holders plus those colluders;
	// a sparse graph must stay connected without them (Bell et al. 2020).
	Corrupt float64
	// MinClients is the fewest clients a round may have: a sum of few
	// inputs tells the others much about each (1 would be the input
	// itself).
	MinClients int
	// MaxBits is the widest field the client masks: fedpq packs masked
	// fields of at most 32 bits.
	MaxBits int
}

// DefaultPolicy withstands 5% colluding clients, the rate Bell et al.
// evaluate, in rounds of at least 3 clients.
var DefaultPolicy = Policy{Corrupt: 0.05, MinClients: 3, MaxBits: 32}

// Validate reports a policy no round can meet.
func (pol Policy) Validate() error {
	switch {
	case !(pol.Corrupt >= 0 && pol.Corrupt < 1.0/3):
		return fmt.Errorf("secagg: policy: corrupt fraction %v outside [0, 1/3)", pol.Corrupt)
	case pol.MinClients < 1:
		return fmt.Errorf("secagg: policy: at least %d clients", pol.MinClients)
	case pol.MaxBits < 1 || pol.MaxBits > 64:
		return fmt.Errorf("secagg: policy: max bits %d outside 1..64", pol.MaxBits)
	}
	return nil
}

// Check reports why a round of n clients with settings p does not meet the
// policy.
func (pol Policy) Check(p Params, n int) error {
	if err := pol.Validate(); err != nil {
		return err
	}
	degree, t, err := p.shape(n)
	if err != nil {
		return err
	}
	switch {
	case n < pol.MinClients:
		return fmt.Errorf("secagg: policy: %d clients in the round, at least %d required", n, pol.MinClients)
	case p.Bits > pol.MaxBits:
		return fmt.Errorf("secagg: policy: %d-bit fields, at most %d accepted", p.Bits, pol.MaxBits)
	}
	if min := MinThreshold(n, degree, pol.Corrupt); t < min {
		return fmt.Errorf("secagg: policy: threshold %d with %d share holders; at least %d against a server that deviates with a fraction %v of the clients", t, degree+1, min, pol.Corrupt)
	}
	if degree < n-1 {
		if min := MinDegree(n, pol.Corrupt); degree < min {
			return fmt.Errorf("secagg: policy: degree %d among %d clients; at least %d keeps the graph connected without a fraction %v of them", degree, n, min, pol.Corrupt)
		}
	}
	return nil
}

// colluders is the number of a client's neighbours that may collude with the
// server: all of the floor(corrupt·n) corrupt clients in a complete graph;
// in a random Harary graph of the given degree, the least c with
// P[A > c] <= 2^-41/n, A hypergeometric (degree draws from the n−1 others,
// floor(corrupt·n) of them corrupt).
func colluders(n, degree int, corrupt float64) int {
	nc := corruptCount(n, corrupt)
	if degree >= n-1 {
		return min(nc, n-1)
	}
	eps := math.Exp(-(securityBits+1)*math.Ln2) / float64(n)
	a := hyperPMF(n-1, nc, degree)
	c, tail := degree, 0.0
	for ; c > 0 && tail+a[c] <= eps; c-- {
		tail += a[c]
	}
	return c
}

func corruptCount(n int, corrupt float64) int {
	const tiny = 1e-14 // keeps rounding from going the insecure way
	return int(math.Floor((corrupt + tiny) * float64(n)))
}

// MinThreshold is the least threshold that protects a client with
// degree+1 share holders (its neighbours and itself) against a server that
// deviates, with a fraction corrupt of the n clients colluding with it: with
// c the colluders among the holders (see [Policy]), t−1 > c, so that they
// cannot rebuild a secret alone and the t−1 partners a survivor needs
// alive include an honest one ([Client.Consent]), and 2t > degree+1+c, so
// that no two requests can each gather t consents among a client's holders
// (an honest client consents once), and t >= 2.
func MinThreshold(n, degree int, corrupt float64) int {
	c := colluders(n, degree, corrupt)
	return max(2, c+2, (degree+1+c)/2+1)
}

// MinDegree is the least even degree below n−1 at which a random Harary
// graph on n clients stays connected without floor(corrupt·n) of them
// except with probability 2^-40, and admits a threshold of at most the
// degree; n−1, the complete graph, when none does.
func MinDegree(n int, corrupt float64) int {
	nc := corruptCount(n, corrupt)
	for k := 2; k < n-1; k += 2 {
		if disconnectLog(n, k, nc) < -securityBits*math.Ln2 && MinThreshold(n, k, corrupt) <= k {
			return k
		}
	}
	return n - 1
}
