package robust

import (
	"fmt"
	"math"
	"math/bits"
	"slices"
	"strconv"
)

// Mean is the plain mean of the messages: the rule of a run without a
// robust aggregator, here so that it can be compared with the others on
// the same messages. One client moves it by its message over n.
type Mean struct{}

func (Mean) String() string { return "mean" }

func (Mean) Aggregate(rows [][]float32, out []float64) error {
	if err := checkShape(rows, len(out)); err != nil {
		return err
	}
	return average(rows, nil, out)
}

// average writes the mean of scale[i]*rows[i] into out (scale nil: 1),
// adding the rows in order.
func average(rows [][]float32, scale []float64, out []float64) error {
	n := float64(len(rows))
	return parallel(len(out), func(lo, hi int) error {
		o := out[lo:hi]
		clear(o)
		for i, r := range rows {
			if scale == nil {
				for j, v := range r[lo:hi] {
					o[j] += float64(v)
				}
				continue
			}
			for j, v := range r[lo:hi] {
				o[j] += scale[i] * float64(v)
			}
		}
		for j := range o {
			o[j] /= n
			if math.IsNaN(o[j]) || math.IsInf(o[j], 0) {
				return nonFinite(rows)
			}
		}
		return nil
	})
}

// Median is the coordinate-wise median: per coordinate, the middle value,
// or the mean of the two middle values when n is even. It tolerates up to
// ceil(n/2)-1 arbitrary messages per coordinate (its output stays within
// the honest values' range), and for two-valued (one-bit) messages it is
// the majority's value: see the package doc.
type Median struct{}

func (Median) String() string { return "median" }

func (Median) Aggregate(rows [][]float32, out []float64) error {
	if err := checkShape(rows, len(out)); err != nil {
		return err
	}
	return columns(rows, out, median)
}

func median(col []float32) float64 {
	h := len(col) / 2
	nth(col, h)
	if len(col)%2 == 1 {
		return float64(col[h])
	}
	return (float64(slices.Max(col[:h])) + float64(col[h])) / 2
}

// TrimmedMean is Yin et al.'s coordinate-wise trimmed mean: per
// coordinate, the k = floor(Beta*n) smallest and k largest values are
// removed and the n-2k others averaged. With at most k Byzantine
// messages its output lies within the honest values' range. Beta is in
// [0, 0.5); at 0 it is the mean.
type TrimmedMean struct {
	Beta float64
}

func (t TrimmedMean) String() string {
	return "trimmed-mean:" + strconv.FormatFloat(t.Beta, 'g', -1, 64)
}

func (t TrimmedMean) validate() error {
	if !(t.Beta >= 0 && t.Beta < 0.5) {
		return fmt.Errorf("robust: trimmed-mean: B = %v must be in [0, 0.5), the fraction trimmed at each end", t.Beta)
	}
	return nil
}

// Trimmed is the number of values removed at each end for n messages:
// floor(Beta*n), with a margin for the rounding of Beta*n (0.3*10 is
// 3, not 2).
func (t TrimmedMean) Trimmed(n int) int {
	return int(math.Floor(t.Beta*float64(n)*(1+1e-12) + 1e-12))
}

func (t TrimmedMean) Aggregate(rows [][]float32, out []float64) error {
	if err := t.validate(); err != nil {
		return err
	}
	if err := checkShape(rows, len(out)); err != nil {
		return err
	}
	k := t.Trimmed(len(rows))
	return columns(rows, out, func(col []float32) float64 { return trimmedMean(col, k) })
}

// trimmedMean is the mean of col without its k smallest and k largest
// values (2k < len(col)); it reorders col.
func trimmedMean(col []float32, k int) float64 {
	if k > 0 {
		m := len(col) - 2*k
		nth(col, k) // col[:k] are the k smallest
		col = col[k:]
		nth(col, m) // col[:m] the m smallest of the rest
		col = col[:m]
	}
	var s float64
	for _, v := range col {
		s += float64(v)
	}
	return s / float64(len(col))
}

// columns sets out[j] = f(column j of rows), in parallel over blocks of
// coordinates, each worker with its own column buffer, which f may
// reorder.
func columns(rows [][]float32, out []float64, f func(col []float32) float64) error {
	return parallel(len(out), func(lo, hi int) error {
		col := make([]float32, len(rows))
		for j := lo; j < hi; j++ {
			bad := false
			for i, r := range rows {
				v := r[j]
				col[i] = v
				bad = bad || v-v != 0 // NaN or Inf
			}
			if bad {
				return nonFinite(rows)
			}
			out[j] = f(col)
		}
		return nil
	})
}

// nth reorders s so that s[k] holds the value a sort would put there,
// with s[:k] <= s[k] <= s[k+1:] (C++'s nth_element): an introselect with
// a three-way partition, so that columns of few distinct values (one-bit
// messages have two) finish in one pass, and a sort where the pivots go
// badly, so that no input takes quadratic time. s must hold no NaN.
func nth(s []float32, k int) {
	depth := 2 * bits.Len(uint(len(s)))
	for len(s) > 16 {
		if depth == 0 {
			slices.Sort(s)
			return
		}
		depth--
		lt, gt := partition3(s, medianOf3(s[0], s[len(s)/2], s[len(s)-1]))
		switch {
		case k < lt:
			s = s[:lt]
		case k >= gt:
			s, k = s[gt:], k-gt
		default:
			return
		}
	}
	insertionSort(s)
}

// partition3 reorders s into s[:lt] < p, s[lt:gt] == p, s[gt:] > p.
func partition3(s []float32, p float32) (lt, gt int) {
	lt, i, gt := 0, 0, len(s)
	for i < gt {
		switch v := s[i]; {
		case v < p:
			s[lt], s[i] = v, s[lt]
			lt++
			i++
		case v > p:
			gt--
			s[gt], s[i] = v, s[gt]
		default:
			i++
		}
	}
	return lt, gt
}

func medianOf3(a, b, c float32) float32 {
	return max(min(a, b), min(max(a, b), c))
}

func insertionSort(s []float32) {
	for i := 1; i < len(s); i++ {
		for j := i; j > 0 && s[j] < s[j-1]; j-- {
			s[j], s[j-1] = s[j-1], s[j]
		}
	}
}
