package privacy

// UserLevel is user-level differential privacy for a whole run: one
// client's entire contribution, every round it took part in and everything
// it sent, as one (eps, delta), against each observer (nil: no guarantee
// against it, Note says why). Neighbouring runs differ by one client's
// whole data, added or removed (Poisson sampling, or every client every
// round) or replaced (fixed-size sampling): Relation says which.
//
// Amplification by sampling is claimed only against observers who do not
// know whom a round sampled: whoever gets the models the run releases,
// when the sampling is the server's secret, uniform draw. The server
// itself knows whom it sampled, so against it a client's guarantee is the
// composition of the rounds it took part in, whatever the sampling.
type UserLevel struct {
	// Model is the guarantee against whoever gets the run's models (every
	// round's, so also the last): the aggregate's noise, amplified by the
	// sampling where Amplification says so.
	Model *Bound `json:"model"`
	// Server is the guarantee against the server: the noise it cannot
	// remove, over the rounds the client took part in (Rounds).
	Server *Bound `json:"server"`
	// Eavesdropper is the guarantee against whoever reads one client's
	// uplink.
	Eavesdropper *Bound `json:"eavesdropper"`
	// Rounds is the number of rounds of the client that took part in the
	// most, which Server and Eavesdropper compose; Model composes every
	// round of the run.
	Rounds int `json:"rounds"`
	// Amplification says which sampling Model's bound amplifies by, or
	// why none.
	Amplification string `json:"amplification"`
	// Relation is the neighbouring relation: "add/remove" or "replace-one".
	Relation string `json:"relation"`
	// Accountant says how Model was computed: the method (PLD or RDP) and
	// the events composed.
	Accountant string `json:"accountant"`
	// NoiseMultiplier is the noise the guarantee is for, z: the sum's
	// standard deviation over the clip (0 where the mechanism has none).
	NoiseMultiplier float64 `json:"noise_multiplier,omitempty"`
	Note            string  `json:"note,omitempty"`
}

// UserGuarantee is l's user-level bound against whoever gets the models,
// or nil where l (which may be nil) states none.
func (l *Ledger) UserGuarantee() *Bound {
	if l == nil || l.User == nil {
		return nil
	}
	return l.User.Model
}
