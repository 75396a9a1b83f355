package mech

import (
	"encoding/binary"
	"fmt"
	"math"
	"slices"
)

// Extremal is implemented by mechanisms that can write the most extreme
// message an honest client could send: the payload whose decoded value is,
// per parameter, at the end of what the mechanism decodes in the direction
// of dir's sign (the upper end where dir[i] > 0, the lower end otherwise).
// The server cannot tell it from an honest message, since an honest
// client sends it for some input; it is what a Byzantine client that stays
// within the support sends (package fl's "extreme" attack), and what
// robust aggregation has to bound. s is the client's slot, as for Encode:
// a Dithered mechanism draws its dither from it, as an honest client does,
// and a Paired one ignores the partner's bits (the decoder does not use
// them: each message decodes alone).
//
// Implemented by none, gaussian, the one-bit mechanisms (ldpq, corbin,
// augcorbin, coq) and sdq; Extreme's doc on each says which value it is.
type Extremal interface {
	Extreme(dst []byte, dir []float32, rg Range, s Slot) ([]byte, error)
}

var (
	_ Extremal = none{}
	_ Extremal = gaussian{}
	_ Extremal = oneBit{}
	_ Extremal = (*sdq)(nil)
)

// gaussExtremeSigmas is how far beyond the range's edge, in units of the
// noise's sigma, gaussian's extreme message goes: the Gaussian's support is
// unbounded, so "the most extreme honest message" is a choice. At 3 sigma
// an honest value lies beyond it with probability 0.13% per parameter, so
// across a model's parameters honest clients send such values all the time.
// (The server accepts up to Support, r + g + 7.5 sigma; an attacker who
// goes there sends what an honest client sends with probability 1e-12.)
const gaussExtremeSigmas = 3

// Extreme is c ± r per parameter, as float32: the range's edge. An honest
// none client is not clipped, so it can send more (the server accepts up
// to noneSupport radii); the edge is what a client whose update was
// clipped would send, the yardstick the clipped mechanisms share.
func (none) Extreme(dst []byte, dir []float32, rg Range, _ Slot) ([]byte, error) {
	if err := rg.Validate(); err != nil {
		return dst, err
	}
	if err := checkInput(dir); err != nil {
		return dst, err
	}
	return appendEdges(dst, dir, rg.Center, rg.Radius), nil
}

// Extreme is c ± (r + 3 sigma) per parameter, as float32
// (gaussExtremeSigmas says why 3).
func (m gaussian) Extreme(dst []byte, dir []float32, rg Range, _ Slot) ([]byte, error) {
	d, _, _, err := m.bounded(rg)
	if err != nil {
		return dst, err
	}
	if err := checkInput(dir); err != nil {
		return dst, err
	}
	return appendEdges(dst, dir, rg.Center, rg.Radius+gaussExtremeSigmas*d.Sigma()), nil
}

// appendEdges appends, per parameter, the float32 of c + h where dir > 0
// and of c - h otherwise.
func appendEdges(dst []byte, dir []float32, c, h float64) []byte {
	up, down := math.Float32bits(float32(c+h)), math.Float32bits(float32(c-h))
	out := slices.Grow(dst, 4*len(dir))
	for _, v := range dir {
		b := down
		if v > 0 {
			b = up
		}
		out = binary.LittleEndian.AppendUint32(out, b)
	}
	return out
}

// Extreme is the bit 1 (decoded c + out) where dir > 0 and the bit 0
// (c - out) otherwise: deterministic, where an honest client at the
// range's edge sends that bit with probability e^eps/(e^eps+1). Every
// one-bit mechanism decodes a bit the same way whatever the client's role,
// so a paired attacker simply ignores its partner's bits; the server's
// decode counts ones and never uses the correlation, and the honest
// partner's message keeps its ldpq marginal (unbiased), only the pair's
// variance reduction is lost.
func (m oneBit) Extreme(dst []byte, dir []float32, rg Range, _ Slot) ([]byte, error) {
	if _, err := newBinq(m.eps, rg); err != nil {
		return dst, err
	}
	if err := checkInput(dir); err != nil {
		return dst, err
	}
	for k := 0; k < len(dir); k += 64 {
		var word uint64
		for i, v := range dir[k:min(len(dir), k+64)] {
			if v > 0 {
				word |= 1 << i
			}
		}
		dst = appendWord(dst, word, min(len(dir)-k, 64))
	}
	return dst, nil
}

// Extreme is the honest encoding of the range's edge, +1 or -1 in
// normalized units per parameter, with the dither of s. For the scalar
// lattice that is the top (or bottom) index whatever the dither, which
// decodes to c ± r(1 - d): the largest (smallest) value the server can
// decode given the dither d, so nothing more extreme exists. For the
// hexagonal lattice it is the encoding of the square's corner
// (sign(dir[2i]), sign(dir[2i+1])); the codebook holds points up to two
// hexagonal cells beyond the square, which a client that knows its dither
// could pick to go further by at most a cell.
func (m *sdq) Extreme(dst []byte, dir []float32, rg Range, s Slot) ([]byte, error) {
	if err := checkDithered(dir, rg, s); err != nil {
		return dst, err
	}
	return m.encode(dst, len(dir), func(i int) float64 {
		if dir[i] > 0 {
			return 1
		}
		return -1
	}, s.Shared)
}

// ExtremeOf returns m as an Extremal, or an error that names m and the
// mechanisms that have one.
func ExtremeOf(m Mechanism) (Extremal, error) {
	if x, ok := m.(Extremal); ok {
		return x, nil
	}
	return nil, fmt.Errorf("mech: %s has no extreme message (Extremal); none, gaussian, ldpq, corbin, augcorbin, coq and sdq have one", m.Name())
}
