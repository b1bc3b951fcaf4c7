package certexpiry_test

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"strings"
	"testing"
	"time"

	"github.com/talosbot/talosbot/internal/certexpiry"
	"github.com/talosbot/talosbot/plugins/sdk"
)

func pair(t *testing.T, notAfter time.Time) (crt, key []byte) {
	t.Helper()
	k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(0xABC), Subject: pkix.Name{CommonName: "admin", Organization: []string{"os:admin"}},
		NotBefore: notAfter.Add(-365 * 24 * time.Hour), NotAfter: notAfter}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &k.PublicKey, k)
	if err != nil {
		t.Fatal(err)
	}
	kd, err := x509.MarshalPKCS8PrivateKey(k)
	if err != nil {
		t.Fatal(err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: kd})
}

// A PEM holding a key before the certificate yields the certificate only;
// the inventory carries no key, survives the plan's canonical inputs, and
// merges a certificate seen twice.
func TestParsePEMSkipsKeysAndInventoryRoundTrips(t *testing.T) {
	notAfter := time.Date(2027, 1, 10, 9, 0, 0, 0, time.UTC)
	crt, key := pair(t, notAfter)
	certs, err := certexpiry.ParsePEM(append(append([]byte{}, key...), crt...))
	if err != nil || len(certs) != 1 {
		t.Fatalf("%d certificates, %v", len(certs), err)
	}
	if _, err := certexpiry.ParsePEM(key); err == nil {
		t.Error("a key alone parsed as a certificate")
	}
	c := certexpiry.Of("talosconfig client certificate", certexpiry.KindClient, certexpiry.RenewTalosconfig, certs[0])
	if c.Serial != "ABC" || !strings.Contains(c.Subject, "os:admin") || c.DaysLeft(notAfter.Add(-36*time.Hour)) != 1 || c.DaysLeft(notAfter.Add(time.Hour)) != -1 {
		t.Errorf("%+v", c)
	}
	in := &certexpiry.Inventory{Cluster: "staging"}
	in.Add(c)
	other := c
	other.Source = "kube-apiserver (TLS handshake)"
	in.Add(other)
	if len(in.Certs) != 1 || len(in.Certs[0].Sources) != 1 {
		t.Errorf("merge: %+v", in.Certs)
	}
	raw, err := in.Marshal()
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(raw, "PRIVATE") || strings.Contains(raw, string(key[40:80])) {
		t.Error("the inventory carries key material")
	}
	got, err := certexpiry.FromCanonical(sdk.CanonicalFor("certs", "staging").Str(certexpiry.InventoryKey, raw).Bytes())
	if err != nil || len(got.Certs) != 1 || !got.Certs[0].NotAfter.Equal(notAfter) {
		t.Errorf("round trip: %+v %v", got, err)
	}
	if _, err := certexpiry.FromCanonical([]byte(`command="certs"`)); err == nil {
		t.Error("a plan without an inventory was read")
	}
}
