package corr

import (
	"crypto/hkdf"
	"crypto/sha256"
	"encoding/binary"
	"fmt"
	"math/bits"
	"strings"
)

// Key derives a 32-byte key from a secret for one purpose and one tuple of
// identifiers (round, client, pair, ...): HKDF-SHA256 with the info string
// "fedpq/v1 <purpose> <id> <id> ...". Distinct purposes or identifiers give
// independent keys, which is how fedpq never reuses a stream.
func Key(secret []byte, purpose string, ids ...uint64) [32]byte {
	var info strings.Builder
	info.WriteString("fedpq/v1 ")
	info.WriteString(purpose)
	for _, id := range ids {
		fmt.Fprintf(&info, " %d", id)
	}
	k, err := hkdf.Key(sha256.New, secret, nil, info.String(), 32)
	if err != nil {
		panic(err) // unreachable: 32 bytes is far below HKDF-SHA256's limit
	}
	return [32]byte(k)
}

// Derive returns the stream of Key(secret, purpose, ids...).
func Derive(secret []byte, purpose string, ids ...uint64) *Stream {
	return NewStream(Key(secret, purpose, ids...))
}

// SeedSecret turns a simulation's seed into the secret its streams derive
// from. It gives reproducibility, not secrecy: a deployment's clients derive
// their private streams from secrets of their own.
func SeedSecret(seed uint64) []byte {
	return binary.LittleEndian.AppendUint64([]byte("fedpq seed "), seed)
}

// Below returns a uniform integer in [0, n), exactly, using Lemire's
// multiply-and-reject. n must be positive.
func Below(src Source, n uint64) uint64 {
	for {
		hi, lo := bits.Mul64(src.Uint64(), n)
		if lo >= -n%n {
			return hi
		}
	}
}

// Shuffle puts a uniformly random permutation of 0..n-1 in p[:n].
func Shuffle(src Source, p []int) {
	for i := range p {
		p[i] = i
	}
	for i := len(p) - 1; i > 0; i-- {
		j := int(Below(src, uint64(i+1)))
		p[i], p[j] = p[j], p[i]
	}
}
