// Package datatest finds the real data sets that tests read where the
// machine has them: scikit-learn's bundled sets (Debian's python3-sklearn).
// A test without them skips with a message naming the package, except in
// CI (the CI variable set), which installs them: there it fails.
package datatest

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// Sklearn is the directory of scikit-learn's bundled data sets
// (breast_cancer.csv, wine_data.csv, iris.csv, digits.csv.gz, ...): Debian's,
// else wherever the system's Python finds scikit-learn.
func Sklearn(t testing.TB) string {
	t.Helper()
	dir := "/usr/lib/python3/dist-packages/sklearn/datasets/data" // Debian's
	if _, err := os.Stat(dir); err != nil {
		// Elsewhere, where Python finds scikit-learn (a second to ask).
		if out, err := exec.Command("python3", "-c", "import sklearn.datasets as d; print(d.__path__[0])").Output(); err == nil {
			dir = filepath.Join(strings.TrimSpace(string(out)), "data")
		}
	}
	if _, err := os.Stat(filepath.Join(dir, "breast_cancer.csv")); err != nil {
		if os.Getenv("CI") != "" {
			t.Fatalf("CI without scikit-learn's data sets (Debian package python3-sklearn): %v", err)
		}
		t.Skipf("scikit-learn's bundled data sets are not installed (Debian package python3-sklearn): %v", err)
	}
	return dir
}
