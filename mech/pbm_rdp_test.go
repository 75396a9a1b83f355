package mech

import (
	"fmt"
	"math"
	"testing"
)

// bernoulliSum is the law of the sum of independent Bernoullis of
// probabilities q, by direct convolution (the tests' own, independent of
// pbmAccount's recurrence).
func bernoulliSum(q []float64) []float64 {
	law := []float64{1}
	for _, p := range q {
		next := make([]float64, len(law)+1)
		for k, v := range law {
			next[k] += v * (1 - p)
			next[k+1] += v * p
		}
		law = next
	}
	return law
}

// exactDivergences is D_alpha(P_beta || P_0) and D_alpha(P_0 || P_beta) of
// one coordinate, the target's m trials at 1/2+beta or fair and the others'
// at probabilities q, computed directly.
func exactDivergences(alpha float64, m int, beta float64, q []float64) (fwd, rev float64) {
	tp, t0 := make([]float64, m), make([]float64, m)
	for i := range m {
		tp[i], t0[i] = 0.5+beta, 0.5
	}
	P := bernoulliSum(append(append([]float64(nil), q...), tp...))
	Q := bernoulliSum(append(append([]float64(nil), q...), t0...))
	var sf, sr float64
	for z := range P {
		if P[z] == 0 || Q[z] == 0 {
			continue
		}
		l := math.Log(P[z] / Q[z])
		sf += Q[z] * math.Exp(alpha*l)
		sr += Q[z] * math.Exp((1-alpha)*l)
	}
	return math.Log(sf) / (alpha - 1), math.Log(sr) / (alpha - 1)
}

// TestPBMVertexLaw: the vertex laws of pbmAccount (a three-term recurrence
// from the mode outward) match direct convolution to a relative 1e-12
// wherever the law is above 1e-250, for others' trials from 0 to 300, and
// the mass outside their window is below 1e-290.
func TestPBMVertexLaw(t *testing.T) {
	for _, N := range []int{0, 1, 2, 5, 40, 300} {
		for _, theta := range []float64{0.05, 0.25, 0.4} {
			a := newPBMAccount(N+1, 1, theta)
			r, rho := make([]float64, N+1), make([]float64, max(N, 1))
			for _, j := range []int{0, N / 3, N / 2, N} {
				q := make([]float64, N)
				for i := range q {
					q[i] = 0.5 - theta
					if i < j {
						q[i] = 0.5 + theta
					}
				}
				want := bernoulliSum(q)
				lo, hi := a.vertexLaw(r, rho, j)
				out := 0.0
				for s, v := range want {
					if s < lo || s > hi {
						out += v
						continue
					}
					if v > 1e-250 && math.Abs(r[s]/v-1) > 1e-12 {
						t.Fatalf("N=%d theta=%v j=%d: law(%d) = %v, direct %v", N, theta, j, s, r[s], v)
					}
				}
				if out > 1e-290 {
					t.Errorf("N=%d theta=%v j=%d: mass %v outside the window [%d, %d]", N, theta, j, out, lo, hi)
				}
			}
		}
	}
}

// TestPBMRDPExact checks pbmAccount's bound s on the worst coordinate's
// divergence per squared bias against divergences computed directly from
// the exact laws, for small settings (clients n, trials m, bias theta) at
// orders 1.5 to 16: at 60 biases from theta/10^4 to theta, both orders of
// the pair, for the others' probabilities at every vertex and at 20
// random points of [1/2-theta, 1/2+theta]^((n-1)m), D <= s beta^2 (to
// 1e-9); no random point exceeds the vertices' worst (the reduction to
// vertices); and the bound is within 2% of the worst exact value seen
// (it is the supremum up to pbmTol and the grid). For a vector whose
// biases' squares sum to U, the divergence is at most s U, which the
// encoder's bound gives RDP.
func TestPBMRDPExact(t *testing.T) {
	for _, tc := range []struct {
		n, m  int
		theta float64
	}{{2, 1, 0.25}, {3, 1, 0.25}, {3, 2, 0.25}, {5, 1, 0.1}, {4, 3, 0.2}, {6, 2, 0.15}} {
		a := newPBMAccount(tc.n, tc.m, tc.theta)
		N := (tc.n - 1) * tc.m
		src := stream("pbm-exact", uint64(tc.n), uint64(tc.m))
		var random [][]float64
		for range 20 {
			q := make([]float64, N)
			for i := range q {
				q[i] = 0.5 + tc.theta*(2*src.Float64()-1)
			}
			random = append(random, q)
		}
		for _, alpha := range []float64{1.5, 2, 5, 16} {
			what := fmt.Sprintf("n=%d m=%d theta=%v alpha=%v", tc.n, tc.m, tc.theta, alpha)
			seen, s := a.slope(alpha)
			if !(seen <= s) {
				t.Errorf("%s: seen %v above the bound %v", what, seen, s)
			}
			worst := 0.0
			var betas []float64
			for i := range 40 {
				betas = append(betas, tc.theta*math.Pow(1e-4, float64(i)/39))
			}
			for i := 1; i <= 20; i++ {
				betas = append(betas, tc.theta*float64(i)/20)
			}
			for _, beta := range betas {
				vertexWorst := 0.0
				for j := 0; j <= N; j++ {
					q := make([]float64, N)
					for i := range q {
						q[i] = 0.5 - tc.theta
						if i < j {
							q[i] = 0.5 + tc.theta
						}
					}
					for _, sign := range []float64{1, -1} {
						f, r := exactDivergences(alpha, tc.m, sign*beta, q)
						vertexWorst = max(vertexWorst, f, r)
					}
				}
				if vertexWorst > s*beta*beta*(1+1e-9) {
					t.Errorf("%s beta=%.3g: exact divergence %v above the bound %v", what, beta, vertexWorst, s*beta*beta)
				}
				worst = max(worst, vertexWorst/(beta*beta))
				for _, q := range random {
					f, r := exactDivergences(alpha, tc.m, beta, q)
					if max(f, r) > vertexWorst*(1+1e-9) {
						t.Errorf("%s beta=%.3g: a point of the box gives %v, above the vertices' %v", what, beta, max(f, r), vertexWorst)
					}
				}
			}
			t.Logf("%s: bound %.5g, exact worst %.5g (%.4f)", what, s, worst, s/worst)
			if s > 1.02*worst {
				t.Errorf("%s: bound %v is more than 2%% above the exact worst %v", what, s, worst)
			}
		}
	}
}

// TestPBMRDPGaussian: where the bias is small the bound tends to the
// Gaussian's alpha/(2 z^2) at the same noise multiplier (20 clients, one
// trial, 2^22 parameters: theta 0.0033, within 0.5%); in the settings of
// issue 32 (100 clients, 6,422 and 100,000 parameters, z = 1) it is at
// least the Gaussian's (the others' trials at the extremes hold less
// variance than fair ones) and, at 6,422 parameters and orders up to 16,
// at most 1.11 times it with one trial, 1.055 with two (pbm's doc: 1.07 to
// 1.10 and 1.035 to 1.05 at the clip of 2 root mean squares); at 100,000
// parameters at most 1.01: the log is the table of pbm's doc.
func TestPBMRDPGaussian(t *testing.T) {
	mm := pbmNew(t, 20, 1, 1)
	for _, alpha := range []float64{2, 8, 32} {
		r, err := mm.RDP(alpha, 1<<22)
		if err != nil {
			t.Fatal(err)
		}
		if g := alpha / 2; r < g || r > 1.005*g {
			t.Errorf("theta 0.0033 alpha %v: RDP %v, Gaussian %v", alpha, r, g)
		}
	}
	if testing.Short() {
		return
	}
	for _, m := range []int{1, 2} {
		for _, d := range []int{6422, 100000} {
			mm := pbmNew(t, 100, 1, m)
			p, err := mm.params(d)
			if err != nil {
				t.Fatal(err)
			}
			line := fmt.Sprintf("n=100 m=%d d=%d z=1 theta=%.4f k=%.2f, RDP/Gaussian:", m, d, p.theta, p.k)
			for _, alpha := range []float64{1.5, 2, 4, 8, 16, 32, 64} {
				r, err := mm.RDP(alpha, d)
				if err != nil {
					t.Fatal(err)
				}
				ratio := r / (alpha / 2)
				line += fmt.Sprintf(" %g: %.3f", alpha, ratio)
				limit := map[int]float64{1: 1.11, 2: 1.055}[m]
				if d == 100000 {
					limit = 1.01
				}
				if ratio < 1 || (alpha <= 16 && ratio > limit) {
					t.Errorf("n=100 m=%d d=%d alpha=%v: RDP %v is %.3f times the Gaussian's", m, d, alpha, r, ratio)
				}
			}
			t.Log(line)
		}
	}
}

// TestPBMRDPMonotone: RDP grows with the order and falls as the noise
// multiplier grows (10 clients, one trial, 1,000 parameters).
func TestPBMRDPMonotone(t *testing.T) {
	prev := map[float64]float64{}
	for _, z := range []float64{0.7, 1, 1.5} {
		mm := pbmNew(t, 10, z, 1)
		last := 0.0
		for _, alpha := range []float64{1.5, 2, 3, 5, 8, 16, 32} {
			r, err := mm.RDP(alpha, 1000)
			if err != nil {
				t.Fatal(err)
			}
			if r < last {
				t.Errorf("z=%v alpha=%v: RDP %v below the previous order's %v", z, alpha, r, last)
			}
			last = r
			if v, ok := prev[alpha]; ok && r > v {
				t.Errorf("z=%v alpha=%v: RDP %v above the smaller z's %v", z, alpha, r, v)
			}
			prev[alpha] = r
		}
	}
}
