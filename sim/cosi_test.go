package sim_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/cosi-project/runtime/pkg/controller/generic"
	"github.com/cosi-project/runtime/pkg/resource"
	"github.com/cosi-project/runtime/pkg/safe"
	"github.com/cosi-project/runtime/pkg/state"
	machineapi "github.com/siderolabs/talos/pkg/machinery/api/machine"
	"github.com/siderolabs/talos/pkg/machinery/client"
	"github.com/siderolabs/talos/pkg/machinery/resources/cluster"
	"github.com/siderolabs/talos/pkg/machinery/resources/config"
	"github.com/siderolabs/talos/pkg/machinery/resources/etcd"
	"github.com/siderolabs/talos/pkg/machinery/resources/k8s"
	"github.com/siderolabs/talos/pkg/machinery/resources/network"
	"github.com/siderolabs/talos/pkg/machinery/resources/runtime"
	"github.com/siderolabs/talos/pkg/machinery/resources/v1alpha1"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/talosbot/talosbot/internal/testenv"
	"github.com/talosbot/talosbot/sim"
)

// machineConfig reads a node's active MachineConfig resource, as a Talos v1.12+ client must.
func machineConfig(ctx context.Context, t *testing.T, cli *client.Client, ip string) []byte {
	t.Helper()

	mc, err := safe.StateGetByID[*config.MachineConfig](client.WithNode(ctx, ip), cli.COSI, config.ActiveID)
	if err != nil {
		t.Fatalf("get MachineConfig of %s: %v", ip, err)
	}

	b, err := mc.Provider().Bytes()
	if err != nil {
		t.Fatalf("MachineConfig bytes: %v", err)
	}

	return b
}

func TestMachineConfigResourceReplacesStateFile(t *testing.T) {
	t.Parallel()
	c, cli := startSim(t, sim.Options{ControlPlanes: 1, Workers: 1, TalosVersion: "v1.12.6"})
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()

	worker := nodeIP(t, c, "worker-1")

	cfg := machineConfig(ctx, t, cli, worker)
	if !strings.Contains(string(cfg), "type: worker") || !strings.Contains(string(cfg), "installer/"+sim.DefaultSchematic+":v1.12.6") {
		t.Fatalf("worker MachineConfig:\n%s", cfg)
	}

	// Talos v1.12 stopped mounting STATE: the old file path is gone.
	r, err := cli.Read(client.WithNode(ctx, worker), "/system/state/config.yaml")
	if err == nil {
		_, err = r.Read(make([]byte, 1))
	}

	if status.Code(err) != codes.NotFound || !strings.Contains(err.Error(), "stat /system/state/config.yaml: no such file or directory") {
		t.Fatalf("read /system/state/config.yaml on v1.12: %v, want NotFound", err)
	}

	// The API is read-only, as Talos's access policy makes it.
	mc, err := safe.StateGetByID[*config.MachineConfig](client.WithNode(ctx, worker), cli.COSI, config.ActiveID)
	if err != nil {
		t.Fatal(err)
	}

	if err = cli.COSI.Update(client.WithNode(ctx, worker), mc); err == nil || !strings.Contains(err.Error(), "code = PermissionDenied desc = write access is not allowed") {
		t.Fatalf("update through the API: %v, want PermissionDenied", err)
	}

	// A type the sim does not serve is refused rather than listed empty.
	_, err = cli.COSI.List(client.WithNode(ctx, worker), resource.NewMetadata("block", "Disks.block.talos.dev", "", resource.VersionUndefined))
	if status.Code(err) != codes.PermissionDenied || !strings.Contains(err.Error(), "not supported") {
		t.Fatalf("list an unserved type: %v", err)
	}

	if _, err = cli.COSI.Get(client.WithNode(ctx, worker), resource.NewMetadata(config.NamespaceName, config.MachineConfigType, "nope", resource.VersionUndefined)); !state.IsNotFoundError(err) {
		t.Fatalf("get a missing id: %v, want not found", err)
	}
}

func TestStateFileBeforeV112(t *testing.T) {
	t.Parallel()
	c, cli := startSim(t, sim.Options{ControlPlanes: 1, TalosVersion: "v1.11.5"})
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()

	r, err := cli.Read(client.WithNode(ctx, nodeIP(t, c, "cp-1")), "/system/state/config.yaml")
	if err != nil {
		t.Fatal(err)
	}

	defer r.Close() //nolint:errcheck

	b, err := io.ReadAll(r)
	if err != nil || !strings.Contains(string(b), "type: controlplane") {
		t.Fatalf("read on v1.11: %v\n%s", err, b)
	}
}

// get reads one typed resource from a node.
func get[T generic.ResourceWithRD](ctx context.Context, t *testing.T, cli *client.Client, ip string, id resource.ID) T {
	t.Helper()

	r, err := safe.StateGetByID[T](client.WithNode(ctx, ip), cli.COSI, id)
	if err != nil {
		t.Fatalf("get %T %s on %s: %v", r, id, ip, err)
	}

	return r
}

func machineStatus(ctx context.Context, cli *client.Client, ip string) (*runtime.MachineStatus, error) {
	return safe.StateGetByID[*runtime.MachineStatus](client.WithNode(ctx, ip), cli.COSI, runtime.MachineStatusID)
}

// waitReady waits until the node's MachineStatus is running and ready.
func waitReady(ctx context.Context, t *testing.T, cli *client.Client, ip string) {
	t.Helper()

	eventually(t, 30*time.Second, ip+" running and ready", func() error {
		ms, err := machineStatus(ctx, cli, ip)
		if err != nil {
			return err
		}

		if spec := ms.TypedSpec(); spec.Stage != runtime.MachineStageRunning || !spec.Status.Ready {
			return fmt.Errorf("stage %s ready %v unmet %v", spec.Stage, spec.Status.Ready, spec.Status.UnmetConditions)
		}

		return nil
	})
}

func unmet(ms *runtime.MachineStatus) string {
	var out []string

	for _, c := range ms.TypedSpec().Status.UnmetConditions {
		out = append(out, c.Name+": "+c.Reason)
	}

	return strings.Join(out, "; ")
}

func TestResourcesFollowLifecycle(t *testing.T) {
	t.Parallel()
	slow(t)
	c, cli := startSim(t, sim.Options{ControlPlanes: 3, Workers: 1, RebootDelay: 200 * time.Millisecond})
	ctx, cancel := context.WithTimeout(t.Context(), 3*time.Minute)
	defer cancel()

	cp1, cp2, cp3, worker := nodeIP(t, c, "cp-1"), nodeIP(t, c, "cp-2"), nodeIP(t, c, "cp-3"), nodeIP(t, c, "worker-1")

	t.Run("boot", func(t *testing.T) {
		for _, n := range c.Nodes() {
			waitReady(ctx, t, cli, n.IP)

			if got := get[*k8s.Nodename](ctx, t, cli, n.IP, k8s.NodenameID).TypedSpec().Nodename; got != n.Name {
				t.Fatalf("%s nodename %q", n.Name, got)
			}

			if got := get[*network.HostnameStatus](ctx, t, cli, n.IP, network.HostnameID).TypedSpec().Hostname; got != n.Name {
				t.Fatalf("%s hostname %q", n.Name, got)
			}
		}

		members, err := safe.StateListAll[*cluster.Member](client.WithNode(ctx, worker), cli.COSI)
		if err != nil {
			t.Fatal(err)
		}

		if members.Len() != 4 {
			t.Fatalf("members %d, want 4", members.Len())
		}

		cps := 0

		for m := range members.All() {
			if m.TypedSpec().ControlPlane != nil {
				cps++
			}
		}

		if cps != 3 {
			t.Fatalf("control-plane members %d, want 3", cps)
		}

		// The local etcd member id is the real member's.
		etcdID := get[*etcd.Member](ctx, t, cli, cp1, etcd.LocalMemberID).TypedSpec().MemberID
		if want := etcd.FormatMemberID(c.Etcd().Member("cp-1").ID()); etcdID != want {
			t.Fatalf("etcd member id %s, want %s", etcdID, want)
		}

		if _, err := safe.StateGetByID[*etcd.Member](client.WithNode(ctx, worker), cli.COSI, etcd.LocalMemberID); !state.IsNotFoundError(err) {
			t.Fatalf("worker etcd member: %v, want not found", err)
		}
	})

	t.Run("apply config", func(t *testing.T) {
		cfg := machineConfig(ctx, t, cli, worker)
		newCfg := bytes.ReplaceAll(cfg, []byte("kubelet:"+sim.DefaultKubernetesVersion), []byte("kubelet:v1.36.0"))

		if _, err := cli.ApplyConfiguration(client.WithNode(ctx, worker), &machineapi.ApplyConfigurationRequest{Data: newCfg, Mode: machineapi.ApplyConfigurationRequest_NO_REBOOT}); err != nil {
			t.Fatal(err)
		}

		for _, id := range []resource.ID{config.ActiveID, config.PersistentID} {
			mc := get[*config.MachineConfig](ctx, t, cli, worker, id)
			if img := mc.Config().K8sKubeletConfig().Image(); img != "ghcr.io/siderolabs/kubelet:v1.36.0" {
				t.Fatalf("%s kubelet image %s", id, img)
			}

			if v := mc.Metadata().Version().String(); v != "2" {
				t.Fatalf("%s version %s, want 2 (updated once)", id, v)
			}
		}
	})

	t.Run("faults", func(t *testing.T) {
		if err := c.Inject(ctx, "worker-1", sim.Fault{UnhealthyService: "kubelet"}); err != nil {
			t.Fatal(err)
		}

		ms, err := machineStatus(ctx, cli, worker)
		if err != nil {
			t.Fatal(err)
		}

		if ms.TypedSpec().Status.Ready || !strings.Contains(unmet(ms), "services: kubelet not healthy") || !strings.Contains(unmet(ms), "nodeReady") {
			t.Fatalf("unhealthy kubelet: ready %v, unmet %q", ms.TypedSpec().Status.Ready, unmet(ms))
		}

		if err = c.Clear(ctx, "worker-1"); err != nil {
			t.Fatal(err)
		}

		waitReady(ctx, t, cli, worker)

		if err = c.Inject(ctx, "cp-3", sim.Fault{EtcdStopped: true}); err != nil {
			t.Fatal(err)
		}

		if ms, err = machineStatus(ctx, cli, cp3); err != nil {
			t.Fatal(err)
		}

		if ms.TypedSpec().Status.Ready || !strings.Contains(unmet(ms), "etcd not running") {
			t.Fatalf("stopped etcd: ready %v, unmet %q", ms.TypedSpec().Status.Ready, unmet(ms))
		}

		if _, err = safe.StateGetByID[*v1alpha1.Service](client.WithNode(ctx, cp3), cli.COSI, "etcd"); !state.IsNotFoundError(err) {
			t.Fatalf("etcd service resource of a stopped etcd: %v, want not found", err)
		}

		if _, err = safe.StateGetByID[*etcd.Member](client.WithNode(ctx, cp3), cli.COSI, etcd.LocalMemberID); !state.IsNotFoundError(err) {
			t.Fatalf("etcd member of a stopped etcd: %v, want not found", err)
		}

		if err = c.Clear(ctx, "cp-3"); err != nil {
			t.Fatal(err)
		}

		waitReady(ctx, t, cli, cp3)
	})

	t.Run("upgrade, reboot and rollback", func(t *testing.T) {
		id := get[*cluster.Identity](ctx, t, cli, cp2, cluster.LocalIdentity).TypedSpec().NodeID
		installImage := get[*config.MachineConfig](ctx, t, cli, cp2, config.ActiveID).Config().Machine().Install().Image()

		watch := make(chan state.Event, 64)
		if err := cli.COSI.Watch(client.WithNode(ctx, cp2), runtime.NewMachineStatus().Metadata(), watch); err != nil {
			t.Fatal(err)
		}

		if _, err := cli.Upgrade(client.WithNode(ctx, cp2), upgradeImage, false, false); err != nil {
			t.Fatal(err)
		}

		eventually(t, 30*time.Second, "cp-2 Version resource at v1.13.9", func() error {
			v, err := safe.StateGetByID[*runtime.Version](client.WithNode(ctx, cp2), cli.COSI, "version")
			if err == nil && v.TypedSpec().Version != "v1.13.9" {
				err = errors.New("still " + v.TypedSpec().Version)
			}

			return err
		})

		waitReady(ctx, t, cli, cp2)

		// The watch of the old boot started with the running machine; it ended when the node
		// went down for the upgrade.
		first := <-watch
		if ms, ok := first.Resource.(*runtime.MachineStatus); !ok || ms.TypedSpec().Stage != runtime.MachineStageRunning {
			t.Fatalf("first watch event %+v, want the running MachineStatus", first)
		}

		// A new boot has a new in-memory state (versions start again), the same identity and
		// the same machine config: an upgrade does not rewrite machine.install.image
		// (TestUpgradeKeepsMachineConfig).
		v := get[*runtime.Version](ctx, t, cli, cp2, "version")
		if v.Metadata().Version().String() != "1" {
			t.Fatalf("Version resource version %s after reboot, want 1", v.Metadata().Version())
		}

		if got := get[*cluster.Identity](ctx, t, cli, cp2, cluster.LocalIdentity).TypedSpec().NodeID; got != id {
			t.Fatalf("identity changed across reboot: %s → %s", id, got)
		}

		if img := get[*config.MachineConfig](ctx, t, cli, cp2, config.ActiveID).Config().Machine().Install().Image(); img != installImage || img == upgradeImage {
			t.Fatalf("install image %s after the upgrade to %s, want %s kept", img, upgradeImage, installImage)
		}

		members, err := safe.StateListAll[*cluster.Member](client.WithNode(ctx, cp1), cli.COSI)
		if err != nil {
			t.Fatal(err)
		}

		for m := range members.All() {
			want := "Talos (" + sim.DefaultTalosVersion + ")"
			if m.Metadata().ID() == "cp-2" {
				want = "Talos (v1.13.9)"
			}

			if m.TypedSpec().OperatingSystem != want {
				t.Fatalf("member %s os %q, want %q", m.Metadata().ID(), m.TypedSpec().OperatingSystem, want)
			}
		}

		if err := cli.Rollback(client.WithNode(ctx, cp2)); err != nil {
			t.Fatal(err)
		}

		eventually(t, 30*time.Second, "cp-2 rolled back", func() error {
			v, err := safe.StateGetByID[*runtime.Version](client.WithNode(ctx, cp2), cli.COSI, "version")
			if err == nil && v.TypedSpec().Version != sim.DefaultTalosVersion {
				err = errors.New("still " + v.TypedSpec().Version)
			}

			return err
		})

		waitReady(ctx, t, cli, cp2)
	})

	t.Run("reset", func(t *testing.T) {
		if err := cli.Reset(client.WithNode(ctx, worker), true, false); err != nil {
			t.Fatal(err)
		}

		eventually(t, 30*time.Second, "worker-1 leaves the members", func() error {
			members, err := safe.StateListAll[*cluster.Member](client.WithNode(ctx, cp1), cli.COSI)
			if err != nil {
				return err
			}

			for m := range members.All() {
				if m.Metadata().ID() == "worker-1" {
					return errors.New("still a member")
				}
			}

			return nil
		})
	})
}

// TestResourcesWithKubernetes: with a kube-apiserver, StaticPodStatus mirrors the control
// plane's static pods and NodeStatus the Node, and both feed MachineStatus readiness.
func TestResourcesWithKubernetes(t *testing.T) {
	t.Parallel()
	slow(t)
	kube := testenv.StartKube(t)
	c, cli := startSim(t, sim.Options{ControlPlanes: 1, Workers: 1, Kube: kube.Client, StaticPods: true, StaticPodReadyDelay: 50 * time.Millisecond})
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()

	cp1, worker := nodeIP(t, c, "cp-1"), nodeIP(t, c, "worker-1")

	waitReady(ctx, t, cli, cp1)
	waitReady(ctx, t, cli, worker)

	pods, err := safe.StateListAll[*k8s.StaticPodStatus](client.WithNode(ctx, cp1), cli.COSI)
	if err != nil {
		t.Fatal(err)
	}

	var ids []string
	for p := range pods.All() {
		ids = append(ids, p.Metadata().ID())
	}

	if want := "kube-system/kube-apiserver-cp-1,kube-system/kube-controller-manager-cp-1,kube-system/kube-scheduler-cp-1"; strings.Join(ids, ",") != want {
		t.Fatalf("static pod statuses %v, want %s", ids, want)
	}

	if pods, err = safe.StateListAll[*k8s.StaticPodStatus](client.WithNode(ctx, worker), cli.COSI); err != nil || pods.Len() != 0 {
		t.Fatalf("worker static pod statuses: %d, %v", pods.Len(), err)
	}

	// A static pod that does not become Ready after a config change keeps the node not ready.
	if err = c.Inject(ctx, "cp-1", sim.Fault{StaticPodNotReady: sim.ComponentScheduler}); err != nil {
		t.Fatal(err)
	}

	cfg := machineConfig(ctx, t, cli, cp1)
	newCfg := bytes.ReplaceAll(cfg, []byte("kube-scheduler:"+sim.DefaultKubernetesVersion), []byte("kube-scheduler:v1.36.3"))

	if _, err = cli.ApplyConfiguration(client.WithNode(ctx, cp1), &machineapi.ApplyConfigurationRequest{Data: newCfg, Mode: machineapi.ApplyConfigurationRequest_NO_REBOOT}); err != nil {
		t.Fatal(err)
	}

	eventually(t, 30*time.Second, "cp-1 not ready for its scheduler", func() error {
		ms, err := machineStatus(ctx, cli, cp1)
		if err == nil && !strings.Contains(unmet(ms), "staticPods: kube-system/kube-scheduler-cp-1 not ready") {
			err = fmt.Errorf("ready %v unmet %q", ms.TypedSpec().Status.Ready, unmet(ms))
		}

		return err
	})

	if err = c.Clear(ctx, "cp-1"); err != nil {
		t.Fatal(err)
	}

	waitReady(ctx, t, cli, cp1)

	// NodeStatus is the Node as the apiserver has it: a Node marked NotReady makes the node
	// not ready.
	ns := get[*k8s.NodeStatus](ctx, t, cli, worker, "worker-1")
	if !ns.TypedSpec().NodeReady || ns.TypedSpec().Labels["kubernetes.io/hostname"] != "worker-1" {
		t.Fatalf("worker NodeStatus %+v", ns.TypedSpec())
	}

	node, err := kube.Client.CoreV1().Nodes().Get(ctx, "worker-1", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}

	for i := range node.Status.Conditions {
		if node.Status.Conditions[i].Type == corev1.NodeReady {
			node.Status.Conditions[i].Status = corev1.ConditionFalse
		}
	}

	if _, err = kube.Client.CoreV1().Nodes().UpdateStatus(ctx, node, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}

	ms, err := machineStatus(ctx, cli, worker)
	if err != nil {
		t.Fatal(err)
	}

	if ms.TypedSpec().Status.Ready || !strings.Contains(unmet(ms), `nodeReady: node "worker-1" is not ready`) {
		t.Fatalf("NotReady Node: ready %v unmet %q", ms.TypedSpec().Status.Ready, unmet(ms))
	}
}
