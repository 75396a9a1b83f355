package privacy

import (
	"fmt"
	"math"
)

// A Bound is an (Eps, Delta)-DP guarantee: the epsilon, and the delta at
// which that epsilon holds. Delta 0 is pure eps-DP.
type Bound struct {
	Eps   float64 `json:"eps"`
	Delta float64 `json:"delta"`
}

// NewBound is the bound (eps, delta), or nil when it guarantees nothing:
// eps infinite or NaN, or delta not in [0, 1). JSON has no +Inf, and a
// guarantee at delta >= 1 holds for every mechanism.
func NewBound(eps, delta float64) *Bound {
	if !(eps >= 0) || math.IsInf(eps, 1) || !(delta >= 0 && delta < 1) {
		return nil
	}
	return &Bound{Eps: eps, Delta: delta}
}

// Spent is what one client has spent against one observer: bounds per
// parameter and for its whole upload of d parameters, in the last round and
// over the k rounds it took part in, each with the delta at which it holds
// (docs/privacy.md). For pure eps mechanisms the round and basic bounds have
// delta 0 and the advanced and optimal ones the Ledger's Delta; for
// gaussian the round bound has its own delta, basic k (or k d) times it,
// advanced that plus the Ledger's Delta. Advanced is never below Optimal;
// it is reported because it is the bound most papers quote. A nil entry
// (JSON null) is a bound that does not exist at any delta below 1; Note
// says why.
type Spent struct {
	ParamRound     *Bound `json:"param_round"`     // one parameter, one round
	ParamBasic     *Bound `json:"param_basic"`     // one parameter, over the rounds: k eps
	ParamAdvanced  *Bound `json:"param_advanced"`  // one parameter, over the rounds: Advanced
	ParamOptimal   *Bound `json:"param_optimal"`   // one parameter, over the rounds: Optimal (zCDP for gaussian)
	UploadRound    *Bound `json:"upload_round"`    // the d parameters of one round: Optimal (zCDP for gaussian)
	UploadBasic    *Bound `json:"upload_basic"`    // the d parameters, over the rounds: k d eps
	UploadAdvanced *Bound `json:"upload_advanced"` // the d parameters, over the rounds: Advanced
	UploadOptimal  *Bound `json:"upload_optimal"`  // the d parameters, over the rounds: Optimal (zCDP for gaussian)
	Note           string `json:"note,omitempty"`  // why an entry is null
}

// Set puts the bound (eps, delta) in the entry of s whose JSON name is
// name. When that is no guarantee (NewBound is nil) the entry is nil and
// Note says so, with why (optional) as the reason. An unknown name panics:
// it is a programming error.
func (s *Spent) Set(name string, eps, delta float64, why string) {
	var dst **Bound
	for _, f := range s.fields() {
		if f.name == name {
			dst = f.b
		}
	}
	if dst == nil {
		panic("privacy: Spent has no entry " + name)
	}
	*dst = NewBound(eps, delta)
	if *dst != nil {
		return
	}
	if why == "" {
		switch {
		case math.IsInf(eps, 1) || math.IsNaN(eps):
			why = fmt.Sprintf("no epsilon at delta %.3g", delta)
		default:
			why = fmt.Sprintf("it would hold at delta %.3g, not below 1", delta)
		}
	}
	if s.Note != "" {
		s.Note += "; "
	}
	s.Note += name + ": " + why
}

type spentField struct {
	name string
	b    **Bound
}

// fields are s's entries with their JSON names, in order.
func (s *Spent) fields() []spentField {
	return []spentField{
		{"param_round", &s.ParamRound}, {"param_basic", &s.ParamBasic}, {"param_advanced", &s.ParamAdvanced}, {"param_optimal", &s.ParamOptimal},
		{"upload_round", &s.UploadRound}, {"upload_basic", &s.UploadBasic}, {"upload_advanced", &s.UploadAdvanced}, {"upload_optimal", &s.UploadOptimal},
	}
}

// Ledger is a client's privacy after it took part in Rounds rounds of d
// parameters each, against each observer (nil: no guarantee in the worst
// case, see ParameterEpsilon). Delta is the delta the composed bounds were
// asked for (the setting ledger_delta); each entry carries the delta at
// which it holds, which for basic and advanced composition is larger.
type Ledger struct {
	Rounds       int     `json:"rounds"`
	Parameters   int     `json:"parameters"`
	Delta        float64 `json:"ledger_delta"`
	Eavesdropper *Spent  `json:"eavesdropper"`
	Server       *Spent  `json:"server"`
	Partner      *Spent  `json:"partner"`
	// Central is augcorbin's user-level central bound of the round's mean
	// (AugCorBinCentral, at Delta), when its condition holds; CentralNote
	// says why there is none.
	Central     *Bound `json:"central_round,omitempty"`
	CentralNote string `json:"central_note,omitempty"`
	// ServerView says what the server saw when it did not see each
	// message (secure aggregation, a shuffler), and how Server was
	// computed; empty when it saw every message.
	ServerView string `json:"server_view,omitempty"`
	// User is the client's guarantee for the whole run, user-level: one
	// (eps, delta) for everything it sent, by observer.
	User *UserLevel `json:"user,omitempty"`
}

// Budget is a mechanism's privacy parameters as run: its name in package
// mech, its eps per parameter per round, and, for gaussian, its delta.
type Budget struct {
	Mechanism string
	Epsilon   float64
	MechDelta float64 // gaussian's delta per parameter per round
}

// Account is the ledger of a client that took part in k rounds, each an
// upload of d parameters, with composed bounds at delta. For the
// mechanisms that are not LDP it returns a Ledger with every observer nil.
func Account(b Budget, d, k int, delta float64) (Ledger, error) {
	l := Ledger{Rounds: k, Parameters: d, Delta: delta}
	if d < 1 || k < 0 {
		return l, fmt.Errorf("privacy: %d parameters, %d rounds", d, k)
	}
	if err := checkDelta(delta); err != nil {
		return l, err
	}
	for _, o := range []Observer{Eavesdropper, Server, Partner} {
		eps, err := ParameterEpsilon(b.Mechanism, b.Epsilon, o)
		if err != nil {
			return l, err
		}
		if math.IsInf(eps, 1) {
			continue
		}
		var s Spent
		if b.Mechanism == "gaussian" {
			err = gaussianSpent(&s, eps, b.MechDelta, d, k, delta)
		} else {
			err = pureSpent(&s, eps, d, k, delta)
		}
		if err != nil {
			return l, err
		}
		switch o {
		case Eavesdropper:
			l.Eavesdropper = &s
		case Server:
			l.Server = &s
		case Partner:
			l.Partner = &s
		}
	}
	return l, nil
}

// pureSpent composes eps-DP per parameter over d parameters and k rounds.
func pureSpent(s *Spent, eps float64, d, k int, delta float64) error {
	s.Set("param_round", eps, 0, "")
	opt, err := Optimal(eps, d, delta)
	if err != nil {
		return err
	}
	s.Set("upload_round", opt, delta, "")
	return composeRounds(s, eps, 0, d, k, delta, func(n int) (float64, error) { return Optimal(eps, n, delta) })
}

// composeRounds sets the entries over k rounds of a per-parameter,
// per-round (eps, d0) bound: basic composition (k eps at k d0),
// advanced (AdvancedBound) and optimal (at delta, from optimal(n), n the
// number composed). With k = 0 nothing was spent: every one is (0, 0).
func composeRounds(s *Spent, eps, d0 float64, d, k int, delta float64, optimal func(n int) (float64, error)) error {
	if k == 0 {
		for _, name := range []string{"param_basic", "param_advanced", "param_optimal", "upload_basic", "upload_advanced", "upload_optimal"} {
			s.Set(name, 0, 0, "")
		}
		return nil
	}
	for _, c := range []struct {
		n                        int
		basic, advanced, optimal string
	}{{k, "param_basic", "param_advanced", "param_optimal"}, {k * d, "upload_basic", "upload_advanced", "upload_optimal"}} {
		nf := float64(c.n)
		s.Set(c.basic, nf*eps, nf*d0, "")
		a, err := AdvancedBound(eps, d0, c.n, delta)
		if err != nil {
			return err
		}
		s.Set(c.advanced, a.Eps, a.Delta, "")
		o, err := optimal(c.n)
		if err != nil {
			return err
		}
		s.Set(c.optimal, o, delta, "")
	}
	return nil
}

// AdvancedBound is the k-fold composition of (eps, d0)-DP mechanisms by
// the advanced composition theorem (Dwork, Rothblum and Vadhan 2010,
// Theorem III.3): (Advanced(eps, k, deltaPrime), k d0 + deltaPrime), or,
// where Advanced's cap applies, the basic (k eps, k d0), which then is the
// smaller in both.
func AdvancedBound(eps, d0 float64, k int, deltaPrime float64) (Bound, error) {
	if !(d0 >= 0 && d0 < 1) {
		return Bound{}, fmt.Errorf("privacy: per-mechanism delta %v must be in [0, 1)", d0)
	}
	if eps == 0 {
		return Bound{Eps: 0, Delta: float64(k) * d0}, checkCount(k)
	}
	basic, err := Basic(eps, k)
	if err != nil {
		return Bound{}, err
	}
	adv, err := Advanced(eps, k, deltaPrime)
	if err != nil {
		return Bound{}, err
	}
	if adv < basic {
		return Bound{Eps: adv, Delta: float64(k)*d0 + deltaPrime}, nil
	}
	return Bound{Eps: basic, Delta: float64(k) * d0}, nil
}

// gaussianSpent composes the gaussian mechanism, (eps, mechDelta)-DP per
// parameter per round, by zCDP. Its rho per parameter is bounded from the
// continuous calibration: mech's discrete Gaussian has sigma at least
// AnalyticGaussianSigma(eps, mechDelta, 2r) and sensitivity at most 2r plus
// two grid steps of at most sigma/2^14 each, so D/sigma is at most
// 1/AnalyticGaussianSigma(eps, mechDelta, 1) + 2^-13, and the discrete
// Gaussian with that ratio is (D/sigma)^2/2-zCDP (Canonne, Kamath and
// Steinke 2020). Basic and advanced composition add up mechDelta.
func gaussianSpent(s *Spent, eps, mechDelta float64, d, k int, delta float64) error {
	s.Set("param_round", eps, mechDelta, "")
	sigma, err := AnalyticGaussianSigma(eps, mechDelta, 1)
	if err != nil {
		return err
	}
	ratio := 1/sigma + math.Ldexp(1, -13)
	rho := ratio * ratio / 2
	at := func(n int) (float64, error) { return ZCDPEpsilon(float64(n)*rho, delta) }
	up, err := at(d)
	if err != nil {
		return err
	}
	s.Set("upload_round", up, delta, "")
	return composeRounds(s, eps, mechDelta, d, k, delta, at)
}
