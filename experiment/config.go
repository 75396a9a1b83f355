// Package experiment turns one configuration (a YAML file or flags) into a
// federated training run: it loads the data, partitions it among clients,
// builds the model and one trainer per worker, runs the round engine and
// records every round. The simulation and, later, the server start here.
package experiment

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/fedpq/fedpq/data"
	"github.com/fedpq/fedpq/fl"
	"github.com/fedpq/fedpq/internal/spec"
	"github.com/fedpq/fedpq/mech"
	"github.com/fedpq/fedpq/model"
	"github.com/fedpq/fedpq/robust"
)

// Config is one experiment. Every field is a YAML key and a flag of
// `fedpq run` with the same name (dashes for underscores).
type Config struct {
	Name    string `yaml:"name"`    // names the run directory and the plots' legend
	Out     string `yaml:"out"`     // run directory ("": runs/NAME)
	Dataset string `yaml:"dataset"` // mnist, fashion-mnist, cifar10, synthetic or synthetic:ALPHA,BETA
	DataDir string `yaml:"data_dir"`
	// Partition is iid, dirichlet:ALPHA, shards:K, natural (the
	// dataset's own clients: synthetic) or auto (AutoPartition, the
	// default; "" means the same).
	Partition       string  `yaml:"partition"`
	Clients         int     `yaml:"clients"`
	ClientsPerRound int     `yaml:"clients_per_round"`  // 0: all
	Sampling        string  `yaml:"sampling,omitempty"` // fixed (ClientsPerRound exactly) or poisson (each client at rate ClientsPerRound/Clients)
	Dropout         float64 `yaml:"dropout"`
	Rounds          int     `yaml:"rounds"`
	EvalEvery       int     `yaml:"eval_every"`

	// Mode is sync (rounds) or async (FedBuff, fl.Strategy.Mode): then
	// Concurrency clients train at once, the server steps every Buffer
	// uploads, each weighed by Staleness (constant, poly:A or hinge:A:B)
	// and refused past MaxStaleness steps (0: no limit); Rounds counts
	// the buffers.
	Mode         string `yaml:"mode,omitempty"`
	Concurrency  int    `yaml:"concurrency,omitempty"`
	Buffer       int    `yaml:"buffer,omitempty"`
	Staleness    string `yaml:"staleness,omitempty"`
	MaxStaleness int    `yaml:"max_staleness,omitempty"`
	// Speed is the simulation's speed model, which drives a virtual clock
	// (fl.ParseSpeed: none, tail:F:X[:SIGMA], lognormal:SIGMA[:JITTER],
	// trace:FILE); "": none in mode sync, fl.DefaultAsyncSpeed in mode
	// async. OverSelect is sync's over-selection (fl.Strategy.OverSelect).
	Speed      string  `yaml:"speed,omitempty"`
	OverSelect float64 `yaml:"over_select,omitempty"`

	// Model is an architecture of the zoo, a spec file (.yaml) or the name
	// of ModelSpec (ResolveModel).
	Model string `yaml:"model"`
	// ModelSpec is a network of one's own (docs/models.md#specs), written in
	// the configuration or read from the spec file that Model names: the
	// resolved config.yaml holds it, so that the run can be repeated, and a
	// deployed client build the model, without the file.
	ModelSpec *model.Spec `yaml:"model_spec,omitempty"`
	// InitWeights is a .safetensors or .onnx file of the model's weights,
	// as fedpq export writes them, that the run starts from instead of
	// drawing them from the seed; InitWeightsSHA256 is its hash, recorded
	// by the run (and checked, when given).
	InitWeights       string `yaml:"init_weights,omitempty"`
	InitWeightsSHA256 string `yaml:"init_weights_sha256,omitempty"`

	Optimizer   string  `yaml:"optimizer"` // sgd or adam
	LR          float64 `yaml:"lr"`
	Momentum    float64 `yaml:"momentum"`
	WeightDecay float64 `yaml:"weight_decay"`
	Epochs      int     `yaml:"epochs"`
	Batch       int     `yaml:"batch"`
	// ProxMu is FedProx's mu (model.TrainConfig.ProxMu): each client's
	// local loss gains (mu/2) ||w - global||^2. 0: plain local training.
	ProxMu float64 `yaml:"prox_mu"`

	Mechanism  string  `yaml:"mechanism"`
	Epsilon    float64 `yaml:"epsilon"`
	Delta      float64 `yaml:"delta"`
	SharedBits int     `yaml:"shared_bits"`
	Gamma      float64 `yaml:"gamma"`
	Px         float64 `yaml:"px"`
	InputBits  int     `yaml:"input_bits"`
	BudgetBits int     `yaml:"budget_bits"`
	Rate       int     `yaml:"rate"`
	Lattice    int     `yaml:"lattice"`
	ModBits    int     `yaml:"mod_bits"`
	Trials     int     `yaml:"trials,omitempty"` // pbm: binomial trials per coordinate and client
	Transfer   bool    `yaml:"transfer"`
	// SecureAggregation masks the messages with SecAgg+, so that the
	// server learns only their sum.
	SecureAggregation bool `yaml:"secure_aggregation"`
	// SecureSumOnly sums a secure round's fields as the protocol would
	// unmask them, without running it (fl.Config.SecureSumOnly).
	SecureSumOnly bool `yaml:"secure_sum_only,omitempty"`
	// Shuffle puts a trusted shuffler between the clients and the server
	// (LDP-FL's split and shuffle).
	Shuffle bool `yaml:"shuffle"`

	Range     string  `yaml:"range"`     // minmax[:S], fixed:C,R, quantile:Q[,S] or adaptive[:R0[,K[,G]]]
	Perturb   string  `yaml:"perturb"`   // weights or updates
	Weighting string  `yaml:"weighting"` // examples or mean
	GlobalLR  float64 `yaml:"global_lr"`
	// Aggregator turns a round's decoded messages into one estimate: mean,
	// or a Byzantine-robust rule (package robust: median,
	// trimmed-mean:B, krum:F, multi-krum:F,M, bulyan:F, norm-bounded:C,
	// norm-bounded: C the median norm).
	Aggregator string `yaml:"aggregator"`
	// ServerOptimizer is how each round's estimate moves the global model
	// (fl.ServerOptimizer): fedavg, fedavgm, fedadam, fedyogi or
	// fedadagrad, at GlobalLR, with the betas and tau the last four read.
	ServerOptimizer string  `yaml:"server_optimizer"`
	ServerBeta1     float64 `yaml:"server_beta1"`
	ServerBeta2     float64 `yaml:"server_beta2"`
	ServerTau       float64 `yaml:"server_tau"`
	Patience        int     `yaml:"patience"`
	// Validation is the fraction of the training set the server holds out
	// (no client has it) to select the model for patience; 0: patience
	// looks at the test set.
	Validation float64 `yaml:"validation"`

	// Byzantine is the attack of the simulation's Byzantine clients
	// (fl.ParseAttack: sign-flip, scale:S, label-flip, constant or
	// extreme; "": none), and ByzantineFraction the fraction of the
	// clients that attack, chosen from the seed for the whole run
	// (docs/security.md#poisoning-within-the-support).
	Byzantine         string  `yaml:"byzantine,omitempty"`
	ByzantineFraction float64 `yaml:"byzantine_fraction,omitempty"`

	LedgerDelta float64 `yaml:"ledger_delta"` // delta of the privacy ledger's composed bounds

	// DP-FedAvg (fl.DPFedAvg, docs/privacy.md#user-level-privacy-for-the-whole-run): Clip is the L2
	// bound of a client's whole update (0: off), NoiseMultiplier the
	// noise's standard deviation over it, TargetEpsilon the user-level
	// epsilon at Delta the run must meet (NoiseMultiplier then follows).
	Clip            float64 `yaml:"clip,omitempty"`
	NoiseMultiplier float64 `yaml:"noise_multiplier,omitempty"`
	TargetEpsilon   float64 `yaml:"target_epsilon,omitempty"`
	// ClipQuantile makes Clip adaptive (fl.DPFedAvg.Quantile): the clip
	// tracks this quantile of the update norms, from a count with noise
	// ClipQuantileNoise (0: expected clients per round / 20).
	ClipQuantile      float64 `yaml:"clip_quantile,omitempty"`
	ClipQuantileNoise float64 `yaml:"clip_quantile_noise,omitempty"`
	// DPFTRL replaces the rounds' fresh noise by DP-FTRL's tree noise on
	// the prefix sums (fl.DPFedAvg.Tree): no sampling needed.
	DPFTRL bool `yaml:"dp_ftrl,omitempty"`
	// ClipPerLayer splits Clip among the tensors (fl.DPFedAvg.PerLayer).
	ClipPerLayer bool `yaml:"clip_per_layer,omitempty"`

	// Own data (data.go, docs/data.md): where the clients' and the
	// server's data are when the run brings its own rather than a
	// partition of Dataset, how to read them, and the weight rule.
	OwnData `yaml:",inline"`

	Seed    uint64 `yaml:"seed"`
	Workers int    `yaml:"workers"` // 0: all cores
	// Engine is the trainer's engine: native (fedpq's kernels) or gomlx
	// (GoMLX graphs, the reference). Both train the same model to float32
	// rounding; the seed reproduces a run bit for bit on one engine.
	Engine string `yaml:"engine"`

	// Trainer is the command line of an external trainer (package extern,
	// docs/trainer.md): local training runs in the user's framework, in a
	// pool of Workers such processes, and fedpq clips and encodes what
	// they return. With Model a zoo architecture, the trainer's model must
	// compute it (checked at the start); Model "external" trains whatever
	// model the trainer describes. "": fedpq's own engine.
	Trainer string `yaml:"trainer,omitempty"`
	// TrainerTimeout bounds each request to a trainer (a Go duration such
	// as 10m); "": extern.DefaultTimeout. A start has at least
	// extern.MinStartTimeout.
	TrainerTimeout string `yaml:"trainer_timeout,omitempty"`
	// TrainerThreads is the threads each trainer process is asked to use
	// (torch.set_num_threads); 0 means 1, as fedpq's engine trains: the
	// pool's processes use the cores, and a client's result does not
	// depend on how many there are.
	TrainerThreads int `yaml:"trainer_threads,omitempty"`
}

// External is the model name of a run whose model is the external
// trainer's own (Config.Trainer).
const External = "external"

// Default is the quick start: a synthetic benchmark that needs no files,
// where clients send their updates clipped to ±0.05 through corbin at
// eps = 1: 76.5% accuracy in 40 rounds, against 78.8% without privacy.
func Default() Config {
	mc, sc := mech.DefaultConfig(), fl.DefaultServerConfig()
	return Config{
		Name: "quickstart", Dataset: "synthetic", Partition: AutoPartition,
		Clients: 30, Rounds: 40, EvalEvery: 1,
		Model: "linear", Optimizer: "sgd", LR: 0.05, Epochs: 1, Batch: 10,
		Mechanism: "corbin", Epsilon: mc.Epsilon, Delta: mc.Delta, SharedBits: mc.SharedBits,
		Gamma: mc.Gamma, Px: mc.Px, InputBits: mc.InputBits, BudgetBits: mc.BudgetBits,
		Rate: mc.Rate, Lattice: mc.Lattice, ModBits: mc.ModBits,
		Range: "fixed:0,0.05", Perturb: "updates", Weighting: "examples", GlobalLR: 1,
		Aggregator: "mean", ServerOptimizer: sc.Name, ServerBeta1: sc.Beta1, ServerBeta2: sc.Beta2, ServerTau: sc.Tau,
		LedgerDelta: 1e-5, Seed: 1, Engine: string(model.Native),
	}
}

// AutoPartition, the default partition, is natural where the dataset has
// clients of its own (synthetic) and iid otherwise (the image sets), so
// that --dataset alone gives a run that works.
const AutoPartition = "auto"

// ResolvePartition returns c with an auto partition replaced by the one it
// stands for, and a line that says which and why ("" where c names its
// partition). A run records the resolved partition in its config.yaml.
func (c Config) ResolvePartition() (Config, string) {
	if c.Partition != AutoPartition && c.Partition != "" {
		return c, ""
	}
	if c.Own() {
		c.Partition = "natural"
		return c, "partition: natural (each client brings its own data)"
	}
	if data.HasOwnClients(c.Dataset) {
		c.Partition = "natural"
		return c, fmt.Sprintf("partition: natural (%s has clients of its own)", c.Dataset)
	}
	c.Partition = "iid"
	return c, fmt.Sprintf("partition: iid (%s has no clients of its own)", c.Dataset)
}

// Load reads a YAML file over c: keys present in the file replace c's
// values; an unknown key is an error, not a silent typo.
func Load(path string, c *Config) error {
	b, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	if err := Parse(b, c); err != nil {
		return fmt.Errorf("%s: %w", path, err)
	}
	return nil
}

// Parse reads YAML over c, as Load does.
func Parse(b []byte, c *Config) error {
	dec := yaml.NewDecoder(bytes.NewReader(b))
	dec.KnownFields(true)
	if err := dec.Decode(c); err != nil && !errors.Is(err, io.EOF) { // io.EOF: empty
		return err
	}
	return nil
}

// YAML is c as the config.yaml written next to the results.
func (c Config) YAML() ([]byte, error) { return yaml.Marshal(c) }

// Dir is the run directory.
func (c Config) Dir() string {
	if c.Out != "" {
		return c.Out
	}
	return "runs/" + c.Name
}

// Validate checks every setting that can be checked without loading data:
// a bad configuration fails before a long run starts, not in its middle.
func (c Config) Validate() error {
	ec, err := c.engineConfig()
	if err != nil {
		return err
	}
	if _, err := c.optimizer(); err != nil {
		return err
	}
	if err := c.validateData(); err != nil {
		return err
	}
	if !c.Own() {
		if err := data.CheckName(c.Dataset); err != nil {
			return err
		}
	}
	resolved, _ := c.ResolvePartition()
	if _, _, err := parsePartition(resolved.Partition); err != nil {
		return err
	}
	if err := c.validateTrainer(); err != nil {
		return err
	}
	if _, err := c.ResolveModel(); err != nil {
		return err
	}
	if err := c.checkInitWeights(); err != nil {
		return err
	}
	if e := model.Engine(c.Engine); e != model.Native && e != model.GoMLX {
		return fmt.Errorf("engine %q: want %s or %s", c.Engine, model.Native, model.GoMLX)
	}
	m, err := mech.New(c.Mechanism, c.mechConfig())
	if err != nil {
		return err
	}
	if err := ec.Byzantine.Check(m); err != nil {
		return err
	}
	if err := ec.ValidateMode(); err != nil {
		return err
	}
	if c.Mode == "async" && c.Data == "" && c.Concurrency > c.Clients {
		return fmt.Errorf("concurrency %d is more than the %d clients: at most every client trains at once", c.Concurrency, c.Clients)
	}
	if !(c.Validation >= 0 && c.Validation < 1) {
		return fmt.Errorf("validation %v must be in [0, 1)", c.Validation)
	}
	if !(c.ProxMu >= 0) || math.IsInf(c.ProxMu, 0) {
		return fmt.Errorf("prox_mu %v must be finite and at least 0", c.ProxMu)
	}
	if c.Clients == 0 && c.Data != "" {
		c.Clients = 1 // resolved from the data
	}
	if c.Clients < 1 || c.Rounds < 1 || c.Epochs < 1 || c.Batch < 1 || c.EvalEvery < 1 {
		return fmt.Errorf("clients (%d), rounds (%d), epochs (%d), batch (%d) and eval_every (%d) must be at least 1",
			c.Clients, c.Rounds, c.Epochs, c.Batch, c.EvalEvery)
	}
	if c.Data == "" { // own data: the number of clients is known once it is read
		return ec.ValidateByzantine(c.Clients)
	}
	return nil
}

// validateTrainer checks the external trainer's settings.
func (c Config) validateTrainer() error {
	if _, err := c.trainerTimeout(); err != nil {
		return err
	}
	if c.TrainerThreads < 0 {
		return fmt.Errorf("trainer_threads %d must not be negative", c.TrainerThreads)
	}
	if c.Model == External && strings.TrimSpace(c.Trainer) == "" {
		return fmt.Errorf("model %s: the model is an external trainer's; give its command (trainer, --trainer)", External)
	}
	return nil
}

// trainerTimeout is TrainerTimeout parsed; 0 for "".
func (c Config) trainerTimeout() (time.Duration, error) {
	if c.TrainerTimeout == "" {
		return 0, nil
	}
	d, err := time.ParseDuration(c.TrainerTimeout)
	if err != nil || d <= 0 {
		return 0, fmt.Errorf("trainer_timeout %q: want a positive duration such as 30s or 10m", c.TrainerTimeout)
	}
	return d, nil
}

// mechConfig is the mechanism part of c.
func (c Config) mechConfig() mech.Config {
	return mech.Config{
		Epsilon: c.Epsilon, Delta: c.Delta, SharedBits: c.SharedBits, Gamma: c.Gamma, Px: c.Px,
		InputBits: c.InputBits, BudgetBits: c.BudgetBits, Rate: c.Rate, Lattice: c.Lattice,
		ModBits: c.ModBits, Clients: c.roundClients(), Noise: c.mechNoise(), Trials: c.Trials,
	}
}

// mechNoise is the noise multiplier the mechanism is built with: the one
// given, or, with a target epsilon to calibrate it for, 1 until
// fl.Config.PrepareDP does (an L2 mechanism needs one to be checked).
func (c Config) mechNoise() float64 {
	if c.Clip > 0 && c.NoiseMultiplier == 0 && c.TargetEpsilon > 0 {
		return 1
	}
	return c.NoiseMultiplier
}

// roundClients is how many clients a round (or an asynchronous buffer)
// has when none drops out: what ddgauss and skellam divide their noise
// among.
func (c Config) roundClients() int {
	if c.Mode == "async" && c.Buffer > 0 {
		return c.Buffer
	}
	if c.ClientsPerRound > 0 && c.ClientsPerRound < c.Clients {
		return c.ClientsPerRound
	}
	return c.Clients
}

// engineConfig is the round engine's part of c.
func (c Config) engineConfig() (fl.Config, error) {
	rg, err := fl.ParseRange(c.Range)
	if err != nil {
		return fl.Config{}, err
	}
	rule, err := robust.Parse(c.Aggregator)
	if err != nil {
		return fl.Config{}, err
	}
	attack, err := fl.ParseAttack(c.Byzantine)
	if err != nil {
		return fl.Config{}, err
	}
	stale, err := fl.ParseStaleness(c.Staleness)
	if err != nil {
		return fl.Config{}, err
	}
	speed, err := fl.ParseSpeed(c.Speed)
	if err != nil {
		return fl.Config{}, err
	}
	if err := c.checkServerSettings(); err != nil {
		return fl.Config{}, err
	}
	return fl.Config{
		Rounds: c.Rounds, Dropout: c.Dropout,
		Mechanism: c.Mechanism, Mech: c.mechConfig(), Transfer: c.Transfer, Perturb: c.Perturb,
		Strategy: fl.Strategy{
			ClientsPerRound: c.ClientsPerRound, Sampling: c.Sampling, Range: rg, ProxMu: c.ProxMu,
			Weighting: c.Weighting, MaxExamples: c.MaxExamples, Aggregator: rule,
			Server: fl.ServerConfig{Name: c.ServerOptimizer, LR: c.GlobalLR, Beta1: c.ServerBeta1, Beta2: c.ServerBeta2, Tau: c.ServerTau},
			Mode:   c.Mode, Concurrency: c.Concurrency, Buffer: c.Buffer, Staleness: stale, MaxStaleness: c.MaxStaleness,
			Speed: speed, OverSelect: c.OverSelect,
		},
		Patience: c.Patience, EvalEvery: c.EvalEvery, Epochs: c.Epochs, Batch: c.Batch,
		Seed: c.Seed, Workers: c.Workers, LedgerDelta: c.LedgerDelta, SecureAggregation: c.SecureAggregation,
		SecureSumOnly: c.SecureSumOnly,
		Shuffle:       c.Shuffle, Byzantine: attack, ByzantineFraction: c.ByzantineFraction,
		DP: fl.DPFedAvg{Clip: c.Clip, Noise: c.NoiseMultiplier, TargetEpsilon: c.TargetEpsilon, Delta: c.Delta,
			Quantile: c.ClipQuantile, QuantileNoise: c.ClipQuantileNoise, Tree: c.DPFTRL, PerLayer: c.ClipPerLayer},
	}, nil
}

// checkServerSettings refuses a server setting that the chosen optimizer
// does not read (fl.ServerOptimizer's rules), where it is not the default:
// it would be ignored without a word. The default passes, so that the
// config.yaml a run writes, which states every setting, resumes.
func (c Config) checkServerSettings() error {
	def := fl.DefaultServerConfig()
	const noMoments = "it keeps no moments"
	for _, s := range []struct {
		key    string
		v, def float64
		unread map[string]string // optimizer: why it does not read the setting
	}{
		{"server_beta1", c.ServerBeta1, def.Beta1, map[string]string{"fedavg": noMoments}},
		{"server_beta2", c.ServerBeta2, def.Beta2, map[string]string{"fedavg": noMoments,
			"fedavgm":    "its one moment is the momentum, server_beta1",
			"fedadagrad": "it has no second-moment decay: its v sums every squared update"}},
		{"server_tau", c.ServerTau, def.Tau, map[string]string{"fedavg": noMoments,
			"fedavgm": "it divides by no second moment"}},
	} {
		if why, ok := s.unread[c.ServerOptimizer]; ok && s.v != s.def {
			return fmt.Errorf("%s %v is not read by %s (%s): leave it out, or choose an optimizer that reads it", s.key, s.v, c.ServerOptimizer, why)
		}
	}
	return nil
}

// optimizer is the local optimizer of c.
func (c Config) optimizer() (model.Optimizer, error) {
	if c.Optimizer != "sgd" && c.Optimizer != "adam" {
		return model.Optimizer{}, fmt.Errorf("optimizer %q: want sgd or adam", c.Optimizer)
	}
	if !(c.LR > 0) {
		return model.Optimizer{}, fmt.Errorf("lr %v must be positive", c.LR)
	}
	return model.Optimizer{Name: c.Optimizer, LR: c.LR, Momentum: c.Momentum, WeightDecay: c.WeightDecay}, nil
}

// parsePartition splits "kind:ARG": natural, or a partition of a shared
// dataset (data.ParsePartition).
func parsePartition(s string) (kind string, arg float64, err error) {
	if s == "natural" {
		return s, 0, nil
	}
	if kind := spec.Parse(s).Kind; kind == "dirichlet" || kind == "shards" {
		return data.ParsePartition(s)
	}
	if kind, arg, err = data.ParsePartition(s); err != nil {
		return "", 0, fmt.Errorf("partition %q: want auto, iid, dirichlet:ALPHA, shards:K or natural", s)
	}
	return kind, arg, nil
}
