package mvu

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"sync"
)

// formatVersion names the cache file layout and solver; bump it when either
// changes so that old files are re-solved rather than reused.
const formatVersion = 2

// FileName is the cache file of p under a cache directory.
func FileName(p Params) string {
	return fmt.Sprintf("mvu-v%d-in%d-b%d-eps%s.json", formatVersion, p.InputBits, p.BudgetBits,
		strconv.FormatFloat(p.Epsilon, 'g', -1, 64))
}

var (
	memoMu sync.Mutex
	memo   = map[string]*Matrix{}
)

// Load returns the verified design for p. It is looked up in memory, then in
// dir (if dir is not empty), and solved otherwise; a solved design is written
// to dir. A cache file that does not parse, belongs to other parameters or
// fails Verify is never trusted: the design is solved again and the file
// replaced. The returned Matrix is shared and must not be modified.
func Load(dir string, p Params) (*Matrix, error) {
	if err := p.Validate(); err != nil {
		return nil, err
	}
	key := dir + "\x00" + FileName(p)
	memoMu.Lock()
	defer memoMu.Unlock()
	if m, ok := memo[key]; ok {
		return m, nil
	}
	var path string
	if dir != "" {
		path = filepath.Join(dir, FileName(p))
		if m, err := readCache(path, p); err == nil {
			memo[key] = m
			return m, nil
		}
	}
	m, err := Solve(p)
	if err != nil {
		return nil, err
	}
	if path != "" {
		if err := writeCache(path, m); err != nil {
			return nil, err
		}
	}
	memo[key] = m
	return m, nil
}

func readCache(path string, p Params) (*Matrix, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	m := new(Matrix)
	if err := json.Unmarshal(b, m); err != nil {
		return nil, err
	}
	if m.Params != p {
		return nil, fmt.Errorf("mvu: %s holds %+v, want %+v", path, m.Params, p)
	}
	if _, err := Verify(m); err != nil {
		return nil, err
	}
	return m, nil
}

// writeCache writes atomically (temporary file, then rename), so a reader
// never sees half a file and concurrent writers of the same design agree.
func writeCache(path string, m *Matrix) error {
	b, err := json.Marshal(m)
	if err != nil {
		return err
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return fmt.Errorf("mvu: cache directory: %w", err)
	}
	f, err := os.CreateTemp(filepath.Dir(path), ".mvu-*.tmp")
	if err != nil {
		return fmt.Errorf("mvu: cache file: %w", err)
	}
	_, werr := f.Write(b)
	cerr := f.Close()
	if werr == nil && cerr == nil {
		werr = os.Rename(f.Name(), path)
	}
	if werr == nil {
		werr = cerr
	}
	if werr != nil {
		os.Remove(f.Name())
		return fmt.Errorf("mvu: writing cache: %w", werr)
	}
	return nil
}
