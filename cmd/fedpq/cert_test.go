package main

import (
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestCertTLS is the TLS setup of docs/deployment.md: fedpq cert makes
// the certificates for a Service name and the loopback address, a server
// process presents them, and two client processes that check them finish
// the run, one dialing 127.0.0.1, one checking the Service name; a client
// without --tls-ca stops at once with what to do. A second fedpq cert
// into the same directory overwrites nothing; the server's command given
// again once the run is over runs nothing, and says so.
func TestCertTLS(t *testing.T) {
	dir := t.TempDir()
	tlsDir := filepath.Join(dir, "tls")
	code, out, errOut := runCLI("cert", "--names", "fedpq-server,fedpq-server.fl.svc,127.0.0.1", "--out", tlsDir, "--days", "2")
	if code != 0 {
		t.Fatalf("fedpq cert: exit %d: %s", code, errOut)
	}
	if !strings.Contains(out, "server certificate for fedpq-server, fedpq-server.fl.svc, 127.0.0.1") {
		t.Errorf("fedpq cert printed:\n%s", out)
	}
	if st, err := os.Stat(filepath.Join(tlsDir, "server.key")); err != nil || st.Mode().Perm() != 0o600 {
		t.Errorf("server.key: %v, mode %v; want 0600", err, st.Mode())
	}
	before, _ := os.ReadFile(filepath.Join(tlsDir, "ca.pem"))
	if code, _, errOut := runCLI("cert", "--out", tlsDir); code != 1 || !strings.Contains(errOut, "never overwrites") {
		t.Errorf("a second fedpq cert into %s: exit %d: %s", tlsDir, code, errOut)
	}
	if after, _ := os.ReadFile(filepath.Join(tlsDir, "ca.pem")); string(after) != string(before) {
		t.Error("a second fedpq cert changed ca.pem")
	}
	if code, _, errOut := runCLI("cert", "--names", "host:7070", "--out", filepath.Join(dir, "bad")); code != 2 || !strings.Contains(errOut, "neither a host name nor an IP address") {
		t.Errorf("--names host:7070: exit %d: %s", code, errOut)
	}

	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := lis.Addr().String()
	lis.Close()
	server := start(t, "server", "server", "--dataset", "synthetic", "--clients", "2", "--rounds", "1", "--model", "linear",
		"--out", filepath.Join(dir, "run"), "--listen", addr, "--token", "t",
		"--tls-cert", filepath.Join(tlsDir, "server.pem"), "--tls-key", filepath.Join(tlsDir, "server.key"))
	server.await(t, "listening on", time.Minute)
	plain := start(t, "plain client", "client", "--server", addr, "--partition", "0/2", "--token", "t")
	if err := plain.wait(t, 30*time.Second); err == nil {
		t.Error("a client without --tls-ca took part")
	}
	plain.await(t, "speaks TLS, and this client does not: give it --tls-ca", time.Second)
	ca := filepath.Join(tlsDir, "ca.pem")
	a := start(t, "client 0", "client", "--server", addr, "--partition", "0/2", "--token", "t", "--tls-ca", ca)
	b := start(t, "client 1", "client", "--server", addr, "--partition", "1/2", "--token", "t", "--tls-ca", ca,
		"--tls-server-name", "fedpq-server.fl.svc")
	for _, p := range []*proc{server, a, b} {
		if err := p.wait(t, 2*time.Minute); err != nil {
			t.Errorf("%s: %v", p.name, err)
		}
	}
	server.await(t, "does not speak TLS", time.Second)

	// The same command again: the run is over, and is not run again.
	code, out, errOut = runCLI(server.cmd.Args[1:]...)
	if code != 0 || out != "" || !strings.Contains(errOut, "finished earlier, after 1 rounds (its summary: "+filepath.Join(dir, "run", "summary.json")) {
		t.Errorf("the server's command again: exit %d, stdout %q, stderr %s", code, out, errOut)
	}
}
