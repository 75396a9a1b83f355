package privacy

import (
	"encoding/json"
	"fmt"
	"math"
)

// This file saves and restores an Accountant as JSON: the method, the
// relation and the recorded events with their counts. Go writes a float64
// in the shortest form that reads back to the same bits, so a restored
// accountant recomputes the same answers; +Inf (an RDP curve with no bound
// at an order) is written as the string "+Inf".

// accountantFormat names the layout of the saved state.
const accountantFormat = "fedpq-accountant/1"

type accountantJSON struct {
	Format   string      `json:"format"`
	Method   string      `json:"method"`
	Relation string      `json:"relation,omitempty"`
	Events   []countJSON `json:"events"`
}

type countJSON struct {
	Count int        `json:"count"`
	Event *eventJSON `json:"event"`
}

// eventJSON is one recorded event; Kind says which fields are set.
type eventJSON struct {
	Kind   string      `json:"kind"` // gaussian, rdp_curve, pair, poisson, fixed
	Z      float64     `json:"z,omitempty"`
	Name   string      `json:"name,omitempty"`
	Orders []float64   `json:"orders,omitempty"`
	Eps    []jsonFloat `json:"eps,omitempty"`
	P      []float64   `json:"p,omitempty"`
	Q      []float64   `json:"q,omitempty"`
	Rate   float64     `json:"rate,omitempty"`
	M      int         `json:"m,omitempty"`
	N      int         `json:"n,omitempty"`
	Event  *eventJSON  `json:"event,omitempty"`
}

// jsonFloat is a float64 that may be +Inf.
type jsonFloat float64

func (f jsonFloat) MarshalJSON() ([]byte, error) {
	if math.IsInf(float64(f), 1) {
		return []byte(`"+Inf"`), nil
	}
	return json.Marshal(float64(f))
}

func (f *jsonFloat) UnmarshalJSON(b []byte) error {
	if string(b) == `"+Inf"` {
		*f = jsonFloat(math.Inf(1))
		return nil
	}
	var x float64
	if err := json.Unmarshal(b, &x); err != nil {
		return err
	}
	*f = jsonFloat(x)
	return nil
}

func eventKind(e Event) string {
	switch e.(type) {
	case Gaussian:
		return "gaussian"
	case rdpTable, RDPCurve:
		return "rdp_curve"
	case Pair:
		return "pair"
	case PoissonSampled:
		return "poisson"
	case FixedSampled:
		return "fixed"
	case Composed:
		return "composed"
	case Sequence:
		return "sequence"
	}
	return fmt.Sprintf("%T", e)
}

// encodeEvent is a recorded event (an atom's) as JSON.
func encodeEvent(e Event) *eventJSON {
	j := &eventJSON{Kind: eventKind(e)}
	switch e := e.(type) {
	case Gaussian:
		j.Z = e.Z
	case rdpTable:
		j.Name, j.Orders = e.Name, e.Orders
		j.Eps = make([]jsonFloat, len(e.Eps))
		for i, x := range e.Eps {
			j.Eps[i] = jsonFloat(x)
		}
	case Pair:
		j.Name, j.P, j.Q = e.Name, e.P, e.Q
	case PoissonSampled:
		j.Rate, j.Event = e.Rate, encodeEvent(e.Event)
	case FixedSampled:
		j.M, j.N, j.Event = e.M, e.N, encodeEvent(e.Event)
	}
	return j
}

// decodeEvent is the inverse of encodeEvent; flatten checks the result.
func decodeEvent(j *eventJSON) (Event, error) {
	if j == nil {
		return nil, fmt.Errorf("privacy: saved accountant: missing event")
	}
	inner := func() (Event, error) { return decodeEvent(j.Event) }
	switch j.Kind {
	case "gaussian":
		return Gaussian{Z: j.Z}, nil
	case "rdp_curve":
		t := rdpTable{Name: j.Name, Orders: j.Orders, Eps: make([]float64, len(j.Eps))}
		for i, x := range j.Eps {
			t.Eps[i] = float64(x)
		}
		return t, nil
	case "pair":
		return Pair{Name: j.Name, P: j.P, Q: j.Q}, nil
	case "poisson":
		e, err := inner()
		return PoissonSampled{Rate: j.Rate, Event: e}, err
	case "fixed":
		e, err := inner()
		return FixedSampled{M: j.M, N: j.N, Event: e}, err
	}
	return nil, fmt.Errorf("privacy: saved accountant: unknown event kind %q", j.Kind)
}

// MarshalJSON saves the accountant's state.
func (a *Accountant) MarshalJSON() ([]byte, error) {
	s := accountantJSON{Format: accountantFormat, Method: a.method.String(), Relation: a.relation, Events: []countJSON{}}
	for _, x := range a.atoms {
		s.Events = append(s.Events, countJSON{Count: x.Count, Event: encodeEvent(x.Event)})
	}
	return json.Marshal(s)
}

// UnmarshalJSON restores a state MarshalJSON saved, checking every event
// as Compose does; on error the accountant is left as it was.
func (a *Accountant) UnmarshalJSON(b []byte) error {
	var s accountantJSON
	if err := json.Unmarshal(b, &s); err != nil {
		return fmt.Errorf("privacy: saved accountant: %w", err)
	}
	if s.Format != accountantFormat {
		return fmt.Errorf("privacy: saved accountant: format %q, want %q", s.Format, accountantFormat)
	}
	var m Method
	switch s.Method {
	case "auto":
		m = Auto
	case "pld":
		m = PLD
	case "rdp":
		m = RDP
	default:
		return fmt.Errorf("privacy: saved accountant: unknown method %q", s.Method)
	}
	r := NewAccountant(m)
	for _, c := range s.Events {
		if c.Count < 1 {
			return fmt.Errorf("privacy: saved accountant: count %d must be at least 1", c.Count)
		}
		e, err := decodeEvent(c.Event)
		if err != nil {
			return err
		}
		if err := r.Compose(Composed{Event: e, Count: c.Count}); err != nil {
			return fmt.Errorf("privacy: saved accountant: %w", err)
		}
	}
	if r.relation != s.Relation {
		return fmt.Errorf("privacy: saved accountant: relation %q, but its events say %q", s.Relation, r.relation)
	}
	*a = *r
	return nil
}
