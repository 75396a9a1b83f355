package report

import (
	"encoding/json"
	"fmt"
	"math"
)

// num is a float64 that JSON writes as null when it is NaN or infinite,
// which JSON cannot carry, and reads back from null as NaN. A model that
// diverges (its test loss Inf, say) is a result to record, not a reason
// for the run to stop.
type num float64

func (x num) MarshalJSON() ([]byte, error) {
	if f := float64(x); math.IsNaN(f) || math.IsInf(f, 0) {
		return []byte("null"), nil
	}
	return json.Marshal(float64(x))
}

func (x *num) UnmarshalJSON(b []byte) error {
	if string(b) == "null" {
		*x = num(math.NaN())
		return nil
	}
	return json.Unmarshal(b, (*float64)(x))
}

// optional reads a field that is a number, or null (NaN: it was measured,
// and was not a finite number), into dst; absent (raw nil), dst is left as
// it is.
func optional(name string, raw json.RawMessage, dst **float64) error {
	if raw == nil {
		return nil
	}
	var x num
	if err := json.Unmarshal(raw, &x); err != nil {
		return fmt.Errorf("%s: %w", name, err)
	}
	f := float64(x)
	*dst = &f
	return nil
}

// plainRound and plainSummary encode the fields that need no care in the
// default way: the float fields, shadowed below, are the only ones that
// can hold values JSON cannot.
type (
	plainRound   Round
	plainSummary Summary
)

// MarshalJSON writes r with its NaN and infinite values as null.
func (r Round) MarshalJSON() ([]byte, error) {
	return json.Marshal(struct {
		plainRound
		Accuracy           *num `json:"accuracy,omitempty"`
		Loss               *num `json:"loss,omitempty"`
		ValAccuracy        *num `json:"val_accuracy,omitempty"`
		TrainLoss          num  `json:"train_loss"`
		UplinkBitsPerParam num  `json:"uplink_bits_per_param"`
		Epsilon            num  `json:"epsilon"`
		EpsilonSpent       num  `json:"epsilon_spent"`
		Seconds            num  `json:"seconds"`
	}{
		plainRound(r), (*num)(r.Accuracy), (*num)(r.Loss), (*num)(r.ValAccuracy),
		num(r.TrainLoss), num(r.UplinkBitsPerParam), num(r.Epsilon), num(r.EpsilonSpent), num(r.Seconds),
	})
}

// UnmarshalJSON reads a Round written by MarshalJSON: null is NaN (an
// accuracy or loss of null, a pointer to NaN); a field that is absent is
// left as it was (nil accuracy and loss: the round was not evaluated).
func (r *Round) UnmarshalJSON(b []byte) error {
	a := struct {
		*plainRound
		Accuracy           json.RawMessage `json:"accuracy"`
		Loss               json.RawMessage `json:"loss"`
		ValAccuracy        json.RawMessage `json:"val_accuracy"`
		TrainLoss          num             `json:"train_loss"`
		UplinkBitsPerParam num             `json:"uplink_bits_per_param"`
		Epsilon            num             `json:"epsilon"`
		EpsilonSpent       num             `json:"epsilon_spent"`
		Seconds            num             `json:"seconds"`
	}{
		plainRound: (*plainRound)(r), TrainLoss: num(r.TrainLoss), UplinkBitsPerParam: num(r.UplinkBitsPerParam),
		Epsilon: num(r.Epsilon), EpsilonSpent: num(r.EpsilonSpent), Seconds: num(r.Seconds),
	}
	if err := json.Unmarshal(b, &a); err != nil {
		return err
	}
	for _, f := range []struct {
		name string
		raw  json.RawMessage
		dst  **float64
	}{{"accuracy", a.Accuracy, &r.Accuracy}, {"loss", a.Loss, &r.Loss}, {"val_accuracy", a.ValAccuracy, &r.ValAccuracy}} {
		if err := optional(f.name, f.raw, f.dst); err != nil {
			return err
		}
	}
	r.TrainLoss, r.UplinkBitsPerParam = float64(a.TrainLoss), float64(a.UplinkBitsPerParam)
	r.Epsilon, r.EpsilonSpent, r.Seconds = float64(a.Epsilon), float64(a.EpsilonSpent), float64(a.Seconds)
	return nil
}

// MarshalJSON writes s with its NaN and infinite values as null.
func (s Summary) MarshalJSON() ([]byte, error) {
	return json.Marshal(struct {
		plainSummary
		FinalAccuracy      num `json:"final_accuracy"`
		BestAccuracy       num `json:"best_accuracy"`
		UplinkBitsPerParam num `json:"uplink_bits_per_param"`
		EpsilonPerRound    num `json:"epsilon_per_round"`
		EpsilonSpent       num `json:"epsilon_spent"`
		Seconds            num `json:"seconds"`
	}{
		plainSummary(s), num(s.FinalAccuracy), num(s.BestAccuracy), num(s.UplinkBitsPerParam),
		num(s.EpsilonPerRound), num(s.EpsilonSpent), num(s.Seconds),
	})
}

// UnmarshalJSON reads a Summary written by MarshalJSON: null is NaN; a
// field that is absent is left as it was.
func (s *Summary) UnmarshalJSON(b []byte) error {
	a := struct {
		*plainSummary
		FinalAccuracy      num `json:"final_accuracy"`
		BestAccuracy       num `json:"best_accuracy"`
		UplinkBitsPerParam num `json:"uplink_bits_per_param"`
		EpsilonPerRound    num `json:"epsilon_per_round"`
		EpsilonSpent       num `json:"epsilon_spent"`
		Seconds            num `json:"seconds"`
	}{
		plainSummary: (*plainSummary)(s), FinalAccuracy: num(s.FinalAccuracy), BestAccuracy: num(s.BestAccuracy),
		UplinkBitsPerParam: num(s.UplinkBitsPerParam), EpsilonPerRound: num(s.EpsilonPerRound),
		EpsilonSpent: num(s.EpsilonSpent), Seconds: num(s.Seconds),
	}
	if err := json.Unmarshal(b, &a); err != nil {
		return err
	}
	s.FinalAccuracy, s.BestAccuracy, s.UplinkBitsPerParam = float64(a.FinalAccuracy), float64(a.BestAccuracy), float64(a.UplinkBitsPerParam)
	s.EpsilonPerRound, s.EpsilonSpent, s.Seconds = float64(a.EpsilonPerRound), float64(a.EpsilonSpent), float64(a.Seconds)
	return nil
}
