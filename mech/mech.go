// Package mech holds fedpq's privacy and compression mechanisms behind one
// two-sided contract: what runs on a client (Encode: clip, quantize, privatize,
// bit-pack) and what runs on the server (a streaming Sum that decodes each
// message as it arrives and keeps memory independent of the number of
// clients). The simulation and the real server call the same code.
//
// A mechanism works on one tensor at a time: a vector of parameters clipped to
// a public Range. The randomness it may use is handed to it in a Slot: the
// client's private coins, and, depending on its Coupling, bits shared with a
// partner, a group, or the server.
package mech

import (
	"errors"
	"fmt"
	"math"
	"sort"

	"github.com/fedpq/fedpq/corr"
)

// Range is the public clipping interval [Center-Radius, Center+Radius] of one
// tensor. Inputs outside it are clipped before they are quantized.
type Range struct {
	Center, Radius float64
}

// Validate reports a Range that no mechanism can use.
func (r Range) Validate() error {
	if math.IsNaN(r.Center) || math.IsInf(r.Center, 0) {
		return fmt.Errorf("mech: range center %v is not finite", r.Center)
	}
	if !(r.Radius > 0) || math.IsInf(r.Radius, 0) {
		return fmt.Errorf("mech: range radius %v must be positive and finite", r.Radius)
	}
	// Mechanisms compute c±r and 2r; a range whose ends overflow would
	// decode to Inf or NaN instead of failing here.
	if math.IsInf(2*r.Radius, 0) || math.IsInf(r.Center-r.Radius, 0) || math.IsInf(r.Center+r.Radius, 0) {
		return fmt.Errorf("mech: range %v±%v overflows float64", r.Center, r.Radius)
	}
	return nil
}

// Clip returns w moved into the range.
func (r Range) Clip(w float64) float64 {
	return min(max(w, r.Center-r.Radius), r.Center+r.Radius)
}

// Coupling is the randomness a client's encoder shares with others.
type Coupling int

const (
	// Independent mechanisms use the client's private coins only.
	Independent Coupling = iota
	// Paired mechanisms (corbin, augcorbin, coq) share bits with one partner,
	// which the server never sees. A client without a partner is Alone.
	Paired
	// Grouped mechanisms (cq) share bits with every client of the round.
	Grouped
	// Dithered mechanisms (sdq, jopeq) share a dither with the server, which
	// subtracts it when it decodes.
	Dithered
)

func (c Coupling) String() string {
	switch c {
	case Independent:
		return "independent"
	case Paired:
		return "paired"
	case Grouped:
		return "grouped"
	case Dithered:
		return "dithered"
	}
	return fmt.Sprintf("Coupling(%d)", int(c))
}

// Role is a client's part in a pair.
type Role uint8

const (
	Alone Role = iota
	Leader
	Follower
)

func (r Role) String() string {
	return [...]string{"alone", "leader", "follower"}[r]
}

// Slot is one client's randomness for one round. Streams are consumed in
// order, tensor after tensor, so a client and whoever shares its bits must
// encode the same tensors in the same order.
type Slot struct {
	// Private holds the client's own coins; nobody else can reproduce them.
	Private corr.Source
	// Shared holds bits shared with the partner (Paired), the whole group
	// (Grouped) or the server (Dithered). Nil when the client is Alone.
	Shared corr.Source
	// Role is the client's part in a pair; Alone for unpaired clients.
	Role Role
	// Index and Size place the client in its group (Grouped only):
	// 0 <= Index < Size, and the indices of a group are a permutation.
	Index, Size int
}

// A Mechanism turns a client's parameters into a short private message and
// messages back into an estimate of the mean. Implementations are safe for
// concurrent use; their state lives in Slots and Sums.
type Mechanism interface {
	// Name is the name it is registered under.
	Name() string
	// Coupling is the randomness it shares.
	Coupling() Coupling
	// Alone is the fraction of clients that must quantize alone even when
	// they could be paired (AugCorBin's gamma); 0 for the others.
	Alone() float64
	// Bits is the exact size, in bits, of the payload for n parameters.
	Bits(n int) int
	// Encode clips w to rg, encodes it and appends the payload to dst.
	Encode(dst []byte, w []float32, rg Range, s Slot) ([]byte, error)
	// NewSum starts an empty streaming sum of n-parameter payloads under rg.
	NewSum(n int, rg Range) (Sum, error)
}

// Sum is the server's side: it decodes payloads one at a time and keeps only
// what the mean needs, in memory independent of how many it has seen.
type Sum interface {
	// Add validates and decodes one client's payload. For Dithered
	// mechanisms s.Shared must be that client's dither stream; other
	// mechanisms ignore s. A payload that fails validation leaves the
	// sum unchanged.
	Add(payload []byte, s Slot) error
	// Count is the number of payloads added.
	Count() int
	// Mean writes the estimate of the mean of the clients' (clipped)
	// parameters into dst, which must have length n.
	Mean(dst []float64) error
}

// Variancer is implemented by mechanisms whose output has a closed-form
// variance: Variance is Var[Q(w)] for one client with input w (clipped).
type Variancer interface {
	Variance(w float64, rg Range) float64
}

// RandomizedResponse is implemented by the one-bit mechanisms (ldpq, and
// corbin, augcorbin and coq, whose clients share coins with a partner): a
// client that encodes alone sends, per parameter, one bit by binary
// randomized response at ResponseEpsilon. What a secure sum or a shuffle of
// such bits hides (package privacy) is computed for them alone.
type RandomizedResponse interface {
	ResponseEpsilon() float64
}

// Supporter is implemented by every registered mechanism: Support is the
// half-width h of the interval [c-h, c+h] that holds every value its Sum
// decodes from a payload it accepts, for one parameter. One client's
// largest effect on a mean of n clients is therefore h/n. The quantized
// mechanisms are bounded by construction (a finite codebook); the float32
// ones (none, clip, gaussian, laplace) refuse values beyond it.
type Supporter interface {
	Support(rg Range) (float64, error)
}

// refusalTarget is the largest probability, per parameter, with which the
// server may refuse an honest gaussian or laplace value: their supports
// cut the noise's tails there.
const refusalTarget = 1e-12

// PairVariancer is implemented by Paired mechanisms: PairVariance is
// Var[Q1(w1) + Q2(w2)] for a leader with input w1 and a follower with w2.
type PairVariancer interface {
	PairVariance(w1, w2 float64, rg Range) float64
}

// Config holds every mechanism's settings; each reads the ones it needs.
type Config struct {
	Epsilon    float64 // privacy budget per parameter per round (PLDP); ddgauss, skellam: central, per tensor per round (not read in their L2 mode)
	Delta      float64 // gaussian, ddgauss, skellam: the delta of (eps, delta)-DP (not read in the L2 mode)
	SharedBits int     // corbin, augcorbin, coq: shared random bits per parameter (d)
	Gamma      float64 // augcorbin: fraction of clients that quantize alone
	Px         float64 // coq: bias of each shared coin
	InputBits  int     // mvu: input resolution, 2^InputBits levels
	BudgetBits int     // mvu: output bits per parameter
	Rate       int     // sdq, jopeq, laplace+sdq: bits per parameter
	Lattice    int     // sdq, jopeq, laplace+sdq: 1 scalar, 2 hexagonal
	CacheDir   string  // mvu: directory of solved matrices ("" for the user cache)
	// ModBits is the bit width b of ddgauss and skellam: each coordinate
	// is sent, and summed, modulo 2^b (0 means 16; TFF runs them at 12
	// to 20 bits).
	ModBits int
	// Clients is the number n of clients whose sum ddgauss, skellam and
	// pbm calibrate for: each adds 1/n of the central noise, and the
	// modular range (ddgauss, skellam) or the trial bias (pbm) is sized
	// for n. The round engine must set it to the round's number of
	// clients; 0 means 1, where every client adds the whole noise
	// (private at any count, n times the variance).
	Clients int
	// Noise is the noise multiplier z of DP-FedAvg (McMahan et al. 2018)
	// for the L2 mechanisms (see L2): one round's sum of Clients clients
	// carries noise of standard deviation z C per parameter, C the L2
	// bound (Range.Radius), the same z for every L2 mechanism, so that
	// they compare at equal z. ddgauss and skellam switch to their L2
	// mode when it is positive (0 keeps their per-round eps calibration);
	// pbm needs it positive.
	Noise float64
	// Trials is pbm's number m of binomial trials per coordinate and
	// client (0 means 1): its field holds the sum Clients*Trials.
	Trials int
}

// DefaultConfig returns the settings the papers use where they state them.
func DefaultConfig() Config {
	return Config{
		Epsilon:    1,
		Delta:      1e-5,
		SharedBits: 5,
		Gamma:      0.2,
		Px:         0.5,
		InputBits:  5,
		BudgetBits: 2,
		Rate:       4,
		Lattice:    1,
		ModBits:    16,
	}
}

// ValidateEpsilon is the common check of a privacy budget.
func (c Config) ValidateEpsilon() error {
	if !(c.Epsilon > 0) || math.IsInf(c.Epsilon, 0) {
		return fmt.Errorf("mech: epsilon %v must be positive and finite", c.Epsilon)
	}
	return nil
}

// defaultDelta is used when Config.Delta is zero.
const defaultDelta = 1e-5

// epsDelta is the checked (eps, delta) budget of the (eps, delta)-DP
// mechanism name (gaussian, ddgauss, skellam), Delta 0 meaning defaultDelta.
func (c Config) epsDelta(name string) (eps, delta float64, err error) {
	if err := c.ValidateEpsilon(); err != nil {
		return 0, 0, err
	}
	delta = c.Delta
	if delta == 0 {
		delta = defaultDelta
	}
	if !(delta > 0 && delta < 1) {
		return 0, 0, fmt.Errorf("mech: %s: delta %v must be in (0, 1)", name, c.Delta)
	}
	return c.Epsilon, delta, nil
}

// Info describes a registered mechanism.
type Info struct {
	Name    string
	Summary string // one line for `fedpq mechanisms`
	// LDP is true when each client's message, on its own, is eps-LDP per
	// parameter; false for compression-only and for not-formally-private
	// variants. For the paired mechanisms this is a guarantee against an
	// observer of one message: the server, which sees both messages of a
	// pair, has none in the worst case (privacy.ParameterEpsilon).
	LDP bool
	// Unclipped is true when the mechanism sends inputs outside the range
	// as they are (none); every other mechanism clips them.
	Unclipped bool
	// L2 is true for the mechanisms that take only a client's whole
	// update as one vector clipped in L2 norm (pbm): Names leaves them
	// out, L2Names lists them. (ddgauss and skellam take either, by
	// Config.Noise, and are in Names.)
	L2  bool
	New func(Config) (Mechanism, error)
}

var registry = map[string]Info{}

// Register makes a mechanism available by name. It panics if the name is
// taken: registration happens in init functions, and a clash is a bug.
func Register(info Info) {
	if _, dup := registry[info.Name]; dup {
		panic("mech: Register called twice for " + info.Name)
	}
	registry[info.Name] = info
}

// ErrUnknown is returned by New for a name nobody registered.
var ErrUnknown = errors.New("mech: unknown mechanism")

// New returns the named mechanism with settings c.
func New(name string, c Config) (Mechanism, error) {
	info, ok := registry[name]
	if !ok {
		return nil, fmt.Errorf("%w %q (known: %v, and for one L2-clipped vector: %v)", ErrUnknown, name, Names(), L2Names())
	}
	return info.New(c)
}

// Lookup returns the Info of a registered mechanism.
func Lookup(name string) (Info, bool) {
	info, ok := registry[name]
	return info, ok
}

// Names lists the registered mechanisms that work per tensor on a
// per-parameter Range, in a stable order; L2Names lists the others.
func Names() []string { return names(false) }

// L2Names lists the registered mechanisms that take only one L2-clipped
// vector (Info.L2), in a stable order.
func L2Names() []string { return names(true) }

func names(l2 bool) []string {
	out := make([]string, 0, len(registry))
	for n, info := range registry {
		if info.L2 == l2 {
			out = append(out, n)
		}
	}
	sort.Strings(out)
	return out
}

// checkInput reports the first NaN or Inf in w: such an update is a bug or
// an attack, and clipping it would hide that. (An all-ones exponent is
// exactly NaN or Inf; testing the bits keeps this pass cheap.)
func checkInput(w []float32) error {
	for i, v := range w {
		if math.Float32bits(v)&0x7f800000 == 0x7f800000 {
			return fmt.Errorf("mech: parameter %d is %v", i, v)
		}
	}
	return nil
}

// SharedBitser is implemented by Paired mechanisms: SharedBits is the exact
// number of bits of Slot.Shared a pair consumes for n parameters, which is
// what the leader sends in the papers' transfer mode.
type SharedBitser interface {
	SharedBits(n int) int
}
