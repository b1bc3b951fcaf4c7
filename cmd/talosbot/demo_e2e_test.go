package main

import (
	"bufio"
	"io"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/talosbot/talosbot/internal/servetest"
)

// TestDemoRunsBuiltInPlugins runs `talosbot-demo demo` (what `make demo`
// runs) as a process and asks for a health check from the console: the demo
// build finds talosbot-plugins next to itself, the started healthgate passes
// the host's manifest check against the catalogue, and the gate passes on the
// simulated staging cluster.
func TestDemoRunsBuiltInPlugins(t *testing.T) {
	if testing.Short() {
		t.Skip("starts two simulated clusters")
	}
	addr := servetest.FreeAddr(t)
	cmd := exec.Command(demoBinPath, "demo", "--listen", addr, "--data-dir", t.TempDir())
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var log strings.Builder
	cmd.Stderr = &lockedWriter{mu: &mu, w: &log}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		_ = cmd.Wait()
	})
	ready, ended := make(chan struct{}), make(chan struct{})
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			if strings.Contains(sc.Text(), "talosbot demo is ready") {
				close(ready)
				_, _ = io.Copy(io.Discard, stdout)
				return
			}
		}
		close(ended) // stdout closed before "ready": the demo exited
	}()
	fail := func(why string) {
		mu.Lock()
		defer mu.Unlock()
		t.Fatalf("%s; log:\n%s", why, log.String())
	}
	select {
	case <-ready:
	case <-ended:
		fail("the demo exited before it was ready")
	case <-time.After(3 * time.Minute):
		fail("demo not ready after 3 minutes")
	}
	b := &servetest.Bot{T: t, Addr: addr}
	b.Command("alice", "ops", "/talos health staging")
	b.WaitForWithin("the health gate to pass on staging", 2*time.Minute, func() bool {
		return b.HasMessage("ops", func(m servetest.Message) bool {
			return m.Title == "✅ /talos health · staging" && m.Field("State") == "succeeded"
		})
	})
}

type lockedWriter struct {
	mu *sync.Mutex
	w  io.Writer
}

func (l *lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}
