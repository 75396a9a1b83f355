package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"io/fs"
	"math"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"strings"

	"github.com/schollz/progressbar/v3"
	"go.yaml.in/yaml/v3"

	"github.com/fedpq/fedpq/experiment"
	"github.com/fedpq/fedpq/fl"
	"github.com/fedpq/fedpq/model"
	"github.com/fedpq/fedpq/privacy"
	"github.com/fedpq/fedpq/report"
)

func init() {
	commands["run"] = command{
		summary: "federated training with a mechanism: accuracy, privacy and communication per round",
		run:     runRun,
	}
}

const runDescription = `Trains a model federatedly: each round the server samples clients, they train
locally from the global model, encode their weights (or updates) with the
mechanism, and the server aggregates the messages as they arrive into the new
global model. Every setting is a flag or a key of the YAML file given with
--config (flags win); the resolved configuration is written to the run
directory with metrics.jsonl (one line per round), summary.json and
accuracy.png/.svg, and after every round a checkpoint, from which --resume
continues an interrupted run. The same seed gives the same numbers.

The default is a quick start that needs no files: Synthetic(1,1) (FedProx),
30 clients, logistic regression, updates clipped to ±0.05 and sent through
corbin at eps = 1, 40 rounds.
`

// runFlagHelp is the help of each configuration key, in flag order.
var runFlagHelp = [][2]string{
	{"name", "run name: the run directory is runs/NAME unless --out is given (default: the --config file's name, else --data's, else quickstart)"},
	{"out", "run directory"},
	{"dataset", "mnist, fashion-mnist, cifar10, synthetic or synthetic:ALPHA,BETA"},
	{"data_dir", "directory of the dataset files (default $FEDPQ_DATA, else ./data)"},
	{"partition", "how the training set is split among clients: iid, dirichlet:ALPHA, shards:K, natural (the dataset's own clients: synthetic) or auto (natural where the dataset has clients of its own, else iid)"},
	{"clients", "number of clients (with --data, unless given: as many as the data has)"},
	{"clients_per_round", "clients sampled per round (0: all)"},
	{"sampling", "how a round's clients are drawn: fixed (exactly --clients-per-round) or poisson (each client with probability clients_per_round/clients; what DP-SGD-style accounting assumes)"},
	{"dropout", "probability that a sampled client drops out before uploading"},
	{"rounds", "communication rounds"},
	{"eval_every", "evaluate the global model on the test set every this many rounds"},
	{"mode", "sync (rounds: the server waits for each round's clients) or async (FedBuff: --concurrency clients train at once, the server steps every --buffer uploads; --rounds counts the steps; docs/training.md#asynchronous-training-fedbuff)"},
	{"concurrency", "async: clients training at once (M), at most --clients"},
	{"buffer", "async: uploads per server step (K), at most --concurrency; 1 is FedAsync"},
	{"staleness", "async: weight of an upload s steps stale: constant, poly:A ((1+s)^-A; FedBuff's poly:0.5) or hinge:A:B (1 up to B, then 1/(A(s-B)+1)); not constant only where the server sees each upload (no secure aggregation, shuffler or robust aggregator)"},
	{"max_staleness", "async: refuse uploads more than this many steps stale, before they send anything (0: no limit)"},
	{"speed", "the clients' speeds on a virtual clock, reported as clock: none, tail:F:X[:SIGMA] (a fraction F of the clients X times slower, each job's time lognormal with sigma SIGMA, default 0.25), lognormal:SIGMA[:JITTER] or trace:FILE (CSV client,seconds...; docs/training.md); default: none for sync, tail:0.1:10 for async"},
	{"over_select", "sync: sample ceil(clients_per_round x (1+F)) clients and keep the clients_per_round that finish first: on the --speed model's clock (fedpq run, which needs one), or the first to finish their task (fedpq server: the others are told to stop, and send nothing); not with poisson sampling or DP-FedAvg"},
	{"model", "linear, mlp, mlp-wide, cnn2, corbin-cnn, ldpfl-cnn, vgg-small, lenet, or a spec file NET.yaml of one's own (docs/models.md#specs; config.yaml records the spec as model_spec); or external: the model of --trainer"},
	{"init_weights", "start from the weights in this .safetensors or .onnx file (as fedpq export writes them) instead of drawing them from the seed"},
	{"init_weights_sha256", "the sha256 of init_weights: recorded by the run, checked when given"},
	{"optimizer", "local optimizer: sgd or adam (state reset for every client)"},
	{"lr", "local learning rate"},
	{"momentum", "sgd momentum"},
	{"weight_decay", "L2 weight decay"},
	{"epochs", "local epochs per round"},
	{"batch", "local minibatch size"},
	{"prox_mu", "FedProx: each client's local loss gains (mu/2)||w - global||^2, pulling its model toward the global one (0: off; docs/training.md#fedprox)"},
	{"mechanism", "privacy/compression mechanism (fedpq mechanisms lists them)"},
	{"epsilon", "per-parameter privacy budget per round"},
	{"delta", "gaussian, ddgauss, skellam: the delta of their (eps, delta); with --clip: the delta of the run's user-level guarantee"},
	{"shared_bits", "corbin, augcorbin, coq: shared random bits per parameter"},
	{"gamma", "augcorbin: fraction of clients that quantize alone"},
	{"px", "coq: bias of the shared coins"},
	{"input_bits", "mvu: input resolution in bits"},
	{"budget_bits", "mvu: bits per parameter sent"},
	{"rate", "sdq, jopeq, laplace+sdq: bits per parameter"},
	{"lattice", "sdq, jopeq, laplace+sdq: 1 scalar, 2 hexagonal"},
	{"mod_bits", "ddgauss, skellam: bits per coordinate of the modular sum (2 to 18)"},
	{"trials", "pbm: binomial trials per coordinate and client (0: 1); the secure sum's field holds clients x trials"},
	{"transfer", "paired mechanisms: the leader sends its shared bits sealed (the papers' protocol)"},
	{"shuffle", "a trusted shuffler delivers each parameter's reports unlinked from their clients (LDP-FL's split and shuffle; simulation only)"},
	{"secure_aggregation", "mask the messages with SecAgg+ so the server learns only their sum (integer mechanisms, equal weights; docs/privacy.md)"},
	{"secure_sum_only", "simulation, under secure aggregation: sum the messages as the protocol would unmask them without running it (the same models and ledger; its seconds and setup bytes left out; no dropout)"},
	{"range", "clipping range per tensor: minmax[:SCALE], fixed:C,R, quantile:Q[,SCALE], or adaptive[:R0[,K[,G]]] (updates: radius K times the denoised spread of the last estimate, from R0, at most G times up or down a round, within [R0/10, 10 R0]; docs/training.md)"},
	{"perturb", "what clients encode: weights or updates"},
	{"weighting", "aggregation: examples (FedAvg) or mean"},
	{"global_lr", "global (server) learning rate: fedavg's lambda in (0, 1], or the server optimizer's step size"},
	{"aggregator", "how a round's decoded messages become one estimate: mean, or a Byzantine-robust rule: median, trimmed-mean:B, krum:F, multi-krum:F,M, bulyan:F, norm-bounded:C or norm-bounded (C: the median norm) (each client's message; weighting mean; not with secure aggregation or the shuffler; docs/security.md)"},
	{"server_optimizer", "how each round's estimate moves the global model: fedavg, fedavgm, fedadam, fedyogi or fedadagrad (Reddi et al. 2021; docs/training.md)"},
	{"server_beta1", "fedavgm: server momentum; fedadam, fedyogi, fedadagrad: first moment decay"},
	{"server_beta2", "fedadam, fedyogi: second moment decay"},
	{"server_tau", "fedadam, fedyogi, fedadagrad: adaptivity tau"},
	{"patience", "reload the best global model after this many evaluations without improvement (0: never)"},
	{"validation", "fraction of the training set the server holds out to select the model for patience (0: use the test set)"},
	{"byzantine", "attack of the Byzantine clients, within the support: sign-flip, scale:S, label-flip, constant or extreme (empty: none; docs/security.md)"},
	{"byzantine_fraction", "fraction of the clients that attack with --byzantine, in [0, 0.5): round(fraction x clients) of them, chosen from the seed for the whole run"},
	{"data", "the clients' own data, instead of a partition of --dataset: a directory of client-K datasets (fedpq split writes one), or a CSV with --client-column (docs/data.md)"},
	{"test_data", "own data: the evaluation set, all a deployed server reads (default: the entry test of --data)"},
	{"validation_data", "own data: the set patience selects the model on, and the schema's statistics come from (default: none)"},
	{"data_format", "own data: imagefolder, csv, npz, npy, idx or cifar (default: from each path)"},
	{"label_column", "CSV: the label's column (default: label, else target)"},
	{"categorical_columns", "CSV: comma-separated columns of categories, each one-hot encoded over its values in the evaluation set"},
	{"client_column", "CSV: the column naming each row's client, in --data (LEAF's natural clients)"},
	{"feature_scaling", "CSV: numeric columns scaled by standard (the default), minmax or none, with the evaluation set's statistics"},
	{"image_size", "images: HEIGHTxWIDTH every image is resized to (default: their own, which must agree)"},
	{"channels", "images: 1 (grey) or 3 (RGB); 0: grey if every image of the evaluation set is"},
	{"classes", "own data: comma-separated class names in label order (default: those of the evaluation set)"},
	{"max_examples", "the most examples a client's FedAvg weight counts; own data in a deployment must state it (fedpq run: the largest client's; docs/security.md)"},
	{"ledger_delta", "delta of the privacy ledger's composed bounds (docs/privacy.md)"},
	{"clip", "DP-FedAvg: L2 bound of a client's whole update, every tensor flattened into one vector (0: off; needs perturb updates, weighting mean, mechanism none or an L2 mechanism)"},
	{"noise_multiplier", "DP-FedAvg: the round's noise standard deviation over --clip (none: added by the server; ddgauss, skellam, pbm: by the clients under secure aggregation)"},
	{"clip_per_layer", "DP-FedAvg: clip each tensor on its own to clip x sqrt(its size / the model's), the same guarantee (the whole norm stays within --clip)"},
	{"clip_quantile", "DP-FedAvg: make --clip adaptive, tracking this quantile of the clients' update norms (Andrew et al. 2021; 0: fixed; with an L2 mechanism the count rides in its vector)"},
	{"clip_quantile_noise", "DP-FedAvg: the noise standard deviation on the adaptive clip's count (0: clients per round / 20); it takes its share of --noise-multiplier"},
	{"dp_ftrl", "DP-FedAvg: DP-FTRL (Kairouz et al. 2021): the server adds tree-aggregation noise to the prefix sums of the clipped updates instead of fresh noise each round; its guarantee needs no sampling (mechanism none)"},
	{"target_epsilon", "DP-FedAvg: the user-level epsilon, at --delta, the whole run must meet against whoever gets the model; the noise multiplier is calibrated for it"},
	{"seed", "seed of every random stream"},
	{"workers", "clients trained in parallel (0: all cores)"},
	{"engine", "training engine: native (fedpq's kernels) or gomlx (GoMLX graphs, the reference)"},
	{"trainer", "command line of an external trainer that trains the clients in the user's framework, a pool of --workers processes, e.g. '/usr/bin/python3 python/examples/mnist_cnn2.py' (docs/trainer.md); fedpq clips and encodes what it returns"},
	{"trainer_timeout", "longest an external trainer may take to answer a request (a duration; default 10m; its start has at least 1m)"},
	{"trainer_threads", "threads each external trainer process uses (0: 1, as fedpq's engine: the processes use the cores, and results do not depend on their number)"},
}

func runRun(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlags("run", "[--config FILE.yaml] [flags]", runDescription, stderr)
	c := experiment.Default()
	configPath := fs.String("config", "", "YAML file of settings (flags override it)")
	format := fs.String("format", "text", "output: text or json (the summary)")
	resume := fs.String("resume", "", "continue the interrupted run in this directory from its checkpoint (its config.yaml; other settings are ignored)")
	quiet := fs.Bool("quiet", false, "no progress on stderr")
	// The YAML file is read before the other flags are defined, so that it
	// sets their defaults and flags given on the command line win.
	if path := findConfig(args); path != "" {
		if err := loadConfig(path, &c); err != nil {
			return err
		}
	}
	if err := bindConfig(fs, &c, nil); err != nil {
		return err
	}
	if err := parse(fs, args); err != nil {
		return err
	}
	if *configPath != "" && c.Name == experiment.Default().Name {
		c.Name = strings.TrimSuffix(filepath.Base(*configPath), filepath.Ext(*configPath))
	}
	if c.Data != "" && c.Name == experiment.Default().Name {
		c.Name = strings.TrimSuffix(filepath.Base(c.Data), filepath.Ext(c.Data))
	}
	if c.Data != "" && !given(fs, *configPath, "clients") {
		c.Clients = 0 // as many as the data has
	}
	if *format != "text" && *format != "json" {
		return badValue{fmt.Errorf("--format %q: want text or json", *format)}
	}
	run := func(p func(report.Round)) (*report.Summary, error) { return experiment.Resume(ctx, *resume, p) }
	if *resume != "" {
		var err error
		if c, err = experiment.LoadRun(*resume); err != nil {
			return err
		}
	} else {
		var note string
		if err := c.Validate(); err != nil {
			return badValue{err}
		}
		if c, note = c.ResolvePartition(); note != "" && !*quiet {
			fmt.Fprintln(stderr, note)
		}
		var err error
		if c, note, err = c.ResolveData(); err != nil {
			return badValue{err}
		} else if note != "" && !*quiet {
			fmt.Fprintln(stderr, note)
		}
		run = func(p func(report.Round)) (*report.Summary, error) { return experiment.Run(ctx, c, p) }
	}
	progress, done := runProgress(c, stderr, *quiet)
	s, err := run(progress)
	done()
	if err != nil {
		return err
	}
	return printSummary(stdout, *format, c, s)
}

// speedName is the run's speed model as its clock ran it.
func speedName(c experiment.Config) string {
	if c.Speed == "" && c.Mode == "async" {
		return fl.DefaultAsyncSpeed
	}
	return c.Speed
}

// printSummary prints a run's summary as text or JSON.
func printSummary(stdout io.Writer, format string, c experiment.Config, s *report.Summary) error {
	if format == "json" {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		return enc.Encode(s)
	}
	fmt.Fprintf(stdout, "%s: %s on %s, %s, %d rounds\n", s.Name, s.Mechanism, s.Dataset, s.Model, s.Rounds)
	if c.Byzantine != "" && c.ByzantineFraction > 0 {
		fmt.Fprintf(stdout, "  Byzantine: %.0f of %d clients attack (%s; docs/security.md)\n", math.Round(c.ByzantineFraction*float64(c.Clients)), c.Clients, c.Byzantine)
	}
	if in := s.Initial; in != nil {
		fmt.Fprintf(stdout, "  started from %s (sha256 %.16s): accuracy %.4f before round 1\n", in.File, in.SHA256, in.Accuracy)
	}
	if s.Error != "" {
		fmt.Fprintf(stdout, "  %s\n", s.Error)
	}
	fmt.Fprintf(stdout, "  final accuracy %.4f, best %.4f (round %d)\n", s.FinalAccuracy, s.BestAccuracy, s.BestRound)
	if c.Mode == "async" {
		fmt.Fprintf(stdout, "  asynchronous: %d buffers of %d uploads, %d refused as too stale\n", s.Rounds, c.Buffer, s.Refused)
	}
	if s.Cut > 0 {
		fmt.Fprintf(stdout, "  over-selection: %d clients given the model and cut, not among a round's first %d to finish (nothing sent, nothing charged)\n", s.Cut, c.ClientsPerRound)
	}
	if s.Clock > 0 {
		fmt.Fprintf(stdout, "  virtual clock %.4g s, %d uploads (speed %s)\n", s.Clock, s.Uploads, speedName(c))
	}
	fmt.Fprintf(stdout, "  uplink %.4g bits/param per client, %.4g MB in all", s.UplinkBitsPerParam, float64(s.UplinkBitsTotal)/8e6)
	if s.SetupBytesTotal > 0 {
		fmt.Fprintf(stdout, "; setup (keys, shares) %.4g MB more", float64(s.SetupBytesTotal)/1e6)
		uploads := 0
		for _, k := range s.ClientRounds {
			uploads += k
		}
		if uploads > 0 {
			fmt.Fprintf(stdout, ", %.4g kB per client and round", float64(s.SetupBytesTotal)/1e3/float64(uploads))
		}
	}
	if c.SecureSumOnly {
		fmt.Fprint(stdout, "; secure sums computed without the protocol (--secure-sum-only): its setup and time not counted")
	}
	fmt.Fprintln(stdout)
	if l := s.Privacy; l != nil {
		// An asynchronous run's client takes part in a buffer by one
		// upload, and the ledger counts the buffers it took part in.
		took := "rounds"
		if c.Mode == "async" {
			took = "uploads"
		}
		printLedger(stdout, l, took)
	} else {
		fmt.Fprintf(stdout, "  privacy: none (%s is not LDP)\n", s.Mechanism)
	}
	if t := s.Trainer; t != nil {
		printTrainerCost(stdout, t)
	}
	fmt.Fprintf(stdout, "  %.1f s; results in %s\n", s.Seconds, c.Dir())
	return nil
}

// printUserLevel prints the run's user-level guarantee, a line per
// observer.
func printUserLevel(stdout io.Writer, u *privacy.UserLevel, delta float64, took string) {
	fmt.Fprintf(stdout, "  user-level privacy, one client's whole contribution (%s; at delta %g; docs/privacy.md#user-level-privacy-for-the-whole-run):\n", u.Relation, delta)
	at := func(b *privacy.Bound) string {
		if b == nil {
			return "none"
		}
		return fmt.Sprintf("eps %.4g", b.Eps)
	}
	noise := ""
	if u.NoiseMultiplier > 0 {
		noise = fmt.Sprintf("noise multiplier %.4g; ", u.NoiseMultiplier)
	}
	fmt.Fprintf(stdout, "    against whoever gets the models: %s (%samplification: %s; %s)\n", at(u.Model), noise, u.Amplification, u.Accountant)
	fmt.Fprintf(stdout, "    against the server: %s, over the %d %s of the most-sampled client\n", at(u.Server), u.Rounds, took)
	fmt.Fprintf(stdout, "    against an eavesdropper on its uplink: %s\n", at(u.Eavesdropper))
	if u.Note != "" {
		fmt.Fprintf(stdout, "    (%s)\n", u.Note)
	}
}

// printTrainerCost prints where an external trainer's time went.
func printTrainerCost(stdout io.Writer, t *report.TrainerCost) {
	fmt.Fprintf(stdout, "  trainer %q: %d processes, %d requests: %.1f s in its code, %.2f s in the protocol (%.1f%%), of which %.2f s sending %d examples (once per process); %.3g MB sent, %.3g MB received\n",
		t.Command, t.Processes, t.Requests, t.UserSeconds, t.Seconds-t.UserSeconds, 100*t.Overhead,
		t.DataSeconds, t.ExamplesSent, float64(t.BytesSent)/1e6, float64(t.BytesRead)/1e6)
}

// given reports whether the configuration key was set, by its flag or in
// the --config file, rather than left to its default.
func given(fs *flag.FlagSet, configPath, key string) bool {
	set := false
	fs.Visit(func(f *flag.Flag) { set = set || f.Name == strings.ReplaceAll(key, "_", "-") })
	if set || configPath == "" {
		return set
	}
	b, err := os.ReadFile(configPath)
	if err != nil {
		return false
	}
	var m map[string]any
	if yaml.Unmarshal(b, &m) != nil {
		return false
	}
	_, set = m[key]
	return set
}

// findConfig returns the value of --config in args, if any.
// loadConfig reads the --config file over c with errors that say what to
// give instead: a missing file or a directory (a run's, most likely) is a
// failure, exit 1; a bad key or value in the file is a usage error, exit 2,
// named as a YAML key rather than as a field of a Go type.
func loadConfig(path string, c *experiment.Config) error {
	st, err := os.Stat(path)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return fmt.Errorf("--config %s: no such file; give a YAML file of settings (experiments/ holds one per setting, docs/config.md lists the keys)", path)
	case err != nil:
		return fmt.Errorf("--config: %w", err)
	case st.IsDir():
		if _, err := os.Stat(filepath.Join(path, "config.yaml")); err == nil {
			return fmt.Errorf("--config %s is a directory: give %s to repeat that run, or --resume %s to continue it", path, filepath.Join(path, "config.yaml"), path)
		}
		return fmt.Errorf("--config %s is a directory; give a YAML file of settings (experiments/ holds one per setting)", path)
	}
	err = experiment.Load(path, c)
	if err == nil || errors.As(err, new(*fs.PathError)) {
		return err
	}
	msg := unknownField.ReplaceAllString(err.Error(), "unknown key $1")
	return badValue{fmt.Errorf("--config %s (docs/config.md lists every key)", msg)}
}

// unknownField matches the YAML decoder's words for an unknown key.
var unknownField = regexp.MustCompile(`field (\S+) not found in type \S+`)

func findConfig(args []string) string {
	for i, a := range args {
		if a == "--" {
			break
		}
		name, val, has := strings.Cut(strings.TrimLeft(a, "-"), "=")
		if !strings.HasPrefix(a, "-") || name != "config" {
			continue
		}
		if has {
			return val
		}
		if i+1 < len(args) {
			return args[i+1]
		}
	}
	return ""
}

// yamlOnly are the configuration keys that have no flag: values too
// structured for one, which a run resolves and records in config.yaml.
var yamlOnly = map[string]bool{
	"model_spec": true, // a spec is a list of layers
	"schema":     true, // own data: shape, classes, columns
}

// bindConfig defines a flag for every YAML key of c, with c's value as the
// default, but the keys in skip (settings the command does not apply).
func bindConfig(fs *flag.FlagSet, c *experiment.Config, skip map[string]string) error {
	fields := map[string]reflect.Value{}
	configFields(reflect.ValueOf(c).Elem(), fields)
	for k := range yamlOnly {
		delete(fields, k)
	}
	for _, kv := range runFlagHelp {
		f, ok := fields[kv[0]]
		if !ok {
			return fmt.Errorf("internal: no configuration key %q", kv[0])
		}
		delete(fields, kv[0])
		if _, ok := skip[kv[0]]; ok {
			continue
		}
		name := strings.ReplaceAll(kv[0], "_", "-")
		switch p := f.Addr().Interface().(type) {
		case flag.Value:
			fs.Var(p, name, kv[1])
		case *string:
			fs.StringVar(p, name, *p, kv[1])
		case *int:
			fs.IntVar(p, name, *p, kv[1])
		case *float64:
			fs.Float64Var(p, name, *p, kv[1])
		case *bool:
			fs.BoolVar(p, name, *p, kv[1])
		case *uint64:
			fs.Uint64Var(p, name, *p, kv[1])
		default:
			return fmt.Errorf("internal: key %q has unsupported type %T", kv[0], p)
		}
	}
	for k := range fields {
		return fmt.Errorf("internal: configuration key %q has no flag", k)
	}
	// --model replaces a model_spec of the --config file (a run's
	// config.yaml has one): the flag names the model of this run.
	if f := fs.Lookup("model"); f != nil {
		f.Value = modelFlag{&c.Model, &c.ModelSpec}
	}
	return nil
}

// configFields maps each YAML key of the struct v to its field, looking
// into structs inlined in it.
func configFields(v reflect.Value, fields map[string]reflect.Value) {
	for i := range v.NumField() {
		key, opts, _ := strings.Cut(v.Type().Field(i).Tag.Get("yaml"), ",")
		if key == "" && strings.Contains(opts, "inline") {
			configFields(v.Field(i), fields)
			continue
		}
		fields[key] = v.Field(i)
	}
}

// modelFlag is --model: it sets the model and drops a model_spec that
// the configuration file held.
type modelFlag struct {
	model *string
	spec  **model.Spec
}

func (f modelFlag) String() string {
	if f.model == nil {
		return ""
	}
	return *f.model
}

func (f modelFlag) Set(v string) error { *f.model, *f.spec = v, nil; return nil }

// Type is the flag's type in docs/config.md.
func (modelFlag) Type() string { return "string" }

// runProgress shows a progress bar with the round, accuracy and ETA on a
// terminal, a line per evaluation otherwise (logs), or nothing with quiet.
func runProgress(c experiment.Config, w io.Writer, quiet bool) (func(report.Round), func()) {
	if quiet {
		return nil, func() {}
	}
	if !isTerminal(w) {
		return func(r report.Round) {
			if r.Discarded != "" {
				fmt.Fprintf(w, "round %d/%d  aggregate discarded: %s\n", r.Round, c.Rounds, r.Discarded)
			}
			if r.Accuracy != nil {
				spent := fmt.Sprintf("eps spent %g", r.EpsilonSpent)
				if u := r.Privacy.UserGuarantee(); u != nil {
					spent = fmt.Sprintf("user-level eps %.4g", u.Eps)
				}
				fmt.Fprintf(w, "round %d/%d  accuracy %.4f  loss %.4f  %s  %.1fs\n",
					r.Round, c.Rounds, *r.Accuracy, *r.Loss, spent, r.Seconds)
			}
		}, func() {}
	}
	bar := progressbar.NewOptions(c.Rounds,
		progressbar.OptionSetWriter(w),
		progressbar.OptionSetDescription(c.Name),
		progressbar.OptionShowCount(),
		progressbar.OptionSetPredictTime(true),
		progressbar.OptionFullWidth(),
		progressbar.OptionClearOnFinish(),
	)
	acc := "-"
	return func(r report.Round) {
			if r.Discarded != "" {
				fmt.Fprintf(w, "\rround %d: aggregate discarded: %s\n", r.Round, r.Discarded)
			}
			if r.Accuracy != nil {
				acc = fmt.Sprintf("%.2f%%", 100**r.Accuracy)
			}
			bar.Describe(fmt.Sprintf("%s  round %d/%d  acc %s", c.Name, r.Round, c.Rounds, acc))
			bar.Add(1)
		}, func() {
			bar.Finish()
		}
}

// printLedger prints l, a line per observer; took names what its Rounds
// count: "rounds", or an asynchronous run's "uploads". Each number holds at the
// ledger's delta or a smaller one unless it says "at delta" (basic and
// advanced composition of (eps, delta) bounds), as in summary.json, where
// every entry carries its delta.
func printLedger(stdout io.Writer, l *privacy.Ledger, took string) {
	if u := l.User; u != nil {
		printUserLevel(stdout, u, l.Delta, took)
		if l.Eavesdropper == nil && l.Server == nil && l.Partner == nil {
			return // DP-FedAvg: no per-parameter guarantee to list
		}
	}
	fmt.Fprintf(stdout, "  privacy of the most-sampled client (%d %s, %d parameters; at delta %g unless a number says otherwise):\n", l.Rounds, took, l.Parameters, l.Delta)
	// at is a bound as printed: its eps, what it is, and its delta where
	// that is larger than the ledger's; "none" where no bound of the kind
	// holds.
	at := func(b *privacy.Bound, what string) string {
		switch {
		case b == nil:
			return "none" + what
		case b.Delta > l.Delta*(1+1e-9):
			return fmt.Sprintf("%.4g%s at delta %.3g", b.Eps, what, b.Delta)
		}
		return fmt.Sprintf("%.4g%s", b.Eps, what)
	}
	spent := func(s *privacy.Spent) string {
		line := fmt.Sprintf("eps %s, %s (%s, %s); whole upload %s, %s",
			at(s.ParamRound, " per parameter per round"), at(s.ParamOptimal, " over the rounds"), at(s.ParamBasic, " basic"), at(s.ParamAdvanced, " advanced"),
			at(s.UploadRound, " per round"), at(s.UploadOptimal, " over the rounds"))
		if s.Note != "" {
			line += " (why none: " + s.Note + ")"
		}
		return line
	}
	// Observers with the same guarantee share a line.
	type observer struct {
		who string
		s   *privacy.Spent
	}
	var groups [][]observer
	observers := []observer{{"an eavesdropper on its uplink", l.Eavesdropper}, {"the server", l.Server}, {"a colluding partner", l.Partner}}
	if l.ServerView != "" { // the server has a line of its own
		observers = []observer{observers[0], observers[2]}
	}
	for _, o := range observers {
		if n := len(groups); n > 0 && reflect.DeepEqual(groups[n-1][0].s, o.s) {
			groups[n-1] = append(groups[n-1], o)
			continue
		}
		groups = append(groups, []observer{o})
	}
	for _, g := range groups {
		var who []string
		for _, o := range g {
			who = append(who, o.who)
		}
		against := strings.Join(who, ", ")
		if len(who) == 3 {
			against = "anyone (eavesdropper, server, partner)"
		}
		if s := g[0].s; s == nil {
			fmt.Fprintf(stdout, "    against %s: no guarantee in the worst case (docs/privacy.md)\n", against)
		} else {
			fmt.Fprintf(stdout, "    against %s: %s\n", against, spent(s))
		}
	}
	if l.ServerView != "" {
		if s := l.Server; s == nil {
			fmt.Fprintf(stdout, "    against the server, which sees %s: no guarantee in the worst case\n", l.ServerView)
		} else {
			fmt.Fprintf(stdout, "    against the server, which sees %s: %s\n", l.ServerView, spent(s))
		}
	}
	switch {
	case l.Central != nil:
		fmt.Fprintf(stdout, "    central DP of the last round's mean (AugCorBin-FL Theorem 3, corrected): eps %.4g at delta %g\n", l.Central.Eps, l.Central.Delta)
	case l.CentralNote != "":
		fmt.Fprintf(stdout, "    central DP of the last round's mean (AugCorBin-FL Theorem 3, corrected): none: %s\n", l.CentralNote)
	}
}
