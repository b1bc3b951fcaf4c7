//go:build unix

package sdk

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"os"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// testIdentity makes a self-signed P-256 certificate and key, PEM.
func testIdentity(t *testing.T) (certPEM, keyPEM []byte) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "localhost"},
		DNSNames: []string{"localhost"}, NotBefore: time.Now().Add(-time.Minute), NotAfter: time.Now().Add(time.Hour)}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	kder, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kder})
}

// passIdentity puts data on a pipe and names its read end in TLSFDEnv, as
// plugins/host does for a plugin process, and returns that descriptor.
// hostTLS closes it; cleanup closes it only if it still names the pipe.
// Raw descriptors, not an *os.File: a File's close or finalizer would close
// the number again after hostTLS closed it, whatever it then names.
func passIdentity(t *testing.T, data []byte) int {
	t.Helper()
	var p [2]int
	if err := syscall.Pipe(p[:]); err != nil {
		t.Fatal(err)
	}
	r, w := p[0], p[1]
	var pipe syscall.Stat_t
	if err := syscall.Fstat(r, &pipe); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if stillPipe(r, pipe) {
			_ = syscall.Close(r)
		}
	})
	_, err := syscall.Write(w, data)
	_ = syscall.Close(w)
	if err != nil {
		t.Fatal(err)
	}
	t.Setenv(TLSFDEnv, strconv.Itoa(r))
	return r
}

// stillPipe reports whether fd still names the pipe pipe was read from.
func stillPipe(fd int, pipe syscall.Stat_t) bool {
	var now syscall.Stat_t
	return syscall.Fstat(fd, &now) == nil && now.Dev == pipe.Dev && now.Ino == pipe.Ino
}

// TestHostTLS: the identity on the descriptor becomes the server's
// certificate, the host's certificate the only client CA; the variable is
// gone before the plugin runs and the descriptor closed once read; what is
// missing or broken is an error (go-plugin then does not serve), never a
// fallback to no TLS.
func TestHostTLS(t *testing.T) {
	if hostTLS() != nil {
		t.Fatal("without the variable, go-plugin's own mTLS must be used")
	}
	serverCert, serverKey := testIdentity(t)
	hostCert, _ := testIdentity(t)

	t.Run("ok", func(t *testing.T) {
		fd := passIdentity(t, append(append([]byte(nil), serverCert...), serverKey...))
		var pipe syscall.Stat_t
		if err := syscall.Fstat(fd, &pipe); err != nil {
			t.Fatal(err)
		}
		t.Setenv("PLUGIN_CLIENT_CERT", string(hostCert))
		provide := hostTLS()
		if _, still := os.LookupEnv(TLSFDEnv); still {
			t.Fatal("the variable reaches the plugin's code")
		}
		cfg, err := provide()
		if err != nil {
			t.Fatal(err)
		}
		// Closed once read: a process the plugin starts cannot inherit it
		// (a descriptor the host passes is not close-on-exec in the plugin).
		if stillPipe(fd, pipe) {
			t.Fatalf("descriptor %d still holds the pipe the key came on", fd)
		}
		if len(cfg.Certificates) != 1 || cfg.ClientCAs == nil || cfg.ClientAuth.String() != "RequireAndVerifyClientCert" {
			t.Fatalf("config = %+v", cfg)
		}
	})
	for name, c := range map[string]struct {
		data, client []byte
		want         string
	}{
		"no key":         {data: serverCert, client: hostCert, want: "the TLS identity from the host"},
		"no client cert": {data: append(append([]byte(nil), serverCert...), serverKey...), want: "PLUGIN_CLIENT_CERT holds no certificate"},
	} {
		t.Run(name, func(t *testing.T) {
			passIdentity(t, c.data)
			t.Setenv("PLUGIN_CLIENT_CERT", string(c.client))
			if _, err := hostTLS()(); err == nil || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("err = %v, want %q", err, c.want)
			}
		})
	}
	t.Run("not a descriptor", func(t *testing.T) {
		t.Setenv(TLSFDEnv, "stdin")
		if _, err := hostTLS()(); err == nil || !strings.Contains(err.Error(), "is not a descriptor the host passed") {
			t.Fatalf("err = %v", err)
		}
	})
}
