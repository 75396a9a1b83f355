package experiment

import (
	"context"
	"os"
	"reflect"
	"strings"
	"testing"

	"github.com/fedpq/fedpq/extern/externtest"
	"github.com/fedpq/fedpq/report"
)

func TestMain(m *testing.M) {
	externtest.Main() // the fake trainer, where this process is one
	os.Exit(m.Run())
}

// external is the quick start trained by the fake external trainer (a
// linear classifier of two tensors; package externtest).
func external(t *testing.T, mode string) Config {
	c := quick(t)
	c.Rounds = 3
	c.Model = External
	c.Trainer = externtest.Command(mode)
	c.TrainerTimeout = "30s"
	return c
}

// TestExternalTrainer: a run trained by a pool of external trainer
// processes records their cost, and its results do not depend on how many
// processes trained its clients: the seed of a client's training travels
// with each request.
func TestExternalTrainer(t *testing.T) {
	var rounds [][]report.Round
	for _, workers := range []int{2, 1} {
		c := external(t, "")
		c.Workers = workers
		s, err := Run(context.Background(), c, nil)
		if err != nil {
			t.Fatal(err)
		}
		tc := s.Trainer
		if tc == nil || tc.Processes != workers || tc.Starts != workers || tc.Requests != 3*30+3 || tc.ExamplesSent == 0 || !(tc.Seconds >= tc.UserSeconds) || tc.Command != c.Trainer {
			t.Fatalf("workers %d: trainer cost %+v; want %d processes, 93 requests (30 clients and an evaluation a round)", workers, tc, workers)
		}
		run, err := report.ReadRun(c.Out)
		if err != nil {
			t.Fatal(err)
		}
		if run.Summary.Trainer == nil {
			t.Error("summary.json has no trainer cost")
		}
		for i := range run.Rounds {
			run.Rounds[i].Seconds = 0
		}
		rounds = append(rounds, run.Rounds)
	}
	if !reflect.DeepEqual(rounds[0], rounds[1]) {
		t.Errorf("2 trainer processes and 1 give different rounds:\n%+v\n%+v", rounds[0], rounds[1])
	}
	if l := rounds[0][0].TrainLoss; !(l > 0 && l < 1000) {
		t.Errorf("round 1's training loss %v: want the fake's, below 1000", l)
	}
}

// TestExternalTrainerFaults: a trainer that fails stops the simulation
// with an error that names the round, the client, the trainer and why,
// and the run directory says the run stopped.
func TestExternalTrainerFaults(t *testing.T) {
	for mode, want := range map[string][]string{
		"crash-after=3": {"round 1: client ", ": trainer ", "exited during train: exit status 3", "RuntimeError: the fake trainer crashed"},
		"nan":           {"round 1: client ", "its train reply refused: tensor w value 3 is NaN"},
		"hang-train":    {"round 1: client ", "did not answer train within 1s (trainer_timeout)"},
	} {
		t.Run(mode, func(t *testing.T) {
			c := external(t, mode)
			c.TrainerTimeout = "1s"
			s, err := Run(context.Background(), c, nil)
			if err == nil {
				t.Fatal("no error")
			}
			for _, w := range want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q\nwant it to say %q", err, w)
				}
			}
			if s == nil || !strings.Contains(s.Error, "stopped after round 0 of 3") {
				t.Errorf("summary %+v: want the failure recorded", s)
			}
		})
	}
}

// TestZooTrainer: an external trainer of a zoo architecture (the fake's
// linear classifier is fedpq's linear model) trains from fedpq's initial
// model, and fedpq's engine evaluates; a trainer whose model has other
// shapes, or computes something else, is refused at the start.
func TestZooTrainer(t *testing.T) {
	c := external(t, "")
	c.Model = "linear"
	native := c
	native.Trainer, native.TrainerTimeout, native.Out = "", "", t.TempDir()
	su, err := NewSetup(c)
	if err != nil {
		t.Fatal(err)
	}
	defer su.Close()
	nsu, err := NewSetup(native)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(su.Arch().Init(c.Seed), nsu.Arch().Init(c.Seed)) {
		t.Error("a zoo model's external trainer: the initial model is not fedpq's")
	}
	tr, err := su.Worker()
	if err != nil {
		t.Fatal(err)
	}
	w := su.Arch().Init(c.Seed)
	test := su.Data.Test
	a1, l1, err := tr.Evaluate(w, test.X, test.Y, nil)
	if err != nil {
		t.Fatal(err)
	}
	if s := su.Pool.Stats(); s.Requests != 1 {
		t.Errorf("%d requests to the trainer; want 1, the start's check: fedpq's engine evaluates a zoo model", s.Requests)
	}
	ntr, _ := nsu.Trainer()
	if a2, l2, _ := ntr.Evaluate(w, test.X, test.Y, nil); a1 != a2 || l1 != l2 {
		t.Errorf("evaluation %v %v, fedpq's engine %v %v", a1, l1, a2, l2)
	}
	if _, err := Run(context.Background(), c, nil); err != nil {
		t.Fatal(err)
	}
	for model, want := range map[string]string{
		"mlp":    "its model has 2 tensors (w [10 60], b [10]), mlp has 6 (fc1/kernel [32 60]",
		"linear": "its model has linear's shapes but does not compute it",
	} {
		c := external(t, "wrong-eval")
		c.Model = model
		_, err := NewSetup(c)
		if err == nil || !strings.Contains(err.Error(), want) || !strings.Contains(err.Error(), "with model: external the run trains the trainer's own model instead") {
			t.Errorf("model %s: error %v; want it to say %q", model, err, want)
		}
	}
}

// TestTrainerSettings: model external needs a trainer, and a timeout is a
// duration.
func TestTrainerSettings(t *testing.T) {
	c := Default()
	c.Model = External
	if err := c.Validate(); err == nil || !strings.Contains(err.Error(), "give its command") {
		t.Errorf("model external without a trainer: %v", err)
	}
	c.Trainer, c.TrainerTimeout = "python3 t.py", "soon"
	if err := c.Validate(); err == nil || !strings.Contains(err.Error(), `trainer_timeout "soon"`) {
		t.Errorf("a bad timeout: %v", err)
	}
	y, _ := Default().YAML()
	if strings.Contains(string(y), "trainer") {
		t.Errorf("a run without a trainer records trainer keys:\n%s", y)
	}
}
