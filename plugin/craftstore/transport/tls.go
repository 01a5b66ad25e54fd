package transport

import (
	"bytes"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"os"
)

// TLS is mutual TLS between the members of a group: each member holds a
// certificate signed by the group's CA and accepts, in both directions, only
// peers whose certificate that CA signed. The members are reached by
// address, and the CA is the group's own, so the chain is what is verified,
// not a host name; use a CA that signs the group's members only (a
// certificate from it admits its holder to the group). Connections use TLS
// 1.3.
type TLS struct {
	cert tls.Certificate
	cas  *x509.CertPool
	// server and client are the configurations of the two ends of a
	// connection, made once by LoadTLS.
	server, client *tls.Config
	// sum identifies the files' contents: a reload that reads the same
	// ones changes nothing.
	sum [sha256.Size]byte
}

// LoadTLS reads the member's certificate (PEM, the leaf first, then any
// intermediates), its private key and the CA certificates (PEM). It
// refuses files that are missing, unreadable or do not match: a key that is
// not the certificate's, a CA file without a certificate, a certificate the
// CA did not sign or that is not valid now.
func LoadTLS(certFile, keyFile, caFile string) (*TLS, error) {
	certPEM, err := os.ReadFile(certFile)
	if err != nil {
		return nil, fmt.Errorf("certificate: %w", err)
	}
	keyPEM, err := os.ReadFile(keyFile)
	if err != nil {
		return nil, fmt.Errorf("key: %w", err)
	}
	caPEM, err := os.ReadFile(caFile)
	if err != nil {
		return nil, fmt.Errorf("CA: %w", err)
	}
	cert, err := tls.X509KeyPair(certPEM, keyPEM)
	if err != nil {
		return nil, fmt.Errorf("certificate %s with key %s: %w", certFile, keyFile, err)
	}
	cas := x509.NewCertPool()
	if !cas.AppendCertsFromPEM(caPEM) {
		return nil, fmt.Errorf("CA file %s holds no PEM certificate", caFile)
	}
	t := &TLS{cert: cert, cas: cas,
		sum: sha256.Sum256(bytes.Join([][]byte{certPEM, keyPEM, caPEM}, []byte{0}))}
	if err := t.verify(cert.Certificate, nil); err != nil {
		return nil, fmt.Errorf("certificate %s under CA %s: %w", certFile, caFile, err)
	}
	t.server = &tls.Config{
		MinVersion:            tls.VersionTLS13,
		Certificates:          []tls.Certificate{cert},
		ClientAuth:            tls.RequireAnyClientCert, // verified by verify
		VerifyPeerCertificate: t.verify,
	}
	t.client = &tls.Config{
		MinVersion:   tls.VersionTLS13,
		Certificates: []tls.Certificate{cert},
		// Peers are reached by address and share the group's CA: verify
		// checks the chain instead of a host name.
		InsecureSkipVerify:    true,
		VerifyPeerCertificate: t.verify,
	}
	return t, nil
}

// Equal reports whether t and o were read from the same contents.
func (t *TLS) Equal(o *TLS) bool {
	if t == nil || o == nil {
		return t == o
	}
	return t.sum == o.sum
}

// verify checks a peer's certificate chain (leaf first) against the CA.
func (t *TLS) verify(chain [][]byte, _ [][]*x509.Certificate) error {
	if len(chain) == 0 {
		return errors.New("peer sent no certificate")
	}
	certs := make([]*x509.Certificate, len(chain))
	for i, der := range chain {
		c, err := x509.ParseCertificate(der)
		if err != nil {
			return fmt.Errorf("peer certificate: %w", err)
		}
		certs[i] = c
	}
	inter := x509.NewCertPool()
	for _, c := range certs[1:] {
		inter.AddCert(c)
	}
	_, err := certs[0].Verify(x509.VerifyOptions{Roots: t.cas, Intermediates: inter,
		// Member certificates are used for both ends of a connection.
		KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageAny}})
	if err != nil {
		return fmt.Errorf("certificate of %q: %w", certs[0].Subject.String(), err)
	}
	return nil
}

// tlsConn is a TLS connection whose Close closes the TCP connection at
// once. tls.Conn's Close first writes a close_notify alert, which blocks
// for up to 5s on a peer that stopped reading; every exchange on these
// connections has its own end, so nothing needs the alert.
type tlsConn struct {
	*tls.Conn
	raw net.Conn
}

func (c *tlsConn) Close() error { return c.raw.Close() }
