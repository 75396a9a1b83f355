package pycheck

import (
	"os"
	"testing"
)

// TestScript: the script the export tests run is where Script says, so
// that a move shows here and not only as a skip where torch is missing.
func TestScript(t *testing.T) {
	if _, err := os.Stat(Script()); err != nil {
		t.Fatal(err)
	}
}
