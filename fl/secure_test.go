package fl

import (
	"encoding/json"
	"reflect"
	"strings"
	"testing"
)

// TestSecureSumOnly: a simulation that sums a secure round's fields
// without running the protocol ends with the same models and the same
// ledger, bit for bit, as one that runs it: for pbm and ddgauss under
// DP-FedAvg (the server's shares of the noise added, Poisson sampling)
// and a seed's LDP mechanism, on rounds of about 70 clients (a sparse
// graph); only the protocol's setup bytes are left out. It is refused
// without secure aggregation, with dropout, and on a deployed server.
func TestSecureSumOnly(t *testing.T) {
	const clients, dim = 140, 512
	task := fakeTask(clients, dim, func(int) int { return 1 })
	for _, name := range []string{"pbm", "ddgauss", "ldpq"} {
		cfg := dpConfig()
		cfg.Mechanism, cfg.Rounds, cfg.ClientsPerRound, cfg.SecureAggregation = name, 2, 70, true
		cfg.Mech.ModBits = 16
		switch name {
		case "ldpq":
			cfg.DP = DPFedAvg{}
			cfg.Mech.Epsilon = 1
		default:
			cfg.Sampling, cfg.DP = "poisson", DPFedAvg{Clip: 1, Noise: 1}
		}
		full, fullRounds := run(t, cfg, task)
		cfg.SecureSumOnly = true
		sum, sumRounds := run(t, cfg, task)
		if !reflect.DeepEqual(full.Global(), sum.Global()) {
			t.Errorf("%s: the models differ", name)
		}
		for i := range fullRounds {
			a, b := fullRounds[i], sumRounds[i]
			if a.SetupBytes <= b.SetupBytes {
				t.Errorf("%s, round %d: setup bytes %d with the protocol, %d without", name, a.Round, a.SetupBytes, b.SetupBytes)
			}
			a.SetupBytes, b.SetupBytes, a.Seconds, b.Seconds = 0, 0, 0, 0
			ja, _ := json.Marshal(a)
			jb, _ := json.Marshal(b)
			if string(ja) != string(jb) {
				t.Errorf("%s, round %d: the records differ:\n%s\n%s", name, a.Round, ja, jb)
			}
		}
		if name == "pbm" && fullRounds[0].Privacy.User.Server == nil {
			t.Errorf("pbm: no guarantee against the server: %+v", fullRounds[0].Privacy.User)
		}
	}
	cfg := baseConfig()
	cfg.Weighting, cfg.SecureSumOnly = "mean", true
	for _, c := range []struct {
		set  func(*Config)
		task Task
		want string
	}{
		{func(*Config) {}, task, "needs secure aggregation"},
		{func(c *Config) { c.SecureAggregation, c.Mechanism, c.Dropout = true, "ldpq", 0.1 }, task, "dropout"},
		{func(c *Config) { c.SecureAggregation, c.Mechanism = true, "ldpq" }, Task{Model: task.Model, Trainers: task.Trainers, Data: task.Data, Remote: 8}, "simulations"},
	} {
		c2 := cfg
		c.set(&c2)
		if _, err := New(c2, c.task); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%+v: %v, want an error saying %q", c2, err, c.want)
		}
	}
}
