package transport

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"io"
	"net"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/credentials"
)

// testCerts makes a CA and a server certificate for names, and the
// server's TLS configuration and a pool that trusts the CA.
func testCerts(t *testing.T, names ...string) (*tls.Config, *x509.CertPool) {
	t.Helper()
	c, err := NewCertificates(names, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	pair, err := tls.X509KeyPair(c.Cert, c.Key)
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(c.CA) {
		t.Fatal("no CA certificate in ca.pem")
	}
	return &tls.Config{Certificates: []tls.Certificate{pair}, MinVersion: tls.VersionTLS13}, pool
}

// TestCertificates: the server certificate holds each IP address as an
// IP address and each name as a DNS name, so that it verifies, under its
// CA, for every one of them (Kubernetes Service names included), and for
// no other.
func TestCertificates(t *testing.T) {
	names := []string{"server.example.org", "fedpq-server", "fedpq-server.default.svc", "fedpq-server.default.svc.cluster.local", "127.0.0.1", "[::1]"}
	c, err := NewCertificates(names, 24*time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	block, _ := pem.Decode(c.Cert)
	leaf, err := x509.ParseCertificate(block.Bytes)
	if err != nil {
		t.Fatal(err)
	}
	if len(leaf.DNSNames) != 4 || len(leaf.IPAddresses) != 2 {
		t.Errorf("DNS names %v, IP addresses %v: want the 4 names and the 2 addresses", leaf.DNSNames, leaf.IPAddresses)
	}
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(c.CA)
	for _, n := range []string{"server.example.org", "fedpq-server", "fedpq-server.default.svc", "fedpq-server.default.svc.cluster.local", "127.0.0.1", "::1"} {
		if _, err := leaf.Verify(x509.VerifyOptions{DNSName: n, Roots: pool}); err != nil {
			t.Errorf("%s: %v", n, err)
		}
	}
	for _, n := range []string{"localhost", "10.0.0.1", "fedpq-server.other.svc"} {
		if _, err := leaf.Verify(x509.VerifyOptions{DNSName: n, Roots: pool}); err == nil {
			t.Errorf("%s: the certificate verifies for a name it was not made for", n)
		}
	}
	if _, err := leaf.Verify(x509.VerifyOptions{DNSName: "127.0.0.1", Roots: x509.NewCertPool()}); err == nil {
		t.Error("the certificate verifies without its CA")
	}
	if _, err := tls.X509KeyPair(c.Cert, c.Key); err != nil {
		t.Errorf("the certificate and its key: %v", err)
	}
	if d := time.Until(leaf.NotAfter); d < 23*time.Hour || d > 25*time.Hour {
		t.Errorf("valid for %v more, want 24h", d)
	}
	for _, bad := range [][]string{nil, {""}, {"a b"}, {"host:7070"}} {
		if _, err := NewCertificates(bad, time.Hour); err == nil {
			t.Errorf("names %q: no error", bad)
		}
	}
}

// TestTLS: clients that check the server's certificate take part, one
// dialing the address the certificate holds, one dialing it under a
// Service name given as the server name.
func TestTLS(t *testing.T) {
	cfg, pool := testCerts(t, "fedpq-server.default.svc", "127.0.0.1")
	c := runConfig(t, "ldpq", 2, 1)
	ts := serve(t, ServerConfig{Run: c, TLS: cfg}, "127.0.0.1:0")
	a := join(t, context.Background(), ClientConfig{Server: ts.addr, ID: 0, Clients: 2,
		Creds: credentials.NewTLS(&tls.Config{RootCAs: pool})})
	b := join(t, context.Background(), ClientConfig{Server: ts.addr, ID: 1, Clients: 2,
		Creds: credentials.NewTLS(&tls.Config{RootCAs: pool, ServerName: "fedpq-server.default.svc"})})
	ts.wait(t)
	a.wait(t)
	b.wait(t)
}

// TestTLSMismatch: a client that can never connect, because it and the
// server disagree on TLS or it refuses the server's certificate, stops at
// once with an error that says what to do, rather than retrying for
// RetryFor; and the server logs what it saw.
func TestTLSMismatch(t *testing.T) {
	cfg, pool := testCerts(t, "fedpq-server", "localhost")
	_, otherCA := testCerts(t, "127.0.0.1")
	for _, tc := range []struct {
		name      string
		serverTLS bool
		creds     credentials.TransportCredentials // nil: plain
		client    string                           // in the client's error
		server    string                           // in the server's log
	}{
		{"name mismatch", true, credentials.NewTLS(&tls.Config{RootCAs: pool}),
			`not valid for "127.0.0.1", the name this client checks: it holds fedpq-server, localhost. Dial one of those, give --tls-server-name`, "refused this server's certificate"},
		{"unknown authority", true, credentials.NewTLS(&tls.Config{RootCAs: otherCA, ServerName: "localhost"}),
			"which this client does not trust: give --tls-ca", "refused this server's certificate"},
		{"plain client, TLS server", true, nil,
			"speaks TLS, and this client does not: give it --tls-ca", "does not speak TLS (it sent plain text to this TLS server)"},
		{"TLS client, plain server", false, credentials.NewTLS(&tls.Config{RootCAs: pool, ServerName: "localhost"}),
			"does not speak TLS", "speaks TLS, and this server does not: start it with --tls-cert and --tls-key"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			sc := ServerConfig{Run: runConfig(t, "ldpq", 1, 1)}
			if tc.serverTLS {
				sc.TLS = cfg
			}
			ts := serve(t, sc, "127.0.0.1:0")
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			cl := join(t, ctx, ClientConfig{Server: ts.addr, ID: 0, Clients: 1, Creds: tc.creds, RetryFor: 5 * time.Minute})
			select {
			case <-cl.done:
			case <-time.After(20 * time.Second):
				cancel()
				t.Fatalf("the client still retries after 20 s:\n%s", cl.log)
			}
			if cl.err == nil || !strings.Contains(cl.err.Error(), tc.client) {
				t.Errorf("client error %v, want one saying %q", cl.err, tc.client)
			}
			deadline := time.Now().Add(5 * time.Second)
			for !strings.Contains(ts.log.String(), tc.server) && time.Now().Before(deadline) {
				time.Sleep(50 * time.Millisecond)
			}
			if !strings.Contains(ts.log.String(), tc.server) {
				t.Errorf("server log does not say %q:\n%s", tc.server, ts.log)
			}
		})
	}
}

// TestTLSMismatchBounded: a flood of plain-text connections to a TLS
// server is logged at most loggedJoinRefusals times a minute.
func TestTLSMismatchBounded(t *testing.T) {
	cfg, _ := testCerts(t, "127.0.0.1")
	ts := serve(t, ServerConfig{Run: runConfig(t, "ldpq", 1, 1), TLS: cfg}, "127.0.0.1:0")
	for range 3 * loggedJoinRefusals {
		conn, err := net.Dial("tcp", ts.addr)
		if err != nil {
			t.Fatal(err)
		}
		conn.Write([]byte("PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"))
		io.ReadAll(conn) // until the server closes it
		conn.Close()
	}
	// Each is logged after its connection is closed: wait for the ten.
	for deadline := time.Now().Add(10 * time.Second); strings.Count(ts.log.String(), "does not speak TLS") < loggedJoinRefusals && time.Now().Before(deadline); {
		time.Sleep(50 * time.Millisecond)
	}
	time.Sleep(200 * time.Millisecond)
	if n := strings.Count(ts.log.String(), "does not speak TLS"); n != loggedJoinRefusals {
		t.Errorf("%d connections in plain text logged %d times, want %d:\n%s", 3*loggedJoinRefusals, n, loggedJoinRefusals, ts.log)
	}
}
