package report

import (
	"fmt"
	"image"
	"image/color"
	"image/png"
	"os"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/font"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
	"gonum.org/v1/plot/vg/vgimg"
)

// Grid is a picture of images in labelled rows: an attack's originals
// above each mechanism's reconstructions.
type Grid struct {
	Shape []int // one image's [H W C] (C 1 or 3), pixels in [0, 1]
	Rows  []GridRow
}

// GridRow is one labelled row; a nil image leaves its cell blank.
type GridRow struct {
	Label  string
	Images [][]float32
}

// Cell sizes: each pixel drawn as a zoom x zoom square, cells a gap apart,
// and a label column wide enough for "laplace+sdq:eps=10,rate=8  SSIM 0.00".
const (
	gridZoom  = 3
	gridGap   = 4
	gridLabel = 240
)

// WritePNG draws the grid into a PNG file.
func (g Grid) WritePNG(path string) error {
	if len(g.Shape) != 3 || (g.Shape[2] != 1 && g.Shape[2] != 3) {
		return fmt.Errorf("grid %s: image shape %v: want [H W 1] or [H W 3]", path, g.Shape)
	}
	h, w, c := g.Shape[0], g.Shape[1], g.Shape[2]
	cols := 0
	for _, r := range g.Rows {
		cols = max(cols, len(r.Images))
		for _, im := range r.Images {
			if im != nil && len(im) != h*w*c {
				return fmt.Errorf("grid %s: an image of %d values, want %d", path, len(im), h*w*c)
			}
		}
	}
	cw, ch := w*gridZoom+gridGap, h*gridZoom+gridGap
	width, height := gridLabel+cols*cw+gridGap, len(g.Rows)*ch+gridGap
	// Points = pixels at 72 dpi, so one vg unit is one pixel.
	canvas := vgimg.NewWith(vgimg.UseWH(vg.Length(width), vg.Length(height)), vgimg.UseDPI(72))
	dc := draw.New(canvas)
	dc.SetColor(color.White)
	dc.Fill(dc.Rectangle.Path())
	style := draw.TextStyle{Color: color.Black, Font: font.From(plot.DefaultFont, 12), Handler: plot.DefaultTextHandler,
		XAlign: draw.XLeft, YAlign: draw.YCenter}
	for i, r := range g.Rows {
		top := height - i*ch - gridGap // vg's y axis points up
		dc.FillText(style, vg.Point{X: 6, Y: vg.Length(top - h*gridZoom/2)}, r.Label)
		for j, im := range r.Images {
			if im == nil {
				continue
			}
			x0 := gridLabel + j*cw
			rect := vg.Rectangle{Min: vg.Point{X: vg.Length(x0), Y: vg.Length(top - h*gridZoom)},
				Max: vg.Point{X: vg.Length(x0 + w*gridZoom), Y: vg.Length(top)}}
			canvas.DrawImage(rect, toImage(im, h, w, c, gridZoom))
		}
	}
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if err := png.Encode(f, canvas.Image()); err != nil {
		f.Close()
		return fmt.Errorf("grid %s: %w", path, err)
	}
	return f.Close()
}

// toImage turns an HWC image with pixels in [0, 1] into an RGBA image,
// each pixel a zoom x zoom square (drawn at its own size, nothing is
// interpolated), clamping what lies outside [0, 1].
func toImage(x []float32, h, w, c, zoom int) image.Image {
	img := image.NewRGBA(image.Rect(0, 0, w*zoom, h*zoom))
	px := func(v float32) uint8 { return uint8(min(max(v, 0), 1)*255 + 0.5) }
	for i := range h * zoom {
		for j := range w * zoom {
			p := x[((i/zoom)*w+j/zoom)*c:]
			if c == 1 {
				v := px(p[0])
				img.Set(j, i, color.RGBA{v, v, v, 255})
			} else {
				img.Set(j, i, color.RGBA{px(p[0]), px(p[1]), px(p[2]), 255})
			}
		}
	}
	return img
}
