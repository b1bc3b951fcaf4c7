package sdk

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"os"
	"strconv"
)

// TLSFDEnv names the descriptor on which plugins/host hands the plugin its
// TLS identity (a certificate and its key, PEM, made by the host for this
// process). With it the plugin skips go-plugin's automatic mTLS, which makes
// a P-521 key in each process and costs P-521 signatures and verifications
// in every handshake: about a third of a plugin's cold start before. The
// connection is as before: TLS on the plugin's socket, the plugin accepting
// only the host's client certificate (PLUGIN_CLIENT_CERT, as go-plugin
// passes it), the host only the certificate it made for this process. A host
// that does not set it gets go-plugin's automatic mTLS, and a plugin built
// without this (plain go-plugin) answers that; both sides work with both.
const TLSFDEnv = "TALOSBOT_PLUGIN_TLS_FD"

// maxTLSIdentity bounds what is read from the descriptor (a P-256
// certificate and key are under 1 KiB).
const maxTLSIdentity = 64 << 10

// hostTLS returns go-plugin's TLSProvider for the identity the host passed,
// or nil if it passed none. The descriptor is read and closed, and the
// variable removed, before the plugin's code runs: neither reaches a process
// the plugin starts.
func hostTLS() func() (*tls.Config, error) {
	v, ok := os.LookupEnv(TLSFDEnv)
	if !ok {
		return nil
	}
	_ = os.Unsetenv(TLSFDEnv)
	return func() (*tls.Config, error) {
		fd, err := strconv.Atoi(v)
		if err != nil || fd < 3 {
			return nil, fmt.Errorf("%s=%q is not a descriptor the host passed", TLSFDEnv, v)
		}
		f := os.NewFile(uintptr(fd), "talosbot-plugin-tls")
		if f == nil {
			return nil, fmt.Errorf("%s=%d: no such descriptor", TLSFDEnv, fd)
		}
		pem, err := io.ReadAll(io.LimitReader(f, maxTLSIdentity))
		_ = f.Close()
		if err != nil {
			return nil, fmt.Errorf("reading the TLS identity from the host: %w", err)
		}
		// X509KeyPair takes the CERTIFICATE blocks from its first argument
		// and the key from its second, skipping the other blocks.
		cert, err := tls.X509KeyPair(pem, pem)
		if err != nil {
			return nil, fmt.Errorf("the TLS identity from the host: %w", err)
		}
		hostCA := x509.NewCertPool()
		if !hostCA.AppendCertsFromPEM([]byte(os.Getenv("PLUGIN_CLIENT_CERT"))) {
			return nil, errors.New("PLUGIN_CLIENT_CERT holds no certificate: the host's client certificate is needed to accept its connection")
		}
		return &tls.Config{
			Certificates: []tls.Certificate{cert},
			ClientAuth:   tls.RequireAndVerifyClientCert,
			ClientCAs:    hostCA,
			MinVersion:   tls.VersionTLS13,
		}, nil
	}
}
