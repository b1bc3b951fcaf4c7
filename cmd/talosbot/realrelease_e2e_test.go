package main

import (
	"context"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/talosbot/talosbot/internal/servetest"
	"github.com/talosbot/talosbot/sim"
)

// TestUpgradeToAVersionThatIsNotAReleaseIsRefused: through the real
// process, `/talos upgrade talos v1.13.99 staging` (no such release: the
// bot knows releases.talos v1.12.6, v1.13.9, v1.14.0 and v1.14.1) is refused at plan, names
// the newest v1.13 patch and how to declare a release, and no node is
// asked to upgrade or changes version. Before, it ran to "succeeded" and
// the nodes reported v1.13.99.
func TestUpgradeToAVersionThatIsNotAReleaseIsRefused(t *testing.T) {
	slow(t)
	ctx := context.Background()
	dir := t.TempDir()
	c, err := sim.Start(ctx, sim.Options{Dir: filepath.Join(dir, "sim"), Name: "staging", ControlPlanes: 1, Workers: 1, RebootDelay: 100 * time.Millisecond})
	must(t, err)
	t.Cleanup(func() { _ = c.Close() })
	b := servetest.Config{Dir: dir, Clusters: []servetest.Cluster{{Name: "staging", Sim: c}}}.Bot(t, talosbotBinary(t))
	b.Start()
	t.Cleanup(func() { _ = b.Cmd.Process.Signal(syscall.SIGTERM); _ = b.Cmd.Wait() })

	b.Command("alice", "ops", "/talos upgrade talos v1.13.99 staging")
	var op servetest.Message
	b.WaitForWithin("the upgrade's operation message", time.Minute, func() bool {
		for _, m := range b.Messages("ops") {
			if strings.Contains(m.Title, "/talos upgrade talos") && m.Field("Operation") != "" {
				op = m
				return true
			}
		}
		return false
	})
	if st := b.AwaitEnd("ops", op.Field("Operation"), 2*time.Minute); st != "refused" {
		t.Fatalf("the upgrade to v1.13.99 ended %q, want refused", st)
	}
	var text string
	for _, m := range b.Messages("ops") {
		if m.Field("Operation") == op.Field("Operation") {
			text = m.Text
		}
	}
	for _, want := range []string{"v1.13.99 is not a Talos release the bot knows", "the newest v1.13 patch is v1.13.9", "releases.talos"} {
		if !strings.Contains(text, want) {
			t.Errorf("the refusal does not say %q:\n%s", want, text)
		}
	}
	for _, n := range c.Nodes() {
		if v := c.NodeVersion(n.Name); v != "v1.12.6" {
			t.Errorf("%s runs %s after the refusal, want v1.12.6", n.Name, v)
		}
		if calls := c.Calls(n.Name, "Upgrade"); calls != 0 {
			t.Errorf("%s got %d upgrade calls despite the refusal", n.Name, calls)
		}
	}
}
