package attack

import (
	"context"
	"math"
	"slices"
	"testing"

	"github.com/fedpq/fedpq/data"
	"github.com/fedpq/fedpq/mech"
	"github.com/fedpq/fedpq/model"
)

func mnist(t testing.TB) *data.Dataset {
	t.Helper()
	fd, err := data.Load("mnist", data.Options{Dir: "../../shared/datasets", Offline: true})
	if err != nil {
		t.Fatal(err)
	}
	return fd.Train
}

// batch is n training examples with distinct labels, from example i on.
func batch(d *data.Dataset, i, n int) Batch {
	f := d.Features()
	var b Batch
	used := map[int32]bool{}
	for ; len(b.Y) < n; i++ {
		if !used[d.Y[i]] {
			used[d.Y[i]] = true
			b.X = append(b.X, d.X[i*f:(i+1)*f]...)
			b.Y = append(b.Y, d.Y[i])
		}
	}
	return b
}

func newMech(t testing.TB, name string, eps float64) mech.Mechanism {
	t.Helper()
	c := mech.DefaultConfig()
	c.Epsilon = eps
	m, err := mech.New(name, c)
	if err != nil {
		t.Fatal(err)
	}
	return m
}

var gradient = Upload{Message: "gradient", Range: "oracle"}

// TestView: without a mechanism the server's view is the client's gradient:
// the same whether it is sent as a gradient or as an update of rate 0.1
// (to float32 rounding), and a pair's view is the mean of the two
// clients' gradients.
func TestView(t *testing.T) {
	d := mnist(t)
	m, _ := model.New("cnn2", d.Shape, 10)
	w := m.Init(1)
	ctx := context.Background()
	none := newMech(t, "none", 1)
	a, b := batch(d, 0, 2), batch(d, 100, 2)
	ga, err := View(ctx, m, w, none, gradient, []Batch{a}, 1)
	if err != nil {
		t.Fatal(err)
	}
	gu, err := View(ctx, m, w, none, Upload{Message: "update", LR: 0.1, Range: "oracle"}, []Batch{a}, 1)
	if err != nil {
		t.Fatal(err)
	}
	gb, _ := View(ctx, m, w, none, gradient, []Batch{b}, 1)
	gab, err := View(ctx, m, w, none, gradient, []Batch{a, b}, 1)
	if err != nil {
		t.Fatal(err)
	}
	for i := range ga {
		var scale float64
		for _, v := range ga[i] {
			scale = max(scale, math.Abs(float64(v)))
		}
		for j := range ga[i] {
			if d := math.Abs(float64(gu[i][j] - ga[i][j])); d > 1e-3*scale {
				t.Fatalf("tensor %d: update view %v, gradient view %v", i, gu[i][j], ga[i][j])
			}
			if d := math.Abs(float64(gab[i][j]) - (float64(ga[i][j])+float64(gb[i][j]))/2); d > 1e-6*scale {
				t.Fatalf("tensor %d: pair view %v, mean of views %v and %v", i, gab[i][j], ga[i][j], gb[i][j])
			}
		}
	}
	if _, err := View(ctx, m, w, none, Upload{Message: "update", Range: "oracle"}, []Batch{a}, 1); err == nil {
		t.Error("an update message without a learning rate accepted")
	}
}

// TestInferLabels: iDLG's inference reads a batch's distinct labels off an
// exact gradient, for batches of 1 to 8, on a dense and a convolutional
// model at initialization.
func TestInferLabels(t *testing.T) {
	d := mnist(t)
	for _, arch := range []string{"linear", "cnn2"} {
		m, _ := model.New(arch, d.Shape, 10)
		w := m.Init(3)
		for _, n := range []int{1, 2, 4, 8} {
			b := batch(d, 50*n, n)
			g, err := View(context.Background(), m, w, newMech(t, "none", 1), gradient, []Batch{b}, 1)
			if err != nil {
				t.Fatal(err)
			}
			got, err := InferLabels(g[len(g)-1], n)
			if err != nil {
				t.Fatal(err)
			}
			want := map[int32]bool{}
			for _, y := range b.Y {
				want[y] = true
			}
			for _, y := range got {
				if !want[y] {
					t.Errorf("%s, batch %d: inferred %v, labels %v", arch, n, got, b.Y)
					break
				}
			}
		}
	}
}

// TestReconstruct: on the linear model an exact gradient gives the batch
// away (SSIM above 0.99 for every image and every label right, batches of
// 1 and 3, both methods), while the same attack on ldpq's one-bit message
// at eps 1 recovers nothing recognisable (mean SSIM below 0.3; noise
// scores 0.03 to 0.21 here). Two starts,
// as a one-start L-BFGS can stop in a poor local match.
func TestReconstruct(t *testing.T) {
	d := mnist(t)
	m, _ := model.New("linear", d.Shape, 10)
	w := m.Init(1)
	for _, method := range []string{"dlg", "idlg"} {
		for _, n := range []int{1, 3} {
			b := batch(d, 7*n, n)
			for _, c := range []struct {
				mech    string
				lo, hi  float64 // bounds on the mean SSIM
				correct bool    // every label right
			}{{"none", 0.99, 1, true}, {"ldpq", -1, 0.3, false}} {
				view, err := View(context.Background(), m, w, newMech(t, c.mech, 1), gradient, []Batch{b}, 2)
				if err != nil {
					t.Fatal(err)
				}
				rec, err := Method{Name: method, Optimizer: "lbfgs", Iterations: 200, Starts: 2}.Reconstruct(context.Background(), m, w, view, n, nil, 1, nil)
				if err != nil {
					t.Fatal(err)
				}
				sc, err := Score(d.Shape, b, rec)
				if err != nil {
					t.Fatal(err)
				}
				mean := 0.0
				for _, s := range sc.SSIM {
					mean += s / float64(n)
				}
				t.Logf("%s %s batch %d: SSIM %.3f, %d/%d labels, distance %.2g", method, c.mech, n, mean, sc.Correct, n, rec.Distance)
				if mean < c.lo || mean > c.hi || (c.correct && sc.Correct != n) {
					t.Errorf("%s %s batch %d: SSIM %.3f (want in [%g, %g]), %d/%d labels", method, c.mech, n, mean, c.lo, c.hi, sc.Correct, n)
				}
			}
		}
	}
}

// TestSSIM checks the index on cases with a closed form: an image against
// itself is 1; two constant images a and b are (2ab + C1)/(a^2 + b^2 + C1)
// (no variance: the structure term is C2/C2 = 1); an image against its
// negative 1 - x has correlation -1.
func TestSSIM(t *testing.T) {
	const h, w = 16, 12
	x := make([]float32, h*w)
	for i := range x {
		x[i] = float32((i*37)%101) / 100
	}
	if s := SSIM(x, x, h, w, 1); math.Abs(s-1) > 1e-12 {
		t.Errorf("SSIM(x, x) = %v", s)
	}
	a, b := make([]float32, h*w), make([]float32, h*w)
	for i := range a {
		a[i], b[i] = 0.25, 0.5
	}
	const c1 = 1e-4
	want := (2*0.25*0.5 + c1) / (0.25*0.25 + 0.5*0.5 + c1)
	if s := SSIM(a, b, h, w, 1); math.Abs(s-want) > 1e-12 {
		t.Errorf("constant images: SSIM %v, want %v", s, want)
	}
	neg := make([]float32, len(x))
	for i := range x {
		neg[i] = 1 - x[i]
	}
	if s := SSIM(x, neg, h, w, 1); s > -0.5 {
		t.Errorf("SSIM(x, 1-x) = %v, want strongly negative", s)
	}
}

// TestSSIMScikitImage checks SSIM against scikit-image 0.19.3 (Debian's
// python3-skimage): structural_similarity(a, b, gaussian_weights=True,
// sigma=1.5, use_sample_covariance=True, data_range=1[, channel_axis=2])
// on images given by formulas whose values are exact in float32, printed to
// 17 digits; agreement to 1e-12.
func TestSSIMScikitImage(t *testing.T) {
	img := func(h, w, c int, f func(i, j, k int) float64) []float32 {
		x := make([]float32, 0, h*w*c)
		for i := range h {
			for j := range w {
				for k := range c {
					x = append(x, float32(f(i, j, k)))
				}
			}
		}
		return x
	}
	a := img(28, 28, 1, func(i, j, _ int) float64 { return float64((i*7+j*13)%17) / 16 })
	b := img(28, 28, 1, func(i, j, _ int) float64 { return float64((i*5+j*3)%13) / 16 })
	e := img(28, 28, 1, func(i, j, _ int) float64 { return min(1, float64((i-14)*(i-14)+(j-14)*(j-14))/256) })
	f := img(28, 28, 1, func(i, j, _ int) float64 {
		v := float64((i*7+j*13)%17) / 16
		if (i+j)%3 == 0 {
			v = min(1, v+1.0/8)
		}
		return v
	})
	c := img(20, 24, 3, func(i, j, k int) float64 { return float64((i*3+j*5+k*7)%16) / 16 })
	d := img(20, 24, 3, func(i, j, k int) float64 { return float64((i*i+j+k*5)%16) / 16 })
	g := img(20, 24, 3, func(i, j, k int) float64 { return float64((i*3+j*5+k*7)%16)/16*0.75 + 0.125 })
	for _, tc := range []struct {
		name    string
		x, y    []float32
		h, w, c int
		want    float64
	}{
		{"unrelated", a, b, 28, 28, 1, 0.002498418623642894},
		{"disc", a, e, 28, 28, 1, 0.005958232261779308},
		{"a third of pixels brighter", a, f, 28, 28, 1, 0.9802742935426192},
		{"colour, unrelated", c, d, 20, 24, 3, 0.030365656964295686},
		{"colour, contrast reduced", c, g, 20, 24, 3, 0.9601185836746905},
	} {
		if got := SSIM(tc.x, tc.y, tc.h, tc.w, tc.c); math.Abs(got-tc.want) > 1e-12 {
			t.Errorf("%s: SSIM %.17g, scikit-image %.17g", tc.name, got, tc.want)
		}
	}
}

// TestScore: guesses returned in another order are matched back to their
// images, and labels are scored through the match.
func TestScore(t *testing.T) {
	d := mnist(t)
	b := batch(d, 0, 4)
	f := d.Features()
	order := []int{2, 0, 3, 1}
	rec := Reconstruction{}
	for _, i := range order {
		rec.X = append(rec.X, b.X[i*f:(i+1)*f]...)
		rec.Labels = append(rec.Labels, b.Y[i])
	}
	rec.Labels[0] = (rec.Labels[0] + 1) % 10 // the guess of image 2 has a wrong label
	sc, err := Score(d.Shape, b, rec)
	if err != nil {
		t.Fatal(err)
	}
	for i, j := range sc.Match {
		if order[j] != i || sc.SSIM[i] != 1 || sc.MSE[i] != 0 {
			t.Errorf("image %d matched to guess %d (SSIM %v, MSE %v)", i, j, sc.SSIM[i], sc.MSE[i])
		}
	}
	if sc.Correct != 3 {
		t.Errorf("%d labels right, want 3", sc.Correct)
	}
}

// TestParseSetting reads the mechanism specs of fedpq attack.
func TestParseSetting(t *testing.T) {
	def := mech.DefaultConfig()
	for _, c := range []struct {
		in   string
		eps  float64
		rate int
		pair bool
	}{
		{"none", def.Epsilon, def.Rate, false},
		{"laplace:10", 10, def.Rate, false},
		{"jopeq:eps=3,rate=8", 3, 8, false},
		{"corbin+pair:eps=2", 2, def.Rate, true},
	} {
		s, err := ParseSetting(c.in, def)
		if err != nil {
			t.Errorf("%s: %v", c.in, err)
			continue
		}
		if s.Config.Epsilon != c.eps || s.Config.Rate != c.rate || s.Pair != c.pair {
			t.Errorf("%s: eps %v rate %d pair %v", c.in, s.Config.Epsilon, s.Config.Rate, s.Pair)
		}
	}
	for _, bad := range []string{"nosuch", "laplace:x", "laplace:speed=3", "ldpq+pair", "laplace:eps=-1"} {
		if _, err := ParseSetting(bad, def); err == nil {
			t.Errorf("%q accepted", bad)
		}
	}
}

// TestBoxPrior: the pixels' small penalty for leaving [0, 1] keeps L-BFGS
// out of the inverted basin of the linear model. Without it, 3 of these 8
// single-image iDLG attacks (one start each) end in an inverted image
// outside the box (SSIM 0.03 to 0.15, gradient distance 0.2 to 0.63);
// with it every one is exact (SSIM above 0.99).
func TestBoxPrior(t *testing.T) {
	d := mnist(t)
	m, _ := model.New("linear", d.Shape, 10)
	w := m.Init(1)
	for i := range 8 {
		b := batch(d, 37*i, 1)
		view, err := View(context.Background(), m, w, newMech(t, "none", 1), gradient, []Batch{b}, 1)
		if err != nil {
			t.Fatal(err)
		}
		rec, err := Method{Name: "idlg", Optimizer: "lbfgs", Iterations: 300, Starts: 1}.Reconstruct(context.Background(), m, w, view, 1, nil, 1, nil)
		if err != nil {
			t.Fatal(err)
		}
		sc, err := Score(d.Shape, b, rec)
		if err != nil {
			t.Fatal(err)
		}
		if sc.SSIM[0] < 0.99 {
			t.Errorf("target %d: SSIM %.3f, distance %.2g", i, sc.SSIM[0], rec.Distance)
		}
	}
}

// TestLabelRuleLenet pins the limit of iDLG's label rule that docs/attack.md
// reports: lenet at its seed-1 initialization gives class 5 about a third of
// the probability on every image, so with a 5 in a batch of 8 distinct
// labels the bias gradient of class 5 is still positive (+0.21 measured;
// checked above +0.1) and the rule misses it.
func TestLabelRuleLenet(t *testing.T) {
	d := mnist(t)
	m, _ := model.New("lenet", d.Shape, 10)
	w := m.Init(1)
	b := batch(d, 0, 8)
	if !slices.Contains(b.Y, 5) {
		t.Fatalf("batch %v has no 5", b.Y)
	}
	g, err := View(context.Background(), m, w, newMech(t, "none", 1), gradient, []Batch{b}, 1)
	if err != nil {
		t.Fatal(err)
	}
	bias := g[len(g)-1]
	got, _ := InferLabels(bias, 8)
	if bias[5] < 0.1 || slices.Contains(got, 5) {
		t.Errorf("class 5: bias gradient %.3f, inferred %v (labels %v)", bias[5], got, b.Y)
	}
}

// TestMeanSE: the standard error is the sample standard deviation over
// sqrt(n): for 1, 2, 3, 4 it is sqrt(5/3)/2.
func TestMeanSE(t *testing.T) {
	m, se := meanSE([]float64{1, 2, 3, 4})
	if m != 2.5 || math.Abs(se-math.Sqrt(5.0/3)/2) > 1e-15 {
		t.Errorf("mean %v, se %v", m, se)
	}
	if m, se := meanSE([]float64{7}); m != 7 || se != 0 {
		t.Errorf("one value: mean %v, se %v", m, se)
	}
}
