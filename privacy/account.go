package privacy

import (
	"fmt"
	"math"
)

// Spent is what one client has spent against one observer: epsilons per
// parameter and for its whole upload of d parameters, in the last round and
// over the rounds it took part in. Composed bounds are (epsilon, Delta)-DP
// with the Delta of the Ledger; Basic ones hold with delta 0 for the
// pure-eps mechanisms, and for gaussian with k (per parameter) or k d (per
// upload) times its delta, which gaussian's Advanced ones add to Delta.
// Advanced is never below Optimal; it is reported because it is the bound
// most papers quote.
type Spent struct {
	ParamRound     float64 `json:"param_round"`     // one parameter, one round
	ParamBasic     float64 `json:"param_basic"`     // one parameter, over the rounds: k eps
	ParamAdvanced  float64 `json:"param_advanced"`  // one parameter, over the rounds: Advanced
	ParamOptimal   float64 `json:"param_optimal"`   // one parameter, over the rounds: Optimal (zCDP for gaussian)
	UploadRound    float64 `json:"upload_round"`    // the d parameters of one round: Optimal (zCDP for gaussian)
	UploadBasic    float64 `json:"upload_basic"`    // the d parameters, over the rounds: k d eps
	UploadAdvanced float64 `json:"upload_advanced"` // the d parameters, over the rounds: Advanced
	UploadOptimal  float64 `json:"upload_optimal"`  // the d parameters, over the rounds: Optimal (zCDP for gaussian)
}

// Ledger is a client's privacy after it took part in Rounds rounds of d
// parameters each, against each observer (nil: no guarantee in the worst
// case, see ParameterEpsilon).
type Ledger struct {
	Rounds       int     `json:"rounds"`
	Parameters   int     `json:"parameters"`
	Delta        float64 `json:"delta"` // of the composed bounds
	Eavesdropper *Spent  `json:"eavesdropper"`
	Server       *Spent  `json:"server"`
	Partner      *Spent  `json:"partner"`
	// Central is augcorbin's user-level central epsilon of the round's
	// mean at Delta (AugCorBinCentral), when its condition holds;
	// CentralNote says why there is none.
	Central     *float64 `json:"central_round,omitempty"`
	CentralNote string   `json:"central_note,omitempty"`
	// ServerView says what the server saw when it did not see each
	// message (secure aggregation, a shuffler), and how Server was
	// computed; empty when it saw every message.
	ServerView string `json:"server_view,omitempty"`
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
			s, err = gaussianSpent(eps, b.MechDelta, d, k, delta)
		} else {
			s, err = pureSpent(eps, d, k, delta)
		}
		if err == nil && k > 0 {
			if s.ParamAdvanced, err = Advanced(eps, k, delta); err == nil {
				s.UploadAdvanced, err = Advanced(eps, k*d, delta)
			}
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
func pureSpent(eps float64, d, k int, delta float64) (Spent, error) {
	s := Spent{ParamRound: eps, ParamBasic: float64(k) * eps, UploadBasic: float64(k) * float64(d) * eps}
	var err error
	if s.UploadRound, err = Optimal(eps, d, delta); err != nil {
		return s, err
	}
	if k == 0 {
		return s, nil
	}
	if s.ParamOptimal, err = Optimal(eps, k, delta); err != nil {
		return s, err
	}
	s.UploadOptimal, err = Optimal(eps, k*d, delta)
	return s, err
}

// gaussianSpent composes the gaussian mechanism, (eps, mechDelta)-DP per
// parameter per round, by zCDP. Its rho per parameter is bounded from the
// continuous calibration: mech's discrete Gaussian has sigma at least
// AnalyticGaussianSigma(eps, mechDelta, 2r) and sensitivity at most 2r plus
// two grid steps of at most sigma/2^14 each, so D/sigma is at most
// 1/AnalyticGaussianSigma(eps, mechDelta, 1) + 2^-13, and the discrete
// Gaussian with that ratio is (D/sigma)^2/2-zCDP (Canonne, Kamath and
// Steinke 2020).
func gaussianSpent(eps, mechDelta float64, d, k int, delta float64) (Spent, error) {
	s := Spent{ParamRound: eps, ParamBasic: float64(k) * eps, UploadBasic: float64(k) * float64(d) * eps}
	sigma, err := AnalyticGaussianSigma(eps, mechDelta, 1)
	if err != nil {
		return s, err
	}
	ratio := 1/sigma + math.Ldexp(1, -13)
	rho := ratio * ratio / 2
	at := func(n int) (float64, error) { return ZCDPEpsilon(float64(n)*rho, delta) }
	if s.UploadRound, err = at(d); err != nil {
		return s, err
	}
	if k == 0 {
		return s, nil
	}
	if s.ParamOptimal, err = at(k); err != nil {
		return s, err
	}
	s.UploadOptimal, err = at(k * d)
	return s, err
}
