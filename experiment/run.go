package experiment

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"time"

	"github.com/fedpq/fedpq/data"
	"github.com/fedpq/fedpq/extern"
	"github.com/fedpq/fedpq/fl"
	"github.com/fedpq/fedpq/model"
	"github.com/fedpq/fedpq/report"
)

// CheckpointFile is the engine's state after the last completed round,
// kept in the run directory so that an interrupted run can be resumed.
const CheckpointFile = "checkpoint.gob"

// Run builds the experiment c, runs it, and records it in c.Dir():
// config.yaml (c as resolved), metrics.jsonl, summary.json, the accuracy
// plots, and after every round a checkpoint. progress, if not nil, sees
// every round as it ends.
func Run(ctx context.Context, c Config, progress func(report.Round)) (*report.Summary, error) {
	return run(ctx, c, false, progress)
}

// Resume continues the run recorded in dir from its checkpoint, with the
// configuration in its config.yaml: it ends exactly as the run would have
// without the interruption.
func Resume(ctx context.Context, dir string, progress func(report.Round)) (*report.Summary, error) {
	c, err := LoadRun(dir)
	if err != nil {
		return nil, err
	}
	return run(ctx, c, true, progress)
}

// LoadRun returns the configuration of the resumable run in dir, with Out
// set to dir. Where dir is not a run directory, or holds no checkpoint, the
// error says so and what one holds, rather than which file it failed to
// open.
func LoadRun(dir string) (Config, error) {
	c := Default()
	if st, err := os.Stat(dir); err != nil || !st.IsDir() {
		return c, fmt.Errorf("resume: %s is not a directory; give the run directory of an interrupted run (runs/NAME)", dir)
	}
	cfg := filepath.Join(dir, "config.yaml")
	if _, err := os.Stat(cfg); err != nil {
		return c, fmt.Errorf("resume: %s is not a run directory: a run directory holds config.yaml, %s and %s, as fedpq run writes them (runs/NAME)",
			dir, report.MetricsFile, CheckpointFile)
	}
	if err := Load(cfg, &c); err != nil {
		return c, err
	}
	if _, err := os.Stat(filepath.Join(dir, CheckpointFile)); err != nil {
		return c, fmt.Errorf("resume: %s has no %s: the run ended before its first round did; start it again with --config %s",
			dir, CheckpointFile, cfg)
	}
	c.Out = dir
	return c, nil
}

func run(ctx context.Context, c Config, resume bool, progress func(report.Round)) (*report.Summary, error) {
	su, err := NewSetup(c)
	if err != nil {
		return nil, err
	}
	defer su.Close()
	workers := c.Workers
	if workers <= 0 {
		workers = runtime.GOMAXPROCS(0)
	}
	// A resumed run starts from its checkpoint: init_weights is not read.
	start := su.Arch()
	if !resume {
		if start, err = su.Initial(); err != nil {
			return nil, err
		}
	}
	task := fl.Task{Model: start, Data: su.Data, Clients: su.Clients, Validation: su.Validation}
	for range min(workers, len(su.Clients)) {
		tr, err := su.Worker()
		if err != nil {
			return nil, err
		}
		task.Trainers = append(task.Trainers, tr)
	}
	eng, err := fl.New(su.Engine, task)
	if err != nil {
		return nil, err
	}
	rec, err := NewRecorder(su.Config, eng, resume)
	if err != nil {
		return nil, err
	}
	if c.Mode == "async" {
		rec.every = asyncCheckpointEvery
	}
	if !resume {
		if err := rec.StartedFrom(su, start, task.Trainers[0]); err != nil {
			return nil, err
		}
	}
	err = eng.Run(ctx, func(r report.Round) error {
		if err := rec.Round(r); err != nil {
			return err
		}
		if progress != nil {
			progress(r)
		}
		return nil
	})
	if err != nil {
		rec.Fail(err)
	}
	if errors.Is(err, fl.ErrBudget) {
		err = nil // the run ends where its budget does, as it was told to
	}
	rec.SetTrainerCost(su.TrainerCost())
	s, cerr := rec.Close()
	if err == nil {
		err = cerr
	}
	return s, err
}

// Setup is what a run is built from: its data and partition, its model and
// the round engine's configuration. The simulation, the server and each
// deployed client build the same Setup from the same Config.
type Setup struct {
	Config     Config
	Engine     fl.Config
	Data       *data.Federated
	Clients    [][]int // client k's examples in Data.Train
	Validation []int   // held-out examples of Data.Train, or nil
	// Model is the run's architecture from fedpq's zoo; nil when the model
	// is an external trainer's own (model: external). Arch is the model
	// the round engine trains either way.
	Model     *model.Model
	Optimizer model.Optimizer
	// Pool is the run's external trainer processes (Config.Trainer), nil
	// on fedpq's engine; Close stops them.
	Pool  *extern.Pool
	first fl.Trainer // the pool's first trainer, which the first Worker call hands out
}

// NewSetup validates c, loads its data and partitions it. The setup's
// Config has its partition and model resolved (ResolvePartition,
// ResolveModel) and, where the clients bring their own data, its paths,
// schema, clients and max_examples (ResolveData, newOwnSetup).
func NewSetup(c Config) (*Setup, error) { return newSetup(c, data.Load) }

// newSetup is NewSetup with the shared dataset read by load (data.Load, or
// a server's data.LoadLabels).
func newSetup(c Config, load func(string, data.Options) (*data.Federated, error)) (*Setup, error) {
	c, _ = c.ResolvePartition()
	c, _, err := c.ResolveData()
	if err != nil {
		return nil, err
	}
	if err := c.Validate(); err != nil {
		return nil, err
	}
	if c, err = c.ResolveModel(); err != nil {
		return nil, err
	}
	if c.Own() {
		return newOwnSetup(c)
	}
	fed, err := load(c.Dataset, c.dataOptions())
	if err != nil {
		return nil, err
	}
	clients, val, err := partition(c, fed)
	if err != nil {
		return nil, err
	}
	return c.build(&Setup{Data: fed, Clients: clients, Validation: val}, fed.Train.Shape, fed.Train.Classes)
}

// dataOptions is how the run loads its shared dataset.
func (c Config) dataOptions() data.Options {
	return data.Options{Dir: data.Dir(c.DataDir), Clients: c.Clients, Seed: c.Seed}
}

// build completes su, whose data and clients are set, as the setup of c:
// the round engine's configuration, the local optimizer and the model for
// examples of shape and classes, with the trainers started. Every setup
// (simulation, server, deployed client) is built here.
func (c Config) build(su *Setup, shape []int, classes int) (*Setup, error) {
	ec, err := c.engineConfig()
	if err != nil {
		return nil, err
	}
	opt, err := c.optimizer()
	if err != nil {
		return nil, err
	}
	m, err := c.newModel(shape, classes)
	if err != nil {
		return nil, err
	}
	su.Config, su.Engine, su.Model, su.Optimizer = c, ec, m, opt
	if err := su.startTrainers(); err != nil {
		return nil, err
	}
	// DP-FedAvg's noise, calibrated here so that the server and every
	// client build the same mechanism from the same configuration.
	params := 0
	for _, t := range su.Arch().Tensors() {
		params += t.Size()
	}
	if err := su.Engine.PrepareDP(c.Clients, params); err != nil {
		su.Close()
		return nil, err
	}
	return su, nil
}

// Trainer returns a new trainer of the setup's zoo model and optimizer on
// fedpq's engine (Worker gives the external trainer's, where the run has
// one).
func (s *Setup) Trainer() (*model.Trainer, error) {
	if s.Model == nil {
		return nil, fmt.Errorf("model %s: the model is the external trainer's; fedpq's engine cannot train it", External)
	}
	return s.Model.NewTrainerOn(model.Engine(s.Config.Engine), s.Optimizer)
}

// Recorder keeps a run's record in its directory: config.yaml, the metrics
// and plots, the summary, and after every round the engine's checkpoint.
type Recorder struct {
	c   Config
	eng *fl.Engine
	dir string
	w   *report.Writer
	s   *report.Summary
	// every, when not 0, checkpoints only rounds that are evaluated or
	// last, and others once every has passed since the last checkpoint.
	every time.Duration
	saved time.Time
}

// asyncCheckpointEvery spaces an asynchronous simulation's checkpoints:
// its checkpoint holds the model of every client in flight (at
// concurrency 100 and cnn2, 3.8 MB, 13 ms to write), and buffers of one
// upload take milliseconds each. A resumed run runs the buffers after its
// checkpoint again, to the same models and records.
const asyncCheckpointEvery = 10 * time.Second

// NewRecorder opens c's run directory for eng. With resume, eng is first
// restored from the directory's checkpoint and the rounds recorded up to it
// are kept. config.yaml records c with its partition resolved.
func NewRecorder(c Config, eng *fl.Engine, resume bool) (*Recorder, error) {
	c, _ = c.ResolvePartition()
	dir := c.Dir()
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	y, err := c.YAML()
	if err != nil {
		return nil, err
	}
	if err := os.WriteFile(filepath.Join(dir, "config.yaml"), y, 0o644); err != nil {
		return nil, err
	}
	var past []report.Round
	if resume {
		if past, err = restore(eng, dir); err != nil {
			return nil, err
		}
	}
	w, err := report.Create(dir)
	if err != nil {
		return nil, err
	}
	rec := &Recorder{c: c, eng: eng, dir: dir, w: w, s: &report.Summary{
		Name: c.Name, Mechanism: c.Mechanism, Dataset: c.DatasetName(), Model: c.Model,
		Seed: c.Seed, BestAccuracy: -1,
	}}
	for _, r := range past {
		if err := rec.add(r); err != nil {
			return nil, err
		}
	}
	return rec, nil
}

// Round records round r and checkpoints the engine after it (spaced out,
// where every is set). A round whose
// aggregate the engine discarded is recorded all the same, with its reason
// (r.Discarded), and the checkpoint holds the model it began with.
func (rec *Recorder) Round(r report.Round) error {
	if err := rec.add(r); err != nil {
		return err
	}
	if rec.every > 0 && r.Accuracy == nil && r.Round < rec.eng.Rounds() && time.Since(rec.saved) < rec.every {
		return nil
	}
	rec.saved = time.Now()
	return fl.SaveState(filepath.Join(rec.dir, CheckpointFile), rec.eng.State())
}

func (rec *Recorder) add(r report.Round) error {
	s := rec.s
	s.Rounds = r.Round
	s.UplinkBitsTotal += r.UplinkBits
	s.SetupBytesTotal += r.SetupBytes
	s.UplinkBitsPerParam = r.UplinkBitsPerParam
	s.EpsilonPerRound, s.EpsilonSpent, s.Privacy = r.Epsilon, r.EpsilonSpent, r.Privacy
	s.Seconds = r.Seconds
	s.Clock = r.Clock
	s.Uploads += int64(r.Clients)
	s.Refused += int64(r.Refused)
	s.Withdrawn += int64(r.Withdrawn)
	s.Cut += int64(r.Cut)
	if r.Accuracy != nil {
		s.FinalAccuracy = *r.Accuracy
		if *r.Accuracy > s.BestAccuracy {
			s.BestAccuracy, s.BestRound = *r.Accuracy, r.Round
		}
	}
	return rec.w.Round(r)
}

// Fail records in the summary that the run stopped before its last round,
// how far it got and why, so that its directory says it failed.
func (rec *Recorder) Fail(err error) {
	rec.s.Error = fmt.Sprintf("stopped after round %d of %d: %v", rec.eng.Done(), rec.eng.Rounds(), err)
}

// SetTrainerCost records what the run's external trainer cost (nil: it
// has none) in the summary.
func (rec *Recorder) SetTrainerCost(c *report.TrainerCost) { rec.s.Trainer = c }

// Close writes the summary and the plots, and returns the summary.
func (rec *Recorder) Close() (*report.Summary, error) {
	_, rec.s.ClientRounds, _ = rec.eng.Ledger()
	return rec.s, rec.w.Close(*rec.s)
}

// restore puts eng in the state of dir's checkpoint and returns the rounds
// metrics.jsonl recorded up to it (later ones, if the run died between the
// two writes, are dropped: they will be run again, identically).
func restore(eng *fl.Engine, dir string) ([]report.Round, error) {
	st, err := fl.LoadState(filepath.Join(dir, CheckpointFile))
	if err != nil {
		return nil, fmt.Errorf("resume: %w", err)
	}
	if err := eng.Restore(st); err != nil {
		return nil, fmt.Errorf("resume: %w", err)
	}
	prev, err := report.ReadRun(dir)
	if err != nil {
		return nil, fmt.Errorf("resume: %w", err)
	}
	var past []report.Round
	for _, r := range prev.Rounds {
		if r.Round <= st.Round {
			past = append(past, r)
		}
	}
	if len(past) != st.Round {
		return nil, fmt.Errorf("resume: %s has %d rounds up to the checkpoint's round %d", report.MetricsFile, len(past), st.Round)
	}
	return past, nil
}

// partition gives each client its examples, after holding out the
// validation split (returned second) if there is one.
func partition(c Config, fed *data.Federated) ([][]int, []int, error) {
	kind, _, err := parsePartition(c.Partition)
	if err != nil {
		return nil, nil, err
	}
	train := fed.Train
	if kind == "natural" {
		if fed.Natural == nil {
			return nil, nil, fmt.Errorf("partition natural: %s has no clients of its own; use iid, dirichlet:ALPHA or shards:K", c.Dataset)
		}
		if c.Validation > 0 {
			return nil, nil, fmt.Errorf("validation: the natural partition leaves no examples to hold out")
		}
		return fed.Natural, nil, nil
	}
	keep, val, err := data.Split(train.Len(), c.Validation, c.Seed)
	if err != nil {
		return nil, nil, err
	}
	if c.Validation == 0 {
		val = nil
	}
	labels := make([]int32, len(keep))
	for i, k := range keep {
		labels[i] = train.Y[k]
	}
	parts, err := data.Partition(c.Partition, labels, train.Classes, c.Clients, c.Seed)
	if err != nil {
		return nil, nil, err
	}
	for _, p := range parts { // positions in keep to examples of the training set
		for i, j := range p {
			p[i] = keep[j]
		}
	}
	return parts, val, nil
}
