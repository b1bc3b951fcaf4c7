package host

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/tls"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"

	lifecyclev1 "github.com/talosbot/talosbot/plugins/sdk/proto/lifecycle/v1"
)

// TestPluginConnectionIsMutualTLSWithHostKeys: the plugin serves TLS with
// the P-256 certificate the host made for it (not go-plugin's P-521), and
// accepts only the host's client certificate: a client without one, or with
// a certificate of its own, gets no answer.
func TestPluginConnectionIsMutualTLSWithHostKeys(t *testing.T) {
	m := newManager(t, Options{BuiltIn: []string{"alpha"}})
	if _, err := m.Plan(t.Context(), "alpha", req("ok")); err != nil {
		t.Fatal(err)
	}
	p := m.plugins["alpha"]
	p.mu.Lock()
	addr := p.cur.client.ReattachConfig().Addr
	p.mu.Unlock()
	host, err := m.hostCert.get()
	if err != nil {
		t.Fatal(err)
	}
	stranger, err := newTLSIdentity()
	if err != nil {
		t.Fatal(err)
	}

	describe := func(certs []tls.Certificate) (*tls.ConnectionState, error) {
		var state *tls.ConnectionState
		cfg := &tls.Config{
			Certificates: certs,
			// The server's certificate is checked below; this client only
			// probes what the plugin accepts.
			InsecureSkipVerify: true, //nolint:gosec // a probe, see above
			VerifyConnection: func(cs tls.ConnectionState) error {
				state = &cs
				return nil
			},
		}
		conn, err := grpc.NewClient("unix:"+addr.String(), grpc.WithTransportCredentials(credentials.NewTLS(cfg)))
		if err != nil {
			return nil, err
		}
		defer func() { _ = conn.Close() }()
		ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
		defer cancel()
		_, err = lifecyclev1.NewLifecycleClient(conn).Describe(ctx, &lifecyclev1.DescribeRequest{})
		return state, err
	}

	state, err := describe([]tls.Certificate{host.cert})
	if err != nil {
		t.Fatalf("with the host's certificate: %v", err)
	}
	key, ok := state.PeerCertificates[0].PublicKey.(*ecdsa.PublicKey)
	if !ok || key.Curve != elliptic.P256() {
		t.Fatalf("plugin certificate key %T %v, want ECDSA P-256 made by the host", state.PeerCertificates[0].PublicKey, key)
	}
	if _, err := describe(nil); err == nil {
		t.Fatal("a client without a certificate was served")
	}
	if _, err := describe([]tls.Certificate{stranger.cert}); err == nil {
		t.Fatal("a client with a certificate the host did not make was served")
	}
}
