package reproduce

import (
	"context"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/fedpq/fedpq/experiment"
)

// The papers' training experiments. Each is a grid of fedpq run
// configurations (cells), one experiment.Run per cell and seed, tabulated
// as final test accuracy beside the paper's number where the paper's text
// has one. Every run keeps its run directory under <Out>/<name>/, so
// fedpq plot can draw the curves and fedpq run --config can repeat a cell.

// TrainRow is one cell of a training experiment: one configuration, run
// once per seed.
type TrainRow struct {
	Row       string  `json:"row"`
	Col       string  `json:"col"`
	Mechanism string  `json:"mechanism"`
	Model     string  `json:"model"`
	Epsilon   float64 `json:"epsilon"`
	// Accuracy is the final test accuracy of each seed's run; Mean and SD
	// are over the seeds (SD is 0 for one seed).
	Accuracy []float64 `json:"accuracy"`
	Mean     float64   `json:"mean_accuracy"`
	SD       float64   `json:"sd_accuracy"`
	// Paper is the paper's accuracy for this cell, if its text gives one.
	Paper        *float64 `json:"paper_accuracy,omitempty"`
	BitsPerParam float64  `json:"bits_per_param"`
	Seconds      float64  `json:"seconds"`
	// Dirs are the run directories, one per seed (none when Options.Out is
	// "": the runs then go to a temporary directory that is removed).
	Dirs []string `json:"run_dirs,omitempty"`
}

// cell is one configuration of a training experiment.
type cell struct {
	row, col string
	paper    float64 // the paper's accuracy, or NaN
	cfg      experiment.Config
}

// trainSpec describes a training experiment; each function gets o.Quick.
type trainSpec struct {
	cells func(quick bool) []cell
	// seeds is the number of runs per cell in full mode (0 means 1);
	// quick mode runs one.
	seeds    int
	settings func(quick bool) string
	// checks tests the paper's claims on the measured cells.
	checks func(t trainTable) []Check
	notes  []string
}

// trainTable looks cells up by row and column.
type trainTable []TrainRow

func (t trainTable) get(row, col string) (TrainRow, bool) {
	for _, r := range t {
		if r.Row == row && r.Col == col {
			return r, true
		}
	}
	return TrainRow{}, false
}

// acc is the mean accuracy of a cell, NaN if it did not run.
func (t trainTable) acc(row, col string) float64 {
	r, ok := t.get(row, col)
	if !ok {
		return math.NaN()
	}
	return r.Mean
}

func (s trainSpec) run(ctx context.Context, o Options, name string) (*Result, error) {
	cells := s.cells(o.Quick)
	seeds := max(s.seeds, 1)
	if o.Quick {
		seeds = 1
	}
	root := ""
	if o.Out != "" {
		root = filepath.Join(o.Out, name)
	} else {
		tmp, err := os.MkdirTemp("", "fedpq-reproduce-")
		if err != nil {
			return nil, err
		}
		defer os.RemoveAll(tmp)
		root = tmp
	}
	rows := make(trainTable, len(cells))
	done, total := 0, len(cells)*seeds
	for i, c := range cells {
		r := TrainRow{Row: c.row, Col: c.col, Mechanism: c.cfg.Mechanism, Model: c.cfg.Model, Epsilon: c.cfg.Epsilon}
		if !math.IsNaN(c.paper) {
			p := c.paper
			r.Paper = &p
		}
		start := time.Now()
		for k := range seeds {
			cfg := c.cfg
			cfg.DataDir = o.DataDir
			cfg.Seed = o.seed() + uint64(k)
			cfg.Name = slug(c.row + " " + c.col)
			if seeds > 1 {
				cfg.Name += fmt.Sprintf("_seed%d", cfg.Seed)
			}
			cfg.Out = filepath.Join(root, cfg.Name)
			sum, err := experiment.Run(ctx, cfg, nil)
			if err != nil {
				return nil, fmt.Errorf("%s, %s: %w", c.row, c.col, err)
			}
			r.Accuracy = append(r.Accuracy, sum.FinalAccuracy)
			r.BitsPerParam = sum.UplinkBitsPerParam
			if o.Out != "" {
				r.Dirs = append(r.Dirs, cfg.Out)
			}
			done++
			o.progress("%s [%d/%d] %s, %s, seed %d: final accuracy %.2f%% (%.1f s)",
				name, done, total, c.row, c.col, cfg.Seed, 100*sum.FinalAccuracy, sum.Seconds)
		}
		r.Seconds = math.Round(time.Since(start).Seconds()*10) / 10
		r.Mean, r.SD = meanSD(r.Accuracy)
		rows[i] = r
	}
	res := &Result{
		Settings: s.settings(o.Quick),
		Table:    rows.markdown(seeds),
		Notes:    s.notes,
		Rows:     []TrainRow(rows),
	}
	res.Checks = s.checks(rows)
	if o.Quick {
		res.Notes = append([]string{"Quick mode trains far less than the paper (see the settings): the numbers show that the experiment runs end to end, not the paper's accuracies, and its claims are not expected to hold."}, res.Notes...)
	}
	return res, nil
}

// markdown lays the cells out by row and column: for each row a line of
// the paper's numbers (if it has any) and a line of fedpq's.
func (t trainTable) markdown(seeds int) string {
	var rowNames, colNames []string
	for _, r := range t {
		if !slices.Contains(rowNames, r.Row) {
			rowNames = append(rowNames, r.Row)
		}
		if !slices.Contains(colNames, r.Col) {
			colNames = append(colNames, r.Col)
		}
	}
	head := []string{""}
	for _, c := range colNames {
		head = append(head, ">"+c)
	}
	tb := newTable(head...)
	what := "fedpq"
	if seeds > 1 {
		what = fmt.Sprintf("fedpq (mean ± sd, %d seeds)", seeds)
	}
	for _, rn := range rowNames {
		paper, ours := []string{rn + ", paper"}, []string{rn + ", " + what}
		hasPaper := false
		for _, cn := range colNames {
			r, ok := t.get(rn, cn)
			switch {
			case !ok:
				paper, ours = append(paper, ""), append(ours, "")
				continue
			case r.Paper != nil:
				hasPaper = true
				paper = append(paper, percent(*r.Paper))
			default:
				paper = append(paper, "")
			}
			if seeds > 1 {
				ours = append(ours, fmt.Sprintf("%s ± %.2f", percent(r.Mean), 100*r.SD))
			} else {
				ours = append(ours, percent(r.Mean))
			}
		}
		if hasPaper {
			tb.add(paper...)
		}
		tb.add(ours...)
	}
	// The uplink, by mechanism, in the order the mechanisms first appear;
	// a range where the headers weigh differently on different models.
	var mechs []string
	lo, hi := map[string]float64{}, map[string]float64{}
	for _, r := range t {
		if _, ok := lo[r.Mechanism]; !ok {
			mechs = append(mechs, r.Mechanism)
			lo[r.Mechanism], hi[r.Mechanism] = r.BitsPerParam, r.BitsPerParam
		}
		lo[r.Mechanism] = math.Min(lo[r.Mechanism], r.BitsPerParam)
		hi[r.Mechanism] = math.Max(hi[r.Mechanism], r.BitsPerParam)
	}
	var up []string
	for _, m := range mechs {
		b := fmt.Sprintf("%.4g", lo[m])
		if hi[m] != lo[m] {
			b += fmt.Sprintf(" to %.4g", hi[m])
		}
		up = append(up, m+" "+b)
	}
	return "Final test accuracy:\n\n" + tb.String() +
		"\nUplink bits per parameter per client (headers included): " + strings.Join(up, ", ") + ".\n"
}

// clientsPerRound says how many clients a round samples.
func clientsPerRound(c experiment.Config) string {
	if c.ClientsPerRound == 0 || c.ClientsPerRound == c.Clients {
		return "all"
	}
	return fmt.Sprintf("%d", c.ClientsPerRound)
}

func percent(v float64) string { return fmt.Sprintf("%.2f%%", 100*v) }

// slug makes a label a directory name: letters, digits, '.', '-' and '_'.
func slug(s string) string {
	var b strings.Builder
	for _, r := range strings.ToLower(s) {
		switch {
		case r >= 'a' && r <= 'z', r >= '0' && r <= '9', r == '.', r == '-':
			b.WriteRune(r)
		case r == '+':
			b.WriteString("-")
		default:
			if s := b.String(); len(s) > 0 && s[len(s)-1] != '_' {
				b.WriteByte('_')
			}
		}
	}
	return strings.Trim(b.String(), "_")
}

// meanSD is the mean and the sample standard deviation (0 for one value).
func meanSD(xs []float64) (mean, sd float64) {
	mean, se := meanStderr(xs)
	if len(xs) < 2 {
		return mean, 0
	}
	return mean, se * math.Sqrt(float64(len(xs)))
}

// diff is the difference of two cells' mean accuracies in points, with its
// standard error over the seeds when there are several ("+0.49 ± 0.34").
func (t trainTable) diff(rowA, colA, rowB, colB string) string {
	a, okA := t.get(rowA, colA)
	b, okB := t.get(rowB, colB)
	if !okA || !okB {
		return "-"
	}
	d := fmt.Sprintf("%+.2f", 100*(a.Mean-b.Mean))
	if len(a.Accuracy) > 1 && len(b.Accuracy) > 1 {
		se := math.Hypot(a.SD/math.Sqrt(float64(len(a.Accuracy))), b.SD/math.Sqrt(float64(len(b.Accuracy))))
		d += fmt.Sprintf(" ± %.2f", 100*se)
	}
	return d
}

// check builds a Check from a condition and its detail.
func check(claim string, holds bool, detail string, args ...any) Check {
	return Check{Claim: claim, Holds: holds, Detail: fmt.Sprintf(detail, args...)}
}

// pts formats an accuracy in percentage points.
func pts(v float64) string { return fmt.Sprintf("%.2f", 100*v) }
