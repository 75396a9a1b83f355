package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"

	"github.com/schollz/progressbar/v3"

	"github.com/fedpq/fedpq/attack"
	"github.com/fedpq/fedpq/data"
	"github.com/fedpq/fedpq/fl"
	"github.com/fedpq/fedpq/mech"
	"github.com/fedpq/fedpq/model"
)

func init() {
	commands["attack"] = command{
		summary: "reconstruct a client's images from what the server sees (DLG, iDLG), per mechanism",
		run:     runAttack,
	}
}

const attackDescription = `Runs a gradient-inversion attack (DLG, or iDLG which infers the labels
first) against the server's view of one client's upload: the client takes one
SGD step on a batch of --batch training images at the round-1 model (or at a
run's model, --checkpoint), encodes its gradient (or update) with each
mechanism, and the server decodes it as a round does. The attack guesses the
images whose gradient matches that view (L-BFGS or Adam over GoMLX's second
derivatives). Each mechanism is attacked on the same --targets uploads; the
table gives SSIM and MSE of the reconstructions against the true images and
the accuracy of the guessed labels, as means over targets with their standard
errors, and --png draws the originals above each mechanism's reconstructions.

A mechanism is NAME, NAME:EPS or NAME:KEY=V,... (keys eps, delta, rate,
lattice, budget-bits, input-bits, shared-bits); NAME+pair attacks the mean of
both messages of a pair of a paired mechanism (corbin, augcorbin, coq), each
client holding --batch images. Repeat --mechanism for several.

  fedpq attack --data-dir ../shared/datasets
  fedpq attack --mechanism none --mechanism laplace:eps=10 --png dlg.png
  fedpq attack --model mlp --optimizer adam --iterations 1000 --mechanism none
  fedpq attack --method dlg --batch 4 --targets 4 --format json
`

// defaultAttackMechanisms are JoPEQ's Fig. 6 settings and the one-bit
// mechanisms, with a corbin pair.
var defaultAttackMechanisms = []string{"none", "sdq:rate=8", "sdq:rate=2", "laplace:eps=10", "jopeq:eps=3,rate=8", "ldpq:eps=1", "corbin:eps=1", "corbin+pair:eps=1"}

// listFlag is a repeatable string flag.
type listFlag []string

func (l *listFlag) String() string     { return strings.Join(*l, " ") }
func (l *listFlag) Set(v string) error { *l = append(*l, v); return nil }
func (l *listFlag) Type() string       { return "string, repeatable" }

func runAttack(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlags("attack", "[flags]", attackDescription, stderr)
	var mechanisms listFlag
	var (
		dataset    = fs.String("dataset", "mnist", "mnist or fashion-mnist")
		dataDir    = fs.String("data-dir", "", "directory of the dataset files (default $FEDPQ_DATA, else ./data)")
		arch       = fs.String("model", "lenet", "architecture: "+strings.Join(model.Names(), ", ")+" (lenet is the attack papers'; L-BFGS stalls on the ReLU models at initialization: try --optimizer adam)")
		method     = fs.String("method", "idlg", "dlg (images and labels learnt together) or idlg (labels inferred first)")
		batch      = fs.Int("batch", 1, "images per client upload (1 to 8; a pair's two clients hold 2x)")
		targets    = fs.Int("targets", 8, "uploads attacked per mechanism (the standard errors are over them)")
		optimizer  = fs.String("optimizer", "lbfgs", "lbfgs (DLG's and iDLG's) or adam (projected onto [0, 1]; better on ReLU models, as Geiping et al. 2020)")
		iterations = fs.Int("iterations", 300, "optimizer iterations per start")
		starts     = fs.Int("starts", 1, "random starting guesses per attack; the best gradient match wins")
		message    = fs.String("message", "gradient", "what the client sends: gradient, or update (one SGD step of --lr)")
		lr         = fs.Float64("lr", 0.1, "the client's learning rate (update messages)")
		rangeRule  = fs.String("range", "oracle", "each tensor's clipping range: oracle (min and max of the true message) or fixed:C,R")
		checkpoint = fs.String("checkpoint", "", "attack the global model of a run's checkpoint (RUN/checkpoint.gob, after its last round) instead of the initial one; --model and --dataset must be the run's")
		give       = fs.Bool("give-labels", false, "tell the attacker the true labels (JoPEQ's evaluation gives them to iDLG)")
		seed       = fs.Uint64("seed", 1, "seed of the model, the targets and every coin (same seed, same numbers)")
		png        = fs.String("png", "", "write the originals and every mechanism's reconstructions to this PNG file")
		format     = fs.String("format", "text", "output: text or json")
		quiet      = fs.Bool("quiet", false, "no progress on stderr")
	)
	fs.Var(&mechanisms, "mechanism", "mechanism to attack, repeatable (default: "+strings.Join(defaultAttackMechanisms, " ")+")")
	if err := parse(fs, args); err != nil {
		return err
	}
	if *format != "text" && *format != "json" {
		return badValue{fmt.Errorf("--format %q: want text or json", *format)}
	}
	if *dataset != "mnist" && *dataset != "fashion-mnist" {
		return badValue{fmt.Errorf("--dataset %q: want mnist or fashion-mnist", *dataset)}
	}
	if *batch < 1 || *batch > 8 {
		return badValue{fmt.Errorf("--batch %d: want 1 to 8", *batch)}
	}
	if len(mechanisms) == 0 {
		mechanisms = defaultAttackMechanisms
	}
	var settings []attack.Setting
	for _, s := range mechanisms {
		st, err := attack.ParseSetting(s, mech.DefaultConfig())
		if err != nil {
			return badValue{err}
		}
		if st.Pair && 2**batch > 8 {
			return badValue{fmt.Errorf("--mechanism %s: a pair holds 2 x --batch = %d images, at most 8", s, 2**batch)}
		}
		settings = append(settings, st)
	}
	meth := attack.Method{Name: *method, Optimizer: *optimizer, Iterations: *iterations, Starts: *starts}
	if err := meth.Validate(); err != nil {
		return badValue{err}
	}
	up := attack.Upload{Message: *message, LR: *lr, Range: *rangeRule}
	if err := up.Validate(); err != nil {
		return badValue{err}
	}
	if *targets < 1 {
		return badValue{fmt.Errorf("--targets %d: want at least 1", *targets)}
	}
	fd, err := data.Load(*dataset, data.Options{Dir: data.Dir(*dataDir)})
	if err != nil {
		return err
	}
	m, err := model.New(*arch, fd.Train.Shape, fd.Train.Classes)
	if err != nil {
		return badValue{err}
	}
	weights := m.Init(*seed)
	if *checkpoint != "" {
		if weights, err = checkpointWeights(*checkpoint, m); err != nil {
			return err
		}
	}
	study := attack.Study{Model: m, Weights: weights, Train: fd.Train, Settings: settings,
		Method: meth, Upload: up, Batch: *batch, Targets: *targets, GiveLabels: *give, Seed: *seed}
	progress, finish := attackProgress(stderr, *quiet, *iterations)
	res, err := study.Run(ctx, progress)
	finish()
	if err != nil {
		return err
	}
	if *png != "" {
		if err := res.Grid(fd.Train.Shape).WritePNG(*png); err != nil {
			return err
		}
	}
	if *format == "json" {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		return enc.Encode(struct {
			Dataset    string       `json:"dataset"`
			Model      string       `json:"model"`
			Method     string       `json:"method"`
			Message    string       `json:"message"`
			Range      string       `json:"range"`
			Batch      int          `json:"batch"`
			Targets    int          `json:"targets"`
			Iterations int          `json:"iterations"`
			Starts     int          `json:"starts"`
			GiveLabels bool         `json:"give_labels"`
			Seed       uint64       `json:"seed"`
			Rows       []attack.Row `json:"rows"`
		}{*dataset, *arch, *method, *message, *rangeRule, *batch, *targets, *iterations, *starts, *give, *seed, res.Rows})
	}
	fmt.Fprintf(stdout, "%s on %s, %s, %d image(s) per upload, %d targets, %s messages, %s range\n",
		*method, *dataset, *arch, *batch, *targets, *message, *rangeRule)
	tw := tabwriter.NewWriter(stdout, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "MECHANISM\tOBSERVER\tEPS\tSSIM\tMSE\tLABELS\tMATCH\tSECONDS")
	for _, r := range res.Rows {
		eps := "-"
		if r.Epsilon > 0 {
			eps = fmt.Sprintf("%g", r.Epsilon)
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%.2g\t%.1f\n", r.Setting, r.Observer, eps,
			attack.PlusMinus(r.SSIM, r.SSIMErr, 3, r.Targets), attack.PlusMinus(r.MSE, r.MSEErr, 4, r.Targets),
			attack.PlusMinus(r.LabelAccuracy, r.LabelAccuracyErr, 2, r.Targets), r.Distance, r.Seconds)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	fmt.Fprintln(stdout, "SSIM 1 and MSE 0 are a perfect reconstruction; MATCH is the median final gradient distance (relative).")
	if *png != "" {
		fmt.Fprintf(stdout, "wrote %s\n", *png)
	}
	return nil
}

// attackProgress shows a bar over every evaluation of every attack with an
// ETA on a terminal, a line per attack begun with the time spent and an
// ETA otherwise (logs), or nothing.
func attackProgress(w io.Writer, quiet bool, iterations int) (func(attack.Progress), func()) {
	if quiet {
		return nil, func() {}
	}
	if !isTerminal(w) {
		last := -1
		return func(p attack.Progress) {
			if p.Target != last {
				last = p.Target
				eta := "-"
				if p.Target > 0 {
					eta = fmt.Sprintf("%.0fs", p.Elapsed/float64(p.Target)*float64(p.Total-p.Target))
				}
				fmt.Fprintf(w, "attack %d/%d  %s  elapsed %.0fs  eta %s\n", p.Target+1, p.Total, p.Setting, p.Elapsed, eta)
			}
		}, func() {}
	}
	var bar *progressbar.ProgressBar
	return func(p attack.Progress) {
			if bar == nil {
				bar = progressbar.NewOptions(p.Total*p.Most,
					progressbar.OptionSetWriter(w),
					progressbar.OptionSetPredictTime(true),
					progressbar.OptionFullWidth(),
					progressbar.OptionClearOnFinish(),
				)
			}
			bar.Describe(fmt.Sprintf("attack %d/%d %s", p.Target+1, p.Total, p.Setting))
			// An attack that ends early jumps to the next one's start.
			_ = bar.Set(min(p.Target*p.Most+p.Done, p.Total*p.Most))
		}, func() {
			if bar != nil {
				_ = bar.Finish()
			}
		}
}

// checkpointWeights reads the global model of a run's checkpoint and checks
// that it is m's.
func checkpointWeights(path string, m *model.Model) ([][]float32, error) {
	st, err := fl.LoadState(path)
	if err != nil {
		return nil, err
	}
	specs := m.Tensors()
	ok := len(st.Global) == len(specs)
	for i := 0; ok && i < len(specs); i++ {
		ok = len(st.Global[i]) == specs[i].Size()
	}
	if !ok {
		return nil, badValue{fmt.Errorf("--checkpoint %s: its model is not %s on this dataset (%d tensors); give the run's --model and --dataset", path, m.Arch(), len(st.Global))}
	}
	return st.Global, nil
}
