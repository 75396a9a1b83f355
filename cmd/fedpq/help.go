package main

import (
	"flag"
	"fmt"
	"io"
	"slices"
)

// helpGroup is a heading of a command's --help and the flags under it, in
// the order a user scans them.
type helpGroup struct {
	title string
	flags []string
}

// The settings of a run, grouped; the server shows them too.
var runGroups = []helpGroup{
	{"Data", []string{"dataset", "data-dir", "partition", "clients", "dropout", "validation"}},
	{"Own data (instead of --dataset; docs/data.md)", []string{"data", "test-data", "validation-data", "data-format", "label-column",
		"categorical-columns", "client-column", "feature-scaling", "image-size", "channels", "classes", "max-examples"}},
	{"Model and training", []string{"model", "init-weights", "init-weights-sha256", "rounds", "optimizer", "lr", "momentum", "weight-decay", "epochs", "batch",
		"perturb", "patience", "eval-every", "engine", "workers", "seed",
		"trainer", "trainer-timeout", "trainer-threads"}},
	{"Server strategy: which clients, the range and objective asked for, aggregation, the server's step (docs/training.md#server-strategies)",
		[]string{"clients-per-round", "sampling", "range", "prox-mu", "weighting", "aggregator", "server-optimizer", "global-lr", "server-beta1", "server-beta2", "server-tau"}},
	{"Asynchronous training, FedBuff (docs/training.md#asynchronous-training-fedbuff)",
		[]string{"mode", "concurrency", "buffer", "staleness", "max-staleness", "speed", "over-select"}},
	{"Mechanism", []string{"mechanism", "epsilon", "delta", "shared-bits", "gamma", "px", "input-bits", "budget-bits",
		"rate", "lattice", "mod-bits", "trials", "transfer"}},
	{"User-level DP for the whole run: DP-FedAvg (docs/privacy.md#user-level-privacy-for-the-whole-run)",
		[]string{"clip", "target-epsilon", "noise-multiplier", "clip-per-layer", "clip-quantile", "clip-quantile-noise", "dp-ftrl"}},
	{"Hiding the messages from the server", []string{"secure-aggregation", "secure-sum-only", "shuffle"}},
	{"Privacy ledger", []string{"ledger-delta"}},
	{"Output", []string{"config", "name", "out", "resume", "format", "quiet"}},
}

// byzantineGroup is fedpq run's alone: a server's clients attack by
// themselves (fedpq client --byzantine).
var byzantineGroup = helpGroup{"Byzantine clients, to measure robustness (docs/security.md)", []string{"byzantine", "byzantine-fraction"}}

// helpGroups is each command's grouping; a command without one lists its
// flags alphabetically.
var helpGroups = map[string][]helpGroup{
	"run": slices.Insert(slices.Clone(runGroups), len(runGroups)-1, byzantineGroup),
	"server": append([]helpGroup{{"Server", []string{"listen", "token", "roster", "tls-cert", "tls-key", "min-clients",
		"gather", "grace", "max-wait", "round-timeout", "task-timeout", "key-share-timeout", "join-timeout", "linger"}}}, runGroups...),
	"attack": {
		{"Data and model", []string{"dataset", "data-dir", "model", "checkpoint", "seed"}},
		{"What the client sends", []string{"mechanism", "batch", "message", "lr", "range"}},
		{"Attack", []string{"method", "optimizer", "iterations", "starts", "give-labels", "targets"}},
		{"Output", []string{"png", "format", "quiet"}},
	},
	"split": {
		{"What to split", []string{"from", "data-dir", "test", "test-fraction", "data-format", "label-column", "classes", "image-size", "channels"}},
		{"How", []string{"clients", "partition", "seed"}},
		{"Output", []string{"out", "format", "client-column", "quiet"}},
	},
	"client": {
		{"Server", []string{"server", "token", "key", "roster", "tls", "tls-ca", "tls-server-name", "retry-for"}},
		{"Data: its own (--data), or a partition of a shared dataset (--partition)", []string{"data", "client", "data-format", "partition", "data-dir"}},
		{"Several clients in one process (a fleet)", []string{"clients", "block", "block-size", "workers"}},
		{"Training", []string{"trainer", "trainer-timeout", "trainer-threads"}},
		{"Testing", []string{"seed", "byzantine", "delay"}},
	},
}

// printFlags prints fs's flags under the command's headings; flags no
// heading names come last, under "Other".
func printFlags(w io.Writer, name string, fs *flag.FlagSet) {
	groups, ok := helpGroups[name]
	if !ok {
		fs.PrintDefaults()
		return
	}
	shown := map[string]bool{}
	print := func(title string, names []string) {
		sub := flag.NewFlagSet(name, flag.ContinueOnError)
		sub.SetOutput(w)
		for _, n := range names {
			if f := fs.Lookup(n); f != nil && !shown[n] {
				sub.Var(f.Value, f.Name, f.Usage)
				sub.Lookup(n).DefValue = f.DefValue
				shown[n] = true
			}
		}
		if !hasFlags(sub) {
			return
		}
		fmt.Fprintf(w, "\n%s:\n", title)
		sub.PrintDefaults()
	}
	for _, g := range groups {
		print(g.title, g.flags)
	}
	var rest []string
	fs.VisitAll(func(f *flag.Flag) {
		if !shown[f.Name] {
			rest = append(rest, f.Name)
		}
	})
	slices.Sort(rest)
	print("Other", rest)
}

func hasFlags(fs *flag.FlagSet) bool {
	n := 0
	fs.VisitAll(func(*flag.Flag) { n++ })
	return n > 0
}
