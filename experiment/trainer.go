package experiment

import (
	"fmt"
	"math"
	"os"
	"slices"
	"strings"

	"github.com/fedpq/fedpq/extern"
	"github.com/fedpq/fedpq/fl"
	"github.com/fedpq/fedpq/model"
	"github.com/fedpq/fedpq/report"
)

// Arch is the model the round engine trains: the zoo architecture, or
// the external trainer's own model (model: external).
func (s *Setup) Arch() fl.Model {
	if s.Model != nil {
		return s.Model
	}
	return s.Pool
}

// Worker returns the trainer of one more worker: the next process of the
// external trainer pool where the run has one, else a new trainer on
// fedpq's engine (Trainer).
func (s *Setup) Worker() (fl.Trainer, error) {
	if s.Pool == nil {
		tr, err := s.Trainer()
		if err != nil {
			return nil, err
		}
		return tr, nil
	}
	if t := s.first; t != nil {
		s.first = nil
		return t, nil
	}
	t, err := s.Pool.Trainer()
	if err != nil {
		return nil, err
	}
	if s.Model == nil {
		return t, nil
	}
	return &zooTrainer{Trainer: t, setup: s}, nil
}

// Close stops the setup's external trainers, if it has any.
func (s *Setup) Close() error {
	if s.Pool == nil {
		return nil
	}
	return s.Pool.Close()
}

// TrainerCost is what the external trainers cost so far, nil without them.
func (s *Setup) TrainerCost() *report.TrainerCost {
	if s.Pool == nil {
		return nil
	}
	st := s.Pool.Stats()
	return &report.TrainerCost{
		Command: s.Pool.Command(), Processes: st.Trainers, Starts: st.Starts, StartSeconds: st.StartSeconds,
		Requests: st.Requests, Seconds: st.Seconds, UserSeconds: st.UserSeconds, Overhead: st.Overhead(),
		BytesSent: st.BytesSent, BytesRead: st.BytesRead, ExamplesSent: st.Examples, DataSeconds: st.DataSeconds,
	}
}

// startTrainers starts the external trainer pool and its first process,
// which describes its model. Where the run names a zoo architecture, the
// trainer's model must be it: the same tensor shapes, and the same loss
// and accuracy on the initial weights.
func (s *Setup) startTrainers() error {
	c := s.Config
	if c.Trainer == "" {
		return nil
	}
	timeout, err := c.trainerTimeout()
	if err != nil {
		return err
	}
	pool, err := extern.NewPool(extern.Options{Command: c.Trainer, Timeout: timeout, Threads: max(c.TrainerThreads, 1), Stderr: os.Stderr}, extern.Spec{
		Seed: c.Seed, Input: s.Data.Train.Shape, Classes: s.Data.Train.Classes, Optimizer: s.Optimizer,
	})
	if err != nil {
		return err
	}
	first, err := pool.Trainer()
	if err == nil && s.Model != nil {
		err = s.sameModel(pool, first)
	}
	if err != nil {
		pool.Close()
		return err
	}
	s.Pool, s.first = pool, first
	if s.Model != nil {
		s.first = &zooTrainer{Trainer: first, setup: s}
	}
	return nil
}

// sameModel checks that the trainer's model computes the run's zoo
// architecture: the same tensor shapes in the same order, and on the
// initial weights the same mean loss (to 1e-4) and accuracy (to 1%) on up
// to 512 test examples (a deployed client's own, where it has no test
// set) as fedpq's engine.
func (s *Setup) sameModel(pool *extern.Pool, tr *extern.Trainer) error {
	arch := s.Config.Model
	want, got := s.Model.Tensors(), pool.Tensors()
	hint := fmt.Sprintf("with model: %s the run trains the trainer's own model instead", External)
	if len(got) != len(want) {
		return fmt.Errorf("trainer %q: its model has %d tensors (%s), %s has %d (%s); %s",
			s.Config.Trainer, len(got), specList(got), arch, len(want), specList(want), hint)
	}
	for i := range want {
		if !slices.Equal(got[i].Shape, want[i].Shape) {
			return fmt.Errorf("trainer %q: its tensor %d, %s, has shape %v; %s's %s has %v; %s",
				s.Config.Trainer, i, got[i].Name, got[i].Shape, arch, want[i].Name, want[i].Shape, hint)
		}
	}
	native, err := s.Trainer()
	if err != nil {
		return err
	}
	test := s.Data.Test // a deployed client has none: its own examples serve
	if test == nil || test.Len() == 0 {
		test = s.Data.Train
	}
	if test == nil || test.Len() == 0 {
		return nil // nothing to compare on; the shapes agree
	}
	idx := make([]int, min(512, test.Len()))
	for i := range idx {
		idx[i] = i
	}
	w := s.Model.Init(s.Config.Seed)
	acc, loss, err := native.Evaluate(w, test.X, test.Y, idx)
	if err != nil {
		return err
	}
	tacc, tloss, err := tr.Evaluate(w, test.X, test.Y, idx)
	if err != nil {
		return err
	}
	if math.Abs(tloss-loss) > 1e-4*max(1, math.Abs(loss)) || math.Abs(tacc-acc) > 0.01 {
		return fmt.Errorf("trainer %q: its model has %s's shapes but does not compute it: on the initial weights and %d test examples its loss is %.6f and accuracy %.4f, fedpq's %.6f and %.4f (check its layers, activations and flatten order against docs/models.md); %s",
			s.Config.Trainer, arch, len(idx), tloss, tacc, loss, acc, hint)
	}
	return nil
}

// specList lists tensors as "name [shape]".
func specList(specs []model.TensorSpec) string {
	out := make([]string, len(specs))
	for i, s := range specs {
		out[i] = fmt.Sprintf("%s %v", s.Name, s.Shape)
	}
	return strings.Join(out, ", ")
}

// zooTrainer trains in an external trainer and evaluates on fedpq's
// engine: the run's model is a zoo architecture, which the trainer was
// checked to compute, so that a server evaluates it without a trainer.
type zooTrainer struct {
	*extern.Trainer
	setup *Setup
	eval  *model.Trainer
}

func (z *zooTrainer) Evaluate(weights [][]float32, x []float32, y []int32, idx []int) (acc, loss float64, err error) {
	if z.eval == nil {
		if z.eval, err = z.setup.Trainer(); err != nil {
			return 0, 0, err
		}
	}
	return z.eval.Evaluate(weights, x, y, idx)
}
