package main

import (
	"context"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/talosbot/talosbot/internal/servetest"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/talosbot/talosbot/internal/testenv"
	"github.com/talosbot/talosbot/sim"
)

// TestKubernetesUpgradeResumesAfterSIGKILL: `talosbot serve` is killed while
// a Kubernetes upgrade works on the second control plane's kube-apiserver; after
// a restart and /talos resume, the first control plane's kube-apiserver is not
// configured again and the upgrade completes.
func TestKubernetesUpgradeResumesAfterSIGKILL(t *testing.T) {
	// Waits on processes and the sim's reboots, not the CPU: runs beside the package's other slow tests.
	t.Parallel()
	slow(t)
	kube := testenv.StartKube(t)
	ctx := context.Background()
	dir := t.TempDir()
	c, err := sim.Start(ctx, sim.Options{Dir: filepath.Join(dir, "sim"), Name: "staging", ControlPlanes: 3, Workers: 1,
		TalosVersion: "v1.13.9", RebootDelay: 300 * time.Millisecond, Kube: kube.Client, Kubeconfig: kube.Kubeconfig,
		StaticPods: true, StaticPodReadyDelay: 1500 * time.Millisecond})
	must(t, err)
	t.Cleanup(func() { _ = c.Close() })
	b := servetest.Config{Dir: dir, Clusters: []servetest.Cluster{{Sim: c, Kubeconfig: kube.Kubeconfig}}, Timeouts: "{gate: 20s, node: 60s}"}.Bot(t, talosbotBinary(t))
	b.Start()
	if code := b.Post("/api/console/commands", map[string]string{"user": "alice", "channel": "ops", "text": "/talos upgrade k8s 1.36.3 staging"}); code != 202 {
		t.Fatalf("HTTP %d", code)
	}
	applies := func(node string) int { return c.Calls(node, "ApplyConfiguration") }
	// cp-1's kube-apiserver is done once cp-2's first apply (its kube-apiserver) arrives:
	// the upgrade goes component by component across the control planes, as talosctl.
	b.WaitFor("cp-2's kube-apiserver apply", func() bool { return applies("cp-2") >= 1 })
	cp1 := applies("cp-1")
	must(t, b.Cmd.Process.Signal(syscall.SIGKILL))
	_ = b.Cmd.Wait()
	var opID string
	b.Start()
	t.Cleanup(func() { _ = b.Cmd.Process.Signal(syscall.SIGTERM); _ = b.Cmd.Wait() })
	if code := b.Post("/api/console/commands", map[string]string{"user": "alice", "channel": "ops", "text": "/talos status staging"}); code != 202 {
		t.Fatalf("HTTP %d", code)
	}
	b.WaitFor("the interrupted operation in /talos status", func() bool {
		for _, m := range b.Messages("ops") {
			if i := strings.Index(m.Text, "/talos resume "); i >= 0 {
				opID = strings.Fields(m.Text[i+len("/talos resume "):])[0]
				opID = strings.Trim(opID, "`")
				return true
			}
		}
		return false
	})
	if code := b.Post("/api/console/commands", map[string]string{"user": "alice", "channel": "ops", "text": "/talos resume " + opID}); code != 202 {
		t.Fatalf("HTTP %d", code)
	}
	if st := b.AwaitEnd("ops", opID, 3*time.Minute); st != "succeeded" {
		t.Fatalf("resumed upgrade: %s; log:\n%s", st, b.Stderr)
	}
	// After the kill cp-1 gets at most its controller-manager, scheduler, kube-proxy
	// and kubelet applies; its kube-apiserver, already in place, is not applied again.
	if got := applies("cp-1") - cp1; got > 4 {
		t.Fatalf("cp-1 got %d more applies after the resume, want at most 4 (controller-manager, scheduler, kube-proxy, kubelet)", got)
	}
	for _, n := range c.Nodes() {
		node, err := kube.Client.CoreV1().Nodes().Get(ctx, n.Name, metav1.GetOptions{})
		must(t, err)
		if v := node.Status.NodeInfo.KubeletVersion; v != "v1.36.3" {
			t.Errorf("%s kubelet %s, want v1.36.3", n.Name, v)
		}
	}
}
