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

// TestApprovalSurvivesSIGKILL (issue 29, defect 10): a production upgrade
// needs two approvals (--skip-staging adds one); bob gives the first, and
// `talosbot serve` is SIGKILLed. After the restart the channel shows the
// approval card again, with its Approve button and "1/2 — approved by
// bob", and the second approval runs the operation: a click on the
// re-posted card's Approve in one case, a typed `/talos approve ID` in the
// other. Before the fix the restarted bot posted nothing, and there was no
// typed way to approve.
func TestApprovalSurvivesSIGKILL(t *testing.T) {
	// Waits on processes and the sim's reboots, not the CPU: runs beside the package's other slow tests.
	t.Parallel()
	slow(t)
	for _, how := range []string{"click", "typed"} {
		t.Run(how, func(t *testing.T) {
			ctx := context.Background()
			dir := t.TempDir()
			c, err := sim.Start(ctx, sim.Options{Dir: filepath.Join(dir, "sim"), Name: "production", ControlPlanes: 1, Workers: 1, RebootDelay: 300 * time.Millisecond})
			must(t, err)
			t.Cleanup(func() { _ = c.Close() })
			b := servetest.Config{Dir: dir, Clusters: []servetest.Cluster{{Name: "production", Sim: c}}, Users: []string{"alice", "bob", "dave"},
				Timeouts: "{gate: 20s, node: 60s}",
				Policy:   "{production: {approvers: [bob, dave], operators: [alice, bob, dave]}}"}.Bot(t, talosbotBinary(t))
			b.Start()

			b.Command("alice", "ops", "/talos upgrade talos v1.13.9 production --skip-staging")
			card := func(want string) servetest.Message {
				var card servetest.Message
				b.WaitFor("the approval card showing "+want+" with its Approve button", func() bool {
					for _, m := range b.Messages("ops") {
						// The buttons come with the update after the state
						// change: wait for them.
						if m.Field("State") == "awaiting approval" && m.Button("Approve") != "" && strings.HasPrefix(m.Field("Approvals"), want) {
							card = m
							return true
						}
					}
					return false
				})
				return card
			}
			first := card("0/2")
			id := first.Field("Operation")
			if code := b.Post("/api/console/actions", map[string]string{"user": "bob", "message_id": first.ID, "action_id": first.Button("Approve")}); code != 202 {
				t.Fatalf("bob approve: HTTP %d", code)
			}
			b.WaitFor("bob's approval to count", func() bool {
				return b.HasMessage("ops", func(m servetest.Message) bool { return strings.Contains(m.Text, "approved by bob (1/2)") })
			})

			must(t, b.Cmd.Process.Signal(syscall.SIGKILL))
			_ = b.Cmd.Wait()
			b.Start()
			t.Cleanup(func() { _ = b.Cmd.Process.Signal(syscall.SIGTERM); _ = b.Cmd.Wait() })

			again := card("1/2 — approved by bob")
			if again.Field("Operation") != id {
				t.Fatalf("the re-posted card is of %q, want %s", again.Field("Operation"), id)
			}
			b.WaitFor("the thread line saying why the card is back", func() bool {
				return b.HasMessage("ops", func(m servetest.Message) bool {
					return strings.Contains(m.Text, "talosbot restarted while this request awaited approval") && strings.Contains(m.Text, "/talos approve "+id)
				})
			})
			if got := c.Calls("cp-1", "Upgrade") + c.Calls("worker-1", "Upgrade"); got != 0 {
				t.Fatalf("one approval of two upgraded %d nodes", got)
			}
			switch how {
			case "click":
				if code := b.Post("/api/console/actions", map[string]string{"user": "dave", "message_id": again.ID, "action_id": again.Button("Approve")}); code != 202 {
					t.Fatalf("dave approve: HTTP %d", code)
				}
			case "typed":
				b.Command("dave", "ops", "/talos approve "+id)
			}
			if st := b.AwaitEnd("ops", id, 3*time.Minute); st != "succeeded" {
				t.Fatalf("the upgrade ended %s; bot log:\n%s", st, b.Stderr)
			}
			for _, n := range c.Nodes() {
				if got := c.Calls(n.Name, "Upgrade"); got != 1 {
					t.Errorf("%s was upgraded %d times, want once", n.Name, got)
				}
			}
		})
	}
}
