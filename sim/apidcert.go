package sim

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"net"
	"time"
)

// The ApidCertificate fault's values.
const (
	apidCertExpired = "expired"
	apidCertNoSAN   = "noSAN"
)

// apidTLS is the node's apid server TLS config: the normal one (pki.serverTLS), or, with the
// ApidCertificate fault, a certificate whose validity ended a day ago or that names only the
// hostname, not the node's address. Talos's apid certificate is issued for the node's addresses
// and hostnames (internal/app/machined/pkg/controllers/secrets/api.go, v1.13.9); a client that
// dials an address the certificate does not name, or after it expired, fails the TLS handshake
// (Go's crypto/x509: "certificate is valid for …, not …", "certificate has expired or is not yet
// valid").
//
// mode is the fault's value, read by the caller (serveFront holds n.mu).
func (n *node) apidTLS(mode string) (*tls.Config, error) {
	if mode == "" {
		return n.c.pki.serverTLS(n.info.Hostname, net.ParseIP(n.info.IP))
	}

	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, fmt.Errorf("generate key: %w", err)
	}

	t := n.c.now()
	tmpl := &x509.Certificate{
		SerialNumber: serial(),
		Subject:      pkix.Name{CommonName: n.info.Hostname},
		DNSNames:     []string{n.info.Hostname},
		IPAddresses:  []net.IP{net.ParseIP(n.info.IP)},
		NotBefore:    t.Add(-time.Hour),
		NotAfter:     t.Add(365 * 24 * time.Hour),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth},
	}

	switch mode {
	case apidCertExpired:
		tmpl.NotBefore, tmpl.NotAfter = t.Add(-366*24*time.Hour), t.Add(-24*time.Hour)
	case apidCertNoSAN:
		// Issued for another address (the one the node had before, say): clients see Go's
		// "certificate is valid for 192.0.2.1, not <address>".
		tmpl.IPAddresses = []net.IP{net.ParseIP("192.0.2.1")}
	}

	der, err := x509.CreateCertificate(rand.Reader, tmpl, n.c.pki.caCert, &key.PublicKey, n.c.pki.caKey)
	if err != nil {
		return nil, fmt.Errorf("sign apid certificate: %w", err)
	}

	keyDER, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		return nil, fmt.Errorf("marshal key: %w", err)
	}

	cert, err := tls.X509KeyPair(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}),
		pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: keyDER}))
	if err != nil {
		return nil, fmt.Errorf("load apid key pair: %w", err)
	}

	cfg, err := n.c.pki.serverTLS(n.info.Hostname, net.ParseIP(n.info.IP))
	if err != nil {
		return nil, err
	}

	cfg.Certificates = []tls.Certificate{cert}

	return cfg, nil
}
