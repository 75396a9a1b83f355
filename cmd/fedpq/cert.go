package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/fedpq/fedpq/transport"
)

func init() {
	commands["cert"] = command{
		summary: "make a CA and a TLS certificate for a server's names and addresses",
		run:     runCert,
	}
}

const certDescription = `Makes what a fedpq server needs for TLS: a certificate authority (ca.pem)
and a server certificate it signed (server.pem, with its key server.key),
for every name and address in --names. A client checks the server with the
CA (fedpq client --tls-ca ca.pem) against the host it dials (--server), or
against --tls-server-name: give every name and address clients will dial.
Addresses (127.0.0.1, ::1, 10.0.0.5) go into the certificate's IP
addresses, other names into its DNS names. On Kubernetes, clients dial the
server's Service: give its names, e.g. for a Service fedpq-server in the
namespace fl, fedpq-server,fedpq-server.fl.svc,fedpq-server.fl.svc.cluster.local.

The CA's key is not kept: a server with other names needs a new run of
fedpq cert, and its clients the new ca.pem. Existing files are never
overwritten. server.key is readable by its owner only.
`

func runCert(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlags("cert", "[--names NAME,ADDR,...] [--out DIR] [--days N]", certDescription, stderr)
	names := fs.String("names", "", "comma-separated host names and IP addresses the server is dialed by (default: localhost,127.0.0.1,::1 and this machine's host name)")
	out := fs.String("out", "fedpq-tls", "directory to write ca.pem, server.pem and server.key to")
	days := fs.Int("days", 365, "days the certificates are valid")
	if err := parse(fs, args); err != nil {
		return err
	}
	if *days < 1 {
		return badValue{fmt.Errorf("--days %d: want at least 1", *days)}
	}
	list := defaultCertNames()
	if *names != "" {
		list = strings.Split(*names, ",")
	}
	c, err := transport.NewCertificates(list, time.Duration(*days)*24*time.Hour)
	if err != nil {
		return badValue{fmt.Errorf("--names: %w", err)}
	}
	if err := os.MkdirAll(*out, 0o755); err != nil {
		return err
	}
	files := []struct {
		name string
		data []byte
		mode os.FileMode
	}{{"ca.pem", c.CA, 0o644}, {"server.pem", c.Cert, 0o644}, {"server.key", c.Key, 0o600}}
	for _, f := range files {
		if _, err := os.Stat(filepath.Join(*out, f.name)); err == nil {
			return fmt.Errorf("%s already exists: fedpq cert never overwrites a certificate or key (clients may trust it); give another --out, or remove the files of %s to replace them", filepath.Join(*out, f.name), *out)
		}
	}
	for _, f := range files {
		if err := writeNew(filepath.Join(*out, f.name), f.data, f.mode); err != nil {
			return err
		}
	}
	fmt.Fprintf(stdout, "server certificate for %s, valid until %s\n", strings.Join(c.Names, ", "), c.NotAfter.UTC().Format("2006-01-02"))
	fmt.Fprintf(stdout, "  server:  --tls-cert %s --tls-key %s\n", filepath.Join(*out, "server.pem"), filepath.Join(*out, "server.key"))
	fmt.Fprintf(stdout, "  clients: --tls-ca %s (dialing one of those names, or with --tls-server-name NAME)\n", filepath.Join(*out, "ca.pem"))
	return nil
}

// defaultCertNames is what a server on this machine is dialed by: the
// loopback names and addresses and the machine's host name.
func defaultCertNames() []string {
	names := []string{"localhost", "127.0.0.1", "::1"}
	if h, err := os.Hostname(); err == nil && h != "" && h != "localhost" {
		names = append(names, h)
	}
	return names
}

// writeNew writes a file that must not exist yet.
func writeNew(path string, data []byte, mode os.FileMode) error {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, mode)
	if err != nil {
		return err
	}
	if _, err := f.Write(data); err != nil {
		f.Close()
		return err
	}
	if err := f.Close(); err != nil {
		return errors.Join(err, os.Remove(path))
	}
	return nil
}
