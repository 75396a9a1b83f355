package data

import (
	"math"
	"slices"
	"strings"
	"testing"
)

// TestSynthetic: Load("synthetic", ...) is Synthetic(1, 1); each client has
// at least 50 examples, int(0.9 n) of them in Train at the indices Natural
// lists (disjoint, complete, client by client) and the rest in Test; the
// same seed gives bit-identical data and another seed different data. The
// class balance is plausible for this benchmark, whose per-client models
// make labels skewed: over seeds 1-5 with 30 clients every class appears in
// the pooled train set and none holds more than 60% of it (observed maximum
// 52%).
func TestSynthetic(t *testing.T) {
	f, err := Load("synthetic", Options{Clients: 30, Seed: 1})
	if err != nil {
		t.Fatal(err)
	}
	d := f.Train
	if d.Name != "synthetic:1,1" || d.Features() != 60 || d.Classes != 10 || len(d.X) != 60*d.Len() || len(f.Natural) != 30 {
		t.Fatalf("%s: %d features, %d classes, %d clients", d.Name, d.Features(), d.Classes, len(f.Natural))
	}
	checkPartition(t, f.Natural, d.Len())
	// A client of n examples trains on t = int(0.9 n) and tests on n - t;
	// several n give the same t, so the pooled test size lies between the
	// sums of the smallest and largest n - t that fit each client's t.
	lo, hi := 0, 0
	for k, p := range f.Natural {
		tr := len(p)
		if tr < 45 || k > 0 && p[0] != slices.Max(f.Natural[k-1])+1 {
			t.Errorf("client %d: %d train examples from %d", k, tr, p[0])
		}
		fits := []int{}
		for n := tr; n <= 2*tr; n++ {
			if int(0.9*float64(n)) == tr {
				fits = append(fits, n-tr)
			}
		}
		lo += slices.Min(fits)
		hi += slices.Max(fits)
	}
	if f.Test.Len() < lo || f.Test.Len() > hi {
		t.Errorf("test set of %d, want %d to %d (10%% of each client)", f.Test.Len(), lo, hi)
	}
	again, _ := Synthetic(1, 1, 30, 1)
	if !slices.Equal(d.X, again.Train.X) || !slices.Equal(d.Y, again.Train.Y) || !slices.Equal(f.Test.X, again.Test.X) {
		t.Error("same seed, different data")
	}
	for seed := uint64(1); seed <= 5; seed++ {
		g, err := Synthetic(1, 1, 30, seed)
		if err != nil {
			t.Fatal(err)
		}
		if seed > 1 && slices.Equal(g.Train.X[:60], d.X[:60]) {
			t.Errorf("seed %d repeats seed 1", seed)
		}
		count := make([]int, 10)
		for _, y := range g.Train.Y {
			count[y]++
		}
		if slices.Min(count) == 0 || float64(slices.Max(count)) > 0.6*float64(g.Train.Len()) {
			t.Errorf("seed %d: class counts %v", seed, count)
		}
	}
}

// TestSyntheticCovariance: within a client, feature j varies about its mean
// with variance j^-1.2: 1 for the first feature, 60^-1.2 = 0.0074 for the
// last. Checked on the largest client of Synthetic(0.5, 0.5) to within 15%
// (with n >= 400 examples a sample variance is off by more than 15% with
// probability under 0.3%).
func TestSyntheticCovariance(t *testing.T) {
	f, err := Load("synthetic:0.5,0.5", Options{Clients: 30, Seed: 2})
	if err != nil {
		t.Fatal(err)
	}
	big := slices.MaxFunc(f.Natural, func(a, b []int) int { return len(a) - len(b) })
	if len(big) < 400 {
		t.Fatalf("largest client has %d examples", len(big))
	}
	for _, j := range []int{0, 9, 59} {
		var s, s2 float64
		for _, i := range big {
			x := float64(f.Train.X[i*60+j])
			s += x
			s2 += x * x
		}
		n := float64(len(big))
		v := (s2 - s*s/n) / (n - 1)
		want := math.Pow(float64(j+1), -1.2)
		if math.Abs(v/want-1) > 0.15 {
			t.Errorf("feature %d: variance %.4f, want %.4f", j+1, v, want)
		}
	}
}

// TestLoadNames: parameters parse, and bad names or missing clients are
// errors that say what is expected.
func TestLoadNames(t *testing.T) {
	f, err := Load("synthetic:0,0", Options{Clients: 3, Seed: 1})
	if err != nil || f.Train.Name != "synthetic:0,0" {
		t.Errorf("synthetic:0,0: %v", err)
	}
	for name, want := range map[string]string{
		"synthetic:1":    "ALPHA,BETA",
		"synthetic:a,1":  "ALPHA,BETA",
		"synthetic:-1,1": "non-negative",
		"cifar100":       "unknown dataset",
	} {
		if _, err := Load(name, Options{Clients: 3}); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%s: %v, want an error mentioning %q", name, err, want)
		}
	}
	if _, err := Load("synthetic", Options{}); err == nil || !strings.Contains(err.Error(), "clients") {
		t.Errorf("no clients: %v", err)
	}
}
