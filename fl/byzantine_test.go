package fl

import (
	"bytes"
	"context"
	"fmt"
	"math"
	"slices"
	"testing"

	"github.com/fedpq/fedpq/corr"
	"github.com/fedpq/fedpq/mech"
	"github.com/fedpq/fedpq/model"
)

// TestParseAttack: every kind reads back as written; a bad spec says what
// is wanted.
func TestParseAttack(t *testing.T) {
	for _, s := range []string{"", "sign-flip", "scale:100", "scale:-0.5", "label-flip", "constant", "extreme"} {
		a, err := ParseAttack(s)
		if err != nil || a.String() != s {
			t.Errorf("%q: %v, reads back as %q", s, err, a.String())
		}
	}
	want := map[string]string{
		"flip":          `fl: byzantine "flip": want sign-flip, scale:S, label-flip, constant or extreme (empty: none)`,
		":1":            `fl: byzantine ":1": want sign-flip, scale:S, label-flip, constant or extreme (empty: none)`,
		"scale":         `fl: byzantine "scale": want scale:S with S a finite number other than 0, such as scale:100`,
		"scale:0":       `fl: byzantine "scale:0": want scale:S with S a finite number other than 0, such as scale:100`,
		"scale:inf":     `fl: byzantine "scale:inf": want scale:S with S a finite number other than 0, such as scale:100`,
		"sign-flip:2":   `fl: byzantine "sign-flip:2": sign-flip takes no argument`,
		"extreme:1,2,3": `fl: byzantine "extreme:1,2,3": extreme takes no argument`,
	}
	for s, msg := range want {
		if _, err := ParseAttack(s); err == nil || err.Error() != msg {
			t.Errorf("%q: %v, want %s", s, err, msg)
		}
	}
}

// TestByzantineSet: round(fraction n) clients attack, the same ones for
// the same secret, others for another; fraction 0 chooses none, and the
// settings that make no sense are refused.
func TestByzantineSet(t *testing.T) {
	for _, c := range []struct {
		n    int
		f    float64
		want int
	}{{20, 0.2, 4}, {20, 0.1, 2}, {10, 0.25, 3}, {7, 0.49, 3}, {1000, 0.3, 300}, {20, 0, 0}} {
		a, b := byzantine([]byte("s1"), c.n, c.f), byzantine([]byte("s1"), c.n, c.f)
		if got := count(a); got != c.want || !slices.Equal(a, b) {
			t.Errorf("n %d fraction %v: %d attackers (want %d); same secret, same set: %v", c.n, c.f, got, c.want, slices.Equal(a, b))
		}
	}
	// Over 200 secrets each of 20 clients is chosen about 200 * 4/20 = 40
	// times (binomial sd 5.7): all within 40 ± 25.
	times := make([]int, 20)
	for s := range 200 {
		for k, b := range byzantine(fmt.Appendf(nil, "secret %d", s), 20, 0.2) {
			if b {
				times[k]++
			}
		}
	}
	for k, n := range times {
		if n < 15 || n > 65 {
			t.Errorf("client %d attacks under %d of 200 secrets, want about 40", k, n)
		}
	}
	sign := Attack{Kind: SignFlip}
	for _, c := range []struct {
		cfg  Config
		want string
	}{
		{Config{ByzantineFraction: 0.5, Byzantine: sign}, "fl: byzantine fraction 0.5 must be in [0, 0.5)"},
		{Config{ByzantineFraction: -0.1, Byzantine: sign}, "fl: byzantine fraction -0.1 must be in [0, 0.5)"},
		{Config{ByzantineFraction: math.NaN(), Byzantine: sign}, "fl: byzantine fraction NaN must be in [0, 0.5)"},
		{Config{ByzantineFraction: 0.2}, "fl: byzantine fraction 0.2 without an attack: name one (byzantine: sign-flip, scale:S, label-flip, constant or extreme)"},
		{Config{ByzantineFraction: 0.01, Byzantine: sign}, "fl: byzantine fraction 0.01 of 20 clients rounds to no client: at least 0.025 makes one"},
	} {
		if err := c.cfg.ValidateByzantine(20); err == nil || err.Error() != c.want {
			t.Errorf("%+v: %v, want %s", c.cfg, err, c.want)
		}
	}
}

func count(b []bool) int {
	n := 0
	for _, v := range b {
		if v {
			n++
		}
	}
	return n
}

// roundUploads runs round t of e by hand and returns every client's
// upload, by client id.
func roundUploads(t *testing.T, e *Engine, round int) map[int]Upload {
	t.Helper()
	p, err := e.Begin(round, nil)
	if err != nil {
		t.Fatal(err)
	}
	ups := map[int]Upload{}
	for pos, k := range p.Clients {
		u := e.client(context.Background(), e.task.Trainers[0], p, pos)
		if u.err != nil {
			t.Fatal(u.err)
		}
		if err := p.Add(pos, u.Upload); err != nil {
			t.Fatalf("client %d's upload refused: %v", k, err)
		}
		ups[k] = u.Upload
	}
	if _, err := e.End(p); err != nil {
		t.Fatal(err)
	}
	return ups
}

// TestHonestUnchanged: with the attack named and fraction 0 the run is
// today's, bit for bit; with attackers, every honest client's upload is
// the one it sends in an honest run, byte for byte (the attack draws from
// no stream they use), and only the attackers' differ.
func TestHonestUnchanged(t *testing.T) {
	task := fakeTask(10, 64, func(int) int { return 2 })
	cfg := baseConfig()
	cfg.Mechanism, cfg.Perturb, cfg.Rounds = "corbin", "updates", 3
	honest, _ := run(t, cfg, task)
	cfg.Byzantine = Attack{Kind: SignFlip}
	zero, _ := run(t, cfg, task)
	if Hash(honest.Global()) != Hash(zero.Global()) {
		t.Errorf("fraction 0 changes the run")
	}
	cfg.Rounds = 1
	h, err := New(cfg, task)
	if err != nil {
		t.Fatal(err)
	}
	cfg.ByzantineFraction = 0.2
	a, err := New(cfg, task)
	if err != nil {
		t.Fatal(err)
	}
	hu, au := roundUploads(t, h, 1), roundUploads(t, a, 1)
	for k := range hu {
		same := slices.EqualFunc(hu[k].Payloads, au[k].Payloads, bytes.Equal)
		if same == a.attacker(k) {
			t.Errorf("client %d (attacker %v): same upload as in the honest run: %v", k, a.attacker(k), same)
		}
	}
}

// TestSignFlipAndScale: the decoded messages of 4000 attackers that hold
// the same update u average to -u (sign-flip) and to clip(3u) (scale:3),
// within 5 standard errors of ldpq's noise (out^2 - x^2 per message), in
// updates and in weights mode.
func TestSignFlipAndScale(t *testing.T) {
	const clients, dim = 4000, 8
	rg := mech.Range{Center: 0, Radius: 0.05}
	m, err := mech.New("ldpq", mech.DefaultConfig())
	if err != nil {
		t.Fatal(err)
	}
	out, _ := m.(mech.Supporter).Support(rg)
	global := []float32{0.5, -0.25, 0, 1, 0.5, -0.25, 0, 1}
	upd := []float32{0.01, -0.02, 0.03, -0.004, 0.015, 0, -0.012, 0.016}
	for _, perturb := range []string{"updates", "weights"} {
		center := func(j int) float64 { return 0 }
		if perturb == "weights" {
			center = func(j int) float64 { return float64(global[j]) }
		}
		for _, a := range []Attack{{Kind: SignFlip}, {Kind: ScaleBy, Scale: 3}} {
			s := -1.0
			if a.Kind == ScaleBy {
				s = a.Scale
			}
			sums := make([]mech.Sum, dim)
			ranges := make([]mech.Range, dim)
			for j := range dim {
				ranges[j] = mech.Range{Center: center(j), Radius: rg.Radius}
				if sums[j], err = m.NewSum(1, ranges[j]); err != nil {
					t.Fatal(err)
				}
			}
			for k := range clients {
				g, local := make([][]float32, dim), make([][]float32, dim)
				for j := range dim {
					g[j], local[j] = []float32{global[j]}, []float32{global[j] + upd[j]}
				}
				slot := mech.Slot{Private: corr.Derive([]byte("flip"), "private", uint64(k))}
				p, err := a.Encode(m, perturb, g, local, ranges, slot, nil)
				if err != nil {
					t.Fatal(err)
				}
				for j := range dim {
					if err := sums[j].Add(p[j], mech.Slot{}); err != nil {
						t.Fatal(err)
					}
				}
			}
			for j := range dim {
				mean := make([]float64, 1)
				if err := sums[j].Mean(mean); err != nil {
					t.Fatal(err)
				}
				want := min(max(s*float64(upd[j]), -rg.Radius), rg.Radius)
				se := math.Sqrt((out*out - want*want) / clients)
				if got := mean[0] - center(j); math.Abs(got-want) > 5*se {
					t.Errorf("%s %v: parameter %d decodes to %v on average, want %v (5 se = %v)", perturb, a, j, got, want, 5*se)
				}
			}
		}
	}
}

// TestExtremeAttack: an extreme attacker's every bit is the one against
// its honest update (1 where the update is negative), for ldpq and for
// corbin attackers paired with honest clients; a mechanism without an
// extreme message is refused when the run is made.
func TestExtremeAttack(t *testing.T) {
	task := fakeTask(10, 64, func(int) int { return 2 })
	cfg := baseConfig()
	cfg.Perturb, cfg.Range = "updates", RangeRule{Kind: "fixed", Center: 0, Radius: 0.05}
	cfg.Byzantine, cfg.ByzantineFraction = Attack{Kind: Extreme}, 0.2
	for _, name := range []string{"ldpq", "corbin"} {
		cfg.Mechanism = name
		e, err := New(cfg, task)
		if err != nil {
			t.Fatal(err)
		}
		// The global model is 0 and client k's target is positive in every
		// coordinate (fakeTask): every attacker bit is 0 in round 1.
		// Round 2 starts from the mean, above some clients' targets and
		// below others'.
		for round := 1; round <= 2; round++ {
			g := clone(e.Global())
			for k, u := range roundUploads(t, e, round) {
				if !e.attacker(k) {
					continue
				}
				target, _, _ := e.task.Trainers[0].Train(context.Background(), g, task.Data.Train.X, nil, task.Clients[k], model.TrainConfig{})
				for j, b := range unpackBits(u.Payloads[0], 64) {
					if want := target[0][j] < g[0][j]; b != want {
						t.Fatalf("%s round %d client %d bit %d = %v, update %v", name, round, k, j, b, target[0][j]-g[0][j])
					}
				}
			}
		}
	}
	cfg.Mechanism = "laplace"
	want := "fl: byzantine extreme: mech: laplace has no extreme message (Extremal); none, gaussian, ldpq, corbin, augcorbin, coq and sdq have one"
	if _, err := New(cfg, task); err == nil || err.Error() != want {
		t.Errorf("laplace: %v", err)
	}
}

func unpackBits(p []byte, n int) []bool {
	b := make([]bool, n)
	for i := range b {
		b[i] = p[i/8]>>(i%8)&1 == 1
	}
	return b
}

// TestConstantAttack: a constant attacker sends the same bytes in every
// round, whatever the model and, for the one-bit mechanisms and sdq, the
// range (minmax: it follows the model); none and gaussian under a fixed
// range. Two attackers of a mechanism with private coins send different
// messages (each has its own fixed coins); of none and sdq, whose
// encoding of the edge uses no coin, the same.
func TestConstantAttack(t *testing.T) {
	task := fakeTask(10, 64, func(int) int { return 2 })
	for _, c := range []struct {
		mech  string
		fixed bool
	}{{"ldpq", false}, {"corbin", false}, {"sdq", false}, {"none", true}, {"gaussian", true}} {
		cfg := baseConfig()
		cfg.Mechanism, cfg.Perturb, cfg.Rounds = c.mech, "weights", 3
		cfg.Byzantine, cfg.ByzantineFraction = Attack{Kind: Constant}, 0.2
		cfg.Range = RangeRule{Kind: "minmax", Scale: 1}
		if c.fixed {
			cfg.Range = RangeRule{Kind: "fixed", Center: 0, Radius: 1}
		}
		e, err := New(cfg, task)
		if err != nil {
			t.Fatal(err)
		}
		first := roundUploads(t, e, 1)
		var sent [][]byte
		for round := 2; round <= 3; round++ {
			for k, u := range roundUploads(t, e, round) {
				if e.attacker(k) && !bytes.Equal(u.Payloads[0], first[k].Payloads[0]) {
					t.Errorf("%s: attacker %d sends another message in round %d", c.mech, k, round)
				}
			}
		}
		for k, u := range first {
			if e.attacker(k) {
				sent = append(sent, u.Payloads[0])
			}
		}
		coins := c.mech != "sdq" && c.mech != "none"
		if len(sent) != 2 || coins == bytes.Equal(sent[0], sent[1]) {
			t.Errorf("%s: %d attackers, messages differ: %v", c.mech, len(sent), len(sent) == 2 && !bytes.Equal(sent[0], sent[1]))
		}
	}
}

// labelTrainer records the labels each client trained on.
type labelTrainer struct {
	fakeTrainer
	seen map[int][]int32
}

func (l *labelTrainer) Train(ctx context.Context, w [][]float32, x []float32, y []int32, idx []int, c model.TrainConfig) ([][]float32, float64, error) {
	for _, i := range idx {
		l.seen[c.Client] = append(l.seen[c.Client], y[i])
	}
	return l.fakeTrainer.Train(ctx, w, x, y, idx, c)
}

// TestLabelFlip: an attacker trains on C-1-y, an honest client on y, and
// the shared dataset is left alone.
func TestLabelFlip(t *testing.T) {
	task := fakeTask(10, 4, func(k int) int { return 3 })
	y := task.Data.Train.Y
	for i := range y {
		y[i] = int32(i % 5)
	}
	task.Data.Train.Classes = 5
	before := slices.Clone(y)
	tr := &labelTrainer{fakeTrainer{dim: 4}, map[int][]int32{}}
	task.Trainers = []Trainer{tr}
	cfg := baseConfig()
	cfg.Workers = 1
	cfg.Byzantine, cfg.ByzantineFraction = Attack{Kind: LabelFlip}, 0.3
	e, _ := run(t, cfg, task)
	for k, idx := range task.Clients {
		for n, i := range idx {
			want := before[i]
			if e.attacker(k) {
				want = 4 - want
			}
			if got := tr.seen[k][n]; got != want {
				t.Errorf("client %d (attacker %v) trained example %d on label %d, want %d", k, e.attacker(k), i, got, want)
			}
		}
	}
	if !slices.Equal(y, before) || count(e.byz) != 3 {
		t.Errorf("the dataset's labels changed: %v; %d attackers", !slices.Equal(y, before), count(e.byz))
	}
	if _, err := FlipLabels([]int32{0, 5}, 5); err == nil || err.Error() != "fl: byzantine label-flip: label 5 of example 1 is not one of the 5 classes" {
		t.Errorf("label out of range: %v", err)
	}
}

// TestAttackerRefused: an attacker whose message leaves the support (none
// does not clip: scale:1e6 sends updates far beyond its 1000 r) is refused
// by the server and the round goes on without it, counted as dropped.
func TestAttackerRefused(t *testing.T) {
	task := fakeTask(10, 8, func(int) int { return 2 })
	cfg := baseConfig()
	cfg.Perturb, cfg.Rounds = "updates", 2
	cfg.Range = RangeRule{Kind: "fixed", Center: 0, Radius: 0.01} // accepts up to 10; honest updates are below 1
	cfg.Byzantine, cfg.ByzantineFraction = Attack{Kind: ScaleBy, Scale: 1e6}, 0.2
	_, rounds := run(t, cfg, task)
	for _, r := range rounds {
		if r.Clients != 8 || r.Dropped != 2 {
			t.Errorf("round %d: %d uploads, %d dropped; want 8 and 2", r.Round, r.Clients, r.Dropped)
		}
	}
}
