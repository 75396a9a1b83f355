package attack

import (
	"context"
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
	"time"

	"gonum.org/v1/gonum/stat"

	"github.com/fedpq/fedpq/corr"
	"github.com/fedpq/fedpq/data"
	"github.com/fedpq/fedpq/mech"
	"github.com/fedpq/fedpq/model"
	"github.com/fedpq/fedpq/report"
)

// Setting is one mechanism the clients encode with, and the observer.
type Setting struct {
	Label     string // as the user wrote it, e.g. "jopeq:eps=3,rate=8"
	Mechanism string
	Config    mech.Config
	// Pair attacks the decoded mean of a pair's two messages (paired
	// mechanisms only) instead of one lone client's message.
	Pair bool
}

// ParseSetting reads NAME, NAME:EPS or NAME:KEY=V,KEY=V (keys eps, delta,
// rate, lattice, budget-bits, input-bits, shared-bits) over the defaults
// def; a "+pair" suffix on a paired mechanism's name attacks both messages
// of a pair.
func ParseSetting(s string, def mech.Config) (Setting, error) {
	name, args, _ := strings.Cut(strings.TrimSpace(s), ":")
	st := Setting{Label: strings.TrimSpace(s), Config: def}
	if base, ok := strings.CutSuffix(name, "+pair"); ok {
		name, st.Pair = base, true
	}
	st.Mechanism = name
	if _, ok := mech.Lookup(name); !ok {
		return Setting{}, fmt.Errorf("attack: %q: unknown mechanism %q (known: %s)", s, name, strings.Join(mech.Names(), ", "))
	}
	if args != "" {
		for _, kv := range strings.Split(args, ",") {
			k, v, ok := strings.Cut(kv, "=")
			if !ok {
				k, v = "eps", kv
			}
			x, err := strconv.ParseFloat(strings.TrimSpace(v), 64)
			if err != nil {
				return Setting{}, fmt.Errorf("attack: %q: %q is not a number", s, v)
			}
			switch strings.TrimSpace(k) {
			case "eps":
				st.Config.Epsilon = x
			case "delta":
				st.Config.Delta = x
			case "rate":
				st.Config.Rate = int(x)
			case "lattice":
				st.Config.Lattice = int(x)
			case "budget-bits":
				st.Config.BudgetBits = int(x)
			case "input-bits":
				st.Config.InputBits = int(x)
			case "shared-bits":
				st.Config.SharedBits = int(x)
			default:
				return Setting{}, fmt.Errorf("attack: %q: unknown key %q (eps, delta, rate, lattice, budget-bits, input-bits, shared-bits)", s, k)
			}
		}
	}
	m, err := mech.New(name, st.Config)
	if err != nil {
		return Setting{}, fmt.Errorf("attack: %q: %w", s, err)
	}
	if st.Pair && m.Coupling() != mech.Paired {
		return Setting{}, fmt.Errorf("attack: %q: +pair needs a paired mechanism (%s is not)", s, name)
	}
	return st, nil
}

// Study is a set of attacks: every setting against the same targets.
type Study struct {
	Model    *model.Model
	Weights  [][]float32 // the model the server sent (its round-1 model)
	Train    *data.Dataset
	Settings []Setting
	Method   Method
	Upload   Upload
	Batch    int // images per client upload
	Targets  int // attacked uploads per setting
	// GiveLabels tells the attacker the true labels, as JoPEQ's evaluation
	// does for iDLG.
	GiveLabels bool
	Seed       uint64
}

// Row is one setting's result over the targets: means and their standard
// errors over targets (each target's score is the mean over its images).
type Row struct {
	Setting          string  `json:"setting"`
	Mechanism        string  `json:"mechanism"`
	Epsilon          float64 `json:"epsilon"` // per parameter; 0 where the mechanism claims no LDP
	Observer         string  `json:"observer"`
	Targets          int     `json:"targets"`
	Images           int     `json:"images_per_target"`
	SSIM             float64 `json:"ssim"`
	SSIMErr          float64 `json:"ssim_se"`
	MSE              float64 `json:"mse"`
	MSEErr           float64 `json:"mse_se"`
	LabelAccuracy    float64 `json:"label_accuracy"`
	LabelAccuracyErr float64 `json:"label_accuracy_se"`
	Distance         float64 `json:"distance_median"` // the attack's final gradient distance (relative)
	Seconds          float64 `json:"seconds"`
}

// Result is a study's rows, and the true and reconstructed images of its
// targets (Recs[row][target]) for a picture.
type Result struct {
	Rows  []Row
	Truth [][]Batch // per target, the clients' batches
	Recs  [][]Reconstruction
}

// Progress is reported after each evaluation of the attack's objective.
type Progress struct {
	Setting       string
	Target, Total int     // attacks done, of Total
	Done, Most    int     // evaluations of the current attack, of at most Most
	Elapsed       float64 // seconds since Run began
}

// targets draws the study's target batches: per target, one batch per
// client of Batch examples of the training set with distinct labels (the
// setting iDLG's label inference assumes, and the attacker's best case).
func (s *Study) targets() ([][]Batch, error) {
	clients := 1
	for _, st := range s.Settings {
		if st.Pair {
			clients = 2
		}
	}
	need := clients * s.Batch
	if need > s.Train.Classes || need > 8 {
		return nil, fmt.Errorf("attack: %d images per attack (batch %d, %d clients): at most 8 and at most the %d classes", need, s.Batch, clients, s.Train.Classes)
	}
	f := s.Train.Features()
	rng := corr.Derive(corr.SeedSecret(s.Seed), "attack targets")
	out := make([][]Batch, s.Targets)
	for t := range out {
		used := map[int32]bool{}
		for range clients {
			var b Batch
			for len(b.Y) < s.Batch {
				i := int(rng.Uint64() % uint64(s.Train.Len()))
				if y := s.Train.Y[i]; !used[y] {
					used[y] = true
					b.X = append(b.X, s.Train.X[i*f:(i+1)*f]...)
					b.Y = append(b.Y, y)
				}
			}
			out[t] = append(out[t], b)
		}
	}
	return out, nil
}

// Run attacks every setting on every target and scores the
// reconstructions. Attack k on target t draws its coins (the mechanism's,
// the attack's starts) from the seed, t and k, so a study is reproducible.
func (s *Study) Run(ctx context.Context, progress func(Progress)) (*Result, error) {
	if err := s.Method.Validate(); err != nil {
		return nil, err
	}
	if err := s.Upload.Validate(); err != nil {
		return nil, err
	}
	if s.Batch < 1 || s.Targets < 1 || len(s.Settings) == 0 {
		return nil, fmt.Errorf("attack: batch %d, %d targets, %d settings: want at least 1 each", s.Batch, s.Targets, len(s.Settings))
	}
	truth, err := s.targets()
	if err != nil {
		return nil, err
	}
	res := &Result{Truth: truth}
	start := time.Now()
	total := len(s.Settings) * s.Targets
	for k, st := range s.Settings {
		mk, err := mech.New(st.Mechanism, st.Config)
		if err != nil {
			return nil, err
		}
		row := Row{Setting: st.Label, Mechanism: st.Mechanism, Observer: "message", Targets: s.Targets}
		if info, _ := mech.Lookup(st.Mechanism); info.LDP {
			row.Epsilon = st.Config.Epsilon
		}
		if st.Pair {
			row.Observer = "pair"
		}
		settingStart := time.Now()
		var ssim, mse, acc, dist []float64
		var recs []Reconstruction
		for t, batches := range truth {
			if !st.Pair {
				batches = batches[:1]
			}
			seed := corr.Derive(corr.SeedSecret(s.Seed), "attack", uint64(k), uint64(t)).Uint64()
			view, err := View(ctx, s.Model, s.Weights, mk, s.Upload, batches, seed)
			if err != nil {
				return nil, fmt.Errorf("attack: %s: %w", st.Label, err)
			}
			all := Batch{}
			for _, b := range batches {
				all.X = append(all.X, b.X...)
				all.Y = append(all.Y, b.Y...)
			}
			row.Images = len(all.Y)
			done := k*s.Targets + t
			var given []int32
			if s.GiveLabels {
				given = all.Y
			}
			rec, err := s.Method.Reconstruct(ctx, s.Model, s.Weights, view, len(all.Y), given, seed, func(d, most int) {
				if progress != nil {
					progress(Progress{Setting: st.Label, Target: done, Total: total, Done: d, Most: most, Elapsed: time.Since(start).Seconds()})
				}
			})
			if err != nil {
				return nil, fmt.Errorf("attack: %s: %w", st.Label, err)
			}
			sc, err := Score(s.Train.Shape, all, rec)
			if err != nil {
				return nil, err
			}
			// Reorder the guesses as the true images, for the picture.
			ordered := Reconstruction{Distance: rec.Distance}
			f := s.Train.Features()
			for _, j := range sc.Match {
				ordered.X = append(ordered.X, rec.X[j*f:(j+1)*f]...)
				ordered.Labels = append(ordered.Labels, rec.Labels[j])
			}
			recs = append(recs, ordered)
			ssim = append(ssim, stat.Mean(sc.SSIM, nil))
			mse = append(mse, stat.Mean(sc.MSE, nil))
			acc = append(acc, float64(sc.Correct)/float64(len(all.Y)))
			dist = append(dist, rec.Distance)
		}
		row.SSIM, row.SSIMErr = meanSE(ssim)
		row.MSE, row.MSEErr = meanSE(mse)
		row.LabelAccuracy, row.LabelAccuracyErr = meanSE(acc)
		row.Distance = median(dist)
		row.Seconds = time.Since(settingStart).Seconds()
		res.Rows = append(res.Rows, row)
		res.Recs = append(res.Recs, recs)
	}
	return res, nil
}

// PlusMinus formats a mean with its standard error to digits decimals, or
// the mean alone where one target leaves the error unknown.
func PlusMinus(mean, se float64, digits, targets int) string {
	if targets < 2 {
		return fmt.Sprintf("%.*f", digits, mean)
	}
	return fmt.Sprintf("%.*f ± %.*f", digits, mean, digits, se)
}

// meanSE is the mean and its standard error (the sample standard deviation
// over sqrt(n); 0 for one value).
func meanSE(v []float64) (float64, float64) {
	if len(v) < 2 {
		return stat.Mean(v, nil), 0
	}
	m, sd := stat.MeanStdDev(v, nil)
	return m, sd / math.Sqrt(float64(len(v)))
}

func median(v []float64) float64 {
	s := slices.Clone(v)
	slices.Sort(s)
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}

// Grid is the picture of a study: the targets' images in the first row,
// each setting's reconstructions in the same order in the rows below. A
// target takes as many columns as it has images (both clients' where a
// pair is attacked); a one-message row leaves the partner's columns blank.
func (r *Result) Grid(shape []int) report.Grid {
	g := report.Grid{Shape: shape}
	orig := report.GridRow{Label: "original"}
	per := 0
	for _, bs := range r.Truth {
		per = 0
		for _, b := range bs {
			orig.Images = append(orig.Images, split(b.X, len(b.Y))...)
			per += len(b.Y)
		}
	}
	g.Rows = append(g.Rows, orig)
	for i, row := range r.Rows {
		gr := report.GridRow{Label: fmt.Sprintf("%s  SSIM %.2f", row.Setting, row.SSIM)}
		for _, rec := range r.Recs[i] {
			imgs := split(rec.X, len(rec.Labels))
			gr.Images = append(gr.Images, imgs...)
			gr.Images = append(gr.Images, make([][]float32, per-len(imgs))...)
		}
		g.Rows = append(g.Rows, gr)
	}
	return g
}

// split cuts n examples laid end to end into one slice each.
func split(x []float32, n int) [][]float32 {
	f := len(x) / n
	out := make([][]float32, n)
	for i := range out {
		out[i] = x[i*f : (i+1)*f]
	}
	return out
}
