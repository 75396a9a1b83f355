package mech

import (
	"fmt"
	"math"
	"testing"
)

// l2BenchCase is an L2 mechanism at the settings of issue 32's goal: 100
// clients a round, noise multiplier 1.
type l2BenchCase struct {
	label, name string
	trials      int
}

var l2BenchCases = []l2BenchCase{{"ddgauss-L2", "ddgauss", 0}, {"skellam-L2", "skellam", 0}, {"pbm-m1", "pbm", 1}, {"pbm-m2", "pbm", 2}}

func (bc l2BenchCase) mech(b *testing.B) Mechanism {
	c := DefaultConfig()
	c.Clients, c.Noise, c.Trials = 100, 1, bc.trials
	m, err := New(bc.name, c)
	if err != nil {
		b.Fatal(err)
	}
	return m
}

// l2BenchInput is a vector of d parameters of L2 norm 0.9, range 0±1.
func l2BenchInput(d int) []float32 {
	src := stream("l2-bench-input", uint64(d))
	w := make([]float32, d)
	var s float64
	x := make([]float64, d)
	for i := range x {
		x[i] = src.NormFloat64()
		s += x[i] * x[i]
	}
	for i := range w {
		w[i] = float32(0.9 * x[i] / math.Sqrt(s))
	}
	return w
}

// BenchmarkL2Encode measures one client's Encode of a cnn2-sized vector
// (6,422 parameters) and a 100,000 one with ddgauss and skellam in the L2
// mode and pbm of one and two trials (100 clients, z = 1), per parameter,
// and reports the bits per parameter as sent under secure aggregation of
// 100 clients: the field width times the fields, over the parameters.
func BenchmarkL2Encode(b *testing.B) {
	rg := Range{Center: 0, Radius: 1}
	for _, d := range []int{6422, 100000} {
		w := l2BenchInput(d)
		for _, bc := range l2BenchCases {
			b.Run(fmt.Sprintf("%s/%d", bc.label, d), func(b *testing.B) {
				m := bc.mech(b)
				slot := Slot{Private: stream("l2-bench-private")}
				dst := make([]byte, 0, 8*d)
				if _, err := m.Encode(dst, w, rg, slot); err != nil { // the rotation and setting, cached
					b.Fatal(err)
				}
				for b.Loop() {
					if _, err := m.Encode(dst[:0], w, rg, slot); err != nil {
						b.Fatal(err)
					}
				}
				im, _ := IntegerOf(m)
				k, _ := secureBits(im, 100)
				b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/float64(d), "ns/param")
				b.ReportMetric(float64(k*im.Fields(d))/float64(d), "bits/param-sent")
			})
		}
	}
}

// BenchmarkL2Sum measures the server's Add of one client's payload and,
// separately, the Mean of the sum (the inverse rotation), per parameter.
func BenchmarkL2Sum(b *testing.B) {
	rg := Range{Center: 0, Radius: 1}
	for _, d := range []int{6422, 100000} {
		w := l2BenchInput(d)
		for _, bc := range l2BenchCases {
			m := bc.mech(b)
			payload, err := m.Encode(nil, w, rg, Slot{Private: stream("l2-bench-private")})
			if err != nil {
				b.Fatal(err)
			}
			b.Run(fmt.Sprintf("add/%s/%d", bc.label, d), func(b *testing.B) {
				sum, err := m.NewSum(d, rg)
				if err != nil {
					b.Fatal(err)
				}
				for b.Loop() {
					if err := sum.Add(payload, Slot{}); err != nil {
						b.Fatal(err)
					}
				}
				b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/float64(d), "ns/param")
			})
			b.Run(fmt.Sprintf("mean/%s/%d", bc.label, d), func(b *testing.B) {
				sum, _ := m.NewSum(d, rg)
				for range 100 {
					if err := sum.Add(payload, Slot{}); err != nil {
						b.Fatal(err)
					}
				}
				dst := make([]float64, d)
				for b.Loop() {
					if err := sum.Mean(dst); err != nil {
						b.Fatal(err)
					}
				}
				b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/float64(d), "ns/param")
			})
		}
	}
}

// secureBits is fl.SecureBits's width: the modulus's bits for a Modular
// mechanism, else SumBits.
func secureBits(m Integer, n int) (int, error) {
	if mm, ok := m.(Modular); ok {
		return int(math.Log2(float64(mm.Modulus()))), nil
	}
	return SumBits(m, n), nil
}

// BenchmarkPBMRDP measures pbm's accounting at one order (8), from a fresh
// mechanism each time (RDP keeps each order's bound): 100 clients, z = 1,
// 6,422 parameters, one and two trials.
func BenchmarkPBMRDP(b *testing.B) {
	for _, m := range []int{1, 2} {
		b.Run(fmt.Sprintf("m=%d", m), func(b *testing.B) {
			for b.Loop() {
				mm := pbmNew(b, 100, 1, m)
				if _, err := mm.RDP(8, 6422); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
