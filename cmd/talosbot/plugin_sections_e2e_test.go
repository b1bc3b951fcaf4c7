package main

import (
	"context"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/talosbot/talosbot/internal/servetest"
	"github.com/talosbot/talosbot/sim"
)

// A built-in reads its own setting from its section, through a real
// `talosbot serve` and its talosbot-plugins: plugins.gates.longhorn_volume
// (once a Settings.extra key no configuration could reach) names the
// UserVolumeConfig the Longhorn gate looks for. Without the section the
// gate looks for the default, "longhorn".
func TestBuiltInReadsItsSectionThroughServe(t *testing.T) {
	slow(t)
	dir := t.TempDir()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	c, err := sim.Start(ctx, sim.Options{Dir: filepath.Join(dir, "sim"), Name: "staging", ControlPlanes: 1, Workers: 1})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	b := servetest.Config{Dir: dir, Clusters: []servetest.Cluster{{Sim: c}},
		Extra: "plugins:\n  gates: {longhorn_volume: lh-data}\n"}.Bot(t, talosbotBinary(t))
	b.Start()
	t.Cleanup(func() { _ = b.Cmd.Process.Kill(); _ = b.Cmd.Wait() })

	b.Command("alice", "ops", "/talos gates staging")
	var text string
	b.WaitForWithin("the gates' result", 2*time.Minute, func() bool {
		return b.HasMessage("ops", func(m servetest.Message) bool {
			if strings.Contains(m.Title, "/talos gates") && strings.Contains(m.Text, "UserVolumeConfig") {
				text = m.Text
				return true
			}
			return false
		})
	})
	if !strings.Contains(text, `no UserVolumeConfig "lh-data"`) || strings.Contains(text, `"longhorn"`) {
		t.Fatalf("the Longhorn gate did not read plugins.gates.longhorn_volume:\n%s", text)
	}
}
