package fl

import (
	"crypto/sha256"
	"encoding/binary"
	"encoding/gob"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"time"
)

// State is all the engine carries from one round to the next. Every other
// random choice derives from the seed and the round number, so a run
// restored from the State after round t continues exactly as it would have.
type State struct {
	Round   int // rounds completed
	Global  [][]float32
	PrevUpd [][]float32 // updates mode: the last estimated update
	Best    [][]float32 // patience: the best model so far
	BestAcc float64
	Since   int     // evaluations since the best
	Joined  []int   // rounds each client took part in: the privacy ledger
	Seconds float64 // wall time of the run so far
}

// State returns the engine's state after its last completed round.
func (e *Engine) State() State {
	return State{
		Round: e.done, Global: e.global, PrevUpd: e.prevUpd, Best: e.best,
		BestAcc: e.bestAcc, Since: e.since, Joined: e.joined, Seconds: e.elapsed(),
	}
}

// Restore puts the engine in state s, checked against the model and clients.
func (e *Engine) Restore(s State) error {
	if s.Round < 0 || s.Round > e.cfg.Rounds {
		return fmt.Errorf("fl: checkpoint after round %d of a %d-round run", s.Round, e.cfg.Rounds)
	}
	if len(s.Joined) != len(e.joined) {
		return fmt.Errorf("fl: checkpoint has %d clients, the run %d", len(s.Joined), len(e.joined))
	}
	if err := e.checkShapes(s.Global); err != nil {
		return err
	}
	for _, w := range [][][]float32{s.PrevUpd, s.Best} { // nil until the first update, evaluation
		if w == nil {
			continue
		}
		if err := e.checkShapes(w); err != nil {
			return err
		}
	}
	e.done, e.global, e.prevUpd, e.best = s.Round, s.Global, s.PrevUpd, s.Best
	e.bestAcc, e.since, e.joined, e.before = s.BestAcc, s.Since, s.Joined, time.Duration(s.Seconds*float64(time.Second))
	e.start = time.Now()
	return nil
}

// checkShapes reports weights that do not fit the model.
func (e *Engine) checkShapes(w [][]float32) error {
	if len(w) != len(e.specs) {
		return fmt.Errorf("fl: checkpoint has %d tensors, the model %d", len(w), len(e.specs))
	}
	for i, s := range e.specs {
		if len(w[i]) != size(s.Shape) {
			return fmt.Errorf("fl: checkpoint tensor %s has %d values, want %d", s.Name, len(w[i]), size(s.Shape))
		}
	}
	return nil
}

// Hash is a SHA-256 of a model's weights, to check that two models (say a
// resumed run's and an uninterrupted one's) are bit for bit the same.
func Hash(w [][]float32) [32]byte {
	h := sha256.New()
	var b [4]byte
	for _, t := range w {
		for _, v := range t {
			binary.LittleEndian.PutUint32(b[:], math.Float32bits(v))
			h.Write(b[:])
		}
	}
	return [32]byte(h.Sum(nil))
}

// SaveState writes s to path, atomically: a crash leaves the old file or
// the new one, never half of one.
func SaveState(path string, s State) error {
	tmp, err := os.CreateTemp(filepath.Dir(path), ".checkpoint-*")
	if err != nil {
		return err
	}
	defer os.Remove(tmp.Name())
	if err := gob.NewEncoder(tmp).Encode(s); err != nil {
		tmp.Close()
		return fmt.Errorf("fl: checkpoint: %w", err)
	}
	if err := tmp.Close(); err != nil {
		return err
	}
	return os.Rename(tmp.Name(), path)
}

// LoadState reads a State written by SaveState.
func LoadState(path string) (State, error) {
	var s State
	f, err := os.Open(path)
	if err != nil {
		return s, err
	}
	defer f.Close()
	if err := gob.NewDecoder(f).Decode(&s); err != nil {
		return s, fmt.Errorf("fl: checkpoint %s: %w", path, err)
	}
	return s, nil
}
