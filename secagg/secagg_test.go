package secagg

import (
	"crypto/ecdh"
	"crypto/hkdf"
	"crypto/sha256"
	"encoding/binary"
	"fmt"
	"maps"
	"math/big"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"

	"github.com/cloudflare/circl/group"
	"gonum.org/v1/gonum/stat/distuv"

	"github.com/fedpq/fedpq/corr"
)

func seq(n int) []uint64 {
	ids := make([]uint64, n)
	for i := range ids {
		ids[i] = uint64(3*i + 7) // not 0..n-1, to catch index/id mix-ups
	}
	return ids
}

// randomInputs returns n vectors of length d below 2^bits.
func randomInputs(ids []uint64, d, bits int, label string) map[uint64][]uint64 {
	src := corr.Derive([]byte(label), "inputs")
	m := Params{Bits: bits}.mask()
	in := map[uint64][]uint64{}
	for _, id := range ids {
		x := make([]uint64, d)
		src.Fill(x)
		for i := range x {
			x[i] &= m
		}
		in[id] = x
	}
	return in
}

// plainSum is the sum mod 2^bits of the inputs of ids.
func plainSum(in map[uint64][]uint64, ids []uint64, bits int) []uint64 {
	var out []uint64
	for _, id := range ids {
		if out == nil {
			out = make([]uint64, len(in[id]))
		}
		add(out, in[id])
	}
	m := Params{Bits: bits}.mask()
	for i := range out {
		out[i] &= m
	}
	return out
}

// testPolicy accepts small test rounds.
var testPolicy = Policy{Corrupt: 0.05, MinClients: 1, MaxBits: 64}

// shared plays steps 0 to 2 for ids, every client honest, and returns the
// server, the clients and each client's partners.
func shared(t testing.TB, p Params, ids []uint64, label string) (*Server, map[uint64]*Client, map[uint64][]uint64) {
	t.Helper()
	rng := corr.Derive([]byte(label), "clients")
	srv, err := NewServer(p, ids)
	if err != nil {
		t.Fatal(err)
	}
	cl := map[uint64]*Client{}
	for _, id := range ids {
		if cl[id], err = NewClient(p, testPolicy, id, ids, rng); err != nil {
			t.Fatal(err)
		}
		if err := srv.AddKeys(id, cl[id].Keys()); err != nil {
			t.Fatal(err)
		}
	}
	for _, id := range ids {
		keys, err := srv.Keys(id)
		if err != nil {
			t.Fatal(err)
		}
		d, err := cl[id].Share(keys)
		if err != nil {
			t.Fatal(err)
		}
		if err := srv.AddShares(id, d); err != nil {
			t.Fatal(err)
		}
	}
	for _, id := range ids {
		in, err := srv.Deliveries(id)
		if err != nil {
			t.Fatal(err)
		}
		complaints, err := cl[id].Check(in)
		if err != nil || len(complaints) > 0 {
			t.Fatalf("client %d: complaints %v, %v", id, complaints, err)
		}
		if err := srv.AddCheck(id, complaints); err != nil {
			t.Fatal(err)
		}
	}
	partners := map[uint64][]uint64{}
	for _, id := range ids {
		if partners[id], err = srv.Partners(id); err != nil {
			t.Fatal(err)
		}
	}
	return srv, cl, partners
}

// unmask plays steps 4 and 5 for the survivors of srv's request that are in
// answering, and returns the sum.
func unmask(t testing.TB, srv *Server, cl map[uint64]*Client, answering func(uint64) bool) ([]uint64, error) {
	t.Helper()
	req, err := srv.Request()
	if err != nil {
		t.Fatal(err)
	}
	var consenting []uint64
	for _, id := range req.Survivors {
		if answering(id) {
			if _, err := cl[id].Consent(req); err != nil {
				t.Fatal(err)
			}
			consenting = append(consenting, id)
		}
	}
	for _, id := range consenting {
		r, err := cl[id].Unmask(consenting)
		if err != nil {
			t.Fatal(err)
		}
		if err := srv.AddReveal(id, r); err != nil {
			t.Fatal(err)
		}
	}
	return srv.Sum()
}

// reveal plays steps 4 and 5 for every survivor; the k-th survivor, if
// lying(k), reveals a wrong share of every secret it holds.
func reveal(t testing.TB, srv *Server, cl map[uint64]*Client, lying func(k int) bool) Request {
	t.Helper()
	req, err := srv.Request()
	if err != nil {
		t.Fatal(err)
	}
	for _, id := range req.Survivors {
		if _, err := cl[id].Consent(req); err != nil {
			t.Fatal(err)
		}
	}
	for k, id := range req.Survivors {
		r, err := cl[id].Unmask(req.Survivors)
		if err != nil {
			t.Fatal(err)
		}
		if lying(k) {
			for _, m := range []map[uint64][]byte{r.Self, r.Pair} {
				for o := range m {
					m[o][0] ^= 1
				}
			}
		}
		if err := srv.AddReveal(id, r); err != nil {
			t.Fatal(err)
		}
	}
	return req
}

// TestMaskedUniform: one client's masked message for a fixed, far from
// uniform input is uniform on Z_2^7: chi-square over 128 cells of 2^18
// coordinates, below the 1−1e-3 quantile of chi-square(127) (about 181.99).
// The same statistic on the input itself must exceed it, so the test can
// fail.
func TestMaskedUniform(t *testing.T) {
	const bits, d = 7, 1 << 18
	p := Params{Bits: bits, Seed: [32]byte{1}}
	ids := seq(3)
	_, cl, partners := shared(t, p, ids, "uniform")
	x := make([]uint64, d)
	for i := range x {
		x[i] = uint64(i%3) * 5 // three values only
	}
	y, err := cl[ids[0]].Mask(x, partners[ids[0]])
	if err != nil {
		t.Fatal(err)
	}
	crit := distuv.ChiSquared{K: 127}.Quantile(1 - 1e-3)
	chi := func(v []uint64) float64 {
		var c [128]float64
		for _, u := range v {
			c[u]++
		}
		e := float64(len(v)) / 128
		s := 0.0
		for _, o := range c {
			s += (o - e) * (o - e) / e
		}
		return s
	}
	if got := chi(y); got > crit {
		t.Errorf("masked message chi-square %.1f > %.1f", got, crit)
	}
	if got := chi(x); got <= crit {
		t.Errorf("the test has no power: input chi-square %.1f <= %.1f", got, crit)
	}
}

// TestMasksCoverEachOther: a masked input is its input plus the self mask
// plus one pairwise mask per partner, each recomputed here from the secrets
// by the definitions (HKDF of b, and of the ristretto255 agreement): with
// the self mask removed the pairwise masks remain, and the other way round,
// so a server that rebuilds one kind of secret still sees noise.
func TestMasksCoverEachOther(t *testing.T) {
	const bits, d = 16, 64
	p := Params{Bits: bits, Seed: [32]byte{4}, Round: 9}
	ids := seq(4)
	_, cl, partners := shared(t, p, ids, "cover")
	id := ids[1]
	x := randomInputs(ids, d, bits, "cover")[id]
	y, err := cl[id].Mask(x, partners[id])
	if err != nil {
		t.Fatal(err)
	}
	prg := func(secret []byte, info string) []uint64 {
		k, err := hkdf.Key(sha256.New, secret, p.Seed[:], info, 32)
		if err != nil {
			t.Fatal(err)
		}
		v := make([]uint64, d)
		corr.NewStream([32]byte(k)).Fill(v)
		return v
	}
	b, _ := cl[id].b.MarshalBinary()
	self := prg(b, fmt.Sprintf("fedpq/v2 secagg self mask %d %d", p.Round, id))
	pairs := make([]uint64, d)
	for _, j := range partners[id] {
		agreed, _ := grp.NewElement().Mul(grp.NewElement().MulGen(cl[j].s), cl[id].s).MarshalBinary()
		m := prg(agreed, fmt.Sprintf("fedpq/v2 secagg pair mask %d %d %d", p.Round, min(id, j), max(id, j)))
		if id < j {
			add(pairs, m)
		} else {
			sub(pairs, m)
		}
	}
	if len(partners[id]) != 3 {
		t.Fatalf("partners %v", partners[id])
	}
	mask := p.mask()
	diff := func(a, b []uint64) []uint64 {
		out := slices.Clone(a)
		sub(out, b)
		for i := range out {
			out[i] &= mask
		}
		return out
	}
	withoutSelf := diff(y, self)
	withoutPairs := diff(y, pairs)
	if got := diff(withoutSelf, pairs); !slices.Equal(got, x) {
		t.Fatal("y is not x + self mask + pairwise masks as defined")
	}
	if slices.Equal(withoutSelf, x) {
		t.Error("without its self mask, y is the input: no pairwise masks")
	}
	if slices.Equal(withoutPairs, x) {
		t.Error("without its pairwise masks, y is the input: no self mask")
	}
}

// TestMaskKeysFresh: the same client secrets in another round or another
// session give other masks: every mask key is salted with the session seed
// and names the round.
func TestMaskKeysFresh(t *testing.T) {
	ids := seq(3)
	x := make([]uint64, 32)
	masked := func(p Params) []uint64 {
		_, cl, partners := shared(t, p, ids, "same secrets")
		y, err := cl[ids[0]].Mask(x, partners[ids[0]])
		if err != nil {
			t.Fatal(err)
		}
		return y
	}
	base := Params{Bits: 32, Seed: [32]byte{1}, Round: 1}
	y := masked(base)
	for _, p := range []Params{{Bits: 32, Seed: [32]byte{1}, Round: 2}, {Bits: 32, Seed: [32]byte{2}, Round: 1}} {
		if slices.Equal(masked(p), y) {
			t.Errorf("seed %x round %d: the same masks as seed %x round %d", p.Seed[0], p.Round, base.Seed[0], base.Round)
		}
	}
	b, s, S := grp.NewScalar().SetUint64(5), grp.NewScalar().SetUint64(6), grp.NewElement().MulGen(grp.NewScalar().SetUint64(8))
	for _, p := range []Params{{Seed: [32]byte{1}, Round: 2}, {Seed: [32]byte{2}, Round: 1}} {
		q := Params{Seed: [32]byte{1}, Round: 1}
		if selfKey(p, b, 7) == selfKey(q, b, 7) {
			t.Errorf("self-mask key the same for seed %x round %d and seed 1 round 1", p.Seed[0], p.Round)
		}
		if pairKey(p, S, s, 7, 9) == pairKey(q, S, s, 7, 9) {
			t.Errorf("pair-mask key the same for seed %x round %d and seed 1 round 1", p.Seed[0], p.Round)
		}
	}
}

// TestSealedToHolder: a dealing opens under the key HKDF derives from the
// X25519 agreement of the dealer's and the holder's c keys, computed here
// from the definition, and under none derived from public values alone
// (nothing, or the two public keys).
func TestSealedToHolder(t *testing.T) {
	p := Params{Bits: 8, Seed: [32]byte{3}, Round: 5}
	ids := seq(3)
	rng := corr.Derive([]byte("sealed"), "clients")
	srv, _ := NewServer(p, ids)
	cl := map[uint64]*Client{}
	for _, id := range ids {
		cl[id], _ = NewClient(p, testPolicy, id, ids, rng)
		srv.AddKeys(id, cl[id].Keys())
	}
	from, to := ids[0], ids[2]
	keys, _ := srv.Keys(from)
	d, err := cl[from].Share(keys)
	if err != nil {
		t.Fatal(err)
	}
	key := func(secret []byte) [32]byte {
		k, err := hkdf.Key(sha256.New, secret, p.Seed[:], fmt.Sprintf("fedpq/v2 secagg share %d %d %d", p.Round, from, to), 32)
		if err != nil {
			t.Fatal(err)
		}
		return [32]byte(k)
	}
	agreed, err := cl[to].c.ECDH(cl[from].c.PublicKey())
	if err != nil {
		t.Fatal(err)
	}
	aad := d.Values.holderValues(cl[from].g.points(from)[to])
	if _, err := open(key(agreed), d.Sealed[to], aad); err != nil {
		t.Fatalf("the dealing does not open under the agreement's key: %v", err)
	}
	public := append(cl[from].c.PublicKey().Bytes(), cl[to].c.PublicKey().Bytes()...)
	for name, secret := range map[string][]byte{"nothing": nil, "zeros": make([]byte, 32), "the public keys": public} {
		if _, err := open(key(secret), d.Sealed[to], aad); err == nil {
			t.Errorf("the dealing opens under a key derived from %s", name)
		}
	}
	if _, err := open(key(agreed), d.Sealed[to], nil); err == nil {
		t.Error("the dealing opens without its values bound to it")
	}
}

// TestSharesAtPublicPoints: a dealer's shares are its polynomials at the
// points 1..m of its sorted holders, never at 0 (which is the secret):
// rebuilt here by Lagrange interpolation in exact integer arithmetic mod
// the group order from any t of them, they give b and s, and no share
// equals its secret.
func TestSharesAtPublicPoints(t *testing.T) {
	for _, deg := range []int{0, 4} {
		const thr = 5
		p := Params{Bits: 8, Seed: [32]byte{7}, Degree: deg, Threshold: thr}
		ids := seq(9)
		_, cl, _ := shared(t, p, ids, "points")
		order, _ := new(big.Int).SetString("1000000000000000000000000000000014def9dea2f79cd65812631a5cf5d3ed", 16)
		toBig := func(s group.Scalar) *big.Int {
			b, _ := s.MarshalBinary()
			slices.Reverse(b) // little endian
			return new(big.Int).SetBytes(b)
		}
		dealer := ids[4]
		holders := cl[dealer].g.holders(dealer)
		for k := range 2 {
			secret := toBig([]group.Scalar{cl[dealer].b, cl[dealer].s}[k])
			type pt struct{ x, y *big.Int }
			var pts []pt
			for i, h := range holders {
				var v group.Scalar
				if h == dealer {
					v = cl[dealer].own[k]
				} else {
					v = cl[h].held[dealer][k]
				}
				if toBig(v).Cmp(secret) == 0 {
					t.Errorf("degree %d: holder %d's share is the secret", deg, h)
				}
				pts = append(pts, pt{big.NewInt(int64(i + 1)), toBig(v)})
			}
			for _, start := range []int{0, len(pts) - thr} {
				sum := new(big.Int)
				for i, a := range pts[start : start+thr] {
					num, den := big.NewInt(1), big.NewInt(1)
					for j, b := range pts[start : start+thr] {
						if i != j {
							num.Mul(num, b.x)
							den.Mul(den, new(big.Int).Sub(b.x, a.x))
						}
					}
					l := num.Mul(num, new(big.Int).ModInverse(den.Mod(den, order), order))
					sum.Add(sum, l.Mul(l, a.y))
				}
				if sum.Mod(sum, order).Cmp(secret) != 0 {
					t.Errorf("degree %d, secret %d: shares %d..%d at points 1..m do not interpolate to it", deg, k, start, start+thr-1)
				}
			}
		}
	}
}

// TestExactSum: unmasking gives the exact sum mod 2^k, for complete and
// sparse graphs and every field width.
func TestExactSum(t *testing.T) {
	for _, c := range []struct {
		n, degree, bits int
	}{{2, 0, 1}, {3, 0, 7}, {10, 0, 32}, {64, 0, 16}, {100, 16, 64}, {80, 20, 12}} {
		t.Run(fmt.Sprintf("n%d-degree%d-bits%d", c.n, c.degree, c.bits), func(t *testing.T) {
			p := Params{Bits: c.bits, Degree: c.degree, Seed: [32]byte{byte(c.n)}}
			if c.degree > 0 {
				p.Threshold = MinThreshold(c.n, c.degree, testPolicy.Corrupt)
			}
			ids := seq(c.n)
			in := randomInputs(ids, 40, c.bits, "exact")
			out, err := Run(p, in, nil, corr.Derive([]byte("exact"), "clients"))
			if err != nil {
				t.Fatal(err)
			}
			if !slices.Equal(out.Sum, plainSum(in, ids, c.bits)) || len(out.Counted) != c.n {
				t.Errorf("the sum of %d of %d clients differs from the plain sum", len(out.Counted), c.n)
			}
		})
	}
}

// TestRelease: once the sum is taken, Release drops the round's state;
// every step then fails, and the round's verdicts still answer.
func TestRelease(t *testing.T) {
	p := Params{Bits: 16, Degree: 16, Seed: [32]byte{9}}
	p.Threshold = MinThreshold(40, p.Degree, testPolicy.Corrupt)
	ids := seq(40)
	in := randomInputs(ids, 10, p.Bits, "release")
	srv, cl, partners := shared(t, p, ids, "release")
	for _, id := range ids {
		y, err := cl[id].Mask(in[id], partners[id])
		if err != nil {
			t.Fatal(err)
		}
		if err := srv.AddMasked(id, y); err != nil {
			t.Fatal(err)
		}
	}
	sum, err := unmask(t, srv, cl, func(uint64) bool { return true })
	if err != nil || !slices.Equal(sum, plainSum(in, ids, p.Bits)) {
		t.Fatalf("sum: %v", err)
	}
	srv.Release()
	if _, err := srv.Sum(); err != errPhase {
		t.Errorf("Sum after Release: %v", err)
	}
	if _, err := srv.Request(); err != errPhase {
		t.Errorf("Request after Release: %v", err)
	}
	if err := srv.AddReveal(ids[0], Reveal{}); err != errPhase {
		t.Errorf("AddReveal after Release: %v", err)
	}
	if err := srv.AddKeys(ids[0], cl[ids[0]].Keys()); err != errPhase {
		t.Errorf("AddKeys after Release: %v", err)
	}
	if len(srv.WrongShares()) != 0 || len(srv.Excluded()) != 0 || srv.Threshold() != p.Threshold {
		t.Error("the round's verdicts changed")
	}
}

// TestBehaviours plays every deviation of one client, and of two at once,
// in a complete graph of 5 clients and a sparse graph of 80: every honest
// client's input is counted, the deviant's is counted exactly when the
// protocol can still use it, and the sum is exact.
func TestBehaviours(t *testing.T) {
	for _, c := range []struct{ n, degree int }{{5, 0}, {80, 0}} {
		p := Params{Bits: 10, Seed: [32]byte{9}}
		if c.n > completeForTest {
			var err error
			if p.Degree, p.Threshold, err = SparseGraph(c.n, 0.05, 0.1); err != nil {
				t.Fatal(err)
			}
		}
		ids := seq(c.n)
		in := randomInputs(ids, 30, p.Bits, "behaviours")
		play := func(t *testing.T, bs map[uint64]Behaviour) {
			out, err := Run(p, in, bs, corr.Derive([]byte("behaviours"), "clients"))
			if err != nil {
				t.Fatal(err)
			}
			var want []uint64
			for _, id := range ids {
				if bs[id].Counted() {
					want = append(want, id)
				}
			}
			if !slices.Equal(out.Counted, want) {
				t.Fatalf("counted %v, want %v", out.Counted, want)
			}
			if !slices.Equal(out.Sum, plainSum(in, want, p.Bits)) {
				t.Error("the sum differs from the plain sum of the counted inputs")
			}
			for id, b := range bs {
				if (b == WrongReveal) != slices.Contains(out.Wrong, id) {
					t.Errorf("%v client %d: wrong shares found from %v", b, id, out.Wrong)
				}
			}
		}
		for _, b := range Behaviours {
			t.Run(fmt.Sprintf("n%d/%v", c.n, b), func(t *testing.T) {
				play(t, map[uint64]Behaviour{ids[1]: b})
			})
		}
		if c.n > completeForTest {
			t.Run(fmt.Sprintf("n%d/two", c.n), func(t *testing.T) {
				play(t, map[uint64]Behaviour{ids[0]: WrongShares, ids[c.n-1]: LeaveAfterMask})
			})
		}
	}
}

// completeForTest mirrors fl's choice: a complete graph up to 64 clients.
const completeForTest = 64

// TestRobustRecovery: survivors that reveal wrong shares of a client are
// found by their commitments, and the secret is rebuilt from the others,
// up to the last one the threshold allows.
func TestRobustRecovery(t *testing.T) {
	p := Params{Bits: 12, Seed: [32]byte{5}}
	ids := seq(9) // threshold 7 of 9
	in := randomInputs(ids, 20, p.Bits, "robust")
	srv, cl, partners := shared(t, p, ids, "robust")
	for _, id := range ids {
		y, _ := cl[id].Mask(in[id], partners[id])
		if err := srv.AddMasked(id, y); err != nil {
			t.Fatal(err)
		}
	}
	req, _ := srv.Request()
	for _, id := range ids {
		cl[id].Consent(req)
	}
	liars := ids[:2]
	for _, id := range ids {
		r, err := cl[id].Unmask(ids)
		if err != nil {
			t.Fatal(err)
		}
		if slices.Contains(liars, id) {
			for o := range r.Self {
				r.Self[o] = scalarBytesOf(grp.NewScalar().SetUint64(o))
			}
		}
		if err := srv.AddReveal(id, r); err != nil {
			t.Fatal(err)
		}
	}
	sum, err := srv.Sum()
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(sum, plainSum(in, ids, p.Bits)) {
		t.Error("wrong sum")
	}
	if got := srv.WrongShares(); !slices.Equal(got, liars) {
		t.Errorf("wrong shares from %v, want %v", got, liars)
	}
}

// TestManyWrongReveals: on SparseGraph(80, 0.05, 0.1) with 5 clients
// dropped after the check, one survivor in eight reveals a wrong share of
// every secret it holds: the sum is exact, and every liar among the first
// t holders of a secret (those tried first) is blamed, no honest one. On the
// complete graph of 9 (threshold 7) three liars leave 6 right shares of
// each secret: Sum fails, blaming only liars.
func TestManyWrongReveals(t *testing.T) {
	for _, c := range []struct {
		n, drop int
		fails   bool
	}{{80, 5, false}, {9, 0, true}} {
		t.Run(fmt.Sprintf("n%d", c.n), func(t *testing.T) {
			p := Params{Bits: 12, Seed: [32]byte{6}}
			if c.n > completeForTest {
				var err error
				if p.Degree, p.Threshold, err = SparseGraph(c.n, 0.05, 0.1); err != nil {
					t.Fatal(err)
				}
			}
			ids := seq(c.n)
			in := randomInputs(ids, 20, p.Bits, "many")
			srv, cl, partners := shared(t, p, ids, "many")
			survivors := ids[c.drop:]
			for _, id := range survivors {
				y, _ := cl[id].Mask(in[id], partners[id])
				if err := srv.AddMasked(id, y); err != nil {
					t.Fatal(err)
				}
			}
			every := 8
			if c.fails {
				every = 3
			}
			var liars []uint64
			req := reveal(t, srv, cl, func(k int) bool { return k%every == 0 })
			for k, id := range req.Survivors {
				if k%every == 0 {
					liars = append(liars, id)
				}
			}
			if len(req.Dropped) != c.drop {
				t.Fatalf("dropped %v", req.Dropped)
			}
			sum, err := srv.Sum()
			switch {
			case c.fails && (err == nil || !strings.Contains(err.Error(), "cannot rebuild survivor")):
				t.Errorf("Sum: %v, want a survivor's secret that cannot be rebuilt", err)
			case !c.fails && err != nil:
				t.Fatal(err)
			case !c.fails && !slices.Equal(sum, plainSum(in, survivors, p.Bits)):
				t.Error("wrong sum")
			}
			tried := map[uint64]bool{}
			for _, shares := range []map[uint64][]byte{srv.self, srv.pair} {
				for _, recs := range shares {
					for _, h := range slices.Sorted(maps.Keys(revealedShares(recs)))[:srv.threshold] {
						tried[h] = slices.Contains(liars, h)
					}
				}
			}
			got := srv.WrongShares()
			for h, liar := range tried {
				if liar && !c.fails && !slices.Contains(got, h) {
					t.Errorf("liar %d, among the first holders of a secret, was not found", h)
				}
			}
			if len(got) == 0 || slices.ContainsFunc(got, func(h uint64) bool { return !slices.Contains(liars, h) }) {
				t.Errorf("wrong shares from %v, liars %v", got, liars)
			}
		})
	}
}

// TestLagrangeAtZero: the coefficients for t points among 1..m, in any
// order, rebuild P(0) of random polynomials of degree below t.
func TestLagrangeAtZero(t *testing.T) {
	rng := corr.Derive([]byte("lagrange"), "points")
	for _, m := range []int{1, 2, 5, 8, 97, 300} {
		w := dualWeights(m)
		for trial := range 5 {
			pts := make([]uint64, m)
			for k := range pts {
				pts[k] = uint64(k + 1)
			}
			var r [8]byte
			rng.Read(r[:])
			rand.New(rand.NewPCG(binary.LittleEndian.Uint64(r[:]), 0)).Shuffle(m, func(i, j int) { pts[i], pts[j] = pts[j], pts[i] })
			xs := pts[:1+trial*(m-1)/4]
			P, err := newPolynomial(grp.NewScalar().SetUint64(uint64(m)), len(xs), rng)
			if err != nil {
				t.Fatal(err)
			}
			got := grp.NewScalar()
			for i, l := range lagrangeAtZero(xs, w) {
				got.Add(got, grp.NewScalar().Mul(l, P.at(xs[i])))
			}
			if !got.IsEqual(P[0]) {
				t.Errorf("m %d, points %v: Σ l_i P(x_i) is not P(0)", m, xs)
			}
		}
	}
}

// TestPolicy: a client refuses, before sending anything, settings with
// which a server that deviates could learn more than the sum.
func TestPolicy(t *testing.T) {
	ids := seq(100)
	for _, c := range []struct {
		name string
		p    Params
		n    int
		want string
	}{
		{"threshold 1", Params{Bits: 8, Threshold: 1}, 5, "threshold 1"},
		{"alone", Params{Bits: 8}, 1, "1 clients in the round, at least 3"},
		{"two", Params{Bits: 8}, 2, "2 clients in the round, at least 3"},
		{"33 bits", Params{Bits: 33}, 5, "33-bit fields, at most 32"},
		{"half of the holders", Params{Bits: 8, Threshold: 2}, 5, "threshold 2 with 5 share holders; at least 3"},
		{"n 65 degree 10 t 4", Params{Bits: 8, Degree: 10, Threshold: 4}, 65, "threshold 4 with 11 share holders"},
		{"n 100 degree 16 t 6", Params{Bits: 8, Degree: 16, Threshold: 6}, 100, "threshold 6 with 17 share holders"},
		{"degree 2", Params{Bits: 8, Degree: 2, Threshold: 3}, 100, "threshold 3 with 3 share holders; at least 4"},
		{"degree 6", Params{Bits: 8, Degree: 6, Threshold: 7}, 100, "degree 6 among 100 clients"},
	} {
		_, err := NewClient(c.p, DefaultPolicy, ids[0], ids[:c.n], corr.Derive([]byte("policy"), c.name))
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v, want %q", c.name, err, c.want)
		}
	}
	for _, n := range []int{3, 5, 64, 65, 100, 1000} {
		p := Params{Bits: 8}
		if n > completeForTest {
			p.Degree, p.Threshold, _ = SparseGraph(n, 0.05, 0.1)
		}
		if err := DefaultPolicy.Check(p, n); err != nil {
			t.Errorf("n %d: fedpq's own settings refused: %v", n, err)
		}
	}
}

// TestThresholdRule: for every round size and degree SparseGraph picks,
// the threshold exceeds half of a client's holders plus the colluders among
// them, which no two inconsistent requests can then both collect.
func TestThresholdRule(t *testing.T) {
	for n := 3; n <= 400; n += 7 {
		for _, drop := range []float64{0, 0.1, 0.3} {
			k, thr, err := SparseGraph(n, 0.05, drop)
			if err != nil {
				continue
			}
			c := colluders(n, k, 0.05)
			if 2*thr <= k+1+c || thr <= c || thr > k {
				t.Errorf("n %d dropout %v: degree %d threshold %d with %d colluders", n, drop, k, thr, c)
			}
		}
	}
	// The search's results for the sizes docs/security.md quotes.
	for _, c := range []struct{ n, degree, threshold int }{{100, 28, 18}, {1000, 78, 52}} {
		k, thr, err := SparseGraph(c.n, 0.05, 0.1)
		if err != nil || k != c.degree || thr != c.threshold {
			t.Errorf("SparseGraph(%d, 0.05, 0.1) = %d, %d, %v; want %d, %d", c.n, k, thr, err, c.degree, c.threshold)
		}
	}
}

// TestConsentRefusals: a survivor consents to nothing it must not.
func TestConsentRefusals(t *testing.T) {
	p := Params{Bits: 8, Seed: [32]byte{6}}
	ids := seq(5)
	a, b := ids[0], ids[1]
	for _, c := range []struct {
		name string
		r    Request
		want string
	}{
		{"not a survivor", Request{Survivors: ids[1:], Dropped: ids[:1]}, "not listed as a survivor"},
		{"both", Request{Survivors: ids, Dropped: []uint64{b}}, "both as a survivor and as dropped"},
		{"unsorted", Request{Survivors: []uint64{b, a}}, "not sorted"},
		{"stranger", Request{Survivors: append(slices.Clone(ids), 1000)}, "not in the round"},
		{"partner missing", Request{Survivors: ids[:4]}, "neither a survivor nor dropped"},
		{"partners", Request{Survivors: ids[:2], Dropped: ids[2:]}, "1 of its 4 partners survived; threshold 4 needs 3"},
	} {
		_, cl, partners := shared(t, p, ids, "consent")
		if _, err := cl[a].Mask(make([]uint64, 4), partners[a]); err != nil {
			t.Fatal(err)
		}
		if _, err := cl[a].Consent(c.r); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v, want %q", c.name, err, c.want)
		}
		if _, err := cl[a].Unmask(ids); err != errPhase {
			t.Errorf("%s: unmasked after refusing: %v", c.name, err)
		}
	}
	// A request that the other survivors' holders did not consent to.
	_, cl, partners := shared(t, p, ids, "consent")
	cl[a].Mask(make([]uint64, 4), partners[a])
	if _, err := cl[a].Consent(Request{Survivors: ids}); err != nil {
		t.Fatal(err)
	}
	if _, err := cl[a].Unmask(ids[:3]); err == nil || !strings.Contains(err.Error(), "3 of its share holders consented") {
		t.Errorf("unmasked with 3 consents of threshold 4: %v", err)
	}
}

// TestDisconnectedSurvivors: in a sparse graph, survivors that form two
// components (the sum of each would be exposed) are refused, as are so many
// dropped that the honest survivors could be cut off by corrupt ones.
func TestDisconnectedSurvivors(t *testing.T) {
	const n = 65
	ids := seq(n)
	k, thr, err := SparseGraph(n, 0.05, 0.1)
	if err != nil {
		t.Fatal(err)
	}
	p := Params{Bits: 8, Seed: [32]byte{8}, Degree: k, Threshold: thr}
	_, cl, partners := shared(t, p, ids, "disconnect")
	g := cl[ids[0]].g
	// Drop two arcs of k/2 consecutive clients opposite each other: the
	// ring falls in two.
	gone := map[uint64]bool{}
	for d := range k / 2 {
		gone[g.order[(10+d)%n]] = true
		gone[g.order[(40+d)%n]] = true
	}
	var req Request
	for _, id := range ids {
		if gone[id] {
			req.Dropped = append(req.Dropped, id)
		} else {
			req.Survivors = append(req.Survivors, id)
		}
	}
	who := g.order[0]
	cl[who].Mask(make([]uint64, 4), partners[who])
	if _, err := cl[who].Consent(req); err == nil || !strings.Contains(err.Error(), "not connected") {
		t.Errorf("consented to disconnected survivors: %v", err)
	}
	// The same number dropped, scattered: connected, but too many for the
	// bound with 5% corrupt.
	req = Request{}
	for i, id := range ids {
		if i%3 == 1 && len(req.Dropped) < len(gone) {
			req.Dropped = append(req.Dropped, id)
		} else {
			req.Survivors = append(req.Survivors, id)
		}
	}
	_, cl, partners = shared(t, p, ids, "disconnect")
	who = req.Survivors[0]
	cl[who].Mask(make([]uint64, 4), partners[who])
	if _, err := cl[who].Consent(req); err == nil || !strings.Contains(err.Error(), "too many for degree") {
		t.Errorf("consented with %d of %d dropped: %v", len(req.Dropped), n, err)
	}
}

// TestMaskRefusals: a client masks only with partners it exchanged
// dealings with, and with at least threshold−1 of them.
func TestMaskRefusals(t *testing.T) {
	p := Params{Bits: 8, Seed: [32]byte{2}}
	ids := seq(6) // threshold 5
	for _, c := range []struct {
		name     string
		partners func([]uint64) []uint64
		want     string
	}{
		{"too few", func(ps []uint64) []uint64 { return ps[:3] }, "3 partners, threshold 5 needs 4"},
		{"stranger", func(ps []uint64) []uint64 { return append(slices.Clone(ps), 1000) }, "partner 1000 is not a neighbour"},
		{"twice", func(ps []uint64) []uint64 { return append([]uint64{ps[0]}, ps...) }, "listed twice"},
	} {
		_, cl, partners := shared(t, p, ids, "mask")
		if _, err := cl[ids[0]].Mask(make([]uint64, 3), c.partners(partners[ids[0]])); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v, want %q", c.name, err, c.want)
		}
	}
}

// TestServerRefusals: what an honest client cannot send is refused, and
// leaves the server's state as it was.
func TestServerRefusals(t *testing.T) {
	p := Params{Bits: 8, Seed: [32]byte{3}}
	ids := seq(5)
	rng := corr.Derive([]byte("server refusals"), "clients")
	srv, _ := NewServer(p, ids)
	cl := map[uint64]*Client{}
	for _, id := range ids {
		cl[id], _ = NewClient(p, testPolicy, id, ids, rng)
	}
	identity := make([]byte, 32)
	small := make([]byte, 32) // X25519's zero point, of small order
	for _, c := range []struct {
		a    Advertised
		want string
	}{{Advertised{C: cl[ids[0]].Keys().C, S: identity}, "identity"}, {Advertised{C: small, S: cl[ids[0]].Keys().S}, "low order"},
		{Advertised{C: cl[ids[0]].Keys().C[:31], S: cl[ids[0]].Keys().S}, "invalid"}} {
		if err := srv.AddKeys(ids[0], c.a); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("keys: %v, want %q", err, c.want)
		}
	}
	for _, id := range ids {
		if err := srv.AddKeys(id, cl[id].Keys()); err != nil {
			t.Fatal(err)
		}
	}
	if err := srv.AddKeys(ids[0], cl[ids[0]].Keys()); err == nil {
		t.Error("keys twice accepted")
	}
	deal := map[uint64]Dealing{}
	for _, id := range ids {
		keys, _ := srv.Keys(id)
		deal[id], _ = cl[id].Share(keys)
	}
	d := deal[ids[0]]
	short := maps.Clone(d.Sealed)
	delete(short, ids[1])
	delete(short, ids[2])
	bad := []struct {
		d    Dealing
		want string
	}{
		{Dealing{Values: deal[ids[1]].Values, Sealed: d.Sealed}, "another mask key"},
		{Dealing{Values: d.Values, Sealed: short}, "dealt to 2 neighbours; threshold 4"},
		{Dealing{Values: d.Values, Sealed: map[uint64][]byte{ids[1]: d.Sealed[ids[1]], ids[2]: d.Sealed[ids[2]], ids[3]: d.Sealed[ids[3]]}}, fmt.Sprintf("dealt no shares to its neighbour %d", ids[4])},
		{Dealing{Values: d.Values, Sealed: map[uint64][]byte{ids[1]: d.Sealed[ids[1]][:10], ids[2]: d.Sealed[ids[2]], ids[3]: d.Sealed[ids[3]], ids[4]: d.Sealed[ids[4]]}}, "10 bytes"},
		{Dealing{Values: d.Values, Sealed: map[uint64][]byte{ids[1]: d.Sealed[ids[1]], ids[2]: d.Sealed[ids[2]], ids[3]: d.Sealed[ids[3]], ids[4]: d.Sealed[ids[4]], 1000: d.Sealed[ids[3]]}}, "dealt to 1000"},
		{Dealing{Values: &Values{B: d.Values.B, S: d.Values.S[:3]}, Sealed: d.Sealed}, "not for its 5 holders"},
		{Dealing{Values: &Values{B: append(slices.Clone(d.Values.B[:5]), d.Values.B[1]), S: d.Values.S}, Sealed: d.Sealed}, "not of polynomials of degree below the threshold 4"},
	}
	for _, c := range bad {
		if err := srv.AddShares(ids[0], c.d); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("shares: %v, want %q", err, c.want)
		}
	}
	for _, id := range ids {
		if err := srv.AddShares(id, deal[id]); err != nil {
			t.Fatal(err)
		}
	}
	in, _ := srv.Deliveries(ids[0])
	if err := srv.AddCheck(ids[0], []uint64{1000}); err == nil || !strings.Contains(err.Error(), "did not deal to it") {
		t.Errorf("check: %v", err)
	}
	if _, err := cl[ids[0]].Check(in); err != nil {
		t.Fatal(err)
	}
	raw := d.Values.Bytes()
	if v, err := srv.ParseValues(ids[0], raw); err != nil || !slices.EqualFunc(v.B, d.Values.B, group.Element.IsEqual) || !slices.EqualFunc(v.S, d.Values.S, group.Element.IsEqual) {
		t.Errorf("values do not survive their encoding: %v", err)
	}
	if _, err := srv.ParseValues(ids[0], raw[1:]); err == nil {
		t.Error("short values parsed")
	}
	if _, err := srv.ParseValues(ids[0], make([]byte, len(raw))); err == nil {
		t.Error("identity values parsed")
	}
}

// TestSmallOrderKeys: a neighbour whose c key is of small order is left
// out by the client, which deals to the others.
func TestSmallOrderKeys(t *testing.T) {
	p := Params{Bits: 8, Seed: [32]byte{1}}
	ids := seq(6)
	rng := corr.Derive([]byte("small order"), "clients")
	cl, _ := NewClient(p, testPolicy, ids[0], ids, rng)
	keys := map[uint64]Advertised{}
	for _, id := range ids[1:] {
		c, _ := NewClient(p, testPolicy, id, ids, rng)
		keys[id] = c.Keys()
	}
	low, _ := ecdh.X25519().NewPublicKey(make([]byte, 32))
	keys[ids[1]] = Advertised{C: low.Bytes(), S: keys[ids[1]].S}
	d, err := cl.Share(keys)
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := d.Sealed[ids[1]]; ok || len(d.Sealed) != 4 || !slices.Equal(cl.Rejected(), ids[1:2]) {
		t.Errorf("dealt to %d, rejected %v", len(d.Sealed), cl.Rejected())
	}
}

// TestGraph: every client has exactly Degree neighbours, adjacency is
// symmetric, the graph depends only on the seed and the round, and the
// points of a dealer's holders are 1..degree+1.
func TestGraph(t *testing.T) {
	ids := seq(50)
	p := Params{Bits: 8, Degree: 8, Seed: [32]byte{1}}
	g, err := newGraph(p, ids)
	if err != nil {
		t.Fatal(err)
	}
	for _, i := range ids {
		nb := g.neighbours(i)
		if len(nb) != 8 {
			t.Errorf("client %d: %d neighbours", i, len(nb))
		}
		for _, j := range nb {
			if !g.adjacent(j, i) {
				t.Errorf("%d-%d not symmetric", i, j)
			}
		}
		x := slices.Sorted(maps.Values(g.points(i)))
		if len(x) != 9 || x[0] != 1 || x[8] != 9 {
			t.Errorf("client %d: points %v", i, x)
		}
	}
	shuffled := slices.Clone(ids)
	slices.Reverse(shuffled)
	h, _ := newGraph(p, shuffled)
	q := p
	q.Round = 1
	other, _ := newGraph(q, ids)
	if !slices.Equal(g.order, h.order) || slices.Equal(g.order, other.order) {
		t.Error("the graph depends on the ids' order, or not on the round")
	}
}

// TestBadInput: malformed calls are errors, not panics.
func TestBadInput(t *testing.T) {
	for _, p := range []Params{{Bits: 0}, {Bits: 65}, {Bits: 8, Threshold: -1}, {Bits: 8, Degree: 3}, {Bits: 8, Threshold: 6}} {
		if _, err := NewServer(p, seq(5)); err == nil {
			t.Errorf("%+v accepted", p)
		}
	}
	if _, err := NewServer(Params{Bits: 8}, []uint64{1, 1}); err == nil {
		t.Error("a repeated id accepted")
	}
	if _, err := NewClient(Params{Bits: 8}, testPolicy, 99, seq(5), corr.Derive(nil, "x")); err == nil {
		t.Error("a client not in the round accepted")
	}
	_, cl, partners := shared(t, Params{Bits: 4}, seq(3), "bad input")
	if _, err := cl[seq(3)[0]].Mask([]uint64{16}, partners[seq(3)[0]]); err == nil {
		t.Error("a value of 2^bits accepted")
	}
}

// TestBeacon: every round's link hashes to the commitment in t steps and
// no other link does; the session seed depends on the run, the round, the
// clients (not their order) and the link.
func TestBeacon(t *testing.T) {
	b := NewBeacon([32]byte{1}, 20)
	c := b.Commitment()
	for r := 1; r <= 20; r++ {
		if !CheckLink(c, b.Link(r), r) {
			t.Errorf("round %d's link does not check", r)
		}
		if CheckLink(c, b.Link(r), r+1) || CheckLink(c, b.Link(r), r-1) || CheckLink(c, NewBeacon([32]byte{2}, 20).Link(r), r) {
			t.Errorf("round %d: another round's or chain's link checks", r)
		}
	}
	ids := []uint64{3, 1, 2}
	seed := SessionSeed([]byte("run"), 4, ids, b.Link(4))
	if seed != SessionSeed([]byte("run"), 4, []uint64{1, 2, 3}, b.Link(4)) {
		t.Error("the seed depends on the clients' order")
	}
	for name, other := range map[string][32]byte{
		"run":     SessionSeed([]byte("other run"), 4, ids, b.Link(4)),
		"round":   SessionSeed([]byte("run"), 5, ids, b.Link(4)),
		"clients": SessionSeed([]byte("run"), 4, ids[:2], b.Link(4)),
		"link":    SessionSeed([]byte("run"), 4, ids, b.Link(5)),
	} {
		if other == seed {
			t.Errorf("the seed does not depend on the %s", name)
		}
	}
}
