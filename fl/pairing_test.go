package fl

import (
	"testing"

	"github.com/fedpq/fedpq/mech"
)

// TestSetupBytes checks the cost docs/mechanisms.md states: 64 bytes per
// pair derived (two X25519 keys), 712 in transfer mode for d = 5 and 1000
// parameters (5000 bits in 79 words, 632 bytes, plus the 16-byte tag), and
// nothing for unpaired mechanisms.
func TestSetupBytes(t *testing.T) {
	corbin, _ := mech.New("corbin", mech.Config{Epsilon: 1, SharedBits: 5})
	ldpq, _ := mech.New("ldpq", mech.Config{Epsilon: 1})
	for _, c := range []struct {
		m        mech.Mechanism
		transfer bool
		want     int
	}{{corbin, false, 64}, {corbin, true, 712}, {ldpq, false, 0}, {ldpq, true, 0}} {
		if got := SetupBytes(c.m, 1000, c.transfer); got != c.want {
			t.Errorf("%s transfer=%v: %d bytes per pair, want %d", c.m.Name(), c.transfer, got, c.want)
		}
	}
}
