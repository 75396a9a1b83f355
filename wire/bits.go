// Package wire holds fedpq's bit-packed formats: how a client's quantized
// update becomes bytes, and how the server reads them back with every length
// and value checked. It knows field widths, never what the fields mean.
package wire

import "fmt"

// PackedLen is the number of bytes that n fields of k bits occupy.
func PackedLen(n, k int) int { return (n*k + 7) / 8 }

// Packer appends fields of a fixed width k (1..32 bits) to a byte slice,
// least significant bit first: field i occupies bits [i*k, (i+1)*k) of the
// payload read as one little-endian number.
type Packer struct {
	buf  []byte
	acc  uint64
	nacc uint
	k    uint
}

// NewPacker returns a Packer of k-bit fields that appends to dst.
func NewPacker(dst []byte, k int) *Packer {
	if k < 1 || k > 32 {
		panic(fmt.Sprintf("wire: field width %d outside 1..32", k))
	}
	return &Packer{buf: dst, k: uint(k)}
}

// Put appends the low k bits of v.
func (p *Packer) Put(v uint32) {
	p.acc |= uint64(v&(1<<p.k-1)) << p.nacc
	p.nacc += p.k
	for p.nacc >= 8 {
		p.buf = append(p.buf, byte(p.acc))
		p.acc >>= 8
		p.nacc -= 8
	}
}

// Bytes flushes the last partial byte (zero-padded) and returns the buffer.
func (p *Packer) Bytes() []byte {
	if p.nacc > 0 {
		p.buf = append(p.buf, byte(p.acc))
		p.acc, p.nacc = 0, 0
	}
	return p.buf
}

// Unpacker reads k-bit fields written by a Packer.
type Unpacker struct {
	buf  []byte
	acc  uint64
	nacc uint
	k    uint
}

// NewUnpacker checks that payload holds exactly n fields of k bits, with
// zero padding, and returns a reader of them.
func NewUnpacker(payload []byte, n, k int) (*Unpacker, error) {
	if k < 1 || k > 32 {
		return nil, fmt.Errorf("wire: field width %d outside 1..32", k)
	}
	if n < 0 {
		return nil, fmt.Errorf("wire: negative field count %d", n)
	}
	if want := PackedLen(n, k); len(payload) != want {
		return nil, fmt.Errorf("wire: payload is %d bytes, want %d for %d fields of %d bits", len(payload), want, n, k)
	}
	if pad := uint(len(payload)*8 - n*k); pad > 0 && payload[len(payload)-1]>>(8-pad) != 0 {
		return nil, fmt.Errorf("wire: nonzero padding bits after %d fields of %d bits", n, k)
	}
	return &Unpacker{buf: payload, k: uint(k)}, nil
}

// Next returns the next field. Reading more fields than were checked panics.
func (u *Unpacker) Next() uint32 {
	for u.nacc < u.k {
		u.acc |= uint64(u.buf[0]) << u.nacc
		u.buf = u.buf[1:]
		u.nacc += 8
	}
	v := uint32(u.acc & (1<<u.k - 1))
	u.acc >>= u.k
	u.nacc -= u.k
	return v
}
