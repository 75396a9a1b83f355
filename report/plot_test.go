package report

import (
	"fmt"
	"image"
	"image/png"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"gonum.org/v1/plot/vg/draw"
	"gonum.org/v1/plot/vg/vgimg"
)

// twoRuns writes two finished runs, "alpha" and "beta", under a temporary
// directory and reads them back.
func twoRuns(t *testing.T) []*Run {
	t.Helper()
	var runs []*Run
	for i, name := range []string{"alpha", "beta"} {
		dir := filepath.Join(t.TempDir(), name)
		writeRun(t, dir, name, sampleRounds(20, 4, 0.5+0.1*float64(i)))
		r, err := ReadRun(dir)
		if err != nil {
			t.Fatal(err)
		}
		runs = append(runs, r)
	}
	return runs
}

func readPNG(t *testing.T, path string) image.Image {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	img, err := png.Decode(f)
	if err != nil {
		t.Fatal(err)
	}
	return img
}

func TestPlotPNG(t *testing.T) {
	path := filepath.Join(t.TempDir(), "cmp.PNG") // the extension is case-insensitive
	if err := PlotAccuracy(twoRuns(t), path, "two runs"); err != nil {
		t.Fatal(err)
	}
	img := readPNG(t, path)
	if b := img.Bounds(); b.Dx() != 1050 || b.Dy() != 675 {
		t.Errorf("PNG is %dx%d, want 1050x675 (7x4.5 in at 150 dpi)", b.Dx(), b.Dy())
	}
	// Non-trivial: the blue of the first run and the orange of the second
	// are both drawn somewhere.
	var blue, orange int
	b := img.Bounds()
	for y := b.Min.Y; y < b.Max.Y; y++ {
		for x := b.Min.X; x < b.Max.X; x++ {
			r, g, bl, _ := img.At(x, y).RGBA()
			switch {
			case r>>8 < 0x20 && g>>8 > 0x60 && g>>8 < 0x80 && bl>>8 > 0xa0:
				blue++
			case r>>8 > 0xd0 && g>>8 > 0x90 && g>>8 < 0xb0 && bl>>8 < 0x20:
				orange++
			}
		}
	}
	if blue < 200 || orange < 200 {
		t.Errorf("PNG has %d blue and %d orange pixels; want both curves drawn", blue, orange)
	}
}

func TestPlotSVG(t *testing.T) {
	path := filepath.Join(t.TempDir(), "cmp.svg")
	if err := PlotAccuracy(twoRuns(t), path, "Accuracy & rounds"); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	svg := string(b)
	for _, want := range []string{"<svg", ">alpha</text>", ">beta</text>", ">round</text>", ">test accuracy</text>", ">Accuracy &amp; rounds</text>"} {
		if !strings.Contains(svg, want) {
			t.Errorf("SVG lacks %q", want)
		}
	}
	// Markers on evaluation rounds only: 20 rounds evaluated every 4 is 5
	// markers per run; with its line and its legend's line and marker,
	// each run's colour strokes 8 paths.
	for _, c := range []string{"#0072B2", "#E69F00"} {
		if n := strings.Count(svg, "stroke:"+c+";"); n != 8 {
			t.Errorf("SVG strokes %d paths in %s, want 8", n, c)
		}
	}
}

func TestPlotErrors(t *testing.T) {
	runs := twoRuns(t)
	dir := t.TempDir()
	if err := PlotAccuracy(runs, filepath.Join(dir, "x.pdf"), ""); err == nil || !strings.Contains(err.Error(), ".png or .svg") {
		t.Errorf("pdf: %v", err)
	}
	none := &Run{Dir: "empty", Rounds: []Round{{Round: 1}, {Round: 2}}}
	if err := PlotAccuracy([]*Run{none}, filepath.Join(dir, "x.png"), ""); err == nil || !strings.Contains(err.Error(), "no run has an evaluated round") {
		t.Errorf("no accuracy: %v", err)
	}
	if _, err := os.Stat(filepath.Join(dir, "x.png")); !os.IsNotExist(err) {
		t.Errorf("a failed plot left a file: %v", err)
	}
	// A run without accuracy beside one with is left out, not an error.
	if err := PlotAccuracy([]*Run{none, runs[0]}, filepath.Join(dir, "x.svg"), ""); err != nil {
		t.Error(err)
	}
}

// TestLegendPlacement: the legend goes where it hides no curve, the
// bottom right unless a curve passes there.
func TestLegendPlacement(t *testing.T) {
	// Accuracies span [0, 1], so the curves run into the corners.
	rising, falling, flat := &Run{Dir: "rising"}, &Run{Dir: "falling"}, &Run{Dir: "flat"}
	for i := 0; i <= 10; i++ {
		rising.Rounds = append(rising.Rounds, Round{Round: i, Accuracy: ptr(0.1 * float64(i))})
		falling.Rounds = append(falling.Rounds, Round{Round: i, Accuracy: ptr(1 - 0.1*float64(i))})
		flat.Rounds = append(flat.Rounds, Round{Round: i, Accuracy: ptr(0.02)})
	}
	for _, tc := range []struct {
		runs      []*Run
		top, left bool
	}{
		{[]*Run{rising}, false, false},     // bottom left to top right: the bottom right is free
		{[]*Run{falling}, true, false},     // top left to bottom right: the top right is free
		{[]*Run{rising, flat}, true, true}, // only the top left is free
	} {
		p, curves, err := accuracyPlot(tc.runs, "")
		if err != nil {
			t.Fatal(err)
		}
		placeLegend(p, margin(draw.New(vgimg.New(plotWidth, plotHeight))), curves)
		if p.Legend.Top != tc.top || p.Legend.Left != tc.left {
			t.Errorf("%s...: legend top=%v left=%v, want top=%v left=%v",
				tc.runs[0].Dir, p.Legend.Top, p.Legend.Left, tc.top, tc.left)
		}
	}
}

func TestRunLabels(t *testing.T) {
	runs := []*Run{{Dir: "a/run"}, {Dir: "b/run/"}, {Dir: "c", Summary: &Summary{Name: "named"}}, {Dir: "d"}}
	got := strings.Join(runLabels(runs), ",")
	if want := "a/run,b/run,named,d"; got != want {
		t.Errorf("labels %s, want %s", got, want)
	}
}

func TestAccuracyRange(t *testing.T) {
	for _, tc := range []struct{ lo, hi, wantLo, wantHi float64 }{
		{0.5, 0.9, 0.46, 0.94},   // a tenth of the span each side
		{0.90, 0.91, 0.89, 0.92}, // at least 0.01
		{0.02, 1, 0, 1},          // not past [0, 1]
		{-2, 3, -2.5, 3.5},       // data outside [0, 1] (not a fraction) stay visible
	} {
		lo, hi := accuracyRange(tc.lo, tc.hi)
		if d := lo - tc.wantLo; d > 1e-12 || d < -1e-12 {
			t.Errorf("range(%g, %g) low %g, want %g", tc.lo, tc.hi, lo, tc.wantLo)
		}
		if d := hi - tc.wantHi; d > 1e-12 || d < -1e-12 {
			t.Errorf("range(%g, %g) high %g, want %g", tc.lo, tc.hi, hi, tc.wantHi)
		}
	}
}

func TestNiceTicks(t *testing.T) {
	labels := func(n niceTicks, lo, hi float64) string {
		var ls []string
		for _, tk := range n.Ticks(lo, hi) {
			if tk.Label != "" {
				ls = append(ls, tk.Label)
			}
		}
		return strings.Join(ls, " ")
	}
	for _, tc := range []struct {
		n      niceTicks
		lo, hi float64
		want   string
	}{
		{niceTicks{}, 0.518, 0.902, "0.55 0.60 0.65 0.70 0.75 0.80 0.85 0.90"},
		{niceTicks{}, 0.89, 0.92, "0.890 0.895 0.900 0.905 0.910 0.915 0.920"},
		{niceTicks{}, 0, 1, "0.0 0.2 0.4 0.6 0.8 1.0"},
		{niceTicks{integer: true}, 1, 3, "1 2 3"},
		{niceTicks{integer: true}, 1, 60, "10 20 30 40 50 60"},
	} {
		if got := labels(tc.n, tc.lo, tc.hi); got != tc.want {
			t.Errorf("ticks(%g, %g) = %q, want %q", tc.lo, tc.hi, got, tc.want)
		}
	}
}

func TestTable(t *testing.T) {
	runs := twoRuns(t)
	// A third run still in progress: no summary, accuracy at rounds 2 and 4.
	dir := filepath.Join(t.TempDir(), "gamma|x")
	w, err := Create(dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range []Round{
		{Round: 1, UplinkBitsPerParam: 2, EpsilonSpent: 1},
		{Round: 2, Accuracy: ptr(0.8), UplinkBitsPerParam: 1, EpsilonSpent: 2},
		{Round: 3, UplinkBitsPerParam: 1, EpsilonSpent: 3},
		{Round: 4, Accuracy: ptr(0.7), UplinkBitsPerParam: 1, EpsilonSpent: 4, Seconds: 9.34},
	} {
		if err := w.Round(r); err != nil {
			t.Fatal(err)
		}
	}
	inProgress, err := ReadRun(dir)
	if err != nil {
		t.Fatal(err)
	}
	got := Table(append(runs, inProgress))
	lines := strings.Split(strings.TrimSuffix(got, "\n"), "\n")
	want := []string{
		"| run | mechanism | dataset | model | rounds | final accuracy | best accuracy | uplink bits/param | eps spent | seconds |",
		"|---|---|---|---|---:|---:|---:|---:|---:|---:|",
		"| alpha | corbin | synthetic | logreg | 20 | " + f4(*runs[0].Rounds[19].Accuracy) + " | " + f4(runs[0].Summary.BestAccuracy) + " (round 20) | 1 | 10 | 5.0 |",
		"| beta | corbin | synthetic | logreg | 20 | " + f4(*runs[1].Rounds[19].Accuracy) + " | " + f4(runs[1].Summary.BestAccuracy) + " (round 20) | 1 | 10 | 5.0 |",
		`| gamma\|x (unfinished) | - | - | - | 4 | 0.7000 | 0.8000 (round 2) | 1.25 | 4 | 9.3 |`,
	}
	if len(lines) != len(want) {
		t.Fatalf("table has %d lines, want %d:\n%s", len(lines), len(want), got)
	}
	for i := range want {
		if lines[i] != want[i] {
			t.Errorf("line %d:\n got %s\nwant %s", i, lines[i], want[i])
		}
	}
	// Without privacy or evaluation, "-" rather than a misleading 0.
	bare := Table([]*Run{{Dir: "bare", Rounds: []Round{{Round: 1}}}})
	if !strings.Contains(bare, "| bare (unfinished) | - | - | - | 1 | - | - | 0 | - | 0.0 |") {
		t.Errorf("bare run:\n%s", bare)
	}
}

func f4(v float64) string { return fmt.Sprintf("%.4f", v) }
