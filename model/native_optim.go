package model

import "math"

// updater returns the optimizer's update of elements [lo, hi) of tensor
// i, in the float32 operations and order of gomlxEngine.update (so the
// engines round alike), reading the weights and adam's step scalars from
// e.cur. It is built once per tensor: a step calls it without allocating.
func (e *nativeEngine) updater(i int) func(lo, hi int) {
	o := e.opt
	lr, wd := float32(o.LR), float32(o.WeightDecay)
	grad := e.grads[i]
	// decayed is the gradient with L2 weight decay.
	decayed := func(g, w float32) float32 {
		if wd > 0 {
			return g + w*wd
		}
		return g
	}
	switch {
	case o.Name == "adam":
		first, second := e.state[i], e.state[len(e.m.specs)+i]
		b1, c1 := float32(adamBeta1), float32(1-adamBeta1)
		b2, c2 := float32(adamBeta2), float32(1-adamBeta2)
		eps := float32(adamEps)
		return func(lo, hi int) {
			w, g := e.cur.w[i][lo:hi], grad[lo:hi]
			m, v := first[lo:hi], second[lo:hi]
			lrt, bc2 := e.cur.lrt, e.cur.bc2
			for j := range w {
				gj := decayed(g[j], w[j])
				m[j] = m[j]*b1 + gj*c1
				v[j] = v[j]*b2 + gj*gj*c2
				denom := float32(math.Sqrt(float64(v[j])))/bc2 + eps
				w[j] -= lrt * (m[j] / denom)
			}
		}
	case o.Momentum > 0:
		velocity, mom := e.state[i], float32(o.Momentum)
		return func(lo, hi int) {
			w, g, v := e.cur.w[i][lo:hi], grad[lo:hi], velocity[lo:hi]
			for j := range w {
				v[j] = v[j]*mom + decayed(g[j], w[j])
				w[j] -= v[j] * lr
			}
		}
	default:
		return func(lo, hi int) {
			w, g := e.cur.w[i][lo:hi], grad[lo:hi]
			for j := range w {
				w[j] -= decayed(g[j], w[j]) * lr
			}
		}
	}
}
