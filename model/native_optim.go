package model

import "math"

// updater returns the optimizer's update of elements [lo, hi) of tensor
// i, in the float32 operations and order of gomlxEngine.update (so the
// engines round alike), reading the weights and adam's step scalars from
// e.cur. It is built once per tensor: a step calls it without allocating.
// Weight decay adds w*wd to the gradient first, in place (the gradient is
// not read again before the next backward pass overwrites it).
func (e *nativeEngine) updater(i int) func(lo, hi int) {
	o := e.opt
	lr, wd := float32(o.LR), float32(o.WeightDecay)
	grad := e.grads[i]
	decay := func(w, g []float32) {
		if wd > 0 {
			w = w[:len(g)]
			for j := range g {
				g[j] += w[j] * wd
			}
		}
	}
	switch {
	case o.Name == "adam":
		first, second := e.state[i], e.state[len(e.m.specs)+i]
		b1, c1 := float32(adamBeta1), float32(1-adamBeta1)
		b2, c2 := float32(adamBeta2), float32(1-adamBeta2)
		eps := float32(adamEps)
		return func(lo, hi int) {
			g := grad[lo:hi]
			w, m, v := e.cur.w[i][lo:hi][:len(g)], first[lo:hi][:len(g)], second[lo:hi][:len(g)]
			lrt, bc2 := e.cur.lrt, e.cur.bc2
			decay(w, g)
			for j, gj := range g {
				m[j] = m[j]*b1 + gj*c1
				v[j] = v[j]*b2 + gj*gj*c2
				denom := float32(math.Sqrt(float64(v[j])))/bc2 + eps
				w[j] -= lrt * (m[j] / denom)
			}
		}
	case o.Momentum > 0:
		velocity, mom := e.state[i], float32(o.Momentum)
		return func(lo, hi int) {
			g := grad[lo:hi]
			w, v := e.cur.w[i][lo:hi][:len(g)], velocity[lo:hi][:len(g)]
			decay(w, g)
			for j, gj := range g {
				v[j] = v[j]*mom + gj
				w[j] -= v[j] * lr
			}
		}
	default:
		return func(lo, hi int) {
			g := grad[lo:hi]
			w := e.cur.w[i][lo:hi][:len(g)]
			decay(w, g)
			for j, gj := range g {
				w[j] -= gj * lr
			}
		}
	}
}
