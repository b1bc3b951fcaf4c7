package sim

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"time"
)

// adminRole is the certificate organisation Talos maps to the os:admin role.
const adminRole = "os:admin"

// impersonatorRole is the organisation of the certificate apid forwards with.
const impersonatorRole = "os:impersonator"

// pki is the cluster's Talos API PKI: one CA, one server certificate per node
// (generated on demand) and one os:admin client certificate.
type pki struct {
	caCert *x509.Certificate
	caKey  crypto.Signer
	caPEM  []byte

	clientCrtPEM []byte
	clientKeyPEM []byte
	clientCert   tls.Certificate

	// apidCert is what one node's apid presents to another's: os:impersonator, so the
	// receiving apid trusts the roles it forwards (as Talos's apid peer certificate does).
	apidCert tls.Certificate

	now func() time.Time
}

func newPKI(clusterName string, now func() time.Time) (*pki, error) {
	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, fmt.Errorf("generate CA key: %w", err)
	}

	t := now()
	tmpl := &x509.Certificate{
		SerialNumber:          serial(),
		Subject:               pkix.Name{Organization: []string{"talos"}, CommonName: clusterName + " sim CA"},
		NotBefore:             t.Add(-time.Hour),
		NotAfter:              t.Add(10 * 365 * 24 * time.Hour),
		IsCA:                  true,
		BasicConstraintsValid: true,
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature,
	}

	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &caKey.PublicKey, caKey)
	if err != nil {
		return nil, fmt.Errorf("create CA certificate: %w", err)
	}

	caCert, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, fmt.Errorf("parse CA certificate: %w", err)
	}

	p := &pki{
		caCert: caCert,
		caKey:  caKey,
		caPEM:  pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}),
		now:    now,
	}

	p.clientCrtPEM, p.clientKeyPEM, err = p.issue(&x509.Certificate{
		Subject:     pkix.Name{Organization: []string{adminRole}, CommonName: "admin"},
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
	})
	if err != nil {
		return nil, err
	}

	p.clientCert, err = tls.X509KeyPair(p.clientCrtPEM, p.clientKeyPEM)
	if err != nil {
		return nil, fmt.Errorf("load client key pair: %w", err)
	}

	apidCrt, apidKey, err := p.issue(&x509.Certificate{
		Subject:     pkix.Name{Organization: []string{impersonatorRole}, CommonName: "apid"},
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
	})
	if err != nil {
		return nil, err
	}

	if p.apidCert, err = tls.X509KeyPair(apidCrt, apidKey); err != nil {
		return nil, fmt.Errorf("load apid key pair: %w", err)
	}

	return p, nil
}

func serial() *big.Int {
	n, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 120))
	if err != nil {
		// crypto/rand never fails on Linux; a constant serial is still a valid certificate.
		return big.NewInt(1)
	}

	return n
}

// issue signs a leaf certificate described by tmpl with the CA and returns PEM cert and key.
func (p *pki) issue(tmpl *x509.Certificate) (crtPEM, keyPEM []byte, err error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, nil, fmt.Errorf("generate key: %w", err)
	}

	t := p.now()
	tmpl.SerialNumber = serial()
	tmpl.NotBefore = t.Add(-time.Hour)
	tmpl.NotAfter = t.Add(365 * 24 * time.Hour)
	tmpl.KeyUsage = x509.KeyUsageDigitalSignature

	der, err := x509.CreateCertificate(rand.Reader, tmpl, p.caCert, &key.PublicKey, p.caKey)
	if err != nil {
		return nil, nil, fmt.Errorf("sign certificate %q: %w", tmpl.Subject.CommonName, err)
	}

	keyDER, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		return nil, nil, fmt.Errorf("marshal key: %w", err)
	}

	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}),
		pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: keyDER}), nil
}

// serverTLS returns the apid server TLS config for a node: IP SAN for its address,
// client certificates required and verified against the CA (mTLS, as Talos does).
func (p *pki) serverTLS(name string, ip net.IP) (*tls.Config, error) {
	crt, key, err := p.issue(&x509.Certificate{
		Subject:     pkix.Name{CommonName: name},
		DNSNames:    []string{name},
		IPAddresses: []net.IP{ip},
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth},
	})
	if err != nil {
		return nil, err
	}

	cert, err := tls.X509KeyPair(crt, key)
	if err != nil {
		return nil, fmt.Errorf("load server key pair: %w", err)
	}

	pool := x509.NewCertPool()
	pool.AddCert(p.caCert)

	return &tls.Config{
		Certificates: []tls.Certificate{cert},
		ClientCAs:    pool,
		ClientAuth:   tls.RequireAndVerifyClientCert,
		MinVersion:   tls.VersionTLS12,
	}, nil
}

// clientTLS is what one node's apid uses to reach another node's apid.
func (p *pki) clientTLS() *tls.Config {
	pool := x509.NewCertPool()
	pool.AddCert(p.caCert)

	return &tls.Config{
		RootCAs:      pool,
		Certificates: []tls.Certificate{p.apidCert},
		MinVersion:   tls.VersionTLS12,
	}
}
