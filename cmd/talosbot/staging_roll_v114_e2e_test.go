package main

import (
	"context"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/talosbot/talosbot/internal/servetest"
	"github.com/talosbot/talosbot/internal/testenv"
	"github.com/talosbot/talosbot/sim"
)

// TestStagingRollV112ToV114: through the real process, `/talos upgrade talos v1.14.1 staging` on
// a staging cluster at v1.12.6 (releases v1.12.6, v1.13.9, v1.14.0, v1.14.1 known) plans the two
// hops v1.13.9 → v1.14.1 and succeeds. The sim serves each node by the version it runs, so the
// roll crosses mixed versions: hop 1 reaches the v1.12 nodes through the legacy
// MachineService.Upgrade (v1.12 has no LifecycleService), hop 2 the v1.13 nodes through
// LifecycleService.Upgrade; each node is upgraded once per hop and ends on v1.14.1.
func TestStagingRollV112ToV114(t *testing.T) {
	// Waits on processes and the sim's reboots, not the CPU: runs beside the package's other slow tests.
	t.Parallel()
	if testing.Short() {
		t.Skip("runs talosbot serve through a two-hop roll")
	}

	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()

	// A v1.13+ node is drained before its reboot, so the cluster has a Kubernetes side. The bot
	// is given no kubeconfig: it drains with the one the Talos API serves, as talosctl does.
	kube := testenv.StartKube(t)
	dir := t.TempDir()
	c, err := sim.Start(ctx, sim.Options{Dir: filepath.Join(dir, "sim"), Name: "staging", ControlPlanes: 1, Workers: 1,
		TalosVersion: "v1.12.6", RebootDelay: 100 * time.Millisecond, Kube: kube.Client, Kubeconfig: kube.Kubeconfig, StaticPods: true})
	must(t, err)
	t.Cleanup(func() { _ = c.Close() })

	b := servetest.Config{Dir: dir, Clusters: []servetest.Cluster{{Name: "staging", Sim: c, Declared: "talos_version: v1.12.6"}},
		Releases: "{talos: [v1.12.6, v1.13.9, v1.14.0, v1.14.1], kubernetes: [1.35.2, 1.36.3]}"}.Bot(t, talosbotBinary(t))
	b.Start()
	t.Cleanup(func() { _ = b.Cmd.Process.Signal(syscall.SIGTERM); _ = b.Cmd.Wait() })

	b.Command("alice", "ops", "/talos upgrade talos v1.14.1 staging")

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

	id := op.Field("Operation")
	if st := b.AwaitEnd("ops", id, 6*time.Minute); st != "succeeded" {
		t.Fatalf("the staging roll to v1.14.1 ended %q; bot log:\n%s", st, b.Stderr)
	}

	var text strings.Builder

	for _, m := range b.Messages("ops") {
		if m.Field("Operation") == id {
			text.WriteString(m.Text + "\n")
		}
	}

	if !strings.Contains(text.String(), "v1.13.9 → v1.14.1") {
		t.Errorf("the operation's messages do not name the two hops v1.13.9 → v1.14.1:\n%s", text.String())
	}

	for _, n := range c.Nodes() {
		if v := c.NodeVersion(n.Name); v != "v1.14.1" {
			t.Errorf("%s runs %s after the roll, want v1.14.1", n.Name, v)
		}

		legacy, lifecycle := c.Calls(n.Name, "/machine.MachineService/Upgrade"), c.Calls(n.Name, "/machine.LifecycleService/Upgrade")
		if legacy != 1 || lifecycle != 1 {
			t.Errorf("%s: %d legacy and %d LifecycleService upgrades, want one of each (hop 1 on v1.12.6, hop 2 on v1.13.9)", n.Name, legacy, lifecycle)
		}
	}
}
