package transport

import (
	"crypto/ed25519"
	"crypto/rand"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
)

// What a server keeps in its run directory beside the checkpoint, so that
// a restart changes neither its secret nor who may join as whom.
const (
	// SecretFile holds the server's 32-byte secret, from which every
	// round's sampling, pairing and shared keys derive. It is not in the
	// configuration, which every client (and, before it joins, any peer)
	// is sent.
	SecretFile = "server.secret"
	// PinsFile binds each client id to the identity key that first joined
	// as it, in the roster's format; a token-mode server refuses that id
	// with any other key. Delete a line to let a client re-enrol with a new
	// key.
	PinsFile = "identities.txt"
)

// loadSecret reads the server secret of dir, or makes one, readable by its
// owner only.
func loadSecret(dir string) ([]byte, error) {
	path := filepath.Join(dir, SecretFile)
	b, err := os.ReadFile(path)
	switch {
	case err == nil && len(b) == 32:
		return b, nil
	case err == nil:
		return nil, fmt.Errorf("%s: %d bytes, want 32: remove it to start a new run", path, len(b))
	case !errors.Is(err, fs.ErrNotExist):
		return nil, err
	}
	b = make([]byte, 32)
	rand.Read(b)
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, b, 0o600); err != nil {
		return nil, err
	}
	return b, os.Rename(tmp, path)
}

// pins is a token-mode server's record of which key joined as which id.
type pins struct {
	path string
	keys Roster
}

func loadPins(dir string) (*pins, error) {
	p := &pins{path: filepath.Join(dir, PinsFile), keys: Roster{}}
	info, err := os.Stat(p.path)
	if errors.Is(err, fs.ErrNotExist) || err == nil && info.Size() == 0 {
		return p, nil
	}
	if err != nil {
		return nil, err
	}
	if p.keys, err = LoadRoster(p.path); err != nil {
		return nil, err
	}
	return p, nil
}

// check admits key as client id: the key pinned to id, or, for an id not
// yet pinned, any key, which is then pinned (on disk before it is used).
func (p *pins) check(id uint32, key ed25519.PublicKey) error {
	if want, ok := p.keys[id]; ok {
		if !want.Equal(key) {
			return fmt.Errorf("client %d joined this run before with another identity key; join with that key (fedpq client --key), or have the operator remove its line from %s", id, p.path)
		}
		return nil
	}
	f, err := os.OpenFile(p.path, os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o600)
	if err != nil {
		return err
	}
	_, err = fmt.Fprintf(f, "%d %s\n", id, publicString(key))
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("pinning client %d's key: %w", id, err)
	}
	p.keys[id] = key
	return nil
}
