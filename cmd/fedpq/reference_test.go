package main

import (
	"flag"
	"os"
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
