package data

import (
	"bytes"
	"fmt"
	"image"
	"image/color"
	"image/jpeg"
	"image/png"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// writePNG writes img to path, making its directory.
func writePNG(t *testing.T, path string, img image.Image) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	var b bytes.Buffer
	if err := png.Encode(&b, img); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, b.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
}

// grey is a w x h grey image whose pixel (x, y) is base + x + w*y.
func grey(w, h int, base uint8) *image.Gray {
	g := image.NewGray(image.Rect(0, 0, w, h))
	for i := range g.Pix {
		g.Pix[i] = base + uint8(i)
	}
	return g
}

// TestImageFolder: classes are the subdirectories (in number order where
// they are numbers: "10" after "9"), images in nested directories count,
// other files and hidden ones are skipped, grey PNGs give one channel with
// every pixel byte/255 at its HWC place, and one RGB image makes the
// whole dataset RGB, with the grey images' value in all three channels.
func TestImageFolder(t *testing.T) {
	dir := t.TempDir()
	writePNG(t, filepath.Join(dir, "9", "a.png"), grey(3, 2, 10))
	writePNG(t, filepath.Join(dir, "10", "deep", "b.png"), grey(3, 2, 50))
	writePNG(t, filepath.Join(dir, ".hidden", "c.png"), grey(3, 2, 0))
	os.WriteFile(filepath.Join(dir, "9", "notes.txt"), []byte("not an image"), 0o644)
	os.WriteFile(filepath.Join(dir, "README"), []byte("about"), 0o644)
	d, s, err := Read(dir, Spec{}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(s.Classes, []string{"9", "10"}) || !slices.Equal(s.Shape, []int{2, 3, 1}) || d.Len() != 2 || !slices.Equal(d.Y, []int32{0, 1}) {
		t.Fatalf("classes %v shape %v, %d examples, labels %v", s.Classes, s.Shape, d.Len(), d.Y)
	}
	for i := range 6 {
		if d.X[i] != float32(10+i)/255 || d.X[6+i] != float32(50+i)/255 {
			t.Fatalf("pixel %d: %v and %v, want %v and %v", i, d.X[i], d.X[6+i], float32(10+i)/255, float32(50+i)/255)
		}
	}

	c := image.NewNRGBA(image.Rect(0, 0, 3, 2))
	for i := range 6 {
		c.Set(i%3, i/3, color.NRGBA{uint8(i), uint8(100 + i), uint8(200 + i), 255})
	}
	writePNG(t, filepath.Join(dir, "9", "colour.png"), c)
	d, s, err = Read(dir, Spec{}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(s.Shape, []int{2, 3, 3}) || d.Len() != 3 {
		t.Fatalf("with a colour image: shape %v, %d examples", s.Shape, d.Len())
	}
	// Files of a class in path order: 9/a.png, 9/colour.png, then 10.
	for i := range 6 {
		if got := d.X[3*i : 3*i+3]; !slices.Equal(got, []float32{float32(10+i) / 255, float32(10+i) / 255, float32(10+i) / 255}) {
			t.Fatalf("grey pixel %d as RGB: %v", i, got)
		}
		want := []float32{float32(i) / 255, float32(100+i) / 255, float32(200+i) / 255}
		if got := d.X[18+3*i : 18+3*i+3]; !slices.Equal(got, want) {
			t.Fatalf("colour pixel %d: %v, want %v", i, got, want)
		}
	}
	// Declared grey: the colour image becomes its luma.
	d, _, err = Read(dir, Spec{Channels: 1}, nil)
	if err != nil {
		t.Fatal(err)
	}
	wantY := (19595*0 + 38470*100 + 7471*200 + 1<<15) >> 16
	if d.X[6] != byteScale[wantY] {
		t.Errorf("colour pixel 0 as grey: %v, want %v", d.X[6]*255, wantY)
	}
}

// TestImageFolderSizes: images of different sizes are an error that names
// a file and image_size, unless a size is declared: then every image is
// resized to it, and a constant image stays constant. A client reading
// into a schema of another size without a declared size is refused.
func TestImageFolderSizes(t *testing.T) {
	dir := t.TempDir()
	flat := image.NewGray(image.Rect(0, 0, 8, 6))
	for i := range flat.Pix {
		flat.Pix[i] = 51
	}
	writePNG(t, filepath.Join(dir, "a", "1.png"), grey(4, 4, 0))
	writePNG(t, filepath.Join(dir, "b", "2.png"), flat)
	_, _, err := Read(dir, Spec{}, nil)
	if err == nil || !strings.Contains(err.Error(), "2.png is 6x8") || !strings.Contains(err.Error(), "image_size") {
		t.Fatalf("mixed sizes: %v", err)
	}
	d, s, err := Read(dir, Spec{ImageSize: [2]int{3, 5}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(s.Shape, []int{3, 5, 1}) {
		t.Fatalf("declared 3x5: shape %v", s.Shape)
	}
	for _, v := range d.X[15:] {
		if v != byteScale[51] {
			t.Fatalf("a constant image resized: %v, want %v", d.X[15:], byteScale[51])
		}
	}
	_, _, err = Read(dir, Spec{}, &Schema{Shape: []int{4, 4, 1}, Classes: []string{"a", "b"}})
	if err == nil || !strings.Contains(err.Error(), "the run's images 4x4") {
		t.Errorf("a client's 6x8 image against the run's 4x4: %v", err)
	}
}

// TestImageFolderErrors: what is not an ImageFolder, or does not fit the
// run's schema, is an error saying what is wrong.
func TestImageFolderErrors(t *testing.T) {
	run := &Schema{Shape: []int{2, 2, 1}, Classes: []string{"cat", "dog"}}
	for _, tc := range []struct {
		name  string
		setup func(dir string)
		s     *Schema
		want  string
	}{
		{"not a png", func(dir string) {
			os.MkdirAll(filepath.Join(dir, "cat"), 0o755)
			os.WriteFile(filepath.Join(dir, "cat", "x.png"), []byte("GIF89a, or rather text"), 0o644)
		}, nil, "x.png: not a PNG or JPEG image"},
		{"truncated png", func(dir string) {
			var b bytes.Buffer
			png.Encode(&b, grey(2, 2, 0))
			os.MkdirAll(filepath.Join(dir, "cat"), 0o755)
			os.WriteFile(filepath.Join(dir, "cat", "x.png"), b.Bytes()[:b.Len()-20], 0o644)
		}, nil, "x.png"},
		{"image outside a class", func(dir string) { writePNG(t, filepath.Join(dir, "x.png"), grey(2, 2, 0)) }, nil, "not in a class directory"},
		{"no images", func(dir string) { os.MkdirAll(filepath.Join(dir, "cat"), 0o755) }, nil, "no PNG or JPEG images"},
		{"class not in the schema", func(dir string) { writePNG(t, filepath.Join(dir, "bird", "x.png"), grey(2, 2, 0)) }, run, `directory bird: label "bird" is not one of the classes [cat dog]`},
		{"images for a CSV run", func(dir string) { writePNG(t, filepath.Join(dir, "cat", "x.png"), grey(2, 2, 0)) },
			&Schema{Shape: []int{1}, Classes: []string{"cat", "dog"}, Columns: []Column{{Name: "a", Scale: 1}}}, "not [height width 1|3]"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			tc.setup(dir)
			_, _, err := Read(dir, Spec{Format: FormatImageFolder}, tc.s)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("err = %v, want %q", err, tc.want)
			}
		})
	}
}

// TestImageFolderJPEG: a JPEG reads (lossy, so within a few levels of what
// was written) and a grey JPEG is grey.
func TestImageFolderJPEG(t *testing.T) {
	dir := t.TempDir()
	os.MkdirAll(filepath.Join(dir, "x"), 0o755)
	os.MkdirAll(filepath.Join(dir, "y"), 0o755)
	for _, c := range []string{"x", "y"} {
		f, err := os.Create(filepath.Join(dir, c, "p.JPG"))
		if err != nil {
			t.Fatal(err)
		}
		flat := image.NewGray(image.Rect(0, 0, 8, 8))
		for i := range flat.Pix {
			flat.Pix[i] = 120
		}
		if err := jpeg.Encode(f, flat, &jpeg.Options{Quality: 95}); err != nil {
			t.Fatal(err)
		}
		f.Close()
	}
	d, s, err := Read(dir, Spec{}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(s.Shape, []int{8, 8, 1}) {
		t.Fatalf("grey JPEGs: shape %v", s.Shape)
	}
	for _, v := range d.X {
		if v*255 < 117 || v*255 > 123 {
			t.Fatalf("a flat 120 JPEG read as %v", v*255)
		}
	}
}

// TestMNISTImageFolder: MNIST's first 600 test images written as PNG
// files (by this test, with image/png) read back as exactly the IDX data,
// read as one IDX dataset: the same pixels, and the same labels where the
// class directories are the digits.
func TestMNISTImageFolder(t *testing.T) {
	needShared(t, "mnist")
	idx, is, err := Read(filepath.Join(sharedDir, "mnist", "t10k-images-idx3-ubyte.gz"), Spec{}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if idx.Len() != 10000 || !slices.Equal(is.Shape, []int{28, 28, 1}) || !slices.Equal(is.Classes, indexNames(10)) {
		t.Fatalf("MNIST's test set as an IDX dataset: %d examples, schema %+v", idx.Len(), is)
	}
	f := &Federated{Train: idx}
	const n = 600
	dir := t.TempDir()
	writeMNISTPNGs(t, f.Train, n, dir)
	d, s, err := Read(dir, Spec{}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(s.Shape, []int{28, 28, 1}) || !slices.Equal(s.Classes, indexNames(10)) || d.Len() != n {
		t.Fatalf("shape %v classes %v, %d examples", s.Shape, s.Classes, d.Len())
	}
	// Read orders examples by class then file name; the names are the
	// examples' indices.
	files, _, err := listImages(dir)
	if err != nil {
		t.Fatal(err)
	}
	for j, fl := range files {
		var i int
		if _, err := fmt.Sscanf(filepath.Base(fl.path), "%d.png", &i); err != nil {
			t.Fatal(err)
		}
		if d.Y[j] != f.Train.Y[i] || !slices.Equal(d.X[j*784:(j+1)*784], f.Train.X[i*784:(i+1)*784]) {
			t.Fatalf("%s: label %d or pixels differ from IDX example %d (label %d)", fl.path, d.Y[j], i, f.Train.Y[i])
		}
	}
}

// writeMNISTPNGs writes the first n examples of an MNIST-shaped dataset
// as DIR/LABEL/INDEX.png, grey 28x28, with image/png alone: a writer apart
// from the package's own, so that a reader and a writer cannot agree on
// the same mistake.
func writeMNISTPNGs(t *testing.T, d *Dataset, n int, dir string) {
	t.Helper()
	for i := range n {
		g := image.NewGray(image.Rect(0, 0, 28, 28))
		for p := range g.Pix {
			g.Pix[p] = uint8(d.X[i*784+p]*255 + 0.5)
		}
		writePNG(t, filepath.Join(dir, fmt.Sprint(d.Y[i]), fmt.Sprintf("%05d.png", i)), g)
	}
}
