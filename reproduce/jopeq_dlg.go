package reproduce

import (
	"context"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"slices"

	"github.com/fedpq/fedpq/attack"
	"github.com/fedpq/fedpq/data"
	"github.com/fedpq/fedpq/experiment"
	"github.com/fedpq/fedpq/fl"
	"github.com/fedpq/fedpq/mech"
	"github.com/fedpq/fedpq/model"
	"github.com/fedpq/fedpq/report"
)

// jopeq-dlg: JoPEQ's privacy evaluation (Sec. IV-B, Figs. 4 to 6): iDLG,
// told the true labels, against one user's gradient on LeNet, raw or
// through each mechanism, scored by SSIM and MSE. The paper states its
// results in words (perfect reconstruction without privacy, none under
// Laplace at eps 10 or JoPEQ, some damage from R = 8 SDQ); the checks test
// those words on fedpq's numbers.

func init() {
	register(Experiment{
		Name:       "jopeq-dlg",
		Paper:      "JoPEQ",
		Reproduces: "Sec. IV-B, Figs. 4-6: iDLG reconstructions of one user's gradient, raw and through SDQ, Laplace and JoPEQ",
		What:       "iDLG (true labels given, L-BFGS) on LeNet at initialization, one MNIST image per gradient: SSIM and MSE for no mechanism, SDQ at 16, 8 and 2 bits, Laplace at eps 10, JoPEQ (jopeq-compat and fedpq's eps-LDP jopeq) at 8 bits; full mode adds Fig. 5's sweep of eps and Fig. 4's attack on LeNet after 2, 4 and 8 rounds of federated training",
		QuickTime:  "10 s",
		FullTime:   "9 min",
		run:        runJoPEQDLG,
	})
}

// DLGRow is one mechanism's attack result in jopeq-dlg.
type DLGRow struct {
	Figure string `json:"figure"`
	// Round and Accuracy are the training rounds the attacked model had
	// and its test accuracy (Fig. 4 only; round 0 is the initial model).
	Round    int     `json:"round,omitempty"`
	Accuracy float64 `json:"test_accuracy,omitempty"`
	attack.Row
	// Error is why the mechanism cannot run at this setting, if it cannot.
	Error string `json:"error,omitempty"`
}

// jopeqDLGSettings are Fig. 6's panels (and Fig. 4's JoPEQ at eps 3).
var jopeqDLGSettings = []string{"none", "sdq:rate=16", "sdq:rate=8", "sdq:rate=2", "laplace:eps=10",
	"jopeq-compat:eps=10,rate=8", "jopeq-compat:eps=3,rate=8", "jopeq:eps=10,rate=8", "jopeq:eps=3,rate=8"}

// jopeqDLGSweep is Fig. 5's sweep: MSE against 2/eps for Laplace and JoPEQ
// at several rates (full mode only).
func jopeqDLGSweep() []string {
	var s []string
	for _, eps := range []float64{1, 3, 10, 30, 100} {
		s = append(s, fmt.Sprintf("laplace:eps=%g", eps), fmt.Sprintf("jopeq-compat:eps=%g,rate=4", eps), fmt.Sprintf("jopeq-compat:eps=%g,rate=8", eps))
	}
	return s
}

func runJoPEQDLG(ctx context.Context, o Options) (*Result, error) {
	fd, err := data.Load("mnist", data.Options{Dir: o.DataDir, Offline: true})
	if err != nil {
		return nil, err
	}
	m, err := model.New("lenet", fd.Train.Shape, fd.Train.Classes)
	if err != nil {
		return nil, err
	}
	targets := 10
	st := dlgStudy{ctx: ctx, o: o, m: m, train: fd.Train, iterations: 300}
	names := jopeqDLGSettings
	if o.Quick {
		targets, st.iterations = 1, 100
		names = []string{"none", "sdq:rate=16", "sdq:rate=2", "laplace:eps=10", "jopeq-compat:eps=3,rate=8"}
	}
	init := m.Init(o.seed())
	rows, err := st.fig6(names, targets, init)
	if err != nil {
		return nil, err
	}
	var epochs []dlgEpoch
	table := rows.fig6Table()
	if !o.Quick {
		sweep, err := st.fig5(init)
		if err != nil {
			return nil, err
		}
		var trained dlgRows
		if epochs, trained, err = st.fig4(init); err != nil {
			return nil, err
		}
		rows = append(append(rows, sweep...), trained...)
		table += rows.fig5Table() + rows.fig4Table(epochs)
	}
	checks := rows.fig6Checks()
	if !o.Quick {
		checks = append(checks, rows.fullChecks(epochs)...)
	}
	return &Result{
		Settings: fmt.Sprintf("MNIST training images, one per gradient (distinct targets drawn by the seed), %d targets per mechanism; LeNet (DLG's: three 5x5 sigmoid convolutions of 12 channels, fc) at its seed-%d initialization; "+
			"the user sends the gradient of one image; each tensor's range is the min and max of the true gradient (oracle: nothing clipped); the server decodes it alone; "+
			"iDLG told the true label, as the paper does; L-BFGS, %d iterations, one start. fedpq attack runs the same attack on any mechanism.", targets, o.seed(), st.iterations),
		Table:  table,
		Checks: checks,
		Notes:  jopeqDLGNotes,
		Rows:   []DLGRow(rows),
	}, nil
}

// dlgStudy runs iDLG, told the true labels, against gradients of m on
// images of train.
type dlgStudy struct {
	ctx        context.Context
	o          Options
	m          *model.Model
	train      *data.Dataset
	iterations int
}

// run attacks targets images through each of the settings names, on the
// model with weights.
func (s dlgStudy) run(names []string, targets int, weights [][]float32) (*attack.Result, error) {
	var settings []attack.Setting
	for _, n := range names {
		set, err := attack.ParseSetting(n, mech.DefaultConfig())
		if err != nil {
			return nil, err
		}
		settings = append(settings, set)
	}
	st := attack.Study{Model: s.m, Weights: weights, Train: s.train, Settings: settings,
		Method: attack.Method{Name: "idlg", Optimizer: "lbfgs", Iterations: s.iterations, Starts: 1},
		Upload: attack.Upload{Message: "gradient", Range: "oracle"}, Batch: 1, Targets: targets,
		GiveLabels: true, Seed: s.o.seed()}
	last := -1
	return st.Run(s.ctx, func(p attack.Progress) {
		if p.Target != last {
			last = p.Target
			s.o.progress("jopeq-dlg: attack %d/%d, %s (%.0f s)", p.Target+1, p.Total, p.Setting, p.Elapsed)
		}
	})
}

// fig6 attacks the initial model through each of names, and writes the
// reconstructions' PNG in the output directory, if there is one.
func (s dlgStudy) fig6(names []string, targets int, init [][]float32) (dlgRows, error) {
	res, err := s.run(names, targets, init)
	if err != nil {
		return nil, err
	}
	var rows dlgRows
	for _, r := range res.Rows {
		rows = append(rows, DLGRow{Figure: "6", Row: r})
	}
	if s.o.Out != "" {
		if err := os.MkdirAll(s.o.Out, 0o755); err != nil {
			return nil, err
		}
		if err := res.Grid(s.train.Shape).WritePNG(filepath.Join(s.o.Out, "jopeq-dlg.png")); err != nil {
			return nil, err
		}
	}
	return rows, nil
}

// fig5 attacks the initial model through Fig. 5's sweep. jopeq-compat
// refuses a rate whose dither alone exceeds the noise the eps asks for:
// there SDQ's distortion is all the privacy (the paper's saturated R = 4
// curve), and the row says so.
func (s dlgStudy) fig5(init [][]float32) (dlgRows, error) {
	var rows dlgRows
	var runnable []string
	for _, n := range jopeqDLGSweep() {
		if _, err := attack.ParseSetting(n, mech.DefaultConfig()); err != nil {
			rows = append(rows, DLGRow{Figure: "5", Row: attack.Row{Setting: n}, Error: err.Error()})
			continue
		}
		runnable = append(runnable, n)
	}
	sweep, err := s.run(runnable, 5, init)
	if err != nil {
		return nil, err
	}
	for _, r := range sweep.Rows {
		rows = append(rows, DLGRow{Figure: "5", Row: r})
	}
	return rows, nil
}

// fig4 attacks the model as training goes on: the initial model and the
// models of trainedModels.
func (s dlgStudy) fig4(init [][]float32) ([]dlgEpoch, dlgRows, error) {
	epochs, err := trainedModels(s.ctx, s.o, init)
	if err != nil {
		return nil, nil, err
	}
	var rows dlgRows
	for i := range epochs {
		e := &epochs[i]
		r, err := s.run([]string{"none", "jopeq-compat:eps=3,rate=8"}, 5, e.weights)
		if err != nil {
			return nil, nil, err
		}
		for _, row := range r.Rows {
			rows = append(rows, DLGRow{Figure: "4", Round: e.round, Accuracy: e.accuracy, Row: row})
		}
	}
	return epochs, rows, nil
}

// dlgRows are jopeq-dlg's rows.
type dlgRows []DLGRow

// get is the row of setting in figure fig, or nil.
func (rows dlgRows) get(fig, setting string) *attack.Row {
	for i := range rows {
		if rows[i].Figure == fig && rows[i].Setting == setting {
			return &rows[i].Row
		}
	}
	return nil
}

// ssim is the mean SSIM of setting in Fig. 6, -2 where it did not run.
func (rows dlgRows) ssim(setting string) float64 {
	if r := rows.get("6", setting); r != nil {
		return r.SSIM
	}
	return -2
}

// fig4 is the Fig. 4 row of setting after round.
func (rows dlgRows) fig4(round int, setting string) attack.Row {
	for _, r := range rows {
		if r.Figure == "4" && r.Round == round && r.Setting == setting {
			return r.Row
		}
	}
	return attack.Row{}
}

// jopeqDLGPaper is what the paper's text says of each Fig. 6 panel.
var jopeqDLGPaper = map[string]string{
	"none":                       "perfect reconstruction (Fig. 6)",
	"sdq:rate=16":                "refined quantization: no defence (Fig. 6)",
	"sdq:rate=8":                 "damaged up to some extent (Fig. 6)",
	"sdq:rate=2":                 "crude quantization: degraded (Fig. 6)",
	"laplace:eps=10":             "fails (Fig. 6)",
	"jopeq-compat:eps=10,rate=8": "demolished, as Laplace (Fig. 6)",
	"jopeq-compat:eps=3,rate=8":  "SSIM approaches zero in every epoch (Fig. 4)",
}

// fig6Table is Fig. 6's table: each setting beside the paper's words.
func (rows dlgRows) fig6Table() string {
	t := newTable("mechanism", ">eps", ">SSIM", ">MSE", ">match", "the paper (in words)")
	for _, r := range rows {
		if r.Figure != "6" {
			continue
		}
		eps := "-"
		if r.Epsilon > 0 {
			eps = fmt.Sprintf("%g", r.Epsilon)
		}
		t.add(r.Setting, eps, attack.PlusMinus(r.SSIM, r.SSIMErr, 3, r.Targets), attack.PlusMinus(r.MSE, r.MSEErr, 4, r.Targets),
			fmt.Sprintf("%.2g", r.Distance), jopeqDLGPaper[r.Setting])
	}
	return "Reconstructions of single MNIST images (SSIM 1 and MSE 0 are perfect; mean ± standard error over targets; match is the median final relative gradient distance):\n\n" + t.String()
}

// fig5Table is Fig. 5's MSE against 2/eps, for each eps of the sweep.
func (rows dlgRows) fig5Table() string {
	st := newTable("eps", ">2/eps", ">MSE laplace", ">MSE jopeq-compat R=4", ">MSE jopeq-compat R=8")
	for _, eps := range []float64{1, 3, 10, 30, 100} {
		cell := func(s string) string {
			if r := rows.get("5", s); r != nil && r.Targets > 0 {
				return attack.PlusMinus(r.MSE, r.MSEErr, 4, r.Targets)
			}
			return "n/a (the dither alone exceeds the noise)"
		}
		st.add(fmt.Sprintf("%g", eps), fmt.Sprintf("%.3g", 2/eps), cell(fmt.Sprintf("laplace:eps=%g", eps)),
			cell(fmt.Sprintf("jopeq-compat:eps=%g,rate=4", eps)), cell(fmt.Sprintf("jopeq-compat:eps=%g,rate=8", eps)))
	}
	return "\nFig. 5: reconstruction MSE against 2/eps (5 targets each; the paper gives the figure only):\n\n" + st.String()
}

// fig4Table is Fig. 4's SSIM of each attacked model, by round.
func (rows dlgRows) fig4Table(epochs []dlgEpoch) string {
	ft := newTable(">round", ">test accuracy", ">SSIM, no mechanism", ">SSIM, jopeq-compat eps 3, R = 8")
	for _, e := range epochs {
		cells := []string{fmt.Sprint(e.round), "-"}
		if e.round > 0 {
			cells[1] = percent(e.accuracy)
		}
		for _, r := range rows {
			if r.Figure == "4" && r.Round == e.round {
				cells = append(cells, attack.PlusMinus(r.SSIM, r.SSIMErr, 3, r.Targets))
			}
		}
		ft.add(cells...)
	}
	return "\nFig. 4: the attack on the model as federated training goes on (LeNet trained without a mechanism, 10 users; 5 targets per cell):\n\n" + ft.String()
}

// fig6Checks test the paper's words on Fig. 6's settings of both modes.
func (rows dlgRows) fig6Checks() []Check {
	return []Check{
		check("Fig. 6: without a mechanism iDLG reconstructs the images (mean SSIM at least 0.9)", rows.ssim("none") >= 0.9, "SSIM %.3f", rows.ssim("none")),
		check("Fig. 6: refined quantization holds no defence (SDQ at 16 bits: SSIM at least 0.9)", rows.ssim("sdq:rate=16") >= 0.9, "SSIM %.3f", rows.ssim("sdq:rate=16")),
		check("Fig. 6: crude quantization degrades the reconstruction (SDQ at 2 bits: SSIM below half of 16 bits')", rows.ssim("sdq:rate=2") < rows.ssim("sdq:rate=16")/2,
			"SSIM %.3f against %.3f", rows.ssim("sdq:rate=2"), rows.ssim("sdq:rate=16")),
		check("Fig. 6: iDLG fails under Laplace at eps 10 (SSIM below 0.2)", rows.ssim("laplace:eps=10") < 0.2, "SSIM %.3f", rows.ssim("laplace:eps=10")),
		check("Fig. 4, initial model: JoPEQ at eps 3, R = 8 keeps SSIM near zero (below 0.1)", rows.ssim("jopeq-compat:eps=3,rate=8") < 0.1, "SSIM %.3f", rows.ssim("jopeq-compat:eps=3,rate=8")),
	}
}

// fullChecks test the words on the settings of full mode only: Fig. 6's
// SDQ and JoPEQ at 8 bits, Fig. 4's training and Fig. 5's sweep.
func (rows dlgRows) fullChecks(epochs []dlgEpoch) []Check {
	r8, r16 := rows.ssim("sdq:rate=8"), rows.ssim("sdq:rate=16")
	checks := []Check{
		check("Fig. 6: SDQ at 8 bits damages the reconstruction only to some extent (SSIM below 16 bits' and above 2 bits')", r8 < r16 && r8 > rows.ssim("sdq:rate=2"),
			"SSIM %.3f, between %.3f and %.3f", r8, rows.ssim("sdq:rate=2"), r16),
		check("Fig. 6: JoPEQ at 8 bits demolishes the attack as Laplace does (eps 10: SSIM below 0.2)", rows.ssim("jopeq-compat:eps=10,rate=8") < 0.2,
			"SSIM %.3f, Laplace %.3f", rows.ssim("jopeq-compat:eps=10,rate=8"), rows.ssim("laplace:eps=10")),
	}
	first, last := rows.fig4(epochs[0].round, "none"), rows.fig4(epochs[len(epochs)-1].round, "none")
	checks = append(checks, check("Fig. 4, over training: vanilla DLG struggles more as training progresses (SSIM at the last round below the initial model's by more than 2 standard errors)",
		first.SSIM-last.SSIM > 2*math.Hypot(first.SSIMErr, last.SSIMErr), "SSIM %.3f ± %.3f at round %d, %.3f ± %.3f at round %d",
		first.SSIM, first.SSIMErr, epochs[0].round, last.SSIM, last.SSIMErr, epochs[len(epochs)-1].round))
	worst, at := -1.0, 0
	for _, e := range epochs {
		if r := rows.fig4(e.round, "jopeq-compat:eps=3,rate=8"); r.SSIM > worst {
			worst, at = r.SSIM, e.round
		}
	}
	checks = append(checks, check("Fig. 4, over training: JoPEQ (eps 3, R = 8) keeps SSIM near zero in every epoch (below 0.1 at every round)", worst < 0.1,
		"largest SSIM %.3f, at round %d", worst, at))
	// The loosest eps at which jopeq-compat runs at R = 4.
	for _, eps := range []float64{100, 30, 10, 3, 1} {
		lap, j4 := rows.get("5", fmt.Sprintf("laplace:eps=%g", eps)), rows.get("5", fmt.Sprintf("jopeq-compat:eps=%g,rate=4", eps))
		if lap == nil || j4 == nil || j4.Targets == 0 {
			continue
		}
		se := math.Hypot(j4.MSEErr, lap.MSEErr)
		checks = append(checks, check(fmt.Sprintf("Fig. 5: at loose privacy (eps %g, the largest R = 4 runs at) JoPEQ with R = 4 protects better than Laplace (MSE higher by more than 2 standard errors of the difference)", eps),
			j4.MSE-lap.MSE > 2*se, "MSE %.4f against %.4f, difference %.4f ± %.4f", j4.MSE, lap.MSE, j4.MSE-lap.MSE, se))
		break
	}
	return checks
}

// jopeqDLGNotes are jopeq-dlg's gaps between the paper's setting and this.
var jopeqDLGNotes = []string{
	"The paper attacks CIFAR-10 (its first 70 images) on LeNet; CIFAR-10 is not available here, so this runs on MNIST with the same LeNet on 28 x 28 x 1 inputs, with fewer targets.",
	"The paper's Figs. 4-6 are figures; their values are not in the text. The table's right column quotes what the text says of each panel; the checks turn those words into thresholds stated in each check.",
	"Fig. 4 follows the attack over 30 training epochs of CIFAR-10; here (full mode only) LeNet is trained on MNIST by fedpq run's engine (10 users, IID, one local epoch of batch 32 per round, Adam at 0.003, no mechanism; 8 rounds reach about 96%) and attacked after rounds 2, 4 and 8, beside the initial model. The other figures attack the initial model only.",
	"\"jopeq-compat\" is JoPEQ as its authors' code runs it (not formally eps-LDP: docs/jopeq.md); \"jopeq\" is fedpq's eps-LDP variant, shown beside it. SDQ and JoPEQ quantize each tensor in its own range here; the paper normalizes the whole update by 1/(3 RMS).",
	"The rate of Fig. 6's refined SDQ is not stated in the text; 16 bits stands in for it.",
	"The PNG written beside the table (jopeq-dlg.png) shows the originals and every mechanism's reconstructions (Fig. 6's layout).",
}

// dlgEpoch is a model attacked in Fig. 4: its weights after round rounds
// of training, and its test accuracy then.
type dlgEpoch struct {
	round    int
	accuracy float64
	weights  [][]float32
}

// fig4Rounds are the rounds after which Fig. 4 attacks the model.
var fig4Rounds = []int{2, 4, 8}

// trainedModels trains LeNet on MNIST without a mechanism for the last of
// fig4Rounds and returns the initial model and the model after each of
// fig4Rounds, read from the run's checkpoint as each round ends.
func trainedModels(ctx context.Context, o Options, init [][]float32) ([]dlgEpoch, error) {
	c := experiment.Default()
	c.Dataset, c.DataDir, c.Model, c.Mechanism = "mnist", o.DataDir, "lenet", "none"
	c.Clients, c.Rounds, c.Epochs, c.Batch = 10, fig4Rounds[len(fig4Rounds)-1], 1, 32
	c.Optimizer, c.LR, c.Seed, c.Name = "adam", 0.003, o.seed(), "lenet-training"
	dir, err := os.MkdirTemp("", "fedpq-jopeq-dlg-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(dir)
	c.Out = dir
	out := []dlgEpoch{{weights: init}}
	var snapErr error
	_, err = experiment.Run(ctx, c, func(r report.Round) {
		if !slices.Contains(fig4Rounds, r.Round) || snapErr != nil {
			return
		}
		// The round's checkpoint is written before progress sees it.
		st, err := fl.LoadState(filepath.Join(dir, experiment.CheckpointFile))
		if err != nil {
			snapErr = err
			return
		}
		e := dlgEpoch{round: r.Round, weights: st.Global}
		if r.Accuracy != nil {
			e.accuracy = *r.Accuracy
		}
		out = append(out, e)
		o.progress("jopeq-dlg: trained LeNet for %d rounds, test accuracy %.2f%%", r.Round, 100*e.accuracy)
	})
	if err == nil {
		err = snapErr
	}
	return out, err
}
