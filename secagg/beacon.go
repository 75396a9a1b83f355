package secagg

import (
	"crypto/sha256"
	"encoding/binary"
	"slices"
)

// Beacon is the graph randomness of a run's secure rounds, which the server
// cannot choose after it has seen the clients' keys, nor retry: a hash
// chain from a secret g, whose commitment c = SHA-256^(R+1)(g) the server
// publishes before the first round, and whose link for round t is
// v_t = SHA-256^(R+1−t)(g). A client checks that t hashes of v_t give c,
// and that the round's seed is [SessionSeed] of v_t and the round's
// clients: so each round's graph was fixed when the run began, and a later
// link cannot be computed from earlier ones. What remains to a server that
// deviates is to choose which clients take part, and to try secrets g
// before the run, each giving every round a new random graph; the graph's
// degree and threshold are sized (SparseGraph) so that a bad one has
// probability below 2^-40.
type Beacon struct {
	g      [32]byte
	rounds int
}

// NewBeacon is the beacon of secret g for a run of the given rounds.
func NewBeacon(g [32]byte, rounds int) Beacon { return Beacon{g: g, rounds: rounds} }

func hashes(v [32]byte, k int) [32]byte {
	for range k {
		v = sha256.Sum256(v[:])
	}
	return v
}

// Commitment is c = SHA-256^(R+1)(g), which the server publishes.
func (b Beacon) Commitment() [32]byte { return hashes(b.g, b.rounds+1) }

// Link is round t's link v_t = SHA-256^(R+1−t)(g), for 1 <= t <= R.
func (b Beacon) Link(t int) [32]byte { return hashes(b.g, b.rounds+1-t) }

// CheckLink reports whether link is round t's link of the chain committed
// to by c.
func CheckLink(c, link [32]byte, t int) bool {
	return t >= 1 && hashes(link, t) == c
}

// SessionSeed is the seed of round t of run among the clients ids (in any
// order), from its beacon link: SHA-256 of them all.
func SessionSeed(run []byte, t uint64, ids []uint64, link [32]byte) [32]byte {
	h := sha256.New()
	h.Write([]byte("fedpq/v2 secagg session"))
	b := binary.LittleEndian.AppendUint64(nil, uint64(len(run)))
	b = append(b, run...)
	b = binary.LittleEndian.AppendUint64(b, t)
	sorted := slices.Sorted(slices.Values(ids))
	b = binary.LittleEndian.AppendUint64(b, uint64(len(sorted)))
	for _, id := range sorted {
		b = binary.LittleEndian.AppendUint64(b, id)
	}
	h.Write(b)
	h.Write(link[:])
	return [32]byte(h.Sum(nil))
}
