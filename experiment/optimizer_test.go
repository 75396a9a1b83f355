package experiment

import (
	"context"
	"path/filepath"
	"strings"
	"testing"

	"github.com/fedpq/fedpq/fl"
	"github.com/fedpq/fedpq/report"
)

// TestUnreadServerSettingRefused: a server setting the chosen optimizer
// does not read is refused with the reason, not ignored: fedadagrad took
// server_beta2 5 without a word. A setting the optimizer reads, and a
// default one it does not, pass.
func TestUnreadServerSettingRefused(t *testing.T) {
	refused := map[string]func(*Config){ // the error, and the settings that give it
		"server_beta2 5 is not read by fedadagrad (it has no second-moment decay": func(c *Config) { c.ServerOptimizer, c.ServerBeta2 = "fedadagrad", 5 },
		"server_beta1 0.5 is not read by fedavg":                                  func(c *Config) { c.ServerBeta1 = 0.5 },
		"server_tau 0.1 is not read by fedavg":                                    func(c *Config) { c.ServerTau = 0.1 },
		"server_beta2 0.9 is not read by fedavgm":                                 func(c *Config) { c.ServerOptimizer, c.ServerBeta2 = "fedavgm", 0.9 },
		"server_tau 0.1 is not read by fedavgm":                                   func(c *Config) { c.ServerOptimizer, c.ServerTau = "fedavgm", 0.1 },
	}
	accepted := map[string]func(*Config){
		"fedadagrad, beta1 and tau": func(c *Config) { c.ServerOptimizer, c.ServerBeta1, c.ServerTau = "fedadagrad", 0.5, 0.1 },
		"fedadam, beta2":            func(c *Config) { c.ServerOptimizer, c.ServerBeta2 = "fedadam", 0.9 },
		"fedyogi, tau":              func(c *Config) { c.ServerOptimizer, c.ServerTau = "fedyogi", 0.1 },
		"fedavgm, beta1":            func(c *Config) { c.ServerOptimizer, c.ServerBeta1 = "fedavgm", 0.5 },
		"fedavg, beta2 the default": func(c *Config) { c.ServerBeta2 = fl.DefaultServerConfig().Beta2 },
	}
	config := func(set func(*Config)) Config {
		c := quick(t)
		c.GlobalLR = 0.1
		set(&c)
		return c
	}
	for want, set := range refused {
		if err := config(set).Validate(); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%v; want %q", err, want)
		}
	}
	for name, set := range accepted {
		if err := config(set).Validate(); err != nil {
			t.Errorf("%s: %v", name, err)
		}
	}
}

// TestResumeFedAdagrad: the config.yaml a fedadagrad run writes (every
// server setting at its value, server_beta2 at the default it does not
// read) resumes, and ends with the model of the uninterrupted run.
func TestResumeFedAdagrad(t *testing.T) {
	c := quick(t)
	c.ServerOptimizer, c.GlobalLR, c.ServerBeta1, c.ServerTau = "fedadagrad", 0.1, 0.5, 0.01
	want, _ := finalModel(t, c)
	c.Out = t.TempDir()
	ctx, cancel := context.WithCancel(context.Background())
	if _, err := Run(ctx, c, func(r report.Round) {
		if r.Round == 2 {
			cancel()
		}
	}); err == nil {
		t.Fatal("the interrupted run did not stop")
	}
	if _, err := Resume(context.Background(), c.Out, nil); err != nil {
		t.Fatal(err)
	}
	st, err := fl.LoadState(filepath.Join(c.Out, CheckpointFile))
	if err != nil {
		t.Fatal(err)
	}
	if fl.Hash(st.Global) != want {
		t.Error("the resumed fedadagrad run ends with another model than the uninterrupted one")
	}
}
