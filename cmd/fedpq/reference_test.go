package main

import (
	"bytes"
	"context"
	"flag"
	"io"
	"os"
	"strings"
	"testing"
)

var update = flag.Bool("update", false, "rewrite docs/config.md from the flags")

// TestConfigReference: docs/config.md is what the flags say, every flag
// of every command in it; -update rewrites it.
func TestConfigReference(t *testing.T) {
	const path = "../../docs/config.md"
	got := reference()
	if *update {
		if err := os.WriteFile(path, []byte(got), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if string(want) != got {
		t.Errorf("%s is out of date: go test ./cmd/fedpq -run TestConfigReference -update", path)
	}
}

// TestHelpGrouped: fedpq run, server and client --help list every flag
// once, under the headings a user scans (data, model and training,
// mechanism, ...), in their order.
func TestHelpGrouped(t *testing.T) {
	for name, groups := range helpGroups {
		var out, errb bytes.Buffer
		run(context.Background(), []string{name, "-h"}, &out, &errb)
		help := errb.String()
		at := 0
		for _, g := range groups {
			i := strings.Index(help, "\n"+g.title+":\n")
			if i < at {
				t.Errorf("%s --help: heading %q missing or out of order", name, g.title)
			}
			at = i
		}
		flagSets = map[string]*flag.FlagSet{}
		commands[name].run(context.Background(), []string{"-h"}, io.Discard, io.Discard)
		flagSets[name].VisitAll(func(f *flag.Flag) {
			if n := strings.Count(help, "\n  -"+f.Name+" "); n+strings.Count(help, "\n  -"+f.Name+"\n") != 1 {
				t.Errorf("%s --help: flag -%s listed %d times", name, f.Name, n)
			}
		})
		flagSets = nil
	}
}
