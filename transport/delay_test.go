package transport

import (
	"math"
	"slices"
	"testing"
	"time"
)

// TestDelay: each client's lognormal delay is its own draw (the run's
// secret is the fleet's, so a draw of the version alone would make every
// client wait the same), repeatable for the same client and task, of the
// stated median; a tail's slow clients are the first F n ids, X times S.
func TestDelay(t *testing.T) {
	secret := []byte("run secret")
	d, err := ParseDelay("lognormal:2:0.5")
	if err != nil {
		t.Fatal(err)
	}
	const n = 4000
	logs := make([]float64, n)
	for k := range n {
		w := d.wait(secret, k, n, 3)
		if w != d.wait(secret, k, n, 3) {
			t.Fatalf("client %d's delay is not repeatable", k)
		}
		logs[k] = math.Log(w.Seconds())
	}
	slices.Sort(logs)
	if distinct := len(slices.Compact(slices.Clone(logs))); distinct < n-1 {
		t.Errorf("%d distinct delays among %d clients", distinct, n)
	}
	// The median of n lognormal draws: its log has standard error about
	// 1.2533 sigma / sqrt(n) = 0.0099; 5 of them.
	if med := logs[n/2]; math.Abs(med-math.Log(2)) > 0.05 {
		t.Errorf("median delay %.3f s, want 2 s", math.Exp(med))
	}
	if d.wait(secret, 7, n, 3) == d.wait(secret, 7, n, 4) {
		t.Error("client 7 waits the same for two tasks")
	}

	tail, err := ParseDelay("tail:0.1:10:0.5")
	if err != nil {
		t.Fatal(err)
	}
	for k, want := range map[int]time.Duration{0: 5 * time.Second, 19: 5 * time.Second, 20: 500 * time.Millisecond, 199: 500 * time.Millisecond} {
		if got := tail.wait(secret, k, 200, 1); got != want {
			t.Errorf("tail: client %d of 200 waits %v, want %v", k, got, want)
		}
	}
	for _, bad := range []string{"fixed", "fixed:-1", "lognormal:1", "tail:2:10:1", "tail:0.1:0.5:1", "uniform:1"} {
		if _, err := ParseDelay(bad); err == nil {
			t.Errorf("ParseDelay(%q) accepted", bad)
		}
	}
}
