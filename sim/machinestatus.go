package sim

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	k8sruntime "k8s.io/apimachinery/pkg/runtime"

	machineapi "github.com/siderolabs/talos/pkg/machinery/api/machine"
	"github.com/siderolabs/talos/pkg/machinery/resources/k8s"
	"github.com/siderolabs/talos/pkg/machinery/resources/network"
	"github.com/siderolabs/talos/pkg/machinery/resources/runtime"
	timeres "github.com/siderolabs/talos/pkg/machinery/resources/time"
	"github.com/siderolabs/talos/pkg/machinery/resources/v1alpha1"
)

// This file is MachineStatus readiness as Talos v1.13.9 computes it
// (internal/app/machined/pkg/controllers/runtime/machine_status.go): while booting or running,
// the checks "time", "network", "services", "staticPods" and "nodeReady", in that order, each an
// unmet condition with its reason; and MachineStatusPublisher
// (controllers/runtime/machine_status_publisher.go), which publishes a MachineStatusEvent each
// time the resource changes. Fault unmetConditions keeps named checks unmet.

// machineStatusConditions are MachineStatusController's readiness checks, in its order.
func machineStatusConditions() []string {
	return []string{"time", "network", "services", "staticPods", "nodeReady"}
}

// unmetConditionsError validates fault unmetConditions ("services,staticPods").
func unmetConditionsError(list string) error {
	if list == "" {
		return nil
	}

	for c := range strings.SplitSeq(list, ",") {
		if !slices.Contains(machineStatusConditions(), strings.TrimSpace(c)) {
			return fmt.Errorf("sim: unmetConditions %q: %q is not a MachineStatus condition; use a comma-separated list of %s",
				list, c, strings.Join(machineStatusConditions(), ", "))
		}
	}

	return nil
}

// holdsUnmet reports whether fault unmetConditions names condition.
func (f Fault) holdsUnmet(condition string) bool {
	for c := range strings.SplitSeq(f.UnmetConditions, ",") {
		if strings.TrimSpace(c) == condition {
			return true
		}
	}

	return false
}

// timeStatus is time.SyncController's status: not synced under fault unmetConditions "time"
// (an NTP server that does not answer).
func (n *node) timeStatus() *timeres.Status {
	ts := timeres.NewStatus()
	ts.TypedSpec().Synced = !n.currentFault().holdsUnmet("time")

	return ts
}

// networkStatus is network.StatusController's status: connectivity not ready under fault
// unmetConditions "network" (no default route).
func (n *node) networkStatus() *network.Status {
	ns := network.NewStatus(network.NamespaceName, network.StatusID)
	*ns.TypedSpec() = network.StatusSpec{AddressReady: true, ConnectivityReady: !n.currentFault().holdsUnmet("network"), HostnameReady: true, EtcFilesReady: true}

	return ns
}

// staticPodFault is the static pod status a control plane reports under fault unmetConditions
// "staticPods" when the sim runs no kubelet of its own for it (no Options.Kube): the scheduler's
// pod Pending, as a kubelet that cannot start it reports.
func (n *node) staticPodFault(pods []*k8s.StaticPodStatus) []*k8s.StaticPodStatus {
	if !n.currentFault().holdsUnmet("staticPods") {
		return pods
	}

	name := staticPodNamespace + "/" + StaticPodName("kube-scheduler", n.cosiNodename())
	u, err := k8sruntime.DefaultUnstructuredConverter.ToUnstructured(&corev1.PodStatus{Phase: corev1.PodPending})
	if err != nil {
		return pods
	}

	out := slices.DeleteFunc(slices.Clone(pods), func(p *k8s.StaticPodStatus) bool { return p.Metadata().ID() == name })
	r := k8s.NewStaticPodStatus(k8s.NamespaceName, name)
	r.TypedSpec().PodStatus = u

	return append(out, r)
}

// unmetConditions runs MachineStatusController's checks on the node's resources.
func (n *node) unmetConditions(ts *timeres.Status, ns *network.Status, services []*v1alpha1.Service, pods []*k8s.StaticPodStatus,
	nodeStatus *k8s.NodeStatus) []runtime.UnmetCondition {
	var unmet []runtime.UnmetCondition

	if !ts.TypedSpec().Synced {
		unmet = append(unmet, runtime.UnmetCondition{Name: "time", Reason: "time is not synced"})
	}

	var waiting []string

	for _, c := range []struct {
		ok   bool
		name string
	}{
		{ns.TypedSpec().AddressReady, "address"}, {ns.TypedSpec().ConnectivityReady, "connectivity"},
		{ns.TypedSpec().EtcFilesReady, "etc-files"}, {ns.TypedSpec().HostnameReady, "hostname"},
	} {
		if !c.ok {
			waiting = append(waiting, c.name)
		}
	}

	if len(waiting) > 0 {
		unmet = append(unmet, runtime.UnmetCondition{Name: "network", Reason: "waiting on: " + strings.Join(waiting, ", ")})
	}

	if problems := servicesProblems(services, n.machineType()); problems != "" {
		unmet = append(unmet, runtime.UnmetCondition{Name: "services", Reason: problems})
	}

	if problems := staticPodProblems(pods); problems != "" {
		unmet = append(unmet, runtime.UnmetCondition{Name: "staticPods", Reason: problems})
	}

	switch {
	case nodeStatus == nil:
		unmet = append(unmet, runtime.UnmetCondition{Name: "nodeReady", Reason: fmt.Sprintf("node %q status is not available yet", n.cosiNodename())})
	case !nodeStatus.TypedSpec().NodeReady || n.currentFault().holdsUnmet("nodeReady"):
		unmet = append(unmet, runtime.UnmetCondition{Name: "nodeReady", Reason: fmt.Sprintf("node %q is not ready", n.cosiNodename())})
	}

	return unmet
}

// readiness is the MachineStatus of a running node, read from its resources now.
func (n *node) readiness(ctx context.Context) (bool, []runtime.UnmetCondition) {
	services := n.serviceResources(ctx)
	unmet := n.unmetConditions(n.timeStatus(), n.networkStatus(), services, n.staticPodFault(n.staticPodStatuses(ctx)), n.nodeStatus(ctx, services))

	return len(unmet) == 0, unmet
}

// readinessPoll is how often a running node that is not ready reads its resources again. Talos
// reacts to each input change; the sim reads them on this tick until the node is ready.
const readinessPoll = 100 * time.Millisecond

// publishReadiness is MachineStatusPublisher for a node whose boot sequence ended: a RUNNING
// MachineStatusEvent with the readiness the controller computes, then one more on every change,
// until the node is ready, goes down or the cluster closes. A node that booted is not ready until
// every check passes ("ready is not booted"). The first event is published before it returns;
// a node that is not ready yet is followed in the background.
func (n *node) publishReadiness(ctx context.Context) {
	var last string

	if n.publishReadinessOnce(ctx, &last) {
		return
	}

	n.c.goBackground(func(ctx context.Context) {
		for {
			t := time.NewTimer(readinessPoll)

			select {
			case <-ctx.Done():
				t.Stop()

				return
			case <-t.C:
			}

			if n.publishReadinessOnce(ctx, &last) {
				return
			}
		}
	})
}

// publishReadinessOnce publishes the readiness if it changed since last; it reports true when
// there is nothing more to follow (ready, or the node is no longer running).
func (n *node) publishReadinessOnce(ctx context.Context, last *string) bool {
	n.mu.Lock()
	running := n.state == stateRunning
	n.mu.Unlock()

	if !running || ctx.Err() != nil {
		return true
	}

	ready, unmet := n.readiness(ctx)

	if key := fmt.Sprint(ready, unmet); key != *last {
		*last = key
		st := &machineapi.MachineStatusEvent_MachineStatus{Ready: ready}

		for _, u := range unmet {
			st.UnmetConditions = append(st.UnmetConditions, &machineapi.MachineStatusEvent_MachineStatus_UnmetCondition{Name: u.Name, Reason: u.Reason})
		}

		n.mu.Lock()
		n.stage = machineapi.MachineStatusEvent_RUNNING
		n.mu.Unlock()

		n.events.publish("", &machineapi.MachineStatusEvent{Stage: machineapi.MachineStatusEvent_RUNNING, Status: st})
	}

	return ready
}

// readinessChanged re-runs the publisher after a fault that holds conditions changed on a
// running node.
func (n *node) readinessChanged(old, f Fault) {
	if old.UnmetConditions == f.UnmetConditions {
		return
	}

	n.mu.Lock()
	running := n.state == stateRunning && n.stage == machineapi.MachineStatusEvent_RUNNING
	n.mu.Unlock()

	if running {
		n.publishReadiness(n.c.ctx)
	}
}
