package gate

import (
	"context"
	"strings"
	"testing"
	"time"

	machineapi "github.com/siderolabs/talos/pkg/machinery/api/machine"
	"github.com/talosbot/talosbot/plugins/cluster"
	"google.golang.org/grpc"
	"google.golang.org/protobuf/types/known/emptypb"
)

// TestGateReportsOneLinePerRunbookItem is R2: the gate has one probe per
// item of the runbook's health gate (Talos version on all nodes, cluster
// health, etcd service on each control plane, etcd status, Kubernetes
// nodes, pods in all namespaces, Flux Kustomizations and HelmReleases),
// plus R3's PodDisruptionBudget stop, and each is its own line of the
// result, even when the cluster does not answer.
func TestGateReportsOneLinePerRunbookItem(t *testing.T) {
	res := Run(context.Background(), &cluster.Clients{Machine: slowMachine{}, Health: slowHealth{}}, threeCP(), Options{Timeout: 300 * time.Millisecond})
	items := []string{"Talos version", "Cluster health", "Control-plane services", "etcd status",
		"Kubernetes nodes", "Pods", "Flux", "PodDisruptionBudgets"}
	lines := res.Lines()
	for _, item := range items {
		n := 0
		for _, p := range res.Probes {
			if p.Title == item {
				n++
			}
		}
		if n != 1 {
			t.Errorf("runbook item %q: %d probe results, want exactly 1", item, n)
		}
		found := false
		for _, l := range lines {
			found = found || strings.Contains(l, item+":")
		}
		if !found {
			t.Errorf("runbook item %q has no line of its own in:\n%s", item, strings.Join(lines, "\n"))
		}
	}
}

// TestGateFailsWithEveryReason is R3: the gate is pass/fail, and a failed
// gate lists every failing probe's reason, each named by its probe.
func TestGateFailsWithEveryReason(t *testing.T) {
	res := Run(context.Background(), &cluster.Clients{Machine: slowMachine{}, Health: slowHealth{}}, threeCP(),
		Options{Timeout: 300 * time.Millisecond, RequireKubernetes: true})
	if res.Passed || res.Err() == nil {
		t.Fatalf("a cluster that answers nothing passed the gate: %s", res.Summary())
	}
	var failed []string
	for _, p := range res.Probes {
		if p.Status == StatusFail {
			failed = append(failed, p.Title)
		}
	}
	if len(failed) == 0 || len(res.Reasons) != len(failed) {
		t.Fatalf("%d failing probes %v, %d reasons %v", len(failed), failed, len(res.Reasons), res.Reasons)
	}
	for _, title := range failed {
		if !strings.Contains(res.Err().Error(), title+": ") {
			t.Errorf("the gate's error does not name the failing probe %q: %v", title, res.Err())
		}
	}
	if !strings.Contains(res.Err().Error(), "(R3)") {
		t.Errorf("the gate's error does not cite R3: %v", res.Err())
	}
}

// hungMachine is a node whose Version call never returns, whatever its
// context says (a wedged connection): only the gate's own deadline ends
// the wait for it.
type hungMachine struct {
	slowMachine // every other call ends with its context
	release     chan struct{}
}

func (h hungMachine) Version(context.Context, *emptypb.Empty, ...grpc.CallOption) (*machineapi.VersionResponse, error) {
	<-h.release
	return &machineapi.VersionResponse{}, nil
}

// TestGateAnswersWhileANodeHangs is R24: the bot's own checks work while
// the cluster (or one wedged node) does not answer. The gate returns, and
// fails naming the probe that got no answer, instead of waiting for the
// cluster.
func TestGateAnswersWhileANodeHangs(t *testing.T) {
	h := hungMachine{release: make(chan struct{})}
	t.Cleanup(func() { close(h.release) })
	done := make(chan *Result, 1)
	go func() {
		done <- Run(context.Background(), &cluster.Clients{Machine: h, Health: slowHealth{}}, threeCP(), Options{Timeout: 300 * time.Millisecond})
	}()
	select {
	case res := <-done:
		if res.Passed {
			t.Fatalf("gate passed with a hung node: %s", res.Summary())
		}
		if !strings.Contains(strings.Join(res.Reasons, "; "), "Talos version: no answer within the gate timeout") {
			t.Fatalf("the hung probe is not named: %v", res.Reasons)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("the gate did not return while a node hangs: it depends on the cluster answering")
	}
}
