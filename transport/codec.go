package transport

import (
	"encoding/binary"
	"fmt"
	"math"

	"github.com/fedpq/fedpq/mech"
	"github.com/fedpq/fedpq/model"
	pb "github.com/fedpq/fedpq/transport/fedpqpb"
)

// encodeTensors lays out weights as little-endian float32, a tensor each.
func encodeTensors(w [][]float32) [][]byte {
	out := make([][]byte, len(w))
	for i, t := range w {
		b := make([]byte, 4*len(t))
		for j, v := range t {
			binary.LittleEndian.PutUint32(b[4*j:], math.Float32bits(v))
		}
		out[i] = b
	}
	return out
}

// decodeTensors reads weights sent by encodeTensors, checking them against
// the model's tensors: their number, their sizes and finite values.
// numParams is the number of parameters of a model's tensors.
func numParams(specs []model.TensorSpec) int {
	n := 0
	for _, s := range specs {
		n += s.Size()
	}
	return n
}

func decodeTensors(b [][]byte, specs []model.TensorSpec) ([][]float32, error) {
	if len(b) != len(specs) {
		return nil, fmt.Errorf("%d tensors, the model has %d", len(b), len(specs))
	}
	w := make([][]float32, len(b))
	for i, s := range specs {
		n := 1
		for _, d := range s.Shape {
			n *= d
		}
		if len(b[i]) != 4*n {
			return nil, fmt.Errorf("tensor %s: %d bytes, want %d", s.Name, len(b[i]), 4*n)
		}
		w[i] = make([]float32, n)
		for j := range w[i] {
			v := math.Float32frombits(binary.LittleEndian.Uint32(b[i][4*j:]))
			if math.IsNaN(float64(v)) || math.IsInf(float64(v), 0) {
				return nil, fmt.Errorf("tensor %s: value %d is %v", s.Name, j, v)
			}
			w[i][j] = v
		}
	}
	return w, nil
}

func encodeRanges(rs []mech.Range) []*pb.Range {
	out := make([]*pb.Range, len(rs))
	for i, r := range rs {
		out[i] = &pb.Range{Center: r.Center, Radius: r.Radius}
	}
	return out
}

// decodeRanges reads the n ranges a round announces (fl.Config's
// RangeCount: one per vector a client encodes, a tensor each or
// DP-FedAvg's one, and with an L2 mechanism's adaptive clip the count's
// scale), each one valid.
func decodeRanges(rs []*pb.Range, n int) ([]mech.Range, error) {
	if len(rs) != n {
		return nil, fmt.Errorf("%d ranges, want %d", len(rs), n)
	}
	out := make([]mech.Range, len(rs))
	for i, r := range rs {
		out[i] = mech.Range{Center: r.GetCenter(), Radius: r.GetRadius()}
		if err := out[i].Validate(); err != nil {
			return nil, fmt.Errorf("tensor %d: %w", i, err)
		}
	}
	return out, nil
}
