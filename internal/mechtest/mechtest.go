// Package mechtest is a mechanism for tests only. Importing it registers
// Raw under Name: each parameter sent as a float64 and decoded unchecked,
// NaN and values beyond float32 included. With a decoder that bounds
// nothing, the tests of hostile aggregates reach the round engine's and
// the recorder's own checks, whatever the real mechanisms come to refuse.
package mechtest

import (
	"encoding/binary"
	"fmt"
	"math"

	"github.com/fedpq/fedpq/mech"
)

// Name is Raw's name in the mechanism registry.
const Name = "test-raw"

func init() {
	mech.Register(mech.Info{
		Name: Name, Summary: "test only: float64 per parameter, decoded unchecked", Unclipped: true,
		New: func(mech.Config) (mech.Mechanism, error) { return Raw{}, nil },
	})
}

// Raw sends each parameter as a float64 and decodes whatever it gets.
type Raw struct{}

func (Raw) Name() string            { return Name }
func (Raw) Coupling() mech.Coupling { return mech.Independent }
func (Raw) Alone() float64          { return 0 }
func (Raw) Bits(n int) int          { return 64 * n }

func (Raw) Encode(dst []byte, w []float32, _ mech.Range, _ mech.Slot) ([]byte, error) {
	for _, v := range w {
		dst = Append(dst, float64(v))
	}
	return dst, nil
}

func (Raw) NewSum(n int, _ mech.Range) (mech.Sum, error) {
	return &sum{sum: make([]float64, n)}, nil
}

// Append appends v to a Raw payload, as Encode would: a test writes a
// hostile payload with it, a value no float32 holds included.
func Append(dst []byte, v float64) []byte {
	return binary.LittleEndian.AppendUint64(dst, math.Float64bits(v))
}

type sum struct {
	sum []float64
	n   int
}

func (s *sum) Add(p []byte, _ mech.Slot) error {
	if len(p) != 8*len(s.sum) {
		return fmt.Errorf("payload of %d bytes", len(p))
	}
	for i := range s.sum {
		s.sum[i] += math.Float64frombits(binary.LittleEndian.Uint64(p[8*i:]))
	}
	s.n++
	return nil
}

func (s *sum) Count() int { return s.n }

func (s *sum) Mean(dst []float64) error {
	for i, v := range s.sum {
		dst[i] = v / float64(s.n)
	}
	return nil
}
