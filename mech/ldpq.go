package mech

import "fmt"

func init() {
	Register(Info{
		Name:    "ldpq",
		Summary: "LDP-FL one-bit quantizer: eps-LDP per parameter, 1 bit/param",
		LDP:     true,
		New:     newLDPQ,
	})
}

// ldpq is the LDP-FL quantizer (Sun et al., Algorithm 1 of CorBin-FL): a
// parameter w, clipped to [c-r, c+r], becomes c+out with probability
// P(+1|w) = T(w)/2^64 and c-out otherwise, where T is binq's integer
// threshold, so P(+1|w) = 1/2 + (w-c)/(2*alpha*r) up to 2^-52 and
// out = alpha*r up to the same relative error.
//
// Guarantee: every parameter is eps-LDP: P(y|w)/P(y|w') <= e^eps for all
// w, w' and both outputs, checked exactly on the integer thresholds.
// Unbiased (E[Q(w)] = clip(w)), with Var[Q(w)] = out^2 - (w-c)^2.
type ldpq struct{ oneBit }

func newLDPQ(c Config) (Mechanism, error) {
	if err := c.ValidateEpsilon(); err != nil {
		return nil, err
	}
	return ldpq{oneBit{eps: c.Epsilon}}, nil
}

func (ldpq) Name() string       { return "ldpq" }
func (ldpq) Coupling() Coupling { return Independent }
func (ldpq) Alone() float64     { return 0 }

func (m ldpq) Encode(dst []byte, w []float32, rg Range, s Slot) ([]byte, error) {
	b, err := newBinq(m.eps, rg)
	if err != nil {
		return dst, err
	}
	if s.Private == nil {
		return dst, errNoPrivate("ldpq")
	}
	return b.encode32(dst, w, s.Private.Fill32, func() uint32 { return uint32(s.Private.Uint64()) })
}

func errNoPrivate(name string) error {
	return fmt.Errorf("mech: %s: slot has no private randomness", name)
}
