package lattice

import (
	"math"
	"math/rand/v2"
	"testing"
)

// words returns a fixed-seed source of uniform words, so every test is
// reproducible.
func words(seed uint64) *rand.ChaCha8 {
	var s [32]byte
	s[0] = byte(seed)
	return rand.NewChaCha8(s)
}

func TestLatticeScalarNearestBruteForce(t *testing.T) {
	src := words(1)
	for _, step := range []float64{1, 0.37, 2.0 / 15} {
		s := Scalar{step}
		for range 20000 {
			x := (unit(src.Uint64()) - 0.5) * 100
			k := s.Nearest(x)
			d := math.Abs(x - s.Point(k))
			for _, o := range []int64{k - 2, k - 1, k + 1, k + 2} {
				if e := math.Abs(x - s.Point(o)); e < d-1e-12 {
					t.Fatalf("step %v: Nearest(%v) = %d at distance %v, but %d is at %v", step, x, k, d, o, e)
				}
			}
		}
	}
}

func TestLatticeHexNearestBruteForce(t *testing.T) {
	src := words(2)
	for _, step := range []float64{1, 0.3, 1.7} {
		h := Hex{step}
		for range 20000 {
			x := (unit(src.Uint64()) - 0.5) * 40
			y := (unit(src.Uint64()) - 0.5) * 40
			i, j := h.Nearest(x, y)
			px, py := h.Point(i, j)
			best := math.Hypot(x-px, y-py)
			// Brute force over a window that surely holds the nearest point.
			ci, cj := int64(math.Round(x/step-y/(step*sqrt3))), int64(math.Round(2*y/(step*sqrt3)))
			for a := ci - 4; a <= ci+4; a++ {
				for b := cj - 4; b <= cj+4; b++ {
					qx, qy := h.Point(a, b)
					if d := math.Hypot(x-qx, y-qy); d < best-1e-12*step {
						t.Fatalf("step %v: Nearest(%v, %v) = (%d, %d) at %v, but (%d, %d) is at %v", step, x, y, i, j, best, a, b, d)
					}
				}
			}
		}
	}
}

// TestLatticeScalarDitherUniform checks the scalar dither against the
// uniform law on [-Step/2, Step/2): a chi-square test over 20 equal bins
// (19 degrees of freedom, rejected above 43.8, p = 0.001) and the mean and
// second moment within 5 standard errors, from 200000 fixed-seed samples.
func TestLatticeScalarDitherUniform(t *testing.T) {
	const n, bins = 200000, 20
	s := Scalar{0.8}
	src := words(3)
	var count [bins]float64
	var m1, m2 float64
	for range n {
		d := s.Dither(src.Uint64())
		if d < -s.Step/2 || d >= s.Step/2 {
			t.Fatalf("dither %v outside the cell", d)
		}
		count[int((d/s.Step+0.5)*bins)]++
		m1 += d
		m2 += d * d
	}
	chi := 0.0
	for _, c := range count {
		chi += (c - n/bins) * (c - n/bins) / (n / bins)
	}
	if chi > 43.8 {
		t.Errorf("chi-square %v over %d bins, want <= 43.8", chi, bins)
	}
	m1, m2 = m1/n, m2/n
	v := s.SecondMoment()
	if se := math.Sqrt(v / n); math.Abs(m1) > 5*se {
		t.Errorf("mean %v, want 0 within %v", m1, 5*se)
	}
	// Var(d^2) for d uniform on [-a, a] is 4a^4/45.
	a := s.Step / 2
	if se := math.Sqrt(4 * a * a * a * a / 45 / n); math.Abs(m2-v) > 5*se {
		t.Errorf("second moment %v, want %v within %v", m2, v, 5*se)
	}
}

// TestLatticeHexDitherUniform checks the hexagonal dither: every sample is
// in the basic cell (its nearest lattice point is the origin); the twelve
// 30-degree sectors of the hexagon, which have equal areas, get equal
// counts (chi-square, 11 degrees of freedom, rejected above 31.3,
// p = 0.001); the rings at radius below and above 0.35 Step get the share
// of the area they cover (computed exactly, the disc of radius 0.35 Step
// lying inside the cell whose inradius is 0.5 Step); and the moments match
// E d = 0, E dx^2 = E dy^2 = 5 Step^2/72, E dx dy = 0 within 5 standard
// errors. 200000 fixed-seed samples.
func TestLatticeHexDitherUniform(t *testing.T) {
	const n = 200000
	h := Hex{1.3}
	src := words(4)
	var sector [12]float64
	var inner, mx, my, mxx, myy, mxy float64
	area := sqrt3 / 2 * h.Step * h.Step
	for range n {
		x, y := h.Dither(src.Uint64(), src.Uint64())
		if i, j := h.Nearest(x, y); i != 0 || j != 0 {
			t.Fatalf("dither (%v, %v) is nearer to lattice point (%d, %d) than to the origin", x, y, i, j)
		}
		a := math.Atan2(y, x)
		if a < 0 {
			a += 2 * math.Pi
		}
		sector[min(int(a/(math.Pi/6)), 11)]++
		if math.Hypot(x, y) < 0.35*h.Step {
			inner++
		}
		mx += x
		my += y
		mxx += x * x
		myy += y * y
		mxy += x * y
	}
	chi := 0.0
	for _, c := range sector {
		chi += (c - n/12) * (c - n/12) / (n / 12)
	}
	if chi > 31.3 {
		t.Errorf("sector chi-square %v, want <= 31.3", chi)
	}
	p := math.Pi * 0.35 * 0.35 * h.Step * h.Step / area
	if se := math.Sqrt(p * (1 - p) / n); math.Abs(inner/n-p) > 5*se {
		t.Errorf("inner disc frequency %v, want %v within %v", inner/n, p, 5*se)
	}
	v := h.SecondMoment()
	se := math.Sqrt(v / n)
	if math.Abs(mx/n) > 5*se || math.Abs(my/n) > 5*se || math.Abs(mxy/n) > 5*v/math.Sqrt(n) {
		t.Errorf("means (%v, %v) and cross moment %v, want 0", mx/n, my/n, mxy/n)
	}
	// The fourth moments of the cell are below Step^4/16, so the standard
	// error of a second moment is below Step^2/(4 sqrt n).
	tol := 5 * h.Step * h.Step / 4 / math.Sqrt(n)
	if math.Abs(mxx/n-v) > tol || math.Abs(myy/n-v) > tol {
		t.Errorf("second moments (%v, %v), want %v within %v", mxx/n, myy/n, v, tol)
	}
}

// TestLatticeSecondMomentClosedForm checks the closed forms by sampling
// independently of Dither: points uniform on the bounding box of the cell,
// kept when their nearest lattice point is the origin, estimate the area
// and the per-dimension second moment of the cell, and hence G.
func TestLatticeSecondMomentClosedForm(t *testing.T) {
	const n = 400000
	h := Hex{1}
	src := words(5)
	w, ht := 1.0, 2/sqrt3 // the cell fits in [-1/2, 1/2] x [-1/sqrt3, 1/sqrt3]
	kept, m2 := 0.0, 0.0
	for range n {
		x, y := (unit(src.Uint64())-0.5)*w, (unit(src.Uint64())-0.5)*ht
		if i, j := h.Nearest(x, y); i == 0 && j == 0 {
			kept++
			m2 += (x*x + y*y) / 2
		}
	}
	areaEst := kept / n * w * ht
	if a := sqrt3 / 2; math.Abs(areaEst-a) > 0.005 {
		t.Errorf("cell area %v, want %v", areaEst, a)
	}
	if v := h.SecondMoment(); math.Abs(m2/kept-v) > 0.001 {
		t.Errorf("per-dimension second moment %v, want %v", m2/kept, v)
	}
	if g := h.SecondMoment() / (sqrt3 / 2); math.Abs(g-HexG) > 1e-15 {
		t.Errorf("G = %v, want %v", g, HexG)
	}
	if g := (Scalar{3}).SecondMoment() / 9; math.Abs(g-ScalarG) > 1e-15 {
		t.Errorf("scalar G = %v, want 1/12", g)
	}
}

// TestLatticeHexCoverHoldsEveryOutput quantizes points of the square plus a
// dither, with the points pushed to the square's edges and corners, and
// checks that every output has an index, which makes the quantizer
// never overloaded.
func TestLatticeHexCoverHoldsEveryOutput(t *testing.T) {
	src := words(6)
	for _, pts := range []int{16, 64, 256, 4096} {
		step, err := HexCoverStep(1, pts)
		if err != nil {
			t.Fatal(err)
		}
		c, err := HexCover(step, 1)
		if err != nil {
			t.Fatal(err)
		}
		if c.Len() > pts {
			t.Fatalf("cover of step %v has %d points, want <= %d", step, c.Len(), pts)
		}
		h := Hex{step}
		edge := func() float64 {
			u := unit(src.Uint64())
			switch src.Uint64() % 3 {
			case 0:
				return -1
			case 1:
				return 1
			}
			return 2*u - 1
		}
		for range 50000 {
			x, y := edge(), edge()
			dx, dy := h.Dither(src.Uint64(), src.Uint64())
			i, j := h.Nearest(x+dx, y+dy)
			if _, ok := c.Index(i, j); !ok {
				t.Fatalf("%d points: output (%d, %d) of (%v, %v) is outside the cover", pts, i, j, x, y)
			}
		}
	}
}

func TestLatticeCodeIndexRoundTrip(t *testing.T) {
	for m := int64(0); m <= 6; m++ {
		c, err := HexBall(m)
		if err != nil {
			t.Fatal(err)
		}
		if c.Len() != int(1+3*m*(m+1)) {
			t.Fatalf("ball %d has %d points, want %d", m, c.Len(), 1+3*m*(m+1))
		}
		if r := BallRadius(c.Len()); r != m {
			t.Errorf("BallRadius(%d) = %d, want %d", c.Len(), r, m)
		}
		seen := 0
		for i := -2 * m; i <= 2*m; i++ {
			for j := -2 * m; j <= 2*m; j++ {
				idx, ok := c.Index(i, j)
				if ok != (Hops(i, j) <= m) {
					t.Fatalf("ball %d: Index(%d, %d) ok = %v at %d hops", m, i, j, ok, Hops(i, j))
				}
				if !ok {
					continue
				}
				seen++
				if a, b := c.At(idx); a != i || b != j {
					t.Fatalf("ball %d: At(Index(%d, %d)) = (%d, %d)", m, i, j, a, b)
				}
			}
		}
		if seen != c.Len() {
			t.Errorf("ball %d: %d points indexed, want %d", m, seen, c.Len())
		}
	}
}

func TestLatticeHopsRingsAndProject(t *testing.T) {
	ring := map[int64]int64{}
	for i := int64(-12); i <= 12; i++ {
		for j := int64(-12); j <= 12; j++ {
			h := Hops(i, j)
			ring[h]++
			for _, m := range []int64{1, 2, 5} {
				a, b := Project(i, j, m)
				want := min(h, m)
				if got := Hops(a, b); got != want {
					t.Fatalf("Project(%d, %d, %d) = (%d, %d) at %d hops, want %d", i, j, m, a, b, got, want)
				}
				if h <= m && (a != i || b != j) {
					t.Fatalf("Project moved the inside point (%d, %d)", i, j)
				}
			}
		}
	}
	for k := int64(1); k <= 12; k++ {
		if ring[k] != 6*k {
			t.Errorf("%d points at %d hops, want %d", ring[k], k, 6*k)
		}
	}
}
