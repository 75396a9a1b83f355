package fl

import (
	"errors"
	"fmt"
	"math"

	"github.com/fedpq/fedpq/corr"
	"github.com/fedpq/fedpq/mech"
	"github.com/fedpq/fedpq/robust"
)

// ClippedUpdates is the input a DP-FedAvg client encodes (Config.Input):
// its update, every tensor in turn flattened into one vector, scaled down
// to L2 norm at most the round's clip, the radius of the round's one
// range. The clip is public: the server announces it with the model.
const ClippedUpdates = "clipped-updates"

// ClippedLayers is ClippedUpdates with the clip split among the tensors
// (DPFedAvg.PerLayer): tensor i of n_i of the model's d parameters is
// clipped to clip sqrt(n_i/d) on its own, so that the whole vector's norm
// is still at most clip and the guarantee is the same.
const ClippedLayers = "clipped-layers"

// DPFedAvg is user-level DP-FedAvg (McMahan, Ramage, Talwar and Zhang,
// "Learning differentially private recurrent language models", ICLR 2018;
// Kairouz, Liu and Steinke 2021 for the distributed form): each client's
// whole update is clipped in L2 norm to Clip and encoded as one vector, and
// the round's sum gets Gaussian-like noise of standard deviation Noise
// Clip. Who adds the noise is the mechanism's choice:
//
//   - none: the client sends its clipped update as float32, and the server,
//     trusted, adds N(0, (Noise Clip)^2) to each coordinate of the sum
//     (central DP: a guarantee against whoever gets the model, none
//     against the server);
//   - an L2 mechanism (mech.L2: ddgauss, skellam, pbm), run under secure
//     aggregation: the clients add the noise, each a share, and the server
//     sees only the noisy sum (distributed DP: a guarantee against the
//     server too).
//
// The estimate divides the noisy sum by the expected number of clients of
// a round, not the number received, so that one client's presence moves it
// by at most Clip over that number (McMahan et al.'s fixed denominator).
type DPFedAvg struct {
	// Clip is the L2 bound C of a client's whole update; 0 turns DP-FedAvg
	// off (the per-parameter ranges of Range clip instead).
	Clip float64
	// Noise is the noise multiplier z: the sum's noise standard deviation
	// is z C. 0 with TargetEpsilon: calibrated for it; 0 without: no
	// noise (clipped FedAvg, no privacy).
	Noise float64
	// TargetEpsilon is the user-level epsilon the whole run must meet, at
	// Delta, against whoever gets the model: Noise is the smallest z that
	// meets it (a target the run cannot meet is refused, with the
	// smallest epsilon it can).
	TargetEpsilon float64
	// Delta is the delta of the user-level guarantee (0: 1e-5).
	Delta float64
	// Quantile, in (0, 1), makes the clip adaptive (Andrew, Thakkar,
	// McMahan and Ramaswamy, "Differentially private learning with
	// adaptive clipping", NeurIPS 2021): each client also sends whether
	// its update's norm is at most the round's clip, the server adds
	// N(0, QuantileNoise^2) to the count, and the clip moves by the
	// geometric rule C exp(-eta (fraction - Quantile)), eta = 0.2, from
	// Clip. The count is private too: the update's noise multiplier
	// becomes (Noise^-2 - (2 QuantileNoise)^-2)^(-1/2) so that the two
	// together are Gaussian at Noise (the paper's Theorem 1). 0: a fixed
	// clip. With an L2 mechanism the indicator is one more coordinate of
	// the client's vector, scaled so that the mechanism's own noise on the
	// count has standard deviation QuantileNoise: the vector's bound is
	// then the update's clip over sqrt(1 - (Noise/(2 QuantileNoise))^2),
	// the same split (indicatorScale).
	Quantile float64
	// QuantileNoise is the count's noise standard deviation; 0: the
	// paper's expected clients per round / 20.
	QuantileNoise float64
	// PerLayer clips each tensor on its own, to Clip sqrt(its size / the
	// model's) (ClippedLayers): a layer with large updates no longer
	// shrinks the others, at the same guarantee.
	PerLayer bool
	// Tree is DP-FTRL (Kairouz, McMahan, Song, Thakkar, Thakurta and Xu,
	// "Practical and private (deep) learning without sampling or
	// shuffling", ICML 2021): instead of fresh noise each round, the
	// server adds tree-aggregation noise (privacy.Tree, standard deviation
	// Noise Clip per node) to the prefix sums of the clipped updates and
	// moves the model by the difference of consecutive noisy prefix sums.
	// Its guarantee needs no sampling: it holds for every client that took
	// part in at most as many rounds as the most-sampled one
	// (privacy.TreeWorstCase), against whoever gets the models. Central
	// (mechanism none) only.
	Tree bool
}

// clipLR is eta, the adaptive clip's geometric step (Andrew et al.'s
// default).
const clipLR = 0.2

// isMean reports whether r is the streaming mean.
func isMean(r robust.Rule) bool {
	_, ok := r.(robust.Mean)
	return ok
}

// on reports whether DP-FedAvg is on.
func (d DPFedAvg) on() bool { return d.Clip > 0 }

// DefaultUserDelta is the user-level guarantee's delta when none is set:
// below 1/N for every federation fedpq simulates (McMahan et al. use
// 1/N^1.1), as the anchors' tables do.
const DefaultUserDelta = 1e-5

// delta is the user-level guarantee's delta.
func (d DPFedAvg) delta() float64 {
	if d.Delta > 0 {
		return d.Delta
	}
	return DefaultUserDelta
}

// Input is what a client encodes of its trained model: Perturb's weights
// or updates, or under DP-FedAvg ClippedUpdates.
func (c *Config) Input() string {
	if c.DP.on() && c.DP.PerLayer {
		return ClippedLayers
	}
	if c.DP.on() {
		return ClippedUpdates
	}
	return c.Perturb
}

// Encoded is the sizes of the vectors a client encodes, each with its
// range, for a model whose tensors have the sizes given: the tensors
// themselves, or under DP-FedAvg the whole update in one (and, with an
// adaptive clip, whether it was within the clip: in another of one value
// under central noise, or as one more coordinate of the same vector for
// an L2 mechanism, whose noise then covers it).
func (c *Config) Encoded(tensors []int) []int {
	if !c.DP.on() {
		return tensors
	}
	total := 0
	for _, n := range tensors {
		total += n
	}
	switch {
	case c.DP.Quantile > 0 && c.Mechanism == "none":
		return []int{total, 1}
	case c.DP.Quantile > 0:
		return []int{total + 1}
	}
	return []int{total}
}

// RangeCount is how many ranges a round announces to a client that
// encodes the vectors Encoded gives: one each, and for an L2 mechanism's
// adaptive clip one more, the scale of the count's coordinate.
func (c *Config) RangeCount(encoded int) int {
	if c.DP.on() && c.DP.Quantile > 0 && c.Mechanism != "none" {
		return encoded + 1
	}
	return encoded
}

// validateDPSettings checks DP-FedAvg's numbers, before the noise is
// calibrated from them.
func (c *Config) validateDPSettings() error {
	d := c.DP
	bad := func(v float64) bool { return math.IsNaN(v) || math.IsInf(v, 0) || v < 0 }
	switch {
	case bad(d.Clip):
		return fmt.Errorf("fl: clip %v must be a finite L2 norm, at least 0", d.Clip)
	case bad(d.Noise):
		return fmt.Errorf("fl: noise multiplier %v must be finite and at least 0", d.Noise)
	case bad(d.TargetEpsilon):
		return fmt.Errorf("fl: target epsilon %v must be finite and at least 0", d.TargetEpsilon)
	case !(d.Delta >= 0 && d.Delta < 1):
		return fmt.Errorf("fl: user-level delta %v must be in (0, 1)", d.Delta)
	case !d.on() && (d.Noise > 0 || d.TargetEpsilon > 0):
		return errors.New("fl: a noise multiplier or target epsilon needs clip, DP-FedAvg's L2 bound of a client's update")
	case !(d.Quantile >= 0 && d.Quantile < 1):
		return fmt.Errorf("fl: clip quantile %v must be in (0, 1) (0: a fixed clip)", d.Quantile)
	case bad(d.QuantileNoise):
		return fmt.Errorf("fl: clip quantile noise %v must be finite and at least 0", d.QuantileNoise)
	}
	return nil
}

// validateDP checks what DP-FedAvg excludes.
func (c *Config) validateDP(m mech.Mechanism) error {
	d := c.DP
	switch {
	case !d.on():
		return nil
	case c.Perturb != "updates":
		return fmt.Errorf("fl: clip bounds a client's update: DP-FedAvg needs perturb: updates, not %s", c.Perturb)
	case c.Weighting != "mean":
		return errors.New("fl: DP-FedAvg needs weighting: mean (a client weighed by its examples would move the sum by more than clip)")
	case c.Aggregator != nil && !isMean(c.Aggregator):
		return errors.New("fl: DP-FedAvg's noise is calibrated for the sum: it takes no robust aggregator")
	case c.Shuffle:
		return errors.New("fl: DP-FedAvg adds its noise to the sum: it does not run under the shuffler")
	case c.Byzantine.Kind == Constant || c.Byzantine.Kind == Extreme:
		return fmt.Errorf("fl: byzantine %s is defined per tensor and range, not for DP-FedAvg's clipped updates", c.Byzantine.Kind)
	case d.Tree && m.Name() != "none":
		return fmt.Errorf("fl: DP-FTRL's tree noise is added by the server: it runs with mechanism none, not %s", m.Name())
	case d.Tree && d.Quantile > 0:
		return errors.New("fl: DP-FTRL runs with a fixed clip: its tree noise is sized for one")
	case c.Range.Kind == "adaptive":
		return errors.New("fl: DP-FedAvg clips to clip in L2 norm: the adaptive range does not apply")
	}
	if _, l2 := m.(mech.L2); !l2 && m.Name() != "none" {
		if d.Noise == 0 && (m.Name() == "ddgauss" || m.Name() == "skellam") {
			return fmt.Errorf("fl: DP-FedAvg's %s adds noise at a multiplier: give noise_multiplier or target_epsilon", m.Name())
		}
		return fmt.Errorf("fl: DP-FedAvg runs mechanism none (central noise, added by the server) or an L2 mechanism (ddgauss, skellam or pbm with a noise multiplier), not %s", m.Name())
	}
	return nil
}

// clipUpdate writes into dst (length the model's size) the update local -
// global, every tensor in turn, scaled by min(1, clip/||update||_2), and
// reports whether the update was within the clip. The norm is computed in
// float64 and the result checked once rounded to float32, so that its
// norm, as the mechanism computes it, is at most clip.
func clipUpdate(dst []float32, global, local [][]float32, clip float64) (bool, error) {
	i := 0
	norm := 0.0
	for t, w := range local {
		for j, v := range w {
			u := float64(v) - float64(global[t][j])
			norm += u * u
			dst[i] = float32(u)
			i++
		}
	}
	norm = math.Sqrt(norm)
	if math.IsNaN(norm) || math.IsInf(norm, 0) {
		return false, fmt.Errorf("fl: the update's L2 norm is %v", norm)
	}
	if norm <= clip && l2(dst) <= clip {
		return true, nil
	}
	s := clip / norm
	i = 0
	for t, w := range local {
		for j, v := range w {
			dst[i] = float32(s * (float64(v) - float64(global[t][j])))
			i++
		}
	}
	for l2(dst) > clip { // float32 rounding: at most a few ulps over
		for j := range dst {
			dst[j] = math.Nextafter32(dst[j], 0)
		}
	}
	return norm <= clip, nil
}

// l2 is the L2 norm of v, in float64.
func l2(v []float32) float64 {
	s := 0.0
	for _, x := range v {
		s += float64(x) * float64(x)
	}
	return math.Sqrt(s)
}

// normalStream is a privacy.NormalSource re-derived from the run's
// secret for each round, so that a checkpoint of the tree needs no stream
// position.
type normalStream struct{ s *corr.Stream }

func (n *normalStream) NormFloat64() float64 { return n.s.NormFloat64() }

// treeNoise adds to sum, round t's sum of clipped updates, the difference
// of the tree's noise on the t-th and (t-1)-th prefix sums: the model, the
// sum of the rounds' estimates, then moves by the noisy prefix sum.
func (e *Engine) treeNoise(t int, sum []float64) error {
	e.treeSrc.s = corr.Derive(e.secret, "dp-ftrl", uint64(t))
	next := make([]float64, len(sum))
	if err := e.tree.Next(next); err != nil {
		return err
	}
	for i := range sum {
		sum[i] += next[i] - e.treeLast[i]
	}
	e.treeLast = next
	return nil
}

// unflatten cuts the one vector of a DP-FedAvg estimate into the model's
// tensors.
func (e *Engine) unflatten(flat []float64) [][]float64 {
	out := make([][]float64, len(e.specs))
	for i, s := range e.specs {
		n := size(s.Shape)
		out[i], flat = flat[:n], flat[n:]
	}
	return out
}

// denominator is what DP-FedAvg divides a round's noisy sum by: the
// expected number of clients a round samples.
func (e *Engine) denominator() float64 {
	if k := e.cfg.ClientsPerRound; k > 0 && k < len(e.examples) {
		return float64(k)
	}
	return float64(len(e.examples))
}

// quantileNoise is the standard deviation of the noise on an adaptive
// clip's count.
func (e *Engine) quantileNoise() float64 {
	if e.cfg.DP.QuantileNoise > 0 {
		return e.cfg.DP.QuantileNoise
	}
	return e.denominator() / 20
}

// updateNoise is the noise multiplier of the clipped updates' sum: Noise,
// or with an adaptive clip what is left of it once the count has its
// share (Andrew et al., Theorem 1: the two Gaussian sums, of sensitivity
// C and 1/2, are together one Gaussian mechanism at multiplier z when
// z^-2 = z_update^-2 + (2 sigma_b)^-2).
func (e *Engine) updateNoise() (float64, error) {
	z := e.cfg.DP.Noise
	if e.cfg.DP.Quantile == 0 || z == 0 {
		return z, nil
	}
	sb := e.quantileNoise()
	left := 1/(z*z) - 1/(4*sb*sb)
	if !(left > 0) {
		return 0, fmt.Errorf("fl: the adaptive clip's count noise %.4g leaves no privacy for the updates at noise multiplier %.4g (it needs 2 x %.4g > %.4g): raise clip_quantile_noise", sb, z, sb, z)
	}
	return 1 / math.Sqrt(left), nil
}

// AddServerNoise adds the central DP-FedAvg server's noise to a round's
// sum of clipped updates: N(0, sd^2), sd = z C, to each coordinate in
// turn, from src (in a run, the round's "dp-noise" stream of the run's
// secret). privatize calls it; package audit's user-level audit runs the
// same arithmetic.
func AddServerNoise(sum []float64, sd float64, src *corr.Stream) {
	for i := range sum {
		sum[i] += sd * src.NormFloat64()
	}
}

// privatize turns the mean of a DP-FedAvg round's summed messages (the
// clipped updates received, and with an L2 mechanism the server's shares
// of the noise, topUp) into the round's estimate: their sum, with the server's Gaussian noise
// under mechanism none (drawn from the run's secret, fresh each round),
// over the denominator, cut into tensors. With an adaptive clip it also
// moves the clip for the next round, from the noisy count of the clients
// whose update it did not clip.
func (e *Engine) privatize(p *Plan, est [][]float64, received, shares int) ([][]float64, error) {
	mean := est[0]
	sum := make([]float64, len(mean))
	for i, v := range mean {
		sum[i] = v * float64(received+shares)
	}
	central := e.m.Name() == "none"
	src := corr.Derive(e.secret, "dp-noise", uint64(p.T))
	z, err := e.updateNoise()
	if err != nil {
		return nil, err
	}
	switch sd := z * p.Ranges[0].Radius; {
	case e.tree != nil:
		if err := e.treeNoise(p.T, sum); err != nil {
			return nil, err
		}
	case sd > 0 && central:
		AddServerNoise(sum, sd, src)
	}
	den := e.denominator()
	for i := range sum {
		sum[i] /= den
	}
	if e.cfg.DP.Quantile > 0 {
		var count float64
		if central {
			count = est[1][0]*float64(received) + e.quantileNoise()*src.NormFloat64()
		} else {
			// The last coordinate sums +-s over the uploads (the server's
			// shares add 0) and the mechanism's noise, of standard
			// deviation quantileNoise once over 2s.
			last := sum[len(sum)-1] * den
			sum = sum[:len(sum)-1]
			count = (last/p.Ranges[1].Radius + float64(received)) / 2
		}
		e.clip *= math.Exp(-clipLR * (count/den - e.cfg.DP.Quantile))
	}
	return e.unflatten(sum), nil
}
