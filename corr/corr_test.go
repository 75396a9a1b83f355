package corr

import (
	"bytes"
	"crypto/aes"
	"crypto/cipher"
	"encoding/binary"
	"math"
	"testing"
)

// TestStreamConsistent: Read, Uint64, Fill and Fill32 are views of one byte
// sequence, whatever the mix of calls and buffer boundaries.
func TestStreamConsistent(t *testing.T) {
	key := Key([]byte("k"), "test")
	ref := make([]byte, 3*bufSize+40)
	NewStream(key).Read(ref)
	s := NewStream(key)
	var got []byte
	got = binary.LittleEndian.AppendUint64(got, s.Uint64())
	u := make([]uint64, 700) // crosses a refill
	s.Fill(u)
	for _, v := range u {
		got = binary.LittleEndian.AppendUint64(got, v)
	}
	v := make([]uint32, 1001)
	s.Fill32(v)
	for _, x := range v {
		got = binary.LittleEndian.AppendUint32(got, x)
	}
	rest := make([]byte, len(ref)-len(got))
	s.Read(rest)
	got = append(got, rest...)
	if !bytes.Equal(got, ref) {
		t.Fatal("mixed reads differ from one Read")
	}
	if bytes.Equal(ref[:32], make([]byte, 32)) {
		t.Fatal("stream is zeros")
	}
	// The stream is AES-256-CTR's keystream under a zero IV, as the
	// standard library computes it in one call.
	block, err := aes.NewCipher(key[:])
	if err != nil {
		t.Fatal(err)
	}
	want := make([]byte, len(ref))
	cipher.NewCTR(block, make([]byte, aes.BlockSize)).XORKeyStream(want, want)
	if !bytes.Equal(ref, want) {
		t.Fatal("the stream is not AES-256-CTR's keystream")
	}
	// Word by word across the growing refills, and reads of odd sizes.
	s = NewStream(key)
	got = got[:0]
	for len(got) < 2*bufSize {
		got = binary.LittleEndian.AppendUint64(got, s.Uint64())
		b := make([]byte, len(got)%13)
		s.Read(b)
		got = append(got, b...)
	}
	if !bytes.Equal(got, want[:len(got)]) {
		t.Fatal("small reads differ from the keystream")
	}
}

// TestKeysDistinct: purposes and identifiers separate keys.
func TestKeysDistinct(t *testing.T) {
	s := []byte("secret")
	keys := map[[32]byte]string{}
	for _, c := range []struct {
		p   string
		ids []uint64
	}{{"private", []uint64{1, 2}}, {"private", []uint64{2, 1}}, {"private", []uint64{12}}, {"dither", []uint64{1, 2}}, {"private", nil}} {
		k := Key(s, c.p, c.ids...)
		if prev, dup := keys[k]; dup {
			t.Errorf("%s %v has the key of %s", c.p, c.ids, prev)
		}
		keys[k] = c.p
	}
	if Key(s, "x", 1) != Key(s, "x", 1) {
		t.Error("key derivation is not deterministic")
	}
}

// TestUniformity: bytes of a stream are uniform (chi-square over 256 cells,
// 1e6 bytes, below 360 which a uniform source exceeds with probability
// about 1e-5), and Below is uniform for a non-power-of-two bound.
func TestUniformity(t *testing.T) {
	b := make([]byte, 1<<20)
	Derive([]byte("u"), "test").Read(b)
	var counts [256]float64
	for _, x := range b {
		counts[x]++
	}
	e := float64(len(b)) / 256
	chi := 0.0
	for _, c := range counts {
		chi += (c - e) * (c - e) / e
	}
	if chi > 360 {
		t.Errorf("byte chi-square %v", chi)
	}
	src := Derive([]byte("u"), "below")
	var k [7]float64
	const n = 700000
	for range n {
		k[Below(src, 7)]++
	}
	chi = 0
	for _, c := range k {
		chi += (c - n/7) * (c - n/7) / (n / 7)
	}
	if chi > 30 { // 6 degrees of freedom: p < 1e-4
		t.Errorf("Below(7) chi-square %v", chi)
	}
}

func TestBytes(t *testing.T) {
	var b []byte
	for i := range 3 {
		b = binary.LittleEndian.AppendUint64(b, 0x0123456789abcdef*uint64(i+1))
	}
	src, err := NewBytes(b)
	if err != nil {
		t.Fatal(err)
	}
	u := make([]uint64, 2)
	src.Fill(u)
	if u[1] != 2*0x0123456789abcdef || src.Uint64() != 3*0x0123456789abcdef || src.Remaining() != 0 {
		t.Errorf("Bytes replayed %x", u)
	}
	if _, err := NewBytes(make([]byte, 6)); err == nil {
		t.Error("6-byte buffer accepted")
	}
}

// TestPairAgreement: both partners derive the same shared stream and exactly
// one of them leads; over many pairs the lower id leads half the time.
func TestPairAgreement(t *testing.T) {
	lows := 0
	const pairs = 2000
	for p := range uint64(pairs) {
		a, _ := NewIdentity(Key([]byte("s"), "id", p, 0))
		b, _ := NewIdentity(Key([]byte("s"), "id", p, 1))
		pa, err := a.Agree(b.Public(), 3, 10, 20)
		if err != nil {
			t.Fatal(err)
		}
		pb, err := b.Agree(a.Public(), 3, 20, 10)
		if err != nil {
			t.Fatal(err)
		}
		if pa.Shared().Uint64() != pb.Shared().Uint64() {
			t.Fatal("partners derived different shared streams")
		}
		if pa.Leader(10) == pb.Leader(20) {
			t.Fatal("both or neither partner leads")
		}
		if pa.Leader(10) {
			lows++
		}
		// Transfer mode: the follower opens what the leader sealed; tampering fails.
		msg := []byte("shared bits....!")
		sealed := pa.Seal(msg)
		if len(sealed) != len(msg)+SealedOverhead {
			t.Fatalf("sealed %d bytes, want %d", len(sealed), len(msg)+SealedOverhead)
		}
		if got, err := pb.Open(sealed); err != nil || !bytes.Equal(got, msg) {
			t.Fatalf("open: %q, %v", got, err)
		}
		sealed[3] ^= 1
		if _, err := pb.Open(sealed); err == nil {
			t.Fatal("tampered message opened")
		}
	}
	// Binomial(2000, 1/2): 5 standard errors is 112.
	if math.Abs(float64(lows)-pairs/2) > 112 {
		t.Errorf("lower id led %d of %d pairs", lows, pairs)
	}
	a, _ := NewIdentity(Key([]byte("s"), "id"))
	if _, err := a.Agree(make([]byte, 31), 0, 1, 2); err == nil {
		t.Error("short public key accepted")
	}
	if _, err := a.Agree(a.Public(), 0, 1, 1); err == nil {
		t.Error("pairing with oneself accepted")
	}
}

func TestPairing(t *testing.T) {
	for _, c := range []struct {
		n     int
		alone float64
		want  int // clients alone
	}{{10, 0, 0}, {11, 0, 1}, {10, 0.2, 2}, {11, 0.2, 3}, {1, 0, 1}, {100, 1, 100}} {
		p := Pairing(Derive([]byte("p"), "pairing"), c.n, c.alone)
		alone := 0
		for i, j := range p {
			if j < 0 {
				alone++
				continue
			}
			if j == i || p[j] != i {
				t.Fatalf("%+v: %d paired with %d, who has %d", c, i, j, p[j])
			}
		}
		if alone != c.want {
			t.Errorf("%+v: %d alone, want %d", c, alone, c.want)
		}
	}
}
