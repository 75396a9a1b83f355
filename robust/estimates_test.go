package robust

import (
	"fmt"
	"math"
	"strings"
	"testing"

	"github.com/fedpq/fedpq/corr"
	"github.com/fedpq/fedpq/mech"
)

// messages returns n clients' messages of d parameters under m (an
// Independent mechanism), each input mu, decoded one client at a time as
// the server decodes an upload for a robust rule.
func messages(t *testing.T, m mech.Mechanism, rg mech.Range, n, d int, mu float32, trial uint64) [][]float32 {
	t.Helper()
	w := make([]float32, d)
	for j := range w {
		w[j] = mu
	}
	dec := make([]float64, d)
	rows := make([][]float32, n)
	for i := range rows {
		src := corr.Derive([]byte("robust tests"), m.Name(), trial, uint64(math.Float32bits(mu)), uint64(i))
		payload, err := m.Encode(nil, w, rg, mech.Slot{Private: src})
		if err != nil {
			t.Fatal(err)
		}
		s, err := m.NewSum(d, rg)
		if err != nil {
			t.Fatal(err)
		}
		if err := s.Add(payload, mech.Slot{}); err != nil {
			t.Fatal(err)
		}
		if err := s.Mean(dec); err != nil {
			t.Fatal(err)
		}
		rows[i] = make([]float32, d)
		for j, v := range dec {
			rows[i][j] = float32(v)
		}
	}
	return rows
}

// binomial returns the probabilities of 0..n successes in n trials of p.
func binomial(n int, p float64) []float64 {
	pmf := make([]float64, n+1)
	for k := range pmf {
		lg := func(x int) float64 { v, _ := math.Lgamma(float64(x + 1)); return v }
		pmf[k] = math.Exp(lg(n) - lg(k) - lg(n-k) + float64(k)*math.Log(p) + float64(n-k)*math.Log1p(-p))
	}
	return pmf
}

// exactOneBit gives, for the coordinate-wise rules, the exact mean and
// variance of their output on n two-valued messages ±h (center 0) of
// which f are +h (attackers) and n-f are ldpq messages of input mu: the
// package doc's formulas, as sums over the number K of clients that sent
// +h, f plus a binomial count of the honest ones.
func exactOneBit(r Rule, n, f int, h, mu float64) (mean, variance float64, ok bool) {
	frac := func(ones, of int) float64 { return h * (2*float64(ones)/float64(of) - 1) }
	var out func(k int) float64
	switch r := r.(type) {
	case Mean:
		out = func(k int) float64 { return frac(k, n) }
	case Median:
		out = func(k int) float64 { return h * float64(cmpInt(2*k, n)) }
	case TrimmedMean:
		t := r.Trimmed(n)
		out = func(k int) float64 { return frac(min(max(k-t, 0), n-2*t), n-2*t) }
	default:
		return 0, 0, false
	}
	var m2 float64
	for k, q := range binomial(n-f, 0.5+mu/(2*h)) {
		mean += q * out(f+k)
		m2 += q * out(f+k) * out(f+k)
	}
	return mean, m2 - mean*mean, true
}

func cmpInt(a, b int) int {
	switch {
	case a > b:
		return 1
	case a < b:
		return -1
	}
	return 0
}

// TestOneBitEstimates measures what each rule estimates from one-bit
// messages: n = 20 honest ldpq clients at eps = 1, range 0±1, every
// input mu, d = 10,000 parameters, 20 draws. The coordinate-wise rules'
// mean over the 200,000 coordinates must match the exact mean of the
// package doc's formulas within 5 standard errors (their exact variance
// over 200,000); Krum's values must be ±h; norm-bounded's output must
// be the mean times C/(h sqrt(d)); Bulyan must lie beyond mu, towards
// the majority (by 5 standard errors of its 20 draws) where mu != 0.
// go test ./robust -run TestOneBit -v prints the tables of
// docs/security.md.
func TestOneBitEstimates(t *testing.T) {
	oneBitTable(t, 0, 2, []float32{0, 0.25, 0.5, 1})
}

// TestOneBitAttack is TestOneBitEstimates with f of the 20 clients
// attacking within the support: each sends +h in every parameter, the
// most extreme message an honest client can send. The rules assume f
// (F = f, trimming f/n at each end).
func TestOneBitAttack(t *testing.T) {
	for _, f := range []int{2, 4} {
		oneBitTable(t, f, f, []float32{0, -0.5})
	}
}

func oneBitTable(t *testing.T, f, assume int, mus []float32) {
	const n, d, draws, eps = 20, 10_000, 20, 1.0
	rg := mech.Range{Center: 0, Radius: 1}
	m, err := mech.New("ldpq", mech.Config{Epsilon: eps})
	if err != nil {
		t.Fatal(err)
	}
	h, err := m.(mech.Supporter).Support(rg)
	if err != nil {
		t.Fatal(err)
	}
	nb := NormBounded{C: h * math.Sqrt(d) / 2}
	rules := []Rule{Mean{}, Median{}, TrimmedMean{Beta: float64(assume) / n}, TrimmedMean{Beta: 0.25},
		Krum{F: assume}, MultiKrum{F: assume, M: n / 2}, Bulyan{F: assume}, nb}
	attacker := make([]float32, d)
	for j := range attacker {
		attacker[j] = float32(h)
	}
	var table strings.Builder
	fmt.Fprintf(&table, "ldpq, eps %v, range 0±1 (h = %.4f), n = %d of which %d send +h, d = %d, %d draws\n", eps, h, n, f, d, draws)
	fmt.Fprintf(&table, "%-18s %5s %9s %9s %9s %9s\n", "rule", "mu", "mean", "exact", "bias", "sd")
	for _, mu := range mus {
		outs := outputs(t, m, rg, n, d, draws, mu, f, attacker, rules)
		for draw := range draws {
			checkKrumValues(t, outs[4][draw*d:(draw+1)*d], float32(h))
		}
		for i, r := range rules {
			mean, sd := meanSD(outs[i])
			exactCol := "        -"
			if em, ev, ok := exactOneBit(r, n, f, h, float64(mu)); ok {
				exactCol = fmt.Sprintf("%9.4f", zero(em))
				se := math.Sqrt(ev / float64(len(outs[i])))
				if math.Abs(mean-em) > 5*se+1e-6 {
					t.Errorf("%v at mu %v, %d attackers: mean %v, exact %v (5 standard errors: %v)", r, mu, f, mean, em, 5*se)
				}
			}
			fmt.Fprintf(&table, "%-18s %5.2f %9.4f %s %+9.4f %9.4f\n", name(r, nb), mu, zero(mean), exactCol, zero(mean-float64(mu)), sd)
		}
		checkNormBounded(t, outs[7], outs[0])
		if f == 0 {
			checkMajority(t, outs[6], float64(mu), d)
		}
	}
	t.Log("\n" + table.String())
}

// outputs returns each rule's outputs on draws sets of messages of n
// clients under m at input mu, f of them replaced by attacker, draw after
// draw.
func outputs(t *testing.T, m mech.Mechanism, rg mech.Range, n, d, draws int, mu float32, f int, attacker []float32, rules []Rule) [][]float64 {
	t.Helper()
	outs := make([][]float64, len(rules))
	for draw := range draws {
		rows := messages(t, m, rg, n-f, d, mu, uint64(draw))
		for range f {
			rows = append(rows, attacker)
		}
		for i, r := range rules {
			outs[i] = append(outs[i], aggregate(t, r, rows)...)
		}
	}
	return outs
}

// TestGaussianEstimates is the contrast to TestOneBitEstimates: under the
// gaussian mechanism (eps 1, delta 1e-5) a message is its input plus
// noise symmetric about 0, so every rule that commutes with shifts and
// reflections (all but norm-bounded) is unbiased for equal inputs. Each
// rule's mean over 20 draws of 5,000 parameters must be within 5 standard
// errors (of its 20 draws' means) of mu; the table shows what each costs
// in spread against the mean.
func TestGaussianEstimates(t *testing.T) {
	const n, d, draws = 20, 5000, 20
	rg := mech.Range{Center: 0, Radius: 1}
	m, err := mech.New("gaussian", mech.Config{Epsilon: 1, Delta: 1e-5})
	if err != nil {
		t.Fatal(err)
	}
	rules := []Rule{Mean{}, Median{}, TrimmedMean{Beta: 0.1}, TrimmedMean{Beta: 0.25}, Krum{F: 2}, MultiKrum{F: 2, M: n / 2}, Bulyan{F: 2}}
	var table strings.Builder
	fmt.Fprintf(&table, "gaussian, eps 1, delta 1e-5, range 0±1, n = %d, d = %d, %d draws\n", n, d, draws)
	fmt.Fprintf(&table, "%-18s %5s %9s %9s %9s %9s\n", "rule", "mu", "mean", "bias", "sd", "sd/mean's")
	for _, mu := range []float32{0.25, 1} {
		outs := outputs(t, m, rg, n, d, draws, mu, 0, nil, rules)
		_, sdMean := meanSD(outs[0])
		for i, r := range rules {
			mean, se := drawMeans(outs[i], d)
			if math.Abs(mean-float64(mu)) > 5*se {
				t.Errorf("%v at mu %v: mean %v, 5 standard errors %v", r, mu, mean, 5*se)
			}
			_, sd := meanSD(outs[i])
			fmt.Fprintf(&table, "%-18s %5.2f %9.4f %+9.4f %9.4f %9.2f\n", r, mu, mean, mean-float64(mu), sd, sd/sdMean)
		}
	}
	t.Log("\n" + table.String())
}

// drawMeans returns the mean of out, made of draws of d values each, and
// its standard error from the spread of the draws' means.
func drawMeans(out []float64, d int) (mean, se float64) {
	var perDraw []float64
	for k := 0; k < len(out); k += d {
		m, _ := meanSD(out[k : k+d])
		perDraw = append(perDraw, m)
	}
	mean, sd := meanSD(perDraw)
	return mean, sd / math.Sqrt(float64(len(perDraw)))
}

// zero rounds what prints as ±0.0000 to 0.
func zero(x float64) float64 {
	if math.Abs(x) < 5e-5 {
		return 0
	}
	return x
}

func name(r, nb Rule) string {
	if r == nb {
		return "norm-bounded:h√d/2"
	}
	return r.String()
}

// checkKrumValues checks that Krum's output is a client's message: every
// value is +h or -h.
func checkKrumValues(t *testing.T, out []float64, h float32) {
	t.Helper()
	for j, v := range out {
		if v != float64(h) && v != -float64(h) {
			t.Fatalf("krum output %v at %d is neither of the two values ±%v", v, j, h)
		}
	}
}

// checkNormBounded checks that a bound of half the common norm halves
// the mean.
func checkNormBounded(t *testing.T, nb, mean []float64) {
	t.Helper()
	for j := range nb {
		if math.Abs(nb[j]-mean[j]/2) > 1e-6*math.Abs(mean[j])+1e-12 {
			t.Fatalf("norm-bounded at %d: %v, want half the mean %v", j, nb[j], mean[j]/2)
		}
	}
}

// checkMajority checks that Bulyan's output lies beyond mu, on mu's side:
// a vote of the majority, not a mean. Its draws are d coordinates each.
func checkMajority(t *testing.T, out []float64, mu float64, d int) {
	t.Helper()
	m, se := drawMeans(out, d)
	if mu > 0 && !(m-mu > 5*se) || mu == 0 && math.Abs(m) > 5*se+1e-3 {
		t.Errorf("bulyan at mu %v: mean %v (standard error %v), want beyond mu", mu, m, se)
	}
}

func meanSD(x []float64) (mean, sd float64) {
	for _, v := range x {
		mean += v
	}
	mean /= float64(len(x))
	for _, v := range x {
		sd += (v - mean) * (v - mean)
	}
	return mean, math.Sqrt(sd / float64(len(x)-1))
}
