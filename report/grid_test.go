package report

import (
	"image/color"
	"path/filepath"
	"testing"
)

// TestGrid: each image lands in its cell at 3x, pixel for pixel; a nil
// image leaves its cell white; shapes that do not fit are refused.
func TestGrid(t *testing.T) {
	const h, w = 4, 5
	black := make([]float32, h*w)
	half := make([]float32, h*w)
	for i := range half {
		half[i] = 0.5
	}
	path := filepath.Join(t.TempDir(), "g.png")
	g := Grid{Shape: []int{h, w, 1}, Rows: []GridRow{{Label: "a", Images: [][]float32{black, nil}}, {Label: "b", Images: [][]float32{half}}}}
	if err := g.WritePNG(path); err != nil {
		t.Fatal(err)
	}
	img := readPNG(t, path)
	cw, ch := w*gridZoom+gridGap, h*gridZoom+gridGap
	at := func(row, col int) color.Gray {
		x, y := gridLabel+col*cw+w*gridZoom/2, gridGap+row*ch+h*gridZoom/2
		return color.GrayModel.Convert(img.At(x, y)).(color.Gray)
	}
	if got := at(0, 0).Y; got != 0 {
		t.Errorf("black cell is %d", got)
	}
	if got := at(0, 1).Y; got != 255 {
		t.Errorf("blank cell is %d", got)
	}
	if got := at(1, 0).Y; got != 128 {
		t.Errorf("grey cell is %d", got)
	}
	if err := (Grid{Shape: []int{h, w, 2}}).WritePNG(path); err == nil {
		t.Error("2 channels accepted")
	}
	if err := (Grid{Shape: []int{h, w, 1}, Rows: []GridRow{{Images: [][]float32{black[:3]}}}}).WritePNG(path); err == nil {
		t.Error("a short image accepted")
	}
}
