package transport

import (
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"sync"
)

// clientState is what a client remembers of the runs it took part in,
// across its own restarts: each run's beacon commitment (a server that
// restarts a run with another is refused), and the rounds it answered (a
// server that asks for one again is refused: two sums over client sets
// that differ by one client would give that client's message). The record
// is per run id; a round asked for again under another id is answered
// with randomness bound to that id (runSecret), so never with the same
// message.
type clientState struct {
	path string // "" keeps it in memory only
	// disk, if not nil, is shared by a fleet's clients: a token is held
	// while the file is written and synced, so that a thousand clients
	// answering at once do not block a thousand threads in fsync.
	disk chan struct{}
	mu   sync.Mutex
	Runs map[string]*runRecord `json:"runs"`
}

type runRecord struct {
	Beacon   string   `json:"beacon,omitempty"`
	Answered []uint32 `json:"answered"`
}

// loadClientState reads the state at path, or starts an empty one.
func loadClientState(path string) (*clientState, error) {
	s := &clientState{path: path, Runs: map[string]*runRecord{}}
	if path == "" {
		return s, nil
	}
	b, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return s, nil
	}
	if err != nil {
		return nil, err
	}
	if err := json.Unmarshal(b, s); err != nil {
		return nil, fmt.Errorf("%s: %w (remove it only if this client never took part in a run)", path, err)
	}
	if s.Runs == nil {
		s.Runs = map[string]*runRecord{}
	}
	return s, nil
}

func (s *clientState) run(runID []byte) *runRecord {
	k := hex.EncodeToString(runID)
	if s.Runs[k] == nil {
		s.Runs[k] = &runRecord{}
	}
	return s.Runs[k]
}

// pin records the beacon commitment of a run the first time it is seen,
// and refuses another later.
func (s *clientState) pin(runID, beacon []byte) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	r, b := s.run(runID), hex.EncodeToString(beacon)
	switch {
	case r.Beacon == b:
		return nil
	case r.Beacon != "":
		return fmt.Errorf("the server's beacon for run %x changed (%s, was %s): it started the run again, and its rounds' graphs are no longer the ones it committed to", runID, b, r.Beacon)
	}
	r.Beacon = b
	return s.save()
}

// answered reports whether the client answered round t of the run.
func (s *clientState) answered(runID []byte, t uint32) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	_, found := slices.BinarySearch(s.run(runID).Answered, t)
	return found
}

// answer records round t of the run as answered, durably, before the
// answer leaves.
func (s *clientState) answer(runID []byte, t uint32) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	r := s.run(runID)
	i, found := slices.BinarySearch(r.Answered, t)
	if found {
		return fmt.Errorf("round %d of run %x was answered before", t, runID)
	}
	r.Answered = slices.Insert(r.Answered, i, t)
	return s.save()
}

// save writes the state to a new file and renames it over the old, so a
// crash leaves one or the other whole.
func (s *clientState) save() error {
	if s.path == "" {
		return nil
	}
	if s.disk != nil {
		s.disk <- struct{}{}
		defer func() { <-s.disk }()
	}
	b, err := json.MarshalIndent(s, "", "  ")
	if err != nil {
		return err
	}
	if err := os.MkdirAll(filepath.Dir(s.path), 0o700); err != nil {
		return err
	}
	tmp := s.path + ".tmp"
	f, err := os.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o600)
	if err != nil {
		return err
	}
	if _, err := f.Write(b); err != nil {
		f.Close()
		return err
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return err
	}
	if err := f.Close(); err != nil {
		return err
	}
	return os.Rename(tmp, s.path)
}
