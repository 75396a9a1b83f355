package secagg

import (
	"fmt"
	"maps"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"github.com/cloudflare/circl/group"

	"github.com/fedpq/fedpq/corr"
)

// adversary is a server that deviates from the protocol after the honest
// dealing of steps 0 to 2: it chooses each honest client's partners and the
// unmask request each is sent, relays to every client all the consents to
// its request, and pools what honest clients reveal with everything its
// colluding clients hold. It plays on copies of the clients, so that one
// dealing serves many strategies.
type adversary struct {
	p         Params
	threshold int
	ids       []uint64
	cl        map[uint64]*Client
	colluding map[uint64]bool
	in        map[uint64][]uint64
}

func newAdversary(t *testing.T, p Params, ids []uint64, colluding []uint64, label string) *adversary {
	t.Helper()
	_, cl, _ := shared(t, p, ids, label)
	a := &adversary{p: p, ids: ids, cl: cl, colluding: map[uint64]bool{}, in: randomInputs(ids, 8, p.Bits, label)}
	for _, id := range colluding {
		a.colluding[id] = true
	}
	a.threshold = cl[ids[0]].threshold
	return a
}

// strategy is what the server sends: each honest client's partners (none:
// it is not asked to mask) and unmask request (none: not asked to unmask).
type strategy struct {
	partners map[uint64][]uint64
	requests map[uint64]Request
}

// outcome is what a strategy got the server about the victim.
type outcome struct {
	refused  bool // the victim refused its request
	self     bool // the victim's self-mask seed was rebuilt
	pairs    bool // every pair mask on the victim's input could be removed
	revealed bool // its input came out exactly
}

// play runs a strategy against victim and tries to unmask its input.
func (a *adversary) play(t *testing.T, victim uint64, st strategy) outcome {
	t.Helper()
	cl := map[uint64]*Client{}
	var y []uint64
	for _, id := range a.ids {
		if a.colluding[id] {
			continue
		}
		c := *a.cl[id]
		cl[id] = &c
		ps, ok := st.partners[id]
		switch {
		case ok && id == victim:
			var err error
			if y, err = c.Mask(a.in[id], ps); err != nil {
				t.Fatalf("client %d: %v", id, err)
			}
		case ok:
			// Masking only records the partners for the later steps;
			// the other clients' masked inputs are not needed.
			c.partners, c.step = ps, 3
		}
	}
	var out outcome
	signed := map[[32]byte][]uint64{} // the consents to each digest
	for _, id := range slices.Sorted(maps.Keys(st.requests)) {
		dg, err := cl[id].Consent(st.requests[id])
		if err != nil {
			out.refused = out.refused || id == victim
			continue
		}
		signed[dg] = append(signed[dg], id)
	}
	for dg := range signed {
		for id := range a.colluding {
			signed[dg] = append(signed[dg], id) // colluders sign anything
		}
	}
	self, pair := map[uint64]map[uint64]revealed{}, map[uint64]map[uint64]revealed{}
	put := func(into map[uint64]map[uint64]revealed, owner, holder uint64, v group.Scalar) {
		if into[owner] == nil {
			into[owner] = map[uint64]revealed{}
		}
		into[owner][holder] = revealed{x: a.cl[owner].g.points(owner)[holder], v: v}
	}
	for id, req := range st.requests {
		dg := req.Digest(a.p)
		if !slices.Contains(signed[dg], id) {
			continue
		}
		r, err := cl[id].Unmask(signed[dg])
		if err != nil {
			continue
		}
		for kind, m := range []map[uint64][]byte{r.Self, r.Pair} {
			for owner, b := range m {
				v, err := parseScalar(b)
				if err != nil {
					t.Fatal(err)
				}
				put([]map[uint64]map[uint64]revealed{self, pair}[kind], owner, id, v)
			}
		}
	}
	for h := range a.colluding {
		c := a.cl[h]
		for owner, sh := range c.held {
			put(self, owner, h, sh[0])
			put(pair, owner, h, sh[1])
		}
		put(self, h, h, c.own[0])
		put(pair, h, h, c.own[1])
	}
	ip := interpolator{}
	w := dualWeights(len(a.cl[victim].g.holders(victim)))
	rebuild := func(shares map[uint64]revealed) group.Scalar {
		if len(shares) < a.threshold {
			return nil
		}
		var xs []uint64
		var ys []group.Scalar
		for _, h := range slices.Sorted(maps.Keys(shares))[:a.threshold] {
			xs, ys = append(xs, shares[h].x), append(ys, shares[h].v)
		}
		return ip.at0(xs, ys, w)
	}
	b := rebuild(self[victim])
	sV := rebuild(pair[victim])
	out.self = b != nil
	v := a.cl[victim]
	masks := make([]uint64, len(a.in[victim]))
	buf := make([]uint64, len(masks))
	out.pairs = true
	for _, j := range st.partners[victim] {
		SV := grp.NewElement().MulGen(v.s) // public: the victim's advertised key
		switch sj := rebuild(pair[j]); {
		case a.colluding[j]:
			fillMask(pairKey(a.p, SV, a.cl[j].s, victim, j), buf)
		case sV != nil:
			fillMask(pairKey(a.p, v.peers[j], sV, victim, j), buf)
		case sj != nil:
			fillMask(pairKey(a.p, SV, sj, victim, j), buf)
		default:
			out.pairs = false
			continue
		}
		if victim < j {
			add(masks, buf)
		} else {
			sub(masks, buf)
		}
	}
	if out.self && out.pairs && y != nil {
		fillMask(selfKey(a.p, b, victim), buf)
		add(masks, buf)
		x := slices.Clone(y)
		sub(x, masks)
		for i := range x {
			x[i] &= a.p.mask()
		}
		out.revealed = slices.Equal(x, a.in[victim])
	}
	return out
}

// fillMask fills buf with the mask of key.
func fillMask(key [32]byte, buf []uint64) { corr.NewStream(key).Fill(buf) }

// attackStrategy is the attack of issue 30 on victim: it masks with
// partners only, the honest neighbours outside them are named survivors,
// and the partners dropped; every other honest client masks with all its
// neighbours. equivocate sends the victim instead a request in which
// every client survives.
func (a *adversary) attackStrategy(victim uint64, partners []uint64, equivocate bool) strategy {
	st := strategy{partners: map[uint64][]uint64{}, requests: map[uint64]Request{}}
	var attack, calm Request
	for _, id := range a.ids {
		if slices.Contains(partners, id) && !a.colluding[id] {
			attack.Dropped = append(attack.Dropped, id)
		} else {
			attack.Survivors = append(attack.Survivors, id)
		}
		calm.Survivors = append(calm.Survivors, id)
		if a.colluding[id] {
			continue
		}
		st.partners[id] = a.cl[id].g.neighbours(id)
	}
	st.partners[victim] = partners
	for _, id := range attack.Survivors {
		if !a.colluding[id] {
			st.requests[id] = attack
		}
	}
	if equivocate {
		st.requests[victim] = calm
	}
	return st
}

// TestDeviatingServer: the attack of issue 30, in which a server names the
// partners a client masked with as dropped and other neighbours as
// survivors, ends with the victim refusing and its input hidden: at n = 5,
// t = 3 with no colluder, and at n = 80 (degree 22, t = 14) with the 4
// colluders the policy allows, all among the victim's neighbours; also
// when the server sends the victim a harmless request and the others the
// attack.
func TestDeviatingServer(t *testing.T) {
	for _, c := range []struct {
		n, degree, threshold, colluders int
	}{{5, 0, 3, 0}, {80, 22, 14, 4}} {
		p := Params{Bits: 16, Seed: [32]byte{30}, Degree: c.degree, Threshold: c.threshold}
		ids := seq(c.n)
		if err := testPolicy.Check(p, c.n); err != nil {
			t.Fatalf("n %d: the policy refuses the attack's settings: %v", c.n, err)
		}
		victim := ids[0]
		nb := mustNeighbours(t, p, ids, victim)
		colluding := nb[:c.colluders]
		a := newAdversary(t, p, ids, colluding, fmt.Sprintf("deviate %d", c.n))
		partners := nb[c.colluders : c.colluders+c.threshold-1] // honest ones
		for _, equivocate := range []bool{false, true} {
			out := a.play(t, victim, a.attackStrategy(victim, partners, equivocate))
			if !equivocate && !out.refused {
				t.Errorf("n %d: the victim consented to a request dropping all its honest partners", c.n)
			}
			if out.revealed || out.self && out.pairs {
				t.Errorf("n %d equivocate %v: the server rebuilt the victim's self mask and every pair mask (input exposed: %v)", c.n, equivocate, out.revealed)
			}
		}
		// The victim's mask with honest survivors is what it relies on:
		// an honest round rebuilds its self mask only.
		honest := a.attackStrategy(victim, nb, false)
		for id := range honest.partners {
			honest.requests[id] = Request{Survivors: ids}
		}
		if out := a.play(t, victim, honest); !out.self || out.pairs || out.refused {
			t.Errorf("n %d: an honest request: %+v, want the self mask rebuilt and no pair mask", c.n, out)
		}
	}
}

func mustNeighbours(t *testing.T, p Params, ids []uint64, id uint64) []uint64 {
	t.Helper()
	nb, err := Neighbours(p, ids, id)
	if err != nil {
		t.Fatal(err)
	}
	return nb
}

// TestDeviatingServerSearch: a randomized search over a deviating server's
// choices, at n = 20 to 200 and any threshold the policy accepts: 5% of
// the clients collude, placed among the victim's neighbours; the victim
// masks with a random set of partners; each honest client is sent one of
// up to three requests, each dropping a random part of the victim's
// partners and other clients. The server rebuilds the victim's self mask
// in some strategies and a partner's mask key in others, never enough to
// remove every mask from its input.
func TestDeviatingServerSearch(t *testing.T) {
	rng := rand.New(rand.NewPCG(30, 1))
	for _, n := range []int{20, 50, 80, 140, 200} {
		p := Params{Bits: 16, Seed: [32]byte{31, byte(n)}}
		if n > completeForTest {
			var err error
			if p.Degree, _, err = SparseGraph(n, 0.05, 0.1); err != nil {
				t.Fatal(err)
			}
		}
		degree, _, _ := p.shape(n)
		p.Threshold = MinThreshold(n, degree, testPolicy.Corrupt) + rng.IntN(2)
		ids := seq(n)
		victim := ids[rng.IntN(n)]
		nb := mustNeighbours(t, p, ids, victim)
		rng.Shuffle(len(nb), func(i, j int) { nb[i], nb[j] = nb[j], nb[i] })
		colluding := nb[:corruptCount(n, testPolicy.Corrupt)]
		a := newAdversary(t, p, ids, colluding, fmt.Sprintf("search %d", n))
		var selfs, pairs int
		start := time.Now()
		for trial := range 40 {
			st := a.randomStrategy(rng, victim, nb)
			out := a.play(t, victim, st)
			if out.revealed || out.self && out.pairs {
				t.Fatalf("n %d trial %d: the server removed every mask from the victim's input (exposed: %v)", n, trial, out.revealed)
			}
			if out.self {
				selfs++
			}
			if out.pairs {
				pairs++
			}
		}
		t.Logf("n %d: %v", n, time.Since(start))
		if selfs == 0 || pairs == 0 {
			t.Errorf("n %d: the search rebuilt the self mask in %d strategies and every pair mask in %d: it does not explore both", n, selfs, pairs)
		}
	}
}

// randomStrategy draws the victim's partners (threshold−1 to all of its
// neighbours, in random order) and up to three requests.
func (a *adversary) randomStrategy(rng *rand.Rand, victim uint64, nb []uint64) strategy {
	st := strategy{partners: map[uint64][]uint64{}, requests: map[uint64]Request{}}
	for _, id := range a.ids {
		if !a.colluding[id] {
			st.partners[id] = a.cl[id].g.neighbours(id)
		}
	}
	k := a.threshold - 1 + rng.IntN(len(nb)-a.threshold+2)
	perm := slices.Clone(nb)
	rng.Shuffle(len(perm), func(i, j int) { perm[i], perm[j] = perm[j], perm[i] })
	mine := slices.Sorted(slices.Values(perm[:k]))
	st.partners[victim] = mine
	requests := make([]Request, 1+rng.IntN(3))
	for r := range requests {
		drop := map[uint64]bool{}
		switch rng.IntN(3) {
		case 0: // every partner
			for _, j := range mine {
				drop[j] = true
			}
		case 1: // a random part of them
			for _, j := range mine {
				drop[j] = rng.IntN(2) == 0
			}
		}
		if rng.IntN(2) == 0 {
			drop[victim] = true
		}
		for range rng.IntN(4) {
			drop[a.ids[rng.IntN(len(a.ids))]] = true
		}
		for _, id := range a.ids {
			if drop[id] {
				requests[r].Dropped = append(requests[r].Dropped, id)
			} else {
				requests[r].Survivors = append(requests[r].Survivors, id)
			}
		}
	}
	for _, id := range a.ids {
		if !a.colluding[id] {
			st.requests[id] = requests[rng.IntN(len(requests))]
		}
	}
	return st
}

// TestUnmaskCertified: a holder reveals its share of a dropped client's
// mask key only when the request is certified for every neighbour of the
// dropped client, not only for the dropped client: in a sparse graph a
// server could otherwise gather one request's consents around a dropped
// partner of a victim and another's around the victim. Its share of a
// survivor's self-mask seed, only when the request is certified for that
// survivor, whatever its own holders consented to.
func TestUnmaskCertified(t *testing.T) {
	const n = 80
	p := Params{Bits: 16, Seed: [32]byte{32}, Degree: 22, Threshold: 14}
	ids := seq(n)
	_, cl, partners := shared(t, p, ids, "certified")
	g := cl[ids[0]].g
	at := func(pos int) uint64 { return g.order[(pos%n+n)%n] }
	h, j, v := at(0), at(5), at(-11) // j and v are h's neighbours; at(16) is j's
	var consenting []uint64
	for d := -11; d <= 16; d++ { // h's and j's holders; 12 of at(16)'s and of v's
		consenting = append(consenting, at(d))
	}
	var req Request
	for _, id := range ids {
		if id == j {
			req.Dropped = append(req.Dropped, id)
		} else {
			req.Survivors = append(req.Survivors, id)
		}
	}
	for _, witnesses := range [][]uint64{consenting, ids} {
		c := *cl[h]
		if _, err := c.Mask(make([]uint64, 4), partners[h]); err != nil {
			t.Fatal(err)
		}
		if _, err := c.Consent(req); err != nil {
			t.Fatal(err)
		}
		r, err := c.Unmask(witnesses)
		if err != nil {
			t.Fatal(err)
		}
		want := len(witnesses) == n
		if _, revealed := r.Pair[j]; revealed != want {
			t.Errorf("with %d consents: revealed its share of dropped %d's mask key: %v, want %v", len(witnesses), j, revealed, want)
		}
		if _, revealed := r.Self[v]; revealed != want {
			t.Errorf("with %d consents: revealed its share of survivor %d's self-mask seed: %v, want %v", len(witnesses), v, revealed, want)
		}
	}
	if w := cl[h].g.witnesses(h, req.Dropped); len(w) != 3*22+1 {
		t.Errorf("%d witnesses with a dropped neighbour, want the %d clients within 33 places", len(w), 3*22+1)
	}
}
