//go:build demo

package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// This file needs the demo build (loopbackOnly is in demo_run.go):
// make test runs it with go test -tags demo -run TestDemo ./cmd/talosbot.

// TestDemoConsoleIsLoopbackOnly: the demo's console has no tokens and a user
// picker, so it refuses to listen anywhere but loopback, before starting
// anything.
func TestDemoConsoleIsLoopbackOnly(t *testing.T) {
	for _, ok := range []string{"127.0.0.1:8080", "[::1]:8080", "localhost:0", "127.0.0.2:9"} {
		if err := loopbackOnly(ok); err != nil {
			t.Errorf("%s refused: %v", ok, err)
		}
	}
	for _, bad := range []string{"0.0.0.0:8080", ":8080", "[::]:8080", "10.0.0.5:8080", "talosbot.internal:8080", "8080"} {
		if err := loopbackOnly(bad); err == nil {
			t.Errorf("%s accepted", bad)
		}
	}
	dataDir := filepath.Join(t.TempDir(), "demo")
	out, code := runExe(t, demoBinPath, "demo", "--listen", "0.0.0.0:0", "--data-dir", dataDir)
	if code == 0 || !strings.Contains(out, "loopback only") || !strings.Contains(out, "chat.web.users") {
		t.Fatalf("demo on 0.0.0.0: exit %d\n%s", code, out)
	}
	if _, err := os.Stat(dataDir); !os.IsNotExist(err) {
		t.Fatalf("the refused demo created its data dir (%v)", err)
	}
}
