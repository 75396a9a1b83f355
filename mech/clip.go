package mech

import (
	"encoding/binary"
	"math"
)

func init() {
	Register(Info{
		Name:    "clip",
		Summary: "clipping alone: each parameter clipped to the range, sent as float32; no privacy, no compression (the papers' noise-free clipped baseline)",
		New:     func(Config) (Mechanism, error) { return clip{}, nil },
	})
}

// clip sends each parameter clipped to [c-r, c+r] as a float32, with no
// noise. It separates what a fixed range costs a model from what a
// mechanism's noise costs it: LDP-FL's and CorBin-FL's accuracy losses are
// the sum of both. Its estimate of the mean is the exact mean of the clipped
// values up to float32 rounding. The server refuses a value outside the
// range (as rounded to float32), which no client running clip sends.
type clip struct{}

func (clip) Name() string       { return "clip" }
func (clip) Coupling() Coupling { return Independent }
func (clip) Alone() float64     { return 0 }
func (clip) Bits(n int) int     { return 32 * n }

func (clip) Encode(dst []byte, w []float32, rg Range, _ Slot) ([]byte, error) {
	if _, err := (clip{}).Support(rg); err != nil {
		return dst, err
	}
	if err := checkInput(w); err != nil {
		return dst, err
	}
	for _, v := range w {
		dst = binary.LittleEndian.AppendUint32(dst, math.Float32bits(float32(rg.Clip(float64(v)))))
	}
	return dst, nil
}

func (clip) NewSum(n int, rg Range) (Sum, error) {
	if err := rg.Validate(); err != nil {
		return nil, err
	}
	lo, hi, err := floatSupport(rg, rg.Radius, "clip")
	if err != nil {
		return nil, err
	}
	return newBoundedSum(n, rg, lo, hi)
}

// Support is the radius: clip sends the clipped values themselves.
func (clip) Support(rg Range) (float64, error) {
	if err := rg.Validate(); err != nil {
		return 0, err
	}
	_, _, err := floatSupport(rg, rg.Radius, "clip")
	return rg.Radius, err
}

// Variance is 0: the only error is float32 rounding.
func (clip) Variance(float64, Range) float64 { return 0 }
