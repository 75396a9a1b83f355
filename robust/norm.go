package robust

import (
	"fmt"
	"math"
	"strconv"
)

// NormBounded scales each message down to L2 norm at most C (a message of
// norm L > C is multiplied by C/L) and averages them: one client then
// moves the mean by at most C/n in norm. Norms are about the origin, so
// the messages should be updates (differences from the global model),
// not weights. For one-bit messages every message has the same norm (see
// the package doc), so the bound scales them all alike.
type NormBounded struct {
	C float64
}

func (b NormBounded) String() string {
	return "norm-bounded:" + strconv.FormatFloat(b.C, 'g', -1, 64)
}

func (b NormBounded) validate() error {
	if !(b.C > 0) || math.IsInf(b.C, 0) {
		return fmt.Errorf("robust: norm-bounded: C = %v must be positive and finite (the largest L2 norm of a message)", b.C)
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
	scale := make([]float64, len(rows))
	for i, r := range rows {
		var ss float64
		for _, v := range r {
			ss += float64(v) * float64(v)
		}
		if math.IsNaN(ss) || math.IsInf(ss, 0) {
			return nonFinite(rows)
		}
		scale[i] = min(1, b.C/math.Sqrt(ss)) // 1 for a zero message
	}
	return average(rows, scale, out)
}
