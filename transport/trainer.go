package transport

import (
	"errors"
	"fmt"
	"runtime"

	"github.com/fedpq/fedpq/experiment"
	"github.com/fedpq/fedpq/extern"
)

// ownTrainer puts the client's own trainer in the run's configuration in
// place of the server's: a client never runs a command it was sent. A run
// whose model is an external trainer's needs one.
func (c *Client) ownTrainer(cfg *experiment.Config) error {
	if cfg.Model == experiment.External && c.cfg.Trainer == "" {
		return fmt.Errorf("the run's model is %s, an external trainer's own: give this client --trainer CMD, a trainer of the same model as the server's", experiment.External)
	}
	cfg.Trainer, cfg.TrainerTimeout, cfg.TrainerThreads = c.cfg.Trainer, "", c.cfg.TrainerThreads
	if c.cfg.TrainerTimeout > 0 {
		cfg.TrainerTimeout = c.cfg.TrainerTimeout.String()
	}
	if cfg.TrainerThreads <= 0 {
		cfg.TrainerThreads = runtime.NumCPU() // one trainer: the machine is the client's
	}
	return nil
}

// trainerFailure is what a client tells the server when its trainer
// failed: the kind of failure only. The error itself, which may quote the
// trainer's output, stays in the client's log: nothing leaves a client
// that fedpq did not clip and encode.
func trainerFailure(err error) string {
	var pe *extern.ProcessError
	var re *extern.ReplyError
	var te *extern.TrainerError
	switch {
	case errors.As(err, &pe):
		return "local training failed: the trainer process timed out, exited or broke the protocol"
	case errors.As(err, &re):
		return "local training failed: the trainer's reply was refused (non-finite values, wrong tensors, shapes or counts)"
	case errors.As(err, &te):
		return "local training failed: the trainer's own code reported an error"
	}
	return "local training failed"
}
