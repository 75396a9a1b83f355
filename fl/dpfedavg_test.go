package fl

import (
	"math"
	"strings"
	"testing"

	"github.com/fedpq/fedpq/corr"
)

func dpConfig() Config {
	cfg := baseConfig()
	cfg.Perturb, cfg.Weighting = "updates", "mean"
	cfg.DP = DPFedAvg{Clip: 0.5}
	return cfg
}

// TestClipUpdate: a clipped update's float32 norm is at most the clip
// whatever its size, an update within the clip is sent as it is, and the
// indicator says which.
func TestClipUpdate(t *testing.T) {
	src := corr.Derive([]byte("clip"), "test")
	for trial := range 200 {
		scale := math.Ldexp(1, trial%40-20)
		global := [][]float32{make([]float32, 7), make([]float32, 50)}
		local := [][]float32{make([]float32, 7), make([]float32, 50)}
		for i := range local {
			for j := range local[i] {
				global[i][j] = float32(src.NormFloat64())
				local[i][j] = global[i][j] + float32(scale*src.NormFloat64())
			}
		}
		clip := 0.1 + 3*src.Float64()
		dst := make([]float32, 57)
		within, err := clipUpdate(dst, global, local, clip)
		if err != nil {
			t.Fatal(err)
		}
		norm := 0.0
		for i := range local {
			for j := range local[i] {
				u := float64(local[i][j]) - float64(global[i][j])
				norm += u * u
			}
		}
		norm = math.Sqrt(norm)
		if got := l2(dst); got > clip || within != (norm <= clip) {
			t.Fatalf("trial %d: norm %v clipped to %v, clip %v, within %v", trial, norm, got, clip, within)
		}
		if within && dst[8] != local[1][1]-global[1][1] {
			t.Fatalf("trial %d: an update within the clip was changed: %v, want %v", trial, dst[8], local[1][1]-global[1][1])
		}
		if !within && math.Abs(l2(dst)-clip) > 1e-5*clip {
			t.Fatalf("trial %d: clipped to norm %v, want %v", trial, l2(dst), clip)
		}
	}
	if _, err := clipUpdate(make([]float32, 1), [][]float32{{0}}, [][]float32{{float32(math.NaN())}}, 1); err == nil {
		t.Error("a NaN update was clipped")
	}
}

// TestCentralNoise: a central DP-FedAvg round's estimate is the sum of the
// clipped updates over the expected clients per round, plus Gaussian noise
// of standard deviation z C over that number in each coordinate (10,000
// coordinates: the sample standard deviation within 3% holds with
// probability 1 - 1e-11), and a round without noise is the exact mean.
func TestCentralNoise(t *testing.T) {
	const dim, clients = 10000, 8
	task := fakeTask(clients, dim, func(int) int { return 1 })
	for _, z := range []float64{0, 2} {
		cfg := dpConfig()
		cfg.DP.Clip, cfg.DP.Noise = 100, z // no client is clipped
		cfg.ClientsPerRound = 4
		e, rounds := run(t, cfg, task)
		sel := e.sample(1, []int{0, 1, 2, 3, 4, 5, 6, 7})
		if len(sel) != 4 || rounds[0].Clients != 4 {
			t.Fatalf("%d clients sampled, %d in the round", len(sel), rounds[0].Clients)
		}
		var ss float64
		for j := range dim {
			want := 0.0
			for _, k := range sel {
				want += float64(k+1) / clients * float64(j+1) / dim
			}
			want /= 4
			d := float64(e.global[0][j]) - want
			if z == 0 && math.Abs(d) > 1e-6 {
				t.Fatalf("no noise: coordinate %d is %v, want %v", j, e.global[0][j], want)
			}
			ss += d * d
		}
		if z == 0 {
			continue
		}
		sd, want := math.Sqrt(ss/dim), z*100/4
		if math.Abs(sd/want-1) > 0.03 {
			t.Errorf("noise standard deviation %v, want %v", sd, want)
		}
	}
}

// TestPoissonSampling: each client is in a round with probability q, on
// its own: over 400 rounds of 50 clients at q = 0.2, the rounds' sizes
// average 10 (standard deviation of the mean 0.14: within 0.6 with
// probability 1 - 2e-5) and every client is in 80 rounds on average (each
// count's standard deviation 8: all within 45 of 80 with probability
// 1 - 1e-6).
func TestPoissonSampling(t *testing.T) {
	cfg := dpConfig()
	cfg.ClientsPerRound, cfg.Sampling = 10, "poisson"
	e, err := New(cfg, fakeTask(50, 2, func(int) int { return 1 }))
	if err != nil {
		t.Fatal(err)
	}
	if q := e.rate(); q != 0.2 {
		t.Fatalf("rate %v, want 0.2", q)
	}
	count, online := make([]int, 50), make([]int, 50)
	for k := range online {
		online[k] = k
	}
	total, sizes := 0, map[int]bool{}
	for r := 1; r <= 400; r++ {
		sel := e.sample(r, online)
		total += len(sel)
		sizes[len(sel)] = true
		for _, k := range sel {
			count[k]++
		}
	}
	if mean := float64(total) / 400; math.Abs(mean-10) > 0.6 {
		t.Errorf("mean round size %v, want 10", mean)
	}
	if len(sizes) < 5 {
		t.Errorf("round sizes %v: Poisson sampling's vary", sizes)
	}
	for k, c := range count {
		if c < 35 || c > 125 {
			t.Errorf("client %d in %d of 400 rounds, want about 80", k, c)
		}
	}
}

// TestAdaptiveClip: with every update within the clip, the clip falls by
// exp(-0.2 (1 - 0.5)) a round, up to the count's noise (here 1e-9), and
// it comes back from a checkpoint; with every update clipped it rises.
func TestAdaptiveClip(t *testing.T) {
	task := fakeTask(4, 3, func(int) int { return 1 }) // updates of norm < 1.5
	for _, tc := range []struct {
		clip, want float64
	}{{10, 10 * math.Exp(-0.1*3)}, {1e-3, 1e-3 * math.Exp(0.1*3)}} {
		cfg := dpConfig()
		cfg.Rounds = 3
		cfg.DP = DPFedAvg{Clip: tc.clip, Quantile: 0.5, QuantileNoise: 1e-9}
		e, rounds := run(t, cfg, task)
		if math.Abs(e.clip/tc.want-1) > 1e-6 {
			t.Errorf("clip %v after 3 rounds from %v, want %v", e.clip, tc.clip, tc.want)
		}
		if got := rounds[0].RangeRadius; len(got) != 2 || got[0] != tc.clip {
			t.Errorf("round 1's ranges %v, want the clip %v first", got, tc.clip)
		}
		e2, err := New(cfg, task)
		if err != nil {
			t.Fatal(err)
		}
		if err := e2.Restore(e.State()); err != nil || e2.clip != e.clip {
			t.Errorf("restored clip %v, want %v (%v)", e2.clip, e.clip, err)
		}
	}
}

// TestDPConfigErrors: DP-FedAvg's settings, and what it cannot run with,
// are refused with the setting named.
func TestDPConfigErrors(t *testing.T) {
	task := fakeTask(4, 3, func(int) int { return 1 })
	for _, tc := range []struct {
		change func(*Config)
		want   string
	}{
		{func(c *Config) { c.DP.Clip = math.NaN() }, "clip NaN"},
		{func(c *Config) { c.DP.Clip = -1 }, "clip -1"},
		{func(c *Config) { c.DP.Noise = -1 }, "noise multiplier -1"},
		{func(c *Config) { c.DP.Noise, c.DP.TargetEpsilon = 1, 3 }, "set one"},
		{func(c *Config) { c.DP.Clip, c.DP.Noise = 0, 1 }, "needs clip"},
		{func(c *Config) { c.DP.Delta = 1 }, "delta 1"},
		{func(c *Config) { c.Perturb = "weights" }, "perturb: updates"},
		{func(c *Config) { c.Weighting = "examples" }, "weighting: mean"},
		{func(c *Config) { c.Shuffle = true }, "shuffler"},
		{func(c *Config) { c.Mechanism = "ldpq" }, "not ldpq"},
		{func(c *Config) { c.DP.Quantile = 1 }, "clip quantile 1"},
		{func(c *Config) { c.DP.Quantile, c.DP.Noise, c.DP.QuantileNoise = 0.5, 1, 0.2 }, "raise clip_quantile_noise"},
		{func(c *Config) { c.Sampling = "bernoulli" }, `sampling "bernoulli"`},
	} {
		cfg := dpConfig()
		tc.change(&cfg)
		if _, err := New(cfg, task); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("got %v, want an error with %q", err, tc.want)
		}
	}
}
