package transport

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"math/big"
	"net"
	"strings"
	"sync"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/status"
)

// TLS as operators meet it: certificates that hold the names and
// addresses clients dial, and, when a client and the server disagree on
// TLS, an error that says so at once rather than a retry loop: the client
// stops with what to do, and the server logs what it saw.

// Certificates is a certificate authority and a server certificate it
// signed, as PEM. Clients check the server with CA (fedpq client
// --tls-ca); the server presents Cert with Key (--tls-cert, --tls-key).
// The CA's private key is not kept: no further certificate can be signed
// with it, and a server with other names needs a new CA, given anew to
// the clients.
type Certificates struct {
	CA, Cert, Key []byte
	Names         []string  // the names (DNS) and addresses (IP) the certificate holds
	NotAfter      time.Time // when both expire
}

// NewCertificates makes a CA and a server certificate for names: each IP
// address goes into the certificate's IP addresses and each other name
// into its DNS names, since a TLS client checks an address it dials only
// against the former (Kubernetes Service names such as fedpq-server,
// fedpq-server.NAMESPACE.svc and fedpq-server.NAMESPACE.svc.cluster.local
// are DNS names). Both are valid from an hour before now, for validFor.
func NewCertificates(names []string, validFor time.Duration) (*Certificates, error) {
	if len(names) == 0 {
		return nil, errors.New("a certificate needs at least one name or address")
	}
	if validFor <= 0 {
		return nil, fmt.Errorf("validity %v must be positive", validFor)
	}
	var dns []string
	var ips []net.IP
	for _, n := range names {
		n = strings.TrimSuffix(strings.TrimPrefix(strings.TrimSpace(n), "["), "]")
		switch {
		case n == "":
			return nil, errors.New("an empty name")
		case net.ParseIP(n) != nil:
			ips = append(ips, net.ParseIP(n))
		case strings.ContainsAny(n, " /:@,"):
			return nil, fmt.Errorf("%q is neither a host name nor an IP address", n)
		default:
			dns = append(dns, strings.ToLower(n))
		}
	}
	now := time.Now()
	notAfter := now.Add(validFor)
	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	ca := &x509.Certificate{
		SerialNumber: serial(), Subject: pkix.Name{CommonName: "fedpq CA " + now.UTC().Format("2006-01-02 15:04:05")},
		NotBefore: now.Add(-time.Hour), NotAfter: notAfter,
		IsCA: true, BasicConstraintsValid: true, MaxPathLenZero: true,
		KeyUsage: x509.KeyUsageCertSign | x509.KeyUsageCRLSign,
	}
	caDER, err := x509.CreateCertificate(rand.Reader, ca, ca, &caKey.PublicKey, caKey)
	if err != nil {
		return nil, err
	}
	if ca, err = x509.ParseCertificate(caDER); err != nil {
		return nil, err
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	leaf := &x509.Certificate{
		SerialNumber: serial(), Subject: pkix.Name{CommonName: strings.TrimSpace(names[0])},
		NotBefore: now.Add(-time.Hour), NotAfter: notAfter,
		DNSNames: dns, IPAddresses: ips,
		KeyUsage:    x509.KeyUsageDigitalSignature,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, leaf, ca, &key.PublicKey, caKey)
	if err != nil {
		return nil, err
	}
	pkcs8, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		return nil, err
	}
	held := append([]string{}, dns...)
	for _, ip := range ips {
		held = append(held, ip.String())
	}
	return &Certificates{
		CA:    pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: caDER}),
		Cert:  pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}),
		Key:   pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: pkcs8}),
		Names: held, NotAfter: notAfter,
	}, nil
}

// serial is a random 128-bit serial number, as RFC 5280 asks.
func serial() *big.Int {
	n, _ := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 127))
	return n.Add(n, big.NewInt(1))
}

// certNames lists the names and addresses a certificate holds.
func certNames(c *x509.Certificate) string {
	if c == nil {
		return "?"
	}
	names := append([]string{}, c.DNSNames...)
	for _, ip := range c.IPAddresses {
		names = append(names, ip.String())
	}
	if len(names) == 0 {
		return "no names (only the common name " + c.Subject.CommonName + ", which clients ignore)"
	}
	return strings.Join(names, ", ")
}

// tlsMismatch is an error that no reconnection cures: the client and the
// server disagree on TLS, or the client does not accept the server's
// certificate. It says what to change.
type tlsMismatch struct{ msg string }

func (e *tlsMismatch) Error() string { return e.msg }

// handshakes wraps a client's TLS credentials to keep why its last
// handshake failed: gRPC reports it as a string, and the client must tell
// a certificate it will never accept from a server that is down.
type handshakes struct {
	credentials.TransportCredentials
	last *lastError
}

type lastError struct {
	mu  sync.Mutex
	err error
}

func (h handshakes) ClientHandshake(ctx context.Context, authority string, conn net.Conn) (net.Conn, credentials.AuthInfo, error) {
	c, info, err := h.TransportCredentials.ClientHandshake(ctx, authority, conn)
	if err != nil {
		h.last.mu.Lock()
		h.last.err = err
		h.last.mu.Unlock()
	}
	return c, info, err
}

func (h handshakes) Clone() credentials.TransportCredentials {
	return handshakes{h.TransportCredentials.Clone(), h.last}
}

// take returns the last handshake error, and forgets it.
func (l *lastError) take() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	err := l.err
	l.err = nil
	return err
}

// diagnose turns the failure of a connection that never got the server's
// Hello into a *tlsMismatch where it is one: the server's certificate was
// refused (its names, its authority, its dates), or one side speaks TLS
// and the other does not (which it finds out by asking the server once
// more, as the other kind of client). Any other error it returns as it is:
// a server that is down or restarting, which the client waits for.
func (c *Client) diagnose(ctx context.Context, err error) error {
	if status.Code(err) != codes.Unavailable {
		return err // the server answered: it speaks what the client does
	}
	if c.handshake == nil { // a plain client
		if speaksTLS(ctx, c.cfg.Server) {
			return &tlsMismatch{fmt.Sprintf("the server at %s speaks TLS, and this client does not: give it --tls-ca CA.pem (the CA that signed the server's certificate: fedpq cert writes ca.pem) or --tls (the system's CAs) (%v)", c.cfg.Server, err)}
		}
		return err
	}
	if herr := c.handshake.take(); herr != nil {
		if m := certMismatch(c.cfg.Server, herr); m != nil {
			return m
		}
	}
	if speaksPlainGRPC(ctx, c.cfg.Server) {
		return &tlsMismatch{fmt.Sprintf("the server at %s does not speak TLS (it answers in plain HTTP/2), and this client does: drop --tls and --tls-ca, or start the server with --tls-cert and --tls-key (%v)", c.cfg.Server, err)}
	}
	return err
}

// certMismatch says why the client refused the server's certificate and
// what to do, or returns nil where err is not such a refusal.
func certMismatch(server string, err error) *tlsMismatch {
	var host x509.HostnameError
	var authority x509.UnknownAuthorityError
	var invalid x509.CertificateInvalidError
	var header tls.RecordHeaderError
	switch {
	case errors.As(err, &host):
		return &tlsMismatch{fmt.Sprintf("the server's certificate is not valid for %q, the name this client checks: it holds %s. Dial one of those, give --tls-server-name NAME (one of them), or make a certificate that holds %q (fedpq cert --names ...) (%v)",
			host.Host, certNames(host.Certificate), host.Host, err)}
	case errors.As(err, &authority):
		issuer := "?"
		if authority.Cert != nil {
			issuer = authority.Cert.Issuer.CommonName
		}
		return &tlsMismatch{fmt.Sprintf("the server's certificate was signed by %q, which this client does not trust: give --tls-ca with that CA's certificate (fedpq cert's ca.pem, made with the server's certificate) (%v)", issuer, err)}
	case errors.As(err, &invalid):
		return &tlsMismatch{fmt.Sprintf("the server's certificate is not valid (%v): make a new one (fedpq cert) or check this machine's clock", err)}
	case errors.As(err, &header):
		return &tlsMismatch{fmt.Sprintf("the server at %s does not speak TLS, and this client does: drop --tls and --tls-ca, or start the server with --tls-cert and --tls-key (%v)", server, err)}
	}
	return nil
}

// probeTimeout bounds each probe of diagnose.
const probeTimeout = 2 * time.Second

// speaksTLS reports whether a TLS handshake with addr succeeds, whatever
// its certificate.
func speaksTLS(ctx context.Context, addr string) bool {
	d := tls.Dialer{Config: &tls.Config{InsecureSkipVerify: true, NextProtos: []string{"h2"}}} // a probe: nothing is sent
	ctx, cancel := context.WithTimeout(ctx, probeTimeout)
	defer cancel()
	conn, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return false
	}
	conn.Close()
	return true
}

// speaksPlainGRPC reports whether addr opens a connection the way a plain
// HTTP/2 server does: with a SETTINGS frame, before the client sends
// anything (a TLS server waits for the client's hello).
func speaksPlainGRPC(ctx context.Context, addr string) bool {
	ctx, cancel := context.WithTimeout(ctx, probeTimeout)
	defer cancel()
	conn, err := new(net.Dialer).DialContext(ctx, "tcp", addr)
	if err != nil {
		return false
	}
	defer conn.Close()
	conn.SetReadDeadline(time.Now().Add(probeTimeout))
	head := make([]byte, 9) // an HTTP/2 frame header: length (3), type (1), flags, stream
	if _, err := io.ReadFull(conn, head); err != nil {
		return false
	}
	return head[3] == 0x4 && head[5]|head[6]|head[7]|head[8] == 0 // SETTINGS, on stream 0
}

// serverHandshakes wraps the server's TLS credentials to log the
// handshakes that fail for a reason an operator can fix: a client that
// sent plain text, or one that refused the certificate. Others (a peer
// that closed at once, a port scan, a TCP probe) are not logged.
type serverHandshakes struct {
	credentials.TransportCredentials
	s     *Server
	names string // what the certificate holds
}

func (h serverHandshakes) ServerHandshake(conn net.Conn) (net.Conn, credentials.AuthInfo, error) {
	c, info, err := h.TransportCredentials.ServerHandshake(conn)
	if err != nil {
		var header tls.RecordHeaderError
		var remote *net.OpError
		switch {
		case errors.As(err, &header):
			h.s.tlsRefused("a client at %s does not speak TLS (it sent plain text to this TLS server): give it --tls-ca with the CA of this server's certificate, or --tls", conn.RemoteAddr())
		case errors.As(err, &remote) && remote.Op == "remote error":
			h.s.tlsRefused("a client at %s refused this server's certificate (%v), which holds %s: the client's --tls-ca must hold the CA that signed it, and it must dial one of those names or give --tls-server-name", conn.RemoteAddr(), remote.Err, h.names)
		}
	}
	return c, info, err
}

func (h serverHandshakes) Clone() credentials.TransportCredentials {
	return serverHandshakes{h.TransportCredentials.Clone(), h.s, h.names}
}

// plainListener is a plain server's listener: it logs the connections
// that open with a TLS handshake record, clients that expect TLS.
type plainListener struct {
	net.Listener
	s *Server
}

func (l plainListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return c, err
	}
	return &sniffedConn{Conn: c, s: l.s}, nil
}

// sniffedConn looks at the first byte a peer sends.
type sniffedConn struct {
	net.Conn
	s    *Server
	once sync.Once
}

func (c *sniffedConn) Read(b []byte) (int, error) {
	n, err := c.Conn.Read(b)
	if n > 0 {
		c.once.Do(func() {
			if b[0] == 0x16 { // a TLS handshake record; HTTP/2 opens with "PRI "
				c.s.tlsRefused("a client at %s speaks TLS, and this server does not: start it with --tls-cert and --tls-key, or drop --tls and --tls-ca on the client", c.RemoteAddr())
			}
		})
	}
	return n, err
}

// tlsRefused logs a TLS mismatch, at a bounded rate.
func (s *Server) tlsRefused(format string, args ...any) {
	s.logBounded(&s.tlsLog, "TLS mismatches", format, args...)
}

// withTLS makes the server's gRPC options and listener log TLS
// mismatches: with cfg.TLS, its credentials; without, the connections of
// clients that expect TLS.
func (s *Server) withTLS(lis net.Listener, opts []grpc.ServerOption) (net.Listener, []grpc.ServerOption) {
	if s.cfg.TLS == nil {
		return plainListener{lis, s}, opts
	}
	names := "?"
	if c := s.cfg.TLS.Certificates; len(c) > 0 {
		leaf := c[0].Leaf
		if leaf == nil && len(c[0].Certificate) > 0 {
			leaf, _ = x509.ParseCertificate(c[0].Certificate[0])
		}
		names = certNames(leaf)
	}
	return lis, append(opts, grpc.Creds(serverHandshakes{credentials.NewTLS(s.cfg.TLS), s, names}))
}
