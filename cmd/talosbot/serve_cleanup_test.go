package main

import (
	"errors"
	"syscall"
	"testing"

	"github.com/talosbot/talosbot/internal/servetest"
)

// TestStartedBotIsStoppedAfterItsTest: a test that ends without stopping the
// bot it started (as one that fails half way does) leaves no serve process
// behind; servetest's cleanup kills and reaps it.
func TestStartedBotIsStoppedAfterItsTest(t *testing.T) {
	var pid int
	t.Run("ends without stopping its bot", func(t *testing.T) {
		b := servetest.Config{Dir: t.TempDir(), Clusters: []servetest.Cluster{{Endpoints: []string{"127.0.0.1"},
			Talosconfig: []byte("context: e2e\n"), Nodes: []string{"{name: cp-1, address: 127.0.0.1, role: controlplane, host: pve1}"}}}}.Bot(t, talosbotBinary(t))
		b.Start()
		pid = b.Cmd.Process.Pid
	})
	if pid == 0 {
		t.Fatal("the subtest did not start the bot")
	}
	if err := syscall.Kill(pid, 0); !errors.Is(err, syscall.ESRCH) {
		t.Fatalf("serve (pid %d) still exists after the test that started it ended: kill(pid, 0) = %v", pid, err)
	}
}
