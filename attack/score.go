package attack

import (
	"fmt"
	"math"
)

// Scores compare a reconstruction with the true batch, image by image,
// after matching each guessed image to a true one.
type Scores struct {
	SSIM, MSE []float64 // per true image
	// Correct is the number of images whose matched guess has the true
	// label.
	Correct int
	// Match[i] is the guessed image matched to true image i.
	Match []int
}

// Score matches the guesses to the true images (the attack returns them
// in no particular order) by the assignment with the largest total SSIM,
// and scores each pair. shape is one example's [H W C] ([F] scores a
// feature vector as one row).
func Score(shape []int, truth Batch, rec Reconstruction) (Scores, error) {
	n := len(truth.Y)
	f := 1
	for _, d := range shape {
		f *= d
	}
	if len(truth.X) != n*f || len(rec.X) != n*f || len(rec.Labels) != n {
		return Scores{}, fmt.Errorf("attack: scoring %d guesses of %d values against %d examples of %d", len(rec.Labels), len(rec.X), n, f)
	}
	if n > 8 {
		return Scores{}, fmt.Errorf("attack: %d images: at most 8 are matched", n)
	}
	h, w, c := 1, f, 1
	if len(shape) == 3 {
		h, w, c = shape[0], shape[1], shape[2]
	}
	img := func(x []float32, i int) []float32 { return x[i*f : (i+1)*f] }
	ssim := make([][]float64, n) // [true][guess]
	for i := range n {
		ssim[i] = make([]float64, n)
		for j := range n {
			ssim[i][j] = SSIM(img(truth.X, i), img(rec.X, j), h, w, c)
		}
	}
	// Every assignment of at most 8! = 40320: exact and cheap.
	best, bestSum := []int(nil), math.Inf(-1)
	perm := make([]int, n)
	for i := range perm {
		perm[i] = i
	}
	permute(perm, 0, func(p []int) {
		s := 0.0
		for i, j := range p {
			s += ssim[i][j]
		}
		if s > bestSum {
			best, bestSum = append(best[:0], p...), s
		}
	})
	sc := Scores{Match: best}
	for i, j := range best {
		sc.SSIM = append(sc.SSIM, ssim[i][j])
		sc.MSE = append(sc.MSE, MSE(img(truth.X, i), img(rec.X, j)))
		if rec.Labels[j] == truth.Y[i] {
			sc.Correct++
		}
	}
	return sc, nil
}

// permute calls visit with every permutation of p[k:] (Heap-free
// recursive swaps; p is restored on return).
func permute(p []int, k int, visit func([]int)) {
	if k == len(p) {
		visit(p)
		return
	}
	for i := k; i < len(p); i++ {
		p[k], p[i] = p[i], p[k]
		permute(p, k+1, visit)
		p[k], p[i] = p[i], p[k]
	}
}

// MSE is the mean squared error of two images.
func MSE(a, b []float32) float64 {
	var s float64
	for i := range a {
		d := float64(a[i]) - float64(b[i])
		s += d * d
	}
	return s / float64(len(a))
}

// ssimWindow and ssimSigma are SSIM's Gaussian window (Wang, Bovik, Sheikh
// and Simoncelli, "Image quality assessment: from error visibility to
// structural similarity", IEEE TIP 2004): 11 x 11, sigma 1.5.
const (
	ssimWindow = 11
	ssimSigma  = 1.5
)

// SSIM is the structural similarity of two HWC images with values in
// [0, 1] (Wang et al. 2004): the mean over channels and over every
// position where the 11 x 11 Gaussian window (sigma 1.5) fits, with C1 =
// 0.01^2 and C2 = 0.03^2, as scikit-image's structural_similarity with
// gaussian_weights=True and data_range=1 computes it. Images smaller than
// the window use one window of their own size. 1 is identical.
func SSIM(a, b []float32, h, w, c int) float64 {
	kh, kw := min(ssimWindow, h), min(ssimWindow, w)
	gh, gw := gauss(kh), gauss(kw)
	const c1, c2 = 0.01 * 0.01, 0.03 * 0.03
	var total float64
	count := 0
	for ch := range c {
		at := func(x []float32, i, j int) float64 { return float64(x[(i*w+j)*c+ch]) }
		for i := 0; i+kh <= h; i++ {
			for j := 0; j+kw <= w; j++ {
				var ma, mb, saa, sbb, sab float64
				for u := range kh {
					for v := range kw {
						g := gh[u] * gw[v]
						x, y := at(a, i+u, j+v), at(b, i+u, j+v)
						ma += g * x
						mb += g * y
						saa += g * x * x
						sbb += g * y * y
						sab += g * x * y
					}
				}
				// Sample covariances, as scikit-image (N/(N-1) on a window of N).
				nw := float64(kh * kw)
				corr := 1.0
				if nw > 1 {
					corr = nw / (nw - 1)
				}
				va, vb, cov := corr*(saa-ma*ma), corr*(sbb-mb*mb), corr*(sab-ma*mb)
				total += (2*ma*mb + c1) * (2*cov + c2) / ((ma*ma + mb*mb + c1) * (va + vb + c2))
				count++
			}
		}
	}
	return total / float64(count)
}

// gauss is a normalized Gaussian window of k taps, sigma ssimSigma.
func gauss(k int) []float64 {
	g := make([]float64, k)
	var s float64
	for i := range g {
		d := float64(i) - float64(k-1)/2
		g[i] = math.Exp(-d * d / (2 * ssimSigma * ssimSigma))
		s += g[i]
	}
	for i := range g {
		g[i] /= s
	}
	return g
}
