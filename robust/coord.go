package robust

import (
	"fmt"
	"math"
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
	return parallel(len(out), func() func(lo, hi int) error {
		return func(lo, hi int) error {
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
		}
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

func median(col []uint32) float64 {
	h := len(col) / 2
	nth(col, h)
	if len(col)%2 == 1 {
		return value(col[h])
	}
	return (value(slices.Max(col[:h])) + value(col[h])) / 2
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
	return columns(rows, out, func(col []uint32) float64 { return trimmedMean(col, k) })
}

// trimmedMean is the mean of col without its k smallest and k largest
// values (2k < len(col)); it reorders col.
func trimmedMean(col []uint32, k int) float64 {
	if k > 0 {
		m := len(col) - 2*k
		nth(col, k) // col[:k] are the k smallest
		col = col[k:]
		nth(col, m) // col[:m] the m smallest of the rest
		col = col[:m]
	}
	var s float64
	for _, v := range col {
		s += value(v)
	}
	return s / float64(len(col))
}

// columns sets out[j] = f(column j of rows), in parallel over blocks of
// coordinates. The column holds the values' keys (see key); f may
// reorder it. Columns are gathered 16 at a time, one cache line of each
// row, so that a row is read once per 16 columns rather than once per
// column.
func columns(rows [][]float32, out []float64, f func(col []uint32) float64) error {
	const tile = 16
	n := len(rows)
	return parallel(len(out), func() func(lo, hi int) error {
		buf := make([]uint32, tile*n)
		return func(lo, hi int) error {
			for j0 := lo; j0 < hi; j0 += tile {
				w := min(tile, hi-j0)
				var bad uint32 // the sign bit is set by an exponent of all ones: NaN or Inf
				for i, r := range rows {
					for jj, v := range r[j0 : j0+w] {
						bad |= (math.Float32bits(v)&0x7f800000 + 0x00800000) & 0x80000000
						buf[jj*n+i] = key(v)
					}
				}
				if bad != 0 {
					return nonFinite(rows)
				}
				for jj := range w {
					out[j0+jj] = f(buf[jj*n : (jj+1)*n])
				}
			}
			return nil
		}
	})
}
