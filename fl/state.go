package fl

import (
	"container/heap"
	"crypto/sha256"
	"encoding/binary"
	"encoding/gob"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"time"

	"github.com/fedpq/fedpq/privacy"
)

// State is all the engine carries from one round to the next. Every other
// random choice derives from the seed and the round number, so a run
// restored from the State after round t continues exactly as it would have.
type State struct {
	Round   int // rounds completed
	Global  [][]float32
	PrevUpd [][]float32 // updates mode: the last estimated update
	Radii   []float64   // range adaptive: each tensor's radius for the next round
	Best    [][]float32 // patience: the best model so far
	BestAcc float64
	Since   int // evaluations since the best
	// Moments is the server optimizer's state (ServerOptimizer.Step): nil
	// for FedAvg and before the first round.
	Moments [][]float32
	Joined  []int   // rounds each client took part in: the privacy ledger
	Seconds float64 // wall time of the run so far
	// MinSum and MinAlone are the fewest uploads a round summed, and of
	// them from clients without a partner in the sum: the ledger against a
	// server that sees only sums.
	MinSum, MinAlone int
	// Clip is DP-FedAvg's clip for the next round, which an adaptive clip
	// moves; Accountant its accountant's state (privacy.Accountant's
	// JSON).
	Clip       float64
	Accountant []byte
	// Tree and TreeLast are DP-FTRL's tree (privacy.TreeState's JSON) and
	// its noise on the last prefix sum.
	Tree     []byte
	TreeLast []float64
	// Clock is the virtual time under a speed model (speed.go); Async an
	// asynchronous run's clients in flight (nil in mode sync).
	Clock float64
	Async *AsyncState
}

// AsyncState is an asynchronous run's state after a server step: the
// clients in flight and the model versions they started from (their
// training is run again on resume, to the same result), and how many
// replacements have been drawn.
type AsyncState struct {
	Flight []AsyncJob
	Bases  map[int][][]float32 // by version
	Draws  uint64
}

// AsyncJob is a client in flight: started from model Version at Start,
// finishing at Finish on the clock.
type AsyncJob struct {
	Client, Version int
	Start, Finish   float64
}

// State returns the engine's state after its last completed round.
func (e *Engine) State() State {
	return State{
		Round: e.done, Global: e.global, PrevUpd: e.prevUpd, Radii: e.radii, Best: e.best,
		BestAcc: e.bestAcc, Since: e.since, Moments: e.moments, Joined: e.joined, Seconds: e.elapsed(),
		MinSum: e.minSum, MinAlone: e.minAlone, Clip: e.clip, Accountant: e.acctState(),
		Tree: e.treeState(), TreeLast: e.treeLast, Clock: e.now, Async: e.asyncState(),
	}
}

// asyncState is the asynchronous run's state as a State keeps it; nil in
// mode sync or before the first step.
func (e *Engine) asyncState() *AsyncState {
	a := e.async
	if a == nil {
		return nil
	}
	s := &AsyncState{Bases: map[int][][]float32{}, Draws: a.draws}
	for _, j := range a.flight {
		s.Flight = append(s.Flight, AsyncJob{Client: j.k, Version: j.version, Start: j.start, Finish: j.finish})
		s.Bases[j.version] = j.base.w
	}
	return s
}

// restoreAsync puts an asynchronous run's clients in flight back, checked
// against the run: every client once, every version one the run has made
// and has the model of, times finite and in order.
func (e *Engine) restoreAsync(s State) error {
	if s.Async == nil {
		// A deployed server's clients keep what they train (and announce
		// it again when they rejoin): its checkpoints hold no clients.
		if e.cfg.async() && s.Round > 0 && e.task.Clients != nil {
			return errors.New("fl: checkpoint of a synchronous run, or of one from before mode async was saved; this run is asynchronous")
		}
		e.async = nil
		return nil
	}
	if !e.cfg.async() {
		return errors.New("fl: checkpoint of an asynchronous run; this run is synchronous")
	}
	for v, w := range s.Async.Bases {
		if v < 0 || v > s.Round {
			return fmt.Errorf("fl: checkpoint holds model version %d after %d steps", v, s.Round)
		}
		if err := e.checkShapes(w); err != nil {
			return err
		}
		if err := (State{Global: w}).finite(); err != nil {
			return err
		}
	}
	a := newAsyncLoop(len(e.examples))
	a.draws = s.Async.Draws
	if len(s.Async.Flight) > e.cfg.Concurrency {
		return fmt.Errorf("fl: checkpoint has %d clients in flight, the run's concurrency is %d", len(s.Async.Flight), e.cfg.Concurrency)
	}
	for _, fj := range s.Async.Flight {
		w, ok := s.Async.Bases[fj.Version]
		switch {
		case fj.Client < 0 || fj.Client >= len(a.busy) || a.busy[fj.Client]:
			return fmt.Errorf("fl: checkpoint has client %d in flight twice, or not in the run", fj.Client)
		case !ok:
			return fmt.Errorf("fl: checkpoint has client %d in flight from model version %d, which it does not hold", fj.Client, fj.Version)
		case !(fj.Start >= 0 && fj.Start <= s.Clock && fj.Finish >= s.Clock && fj.Finish <= maxSeconds):
			return fmt.Errorf("fl: checkpoint has client %d in flight from %v to %v seconds, the clock at %v", fj.Client, fj.Start, fj.Finish, s.Clock)
		}
		j := &job{k: fj.Client, version: fj.Version, start: fj.Start, finish: fj.Finish, base: a.ref(fj.Version, w)}
		a.busy[j.k] = true
		a.idle--
		heap.Push(&a.flight, j)
	}
	e.async = a
	return nil
}

// Restore puts the engine in state s, checked against the model and
// clients: a checkpoint is a file anyone with access may have altered, and
// one that is not finite, or does not fit, is refused rather than trained on.
func (e *Engine) Restore(s State) error {
	if s.Round < 0 || s.Round > e.cfg.Rounds {
		return fmt.Errorf("fl: checkpoint after round %d of a %d-round run", s.Round, e.cfg.Rounds)
	}
	if len(s.Joined) != len(e.joined) {
		return fmt.Errorf("fl: checkpoint has %d clients, the run %d", len(s.Joined), len(e.joined))
	}
	for k, n := range s.Joined {
		if n < 0 || n > s.Round {
			return fmt.Errorf("fl: checkpoint has client %d in %d of %d rounds", k, n, s.Round)
		}
	}
	if s.Since < 0 {
		return fmt.Errorf("fl: checkpoint has %d evaluations since the best", s.Since)
	}
	if s.MinSum < 0 || s.MinSum > len(s.Joined) || s.MinAlone < -1 || s.MinAlone > s.MinSum {
		return fmt.Errorf("fl: checkpoint has rounds of at least %d uploads, %d of them alone", s.MinSum, s.MinAlone)
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
	if s.Moments != nil {
		k, n := e.opt.Moments(), len(e.specs)
		if len(s.Moments) != k*n || k == 0 {
			return fmt.Errorf("fl: checkpoint has %d tensors of server optimizer moments, %s keeps %d", len(s.Moments), e.opt, k*n)
		}
		for c := range k {
			if err := e.checkShapes(s.Moments[c*n : (c+1)*n]); err != nil {
				return err
			}
		}
	}
	if err := s.finite(); err != nil {
		return err
	}
	if err := e.checkRadii(s.Radii); err != nil {
		return err
	}
	if e.cfg.DP.on() && (!(s.Clip > 0) || math.IsInf(s.Clip, 0) || e.cfg.DP.Quantile == 0 && s.Clip != e.cfg.DP.Clip) {
		return fmt.Errorf("fl: checkpoint's clip %v does not fit the run's clip %v", s.Clip, e.cfg.DP.Clip)
	}
	if !(s.Clock >= 0) || s.Clock > maxSeconds {
		return fmt.Errorf("fl: checkpoint's clock %v s", s.Clock)
	}
	if err := e.restoreAsync(s); err != nil {
		return err
	}
	e.now = s.Clock
	e.moments = s.Moments
	e.done, e.global, e.prevUpd, e.radii, e.best = s.Round, s.Global, s.PrevUpd, s.Radii, s.Best
	e.bestAcc, e.since, e.joined, e.before = s.BestAcc, s.Since, s.Joined, time.Duration(s.Seconds*float64(time.Second))
	e.minSum, e.minAlone = s.MinSum, s.MinAlone
	if e.cfg.DP.on() {
		acct := privacy.NewAccountant(privacy.Auto)
		if err := json.Unmarshal(s.Accountant, acct); err != nil {
			return fmt.Errorf("fl: checkpoint's privacy accountant: %w", err)
		}
		e.clip, e.acct = s.Clip, acct
		if e.tree != nil {
			var ts privacy.TreeState
			if err := json.Unmarshal(s.Tree, &ts); err != nil {
				return fmt.Errorf("fl: checkpoint's DP-FTRL tree: %w", err)
			}
			tree, err := privacy.RestoreTree(ts, e.treeSrc)
			if err != nil {
				return fmt.Errorf("fl: checkpoint's DP-FTRL tree: %w", err)
			}
			if tree.Step() > s.Round || len(s.TreeLast) != e.params {
				return fmt.Errorf("fl: checkpoint's DP-FTRL tree is at step %d with %d values, the run after round %d with %d parameters", tree.Step(), len(s.TreeLast), s.Round, e.params)
			}
			e.tree, e.treeLast = tree, s.TreeLast
		}
	}
	e.start = time.Now()
	return nil
}

// acctState is the accountant's state as a State keeps it; nil without
// DP-FedAvg.
func (e *Engine) acctState() []byte {
	if e.acct == nil {
		return nil
	}
	b, err := json.Marshal(e.acct)
	if err != nil {
		panic("fl: saving the accountant: " + err.Error()) // its events are checked when composed
	}
	return b
}

// treeState is DP-FTRL's tree as a State keeps it; nil without one.
func (e *Engine) treeState() []byte {
	if e.tree == nil {
		return nil
	}
	b, err := json.Marshal(e.tree.State())
	if err != nil {
		panic("fl: saving the tree: " + err.Error()) // finite vectors of float64
	}
	return b
}

// finite reports a State that is not finite: a model, update or best model
// with a NaN or Inf, a best accuracy that is NaN or +Inf (nothing could beat
// it), or a wall time that is not a duration.
func (s State) finite() error {
	for _, m := range []struct {
		name string
		w    [][]float32
	}{{"model", s.Global}, {"last update", s.PrevUpd}, {"best model", s.Best}, {"server optimizer's moments", s.Moments}} {
		for i, t := range m.w {
			for j, v := range t {
				if math.IsNaN(float64(v)) || math.IsInf(float64(v), 0) {
					return fmt.Errorf("fl: checkpoint's %s has %v in tensor %d at %d", m.name, v, i, j)
				}
			}
		}
	}
	if math.IsNaN(s.BestAcc) || math.IsInf(s.BestAcc, 1) { // -Inf: no evaluation yet
		return fmt.Errorf("fl: checkpoint's best accuracy is %v", s.BestAcc)
	}
	if !(s.Seconds >= 0) || s.Seconds > maxSeconds {
		return fmt.Errorf("fl: checkpoint's wall time %v s", s.Seconds)
	}
	return nil
}

// maxSeconds is the longest wall time a State can carry: a time.Duration's
// range, about 292 years.
const maxSeconds = math.MaxInt64 / float64(time.Second)

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
// the new one, never half of one. It refuses a State that is not finite,
// which Restore would refuse: a run is never checkpointed in a state it
// cannot resume from.
func SaveState(path string, s State) error {
	if err := s.finite(); err != nil {
		return err
	}
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

// LoadState reads a State written by SaveState. Engine.Restore checks it.
func LoadState(path string) (State, error) {
	f, err := os.Open(path)
	if err != nil {
		return State{}, err
	}
	defer f.Close()
	s, err := readState(f)
	if err != nil {
		return s, fmt.Errorf("fl: checkpoint %s: %w", path, err)
	}
	return s, nil
}

// readState decodes a State as SaveState encodes it.
func readState(r io.Reader) (State, error) {
	var s State
	err := gob.NewDecoder(r).Decode(&s)
	return s, err
}
