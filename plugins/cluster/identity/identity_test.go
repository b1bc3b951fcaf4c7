package identity_test

import (
	"context"
	"strings"
	"testing"
	"time"

	machineapi "github.com/siderolabs/talos/pkg/machinery/api/machine"
	"github.com/siderolabs/talos/pkg/machinery/client"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/talosbot/talosbot/internal/testenv"
	"github.com/talosbot/talosbot/plugins/cluster"
	"github.com/talosbot/talosbot/plugins/cluster/identity"
	"github.com/talosbot/talosbot/plugins/sdk"
	"github.com/talosbot/talosbot/sim"
)

type env struct {
	c    *sim.Cluster
	kube *testenv.Kube
	inv  cluster.Inventory
	cl   *cluster.Clients
}

// start runs a sim whose inventory names, hostnames, Kubernetes Node names
// and etcd member names all differ (sim.DistinctNames), with a real
// kube-apiserver when withKube.
func start(t *testing.T, withKube bool) *env {
	t.Helper()
	e := &env{}
	opts := sim.Options{ControlPlanes: 3, Workers: 2, Naming: sim.DistinctNames}
	if withKube {
		e.kube = testenv.StartKube(t)
		opts.Kube, opts.Kubeconfig = e.kube.Client, e.kube.Kubeconfig
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	c, err := sim.Start(ctx, opts)
	if err != nil {
		t.Fatalf("start sim: %v", err)
	}
	t.Cleanup(func() { _ = c.Close() })
	e.c = c
	pc := &sdk.Cluster{Name: "sim", Environment: "staging"}
	for _, n := range c.Nodes() {
		pc.Nodes = append(pc.Nodes, &sdk.Node{Name: n.Name, Address: n.IP, Role: n.Role, Host: n.Host,
			Platform: n.Platform, InstallerClass: n.InstallerClass})
	}
	if e.inv, err = cluster.InventoryFrom(pc); err != nil {
		t.Fatal(err)
	}
	creds := &sdk.Credentials{Talosconfig: c.Talosconfig()}
	if withKube {
		creds.Kubeconfig = e.kube.Kubeconfig
	}
	if e.cl, err = cluster.Connect(context.Background(), e.inv, creds); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = e.cl.Close() })
	return e
}

func (e *env) resolve(t *testing.T) *identity.Map {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	return identity.Resolve(ctx, e.cl, e.inv, identity.Options{NodeTimeout: 10 * time.Second})
}

func (e *env) info(t *testing.T, name string) sim.NodeInfo {
	t.Helper()
	for _, n := range e.c.Nodes() {
		if n.Name == name {
			return n
		}
	}
	t.Fatalf("no sim node %s", name)
	return sim.NodeInfo{}
}

// refusal asserts err is an identity refusal whose text contains every want.
func refusal(t *testing.T, err error, want ...string) {
	t.Helper()
	r, ok := sdk.AsRefusal(err)
	if !ok || r.Rule != identity.Rule || r.Fix == "" {
		t.Fatalf("want an %s refusal with a fix, got %v", identity.Rule, err)
	}
	for _, w := range want {
		if !strings.Contains(r.Reason, w) {
			t.Fatalf("refusal %q does not name %q", r.Reason, w)
		}
	}
}

func TestResolveDistinctNames(t *testing.T) {
	e := start(t, true)
	m := e.resolve(t)
	if err := m.Require(identity.All); err != nil {
		t.Fatalf("every node should resolve: %v", err)
	}
	for _, info := range e.c.Nodes() {
		if info.Name == info.Hostname || info.Hostname == info.NodeName {
			t.Fatalf("the sim must give distinct names: %+v", info)
		}
		n, ok := m.Of(info.IP)
		if !ok || n.Name != info.Name {
			t.Fatalf("%s: not found by address: %+v", info.Name, n)
		}
		if n.Hostname != info.Hostname || n.Nodename != info.NodeName || n.KubeNode != info.NodeName || n.KubeBy != "nodename" {
			t.Fatalf("%s: resolved %+v, sim says hostname %s, Node %s", info.Name, n, info.Hostname, info.NodeName)
		}
		if info.Role != sim.RoleControlPlane {
			if n.EtcdMember != "" {
				t.Fatalf("worker %s has an etcd member %s", info.Name, n.EtcdMember)
			}
			continue
		}
		if n.EtcdMember != info.EtcdMember || n.EtcdID == 0 || n.EtcdBy != "member id" {
			t.Fatalf("%s: etcd member %q (id %x, by %s), sim says %s", info.Name, n.EtcdMember, n.EtcdID, n.EtcdBy, info.EtcdMember)
		}
		if back, ok := m.ByMemberID(n.EtcdID); !ok || back.Name != info.Name {
			t.Fatalf("member %x maps back to %+v", n.EtcdID, back)
		}
		// A member from a member list, with another id (re-added under a new
		// id after Resolve): found by its peer URL.
		if back, ok := m.ByMember(&machineapi.EtcdMember{Id: 42, Hostname: "x", PeerUrls: []string{"https://" + info.IP + ":2380"}}); !ok || back.Name != info.Name {
			t.Fatalf("peer URL on %s maps to %+v", info.IP, back)
		}
	}
	cp1 := e.info(t, "cp-1")
	if lines := strings.Join(m.Lines(), "\n"); !strings.Contains(lines, "cp-1 ("+cp1.IP+"): hostname "+cp1.Hostname+", Node "+cp1.NodeName+", etcd member "+cp1.EtcdMember) {
		t.Fatalf("plan lines:\n%s", lines)
	}

	t.Run("a name outside the inventory is refused", func(t *testing.T) {
		refusal(t, m.Require(identity.All, "cp-9"), "cp-9 is not in the inventory")
	})

	t.Run("a Node matched by InternalIP when its name is not the nodename", func(t *testing.T) {
		w := e.info(t, "worker-2")
		ctx := context.Background()
		if err := e.kube.Client.CoreV1().Nodes().Delete(ctx, w.NodeName, metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
		other := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "renamed-worker"}}
		if _, err := e.kube.Client.CoreV1().Nodes().Create(ctx, other, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		other.Status.Addresses = []corev1.NodeAddress{{Type: corev1.NodeInternalIP, Address: w.IP}}
		if _, err := e.kube.Client.CoreV1().Nodes().UpdateStatus(ctx, other, metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
		m := e.resolve(t)
		if n, _ := m.Of("worker-2"); n.KubeNode != "renamed-worker" || n.KubeBy != "InternalIP "+w.IP {
			t.Fatalf("worker-2 resolved to %+v", n)
		}
		if err := m.Require(identity.All); err != nil {
			t.Fatal(err)
		}
	})

	t.Run("an unregistered node and a stray Node", func(t *testing.T) {
		ctx := context.Background()
		if err := e.kube.Client.CoreV1().Nodes().Delete(ctx, "renamed-worker", metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
		stray := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "stray"}}
		if _, err := e.kube.Client.CoreV1().Nodes().Create(ctx, stray, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		m := e.resolve(t)
		w := e.info(t, "worker-2")
		refusal(t, m.Require(identity.Kubernetes, "worker-2"), "worker-2 ("+w.IP+")", "no Kubernetes Node named "+w.NodeName)
		// The other nodes are not held hostage by one unregistered worker.
		if err := m.Require(identity.All, "cp-1", "worker-1"); err != nil {
			t.Fatal(err)
		}
		if err := m.Require(identity.Talos|identity.Etcd, "worker-2"); err != nil {
			t.Fatal(err)
		}
	})

	t.Run("a control plane that does not answer", func(t *testing.T) {
		ctx := context.Background()
		cp2 := e.info(t, "cp-2")
		if err := e.c.Inject(ctx, "cp-2", sim.Fault{Unreachable: true}); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = e.c.Clear(context.Background(), "cp-2") })
		m := e.resolve(t)
		refusal(t, m.Require(identity.All, "cp-2"), "cp-2 ("+cp2.IP+"): no answer from the Talos API")
		// Its etcd member (asked of the other control planes, by peer URL) and
		// its Node (by InternalIP) are still known: a down node can be waited
		// for and its etcd membership judged.
		if err := m.Require(identity.Kubernetes|identity.Etcd, "cp-2"); err != nil {
			t.Fatal(err)
		}
		n, _ := m.Of("cp-2")
		if n.EtcdMember != cp2.EtcdMember || !strings.HasPrefix(n.EtcdBy, "peer URL ") || n.KubeNode != cp2.NodeName {
			t.Fatalf("down cp-2 resolved to %+v", n)
		}
	})
}

func TestResolveWithoutKubeconfig(t *testing.T) {
	e := start(t, false)
	m := e.resolve(t)
	// Kubernetes is not required without a kubeconfig (the gate says so).
	if err := m.Require(identity.All); err != nil {
		t.Fatal(err)
	}
	w := e.info(t, "worker-1")
	if n, _ := m.Of("worker-1"); n.Nodename != w.NodeName || n.KubeNode != "" {
		t.Fatalf("worker-1 resolved to %+v", n)
	}
	if lines := strings.Join(m.Lines(), "\n"); !strings.Contains(lines, "nodename "+w.NodeName) {
		t.Fatalf("plan lines:\n%s", lines)
	}

	t.Run("a control plane that left etcd", func(t *testing.T) {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		cp3 := e.info(t, "cp-3")
		cli, err := cluster.NewTalosClient(ctx, e.c.Talosconfig(), []string{cp3.IP})
		if err != nil {
			t.Fatal(err)
		}
		defer cli.Close()
		if _, err := cli.MachineClient.EtcdLeaveCluster(client.WithNode(ctx, cp3.IP), &machineapi.EtcdLeaveClusterRequest{}); err != nil {
			t.Fatal(err)
		}
		m := e.resolve(t)
		refusal(t, m.Require(identity.Etcd, "cp-3"), "cp-3 ("+cp3.IP+"): no etcd member")
		if err := m.Require(identity.Etcd, "cp-1", "cp-2"); err != nil {
			t.Fatal(err)
		}
	})
}
