package sim_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"
	"testing"
	"time"

	clusterapi "github.com/siderolabs/talos/pkg/machinery/api/cluster"
	"github.com/siderolabs/talos/pkg/machinery/api/common"
	machineapi "github.com/siderolabs/talos/pkg/machinery/api/machine"
	"github.com/siderolabs/talos/pkg/machinery/client"
	"go.etcd.io/etcd/client/v3/concurrency"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/emptypb"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/kubernetes"

	"github.com/talosbot/talosbot/internal/testenv"
	"github.com/talosbot/talosbot/sim"
)

// awaitEvent reads events until pred matches one, failing after timeout.
func awaitEvent(t *testing.T, ch <-chan client.EventResult, timeout time.Duration, what string, pred func(client.Event) bool) client.Event {
	t.Helper()

	deadline := time.After(timeout)

	for {
		select {
		case <-deadline:
			t.Fatalf("no event: %s within %s", what, timeout)
		case ev := <-ch:
			if ev.Error != nil {
				t.Fatalf("waiting for %s: event stream: %v", what, ev.Error)
			}

			if pred(ev.Event) {
				return ev.Event
			}
		}
	}
}

func isTask(name string, action machineapi.TaskEvent_Action) func(client.Event) bool {
	return func(e client.Event) bool {
		p, ok := e.Payload.(*machineapi.TaskEvent)

		return ok && p.Task == name && p.Action == action
	}
}

func isLocked(seq string) func(client.Event) bool {
	return func(e client.Event) bool {
		p, ok := e.Payload.(*machineapi.SequenceEvent)

		return ok && p.Sequence == seq && p.Action == machineapi.SequenceEvent_NOOP && p.GetError().GetCode() == common.Code_LOCKED
	}
}

func waitVersion(ctx context.Context, t *testing.T, cli *client.Client, ip, want string) {
	t.Helper()

	eventually(t, 60*time.Second, ip+" runs "+want, func() error {
		vctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		defer cancel()

		v, err := version(vctx, cli, ip)
		if err == nil && v != want {
			err = errors.New("still " + v)
		}

		return err
	})
}

// The four names of a node are independent: inventory, Talos hostname, Kubernetes Node name and
// etcd member name; everything keyed by one of them uses the right one.
func TestNamesCanAllDiffer(t *testing.T) {
	t.Parallel()
	slow(t)
	kube := testenv.StartKube(t)
	naming := func(info sim.NodeInfo) sim.NodeNames {
		return sim.NodeNames{Hostname: "host-" + info.Name, NodeName: "k8s-" + info.Name + ".example", EtcdMember: "etcd-" + info.Name}
	}

	c, cli := startSim(t, sim.Options{ControlPlanes: 3, Workers: 1, Kube: kube.Client, Kubeconfig: kube.Kubeconfig,
		StaticPods: true, Naming: naming, RebootDelay: 200 * time.Millisecond, HealthCheckInterval: 200 * time.Millisecond})
	ctx := t.Context()

	for _, n := range c.Nodes() {
		if n.Hostname != "host-"+n.Name || n.NodeName != "k8s-"+n.Name+".example" || n.EtcdMember != "etcd-"+n.Name {
			t.Fatalf("node info %+v", n)
		}

		resp, err := cli.MachineClient.Hostname(client.WithNode(ctx, n.IP), &emptypb.Empty{})
		if err != nil || resp.Messages[0].Hostname != n.Hostname {
			t.Fatalf("Hostname RPC on %s: %v %v", n.Name, resp, err)
		}

		kn, err := kube.Client.CoreV1().Nodes().Get(ctx, n.NodeName, metav1.GetOptions{})
		if err != nil {
			t.Fatalf("Node %s: %v", n.NodeName, err)
		}

		if kn.Labels["kubernetes.io/hostname"] != n.NodeName {
			t.Fatalf("Node %s hostname label %q", n.NodeName, kn.Labels["kubernetes.io/hostname"])
		}
	}

	ml, err := cli.EtcdMemberList(client.WithNode(ctx, nodeIP(t, c, "cp-1")), &machineapi.EtcdMemberListRequest{})
	if err != nil {
		t.Fatal(err)
	}

	var members []string
	for _, m := range ml.Messages[0].Members {
		members = append(members, m.Hostname)
	}

	slices.Sort(members)

	if want := []string{"etcd-cp-1", "etcd-cp-2", "etcd-cp-3"}; !slices.Equal(members, want) {
		t.Fatalf("etcd members %v, want %v", members, want)
	}

	// A reboot flips the right Node's Ready, and the full health check passes with the names apart.
	w1 := nodeIP(t, c, "worker-1")
	before := bootID(ctx, t, cli, w1)

	if err := cli.Reboot(client.WithNode(ctx, w1)); err != nil {
		t.Fatal(err)
	}

	eventually(t, 30*time.Second, "worker-1 rebooted", func() error {
		vctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		defer cancel()

		r, err := cli.Read(client.WithNode(vctx, w1), "/proc/sys/kernel/random/boot_id")
		if err != nil {
			return err
		}

		b, err := io.ReadAll(r)
		if err == nil && strings.TrimSpace(string(b)) == before {
			err = errors.New("same boot")
		}

		return err
	})

	msgs, err := healthCheck(ctx, cli, nodeIP(t, c, "cp-1"), 30*time.Second, ips(c, sim.RoleControlPlane), ips(c, sim.RoleWorker))
	if err != nil {
		t.Fatalf("health check with distinct names: %v\n%s", err, strings.Join(msgs, "\n"))
	}
}

// healthCheck runs ClusterService.HealthCheck on node and returns its progress lines.
func healthCheck(ctx context.Context, cli *client.Client, node string, wait time.Duration, cps, workers []string) ([]string, error) {
	ctx, cancel := context.WithTimeout(ctx, wait+10*time.Second)
	defer cancel()

	stream, err := cli.ClusterHealthCheck(client.WithNode(ctx, node), wait, &clusterapi.ClusterInfo{ControlPlaneNodes: cps, WorkerNodes: workers})
	if err != nil {
		return nil, err
	}

	var msgs []string

	for {
		p, err := stream.Recv()
		if errors.Is(err, io.EOF) {
			return msgs, nil
		}

		if err != nil {
			return msgs, err
		}

		msgs = append(msgs, p.GetMessage())
	}
}

// HealthCheck runs pkg/cluster/check's default checks in their order, on control planes only,
// with node infos as IP literals; an unexpected Kubernetes Node or a cordoned one fails it.
func TestHealthCheck(t *testing.T) {
	t.Parallel()
	slow(t)
	kube := testenv.StartKube(t)
	c, cli := startSim(t, sim.Options{ControlPlanes: 3, Workers: 1, Kube: kube.Client, Kubeconfig: kube.Kubeconfig,
		StaticPods: true, HealthCheckInterval: 200 * time.Millisecond})
	ctx := t.Context()
	cp1, w1 := nodeIP(t, c, "cp-1"), nodeIP(t, c, "worker-1")
	cps, workers := ips(c, sim.RoleControlPlane), ips(c, sim.RoleWorker)

	_, err := healthCheck(ctx, cli, w1, 5*time.Second, cps, workers)
	if status.Code(err) != codes.Unimplemented || !strings.Contains(err.Error(), "cluster health check is only available on control plane nodes") {
		t.Fatalf("health check on a worker: %v", err)
	}

	msgs, err := healthCheck(ctx, cli, cp1, 30*time.Second, cps, workers)
	if err != nil {
		t.Fatalf("health check: %v\n%s", err, strings.Join(msgs, "\n"))
	}

	if want := fmt.Sprintf("discovered nodes: %q", append(slices.Clone(cps), workers...)); msgs[0] != want {
		t.Fatalf("first line %q, want %q", msgs[0], want)
	}

	var done []string

	for _, m := range msgs {
		if name, ok := strings.CutSuffix(m, ": OK"); ok {
			done = append(done, strings.TrimPrefix(name, "waiting for "))
		}
	}

	wantOrder := []string{
		"etcd to be healthy", "etcd members to be consistent across nodes", "etcd members to be control plane nodes",
		"apid to be ready", "all nodes memory sizes", "all nodes disk sizes", "no diagnostics", "kubelet to be healthy",
		"all nodes to finish boot sequence", "all k8s nodes to report", "all control plane static pods to be running",
		"all control plane components to be ready", "all k8s nodes to report ready", "all k8s nodes to report schedulable",
	}
	if !slices.Equal(done, wantOrder) {
		t.Fatalf("checks passed %v, want %v", done, wantOrder)
	}

	for _, skipped := range []string{"waiting for kube-proxy to report ready: SKIP", "waiting for coredns to report ready: SKIP"} {
		if !slices.Contains(msgs, skipped) {
			t.Fatalf("missing %q in %v", skipped, msgs)
		}
	}

	if _, err := healthCheck(ctx, cli, cp1, 5*time.Second, []string{"cp-1"}, nil); err == nil || !strings.Contains(err.Error(), "ParseAddr") {
		t.Fatalf("node names instead of IPs: %v", err)
	}

	// A Node Talos does not know about.
	stray := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "stray"}}
	if _, err := kube.Client.CoreV1().Nodes().Create(ctx, stray, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}

	stray.Status.Addresses = []corev1.NodeAddress{{Type: corev1.NodeInternalIP, Address: "10.9.9.9"}}
	if _, err := kube.Client.CoreV1().Nodes().UpdateStatus(ctx, stray, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}

	msgs, err = healthCheck(ctx, cli, cp1, 2*time.Second, cps, workers)
	if status.Code(err) != codes.DeadlineExceeded || !slices.Contains(msgs, `waiting for all k8s nodes to report: unexpected nodes with IPs ["10.9.9.9"]`) {
		t.Fatalf("unexpected node: %v\n%s", err, strings.Join(msgs, "\n"))
	}

	if err := kube.Client.CoreV1().Nodes().Delete(ctx, "stray", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}

	cordon(ctx, t, kube.Client, "worker-1", true)

	msgs, err = healthCheck(ctx, cli, cp1, 2*time.Second, cps, workers)
	if status.Code(err) != codes.DeadlineExceeded || !slices.Contains(msgs, "waiting for all k8s nodes to report schedulable: some nodes are not schedulable: [worker-1]") {
		t.Fatalf("cordoned node: %v\n%s", err, strings.Join(msgs, "\n"))
	}
}

func cordon(ctx context.Context, t *testing.T, kc kubernetes.Interface, name string, v bool) {
	t.Helper()

	n, err := kc.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}

	n.Spec.Unschedulable = v
	if _, err := kc.CoreV1().Nodes().Update(ctx, n, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
}

// A second sequence is acknowledged and then refused by a LOCKED event without the caller's
// actor id; reboot takes over a reset but not an upgrade.
func TestSecondSequenceIsLocked(t *testing.T) {
	t.Parallel()
	slow(t)
	kube := testenv.StartKube(t)
	c, cli := startSim(t, sim.Options{ControlPlanes: 1, Workers: 2, Kube: kube.Client, Kubeconfig: kube.Kubeconfig,
		RebootDelay: 200 * time.Millisecond, DrainTimeout: time.Minute})
	ctx := t.Context()
	w1, w2 := nodeIP(t, c, "worker-1"), nodeIP(t, c, "worker-2")

	// A PodDisruptionBudget holds worker-1's upgrade in its drain.
	createPodWithPDBNamed(ctx, t, kube.Client, "worker-1", "critical-1")

	events := watchEvents(ctx, t, cli, w1)

	first, err := cli.Upgrade(client.WithNode(ctx, w1), upgradeImage, false, false)
	if err != nil {
		t.Fatal(err)
	}

	awaitEvent(t, events, 10*time.Second, "drain started", isTask("cordonAndDrainNode", machineapi.TaskEvent_START))

	second, err := cli.Upgrade(client.WithNode(ctx, w1), upgradeImage, false, false)
	if err != nil {
		t.Fatalf("second upgrade must be acknowledged: %v", err)
	}

	ev := awaitEvent(t, events, 10*time.Second, "upgrade LOCKED", isLocked("upgrade"))
	if ev.ActorID != "" || second.Messages[0].ActorId == "" || second.Messages[0].ActorId == first.Messages[0].ActorId {
		t.Fatalf("LOCKED event actor %q (second ack actor %q)", ev.ActorID, second.Messages[0].ActorId)
	}

	if err := cli.Reboot(client.WithNode(ctx, w1)); err != nil {
		t.Fatal(err)
	}

	awaitEvent(t, events, 10*time.Second, "reboot LOCKED behind the upgrade", isLocked("reboot"))

	// A reset can be taken over by a reboot: the reset is cancelled and the node reboots instead
	// of being wiped.
	createPodWithPDBNamed(ctx, t, kube.Client, "worker-2", "critical-2")

	events2 := watchEvents(ctx, t, cli, w2)
	before := bootID(ctx, t, cli, w2)

	if err := cli.Reset(client.WithNode(ctx, w2), true, false); err != nil {
		t.Fatal(err)
	}

	awaitEvent(t, events2, 10*time.Second, "reset drain started", isTask("cordonAndDrainNode", machineapi.TaskEvent_START))

	rb, err := cli.MachineClient.Reboot(client.WithNode(ctx, w2), &machineapi.RebootRequest{})
	if err != nil {
		t.Fatal(err)
	}

	awaitEvent(t, events2, 10*time.Second, "reset cancelled", func(e client.Event) bool {
		p, ok := e.Payload.(*machineapi.SequenceEvent)

		return ok && p.Sequence == "reset" && p.GetError().GetCode() == common.Code_CANCELED
	})
	awaitEvent(t, events2, 10*time.Second, "reboot started", func(e client.Event) bool {
		p, ok := e.Payload.(*machineapi.SequenceEvent)

		return ok && p.Sequence == "reboot" && p.Action == machineapi.SequenceEvent_START && e.ActorID == rb.Messages[0].ActorId
	})

	eventually(t, 30*time.Second, "worker-2 back from the reboot", func() error {
		vctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		defer cancel()

		r, err := cli.Read(client.WithNode(vctx, w2), "/proc/sys/kernel/random/boot_id")
		if err != nil {
			return err
		}

		b, _ := io.ReadAll(r)
		if strings.TrimSpace(string(b)) == before {
			return errors.New("same boot")
		}

		return nil
	})
}

// createPodWithPDBNamed puts a Ready pod on node behind a PodDisruptionBudget that allows no
// disruption, so that a drain of node blocks.
func createPodWithPDBNamed(ctx context.Context, t *testing.T, kc kubernetes.Interface, node, name string) {
	t.Helper()

	labels := map[string]string{"app": name}

	_, err := kc.CoreV1().Pods("default").Create(ctx, &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default", Labels: labels},
		Spec: corev1.PodSpec{
			NodeName:   node,
			Containers: []corev1.Container{{Name: "c", Image: "registry.k8s.io/pause:3.10"}},
		},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}

	if err := testenv.SetPodRunningReady(ctx, kc, "default", name); err != nil {
		t.Fatal(err)
	}

	minAvailable := intstr.FromInt32(1)

	_, err = kc.PolicyV1().PodDisruptionBudgets("default").Create(ctx, &policyv1.PodDisruptionBudget{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default"},
		Spec:       policyv1.PodDisruptionBudgetSpec{MinAvailable: &minAvailable, Selector: &metav1.LabelSelector{MatchLabels: labels}},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}

	if err := testenv.SetPDBStatus(ctx, kc, "default", name, 0); err != nil {
		t.Fatal(err)
	}
}

// The legacy upgrade pulls and validates the installer before it acknowledges; any valid
// reference the registry has is accepted (a tag that is not a version, a digest); a single
// control plane upgrades without --preserve.
func TestLegacyUpgradeImages(t *testing.T) {
	t.Parallel()
	slow(t)
	c, cli := startSim(t, sim.Options{ControlPlanes: 1, Workers: 1, RebootDelay: 100 * time.Millisecond})
	ctx := t.Context()
	cp1, w1 := nodeIP(t, c, "cp-1"), nodeIP(t, c, "worker-1")

	_, err := cli.Upgrade(client.WithNode(ctx, w1), "ghcr.io/siderolabs/installer:no-such-tag", false, false)
	if status.Code(err) != codes.NotFound || !strings.Contains(err.Error(), `error validating installer image "ghcr.io/siderolabs/installer:no-such-tag"`) {
		t.Fatalf("unknown image: %v", err)
	}

	if _, err := cli.Upgrade(client.WithNode(ctx, w1), "Not A Reference", false, false); status.Code(err) != codes.InvalidArgument {
		t.Fatalf("malformed reference: %v", err)
	}

	pinned, err := c.PublishImage("ghcr.io/siderolabs/installer:stable", "v1.13.9")
	if err != nil {
		t.Fatal(err)
	}

	if _, err := cli.Upgrade(client.WithNode(ctx, w1), "ghcr.io/siderolabs/installer:stable", false, false); err != nil {
		t.Fatalf("non-version tag: %v", err)
	}

	waitVersion(ctx, t, cli, w1, "v1.13.9")

	// Single control plane: no "only 1 etcd member" refusal since Talos v1.8.
	if _, err := cli.Upgrade(client.WithNode(ctx, cp1), pinned, false, false); err != nil {
		t.Fatalf("digest reference on a single control plane: %v", err)
	}

	waitVersion(ctx, t, cli, cp1, "v1.13.9")
}

// LifecycleService.Upgrade runs only an installer already pulled into the namespace it names.
func TestLifecycleUpgradeNeedsPulledImage(t *testing.T) {
	t.Parallel()
	c, cli := startSim(t, sim.Options{ControlPlanes: 1, Workers: 1, TalosVersion: "v1.13.0", RebootDelay: 100 * time.Millisecond})
	ctx := t.Context()
	nctx := client.WithNode(ctx, nodeIP(t, c, "worker-1"))
	criNS := &common.ContainerdInstance{Driver: common.ContainerDriver_CRI, Namespace: common.ContainerdNamespace_NS_CRI}

	upgrade := func() error {
		up, err := cli.LifecycleClient.Upgrade(nctx, &machineapi.LifecycleServiceUpgradeRequest{
			Source: &machineapi.InstallArtifactsSource{ImageName: upgradeImage}, Containerd: systemNS,
		})
		if err != nil {
			return err
		}

		for {
			if _, err := up.Recv(); err != nil {
				if errors.Is(err, io.EOF) {
					return nil
				}

				return err
			}
		}
	}

	pull := func(ns *common.ContainerdInstance) string {
		p, err := cli.ImageClient.Pull(nctx, &machineapi.ImageServicePullRequest{ImageRef: upgradeImage, Containerd: ns})
		if err != nil {
			t.Fatal(err)
		}

		name := ""

		for {
			r, err := p.Recv()
			if errors.Is(err, io.EOF) {
				return name
			}

			if err != nil {
				t.Fatal(err)
			}

			if n := r.GetName(); n != "" {
				name = n
			}
		}
	}

	if err := upgrade(); status.Code(err) != codes.Internal || !strings.Contains(err.Error(), "not found in containerd store") {
		t.Fatalf("upgrade without a pull: %v", err)
	}

	pull(criNS)

	if err := upgrade(); status.Code(err) != codes.Internal {
		t.Fatalf("upgrade with the image in another namespace: %v", err)
	}

	if name := pull(systemNS); !strings.Contains(name, "@sha256:") {
		t.Fatalf("pulled name %q is not pinned to a digest", name)
	}

	if err := upgrade(); err != nil {
		t.Fatalf("upgrade after the pull: %v", err)
	}
}

// preserve=true skips ValidateForUpgrade and the cluster-wide upgrade mutex.
func TestPreserveSkipsEtcdChecks(t *testing.T) {
	t.Parallel()
	slow(t)
	c, cli := startSim(t, sim.Options{ControlPlanes: 3, RebootDelay: 100 * time.Millisecond})
	ctx := t.Context()
	cp1 := nodeIP(t, c, "cp-1")

	// Someone else holds the upgrade mutex.
	ecli, err := c.Etcd().Client(ctx)
	if err != nil {
		t.Fatal(err)
	}

	defer ecli.Close() //nolint:errcheck

	sess, err := concurrency.NewSession(ecli, concurrency.WithTTL(60))
	if err != nil {
		t.Fatal(err)
	}

	mu := concurrency.NewMutex(sess, "talos:v1:etcdUpgradeMutex")
	if err := mu.Lock(ctx); err != nil {
		t.Fatal(err)
	}

	if _, err := cli.Upgrade(client.WithNode(ctx, cp1), upgradeImage, false, false); err == nil || !strings.Contains(err.Error(), "failed to acquire upgrade mutex") {
		t.Fatalf("upgrade while the mutex is held: %v", err)
	}

	if err := c.Inject(ctx, "cp-3", sim.Fault{EtcdStopped: true}); err != nil {
		t.Fatal(err)
	}

	// ValidateForUpgrade would wait out a 15 s quorum check on the stopped member.
	pctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()

	if _, err := cli.UpgradeWithOptions(client.WithNode(pctx, cp1), client.WithUpgradeImage(upgradeImage), client.WithUpgradePreserve(true)); err != nil {
		t.Fatalf("preserve upgrade with the mutex held and a member stopped: %v", err)
	}

	_ = sess.Close()
}

// A stopped etcd makes local etcd calls wait for the caller's deadline; cluster-wide ones are
// answered by the other members.
func TestStoppedEtcdWaitsForDeadline(t *testing.T) {
	t.Parallel()
	slow(t)
	c, cli := startSim(t, sim.Options{ControlPlanes: 3})
	ctx := t.Context()
	cp1 := nodeIP(t, c, "cp-1")

	if err := c.Inject(ctx, "cp-1", sim.Fault{EtcdStopped: true}); err != nil {
		t.Fatal(err)
	}

	sctx, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()

	if _, err := cli.EtcdStatus(client.WithNode(sctx, cp1)); status.Code(err) != codes.DeadlineExceeded {
		t.Fatalf("etcd status with etcd stopped: %v, want DeadlineExceeded", err)
	}

	ml, err := cli.EtcdMemberList(client.WithNode(ctx, cp1), &machineapi.EtcdMemberListRequest{})
	if err != nil || len(ml.Messages[0].Members) != 3 {
		t.Fatalf("cluster-wide member list: %v %v", ml, err)
	}

	lctx, cancel2 := context.WithTimeout(ctx, time.Second)
	defer cancel2()

	if _, err := cli.EtcdMemberList(client.WithNode(lctx, cp1), &machineapi.EtcdMemberListRequest{QueryLocal: true}); status.Code(err) != codes.DeadlineExceeded {
		t.Fatalf("local member list: %v", err)
	}

	if err := c.Clear(ctx, "cp-1"); err != nil {
		t.Fatal(err)
	}

	if _, err := cli.EtcdStatus(client.WithNode(ctx, cp1)); err != nil {
		t.Fatal(err)
	}
}

// A graceful reset publishes Talos's reset sequence, stopAllServices included, and the node
// leaves etcd and stays down.
func TestGracefulResetSequence(t *testing.T) {
	t.Parallel()
	slow(t)
	c, cli := startSim(t, sim.Options{ControlPlanes: 3, HealthCheckInterval: 200 * time.Millisecond})
	ctx := t.Context()
	cp1, cp3 := nodeIP(t, c, "cp-1"), nodeIP(t, c, "cp-3")

	events := watchEvents(ctx, t, cli, cp3)

	if err := cli.Reset(client.WithNode(ctx, cp3), true, false); err != nil {
		t.Fatal(err)
	}

	var tasks []string

	for ev := range events {
		if ev.Error != nil {
			break
		}

		if p, ok := ev.Event.Payload.(*machineapi.TaskEvent); ok && p.Action == machineapi.TaskEvent_START {
			tasks = append(tasks, p.Task)
		}
	}

	want := []string{"removeAllPods", "stopDBus", "leaveEtcd", "sendResetSignal", "stopServicesForUpgrade", "unmountPodMounts",
		"unmountSystemDiskBindMounts", "unmountEphemeralPartition", "teardownLifecycle", "stopAllServices", "forceCleanup",
		"resetSystemDisk", "shutdown"}
	if !slices.Equal(tasks, want) {
		t.Fatalf("reset tasks %v, want %v", tasks, want)
	}

	ml, err := cli.EtcdMemberList(client.WithNode(ctx, cp1), &machineapi.EtcdMemberListRequest{})
	if err != nil || len(ml.Messages[0].Members) != 2 {
		t.Fatalf("members after reset: %v %v", ml, err)
	}

	// Discovery no longer lists the reset node: the cluster is healthy without it.
	hctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()

	stream, err := cli.ClusterHealthCheck(client.WithNode(hctx, cp1), 20*time.Second, &clusterapi.ClusterInfo{})
	if err != nil {
		t.Fatal(err)
	}

	for {
		if _, err := stream.Recv(); err != nil {
			if !errors.Is(err, io.EOF) {
				t.Fatalf("health after the reset: %v", err)
			}

			break
		}
	}
}

// At boot Talos uncordons only the nodes it cordoned itself (annotation talos.dev/cordoned).
func TestBootUncordonsOnlyTalosCordons(t *testing.T) {
	t.Parallel()
	slow(t)
	kube := testenv.StartKube(t)
	c, cli := startSim(t, sim.Options{ControlPlanes: 1, Workers: 1, Kube: kube.Client, Kubeconfig: kube.Kubeconfig, RebootDelay: 100 * time.Millisecond})
	ctx := t.Context()
	w1 := nodeIP(t, c, "worker-1")

	node := func() *corev1.Node {
		n, err := kube.Client.CoreV1().Nodes().Get(ctx, "worker-1", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}

		return n
	}

	// Cordoned by an operator: an upgrade (whose drain finds it cordoned already) leaves it so.
	cordon(ctx, t, kube.Client, "worker-1", true)

	if _, err := cli.Upgrade(client.WithNode(ctx, w1), upgradeImage, false, false); err != nil {
		t.Fatal(err)
	}

	waitVersion(ctx, t, cli, w1, "v1.13.9")
	eventually(t, 10*time.Second, "worker-1 Ready", func() error {
		if !nodeReady(node()) {
			return errors.New("not ready")
		}

		return nil
	})

	if n := node(); !n.Spec.Unschedulable || n.Annotations["talos.dev/cordoned"] != "" {
		t.Fatalf("operator's cordon: unschedulable=%v annotations=%v", n.Spec.Unschedulable, n.Annotations)
	}

	// Cordoned by Talos for the upgrade: uncordoned at boot.
	cordon(ctx, t, kube.Client, "worker-1", false)

	if err := cli.Rollback(client.WithNode(ctx, w1)); err != nil {
		t.Fatal(err)
	}

	waitVersion(ctx, t, cli, w1, sim.DefaultTalosVersion)

	if _, err := cli.Upgrade(client.WithNode(ctx, w1), upgradeImage, false, false); err != nil {
		t.Fatal(err)
	}

	waitVersion(ctx, t, cli, w1, "v1.13.9")
	eventually(t, 10*time.Second, "worker-1 uncordoned", func() error {
		if n := node(); n.Spec.Unschedulable || n.Annotations["talos.dev/cordoned"] != "" {
			return fmt.Errorf("unschedulable=%v annotations=%v", n.Spec.Unschedulable, n.Annotations)
		}

		return nil
	})
}

// Memory, Dmesg, Logs and Disks answer as far as talosctl's health check and the bot need.
func TestDiagnosticRPCs(t *testing.T) {
	t.Parallel()
	c, cli := startSim(t, sim.Options{ControlPlanes: 1, Workers: 1})
	ctx := t.Context()
	all := ips(c, "")

	mem, err := cli.Memory(client.WithNodes(ctx, all...))
	if err != nil || len(mem.Messages) != 2 || mem.Messages[0].Meminfo.Memtotal != 4<<20 {
		t.Fatalf("memory: %v %v", mem, err)
	}

	w1 := client.WithNode(ctx, nodeIP(t, c, "worker-1"))

	read := func(s interface {
		Recv() (*common.Data, error)
	}, err error) string {
		if err != nil {
			t.Fatal(err)
		}

		var b strings.Builder

		for {
			d, err := s.Recv()
			if errors.Is(err, io.EOF) {
				return b.String()
			}

			if err != nil {
				t.Fatal(err)
			}

			b.Write(d.Bytes)
		}
	}

	if out := read(cli.Dmesg(w1, false, false)); !strings.Contains(out, "Talos "+sim.DefaultTalosVersion+" booting") {
		t.Fatalf("dmesg: %q", out)
	}

	if out := read(cli.Logs(w1, "system", common.ContainerDriver_CONTAINERD, "machined", false, -1)); !strings.Contains(out, "machined") {
		t.Fatalf("machined log: %q", out)
	}

	if _, err := cli.Logs(w1, "system", common.ContainerDriver_CONTAINERD, "etcd", false, -1); err == nil {
		// the error arrives with the first Recv
		s, _ := cli.Logs(w1, "system", common.ContainerDriver_CONTAINERD, "etcd", false, -1)
		if _, rerr := s.Recv(); status.Code(rerr) != codes.NotFound {
			t.Fatalf("etcd log on a worker: %v", rerr)
		}
	}

	disks, err := cli.Disks(w1)
	if err != nil || len(disks.Messages[0].Disks) != 1 || !disks.Messages[0].Disks[0].SystemDisk {
		t.Fatalf("disks: %v %v", disks, err)
	}
}

// Two nodes with one hostname would collide in discovery, Kubernetes and etcd: refused.
func TestNamingCollisionRefused(t *testing.T) {
	t.Parallel()
	_, err := sim.Start(t.Context(), sim.Options{Dir: t.TempDir(), ControlPlanes: 1, Workers: 1,
		Naming: func(sim.NodeInfo) sim.NodeNames { return sim.NodeNames{Hostname: "same"} }})
	if err == nil || !strings.Contains(err.Error(), `the same hostname "same"`) {
		t.Fatalf("colliding names: %v", err)
	}
}
