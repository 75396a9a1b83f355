package robust

import (
	"fmt"
	"math"
	"slices"
	"strconv"
)

// NormBounded scales each message down to L2 norm at most C (a message of
// norm L > C is multiplied by C/L) and averages them: one client then
// moves the mean by at most C/n in norm. Norms are about the origin, so
// the messages should be updates (differences from the global model),
// not weights. For one-bit messages every message has the same norm (see
// the package doc), so the bound scales them all alike.
//
// C = 0 takes the median of the round's norms as the bound, which needs
// no tuning: while fewer than half the clients attack, it lies between
// the smallest and the largest honest norm, so no client moves the mean
// by more than the largest honest norm over n, and honest messages below
// the median pass unchanged.
type NormBounded struct {
	C float64
}

func (b NormBounded) String() string {
	if b.C == 0 {
		return "norm-bounded"
	}
	return "norm-bounded:" + strconv.FormatFloat(b.C, 'g', -1, 64)
}

func (b NormBounded) validate() error {
	if !(b.C >= 0) || math.IsInf(b.C, 0) {
		return fmt.Errorf("robust: norm-bounded: C = %v must be positive and finite (the largest L2 norm of a message; none: the median norm)", b.C)
	}
	return nil
}

func (b NormBounded) Aggregate(rows [][]float32, out []float64) error {
	if err := b.validate(); err != nil {
		return err
	}
	if err := checkShape(rows, len(out)); err != nil {
		return err
	}
	norms := make([]float64, len(rows))
	for i, r := range rows {
		var ss float64
		for _, v := range r {
			ss += float64(v) * float64(v)
		}
		if math.IsNaN(ss) || math.IsInf(ss, 0) {
			return nonFinite(rows)
		}
		norms[i] = math.Sqrt(ss)
	}
	c := b.C
	if c == 0 {
		sorted := slices.Clone(norms)
		slices.Sort(sorted)
		n := len(sorted)
		c = (sorted[(n-1)/2] + sorted[n/2]) / 2
	}
	scale := make([]float64, len(rows))
	for i, l := range norms {
		scale[i] = 1 // a message within the bound, a zero one too
		if l > c {
			scale[i] = c / l
		}
	}
	return average(rows, scale, out)
}
