package main

import (
	"context"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/talosbot/talosbot/internal/servetest"

	"github.com/siderolabs/talos/pkg/machinery/client"
	clientconfig "github.com/siderolabs/talos/pkg/machinery/client/config"

	"github.com/talosbot/talosbot/sim"
)

// TestApprovalVoidedWhenANodeChangesVersion: a production upgrade is planned
// and shown for approval; before it runs, a node is upgraded behind the bot's
// back (as someone at 11 pm with talosctl might). The re-plan before Run sees
// a different digest, voids the approvals, says why, and asks again.
func TestApprovalVoidedWhenANodeChangesVersion(t *testing.T) {
	slow(t)
	ctx := context.Background()
	dir := t.TempDir()
	c, err := sim.Start(ctx, sim.Options{Dir: filepath.Join(dir, "sim"), Name: "production", ControlPlanes: 1, Workers: 2, RebootDelay: 300 * time.Millisecond})
	must(t, err)
	t.Cleanup(func() { _ = c.Close() })
	var worker1 string
	for _, n := range c.Nodes() {
		if n.Name == "worker-1" {
			worker1 = n.IP
		}
	}
	b := servetest.Config{Dir: dir, Clusters: []servetest.Cluster{{Name: "production", Sim: c}}, Users: []string{"alice", "bob", "dave"},
		Policy: "{production: {approvers: [bob, dave], operators: [alice, bob, dave]}}"}.Bot(t, talosbotBinary(t))
	b.Start()
	t.Cleanup(func() { _ = b.Cmd.Process.Signal(syscall.SIGTERM); _ = b.Cmd.Wait() })

	if code := b.Post("/api/console/commands", map[string]string{"user": "alice", "channel": "ops", "text": "/talos upgrade talos v1.13.9 production --skip-staging"}); code != 202 {
		t.Fatalf("HTTP %d", code)
	}
	var approval servetest.Message
	b.WaitFor("the approval request", func() bool {
		for _, m := range b.Messages("ops") {
			// The buttons come with the update after the state change (and
			// a second edit within a second is coalesced): wait for them.
			if m.Field("State") == "awaiting approval" && m.Button("Approve") != "" {
				approval = m
				return true
			}
		}
		return false
	})
	digest := approval.Field("Plan digest")
	if !strings.Contains(approval.Text, "worker-1") || !strings.Contains(approval.Text, "v1.12.6 → v1.13.9") {
		t.Fatalf("the approval message does not show the plan: %s", approval.Text)
	}

	// Someone upgrades worker-1 by hand.
	tcfg, err := clientconfig.FromBytes(c.Talosconfig())
	must(t, err)
	cli, err := client.New(ctx, client.WithConfig(tcfg))
	must(t, err)
	defer cli.Close() //nolint:errcheck
	img := "factory.talos.dev/nocloud-installer/" + sim.DefaultSchematic + ":v1.13.9"
	_, err = cli.Upgrade(client.WithNode(ctx, worker1), img, false, true)
	must(t, err)
	b.WaitFor("worker-1 at v1.13.9", func() bool { return c.NodeVersion("worker-1") == "v1.13.9" })

	// Both approvals arrive; the re-plan before Run finds a different plan.
	for _, user := range []string{"bob", "dave"} {
		if code := b.Post("/api/console/actions", map[string]string{"user": user, "message_id": approval.ID, "action_id": approval.Button("Approve")}); code != 202 {
			t.Fatalf("%s approve: HTTP %d", user, code)
		}
		if user == "bob" {
			b.WaitFor("bob's approval to count", func() bool {
				return b.HasMessage("ops", func(m servetest.Message) bool { return strings.Contains(m.Text, "approved by bob (1/2)") })
			})
		}
	}
	b.WaitFor("the approvals to be voided", func() bool {
		return b.HasMessage("ops", func(m servetest.Message) bool {
			return strings.Contains(m.Text, "the plan changed since it was approved")
		}) &&
			b.HasMessage("ops", func(m servetest.Message) bool {
				return m.Field("State") == "awaiting approval" && m.Field("Plan digest") != digest
			})
	})
	if got := c.Calls("cp-1", "Upgrade") + c.Calls("worker-2", "Upgrade"); got != 0 {
		t.Fatalf("the voided plan touched %d nodes", got)
	}
}
