package main

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/talosbot/talosbot/internal/servetest"
)

// TestHungPluginHoldsNothing runs a real `talosbot serve` with an external
// plugin that starts a child inheriting its stderr and then hangs
// (plugins/host/testdata/hangplugin): in a Plan, deaf to cancellation, or
// while it restarts after a crash, before the go-plugin handshake. While it
// hangs, the bot answers other commands on this cluster and on another; on
// SIGTERM serve exits in bounded time, and neither the plugin nor its child
// outlives it. (The child holds the stderr pipe, on which go-plugin's Kill
// waits: a start that failed and killed the plugin used to hold the plugin's
// lock for good, and Close waited on that lock.)
func TestHungPluginHoldsNothing(t *testing.T) {
	// Waits on processes and the sim's reboots, not the CPU: runs beside the package's other slow tests.
	t.Parallel()
	slow(t)
	for _, tc := range []struct{ name, args, pidfile string }{
		{"in plan", "--pidfile %s", "hang.pids"},
		{"while restarting", "--mode crash", "marker.pids"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			plugin, sum := servetest.BuildPlugin(t, "../../plugins/host/testdata/hangplugin")
			node := []string{"{name: cp-1, address: 127.0.0.1, role: controlplane, host: pve1}"}
			b := servetest.Config{Dir: dir, Clusters: []servetest.Cluster{
				{Nodes: node, Endpoints: []string{"127.0.0.1"}, Talosconfig: []byte("context: e2e\n")},
				{Name: "lab", Environment: "staging", Channels: []string{"lab"}, Nodes: node, Endpoints: []string{"127.0.0.1"}, Talosconfig: []byte("context: e2e\n")},
			}, Extra: fmt.Sprintf("plugins:\n  pass_env: [HANG_MARKER]\n  external: [{name: hang, path: %s, sha256: %s}]\n", plugin, sum)}.Bot(t, talosbotBinary(t))
			b.Env = []string{"HANG_MARKER=" + filepath.Join(dir, "marker")}
			b.Start()

			pidfile := filepath.Join(dir, tc.pidfile)
			args := tc.args
			if strings.Contains(args, "%s") {
				args = fmt.Sprintf(args, pidfile)
			}
			b.Command("alice", "ops", "/talos hang staging "+args)
			var pluginPID, childPID int
			b.WaitFor("the plugin to start its child and hang", func() bool {
				raw, err := os.ReadFile(pidfile)
				if err != nil {
					return false
				}
				_, err = fmt.Sscan(string(raw), &pluginPID, &childPID)
				return err == nil
			})

			// The hung plugin holds nothing that other commands need.
			b.Command("alice", "lab", "/talos status lab")
			b.Command("alice", "ops", "/talos status staging")
			for _, ch := range []string{"lab", "ops"} {
				b.WaitFor("status in "+ch+" while a plugin hangs", func() bool {
					return b.HasMessage(ch, func(m servetest.Message) bool { return strings.Contains(m.Text, "lock:") })
				})
			}

			if err := b.Cmd.Process.Signal(syscall.SIGTERM); err != nil {
				t.Fatal(err)
			}
			exited := make(chan error, 1)
			go func() { exited <- b.Cmd.Wait() }()
			// serve bounds its shutdown to about 10 s; 30 s only keeps a slow machine from failing the test.
			select {
			case <-exited:
			case <-time.After(30 * time.Second):
				_ = b.Cmd.Process.Kill()
				<-exited
				t.Fatalf("serve still ran 30 s after SIGTERM while a plugin hung; log:\n%s", b.Stderr)
			}
			b.WaitFor("the plugin and its child to be gone", func() bool {
				return !servetest.Alive(pluginPID) && !servetest.Alive(childPID)
			})
		})
	}
}
