package data

import (
	"crypto/md5"
	"encoding/hex"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestDownload: a file is saved only when its MD5 is right; a wrong MD5 or
// an HTTP error leaves nothing behind, not even a temporary file; the next
// mirror is tried when one fails.
func TestDownload(t *testing.T) {
	body := []byte("the dataset")
	sum := md5.Sum(body)
	good := hex.EncodeToString(sum[:])
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if strings.HasPrefix(r.URL.Path, "/ok/") {
			w.Write(body)
			return
		}
		http.NotFound(w, r)
	}))
	defer srv.Close()
	dir := t.TempDir()
	if err := download(srv.URL+"/ok/f", filepath.Join(dir, "f"), strings.Repeat("0", 32)); err == nil || !strings.Contains(err.Error(), "md5") {
		t.Errorf("wrong md5: %v", err)
	}
	if err := download(srv.URL+"/missing/f", filepath.Join(dir, "f"), good); err == nil || !strings.Contains(err.Error(), "404") {
		t.Errorf("404: %v", err)
	}
	if entries, _ := os.ReadDir(dir); len(entries) != 0 {
		t.Errorf("failed downloads left %v", entries)
	}
	if err := fetchMirrors([]string{srv.URL + "/missing/", srv.URL + "/ok/"}, remoteFile{"f", good}, dir); err != nil {
		t.Fatal(err)
	}
	if b, _ := os.ReadFile(filepath.Join(dir, "f")); string(b) != string(body) {
		t.Errorf("downloaded %q", b)
	}
}

// TestLocate: files are found in the first directory that has them, an
// alternative name (the uncompressed copy) counts, and when downloads are on,
// fetch is asked for exactly the missing files, in the first directory.
func TestLocate(t *testing.T) {
	root := t.TempDir()
	os.MkdirAll(filepath.Join(root, "sub"), 0o755)
	os.WriteFile(filepath.Join(root, "a"), nil, 0o644)
	os.WriteFile(filepath.Join(root, "sub", "b"), nil, 0o644)
	want := [][]string{{"a.gz", "a"}, {"b"}, {"c"}}
	var asked []int
	var askedDir string
	paths, err := locate("set", Options{Dir: root}, []string{"sub", ""}, want, func(dir string, missing []int) error {
		askedDir, asked = dir, missing
		return os.WriteFile(filepath.Join(dir, "c"), nil, 0o644)
	})
	if err != nil {
		t.Fatal(err)
	}
	if askedDir != filepath.Join(root, "sub") || len(asked) != 1 || asked[0] != 2 {
		t.Errorf("fetch asked for %v in %s", asked, askedDir)
	}
	wantPaths := []string{filepath.Join(root, "a"), filepath.Join(root, "sub", "b"), filepath.Join(root, "sub", "c")}
	if strings.Join(paths, " ") != strings.Join(wantPaths, " ") {
		t.Errorf("paths %v, want %v", paths, wantPaths)
	}
}

// TestDir: the flag wins over $FEDPQ_DATA, which wins over ./data.
func TestDir(t *testing.T) {
	t.Setenv(EnvDir, "")
	if d := Dir(""); d != "data" {
		t.Errorf("default %q", d)
	}
	t.Setenv(EnvDir, "/env")
	if d := Dir(""); d != "/env" {
		t.Errorf("env %q", d)
	}
	if d := Dir("/flag"); d != "/flag" {
		t.Errorf("flag %q", d)
	}
}

// TestMissingUnreachable: with no files and no mirror reachable (a closed
// local server stands for a machine without network), the error leads with
// what to do (which files, where, or --data-dir) and gives the network's
// part once, short: it listed every mirror's error first before.
func TestMissingUnreachable(t *testing.T) {
	srv := httptest.NewServer(http.NotFoundHandler())
	srv.Close()
	set := *mnist
	set.mirrors = []string{srv.URL + "/a/", srv.URL + "/b/", srv.URL + "/c/"}
	dir := t.TempDir()
	_, err := loadIDX(&set, Options{Dir: dir})
	if err == nil {
		t.Fatal("loaded from an empty directory without a mirror")
	}
	msg := err.Error()
	todo := "Put the files (train-images-idx3-ubyte.gz, train-labels-idx1-ubyte.gz, t10k-images-idx3-ubyte.gz, t10k-labels-idx1-ubyte.gz) in " +
		filepath.Join(dir, "mnist") + ", or point --data-dir or $FEDPQ_DATA at a directory that holds them"
	if !strings.HasPrefix(msg, "data: mnist: missing train-images-idx3-ubyte.gz") || !strings.Contains(msg, todo) {
		t.Errorf("the error does not lead with what to do:\n%s", msg)
	}
	if i, j := strings.Index(msg, todo), strings.Index(msg, "download"); i < 0 || j < i {
		t.Errorf("the network's part comes before what to do:\n%s", msg)
	}
	if n := strings.Count(msg, "refused"); n != 1 || strings.Contains(msg, srv.URL) {
		t.Errorf("the network's part is not short (%d errors, or the URLs):\n%s", n, msg)
	}
	if _, err := os.Stat(filepath.Join(dir, "mnist")); !os.IsNotExist(err) {
		t.Errorf("the failed download left its directory behind (%v)", err)
	}
}
