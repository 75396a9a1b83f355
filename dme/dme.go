// Package dme runs distributed mean estimation: the mechanisms alone, with
// no training. Each trial is one round: every client draws a vector, encodes
// it with the round's randomness (key agreement and pairing included), the
// server decodes and sums the messages as they arrive, and the estimate of
// the mean is compared with the true mean.
package dme

import (
	"context"
	"fmt"
	"math"
	"runtime"
	"sync"
	"time"

	"github.com/fedpq/fedpq/corr"
	"github.com/fedpq/fedpq/fl"
	"github.com/fedpq/fedpq/mech"
)

// Config is one DME experiment.
type Config struct {
	Mechanism string
	Mech      mech.Config
	Clients   int
	Dim       int
	Trials    int
	Input     Input
	Range     mech.Range
	Seed      uint64
	// Transfer makes the leader of each pair send its shared bits to the
	// follower, sealed (the papers' protocol), instead of both deriving
	// them from their Diffie-Hellman secret.
	Transfer bool
	// Workers is the number of clients encoded in parallel (0: all cores).
	Workers int
}

// Result is what one experiment measured.
type Result struct {
	Mechanism string  `json:"mechanism"`
	LDP       bool    `json:"ldp"`
	Epsilon   float64 `json:"epsilon"`
	Clients   int     `json:"clients"`
	Dim       int     `json:"dim"`
	Trials    int     `json:"trials"`
	Input     string  `json:"input"`
	Center    float64 `json:"center"`
	Radius    float64 `json:"radius"`
	Seed      uint64  `json:"seed"`
	// MSE is the mean over coordinates and trials of the squared error of
	// the estimated mean; MSEStderr its standard error.
	MSE       float64 `json:"mse"`
	MSEStderr float64 `json:"mse_stderr"`
	// MSETheory is the exact expected MSE given the inputs and pairing
	// drawn (variances from the closed forms, plus the clipping error), or
	// nil when the mechanism has no closed form.
	MSETheory *float64 `json:"mse_theory"`
	// Bias is the mean over coordinates and trials of the error.
	Bias               float64 `json:"bias"`
	UplinkBitsPerParam float64 `json:"uplink_bits_per_param"`
	// SharedMode is how pairs share bits: "derived", "transfer" or "".
	SharedMode string `json:"shared_mode,omitempty"`
	// SharedSetupBytesPerPair counts the bytes a pair's two clients send to
	// set up their shared bits in one round: two X25519 public keys, plus
	// the sealed bits in transfer mode. 0 for unpaired mechanisms.
	SharedSetupBytesPerPair float64 `json:"shared_setup_bytes_per_pair"`
	// EncodeMParamsPerS and DecodeMParamsPerS are per core: parameters
	// processed per second of time spent in Encode and in Sum.Add.
	EncodeMParamsPerS float64 `json:"encode_mparams_per_s"`
	DecodeMParamsPerS float64 `json:"decode_mparams_per_s"`
	WallSeconds       float64 `json:"wall_seconds"`
}

// Run performs the experiment. progress, if not nil, is called after each trial.
func Run(ctx context.Context, c Config, progress func(done int)) (*Result, error) {
	if c.Clients < 1 || c.Dim < 1 || c.Trials < 1 {
		return nil, fmt.Errorf("dme: clients (%d), dim (%d) and trials (%d) must be at least 1", c.Clients, c.Dim, c.Trials)
	}
	if err := c.Range.Validate(); err != nil {
		return nil, err
	}
	m, err := mech.New(c.Mechanism, c.Mech)
	if err != nil {
		return nil, err
	}
	info, _ := mech.Lookup(c.Mechanism)
	if c.Workers <= 0 {
		c.Workers = runtime.GOMAXPROCS(0)
	}
	start := time.Now()
	var acc accumulator
	acc.theory = true
	for t := range c.Trials {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		if err := runTrial(ctx, c, m, info, uint64(t), &acc); err != nil {
			return nil, err
		}
		if progress != nil {
			progress(t + 1)
		}
	}
	n := float64(c.Trials * c.Dim)
	r := &Result{
		Mechanism: c.Mechanism, LDP: info.LDP, Epsilon: c.Mech.Epsilon,
		Clients: c.Clients, Dim: c.Dim, Trials: c.Trials, Input: c.Input.String(),
		Center: c.Range.Center, Radius: c.Range.Radius, Seed: c.Seed,
		MSE:                acc.sq / n,
		MSEStderr:          math.Sqrt(max(acc.sq2/n-(acc.sq/n)*(acc.sq/n), 0) / n),
		Bias:               acc.err / n,
		UplinkBitsPerParam: float64(m.Bits(c.Dim)) / float64(c.Dim),
		EncodeMParamsPerS:  float64(c.Clients) * n / acc.encode.Seconds() / 1e6,
		DecodeMParamsPerS:  float64(c.Clients) * n / acc.decode.Seconds() / 1e6,
		WallSeconds:        time.Since(start).Seconds(),
	}
	if acc.theory {
		v := acc.theorySum / n
		r.MSETheory = &v
	}
	if m.Coupling() == mech.Paired {
		r.SharedMode = "derived"
		if c.Transfer {
			r.SharedMode = "transfer"
		}
		r.SharedSetupBytesPerPair = float64(fl.SetupBytes(m, c.Dim, c.Transfer))
	}
	return r, nil
}

// accumulator gathers the squared errors of all trials.
type accumulator struct {
	sq, sq2, err   float64
	theory         bool // every client had a closed-form variance
	theorySum      float64
	encode, decode time.Duration
}

// message is one client's upload.
type message struct {
	client  int
	payload []byte
	input   []float32
	theory  float64 // sum over coordinates of the client's (or pair's) variance
	ok      bool    // theory is available
	encode  time.Duration
	err     error
}

// round is one trial: the experiment and its round's randomness.
type round struct {
	c      Config
	m      mech.Mechanism
	t      uint64
	secret []byte
	*fl.Pairing
}

func runTrial(ctx context.Context, c Config, m mech.Mechanism, info mech.Info, t uint64, acc *accumulator) error {
	secret := corr.SeedSecret(c.Seed)
	rd := &round{c: c, m: m, t: t, secret: secret, Pairing: fl.NewPairing(m, secret, t, c.Clients, c.Transfer)}
	sum, err := m.NewSum(c.Dim, c.Range)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	jobs := make(chan int)
	out := make(chan message, c.Workers)
	var wg sync.WaitGroup
	for range c.Workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range jobs {
				msg := rd.client(i)
				select {
				case out <- msg:
				case <-ctx.Done():
					return
				}
			}
		}()
	}
	go func() {
		defer close(jobs)
		for i := range c.Clients {
			select {
			case jobs <- i:
			case <-ctx.Done():
				return
			}
		}
	}()
	go func() { wg.Wait(); close(out) }()

	// The server: add messages in client order, so that float sums are
	// reproducible; at most about Workers messages wait out of order.
	truth := make([]float64, c.Dim)
	clipped := make([]float64, c.Dim)
	pending := map[int]message{}
	next := 0
	var firstErr error
	for msg := range out {
		pending[msg.client] = msg
		for {
			msg, ok := pending[next]
			if !ok {
				break
			}
			delete(pending, next)
			next++
			if firstErr != nil {
				continue
			}
			if msg.err != nil {
				firstErr = msg.err
				cancel()
				continue
			}
			t0 := time.Now()
			if err := sum.Add(msg.payload, rd.ServerSlot(msg.client)); err != nil {
				firstErr = fmt.Errorf("dme: server rejected client %d: %w", msg.client, err)
				cancel()
				continue
			}
			acc.decode += time.Since(t0)
			acc.encode += msg.encode
			acc.theory = acc.theory && msg.ok
			acc.theorySum += msg.theory / float64(c.Clients*c.Clients)
			for j, v := range msg.input {
				truth[j] += float64(v)
				clipped[j] += c.Range.Clip(float64(v))
			}
		}
	}
	if firstErr != nil {
		return firstErr
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	est := make([]float64, c.Dim)
	if err := sum.Mean(est); err != nil {
		return err
	}
	n := float64(c.Clients)
	for j, e := range est {
		d := e - truth[j]/n
		acc.sq += d * d
		acc.sq2 += d * d * d * d
		acc.err += d
		if !info.Unclipped {
			cl := (clipped[j] - truth[j]) / n
			acc.theorySum += cl * cl
		}
	}
	return nil
}

// inputs returns client i's vector, drawn from its own stream.
func (rd *round) inputs(i int) []float32 {
	w := make([]float32, rd.c.Dim)
	rd.c.Input.draw(corr.Derive(rd.secret, "input", rd.t, uint64(i)), rd.c.Range, w)
	return w
}

// client runs client i's side of the round.
func (rd *round) client(i int) message {
	msg := message{client: i, input: rd.inputs(i)}
	slot, err := rd.ClientSlot(i, rd.c.Dim)
	if err != nil {
		msg.err = err
		return msg
	}
	t0 := time.Now()
	msg.payload, msg.err = rd.m.Encode(nil, msg.input, rd.c.Range, slot)
	msg.encode = time.Since(t0)
	msg.theory, msg.ok = rd.variance(i, slot.Role, msg.input)
	return msg
}

// variance is the closed-form variance of client i's output summed over
// coordinates; a pair's leader reports the pair's, its follower nothing.
func (rd *round) variance(i int, role mech.Role, w []float32) (float64, bool) {
	rg := rd.c.Range
	if role == mech.Leader || role == mech.Follower {
		pv, ok := rd.m.(mech.PairVariancer)
		if !ok || role == mech.Follower {
			return 0, ok
		}
		other := rd.inputs(rd.Partner(i))
		s := 0.0
		for j := range w {
			s += pv.PairVariance(float64(w[j]), float64(other[j]), rg)
		}
		return s, true
	}
	if rd.m.Coupling() == mech.Grouped {
		return 0, false
	}
	v, ok := rd.m.(mech.Variancer)
	if !ok {
		return 0, false
	}
	s := 0.0
	for _, x := range w {
		s += v.Variance(float64(x), rg)
	}
	return s, true
}
