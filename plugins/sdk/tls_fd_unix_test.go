//go:build unix

package sdk

import (
	"strconv"
	"syscall"
	"testing"
)

// TestHostTLSClosesTheKeyDescriptor: once read, the descriptor that carried
// the plugin's key is closed, so no process the plugin starts can inherit
// it (a descriptor the host passes is not close-on-exec in the plugin).
// Raw descriptors, not an *os.File: a File's finalizer would close the
// number again after hostTLS closed it, whatever it then names.
func TestHostTLSClosesTheKeyDescriptor(t *testing.T) {
	serverCert, serverKey := testIdentity(t)
	hostCert, _ := testIdentity(t)
	var p [2]int
	if err := syscall.Pipe(p[:]); err != nil {
		t.Fatal(err)
	}
	r, w := p[0], p[1]
	var before syscall.Stat_t
	if err := syscall.Fstat(r, &before); err != nil {
		t.Fatal(err)
	}
	if _, err := syscall.Write(w, append(append([]byte(nil), serverCert...), serverKey...)); err != nil {
		t.Fatal(err)
	}
	_ = syscall.Close(w)
	t.Setenv(TLSFDEnv, strconv.Itoa(r))
	t.Setenv("PLUGIN_CLIENT_CERT", string(hostCert))
	if _, err := hostTLS()(); err != nil {
		t.Fatal(err)
	}
	var after syscall.Stat_t
	if err := syscall.Fstat(r, &after); err == nil && after.Dev == before.Dev && after.Ino == before.Ino {
		_ = syscall.Close(r)
		t.Fatalf("descriptor %d still holds the pipe the key came on", r)
	}
}
