package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"slices"
	"strings"

	"github.com/fedpq/fedpq/mech"
)

// flagSets, when not nil, collects the flag sets the commands make, so
// that the reference of every flag (docs/config.md) is written from the
// flags themselves and cannot drift from them.
var flagSets map[string]*flag.FlagSet

// reference is docs/config.md: every command's flags with their type,
// default and meaning; for fedpq run (and the server, which shares them),
// the YAML key of each configuration flag and the mechanisms that read it.
func reference() string {
	flagSets = map[string]*flag.FlagSet{}
	defer func() { flagSets = nil }()
	var names []string
	for n := range commands {
		names = append(names, n)
	}
	slices.Sort(names)
	for _, n := range names {
		commands[n].run(context.Background(), []string{"-h"}, io.Discard, io.Discard) // defines the flags, prints nothing here
	}
	keys := map[string]bool{}
	for _, kv := range runFlagHelp {
		keys[strings.ReplaceAll(kv[0], "_", "-")] = true
	}
	var b strings.Builder
	b.WriteString(`# Configuration and flags

Every flag of every command, generated from the flags themselves by
` + "`go test ./cmd/fedpq -run TestConfigReference -update`" + ` (the test fails when this
file is out of date). The flags of ` + "`fedpq run`" + ` marked with a YAML key are the run's
configuration: the same key in a ` + "`--config`" + ` file (underscores for dashes), which the flag
overrides; ` + "`fedpq server`" + ` takes the same keys, but for those of the simulation alone
(` + "`dropout`, `shuffle`, `data`, `client_column`, `workers`, `byzantine`, `byzantine_fraction`" + `), which it has no flag for. "Read by" names the mechanisms a
setting is for; the others read it whatever the mechanism. Two keys have no flag:
` + "`model_spec`" + `, a network of one's own written in the YAML file (a spec:
[models.md](models.md#specs)); a run given ` + "`--model NET.yaml`" + ` records the file's spec there in
its config.yaml, and ` + "`--model`" + ` replaces it; and ` + "`schema`" + `, what every client's own data must
fit (shape, classes, a CSV's columns), which a run with its own data resolves from its evaluation
set and records in config.yaml, or a ` + "`--config`" + ` file declares ([data.md](data.md#the-schema)).
`)
	for _, n := range names {
		fs := flagSets["fedpq "+n]
		if fs == nil {
			fs = flagSets[n]
		}
		if fs == nil {
			continue
		}
		fmt.Fprintf(&b, "\n## fedpq %s\n\n%s\n\n", n, commands[n].summary)
		var rows []string
		fs.VisitAll(func(f *flag.Flag) {
			key := ""
			if keys[f.Name] && (n == "run" || n == "server") {
				key = "`" + strings.ReplaceAll(f.Name, "-", "_") + "`"
			}
			rows = append(rows, fmt.Sprintf("| `--%s` | %s | %s | %s | %s | %s |",
				f.Name, key, flagType(f), cell(f.DefValue), readBy(f.Usage), cell(f.Usage)))
		})
		if len(rows) == 0 {
			b.WriteString("No flags.\n")
			continue
		}
		b.WriteString("| flag | YAML key | type | default | read by | meaning |\n|---|---|---|---|---|---|\n")
		b.WriteString(strings.Join(rows, "\n") + "\n")
	}
	return b.String()
}

// flagType names a flag's type as its value's Go type does, or as a
// value of fedpq's own says it with a Type method.
func flagType(f *flag.Flag) string {
	if v, ok := f.Value.(interface{ Type() string }); ok {
		return v.Type()
	}
	t := strings.TrimSuffix(strings.TrimPrefix(fmt.Sprintf("%T", f.Value), "*flag."), "Value")
	if t == "float64" {
		return "number"
	}
	return t
}

// readBy is the mechanisms a setting's help names before its colon, if
// they are all mechanisms.
func readBy(usage string) string {
	head, _, ok := strings.Cut(usage, ": ")
	if !ok {
		return ""
	}
	if head == "paired mechanisms" {
		return "corbin, augcorbin, coq"
	}
	for _, n := range strings.Split(head, ", ") {
		if _, ok := mech.Lookup(n); !ok {
			return ""
		}
	}
	return head
}

// cell escapes a Markdown table cell.
func cell(s string) string {
	if s == "" {
		return ""
	}
	return "`" + strings.ReplaceAll(s, "|", "\\|") + "`"
}
