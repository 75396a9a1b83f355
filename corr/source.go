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
