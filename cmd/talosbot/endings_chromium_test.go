package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/talosbot/talosbot/internal/browsertest"
	"github.com/talosbot/talosbot/internal/servetest"
)

// TestServeEndingsInChromium runs `talosbot serve` with the engine tests'
// plugin on a three-node staging cluster and looks at the console in real
// Chromium, as an operator would (PNGs under TALOSBOT_ARTIFACTS):
//   - a roll cancelled on its second node ends with every node's final state,
//     "mixed versions" and the next command as a button, no step left running;
//   - a roll killed with the bot (SIGKILL) is posted to the channel after the
//     restart with Resume and Abandon;
//   - status with a freeze names who froze it, why and since when, and the
//     versions the status provider read.
func TestServeEndingsInChromium(t *testing.T) {
	// Waits on processes and the sim's reboots, not the CPU: runs beside the package's other slow tests.
	t.Parallel()
	if testing.Short() {
		t.Skip("starts talosbot serve and Chromium")
	}
	browsertest.Chromium(t)
	dir := t.TempDir()
	plugin, sum := buildEnginePlugin(t)
	b := servetest.Config{Dir: dir, Clusters: []servetest.Cluster{{Endpoints: []string{"127.0.0.1"}, Talosconfig: []byte("context: e2e\n"), Nodes: []string{
		"{name: cp-1, address: 127.0.0.1, role: controlplane, host: pve1}",
		"{name: cp-2, address: 127.0.0.2, role: controlplane, host: pve1}",
		"{name: cp-3, address: 127.0.0.3, role: controlplane, host: pve1}",
	},
		// What the test plugin's status provider reports (its "versions" command).
		Declared: `versions: "Talos v1.13.9 (3 nodes),Kubernetes v1.36.3"`}}, Extra: fmt.Sprintf("plugins:\n  external: [{name: eng, path: %s, sha256: %s}]\n", plugin, sum)}.Bot(t, talosbotBinary(t))
	addr := b.Addr
	b.Start()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	open := func() *browsertest.Page {
		p := browsertest.Open(t, ctx, "http://"+addr+"/#token="+b.Tokens["alice"])
		p.WaitConnected()
		return p
	}
	opOf := func(text string) string {
		var id string
		b.WaitForWithin("the roll's second node to run", time.Minute, func() bool {
			return b.HasMessage("ops", func(m servetest.Message) bool {
				if strings.Contains(m.Title, "/talos roll") && m.Field("State") == "running" && strings.Contains(m.Text, "cp-2") && strings.Contains(m.Text, text) {
					id = m.Field("Operation")
					return true
				}
				return false
			})
		})
		return id
	}

	// 1. Cancelled on its second node.
	vf := filepath.Join(dir, "versions")
	p := open()
	p.SendCommand("/talos roll v2 staging --mode nodes-wait --drift " + vf)
	id := opOf("running")
	p.SendCommand("/talos cancel " + id)
	b.WaitForWithin("the cancelled ending", time.Minute, func() bool {
		return b.HasMessage("ops", func(m servetest.Message) bool {
			return m.Field("Operation") == id && m.Field("State") == "cancelled" && strings.Contains(m.Text, "mixed versions") && len(m.Buttons) > 0
		})
	})
	p.WaitText(`#messages`, "cp-1: done, at v2", "cp-2: stopped, version unknown", "cp-3: not started, at v1",
		"the cluster is at mixed versions (v2, unknown, v1)", "Run again (finishes the rest)")
	for _, m := range b.Messages("ops") {
		if m.Field("Operation") == id && strings.Contains(m.Text, "⏳") {
			t.Fatalf("the cancelled roll still shows a running step:\n%s", m.Text)
		}
	}
	p.Screenshot("ending-cancelled-mixed-versions")

	// 2. Killed with the bot; after the restart the interruption is posted.
	must(t, os.Remove(vf))
	p.SendCommand("/talos roll v2 staging --mode nodes-wait --drift " + vf)
	b.WaitForWithin("the second roll's cp-2 to run", time.Minute, func() bool {
		return b.HasMessage("ops", func(m servetest.Message) bool {
			return m.Field("Operation") != id && m.Field("State") == "running" && strings.Contains(m.Text, "cp-2")
		})
	})
	var id2 string
	for _, m := range b.Messages("ops") {
		if m.Field("State") == "running" {
			id2 = m.Field("Operation")
		}
	}
	must(t, b.Cmd.Process.Signal(syscall.SIGKILL))
	_ = b.Cmd.Wait()
	b.Start()
	p = open()
	p.WaitText(`#messages`, "interrupted · "+id2, "was running when talosbot stopped", "cp-1: done, at v2", "cp-2: stopped",
		"/talos resume "+id2, "/talos abandon "+id2)
	if !b.HasMessage("ops", func(m servetest.Message) bool {
		return strings.Contains(m.Text, "interrupted · `"+id2+"`") && len(m.Buttons) == 2 && m.Buttons[0].Label == "Resume" && m.Buttons[1].Label == "Abandon"
	}) {
		t.Fatalf("no interruption post with Resume and Abandon: %+v", b.Messages("ops"))
	}
	p.Screenshot("ending-interruption-post")

	// 3. Status with a freeze.
	p.SendCommand(`/talos freeze staging "etcd restore drill"`)
	p.SendCommand("/talos status staging")
	p.WaitText(`#messages`, "frozen by alice since", `"etcd restore drill"`, "/talos unfreeze staging", "lock: held by "+id2,
		"/talos resume "+id2, "versions: Talos v1.13.9 (3 nodes) · Kubernetes v1.36.3")
	p.Screenshot("status-frozen")
	_ = b.Cmd.Process.Signal(syscall.SIGTERM)
	_ = b.Cmd.Wait()
}
