package mech

import (
	"fmt"
	"math/bits"
	"strings"
)

// Integer is implemented by the mechanisms whose payload is a vector of
// integer fields and whose server decode is affine in them, so that the
// sum of the clients' fields, which is all that secure aggregation shows
// the server, decodes to the same mean as the messages one by one.
//
// The fields are the integer form of a payload that the decode is affine
// in, which is not always the bit-packed form: the hexagonal lattices pack
// a codebook index per pair of parameters, whose point is not linear in
// the index, so their fields are the point's lattice coordinates; jopeq's
// scalar decode moves the two end indices, so its fields add one per
// parameter that marks them. A client under secure aggregation masks the
// fields Unpack gives for its own payload.
//
// Streaming sums of these mechanisms keep the same per-field integer sums
// (and, for Dithered ones, the per-coordinate sum of the dithers in the
// order of Add) and decode them with the same function as DecodeSum, so
// DecodeSum of the summed fields, given the slots in the order of Add,
// returns the streaming Mean bit for bit.
//
// Secure aggregation hides each client's fields, so the server cannot
// check them against Levels as Sum.Add does: a client that masks a field
// beyond Levels moves the sum, and DecodeSum can only refuse a sum that
// no count honest clients could give.
type Integer interface {
	// Fields is the number of integer fields in a payload for n parameters.
	Fields(n int) int
	// Levels bounds every field: 0 <= field < Levels.
	Levels() uint64
	// Unpack checks payload as Sum.Add does (length, padding, levels) and
	// writes its Fields(n) fields to dst, which must have that length.
	Unpack(dst []uint64, payload []byte, n int) error
	// DecodeSum writes to dst (length n) the mean of count clients'
	// parameters given the exact per-field sum of their fields, under
	// range rg. Dithered mechanisms also get the clients' server slots
	// (Slot.Shared: each client's dither stream, positioned as for
	// Sum.Add, which DecodeSum advances as Sum.Add does), in the order
	// their fields were summed, which is what makes the result equal a
	// streaming Mean that saw the payloads in that order; others ignore
	// slots.
	DecodeSum(dst []float64, sum []uint64, count int, rg Range, slots []Slot) error
}

// integerNames are the registered mechanisms that implement Integer, in
// every configuration (TestIntegerOf checks the list against the registry).
var integerNames = []string{"augcorbin", "coq", "corbin", "cq", "ddgauss", "jopeq", "laplace+sdq", "ldpq", "pbm", "sdq", "skellam"}

// IntegerOf returns m's Integer side, or an error that names the
// mechanisms that have one.
func IntegerOf(m Mechanism) (Integer, error) {
	if m == nil {
		return nil, fmt.Errorf("mech: no mechanism to decode from a secure sum")
	}
	if im, ok := m.(Integer); ok {
		return im, nil
	}
	return nil, fmt.Errorf("mech: %s cannot be decoded from a secure sum: its server decode is not affine in integer message fields (these can: %s)",
		m.Name(), strings.Join(integerNames, ", "))
}

// SumBits is the fewest bits k such that clients*(Levels-1) < 2^k: the
// width of Z_2^k in which the sum of clients' fields is exact. It is 0 for
// fewer than one client.
func SumBits(m Integer, clients int) int { return sumBits(m.Levels(), clients) }

func sumBits(levels uint64, clients int) int {
	if clients < 1 {
		return 0
	}
	hi, lo := bits.Mul64(uint64(clients), levels-1)
	if hi != 0 {
		return 64 + bits.Len64(hi)
	}
	return bits.Len64(lo)
}

// fieldSpec is the part of Integer that describes the fields.
type fieldSpec interface {
	Fields(n int) int
	Levels() uint64
}

// checkSum is DecodeSum's common validation: the sum's length, a positive
// count, a count whose sums fit the int64 arithmetic of the decoders, and
// every field's sum at most count*(Levels-1), what count honest clients
// can reach.
func checkSum(m fieldSpec, dst []float64, sum []uint64, count int) error {
	if want := m.Fields(len(dst)); len(sum) != want {
		return fmt.Errorf("mech: sum has %d fields, want %d for %d parameters", len(sum), want, len(dst))
	}
	if count < 1 {
		return fmt.Errorf("mech: mean of %d clients", count)
	}
	if k := sumBits(m.Levels(), count); k > 63 {
		return fmt.Errorf("mech: the sum of %d clients' fields needs %d bits, more than 63", count, k)
	}
	top := uint64(count) * (m.Levels() - 1)
	for i, v := range sum {
		if v > top {
			return fmt.Errorf("mech: field %d sums to %d, more than %d clients can send (%d each)", i, v, count, m.Levels()-1)
		}
	}
	return nil
}
