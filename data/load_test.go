package data

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// sharedDir is where the repository's shared datasets live, relative to this
// package. Tests that need the real files skip when it is absent, except in
// CI, which always has it: there a missing directory is a failure, not a
// silently skipped test.
var sharedDir = filepath.Join("..", "..", "shared", "datasets")

func needShared(t *testing.T, sub string) {
	t.Helper()
	if _, err := os.Stat(filepath.Join(sharedDir, sub, "train-images-idx3-ubyte.gz")); err != nil {
		if os.Getenv("CI") != "" {
			t.Fatalf("CI without the shared datasets: no %s in %s: %v", sub, sharedDir, err)
		}
		t.Skipf("no %s in %s: %v", sub, sharedDir, err)
	}
}

// TestLoadReal: MNIST and Fashion-MNIST load from the shared directory with
// their published sizes, shape and classes, the known first labels (MNIST
// train starts 5 0 4 1 9, test 7 2 1 0 4; Fashion-MNIST train 9 0 0 3 0, test
// 9 2 1 1 6), pixels in [0,1] reaching both ends, and every class present.
// The MD5 of every file is checked by Load itself, so loading at all shows
// the checksums match.
func TestLoadReal(t *testing.T) {
	for _, tc := range []struct {
		name             string
		trainHead, tHead []int32
	}{
		{"mnist", []int32{5, 0, 4, 1, 9}, []int32{7, 2, 1, 0, 4}},
		{"fashion-mnist", []int32{9, 0, 0, 3, 0}, []int32{9, 2, 1, 1, 6}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			needShared(t, tc.name)
			start := time.Now()
			f, err := Load(tc.name, Options{Dir: sharedDir, Offline: true})
			if err != nil {
				t.Fatal(err)
			}
			t.Logf("%s loaded in %v", tc.name, time.Since(start))
			if f.Natural != nil {
				t.Errorf("Natural = %d clients, want nil", len(f.Natural))
			}
			for _, c := range []struct {
				d    *Dataset
				n    int
				head []int32
			}{{f.Train, 60000, tc.trainHead}, {f.Test, 10000, tc.tHead}} {
				d := c.d
				if d.Len() != c.n || d.Features() != 784 || len(d.X) != c.n*784 || d.Classes != 10 || d.Name != tc.name {
					t.Fatalf("%s: %d examples of %d features (%v), %d classes, X %d: want %d of 784 (28x28x1), 10", d.Name, d.Len(), d.Features(), d.Shape, d.Classes, len(d.X), c.n)
				}
				if len(d.Shape) != 3 || d.Shape[0] != 28 || d.Shape[1] != 28 || d.Shape[2] != 1 {
					t.Errorf("shape %v, want [28 28 1]", d.Shape)
				}
				for i, l := range c.head {
					if d.Y[i] != l {
						t.Errorf("label %d = %d, want %d", i, d.Y[i], l)
					}
				}
				lo, hi := d.X[0], d.X[0]
				for _, v := range d.X {
					lo, hi = min(lo, v), max(hi, v)
				}
				if lo != 0 || hi != 1 {
					t.Errorf("pixels in [%v, %v], want [0, 1]", lo, hi)
				}
				seen := make([]int, 10)
				for _, l := range d.Y {
					seen[l]++
				}
				for l, k := range seen {
					if k < c.n/20 {
						t.Errorf("class %d has %d examples", l, k)
					}
				}
			}
		})
	}
}

// TestLoadChecksMD5: Load verifies the official MD5. A copy of MNIST whose
// train-labels file differs only in the gzip header's timestamp decodes to
// the same data, yet Load rejects it, naming the checksum.
func TestLoadChecksMD5(t *testing.T) {
	needShared(t, "mnist")
	dir := t.TempDir()
	for _, f := range mnist.files {
		src, err := filepath.Abs(filepath.Join(sharedDir, "mnist", f.name))
		if err != nil {
			t.Fatal(err)
		}
		if f.name != "train-labels-idx1-ubyte.gz" {
			if err := os.Symlink(src, filepath.Join(dir, f.name)); err != nil {
				t.Fatal(err)
			}
			continue
		}
		b, err := os.ReadFile(src)
		if err != nil {
			t.Fatal(err)
		}
		b[4] ^= 1 // MTIME, which gunzip ignores
		if err := os.WriteFile(filepath.Join(dir, f.name), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	_, err := Load("mnist", Options{Dir: dir, Offline: true})
	if err == nil || !strings.Contains(err.Error(), "md5") || !strings.Contains(err.Error(), "d53e105ee54ea40749a09fcbcd1e9432") {
		t.Errorf("err = %v, want an MD5 mismatch naming the official sum", err)
	}
}
