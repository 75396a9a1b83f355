package corr

import (
	"encoding/binary"
	"fmt"
)

// A Source gives uniformly random 64-bit words. *Stream is the usual one; a
// *Bytes replays bits that were sent rather than derived (the papers' mode in
// which the leader of a pair transfers its shared bits to the follower).
type Source interface {
	Uint64() uint64
	// Fill sets every element of u to the next word.
	Fill(u []uint64)
	// Fill32 sets every element of u to the next 32-bit word.
	Fill32(u []uint32)
}

// Bytes is a Source that replays a fixed buffer, 8 bytes per word,
// little-endian. Reading past its end panics: the caller sizes the buffer.
type Bytes struct {
	b []byte
}

// NewBytes returns a Source over b, whose length must be a multiple of 4.
func NewBytes(b []byte) (*Bytes, error) {
	if len(b)%4 != 0 {
		return nil, fmt.Errorf("corr: shared bits buffer of %d bytes is not a whole number of 32-bit words", len(b))
	}
	return &Bytes{b: b}, nil
}

// Uint64 returns the next word.
func (s *Bytes) Uint64() uint64 {
	v := binary.LittleEndian.Uint64(s.b)
	s.b = s.b[8:]
	return v
}

// Fill sets every element of u to the next word.
func (s *Bytes) Fill(u []uint64) {
	for i := range u {
		u[i] = binary.LittleEndian.Uint64(s.b[8*i:])
	}
	s.b = s.b[8*len(u):]
}

// Fill32 sets every element of u to the next 32-bit word.
func (s *Bytes) Fill32(u []uint32) {
	for i := range u {
		u[i] = binary.LittleEndian.Uint32(s.b[4*i:])
	}
	s.b = s.b[4*len(u):]
}

// Remaining is the number of unread bytes.
func (s *Bytes) Remaining() int { return len(s.b) }

// BitReader hands out a Source's bits a few at a time, in order, so that d
// shared bits per parameter cost exactly d bits of the source, not a word.
type BitReader struct {
	src  Source
	word uint64
	left uint // unread bits in word
}

// NewBitReader returns a reader of src's bits, least significant first.
func NewBitReader(src Source) *BitReader { return &BitReader{src: src} }

// Bits returns the next k bits (1 <= k <= 32) as the low bits of a word.
func (r *BitReader) Bits(k uint) uint64 {
	if r.left < k {
		v, got := r.word, r.left
		r.word, r.left = r.src.Uint64(), 64
		need := k - got
		v |= (r.word & (1<<need - 1)) << got
		r.word >>= need
		r.left -= need
		return v
	}
	v := r.word & (1<<k - 1)
	r.word >>= k
	r.left -= k
	return v
}
