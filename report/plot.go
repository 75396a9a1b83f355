package report

import (
	"bytes"
	"errors"
	"fmt"
	"image/color"
	"io"
	"math"
	"path/filepath"
	"strconv"
	"strings"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/plotutil"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
	"gonum.org/v1/plot/vg/vgimg"
	"gonum.org/v1/plot/vg/vgsvg"
)

// Figure size and PNG resolution: 7 x 4.5 inches at 150 dpi is 1050 x 675
// pixels, large enough to read in a README and small enough to commit.
const (
	plotWidth  = 7 * vg.Inch
	plotHeight = 4.5 * vg.Inch
	plotDPI    = 150
)

// palette is the Okabe-Ito set without its yellow (invisible on white):
// distinguishable by readers with the common forms of colour blindness.
// Runs beyond its length repeat colours, but with a different marker.
var palette = []color.Color{
	color.RGBA{0x00, 0x72, 0xb2, 0xff}, // blue
	color.RGBA{0xe6, 0x9f, 0x00, 0xff}, // orange
	color.RGBA{0x00, 0x9e, 0x73, 0xff}, // bluish green
	color.RGBA{0xd5, 0x5e, 0x00, 0xff}, // vermillion
	color.RGBA{0xcc, 0x79, 0xa7, 0xff}, // reddish purple
	color.RGBA{0x56, 0xb4, 0xe9, 0xff}, // sky blue
	color.RGBA{0x00, 0x00, 0x00, 0xff}, // black
}

// PlotAccuracy draws test accuracy against round for each run, one line
// per run labelled by its name, into path: PNG or SVG, chosen by the
// extension. Only evaluation rounds (those with an accuracy) are drawn, each
// with a marker, so the markers show where the model was actually measured.
// The y axis spans the data with a margin rather than all of [0, 1], so
// that runs a few points apart can be told apart. A run without any
// evaluated round is left out; if no run has one, there is nothing to draw
// and PlotAccuracy returns an error.
func PlotAccuracy(runs []*Run, path string, title string) error {
	format := strings.ToLower(strings.TrimPrefix(filepath.Ext(path), "."))
	if format != "png" && format != "svg" {
		return fmt.Errorf("plot %s: unknown format %q: want a .png or .svg file", path, filepath.Ext(path))
	}
	p, curves, err := accuracyPlot(runs, title)
	if err != nil {
		return fmt.Errorf("plot %s: %w", path, err)
	}
	var wt io.WriterTo
	if format == "png" {
		c := vgimg.NewWith(vgimg.UseWH(plotWidth, plotHeight), vgimg.UseDPI(plotDPI))
		placeLegend(p, margin(draw.New(c)), curves)
		p.Draw(margin(draw.New(c)))
		wt = vgimg.PngCanvas{Canvas: c}
	} else {
		c := vgsvg.New(plotWidth, plotHeight)
		placeLegend(p, margin(draw.New(c)), curves)
		p.Draw(margin(draw.New(c)))
		wt = c
	}
	var b bytes.Buffer
	if _, err := wt.WriteTo(&b); err != nil {
		return fmt.Errorf("plot %s: %w", path, err)
	}
	if err := writeFileAtomic(path, b.Bytes()); err != nil {
		return fmt.Errorf("plot: %w", err)
	}
	return nil
}

// accuracyPlot builds the figure of PlotAccuracy, all but the legend's
// place, which depends on the canvas; it returns the curves drawn, for
// placeLegend.
func accuracyPlot(runs []*Run, title string) (*plot.Plot, []plotter.XYs, error) {
	p := plot.New()
	p.Title.Text = title
	p.Title.TextStyle.Font.Size = vg.Points(13)
	p.X.Label.Text = "round"
	p.Y.Label.Text = "test accuracy"
	p.X.Label.TextStyle.Font.Size = vg.Points(11)
	p.Y.Label.TextStyle.Font.Size = vg.Points(11)
	p.Add(plotter.NewGrid())
	p.Legend.TextStyle.Font.Size = vg.Points(10)

	labels := runLabels(runs)
	lo, hi := math.Inf(1), math.Inf(-1)
	xmin, xmax := math.Inf(1), math.Inf(-1)
	drawn := 0
	var curves []plotter.XYs
	for i, run := range runs {
		acc := run.accuracy()
		if len(acc) == 0 {
			continue
		}
		// The x axis spans every round of the runs drawn, evaluated or
		// not, so a run evaluated every ten rounds still starts at round 1.
		xmin = math.Min(xmin, float64(run.Rounds[0].Round))
		xmax = math.Max(xmax, float64(run.Rounds[len(run.Rounds)-1].Round))
		xys := make(plotter.XYs, len(acc))
		curves = append(curves, xys)
		for j, pt := range acc {
			xys[j].X, xys[j].Y = pt[0], pt[1]
			lo, hi = math.Min(lo, pt[1]), math.Max(hi, pt[1])
		}
		line, points, err := plotter.NewLinePoints(xys)
		if err != nil {
			return nil, nil, fmt.Errorf("%s: %w", labels[i], err)
		}
		c := palette[drawn%len(palette)]
		line.Color = c
		line.Width = vg.Points(1.5)
		points.Color = c
		points.Shape = plotutil.Shape(drawn / len(palette))
		points.Radius = markerRadius(len(acc))
		p.Add(line, points)
		p.Legend.Add(labels[i], line, points)
		drawn++
	}
	if drawn == 0 {
		return nil, nil, errors.New("no run has an evaluated round (no accuracy to draw)")
	}
	p.Y.Min, p.Y.Max = accuracyRange(lo, hi)
	p.Y.Tick.Marker = niceTicks{}
	if xmin == xmax { // a single evaluation: give the point some room
		xmin, xmax = xmin-1, xmax+1
	}
	p.X.Min, p.X.Max = xmin, xmax
	p.X.Tick.Marker = niceTicks{integer: true}
	return p, curves, nil
}

// placeLegend puts the legend in the corner of the data area where it
// hides the least of the curves, judged by points sampled every 2 pt along
// them. Ties go, in order, to the bottom right (rising accuracy curves
// usually leave it empty), the top left, the top right and the bottom left.
func placeLegend(p *plot.Plot, c draw.Canvas, curves []plotter.XYs) {
	dc := p.DataCanvas(c)
	tx, ty := p.Transforms(&dc)
	var pts []vg.Point
	for _, xys := range curves {
		for i := range xys {
			b := vg.Point{X: tx(xys[i].X), Y: ty(xys[i].Y)}
			if i == 0 {
				pts = append(pts, b)
				continue
			}
			a := vg.Point{X: tx(xys[i-1].X), Y: ty(xys[i-1].Y)}
			n := int(math.Hypot(float64(b.X-a.X), float64(b.Y-a.Y))/2) + 1
			for k := 1; k <= n; k++ {
				f := vg.Length(k) / vg.Length(n)
				pts = append(pts, vg.Point{X: a.X + f*(b.X-a.X), Y: a.Y + f*(b.Y-a.Y)})
			}
		}
	}
	const inset = 6 // points between the legend and the axes
	size := p.Legend.Rectangle(dc).Size()
	best := -1
	for _, corner := range []struct{ top, left bool }{{false, false}, {true, true}, {true, false}, {false, true}} {
		// The legend's box, with a clearance of 8 pt around it.
		var r vg.Rectangle
		if corner.left {
			r.Min.X = dc.Min.X + inset
		} else {
			r.Min.X = dc.Max.X - inset - size.X
		}
		if corner.top {
			r.Min.Y = dc.Max.Y - inset - size.Y
		} else {
			r.Min.Y = dc.Min.Y + inset
		}
		r.Max = r.Min.Add(size)
		r.Min, r.Max = r.Min.Sub(vg.Point{X: 8, Y: 8}), r.Max.Add(vg.Point{X: 8, Y: 8})
		hidden := 0
		for _, pt := range pts {
			if pt.X >= r.Min.X && pt.X <= r.Max.X && pt.Y >= r.Min.Y && pt.Y <= r.Max.Y {
				hidden++
			}
		}
		if best < 0 || hidden < best {
			best = hidden
			p.Legend.Top, p.Legend.Left = corner.top, corner.left
			p.Legend.XOffs, p.Legend.YOffs = -inset, inset
			if corner.left {
				p.Legend.XOffs = inset
			}
			if corner.top {
				p.Legend.YOffs = -inset
			}
		}
	}
}

// margin keeps the title and the last tick label off the edge of the
// figure (gonum draws them flush against it).
func margin(c draw.Canvas) draw.Canvas {
	return draw.Crop(c, vg.Points(4), -vg.Points(12), vg.Points(4), -vg.Points(8))
}

// niceTicks places four to ten labelled ticks at multiples of 1, 2 or 5
// times a power of ten, with a minor tick between each pair. gonum's
// default ticker labels as few as three, at values such as 0.55 and 0.7,
// which makes a zoomed accuracy axis hard to read. With integer set,
// steps are at least 1 (rounds).
type niceTicks struct{ integer bool }

// Ticks implements plot.Ticker.
func (n niceTicks) Ticks(lo, hi float64) []plot.Tick {
	step := niceStep((hi - lo) / 4)
	if n.integer && step < 1 {
		step = 1
	}
	// Labels need as many decimals as the step has.
	prec := max(0, -int(math.Floor(math.Log10(step)+1e-9)))
	var ticks []plot.Tick
	for i := math.Ceil(lo/step - 1e-9); i*step <= hi+step*1e-9; i++ {
		v := i * step
		if v == 0 {
			v = 0 // not -0 (Ceil of a tiny negative), which would print as "-0.0"
		}
		ticks = append(ticks, plot.Tick{Value: v, Label: strconv.FormatFloat(v, 'f', prec, 64)})
		if minor := v + step/2; minor <= hi && !(n.integer && step == 1) {
			ticks = append(ticks, plot.Tick{Value: minor})
		}
	}
	if first := math.Ceil(lo/step-1e-9) * step; first-step/2 >= lo && !(n.integer && step == 1) {
		ticks = append(ticks, plot.Tick{Value: first - step/2})
	}
	return ticks
}

// niceStep rounds x down to 1, 2 or 5 times a power of ten.
func niceStep(x float64) float64 {
	if x <= 0 || math.IsNaN(x) || math.IsInf(x, 0) {
		return 1
	}
	p := math.Pow(10, math.Floor(math.Log10(x)+1e-9))
	for _, m := range []float64{5, 2} {
		if m*p <= x*(1+1e-9) {
			return m * p
		}
	}
	return p
}

// markerRadius shrinks the markers of densely evaluated runs so that the
// line between them stays visible.
func markerRadius(points int) vg.Length {
	switch {
	case points > 200:
		return vg.Points(1.2)
	case points > 50:
		return vg.Points(2)
	}
	return vg.Points(3)
}

// accuracyRange pads the accuracies' range [lo, hi] by a tenth of its span
// (at least 0.01) on each side, without going past [0, 1] where the data do
// not.
func accuracyRange(lo, hi float64) (float64, float64) {
	pad := math.Max((hi-lo)/10, 0.01)
	ylo, yhi := lo-pad, hi+pad
	if lo >= 0 && ylo < 0 {
		ylo = 0
	}
	if hi <= 1 && yhi > 1 {
		yhi = 1
	}
	return ylo, yhi
}

// runLabels names each run by [Run.Name]; runs whose names collide (two
// directories both called "run", say) are labelled by their full directory
// instead, so every line in a legend is told apart.
func runLabels(runs []*Run) []string {
	count := map[string]int{}
	for _, r := range runs {
		count[r.Name()]++
	}
	labels := make([]string, len(runs))
	for i, r := range runs {
		labels[i] = r.Name()
		if count[labels[i]] > 1 {
			labels[i] = filepath.Clean(r.Dir)
		}
	}
	return labels
}
