package act

import (
	"math"
	"testing"
)

// TestSigmoid compares Sigmoid with the exact value (float64, rounded
// once) on every 61st float32 in [-110, 110], which covers the subnormal
// results, both signs and every exponent, in ulps of the exact value; the
// bound is 3 ulp. It also checks the special values.
func TestSigmoid(t *testing.T) {
	ulp := func(x float32) float64 { // the gap above |x|, at least the least subnormal
		x = float32(math.Abs(float64(x)))
		return float64(math.Nextafter32(x, float32(math.Inf(1))) - x)
	}
	worst, at := 0.0, float32(0)
	for _, sign := range []uint32{0, 1 << 31} {
		for b := uint32(0); b <= math.Float32bits(110); b += 61 {
			v := math.Float32frombits(b | sign)
			want := 1 / (1 + math.Exp(-float64(v)))
			if d := math.Abs(float64(Sigmoid(v))-want) / ulp(float32(want)); d > worst || d != d {
				worst, at = d, v
			}
		}
	}
	t.Logf("worst %.3f ulp at %v", worst, at)
	if worst > 3 {
		t.Errorf("Sigmoid(%v) = %v, exact %v: %.2f ulp off", at, Sigmoid(at), 1/(1+math.Exp(-float64(at))), worst)
	}
	for _, c := range []struct{ v, want float32 }{
		{0, 0.5}, {float32(math.Copysign(0, -1)), 0.5},
		{float32(math.Inf(1)), 1}, {float32(math.Inf(-1)), 0},
		{200, 1}, {-200, 0}, {-103, float32(math.Exp(-103))},
	} {
		if got := Sigmoid(c.v); got != c.want {
			t.Errorf("Sigmoid(%v) = %v, want %v", c.v, got, c.want)
		}
	}
	if nan := float32(math.NaN()); !math.IsNaN(float64(Sigmoid(nan))) {
		t.Errorf("Sigmoid(NaN) = %v, want NaN", Sigmoid(nan))
	}
}

// TestSigmoidRows: SigmoidRows gives Sigmoid's bits on every path (the
// assembly where the CPU has it, and Go), over widths around the vector's
// 16 lanes, on inputs of every magnitude and the special values, and
// writes nothing outside the rows.
func TestSigmoidRows(t *testing.T) {
	special := []float32{0, float32(math.Copysign(0, -1)), float32(math.Inf(1)), float32(math.Inf(-1)), float32(math.NaN()), 1e-40, -1e-40, 88, -88, 103.9, -103.9, 104.1, -200}
	s := uint64(1)
	for _, asm := range []bool{false, true} {
		if asm && !haveAVX512 {
			t.Log("no AVX-512: Go path only")
			continue
		}
		func() {
			defer func(h bool) { haveAVX512 = h }(haveAVX512)
			haveAVX512 = asm
			for _, width := range []int{1, 7, 14, 15, 16, 17, 31, 32, 33, 49} {
				const rows, lds, ldd = 5, 53, 55
				src := make([]float32, rows*lds)
				for i := range src {
					s = s*6364136223846793005 + 1442695040888963407
					// Exponents from 2^-64 to 2^63, both signs.
					src[i] = math.Float32frombits(uint32(s>>33)&0x807fffff | (uint32(s>>57)+63)<<23)
					if i%9 == 4 {
						src[i] = special[i%len(special)]
					}
				}
				dst := make([]float32, rows*ldd)
				for i := range dst {
					dst[i] = -7
				}
				const bias = 0.25
				SigmoidRows(dst, ldd, src, lds, rows, width, bias)
				for i := range rows {
					for j := range ldd {
						got := dst[i*ldd+j]
						want := float32(-7)
						if j < width {
							want = Sigmoid(src[i*lds+j] + bias)
						}
						if math.Float32bits(got) != math.Float32bits(want) && !(got != got && want != want) {
							t.Fatalf("asm %v width %d: [%d, %d] of %v: %v, want %v", asm, width, i, j, src[i*lds+j], got, want)
						}
					}
				}
			}
		}()
	}
}

// BenchmarkSigmoidRows: ns per activation over lenet's first
// convolution's planes (14 x 14, rows of 14 into a bordered 18-wide
// output).
func BenchmarkSigmoidRows(b *testing.B) {
	for _, asm := range []bool{false, true} {
		if asm && !haveAVX512 {
			continue
		}
		b.Run(map[bool]string{false: "go", true: "avx512"}[asm], func(b *testing.B) {
			defer func(h bool) { haveAVX512 = h }(haveAVX512)
			haveAVX512 = asm
			src := make([]float32, 64*14*14)
			s := uint64(1)
			for i := range src {
				s = s*6364136223846793005 + 1442695040888963407
				src[i] = float32(int64(s>>40)-1<<23) / (1 << 21)
			}
			dst := make([]float32, 64*18*18)
			for b.Loop() {
				for p := range 64 {
					SigmoidRows(dst[p*18*18+2*18+2:], 18, src[p*196:], 14, 14, 14, 0.1)
				}
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*len(src)), "ns/elem")
		})
	}
}
