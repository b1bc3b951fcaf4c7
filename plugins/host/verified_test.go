//go:build linux

package host

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// copyPlugin puts a copy of the test plugin in a directory of the test and
// returns its path and sha256.
func copyPlugin(t *testing.T) (string, string) {
	t.Helper()
	b, err := os.ReadFile(testPluginPath)
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "talosbot-plugins")
	if err := os.WriteFile(path, b, 0o700); err != nil {
		t.Fatal(err)
	}
	return path, sha256File(t, path)
}

// killCurrent SIGKILLs p's running process and waits until it is reaped
// (the file is then no longer busy and can be written).
func killCurrent(t *testing.T, m *Manager, name string) {
	t.Helper()
	p := m.plugins[name]
	p.mu.Lock()
	inst := p.cur
	p.mu.Unlock()
	if inst == nil {
		t.Fatalf("%s has no process", name)
	}
	if err := syscall.Kill(inst.pid, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	select {
	case <-inst.exited.Done():
	case <-time.After(30 * time.Second):
		t.Fatal("the killed plugin was not reaped")
	}
}

// TestVerifiedBinaryIsHashedOncePerManager: the built-ins share one binary,
// and a restart runs the same file: neither hashes it again.
func TestVerifiedBinaryIsHashedOncePerManager(t *testing.T) {
	path, sum := copyPlugin(t)
	m := newManager(t, Options{Executable: path, ExecutableSHA256: sum, BuiltIn: []string{"alpha", "beta"}})
	m.verified.settle = 0 // the copy is new; its ctime has not settled for settleTime
	for _, name := range []string{"alpha", "beta"} {
		if _, err := m.Plan(t.Context(), name, req("ok")); err != nil {
			t.Fatal(err)
		}
	}
	killCurrent(t, m, "alpha")
	if _, err := m.Plan(t.Context(), "alpha", req("ok")); err != nil {
		t.Fatalf("restart: %v", err)
	}
	if n := m.hashes.Load(); n != 1 {
		t.Fatalf("hashed %d times for three launches of one file, want 1", n)
	}
}

// TestChangedBinaryIsRefusedAfterItWasRemembered: a remembered file that is
// changed in place, with its size and mtime kept, is hashed again on the
// next launch and refused. Its ctime is what tells (verified.go).
func TestChangedBinaryIsRefusedAfterItWasRemembered(t *testing.T) {
	path, sum := copyPlugin(t)
	m := newManager(t, Options{Executable: path, ExecutableSHA256: sum, BuiltIn: []string{"alpha"}})
	m.verified.settle = 0
	if _, err := m.Plan(t.Context(), "alpha", req("ok")); err != nil {
		t.Fatal(err)
	}
	killCurrent(t, m, "alpha")
	fi, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	f, err := os.OpenFile(path, os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.WriteAt([]byte("tampered"), fi.Size()/2); err != nil {
		t.Fatal(err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	if err := os.Chtimes(path, fi.ModTime(), fi.ModTime()); err != nil {
		t.Fatal(err)
	}
	if after, err := os.Stat(path); err != nil || after.Size() != fi.Size() || !after.ModTime().Equal(fi.ModTime()) {
		t.Fatalf("the change should keep size and mtime: %v, %v", after, err)
	}
	_, err = m.Plan(t.Context(), "alpha", req("ok"))
	if !errors.Is(err, ErrChecksumMismatch) || !strings.Contains(err.Error(), "expected sha256 "+sum) {
		t.Fatalf("changed binary: err = %v", err)
	}
	if n := m.hashes.Load(); n != 2 {
		t.Fatalf("hashed %d times, want 2 (the first launch and the changed file)", n)
	}
}

// TestWriteDuringTheLaunchIsRefused: a write to the executable between its
// check and the plugin's start (here the same bytes written back, which
// only a hash after the fact would miss) refuses the launch before any
// request reaches the plugin, and the file is not remembered.
func TestWriteDuringTheLaunchIsRefused(t *testing.T) {
	path, sum := copyPlugin(t)
	m := newManager(t, Options{Executable: path, ExecutableSHA256: sum, BuiltIn: []string{"alpha"}})
	m.verified.settle = 0
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	written := false
	m.afterVerify = func(p string) {
		if written {
			return
		}
		written = true
		f, err := os.OpenFile(p, os.O_WRONLY, 0)
		if err != nil {
			t.Error(err)
			return
		}
		defer func() { _ = f.Close() }()
		if _, err := f.WriteAt(b[:4096], 0); err != nil {
			t.Error(err)
		}
	}
	_, err = m.Plan(t.Context(), "alpha", req("ok"))
	if !errors.Is(err, ErrChecksumMismatch) || !strings.Contains(err.Error(), "the executable changed while it was being launched") {
		t.Fatalf("written during the launch: err = %v", err)
	}
	// The next launch hashes it again (the bytes are the same, so it runs).
	if _, err := m.Plan(t.Context(), "alpha", req("ok")); err != nil {
		t.Fatal(err)
	}
	if n := m.hashes.Load(); n != 2 {
		t.Fatalf("hashed %d times, want 2", n)
	}
}

// TestFreshFileIsNotRemembered: a file changed less than settleTime before
// it was hashed may change again within the same timestamp tick without its
// ctime moving, so it is hashed again on the next launch.
func TestFreshFileIsNotRemembered(t *testing.T) {
	path, sum := copyPlugin(t) // written just now
	m := newManager(t, Options{Executable: path, ExecutableSHA256: sum, BuiltIn: []string{"alpha"}})
	if m.verified.settle != settleTime {
		t.Fatalf("settle = %v, want settleTime", m.verified.settle)
	}
	// settleTime (2 s) could pass on a loaded machine between the copy and
	// the hash; an hour cannot, so the test does not depend on the load.
	m.verified.settle = time.Hour
	if _, err := m.Plan(t.Context(), "alpha", req("ok")); err != nil {
		t.Fatal(err)
	}
	killCurrent(t, m, "alpha")
	if _, err := m.Plan(t.Context(), "alpha", req("ok")); err != nil {
		t.Fatalf("restart: %v", err)
	}
	if n := m.hashes.Load(); n != 2 {
		t.Fatalf("hashed %d times, want 2: a file younger than settleTime must not be remembered", n)
	}
}

// TestNothingIsRememberedByDefault: a file never verified is not verified
// against any sum, the empty one included (which start refuses earlier;
// the cache must not be what lets it through if that check moves).
func TestNothingIsRememberedByDefault(t *testing.T) {
	var v verifiedFiles
	if v.has(fileID{}, "") || v.has(fileID{ino: 1}, "") {
		t.Fatal("an empty cache remembers a file against the empty sum")
	}
	v.add(fileID{ino: 1, ctime: 1}, "ab", time.Now())
	if v.has(fileID{ino: 2}, "") || v.has(fileID{ino: 1, ctime: 1}, "cd") || !v.has(fileID{ino: 1, ctime: 1}, "ab") {
		t.Fatal("the cache answers for a file or sum it did not verify")
	}
}
