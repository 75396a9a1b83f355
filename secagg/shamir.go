package secagg

import (
	"crypto/aes"
	"crypto/cipher"
	"crypto/hkdf"
	"crypto/sha256"
	"fmt"
	"io"
	"strings"

	"github.com/cloudflare/circl/group"
	"github.com/cloudflare/circl/secretsharing"
)

// kdf derives a 32-byte key from a secret for one purpose and tuple of ids:
// HKDF-SHA256 salted with the session seed, info "fedpq/v1 secagg <purpose>
// <id>...". Distinct purposes, sessions, rounds or ids give independent keys.
func kdf(secret []byte, seed [32]byte, purpose string, ids ...uint64) [32]byte {
	var info strings.Builder
	info.WriteString("fedpq/v1 secagg ")
	info.WriteString(purpose)
	for _, id := range ids {
		fmt.Fprintf(&info, " %d", id)
	}
	k, err := hkdf.Key(sha256.New, secret, seed[:], info.String(), 32)
	if err != nil {
		panic(err) // unreachable: 32 bytes is far below HKDF-SHA256's limit
	}
	return [32]byte(k)
}

// Shamir sharing runs over the scalar field of ristretto255 (a prime near
// 2^252), which cannot hold 32 arbitrary bytes: a 32-byte secret is shared
// as two independent 16-byte halves, each a scalar below 2^128.
var field = group.Ristretto255

const (
	scalarBytes = 32
	// shareBytes is one holder's share of one 32-byte secret: two scalars.
	shareBytes = 2 * scalarBytes
)

// xOf is the evaluation point of holder id's share: id+1 in the field,
// never zero and distinct for distinct ids.
func xOf(id uint64) group.Scalar {
	x := field.NewScalar().SetUint64(id)
	return x.Add(x, field.NewScalar().SetUint64(1))
}

// split shares secret t-of-len(holders): the result holds each holder's
// shareBytes, in the order of holders.
func split(secret [32]byte, t int, holders []uint64, rng io.Reader) ([][]byte, error) {
	out := make([][]byte, len(holders))
	for i := range out {
		out[i] = make([]byte, 0, shareBytes)
	}
	for half := range 2 {
		var b [scalarBytes]byte
		copy(b[:16], secret[16*half:])
		s := field.NewScalar()
		if err := s.UnmarshalBinary(b[:]); err != nil {
			panic(err) // unreachable: below 2^128, so canonical
		}
		ss := secretsharing.New(rng, uint(t-1), s)
		for i, h := range holders {
			v, err := ss.ShareWithID(xOf(h)).Value.MarshalBinary()
			if err != nil {
				return nil, fmt.Errorf("secagg: %w", err)
			}
			out[i] = append(out[i], v...)
		}
	}
	return out, nil
}

// recoverSecret rebuilds a secret from the shares of at least t holders
// (shares[holder] = shareBytes). It fails with fewer than t shares and,
// with probability 1 − 2^-124 per half, when a share is wrong, since a wrong
// interpolation lands outside the 16-byte range of a half.
func recoverSecret(t int, shares map[uint64][]byte) ([32]byte, error) {
	var secret [32]byte
	if len(shares) < t {
		return secret, fmt.Errorf("%d shares, threshold %d", len(shares), t)
	}
	for half := range 2 {
		ss := make([]secretsharing.Share, 0, len(shares))
		for h, b := range shares {
			if len(b) != shareBytes {
				return secret, fmt.Errorf("share from %d has %d bytes, not %d", h, len(b), shareBytes)
			}
			v := field.NewScalar()
			if err := v.UnmarshalBinary(b[half*scalarBytes : (half+1)*scalarBytes]); err != nil {
				return secret, fmt.Errorf("share from %d: %w", h, err)
			}
			ss = append(ss, secretsharing.Share{ID: xOf(h), Value: v})
			if len(ss) == t {
				break
			}
		}
		s, err := secretsharing.Recover(uint(t-1), ss)
		if err != nil {
			return secret, err
		}
		b, err := s.MarshalBinary()
		if err != nil {
			return secret, err
		}
		for _, c := range b[16:] {
			if c != 0 {
				return secret, fmt.Errorf("the %d shares are inconsistent", t)
			}
		}
		copy(secret[16*half:], b[:16])
	}
	return secret, nil
}

// seal encrypts one message under a key used for nothing else, hence the
// fixed nonce.
func seal(key [32]byte, plain []byte) []byte {
	return aead(key).Seal(nil, make([]byte, 12), plain, nil)
}

func open(key [32]byte, sealed []byte) ([]byte, error) {
	return aead(key).Open(nil, make([]byte, 12), sealed, nil)
}

func aead(key [32]byte) cipher.AEAD {
	block, err := aes.NewCipher(key[:])
	if err != nil {
		panic(err) // unreachable: the key has a valid length
	}
	g, err := cipher.NewGCM(block)
	if err != nil {
		panic(err) // unreachable: AES has a 16-byte block
	}
	return g
}
