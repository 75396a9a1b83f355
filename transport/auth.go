package transport

import (
	"bufio"
	"crypto/ed25519"
	"crypto/rand"
	"crypto/x509"
	"encoding/base64"
	"encoding/binary"
	"encoding/pem"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
)

// A client proves who it is with an Ed25519 identity key: it signs the
// server's fresh challenge to join, and signs every X25519 key share, so
// that its partner can check the share against the identity it knows from
// the roster, not against what the relaying server says.

// NewKey returns a fresh identity key.
func NewKey() ed25519.PrivateKey {
	_, k, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		panic(err) // unreachable: crypto/rand does not fail
	}
	return k
}

// SaveKey writes k to path as a PKCS #8 PEM file readable by its owner only.
func SaveKey(path string, k ed25519.PrivateKey) error {
	der, err := x509.MarshalPKCS8PrivateKey(k)
	if err != nil {
		return err
	}
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return err
	}
	if err := pem.Encode(f, &pem.Block{Type: "PRIVATE KEY", Bytes: der}); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

// LoadKey reads an identity key written by SaveKey.
func LoadKey(path string) (ed25519.PrivateKey, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	blk, _ := pem.Decode(b)
	if blk == nil || blk.Type != "PRIVATE KEY" {
		return nil, fmt.Errorf("%s: not a PEM private key", path)
	}
	k, err := x509.ParsePKCS8PrivateKey(blk.Bytes)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	ek, ok := k.(ed25519.PrivateKey)
	if !ok {
		return nil, fmt.Errorf("%s: a %T, not an Ed25519 key", path, k)
	}
	return ek, nil
}

// PublicString is an identity's public key as the roster writes it.
func PublicString(k ed25519.PrivateKey) string {
	return publicString(k.Public().(ed25519.PublicKey))
}

func publicString(pub ed25519.PublicKey) string {
	return base64.StdEncoding.EncodeToString(pub)
}

// Roster is the enrolled clients: client id to identity public key. Only
// they may join a server that has one; a client that has one checks its
// partners' key shares against it.
type Roster map[uint32]ed25519.PublicKey

// LoadRoster reads a roster file: a line "ID PUBLIC-KEY" per client (the
// line fedpq keygen prints), blank lines and #-comments ignored.
func LoadRoster(path string) (Roster, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	r := Roster{}
	sc := bufio.NewScanner(f)
	for n := 1; sc.Scan(); n++ {
		line, _, _ := strings.Cut(sc.Text(), "#")
		fields := strings.Fields(line)
		if len(fields) == 0 {
			continue
		}
		if len(fields) != 2 {
			return nil, fmt.Errorf("%s:%d: want \"ID PUBLIC-KEY\"", path, n)
		}
		id, err := strconv.ParseUint(fields[0], 10, 32)
		if err != nil {
			return nil, fmt.Errorf("%s:%d: client id %q: %w", path, n, fields[0], err)
		}
		pub, err := base64.StdEncoding.DecodeString(fields[1])
		if err != nil || len(pub) != ed25519.PublicKeySize {
			return nil, fmt.Errorf("%s:%d: not a base64 Ed25519 public key", path, n)
		}
		if _, dup := r[uint32(id)]; dup {
			return nil, fmt.Errorf("%s:%d: client %d listed twice", path, n, id)
		}
		r[uint32(id)] = pub
	}
	if err := sc.Err(); err != nil {
		return nil, err
	}
	if len(r) == 0 {
		return nil, fmt.Errorf("%s: no clients", path)
	}
	return r, nil
}

// signed builds the bytes a signature covers: a context naming what is
// signed, then the fields, each length-prefixed so no two messages collide.
func signed(context string, fields ...[]byte) []byte {
	b := []byte("fedpq/v1 " + context)
	for _, f := range fields {
		b = binary.BigEndian.AppendUint32(b, uint32(len(f)))
		b = append(b, f...)
	}
	return b
}

func u32(v uint32) []byte { return binary.BigEndian.AppendUint32(nil, v) }

func joinSigned(runID, challenge []byte, client uint32) []byte {
	return signed("join", runID, challenge, u32(client))
}

func keyShareSigned(runID []byte, round, client, partner uint32, public []byte) []byte {
	return signed("key-share", runID, u32(round), u32(client), u32(partner), public)
}

// verify checks an Ed25519 signature made by pub.
func verify(pub, msg, sig []byte) error {
	if len(pub) != ed25519.PublicKeySize {
		return fmt.Errorf("identity key of %d bytes, want %d", len(pub), ed25519.PublicKeySize)
	}
	if !ed25519.Verify(pub, msg, sig) {
		return errors.New("bad signature")
	}
	return nil
}
