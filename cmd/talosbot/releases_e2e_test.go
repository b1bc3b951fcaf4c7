package main

import (
	"context"
	"fmt"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/talosbot/talosbot/internal/factory"
	"github.com/talosbot/talosbot/internal/factory/factoryfake"
	"github.com/talosbot/talosbot/internal/servetest"
	"github.com/talosbot/talosbot/sim"
)

// TestServeReleasesAndNotices: `talosbot serve` reads Talos versions from
// an Image Factory (the fake), `/talos releases` reports the path from what
// the simulated cluster runs, a new-release notice appears in the cluster's
// channel with its buttons, and its snooze button is accepted (that a snooze
// pauses the notices is TestOneNoticePerNewVersionStagingFirstSnoozeHonoured's).
func TestServeReleasesAndNotices(t *testing.T) {
	// Waits on processes and the sim's reboots, not the CPU: runs beside the package's other slow tests.
	t.Parallel()
	slow(t)
	ctx := context.Background()
	dir := t.TempDir()
	c, err := sim.Start(ctx, sim.Options{Dir: filepath.Join(dir, "sim"), Name: "staging", ControlPlanes: 1})
	must(t, err)
	t.Cleanup(func() { _ = c.Close() })
	f := factoryfake.Start(t, "v1.12.5", "v1.12.6", "v1.13.0", "v1.13.9", "v1.14.0-beta.0")
	fc, err := factory.New(f.URL(), nil)
	must(t, err)
	schematic, err := fc.CreateSchematic(ctx, &factory.Schematic{})
	must(t, err)
	b := servetest.Config{Dir: dir, Clusters: []servetest.Cluster{{Sim: c, Schematic: schematic}}, Policy: "{staging: {operators: [alice]}}",
		Releases: fmt.Sprintf(`{talos: [v1.12.6], factory_url: %s, notice_schedule: "* * * * *"}`, f.URL())}.Bot(t, talosbotBinary(t))
	b.Start()
	t.Cleanup(func() { _ = b.Cmd.Process.Signal(syscall.SIGTERM); _ = b.Cmd.Wait() })
	b.WaitFor("the release source to read the factory", func() bool { return f.Hits("/versions") > 0 })

	b.Command("alice", "ops", "/talos releases staging")
	b.WaitFor("the releases report", func() bool {
		return b.HasMessage("ops", func(m servetest.Message) bool {
			return strings.Contains(m.Text, "path: v1.12.6 → v1.13.9") && strings.Contains(m.Text, "release data: Image Factory "+f.URL())
		})
	})
	if !b.HasMessage("ops", func(m servetest.Message) bool {
		return strings.Contains(m.Text, "installer class default") && strings.Contains(m.Text, "known to Image Factory")
	}) {
		t.Errorf("the schematic check is missing:\n%+v", b.Messages("ops"))
	}

	// The every-minute check posts the v1.13.9 notice, with staging's plan
	// button and the snooze button.
	var notice servetest.Message
	b.WaitForWithin("the new-release notice", 2*time.Minute, func() bool {
		for _, m := range b.Messages("ops") {
			if strings.Contains(m.Text, "Talos v1.13.9 is out") {
				notice = m
				return true
			}
		}
		return false
	})
	if notice.Button("Plan on staging") == "" || notice.Button("Snooze 7d") == "" || !strings.Contains(notice.Text, "releases/tag/v1.13.9") {
		t.Fatalf("notice: %+v", notice)
	}
	if code := b.Post("/api/console/actions", map[string]string{"user": "alice", "message_id": notice.ID, "action_id": notice.Button("Snooze 7d")}); code != 202 {
		t.Fatalf("snooze: HTTP %d", code)
	}
	b.WaitFor("the snooze", func() bool {
		return b.HasMessage("ops", func(m servetest.Message) bool {
			return strings.Contains(m.Text, "notices for staging are paused until")
		})
	})
	count := func() int {
		k := 0
		for _, m := range b.Messages("ops") {
			if strings.Contains(m.Text, " is out (") {
				k++
			}
		}
		return k
	}
	if k := count(); k != 1 {
		t.Errorf("%d notices, want 1", k)
	}
}
