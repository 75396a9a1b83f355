// Package corr provides the randomness fedpq's mechanisms run on: seedable
// cryptographic streams, the key agreement and key derivation that give a pair
// of clients bits the server never sees, and the random pairing of a round.
//
// Every stream is AES-256 in counter mode under a key derived with HKDF from a
// secret and a label that names the round, the parties and the purpose, so no
// key is ever used for two purposes and the same seed gives the same bits on
// every machine.
package corr

import (
	"crypto/aes"
	"crypto/cipher"
	"encoding/binary"
	"math"
	"math/bits"
	"unsafe"
)

// bufSize is the most keystream bytes produced per refill; large enough
// that AES-CTR runs at full speed, small enough to stay in L1.
const bufSize = 4096

// firstRefill is the first refill's size; each refill doubles it up to
// bufSize. Many streams are read for a few words only (a client's coins
// for one parameter, an audit's per-view coins), and a whole first buffer
// was most of their cost (the audit's profile: AES and clearing 4 KiB per
// stream). The keystream is the same whatever the refill sizes.
const firstRefill = 64

// A Stream is a deterministic source of uniformly random bits: the AES-256-CTR
// keystream of its key. Two Streams made from the same key produce the same
// bits. A Stream is not safe for concurrent use.
type Stream struct {
	ctr cipher.Stream
	buf []byte // keystream; buf[pos:] is not read yet
	pos int
}

// NewStream returns the stream of the 32-byte key.
func NewStream(key [32]byte) *Stream {
	block, err := aes.NewCipher(key[:])
	if err != nil {
		panic(err) // unreachable: the key has a valid length
	}
	var iv [aes.BlockSize]byte
	return &Stream{ctr: cipher.NewCTR(block, iv[:])}
}

func (s *Stream) refill() {
	n := min(max(2*len(s.buf), firstRefill), bufSize)
	if cap(s.buf) < n {
		s.buf = make([]byte, n)
	}
	s.buf = s.buf[:n]
	clear(s.buf)
	s.ctr.XORKeyStream(s.buf, s.buf)
	s.pos = 0
}

// Read fills p with the next len(p) bytes of the stream. It never fails.
// Long reads run the cipher straight into p.
func (s *Stream) Read(p []byte) (int, error) {
	n := len(p)
	k := copy(p, s.buf[s.pos:])
	s.pos += k
	p = p[k:]
	if len(p) >= bufSize {
		whole := len(p) - len(p)%bufSize
		clear(p[:whole])
		s.ctr.XORKeyStream(p[:whole], p[:whole])
		p = p[whole:]
	}
	for len(p) > 0 {
		s.refill()
		s.pos = copy(p, s.buf)
		p = p[s.pos:]
	}
	return n, nil
}

// Uint64 returns the next 8 bytes of the stream as a little-endian integer.
func (s *Stream) Uint64() uint64 {
	if s.pos+8 > len(s.buf) {
		var b [8]byte
		s.Read(b[:])
		return binary.LittleEndian.Uint64(b[:])
	}
	v := binary.LittleEndian.Uint64(s.buf[s.pos:])
	s.pos += 8
	return v
}

// Fill sets every element of u to the next Uint64 of the stream.
func (s *Stream) Fill(u []uint64) {
	if len(u) == 0 {
		return
	}
	s.Read(unsafe.Slice((*byte)(unsafe.Pointer(&u[0])), 8*len(u)))
	if !littleEndian {
		for i, v := range u {
			u[i] = bits.ReverseBytes64(v)
		}
	}
}

// Fill32 sets every element of u to the next 4 bytes of the stream, as a
// little-endian integer.
func (s *Stream) Fill32(u []uint32) {
	if len(u) == 0 {
		return
	}
	s.Read(unsafe.Slice((*byte)(unsafe.Pointer(&u[0])), 4*len(u)))
	if !littleEndian {
		for i, v := range u {
			u[i] = bits.ReverseBytes32(v)
		}
	}
}

// littleEndian is whether words in memory are little-endian, in which case
// the stream's bytes are its words as they stand.
var littleEndian = func() bool {
	x := uint16(1)
	return *(*byte)(unsafe.Pointer(&x)) == 1
}()

// Float64 returns a uniform number in [0, 1) with 53 random bits.
func (s *Stream) Float64() float64 {
	return float64(s.Uint64()>>11) * 0x1p-53
}

// NormFloat64 returns a standard normal variate (Marsaglia's polar method).
func (s *Stream) NormFloat64() float64 {
	for {
		u := 2*s.Float64() - 1
		v := 2*s.Float64() - 1
		q := u*u + v*v
		if q > 0 && q < 1 {
			return u * math.Sqrt(-2*math.Log(q)/q)
		}
	}
}
