package reproduce

import (
	"context"
	"fmt"
	"math"

	"github.com/fedpq/fedpq/corr"
	"github.com/fedpq/fedpq/mech"
)

// mvu-dme: MVU (Chaudhuri, Guo, Rabbat, UAI 2022) in scalar distributed
// mean estimation, against randomized response and Laplace.
//
// The notes in papers/ stop before the paper's experiments, so the setting
// is that of the authors' public code (facebookresearch/dp_compression,
// README "Scalar Distributed Mean Estimation" and mean_estimation_single.py):
// eps in {1, 3, 5}; MVU with 3 input bits and a budget of 3 bits (and of 1
// bit); inputs x at 50 points of linspace(-1, 1); 10^5 samples per point;
// the variance of one client's decoded output at each x. The baselines are
// the script's: "RR", randomized response on each of the b bits of the
// input rounded to 2^b levels, at eps/b per bit; "RAPPOR", which in that
// code is generalized (k-ary) randomized response on the 2^b levels with
// its unbiased decoding; and Laplace, unquantized.

func init() {
	register(Experiment{
		Name:       "mvu-dme",
		Paper:      "MVU",
		Reproduces: "scalar DME (the authors' mean_estimation_single.py): variance against x for MVU, randomized response and Laplace",
		What:       "one client's output variance at 50 inputs in [-1, 1], eps 1, 3, 5: mvu (3 bits and 1 bit) against bitwise and k-ary randomized response (3 bits) and laplace (32 bits)",
		QuickTime:  "0.5 s",
		FullTime:   "3 s",
		run:        runMVUDME,
	})
}

// MVURow is one mechanism at one eps of mvu-dme. Variances are of one
// client's output for inputs in [-1, 1].
type MVURow struct {
	Epsilon   float64 `json:"epsilon"`
	Mechanism string  `json:"mechanism"`
	Bits      float64 `json:"bits_per_value"`
	// Mean over the 50 inputs of the measured variance, its standard
	// error, and the exact mean; WorstExact the largest exact variance.
	Measured   float64 `json:"measured"`
	MeasuredSE float64 `json:"measured_se"`
	Exact      float64 `json:"exact"`
	WorstExact float64 `json:"worst_exact"`
}

var mvuEps = []float64{1, 3, 5}

// scalarMech is one mechanism of mvu-dme on inputs in [-1, 1]: encode n
// copies of x and decode them one by one, and the exact variance at x.
type scalarMech struct {
	name  string
	bits  float64
	run   func(x float64, n int, src func(purpose string) *corr.Stream) ([]float64, error)
	exact func(x float64) float64
}

func runMVUDME(ctx context.Context, o Options) (*Result, error) {
	samples := 100000
	if o.Quick {
		samples = 10000
	}
	xs := linspace(-1, 1, 50)
	secret := corr.SeedSecret(o.seed() + 2<<32)
	rg := mech.Range{Center: 0, Radius: 1}
	var rows []MVURow
	for ei, eps := range mvuEps {
		mechs, err := mvuMechanisms(eps, rg, o.MVUCache)
		if err != nil {
			return nil, err
		}
		for mi, m := range mechs {
			meas := make([]float64, len(xs))
			vars := make([]float64, len(xs))
			err := parallel(ctx, len(xs), func(i int) error {
				src := func(purpose string) *corr.Stream {
					return corr.Derive(secret, "reproduce-mvu-"+purpose, uint64(ei), uint64(mi), uint64(i))
				}
				ys, err := m.run(xs[i], samples, src)
				if err != nil {
					return err
				}
				sq := make([]float64, len(ys))
				for k, y := range ys {
					sq[k] = (y - xs[i]) * (y - xs[i])
				}
				meas[i], vars[i] = meanStderr(sq)
				vars[i] *= vars[i]
				return nil
			})
			if err != nil {
				return nil, fmt.Errorf("%s: %w", m.name, err)
			}
			row := MVURow{Epsilon: eps, Mechanism: m.name, Bits: m.bits}
			var v float64
			for i, x := range xs {
				row.Measured += meas[i]
				v += vars[i]
				e := m.exact(x)
				row.Exact += e
				row.WorstExact = max(row.WorstExact, e)
			}
			n := float64(len(xs))
			row.Measured /= n
			row.MeasuredSE = math.Sqrt(v) / n
			row.Exact /= n
			rows = append(rows, row)
		}
		o.progress("mvu-dme: eps %g done", eps)
	}

	t := newTable("eps", "mechanism", ">bits", ">variance, mean over x: fedpq measured", ">exact", ">worst over x, exact", ">variance / MVU b=3's")
	find := func(eps float64, name string) MVURow {
		for _, r := range rows {
			if r.Epsilon == eps && r.Mechanism == name {
				return r
			}
		}
		return MVURow{}
	}
	strict, noWorse := true, true
	var sd, nd []string
	for _, eps := range mvuEps {
		base := find(eps, "MVU b=3")
		for _, r := range rows {
			if r.Epsilon != eps {
				continue
			}
			t.add(g(eps), r.Mechanism, g(r.Bits), pm(r.Measured, r.MeasuredSE), g(r.Exact), g(r.WorstExact), fmt.Sprintf("%.3g", r.Measured/base.Measured))
		}
		for _, name := range []string{"RR b=3 (bitwise)", "MVU b=1", "Laplace"} {
			r := find(eps, name)
			if !(base.Measured+2*base.MeasuredSE < r.Measured-2*r.MeasuredSE) {
				strict = false
			}
			sd = append(sd, fmt.Sprintf("eps %g: %.3g against %s %.3g", eps, base.Measured, name, r.Measured))
		}
		k := find(eps, "k-RR b=3")
		se := math.Hypot(base.MeasuredSE, k.MeasuredSE)
		if base.Measured > k.Measured+2*se {
			noWorse = false
		}
		how := "tie"
		if base.Measured < k.Measured-2*se {
			how = "lower"
		}
		nd = append(nd, fmt.Sprintf("eps %g: %.3g against %.3g (%s; exact %.6g against %.6g)", eps, base.Measured, k.Measured, how, base.Exact, k.Exact))
	}
	checks := []Check{
		{Claim: "MVU with 3 bits has a lower variance than bitwise randomized response (3 bits), 1-bit MVU and Laplace (32 bits), at every eps", Holds: strict, Detail: "mean over x, 2 standard errors apart: " + joinShort(sd)},
		{Claim: "MVU with 3 bits is no worse than k-ary randomized response with 3 bits (the script's \"RAPPOR\"), at every eps", Holds: noWorse, Detail: "mean over x, within 2 standard errors or lower: " + joinShort(nd)},
	}
	return &Result{
		Settings: fmt.Sprintf("Inputs x at 50 points of linspace(-1, 1) (range c = 0, r = 1); %d samples per point; eps %v. "+
			"MVU: fedpq's mvu with 3 input bits and budget 3 (and 1) bits; RR: the bits of x rounded to 8 levels, each through binary randomized response at eps/3; "+
			"k-RR: x rounded to 8 levels, then 8-ary randomized response, decoded without bias; Laplace: fedpq's laplace (scale 2r/eps, 32-bit floats).", samples, mvuEps),
		Table:  t.String(),
		Checks: checks,
		Notes: []string{
			"No numbers of the MVU paper are in the text available here: papers/mvu-privacy-aware-compression-notes.txt stops before the mechanism, and the paper's scalar experiment is a figure. The setting is the one in the authors' public code (facebookresearch/dp_compression: README and mean_estimation_single.py), and the claim tested is the paper's summary that its mechanism gives better utility for the same privacy and communication.",
			"The authors' plotting script draws the Laplace reference at 2/eps^2, the variance for inputs in [0, 1] (sensitivity 1), while it scales the other curves to [-1, 1] (times 4). Here every variance is for inputs in [-1, 1]: Laplace with sensitivity 2 has variance 8/eps^2.",
			"RR and k-RR are implemented in this package after the authors' code (RandomizedResponseMechanism, and RAPPORMechanism, which is k-ary randomized response): they are baselines of this experiment, not fedpq mechanisms. The script's CLDP baseline is not reproduced.",
			"fedpq's mvu matrix is solved by its own LP search (docs/mvu.md), not the authors' trust-region solver, and sampled with integer probabilities; the authors' solved designs are not available here to compare. k-ary randomized response on 2^3 levels is a feasible point of the MVU program with 3 input bits and 3 output bits, so MVU can only match or beat it; at eps 5 fedpq's solved design has k-RR's variance (the exact columns agree to 6 digits, up to the 1e-6 of eps the solver keeps in reserve). Whether a better design exists there is not settled here.",
		},
		Rows: rows,
	}, nil
}

// mvuMechanisms returns the mechanisms of mvu-dme at eps.
func mvuMechanisms(eps float64, rg mech.Range, cache string) ([]scalarMech, error) {
	var out []scalarMech
	for _, budget := range []int{3, 1} {
		c := mech.DefaultConfig()
		c.Epsilon, c.InputBits, c.BudgetBits, c.CacheDir = eps, 3, budget, cache
		m, err := mech.New("mvu", c)
		if err != nil {
			return nil, err
		}
		out = append(out, fedpqScalar(fmt.Sprintf("MVU b=%d", budget), m, rg))
	}
	out = append(out, levelScalar("RR b=3 (bitwise)", bitwiseRR{b: 3, eps: eps}))
	out = append(out, levelScalar("k-RR b=3", newKRR(3, eps)))
	c := mech.DefaultConfig()
	c.Epsilon = eps
	m, err := mech.New("laplace", c)
	if err != nil {
		return nil, err
	}
	return append(out, fedpqScalar("Laplace", m, rg)), nil
}

// fedpqScalar runs a fedpq mechanism as one client encoding n copies of x,
// decoded by the server's Sum (whose mean is that client's output).
func fedpqScalar(name string, m mech.Mechanism, rg mech.Range) scalarMech {
	return scalarMech{
		name: name,
		bits: float64(m.Bits(1024)) / 1024,
		run: func(x float64, n int, src func(string) *corr.Stream) ([]float64, error) {
			w := make([]float32, n)
			for i := range w {
				w[i] = float32(x)
			}
			p, err := m.Encode(nil, w, rg, mech.Slot{Private: src("private")})
			if err != nil {
				return nil, err
			}
			sum, err := m.NewSum(n, rg)
			if err != nil {
				return nil, err
			}
			if err := sum.Add(p, mech.Slot{}); err != nil {
				return nil, err
			}
			y := make([]float64, n)
			return y, sum.Mean(y)
		},
		exact: func(x float64) float64 { return m.(mech.Variancer).Variance(float64(float32(x)), rg) },
	}
}

// levelMech is a randomizer of inputs in [0, 1] rounded without bias to
// the 2^b levels t_i = i/(2^b - 1), as in the authors' CompressedMechanism.
type levelMech interface {
	levels() int
	// sample returns the decoded output for level i, in [0, 1] units.
	sample(i int, src *corr.Stream) float64
	// second is E[output^2 | level i].
	second(i int) float64
}

// levelScalar runs a levelMech on inputs in [-1, 1]: x maps to (x+1)/2.
func levelScalar(name string, m levelMech) scalarMech {
	split := func(x float64) (int, float64) {
		u := (x + 1) / 2 * float64(m.levels()-1)
		i := min(int(math.Floor(u)), m.levels()-2)
		return i, u - float64(i)
	}
	return scalarMech{
		name: name,
		bits: math.Log2(float64(m.levels())),
		run: func(x float64, n int, src func(string) *corr.Stream) ([]float64, error) {
			s := src("private")
			i, f := split(x)
			y := make([]float64, n)
			for k := range y {
				l := i
				if s.Float64() < f {
					l++
				}
				y[k] = 2*m.sample(l, s) - 1
			}
			return y, nil
		},
		exact: func(x float64) float64 {
			i, f := split(x)
			t := (x + 1) / 2
			return 4 * ((1-f)*m.second(i) + f*m.second(i+1) - t*t)
		},
	}
}

// bitwiseRR is the authors' RandomizedResponseMechanism: the b bits of the
// level go through binary randomized response at eps/b each (flip with
// probability 1/(1 + e^(eps/b))), so the message is eps-LDP by
// composition; each received bit z is decoded to (z e^(eps/b) - (1-z)) /
// (e^(eps/b) - 1), unbiased for the bit, and the level to the weighted sum.
type bitwiseRR struct {
	b   int
	eps float64
}

func (m bitwiseRR) levels() int { return 1 << m.b }

func (m bitwiseRR) flip() float64 { return 1 / (1 + math.Exp(m.eps/float64(m.b))) }

func (m bitwiseRR) sample(i int, src *corr.Stream) float64 {
	e := math.Exp(m.eps / float64(m.b))
	a0, a1 := -1/(e-1), e/(e-1)
	p := m.flip()
	v := 0.0
	for j := m.b - 1; j >= 0; j-- {
		z := i >> j & 1
		if src.Float64() < p {
			z ^= 1
		}
		a := a0
		if z == 1 {
			a = a1
		}
		v += a * float64(int(1)<<j)
	}
	return v / float64(m.levels()-1)
}

// second: each decoded bit has variance e/(e-1)^2 whatever the bit, so
// E[out^2] = t_i^2 + (e/(e-1)^2) (4^b - 1)/3 / (2^b - 1)^2.
func (m bitwiseRR) second(i int) float64 {
	e := math.Exp(m.eps / float64(m.b))
	d := float64(m.levels() - 1)
	t := float64(i) / d
	return t*t + e/((e-1)*(e-1))*(math.Pow(4, float64(m.b))-1)/3/(d*d)
}

// kRR is k-ary randomized response on the k = 2^b levels: the level is kept
// with probability e^eps/(k + e^eps - 1), else replaced by one of the other
// k-1 uniformly; symbol j decodes to a_j = (t_j - q/2)/(1 - q), q = k/(k +
// e^eps - 1), which makes it unbiased (the authors' "RAPPOR" solves P a = t
// for the same a). eps-LDP: the ratio of any two rows' probabilities is at
// most e^eps.
type kRR struct {
	k          int
	keep, q    float64
	alpha, sec []float64
}

func newKRR(b int, eps float64) kRR {
	k := 1 << b
	e := math.Exp(eps)
	m := kRR{k: k, keep: e / (float64(k) + e - 1), q: float64(k) / (float64(k) + e - 1)}
	m.alpha = make([]float64, k)
	for j := range m.alpha {
		m.alpha[j] = (float64(j)/float64(k-1) - m.q/2) / (1 - m.q)
	}
	other := 1 / (float64(k) + e - 1)
	m.sec = make([]float64, k)
	for i := range m.sec {
		for j, a := range m.alpha {
			p := other
			if j == i {
				p = m.keep
			}
			m.sec[i] += p * a * a
		}
	}
	return m
}

func (m kRR) levels() int { return m.k }

func (m kRR) sample(i int, src *corr.Stream) float64 {
	if src.Float64() < m.keep {
		return m.alpha[i]
	}
	j := int(corr.Below(src, uint64(m.k-1)))
	if j >= i {
		j++
	}
	return m.alpha[j]
}

func (m kRR) second(i int) float64 { return m.sec[i] }
