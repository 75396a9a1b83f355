package fl

import (
	"errors"
	"fmt"
	"math/bits"
	"slices"
	"sync"

	"github.com/fedpq/fedpq/corr"
	"github.com/fedpq/fedpq/mech"
	"github.com/fedpq/fedpq/secagg"
	"github.com/fedpq/fedpq/wire"
)

// secure is a round's aggregate under secure aggregation: each client
// turns its payloads into their integer fields (mech.Integer), masks them
// with SecAgg+ (package secagg) in Z_2^k, k the fewest bits that hold the
// round's exact sum, and the server learns that sum only. Decoding the sum
// is the same arithmetic as the streaming aggregate's, so a round ends
// with the same model, bit for bit, as without secure aggregation.
//
// In a simulation the clients' side of the protocol runs here as well,
// each client with randomness derived for it alone and the policy of a
// deployed client (secagg.DefaultPolicy), their independent steps in
// parallel; a client that drops out does so after it has checked its
// shares and before it masks: the server then rebuilds its mask key from
// the survivors' shares. A deployed server's clients run their side
// themselves (package transport relays the protocol's messages and calls
// Plan.AddMasked). A simulation with Config.SecureSumOnly runs no protocol:
// it sums the fields as the unmasking would return them.
type secure struct {
	m        mech.Integer
	slot     func(pos int) mech.Slot
	ranges   []mech.Range
	sizes    []int // parameters per tensor
	fields   []int // integer fields per tensor
	ids      []uint64
	params   secagg.Params
	link     [32]byte // the round's beacon link, from which params.Seed derives
	server   *secagg.Server
	clients  []*secagg.Client // by position; nil for a deployed server's clients
	partners [][]uint64       // by position, in a simulation
	workers  int
	got      []bool
	n        int
	bits     int      // k
	setup    int64    // bytes of keys, dealings, checks, requests, consents and reveals
	scratch  []uint64 // addMasked's unpacked upload
	unmasked bool     // by Plan.Unmask: sum and sumErr are unmaskedSum's
	plain    []uint64 // the fields' running sum where the protocol is not run (Config.SecureSumOnly)
	shares   []uint64 // the server's shares of the noise, summed (addShare)
	nShares  int
	sum      []uint64
	sumErr   error
}

// A round of up to completeGraph clients runs SecAgg+ on the complete
// graph: every client a neighbour of every other, threshold floor(2n/3)+1,
// so that any third of the clients less one may drop at any step. Larger
// rounds use a sparse random graph (secagg.SparseGraph) sized for up to
// secureCorrupt of the clients colluding with a server that deviates and
// the dropout of secureDropout; more dropouts than that can leave a round
// unable to unmask (it is then discarded, with the reason).
const (
	completeGraph = 64
	secureCorrupt = 0.05
)

// beacon is the run's chain of secure rounds' graph randomness
// (secagg.Beacon), from the server's secret.
func (e *Engine) beacon() secagg.Beacon {
	return secagg.NewBeacon(corr.Key(e.secret, "secagg-beacon", 0), e.cfg.Rounds)
}

// BeaconCommitment is what a server publishes of its beacon before the
// first round.
func (e *Engine) BeaconCommitment() [32]byte { return e.beacon().Commitment() }

// secureDropout is the fraction of a round's clients the sparse graph
// allows to drop: twice the configured dropout plus 5%, at least 10%.
func (e *Engine) secureDropout() float64 {
	return min(max(2*e.cfg.Dropout+0.05, 0.1), 0.9-secureCorrupt)
}

// checkSecure reports why a run cannot use secure aggregation: a mechanism
// whose decode is not affine in integer fields, rounds of fewer clients
// than a client's default policy accepts, or unequal weights (a server,
// which does not know its clients' examples when it starts, needs
// weighting: mean).
func (e *Engine) checkSecure() error {
	if _, err := mech.IntegerOf(e.m); err != nil {
		return fmt.Errorf("fl: secure aggregation: %w", err)
	}
	if n, least := e.roundSize(), secagg.DefaultPolicy.MinClients; n < least {
		return fmt.Errorf("fl: secure aggregation needs rounds of at least %d clients, as its clients demand (the sum of 2 tells each the other's input); a round here has %d", least, n)
	}
	if e.task.Clients == nil && e.cfg.Weighting != "mean" {
		return errors.New("fl: a server's secure rounds sum the clients' messages with equal weights: set weighting: mean")
	}
	if e.cfg.Weighting == "examples" {
		for _, n := range e.examples {
			if n != e.examples[0] {
				return errors.New("fl: secure aggregation sums the clients' messages with equal weights, and these clients hold different numbers of examples: set weighting: mean")
			}
		}
	}
	return nil
}

// SecureBits is the width k of the fields a secure round of n clients of m
// masks: the fewest bits that hold the exact sum, or the modulus's of a
// mechanism that sums modulo 2^b by design (modular clipping). A client
// checks the server's against it.
func SecureBits(m mech.Integer, n int) (int, error) {
	k := max(mech.SumBits(m, n), 1)
	if mm, ok := m.(mech.Modular); ok {
		k = bits.TrailingZeros64(mm.Modulus())
	}
	if k > 32 {
		// Masked fields travel as packed fields of at most 32 bits
		// (package wire); 2^32 levels of sum are far beyond any round.
		return 0, fmt.Errorf("fl: secure aggregation of %d clients needs %d-bit sums; at most 32 are supported", n, k)
	}
	return k, nil
}

func (e *Engine) newSecure(t int, ranges []mech.Range, sel []int, slot func(int) mech.Slot) (*secure, error) {
	m, err := mech.IntegerOf(e.m)
	if err != nil {
		return nil, err
	}
	s := &secure{m: m, slot: slot, ranges: ranges, got: make([]bool, len(sel)), workers: e.cfg.Workers}
	if s.bits, err = SecureBits(m, len(sel)); err != nil {
		return nil, err
	}
	s.sizes = e.sizes
	for _, n := range e.sizes {
		s.fields = append(s.fields, m.Fields(n))
	}
	for _, k := range sel {
		s.ids = append(s.ids, uint64(k))
	}
	s.link = e.beacon().Link(t)
	p := secagg.Params{Bits: s.bits, Seed: secagg.SessionSeed(e.task.RunID, uint64(t), s.ids, s.link), Round: uint64(t)}
	if len(sel) > completeGraph {
		if degree, threshold, err := secagg.SparseGraph(len(sel), secureCorrupt, e.secureDropout()); err == nil && degree < len(sel)-1 {
			p.Degree, p.Threshold = degree, threshold
		}
	}
	s.params = p
	if e.cfg.SecureSumOnly {
		s.plain = make([]uint64, s.total())
		return s, nil
	}
	if s.server, err = secagg.NewServer(p, s.ids); err != nil {
		return nil, err
	}
	if e.task.Clients == nil {
		return s, nil // a deployed server's clients run their side themselves
	}
	if err := s.simulateSetup(e.secret, t); err != nil {
		return nil, fmt.Errorf("fl: secure aggregation, round %d: %w", t, err)
	}
	return s, nil
}

// idBytes is the size of a client id in the protocol's messages (uint32).
const idBytes = 4

// simulateSetup plays the protocol's first three steps for the simulated
// clients: every client advertises its keys, deals its shares to its
// neighbours and checks those dealt to it; the server keeps the clients
// whose secrets can be rebuilt, and names each its partners. Simulated
// clients are honest: none complains, so none has shares to disclose.
func (s *secure) simulateSetup(secret []byte, t int) error {
	n := len(s.ids)
	s.clients = make([]*secagg.Client, n)
	if err := parallel(n, s.workers, func(pos int) (err error) {
		rng := corr.Derive(secret, "secagg-client", uint64(t), uint64(pos))
		s.clients[pos], err = secagg.NewClient(s.params, secagg.DefaultPolicy, s.ids[pos], s.ids, rng)
		return err
	}); err != nil {
		return err
	}
	for pos, id := range s.ids {
		keys := s.clients[pos].Keys()
		if err := s.server.AddKeys(id, keys); err != nil {
			return err
		}
		s.setup += int64(len(keys.C) + len(keys.S))
	}
	peers := make([]map[uint64]secagg.Advertised, n)
	for pos, id := range s.ids {
		keys, err := s.server.Keys(id)
		if err != nil {
			return err
		}
		peers[pos] = keys
		s.setup += int64(len(keys) * (idBytes + 64))
	}
	dealings := make([]secagg.Dealing, n)
	if err := parallel(n, s.workers, func(pos int) (err error) {
		dealings[pos], err = s.clients[pos].Share(peers[pos])
		return err
	}); err != nil {
		return err
	}
	for pos, id := range s.ids {
		d := dealings[pos]
		if err := s.server.AddShares(id, d); err != nil {
			return err
		}
		s.setup += int64(secagg.ValuesBytes(len(d.Values.B) - 1))
		for _, c := range d.Sealed {
			s.setup += int64(idBytes + len(c))
		}
	}
	inbox := make([]map[uint64]secagg.Delivery, n)
	for pos, id := range s.ids {
		in, err := s.server.Deliveries(id)
		if err != nil {
			return err
		}
		inbox[pos] = in
		for _, d := range in {
			s.setup += int64(idBytes + len(d.Values) + len(d.Sealed))
		}
	}
	complaints := make([][]uint64, n)
	if err := parallel(n, s.workers, func(pos int) (err error) {
		complaints[pos], err = s.clients[pos].Check(inbox[pos])
		return err
	}); err != nil {
		return err
	}
	for pos, id := range s.ids {
		if err := s.server.AddCheck(id, complaints[pos]); err != nil {
			return err
		}
		s.setup += int64(idBytes * len(complaints[pos]))
	}
	s.partners = make([][]uint64, n)
	for pos, id := range s.ids {
		ps, err := s.server.Partners(id)
		if err != nil {
			return err
		}
		s.partners[pos] = ps
		s.setup += int64(idBytes * len(ps))
	}
	return nil
}

// parallel runs f(k) for k = 0..n-1, up to workers at once, and joins their
// errors in order.
func parallel(n, workers int, f func(k int) error) error {
	errs := make([]error, n)
	next := make(chan int)
	var wg sync.WaitGroup
	for range max(1, min(workers, n)) {
		wg.Go(func() {
			for k := range next {
				errs[k] = f(k)
			}
		})
	}
	for k := range n {
		next <- k
	}
	close(next)
	wg.Wait()
	return errors.Join(errs...)
}

// add is the client at pos masking its upload's fields, and the server
// adding the masked vector to its running sum; under SecureSumOnly, the
// fields added as they are.
func (s *secure) add(pos int, u Upload) error {
	if s.clients == nil && s.plain == nil {
		return errors.New("a deployed client's upload in a secure round is masked: Plan.AddMasked")
	}
	if len(u.Payloads) != len(s.sizes) {
		return fmt.Errorf("upload has %d tensors, the model %d", len(u.Payloads), len(s.sizes))
	}
	x, err := Fields(s.m, u.Payloads, s.sizes)
	if err != nil {
		return err
	}
	if s.plain != nil {
		for i, v := range x {
			s.plain[i] += v
		}
		s.got[pos] = true
		s.n++
		return nil
	}
	id := s.ids[pos]
	y, err := s.clients[pos].Mask(x, s.partners[pos])
	if err != nil {
		return err
	}
	if err := s.server.AddMasked(id, y); err != nil {
		return err
	}
	s.got[pos] = true
	s.n++
	return nil
}

func (s *secure) count() int { return s.n }

// addShare adds the server's share of an L2 mechanism's noise (topUp) to
// the fields it will add to the unmasked sum before decoding it; the
// sum's width k holds the uploads' fields, and these are added in full.
// The share, one vector, is unpacked into s.scratch, reused.
func (s *secure) addShare(payload []byte) error {
	if len(s.sizes) != 1 {
		return fmt.Errorf("fl: a share of the noise is one vector, not %d", len(s.sizes))
	}
	f := s.m.Fields(s.sizes[0])
	if cap(s.scratch) < f {
		s.scratch = make([]uint64, f)
	}
	x := s.scratch[:f]
	if err := s.m.Unpack(x, payload, s.sizes[0]); err != nil {
		return err
	}
	if s.shares == nil {
		s.shares = make([]uint64, f)
	}
	for i, v := range x {
		s.shares[i] += v
	}
	s.nShares++
	return nil
}

// uploadBits is one client's masked upload: k bits per field.
func (s *secure) uploadBits() int {
	b := 0
	for _, f := range s.fields {
		b += s.bits * f
	}
	return b
}

// addMasked adds a deployed client's masked upload: its fields packed k
// bits each.
func (s *secure) addMasked(pos int, masked []byte) error {
	// Unpacked into the same buffer every time (AddMasked keeps nothing
	// of y): 63 KB an upload for the linear model, 10,000 of them in a
	// deployed round's masking step.
	y, err := unpackFields(s.scratch, masked, s.total(), s.bits)
	if err != nil {
		return err
	}
	s.scratch = y
	if err := s.server.AddMasked(s.ids[pos], y); err != nil {
		return err
	}
	s.got[pos] = true
	s.n++
	return nil
}

func (s *secure) total() int {
	n := 0
	for _, f := range s.fields {
		n += f
	}
	return n
}

// mean unmasks the sum, from the survivors' shares, and decodes it. In a
// simulation the survivors answer the unmask request here; a deployed
// server has collected their answers before the round ends.
func (s *secure) mean() ([][]float64, error) {
	sum, err := s.sum, s.sumErr
	if !s.unmasked {
		sum, err = s.unmaskedSum()
	}
	if err != nil {
		return nil, err
	}
	return s.decode(sum)
}

// unmaskedSum is the sum of the survivors' fields, unmasked: modulo 2^k,
// as the protocol returns it.
func (s *secure) unmaskedSum() ([]uint64, error) {
	if s.plain != nil {
		sum := make([]uint64, len(s.plain))
		for i, v := range s.plain {
			sum[i] = v & (1<<s.bits - 1)
		}
		return sum, nil
	}
	if s.clients != nil {
		if err := s.unmask(); err != nil {
			return nil, err
		}
	}
	return s.server.Sum()
}

// unmask is the simulated survivors' answers to the unmask request: each
// checks and consents to it, sees its holders' consents (signed, in a
// deployment), and reveals its shares.
func (s *secure) unmask() error {
	req, err := s.server.Request()
	if err != nil {
		return err
	}
	listed := int64(idBytes * (len(req.Survivors) + len(req.Dropped)))
	pos := make(map[uint64]int, len(s.ids))
	for k, id := range s.ids {
		pos[id] = k
	}
	survivors := req.Survivors
	if err := parallel(len(survivors), s.workers, func(k int) error {
		_, err := s.clients[pos[survivors[k]]].Consent(req)
		return err
	}); err != nil {
		return err
	}
	reveals := make([]secagg.Reveal, len(survivors))
	if err := parallel(len(survivors), s.workers, func(k int) (err error) {
		reveals[k], err = s.clients[pos[survivors[k]]].Unmask(survivors)
		return err
	}); err != nil {
		return err
	}
	for k, id := range survivors {
		r := reveals[k]
		// The request, its consent (a signature), the consents of the
		// others it needs relayed, and the shares revealed.
		s.setup += listed + 64 + int64((idBytes+64)*(len(s.clients[pos[id]].Witnesses())-1))
		s.setup += int64((idBytes + 32) * (len(r.Self) + len(r.Pair)))
		if err := s.server.AddReveal(id, r); err != nil {
			return err
		}
	}
	return nil
}

// decode turns the sum of the survivors' fields, and the server's shares
// of the noise, into the mean.
func (s *secure) decode(sum []uint64) ([][]float64, error) {
	if s.shares != nil {
		all := make([]uint64, len(sum))
		for i, v := range sum {
			all[i] = v + s.shares[i]
		}
		sum = all
	}
	// The survivors' dither streams, in position order, as the streaming
	// aggregate reads them; each runs on from tensor to tensor.
	var slots []mech.Slot
	for pos, ok := range s.got {
		if ok {
			slots = append(slots, s.slot(pos))
		}
	}
	est := make([][]float64, len(s.sizes))
	off := 0
	for i, n := range s.sizes {
		est[i] = make([]float64, n)
		if err := s.m.DecodeSum(est[i], sum[off:off+s.fields[i]], s.n+s.nShares, s.ranges[i], slots); err != nil {
			return nil, err
		}
		off += s.fields[i]
	}
	return est, nil
}

// Fields is an upload's integer fields, tensor after tensor: what a client
// masks under secure aggregation.
func Fields(m mech.Integer, payloads [][]byte, sizes []int) ([]uint64, error) {
	if len(payloads) != len(sizes) {
		return nil, fmt.Errorf("upload has %d tensors, the model %d", len(payloads), len(sizes))
	}
	total := 0
	for _, n := range sizes {
		total += m.Fields(n)
	}
	x := make([]uint64, total)
	off := 0
	for i, p := range payloads {
		f := m.Fields(sizes[i])
		if err := m.Unpack(x[off:off+f], p, sizes[i]); err != nil {
			return nil, fmt.Errorf("tensor %d: %w", i, err)
		}
		off += f
	}
	return x, nil
}

// PackFields packs values below 2^k (k <= 32), k bits each, as package
// wire does.
func PackFields(y []uint64, k int) []byte {
	p := wire.NewPacker(make([]byte, 0, wire.PackedLen(len(y), k)), k)
	for _, v := range y {
		p.Put(uint32(v))
	}
	return p.Bytes()
}

// UnpackFields reads n values of k bits packed by PackFields, refusing a
// wrong length or nonzero padding.
func UnpackFields(b []byte, n, k int) ([]uint64, error) {
	return unpackFields(nil, b, n, k)
}

// unpackFields is UnpackFields into dst's memory, if it has room.
func unpackFields(dst []uint64, b []byte, n, k int) ([]uint64, error) {
	u, err := wire.NewUnpacker(b, n, k)
	if err != nil {
		return nil, fmt.Errorf("masked upload: %w", err)
	}
	y := slices.Grow(dst[:0], n)[:n]
	for i := range y {
		y[i] = uint64(u.Next())
	}
	return y, nil
}
