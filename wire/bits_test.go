package wire

import (
	"testing"
)

func TestRoundTrip(t *testing.T) {
	for k := 1; k <= 32; k++ {
		for _, n := range []int{0, 1, 7, 8, 9, 100} {
			vals := make([]uint32, n)
			for i := range vals {
				vals[i] = uint32(i*2654435761) & (1<<k - 1)
			}
			p := NewPacker(nil, k)
			for _, v := range vals {
				p.Put(v)
			}
			b := p.Bytes()
			if len(b) != PackedLen(n, k) {
				t.Fatalf("k=%d n=%d: %d bytes, want %d", k, n, len(b), PackedLen(n, k))
			}
			u, err := NewUnpacker(b, n, k)
			if err != nil {
				t.Fatalf("k=%d n=%d: %v", k, n, err)
			}
			for i, v := range vals {
				if got := u.Next(); got != v {
					t.Fatalf("k=%d n=%d field %d: %d, want %d", k, n, i, got, v)
				}
			}
		}
	}
}

func TestUnpackerRejects(t *testing.T) {
	if _, err := NewUnpacker([]byte{0, 0}, 3, 5); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		b    []byte
		n, k int
	}{{[]byte{0}, 3, 5}, {[]byte{0, 0, 0}, 3, 5}, {[]byte{0, 0x80}, 3, 5}, {nil, 1, 1}, {[]byte{0}, 1, 0}, {[]byte{0}, 1, 33}, {nil, -1, 1}} {
		if _, err := NewUnpacker(c.b, c.n, c.k); err == nil {
			t.Errorf("%x n=%d k=%d accepted", c.b, c.n, c.k)
		}
	}
}

func FuzzUnpacker(f *testing.F) {
	f.Add([]byte{1, 2, 3}, 4, 5)
	f.Add([]byte{}, 0, 1)
	f.Fuzz(func(t *testing.T, b []byte, n, k int) {
		if n > 1<<16 {
			return
		}
		u, err := NewUnpacker(b, n, k)
		if err != nil {
			return
		}
		p := NewPacker(nil, k)
		for range n {
			p.Put(u.Next())
		}
		if string(p.Bytes()) != string(b) {
			t.Fatalf("repacking %x changed it", b)
		}
	})
}
