package main

import (
	"context"
	"fmt"
	"github.com/talosbot/talosbot/internal/servetest"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/siderolabs/talos/pkg/machinery/client"
	clientconfig "github.com/siderolabs/talos/pkg/machinery/client/config"

	"github.com/talosbot/talosbot/sim"
)

// TestApprovalVoidedWhenANodeChangesVersion: a production upgrade is planned
// and shown for approval; before it runs, a node is upgraded behind the bot's
// back (as someone at 11 pm with talosctl might). The re-plan before Run sees
// a different digest, voids the approvals, says why, and asks again.
func TestApprovalVoidedWhenANodeChangesVersion(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	c, err := sim.Start(ctx, sim.Options{Dir: filepath.Join(dir, "sim"), Name: "production", ControlPlanes: 1, Workers: 2, RebootDelay: 300 * time.Millisecond})
	must(t, err)
	t.Cleanup(func() { _ = c.Close() })
	tc := filepath.Join(dir, "talosconfig")
	must(t, os.WriteFile(tc, c.Talosconfig(), 0o600))
	var nodes, endpoints []string
	var worker1 string
	for _, n := range c.Nodes() {
		nodes = append(nodes, fmt.Sprintf("{name: %s, address: %s, role: %s, host: %s, platform: nocloud, installer_class: default}", n.Name, n.IP, n.Role, n.Host))
		if n.Role == sim.RoleControlPlane {
			endpoints = append(endpoints, n.IP)
		}
		if n.Name == "worker-1" {
			worker1 = n.IP
		}
	}
	addr := servetest.FreeAddr(t)
	cfg := filepath.Join(dir, "talosbot.yaml")
	must(t, os.WriteFile(cfg, []byte(fmt.Sprintf(`
data_dir: %s/data
listen: %s
clusters:
  - name: production
    environment: production
    channels: [ops]
    endpoints: [%s]
    nodes: [%s]
    credentials: {source: files, talosconfig: "file:%s"}
    declared: {schematic_id: %s}
policy:
  production: {approvers: [bob, dave], operators: [alice, bob, dave]}
releases: {talos: [v1.12.6, v1.13.9]}
chat:
  web: {enabled: true, users: [{name: alice, token: env:TB_CONSOLE_TOKEN_ALICE}, {name: bob, token: env:TB_CONSOLE_TOKEN_BOB}, {name: dave, token: env:TB_CONSOLE_TOKEN_DAVE}]}
`, dir, addr, strings.Join(endpoints, ", "), strings.Join(nodes, ", "), tc, sim.DefaultSchematic)), 0o600))
	b := &servetest.Bot{T: t, Bin: talosbotBinary(t), Config: cfg, Addr: addr, Tokens: servetest.NewTokens(t, "alice", "bob", "dave")}
	b.Start()
	t.Cleanup(func() { _ = b.Cmd.Process.Signal(syscall.SIGTERM); _ = b.Cmd.Wait() })

	if code := b.Post("/api/console/commands", map[string]string{"user": "alice", "channel": "ops", "text": "/talos upgrade talos v1.13.9 production --skip-staging"}); code != 202 {
		t.Fatalf("HTTP %d", code)
	}
	var approval servetest.Message
	b.WaitFor("the approval request", func() bool {
		for _, m := range b.Messages("ops") {
			if m.Field("State") == "awaiting_approval" {
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
				return m.Field("State") == "awaiting_approval" && m.Field("Plan digest") != digest
			})
	})
	if got := c.Calls("cp-1", "Upgrade") + c.Calls("worker-2", "Upgrade"); got != 0 {
		t.Fatalf("the voided plan touched %d nodes", got)
	}
}
