package data

import (
	"fmt"
	"image"
	"image/color"
	_ "image/jpeg" // registers JPEG with image.Decode
	"image/png"
	"io/fs"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"sync"
	"sync/atomic"

	"golang.org/x/image/draw"
)

// imageExts are the file names an ImageFolder reads; other files are
// skipped, as torchvision's ImageFolder skips them.
var imageExts = []string{".png", ".jpg", ".jpeg"}

func isImage(name string) bool {
	return slices.Contains(imageExts, strings.ToLower(filepath.Ext(name)))
}

// imageFile is one image of an ImageFolder and what its header says.
type imageFile struct {
	path  string
	class string
	w, h  int
	grey  bool
}

// readImageFolder reads dir as torchvision's ImageFolder: one subdirectory
// per class (its name is the class name), holding PNG or JPEG images, in
// subdirectories of their own or not. Every image becomes HWC float32 in
// [0, 1] of one size and one number of channels: the schema's, else those
// sp declares, else the images' own size (all must agree) and grey if every
// image is grey, RGB otherwise. A grey image read as RGB repeats its value
// in the three channels; a colour image read as grey is converted as Go's
// color.GrayModel does (ITU-R BT.601 luma, as PIL's "L"); alpha is dropped.
// 16-bit images are read at 8 bits.
func readImageFolder(dir string, sp Spec, s *Schema) (*Dataset, *Schema, error) {
	files, dirs, err := listImages(dir)
	if err != nil {
		return nil, nil, err
	}
	classes := resolveClasses(s, sp.Classes, dirs)
	lab := newLabeler(classes)
	for _, d := range dirs {
		if _, err := lab.name(d); err != nil {
			return nil, nil, fmt.Errorf("%s: directory %s: %w", dir, d, err)
		}
	}
	if len(files) == 0 {
		return nil, nil, fmt.Errorf("%s: no PNG or JPEG images in class subdirectories (an ImageFolder holds one directory per class: DIR/CLASS/*.png)", dir)
	}
	if err := parallel(len(files), func(i int) error { return files[i].config() }); err != nil {
		return nil, nil, err
	}
	h, w, ch, err := imageShape(dir, files, sp, s)
	if err != nil {
		return nil, nil, err
	}
	f := h * w * ch
	d := &Dataset{Name: filepath.Base(dir), X: make([]float32, len(files)*f), Y: make([]int32, len(files)),
		Shape: []int{h, w, ch}, Classes: len(classes), Names: classes}
	err = parallel(len(files), func(i int) error {
		d.Y[i], _ = lab.name(files[i].class)
		return files[i].decode(d.X[i*f:(i+1)*f], h, w, ch)
	})
	if err != nil {
		return nil, nil, err
	}
	return d, &Schema{Shape: slices.Clone(d.Shape), Classes: classes}, nil
}

// listImages lists dir's class directories and their images, sorted by
// class then path. An image directly in dir, outside any class, is an
// error; hidden files and directories are skipped.
func listImages(dir string) ([]imageFile, []string, error) {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil, nil, err
	}
	var files []imageFile
	var dirs []string
	for _, e := range entries {
		name := e.Name()
		switch {
		case strings.HasPrefix(name, "."):
		case e.IsDir():
			dirs = append(dirs, name)
		case isImage(name):
			return nil, nil, fmt.Errorf("%s: image %s is not in a class directory (an ImageFolder holds one directory per class: DIR/CLASS/*.png)", dir, name)
		}
	}
	sortNames(dirs)
	for _, c := range dirs {
		err := filepath.WalkDir(filepath.Join(dir, c), func(p string, e fs.DirEntry, err error) error {
			switch {
			case err != nil:
				return err
			case strings.HasPrefix(e.Name(), ".") && e.IsDir():
				return filepath.SkipDir
			case !e.IsDir() && !strings.HasPrefix(e.Name(), ".") && isImage(e.Name()):
				files = append(files, imageFile{path: p, class: c})
			}
			return nil
		})
		if err != nil {
			return nil, nil, err
		}
	}
	return files, dirs, nil
}

// config reads the image's header: its size and whether it is grey.
func (f *imageFile) config() error {
	r, err := os.Open(f.path)
	if err != nil {
		return err
	}
	defer r.Close()
	cfg, _, err := image.DecodeConfig(r)
	if err != nil {
		return fmt.Errorf("%s: not a PNG or JPEG image: %w", f.path, err)
	}
	f.w, f.h = cfg.Width, cfg.Height
	f.grey = cfg.ColorModel == color.GrayModel || cfg.ColorModel == color.Gray16Model
	if f.w < 1 || f.h < 1 {
		return fmt.Errorf("%s: an image of %dx%d pixels", f.path, f.w, f.h)
	}
	return nil
}

// imageShape decides the height, width and channels every image is read
// at, as readImageFolder says.
func imageShape(dir string, files []imageFile, sp Spec, s *Schema) (h, w, ch int, err error) {
	declared := sp.ImageSize != [2]int{}
	h, w, ch = sp.ImageSize[0], sp.ImageSize[1], sp.Channels
	if s != nil {
		if len(s.Shape) != 3 || (s.Shape[2] != 1 && s.Shape[2] != 3) || s.Columns != nil {
			return 0, 0, 0, fmt.Errorf("%s: images, but the run's examples are of shape %v, not [height width 1|3]", dir, s.Shape)
		}
		if declared && (h != s.Shape[0] || w != s.Shape[1]) {
			return 0, 0, 0, fmt.Errorf("%s: image size %dx%d declared, the run's schema says %dx%d", dir, h, w, s.Shape[0], s.Shape[1])
		}
		h, w, ch = s.Shape[0], s.Shape[1], s.Shape[2]
	}
	if h == 0 {
		h, w = files[0].h, files[0].w
	}
	if !declared {
		for _, f := range files {
			if f.h != h || f.w != w {
				from := "the dataset's first image, " + files[0].path + ","
				if s != nil {
					from = "the run's images"
				}
				return 0, 0, 0, fmt.Errorf("%s: %s is %dx%d (height x width), %s %dx%d: declare image_size to resize every image to one size",
					dir, f.path, f.h, f.w, from, h, w)
			}
		}
	}
	if ch == 0 {
		ch = 1
		for _, f := range files {
			if !f.grey {
				ch = 3
				break
			}
		}
	}
	return h, w, ch, nil
}

// decode reads the image into out (h x w x ch, [0, 1]), resizing it
// (bilinear) if its size is not h x w.
func (f *imageFile) decode(out []float32, h, w, ch int) error {
	r, err := os.Open(f.path)
	if err != nil {
		return err
	}
	defer r.Close()
	img, _, err := image.Decode(r)
	if err != nil {
		return fmt.Errorf("%s: %w", f.path, err)
	}
	if b := img.Bounds(); b.Dx() != w || b.Dy() != h {
		dst := image.NewNRGBA(image.Rect(0, 0, w, h))
		draw.BiLinear.Scale(dst, dst.Bounds(), img, b, draw.Src, nil)
		img = dst
	}
	toFloats(img, ch, out)
	return nil
}

// toFloats writes img's pixels as HWC floats in [0, 1], grey (ch 1) or RGB.
func toFloats(img image.Image, ch int, out []float32) {
	b := img.Bounds()
	i := 0
	if g, ok := img.(*image.Gray); ok && ch == 1 {
		for y := b.Min.Y; y < b.Max.Y; y++ {
			for _, v := range g.Pix[g.PixOffset(b.Min.X, y):g.PixOffset(b.Max.X, y)] {
				out[i] = byteScale[v]
				i++
			}
		}
		return
	}
	for y := b.Min.Y; y < b.Max.Y; y++ {
		for x := b.Min.X; x < b.Max.X; x++ {
			var r, g, bl uint8
			if gr, ok := img.At(x, y).(color.Gray); ok {
				r, g, bl = gr.Y, gr.Y, gr.Y
			} else {
				c := color.NRGBAModel.Convert(img.At(x, y)).(color.NRGBA)
				r, g, bl = c.R, c.G, c.B
			}
			if ch == 1 {
				if r != g || g != bl {
					r = uint8((19595*uint32(r) + 38470*uint32(g) + 7471*uint32(bl) + 1<<15) >> 16)
				}
				out[i] = byteScale[r]
				i++
				continue
			}
			out[i], out[i+1], out[i+2] = byteScale[r], byteScale[g], byteScale[bl]
			i += 3
		}
	}
}

// writeImageFolder writes the examples idx of d as PNG files under dir,
// one directory per class (every class has one, empty or not); it is an
// error if d is not of 8-bit pixels ([h w 1] or [h w 3], each value a
// multiple of 1/255 in [0, 1]), which PNG cannot hold exactly.
func writeImageFolder(dir string, d *Dataset, idx []int) error {
	if len(d.Shape) != 3 || (d.Shape[2] != 1 && d.Shape[2] != 3) {
		return fmt.Errorf("data: %s has examples of shape %v, not images [height width 1|3]: write npz or csv", d.Name, d.Shape)
	}
	names := d.ClassNames()
	if err := checkClassNames(names); err != nil {
		return fmt.Errorf("data: %s: %w", d.Name, err)
	}
	for _, n := range names {
		if err := os.MkdirAll(filepath.Join(dir, n), 0o755); err != nil {
			return err
		}
	}
	h, w, ch := d.Shape[0], d.Shape[1], d.Shape[2]
	f := h * w * ch
	return parallel(len(idx), func(j int) error {
		i := idx[j]
		pix, err := pixelBytes(d.X[i*f : (i+1)*f])
		if err != nil {
			return fmt.Errorf("data: %s example %d: %w: write npz instead", d.Name, i, err)
		}
		var img image.Image = &image.Gray{Pix: pix, Stride: w, Rect: image.Rect(0, 0, w, h)}
		if ch == 3 {
			rgba := image.NewNRGBA(image.Rect(0, 0, w, h))
			for p := range h * w {
				copy(rgba.Pix[4*p:4*p+3], pix[3*p:3*p+3])
				rgba.Pix[4*p+3] = 255
			}
			img = rgba
		}
		path := filepath.Join(dir, names[d.Y[i]], fmt.Sprintf("%06d.png", j))
		out, err := os.Create(path)
		if err != nil {
			return err
		}
		err = png.Encode(out, img)
		if cerr := out.Close(); err == nil {
			err = cerr
		}
		return err
	})
}

// Pixels reports whether every value of d is an 8-bit pixel (a multiple
// of 1/255 in [0, 1]), which an ImageFolder of PNG files holds exactly.
func Pixels(d *Dataset) bool {
	for _, v := range d.X {
		if !(v >= 0 && v <= 1) || byteScale[int(v*255+0.5)] != v {
			return false
		}
	}
	return true
}

// pixelBytes is x as bytes, each value exactly byte/255, or an error.
func pixelBytes(x []float32) ([]byte, error) {
	b := make([]byte, len(x))
	for i, v := range x {
		if !(v >= 0 && v <= 1) {
			return nil, fmt.Errorf("value %v is not an 8-bit pixel (a multiple of 1/255 in [0, 1])", v)
		}
		k := int(v*255 + 0.5)
		if byteScale[k] != v {
			return nil, fmt.Errorf("value %v is not an 8-bit pixel (a multiple of 1/255 in [0, 1])", v)
		}
		b[i] = byte(k)
	}
	return b, nil
}

// parallel runs f(0) ... f(n-1) on all cores and returns the first error
// (of the lowest index among those that failed), if any.
func parallel(n int, f func(i int) error) error {
	workers := min(n, runtime.GOMAXPROCS(0))
	errs := make([]error, n)
	var next atomic.Int64
	var failed atomic.Bool
	var wg sync.WaitGroup
	for range workers {
		wg.Go(func() {
			for {
				i := int(next.Add(1)) - 1
				if i >= n || failed.Load() {
					return
				}
				if errs[i] = f(i); errs[i] != nil {
					failed.Store(true)
				}
			}
		})
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			return err
		}
	}
	return nil
}
