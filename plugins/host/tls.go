package host

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"math/big"
	"os"
	"os/exec"
	"sync"
	"time"

	"github.com/talosbot/talosbot/plugins/sdk"
)

// The mTLS of the plugin connection. go-plugin's automatic mTLS makes a
// P-521 key on each side of every launch, and its handshake costs two P-521
// signatures and four verifications: a third of a cold start on this
// machine (docs/BENCHMARKS.md). The host makes the keys instead, P-256:
//   - its own client certificate once per Manager (it never leaves the
//     bot; a plugin gets only the certificate, as with go-plugin);
//   - each plugin process's server certificate and key for that launch,
//     handed to the process on a pipe (sdk.TLSFDEnv; plugins/sdk/tls.go),
//     which only that process holds, so no key is in an environment, a file
//     or an argument.
//
// The host trusts only the certificate it made for the process, the plugin
// only the host's certificate. A plugin built without plugins/sdk's
// tls.go (plain go-plugin) ignores the pipe and answers with go-plugin's
// own certificate on its handshake line, which go-plugin then trusts
// instead (TestValidateConfigOfAPluginThatPredatesIt runs such a plugin).

// tlsIdentity is a certificate and key, as tls wants it and as PEM.
type tlsIdentity struct {
	cert    tls.Certificate
	certPEM []byte
	keyPEM  []byte
}

// hostCert is the Manager's client identity, made on first use.
type hostCert struct {
	once sync.Once
	id   *tlsIdentity
	err  error
}

func (h *hostCert) get() (*tlsIdentity, error) {
	h.once.Do(func() { h.id, h.err = newTLSIdentity() })
	return h.id, h.err
}

// newTLSIdentity makes a self-signed P-256 certificate for "localhost",
// usable by either end (what go-plugin's generateCert makes, with P-256).
func newTLSIdentity() (*tlsIdentity, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, fmt.Errorf("plugin TLS key: %w", err)
	}
	sn, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 128))
	if err != nil {
		return nil, fmt.Errorf("plugin TLS serial: %w", err)
	}
	now := time.Now()
	tmpl := &x509.Certificate{
		SerialNumber:          sn,
		Subject:               pkix.Name{CommonName: "localhost", Organization: []string{"talosbot plugin"}},
		DNSNames:              []string{"localhost"},
		ExtKeyUsage:           []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth, x509.ExtKeyUsageServerAuth},
		KeyUsage:              x509.KeyUsageDigitalSignature | x509.KeyUsageCertSign,
		BasicConstraintsValid: true,
		IsCA:                  true,
		// Valid as long as a Manager may live (the bot's uptime); the key
		// exists only in memory and in the one plugin process.
		NotBefore: now.Add(-30 * time.Second),
		NotAfter:  now.Add(30 * 365 * 24 * time.Hour),
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return nil, fmt.Errorf("plugin TLS certificate: %w", err)
	}
	keyDER, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		return nil, fmt.Errorf("plugin TLS key: %w", err)
	}
	id := &tlsIdentity{
		certPEM: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}),
		keyPEM:  pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: keyDER}),
	}
	if id.cert, err = tls.X509KeyPair(id.certPEM, id.keyPEM); err != nil {
		return nil, fmt.Errorf("plugin TLS certificate: %w", err)
	}
	return id, nil
}

// launchTLS prepares cmd to receive a fresh server identity on a pipe
// (descriptor 3) and returns the host's TLS config for that process. The
// returned file is the pipe's read end, which the caller closes once the
// process has started (or failed to).
func (m *Manager) launchTLS(cmd *exec.Cmd) (*tls.Config, *os.File, error) {
	host, err := m.hostCert.get()
	if err != nil {
		return nil, nil, err
	}
	server, err := newTLSIdentity()
	if err != nil {
		return nil, nil, err
	}
	r, w, err := os.Pipe()
	if err != nil {
		return nil, nil, fmt.Errorf("plugin TLS pipe: %w", err)
	}
	// Under 1 KiB: the pipe's buffer takes it whole, so nothing waits for
	// the process to read it.
	_, err = w.Write(append(append([]byte(nil), server.certPEM...), server.keyPEM...))
	if cerr := w.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		_ = r.Close()
		return nil, nil, fmt.Errorf("plugin TLS pipe: %w", err)
	}
	roots := x509.NewCertPool()
	roots.AddCert(server.cert.Leaf)
	cmd.ExtraFiles = append(cmd.ExtraFiles, r) // descriptor 3 + index
	cmd.Env = append(cmd.Env,
		"PLUGIN_CLIENT_CERT="+string(host.certPEM),
		fmt.Sprintf("%s=%d", sdk.TLSFDEnv, 3+len(cmd.ExtraFiles)-1))
	return &tls.Config{
		Certificates: []tls.Certificate{host.cert},
		RootCAs:      roots,
		ServerName:   "localhost",
		MinVersion:   tls.VersionTLS12, // a plain go-plugin server offers 1.2 and up
	}, r, nil
}
