// Package report records and presents the results of federated training
// runs: one JSON line per round (metrics.jsonl), a summary (summary.json),
// accuracy-against-round plots (PNG and SVG) and Markdown tables.
//
// A run directory written by [Create] holds:
//
//	metrics.jsonl   one [Round] per line, appended as each round ends
//	summary.json    the [Summary], written when the run ends
//	accuracy.png    test accuracy against round
//	accuracy.svg    the same, as SVG
//
// The training command also writes config.yaml there; this package neither
// writes nor reads it.
package report

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"github.com/fedpq/fedpq/privacy"
	"io/fs"
	"math"
	"os"
	"path/filepath"
)

// File names inside a run directory.
const (
	MetricsFile = "metrics.jsonl"
	SummaryFile = "summary.json"
	PlotPNGFile = "accuracy.png"
	PlotSVGFile = "accuracy.svg"
)

// Round is one line of metrics.jsonl: what happened in one round of training.
// Accuracy and Loss are pointers because most runs evaluate only every few
// rounds: a round without evaluation has neither, which is different from an
// accuracy of zero. Accuracy is a fraction in [0, 1].
type Round struct {
	Round              int      `json:"round"`
	Accuracy           *float64 `json:"accuracy,omitempty"`     // test accuracy, on evaluation rounds only
	Loss               *float64 `json:"loss,omitempty"`         // test loss, on evaluation rounds only
	ValAccuracy        *float64 `json:"val_accuracy,omitempty"` // accuracy on the server's validation split, which patience selects on
	TrainLoss          float64  `json:"train_loss"`             // mean local training loss of the round's clients
	Clients            int      `json:"clients"`                // updates aggregated
	Dropped            int      `json:"dropped"`                // sampled clients that dropped out
	NoiseShares        int      `json:"noise_shares,omitempty"` // shares of an L2 mechanism's noise the server added for the clients the round lacked
	UplinkBits         int64    `json:"uplink_bits"`            // payload bits received this round
	UplinkBitsPerParam float64  `json:"uplink_bits_per_param"`  // payload bits per parameter per client
	SetupBytes         int64    `json:"setup_bytes"`            // bytes spent setting up shared randomness this round
	Epsilon            float64  `json:"epsilon"`                // per-parameter eps of this round (0 when no privacy)
	EpsilonSpent       float64  `json:"epsilon_spent"`          // per-parameter eps composed over rounds so far (basic composition), per client at most
	// Privacy is the ledger of the client that has taken part in the most
	// rounds, by observer (docs/privacy.md); nil when the mechanism is not LDP.
	Privacy  *privacy.Ledger `json:"privacy,omitempty"`
	Restored bool            `json:"restored,omitempty"` // the global model was reloaded from the best checkpoint (patience)
	// Discarded says why the round's aggregate was not applied (it, or the
	// model it would have made, was not finite): the model is the one the
	// round began with. Empty when the aggregate was applied.
	Discarded string `json:"discarded,omitempty"`
	// RangeRadius is each tensor's clipping radius this round, in the
	// model's order: what the range rule chose.
	RangeRadius []float64 `json:"range_radius,omitempty"`
	Seconds     float64   `json:"seconds"` // wall time since the run started
	// Clock is the virtual time, in seconds of the run's speed model, at
	// the end of the round (asynchronous: of the buffer's last upload);
	// absent without a speed model.
	Clock float64 `json:"clock,omitempty"`
	// Staleness and MaxStaleness are the mean and largest staleness of an
	// asynchronous buffer's uploads (server steps since their client
	// started); Refused the uploads refused since the last buffer, staler
	// than the run's max_staleness, before they sent anything; Withdrawn
	// (deployed) the tasks withdrawn since the last buffer, their clients
	// not Ready within the server's task timeout.
	Staleness    float64 `json:"staleness,omitempty"`
	MaxStaleness int     `json:"max_staleness,omitempty"`
	Refused      int     `json:"refused,omitempty"`
	Withdrawn    int     `json:"withdrawn,omitempty"`
	// Cut (a deployed synchronous run with over_select) is the clients
	// the round sampled and gave a task that were not among the first
	// clients_per_round to finish (or not done by the round's deadline):
	// told their work was not needed, they sent nothing and were charged
	// nothing. Clients + Dropped + Cut is the clients given a task.
	Cut int `json:"cut,omitempty"`
}

// Summary is summary.json: the outcome of a finished run, what a table of
// runs shows.
type Summary struct {
	Name               string  `json:"name"`
	Mechanism          string  `json:"mechanism"`
	Dataset            string  `json:"dataset"`
	Model              string  `json:"model"`
	Rounds             int     `json:"rounds"`
	FinalAccuracy      float64 `json:"final_accuracy"`
	BestAccuracy       float64 `json:"best_accuracy"`
	BestRound          int     `json:"best_round"`
	UplinkBitsTotal    int64   `json:"uplink_bits_total"`
	UplinkBitsPerParam float64 `json:"uplink_bits_per_param"`
	// SetupBytesTotal is everything relayed to set up shared randomness
	// and secure aggregation, over the rounds: key shares, sealed bits,
	// secure aggregation's keys, shares and reveals.
	SetupBytesTotal int64   `json:"setup_bytes_total"`
	EpsilonPerRound float64 `json:"epsilon_per_round"`
	EpsilonSpent    float64 `json:"epsilon_spent"`
	// Privacy is the final ledger of the client that took part in the most
	// rounds; ClientRounds the rounds each client took part in, from which
	// privacy.Account gives any client's.
	Privacy      *privacy.Ledger `json:"privacy,omitempty"`
	ClientRounds []int           `json:"client_rounds,omitempty"`
	Seconds      float64         `json:"seconds"`
	// Clock is the virtual time at the end of the run under a speed model
	// (report.Round.Clock); Uploads the uploads aggregated, over the
	// rounds or buffers; Refused the asynchronous uploads refused as too
	// stale; Withdrawn the tasks withdrawn past a deployed server's task
	// timeout; Cut the over-selected clients cut (Round.Cut).
	Clock     float64 `json:"clock,omitempty"`
	Uploads   int64   `json:"uploads,omitempty"`
	Refused   int64   `json:"refused,omitempty"`
	Withdrawn int64   `json:"withdrawn,omitempty"`
	Cut       int64   `json:"cut,omitempty"`
	Seed      uint64  `json:"seed"`
	// Initial is the model the run started from, where it came from a
	// file (init_weights): absent when the seed drew it, and after a resume.
	Initial *Initial `json:"initial,omitempty"`
	// Error says why the run stopped before its last round; empty when it
	// ran to the end. Its checkpoint lets it resume (fedpq run --resume).
	Error string `json:"error,omitempty"`
	// Trainer is what the run's external trainer cost, where it had one.
	Trainer *TrainerCost `json:"trainer,omitempty"`
}

// TrainerCost is where the time of an external trainer's requests went
// (package extern): Seconds is their wall time as fedpq saw it, UserSeconds
// the part the trainer spent in the user's code, and the rest, Overhead
// of it, the protocol's own cost: framing, copies, process switches.
type TrainerCost struct {
	Command      string  `json:"command"`
	Processes    int     `json:"processes"`
	Starts       int     `json:"starts"`
	StartSeconds float64 `json:"start_seconds"`
	Requests     int     `json:"requests"`
	Seconds      float64 `json:"seconds"`
	UserSeconds  float64 `json:"user_seconds"`
	Overhead     float64 `json:"overhead"` // (Seconds - UserSeconds) / UserSeconds
	BytesSent    int64   `json:"bytes_sent"`
	BytesRead    int64   `json:"bytes_received"`
	ExamplesSent int64   `json:"examples_sent"`
	DataSeconds  float64 `json:"data_seconds"` // of Seconds, sending examples (once per process and example)
}

// Initial is a run's initial model read from a file: the file, its sha256,
// and its accuracy and mean loss on the test set before the first round.
type Initial struct {
	File     string  `json:"file"`
	SHA256   string  `json:"sha256"`
	Accuracy float64 `json:"accuracy"`
	Loss     float64 `json:"loss"`
}

// Writer records a run as it happens. Each round goes to metrics.jsonl in a
// single unbuffered write, so a run that crashes or is interrupted keeps the
// history of every round it finished. A Writer is not safe for concurrent use.
type Writer struct {
	dir    string
	f      *os.File
	rounds []Round // kept for the plots drawn at Close
	closed bool
}

// Create makes dir (and its parents) if needed and starts a new
// metrics.jsonl there, replacing any earlier one: a run directory holds one
// run.
func Create(dir string) (*Writer, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("report: %w", err)
	}
	f, err := os.Create(filepath.Join(dir, MetricsFile))
	if err != nil {
		return nil, fmt.Errorf("report: %w", err)
	}
	return &Writer{dir: dir, f: f}, nil
}

// Dir returns the run directory.
func (w *Writer) Dir() string { return w.dir }

// Round appends r to metrics.jsonl. Round numbers must increase, so that a
// curve read back is a function of the round. NaN or infinite values are
// written as null (JSON cannot carry them): a diverged model is recorded,
// and does not stop the run.
func (w *Writer) Round(r Round) error {
	if w.closed {
		return errors.New("report: Round after Close")
	}
	if n := len(w.rounds); n > 0 && r.Round <= w.rounds[n-1].Round {
		return fmt.Errorf("report: round %d after round %d: round numbers must increase", r.Round, w.rounds[n-1].Round)
	}
	line, err := json.Marshal(r)
	if err != nil {
		return fmt.Errorf("report: round %d: %w", r.Round, err)
	}
	if _, err := w.f.Write(append(line, '\n')); err != nil {
		return fmt.Errorf("report: %w", err)
	}
	w.rounds = append(w.rounds, r)
	return nil
}

// Close closes metrics.jsonl and writes summary.json, then accuracy.png and
// accuracy.svg titled by the run's name. A run that never evaluated has no
// accuracy to draw, so it gets no plots (and no error). Close may be called
// once.
func (w *Writer) Close(s Summary) error {
	if w.closed {
		return errors.New("report: Close called twice")
	}
	w.closed = true
	if err := w.f.Close(); err != nil {
		return fmt.Errorf("report: %w", err)
	}
	b, err := json.MarshalIndent(s, "", "  ")
	if err != nil {
		return fmt.Errorf("report: summary: %w", err)
	}
	if err := writeFileAtomic(filepath.Join(w.dir, SummaryFile), append(b, '\n')); err != nil {
		return fmt.Errorf("report: %w", err)
	}
	run := &Run{Dir: w.dir, Rounds: w.rounds, Summary: &s}
	if len(run.accuracy()) == 0 {
		return nil
	}
	title := runTitle(s)
	for _, name := range []string{PlotPNGFile, PlotSVGFile} {
		if err := PlotAccuracy([]*Run{run}, filepath.Join(w.dir, name), title); err != nil {
			return err
		}
	}
	return nil
}

// runTitle names a single run's plot by what was trained with what.
func runTitle(s Summary) string {
	t := s.Name
	if s.Mechanism != "" && s.Dataset != "" {
		what := s.Mechanism + " on " + s.Dataset
		if s.Model != "" {
			what += " (" + s.Model + ")"
		}
		if t == "" {
			return what
		}
		t += ": " + what
	}
	return t
}

// Run is a run directory read back by [ReadRun].
type Run struct {
	Dir     string
	Rounds  []Round
	Summary *Summary // nil while the run is in progress (or if it crashed)
}

// Name labels the run in plots and tables: its summary's name, else the
// base name of its directory.
func (r *Run) Name() string {
	if r.Summary != nil && r.Summary.Name != "" {
		return r.Summary.Name
	}
	return filepath.Base(filepath.Clean(r.Dir))
}

// accuracy returns the evaluation rounds' (round, accuracy) pairs, but for
// accuracies that are not finite numbers (null in metrics.jsonl), which
// have no place on a plot.
func (r *Run) accuracy() (pts [][2]float64) {
	for _, rd := range r.Rounds {
		if a := rd.Accuracy; a != nil && !math.IsNaN(*a) && !math.IsInf(*a, 0) {
			pts = append(pts, [2]float64{float64(rd.Round), *rd.Accuracy})
		}
	}
	return pts
}

// ReadRun reads dir's metrics.jsonl and, if present, summary.json. A
// missing metrics.jsonl is an error (dir is not a run directory); a missing
// summary.json is not, since a run in progress has none yet. Errors in
// metrics.jsonl name the file and line. Unknown JSON fields are ignored, so
// that runs written by newer versions can still be read.
func ReadRun(dir string) (*Run, error) {
	path := filepath.Join(dir, MetricsFile)
	f, err := os.Open(path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("%s: not a run directory: no %s", dir, MetricsFile)
	}
	if err != nil {
		return nil, err
	}
	defer f.Close()
	run := &Run{Dir: dir}
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 0, 64<<10), 16<<20)
	for line := 1; sc.Scan(); line++ {
		b := bytes.TrimSpace(sc.Bytes())
		if len(b) == 0 {
			continue
		}
		var r Round
		if err := json.Unmarshal(b, &r); err != nil {
			return nil, fmt.Errorf("%s:%d: %w", path, line, err)
		}
		if n := len(run.Rounds); n > 0 && r.Round <= run.Rounds[n-1].Round {
			return nil, fmt.Errorf("%s:%d: round %d after round %d: round numbers must increase", path, line, r.Round, run.Rounds[n-1].Round)
		}
		run.Rounds = append(run.Rounds, r)
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	spath := filepath.Join(dir, SummaryFile)
	b, err := os.ReadFile(spath)
	if errors.Is(err, fs.ErrNotExist) {
		return run, nil
	}
	if err != nil {
		return nil, err
	}
	var s Summary
	if err := json.Unmarshal(b, &s); err != nil {
		return nil, fmt.Errorf("%s: %w", spath, err)
	}
	run.Summary = &s
	return run, nil
}

// writeFileAtomic writes data to path through a temporary file in the same
// directory and a rename, so a reader (or an image viewer reloading the
// plot) never sees half a file.
func writeFileAtomic(path string, data []byte) error {
	tmp, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".tmp*")
	if err != nil {
		return err
	}
	// CreateTemp makes the file private (0600); results are for sharing.
	merr := tmp.Chmod(0o644)
	_, werr := tmp.Write(data)
	cerr := tmp.Close()
	if err := errors.Join(merr, werr, cerr); err != nil {
		os.Remove(tmp.Name())
		return err
	}
	if err := os.Rename(tmp.Name(), path); err != nil {
		os.Remove(tmp.Name())
		return err
	}
	return nil
}
