package main

import (
	"encoding/json"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/fedpq/fedpq/reproduce"
)

func TestReproduceList(t *testing.T) {
	code, out, errOut := runCLI("reproduce", "--list")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	for _, want := range []string{"NAME", "corbin-mse", "coq-variance", "mvu-dme", "jopeq-snr", "CorBin-FL", "CoQ-FL", "MVU", "JoPEQ", "Fig. 4", "docs/reproduction.md", "ldpfl-mnist", "LDP-FL", "Table 1", "corbin-clients", "jopeq-accuracy"} {
		if !strings.Contains(out, want) {
			t.Errorf("--list lacks %q:\n%s", want, out)
		}
	}
	if code, out, _ := runCLI("help"); code != 0 || !strings.Contains(out, "reproduce") {
		t.Errorf("help does not list reproduce")
	}
}

func TestReproduceUsage(t *testing.T) {
	for _, args := range [][]string{{"reproduce"}, {"reproduce", "--list", "corbin-mse"}, {"reproduce", "--nonesuch", "corbin-mse"}} {
		if code, _, _ := runCLI(args...); code != 2 {
			t.Errorf("%v: exit %d, want 2", args, code)
		}
	}
	code, _, errOut := runCLI("reproduce", "--quick", "--out", t.TempDir(), "nonesuch")
	if code != 2 || !strings.Contains(errOut, `fedpq reproduce: unknown experiment "nonesuch"`) || !strings.Contains(errOut, "corbin-mse") {
		t.Errorf("unknown name: exit %d, %q", code, errOut)
	}
	if code, _, errOut := runCLI("reproduce", "-h"); code != 0 || !strings.Contains(errOut, "--quick") && !strings.Contains(errOut, "-quick") {
		t.Errorf("-h: exit %d, %s", code, errOut)
	}
}

// readRows reads the raw numbers an experiment wrote.
func readRows[T any](t *testing.T, dir, name string) []T {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(dir, name+".json"))
	if err != nil {
		t.Fatal(err)
	}
	var r struct {
		Mode string `json:"mode"`
		Rows []T    `json:"rows"`
	}
	if err := json.Unmarshal(b, &r); err != nil {
		t.Fatal(err)
	}
	if r.Mode != "quick" || len(r.Rows) == 0 {
		t.Fatalf("%s: mode %q, %d rows", name, r.Mode, len(r.Rows))
	}
	md, err := os.ReadFile(filepath.Join(dir, name+".md"))
	if err != nil || !strings.Contains(string(md), "| eps") && !strings.Contains(string(md), "| rate") {
		t.Errorf("%s.md: %v\n%s", name, err, md)
	}
	return r.Rows
}

// TestReproduceQuickClaims runs every DME experiment in quick mode (fixed
// seed) and checks, on the numbers each wrote, the paper's qualitative
// claim with the tolerance stated at each check (se: standard error).
func TestReproduceQuickClaims(t *testing.T) {
	dir := t.TempDir()
	names := []string{"corbin-mse", "coq-variance", "mvu-dme", "jopeq-snr"}
	code, out, errOut := runCLI(append([]string{"reproduce", "--quick", "--quiet", "--out", dir, "--mvu-cache", t.TempDir()}, names...)...)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	for _, n := range names {
		if !strings.Contains(out, "### "+n+": ") {
			t.Errorf("output lacks the %s section", n)
		}
	}

	t.Run("corbin-mse", func(t *testing.T) {
		rows := readRows[reproduce.CorBinRow](t, dir, "corbin-mse")
		for _, r := range rows {
			// Fig. 4: the CorBinQ pair's MSE is below the LDPQ pair's, by more
			// than 2 se of each.
			if !(r.PairedMSE+2*r.PairedSE < r.IndependentMSE-2*r.IndependentSE) {
				t.Errorf("eps %g: CorBinQ %v ± %v not below LDPQ %v ± %v", r.Epsilon, r.PairedMSE, r.PairedSE, r.IndependentMSE, r.IndependentSE)
			}
			// The LDPQ pair measures the paper's formula within 4 se.
			if math.Abs(r.IndependentMSE-r.Formula) > 4*r.IndependentSE {
				t.Errorf("eps %g: LDPQ pair %v ± %v, formula %v", r.Epsilon, r.IndependentMSE, r.IndependentSE, r.Formula)
			}
			// Sec. IV-2: at least a factor 2 where alpha >> 1 (alpha >= 4).
			if r.Alpha >= 4 && r.Ratio-2*r.RatioSE < 2 {
				t.Errorf("eps %g: ratio %v ± %v below 2", r.Epsilon, r.Ratio, r.RatioSE)
			}
		}
		// The gap grows as eps decreases: the ratio at the smallest eps is
		// far above the one at the largest.
		first, last := rows[0], rows[len(rows)-1]
		if !(first.Epsilon < last.Epsilon && first.Ratio-2*first.RatioSE > 2*(last.Ratio+2*last.RatioSE)) {
			t.Errorf("ratio at eps %g: %v, at eps %g: %v", first.Epsilon, first.Ratio, last.Epsilon, last.Ratio)
		}
	})

	t.Run("coq-variance", func(t *testing.T) {
		for _, r := range readRows[reproduce.CoQRow](t, dir, "coq-variance") {
			// The pair's worst case is at most half the independent pair's,
			// within 4 se of the measured ratio...
			if r.WorstRatio > 0.5+4*r.WorstRatioSE {
				t.Errorf("eps %g: worst-case ratio %v ± %v above 1/2", r.Epsilon, r.WorstRatio, r.WorstRatioSE)
			}
			// ... and about half (not less than 0.45 - 4 se) where alpha <= 2,
			// so that eq. (6)'s maximum alpha^2 r^2 lies inside the range.
			if r.Alpha <= 2 && r.WorstRatio < 0.45-4*r.WorstRatioSE {
				t.Errorf("eps %g: worst-case ratio %v ± %v, want about 1/2", r.Epsilon, r.WorstRatio, r.WorstRatioSE)
			}
			// The exact worst case never exceeds eq. (6)'s alpha^2 r^2.
			if r.WorstPairedExact > r.PaperMax*(1+1e-9) {
				t.Errorf("eps %g: exact worst case %v above alpha^2 r^2 = %v", r.Epsilon, r.WorstPairedExact, r.PaperMax)
			}
			// At E[w] = c: zero up to the 2^-5 that d = 5 shared bits leave.
			if r.BalancedMSE-4*r.BalancedSE > r.PaperIndependentMax/32 {
				t.Errorf("eps %g: pair at E[w]=c %v ± %v", r.Epsilon, r.BalancedMSE, r.BalancedSE)
			}
		}
	})

	t.Run("mvu-dme", func(t *testing.T) {
		rows := readRows[reproduce.MVURow](t, dir, "mvu-dme")
		get := func(eps float64, name string) reproduce.MVURow {
			for _, r := range rows {
				if r.Epsilon == eps && r.Mechanism == name {
					return r
				}
			}
			t.Fatalf("no %s at eps %g", name, eps)
			return reproduce.MVURow{}
		}
		for _, eps := range []float64{1, 3, 5} {
			m := get(eps, "MVU b=3")
			// Lower than randomized response, 1-bit MVU and Laplace, 2 se
			// apart; no worse than k-RR (within 3 se of both).
			for _, name := range []string{"RR b=3 (bitwise)", "MVU b=1", "Laplace"} {
				if r := get(eps, name); !(m.Measured+2*m.MeasuredSE < r.Measured-2*r.MeasuredSE) {
					t.Errorf("eps %g: MVU %v not below %s %v", eps, m.Measured, name, r.Measured)
				}
			}
			if k := get(eps, "k-RR b=3"); m.Measured > k.Measured+3*math.Hypot(m.MeasuredSE, k.MeasuredSE) {
				t.Errorf("eps %g: MVU %v above k-RR %v", eps, m.Measured, k.Measured)
			}
			// Every mechanism measures its closed form within 4 se; Laplace's
			// is 8/eps^2 for inputs in [-1, 1].
			for _, r := range rows {
				if r.Epsilon == eps && math.Abs(r.Measured-r.Exact) > 4*r.MeasuredSE {
					t.Errorf("eps %g %s: measured %v ± %v, exact %v", eps, r.Mechanism, r.Measured, r.MeasuredSE, r.Exact)
				}
			}
			if l := get(eps, "Laplace"); math.Abs(l.Exact-8/(eps*eps)) > 1e-6 {
				t.Errorf("eps %g: Laplace exact %v, want 8/eps^2", eps, l.Exact)
			}
		}
	})

	t.Run("jopeq-snr", func(t *testing.T) {
		rows := readRows[reproduce.JoPEQRow](t, dir, "jopeq-snr")
		get := func(eps float64, rate int, name string) reproduce.JoPEQRow {
			for _, r := range rows {
				if r.Epsilon == eps && r.Rate == rate && r.Mechanism == name {
					if r.Error != "" {
						t.Fatalf("%s eps %g rate %d: %s", name, eps, rate, r.Error)
					}
					return r
				}
			}
			t.Fatalf("no %s at eps %g rate %d", name, eps, rate)
			return reproduce.JoPEQRow{}
		}
		for _, eps := range []float64{3, 3.5, 4} {
			j1, j8 := get(eps, 1, "jopeq-compat"), get(eps, 8, "jopeq-compat")
			l1, l8 := get(eps, 1, "laplace+sdq"), get(eps, 8, "laplace+sdq")
			// JoPEQ's SNR hardly drops from 8 bits to 1 (under 1 dB); the
			// separate Laplace + SDQ drops at least 1 dB more; JoPEQ's gain
			// is larger at 1 bit than at 8.
			if j8.SNRdB-j1.SNRdB > 1 {
				t.Errorf("eps %g: JoPEQ drops %v dB", eps, j8.SNRdB-j1.SNRdB)
			}
			if !(l8.SNRdB-l1.SNRdB > j8.SNRdB-j1.SNRdB+1) {
				t.Errorf("eps %g: Lap+SDQ drops %v dB, JoPEQ %v dB", eps, l8.SNRdB-l1.SNRdB, j8.SNRdB-j1.SNRdB)
			}
			if !(j1.SNRdB-l1.SNRdB > j8.SNRdB-l8.SNRdB) {
				t.Errorf("eps %g: gain %v dB at R=1, %v dB at R=8", eps, j1.SNRdB-l1.SNRdB, j8.SNRdB-l8.SNRdB)
			}
			// Unquantized Laplace of scale 2r/eps on N(0, (r/3)^2) updates:
			// SNR = eps^2/72, within 0.3 dB (sampling and clipping).
			lap := get(eps, 32, "laplace")
			if want := 10 * math.Log10(eps*eps/72); math.Abs(lap.SNRdB-want) > 0.3 {
				t.Errorf("eps %g: Laplace SNR %v dB, want %v", eps, lap.SNRdB, want)
			}
			// Exact rates: R bits for the eps-LDP mechanisms, R+1 plus the
			// header for the authors' JoPEQ.
			if j1.Bits <= 2 || l1.Bits != 1 || get(eps, 1, "jopeq").Bits != 1 {
				t.Errorf("eps %g: bits %v %v", eps, j1.Bits, l1.Bits)
			}
		}
	})
}

// TestReproduceTraining runs every training experiment in quick mode on the
// shared MNIST and Fashion-MNIST, and checks what quick mode can show:
// every cell ran and kept its run directory, each mechanism sent its
// number of bits, privacy costs accuracy where it must even after two
// rounds, and the same seed gives the same accuracies.
func TestReproduceTraining(t *testing.T) {
	data := sharedDatasets(t)
	dir := t.TempDir()
	names := []string{"ldpfl-mnist", "ldpfl-fmnist", "corbin-bits", "corbin-dropout", "corbin-clients", "corbin-mnist", "jopeq-accuracy"}
	code, out, errOut := runCLI(append([]string{"reproduce", "--quick", "--quiet", "--data-dir", data, "--out", dir}, names...)...)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	rows := map[string][]reproduce.TrainRow{}
	for _, n := range names {
		if !strings.Contains(out, "### "+n+": ") {
			t.Errorf("output lacks the %s section", n)
		}
		b, err := os.ReadFile(filepath.Join(dir, n+".json"))
		if err != nil {
			t.Fatal(err)
		}
		var r struct {
			Mode   string
			Checks []reproduce.Check
			Rows   []reproduce.TrainRow
		}
		if err := json.Unmarshal(b, &r); err != nil {
			t.Fatal(err)
		}
		if r.Mode != "quick" || len(r.Rows) < 3 || len(r.Checks) == 0 {
			t.Fatalf("%s: mode %q, %d rows, %d checks", n, r.Mode, len(r.Rows), len(r.Checks))
		}
		rows[n] = r.Rows
		for _, c := range r.Rows {
			want := map[string]float64{"none": 32, "ldpq": 1, "corbin": 1, "sdq": 1, "laplace": 32, "laplace+sdq": 1, "jopeq-compat": 2}[c.Mechanism] // jopeq-compat: 2^R + 1 levels
			if len(c.Accuracy) != 1 || !(c.Mean > 0.05 && c.Mean <= 1) || c.SD != 0 || len(c.Dirs) != 1 {
				t.Errorf("%s %s %s: accuracy %v, mean %v, sd %v, dirs %v", n, c.Row, c.Col, c.Accuracy, c.Mean, c.SD, c.Dirs)
				continue
			}
			// The message sizes: the payload, plus per-tensor headers of
			// under 0.05 bits per parameter (jopeq-compat's scale and mean).
			if want != 0 && !(c.BitsPerParam >= want && c.BitsPerParam < want+0.05) {
				t.Errorf("%s %s %s: %v bits per parameter, want %v", n, c.Row, c.Col, c.BitsPerParam, want)
			}
			if _, err := os.Stat(filepath.Join(c.Dirs[0], "summary.json")); err != nil {
				t.Errorf("%s %s %s: %v", n, c.Row, c.Col, err)
			}
		}
	}
	acc := func(name, row, col string) float64 {
		for _, r := range rows[name] {
			if r.Row == row && r.Col == col {
				return r.Mean
			}
		}
		t.Fatalf("%s: no cell %s, %s", name, row, col)
		return 0
	}
	// Even two rounds of a tenth of the clients show eps = 0.1 destroying
	// the model and eps = 10 keeping most of it (LDP-FL's Table 1 pattern).
	for _, tc := range []struct{ name, row string }{{"ldpfl-mnist", "MNIST (n = 100)"}, {"ldpfl-fmnist", "Fashion-MNIST (n = 200)"}} {
		low, high, free := acc(tc.name, tc.row, "eps 0.1"), acc(tc.name, tc.row, "eps 10"), acc(tc.name, tc.row, "noise-free")
		if !(low < 0.25 && high > 0.6 && free > 0.6) {
			t.Errorf("%s: eps 0.1 %v, eps 10 %v, noise-free %v", tc.name, low, high, free)
		}
	}
	// JoPEQ Table I: FL without privacy above the separate Laplace + SDQ.
	for _, col := range []string{"Linear", "MLP"} {
		if fl, sep := acc("jopeq-accuracy", "FL", col), acc("jopeq-accuracy", "FL+Lap+SDQ", col); !(fl > sep) {
			t.Errorf("jopeq-accuracy %s: FL %v, FL+Lap+SDQ %v", col, fl, sep)
		}
	}
	// The same seed, the same accuracies.
	again := t.TempDir()
	if code, _, errOut := runCLI("reproduce", "--quick", "--quiet", "--data-dir", data, "--out", again, "ldpfl-mnist"); code != 0 {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	b1, _ := os.ReadFile(filepath.Join(dir, "ldpfl-mnist.md"))
	b2, _ := os.ReadFile(filepath.Join(again, "ldpfl-mnist.md"))
	table := func(b []byte) string { s := string(b); return s[strings.Index(s, "Final test accuracy"):] }
	if table(b1) != table(b2) {
		t.Errorf("ldpfl-mnist twice with seed 1:\n%s\n%s", table(b1), table(b2))
	}
}

// TestReproduceJoPEQDLG runs JoPEQ's privacy evaluation in quick mode (one
// target per mechanism, LeNet, iDLG): every claim quick mode tests holds
// (with the thresholds each check states), and the reconstruction grid is
// written beside the table.
func TestReproduceJoPEQDLG(t *testing.T) {
	dir := t.TempDir()
	code, out, errOut := runCLI("reproduce", "--quick", "--quiet", "--data-dir", sharedDatasets(t), "--out", dir, "jopeq-dlg")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	if strings.Contains(out, "DOES NOT HOLD") || !strings.Contains(out, "**holds**") {
		t.Errorf("a claim does not hold:\n%s", out)
	}
	if _, err := os.Stat(filepath.Join(dir, "jopeq-dlg.png")); err != nil {
		t.Error(err)
	}
}
