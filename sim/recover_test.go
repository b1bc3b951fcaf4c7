package sim_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	machineapi "github.com/siderolabs/talos/pkg/machinery/api/machine"
	"github.com/siderolabs/talos/pkg/machinery/client"

	"github.com/talosbot/talosbot/internal/testenv"
	"github.com/talosbot/talosbot/sim"
)

// talosSnapshot reads an etcd snapshot through the Talos API, as talosctl etcd snapshot does.
func talosSnapshot(ctx context.Context, t *testing.T, cli *client.Client, ip string) []byte {
	t.Helper()

	r, err := cli.EtcdSnapshot(client.WithNode(ctx, ip), &machineapi.EtcdSnapshotRequest{})
	if err != nil {
		t.Fatalf("etcd snapshot: %v", err)
	}
	defer r.Close() //nolint:errcheck

	data, err := io.ReadAll(r)
	if err != nil {
		t.Fatalf("read snapshot: %v", err)
	}

	return data
}

func etcdOf(v sim.EtcdView, node string) sim.EtcdMemberView {
	for _, m := range v.Members {
		if m.Node == node {
			return m
		}
	}

	return sim.EtcdMemberView{}
}

// waitService waits until node's etcd service is in state, with a message containing msg.
func waitService(ctx context.Context, t *testing.T, c *sim.Cluster, node, state, msg string) {
	t.Helper()

	eventually(t, time.Minute, node+" etcd "+state, func() error {
		m := etcdOf(c.EtcdView(ctx), node)
		if m.Service != state || !strings.Contains(m.Message, msg) {
			return fmt.Errorf("etcd service %s (%q)", m.Service, m.Message)
		}

		return nil
	})
}

// TestEtcdDisasterRecovery follows Talos's disaster recovery on a 3 control plane sim with a
// kube-apiserver storing into the sim's etcd: objects, a snapshot, more objects, quorum lost
// (data gone on a majority), each refusal Talos gives, EtcdRecover + Bootstrap{RecoverEtcd}
// on a node that lost its data, the other one joining by itself, the survivor with stale data
// joining once its EPHEMERAL is wiped; then one leader, three voters, and the apiserver serves
// exactly what the snapshot held.
func TestEtcdDisasterRecovery(t *testing.T) {
	t.Parallel()
	slow(t)
	startKube := testenv.KubeStarter(t)

	var kube *testenv.Kube

	c, cli := startSim(t, sim.Options{
		ControlPlanes: 3, Workers: 1,
		KubeOnEtcd: func(ctx context.Context, servers []string) (sim.KubeBackend, error) {
			k, err := startKube(ctx, servers)
			if err != nil {
				return sim.KubeBackend{}, err
			}

			kube = k

			return sim.KubeBackend{Client: k.Client, Kubeconfig: k.Kubeconfig, Stop: k.Stop, Restart: k.Restart}, nil
		},
	})

	ctx, cancel := context.WithTimeout(t.Context(), 4*time.Minute)
	defer cancel()

	cp1, cp2, worker := nodeIP(t, c, "cp-1"), nodeIP(t, c, "cp-2"), nodeIP(t, c, "worker-1")
	cms := kube.Client.CoreV1().ConfigMaps("default")

	mk := func(name string) {
		if _, err := cms.Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: name}}, metav1.CreateOptions{}); err != nil {
			t.Fatalf("create %s: %v", name, err)
		}
	}

	mk("before-snapshot")

	snap := talosSnapshot(ctx, t, cli, cp1)

	mk("after-snapshot")

	lost, err := c.LoseEtcdQuorum(ctx)
	if err != nil || !slices.Equal(lost, []string{"cp-2", "cp-3"}) {
		t.Fatalf("LoseEtcdQuorum = %v, %v; want cp-2, cp-3", lost, err)
	}

	if f := c.Faults()["cp-2"]; !f.EtcdDataLost {
		t.Fatalf("cp-2 faults %+v, want etcdDataLost", f)
	}

	// Every control plane's etcd is down: the wiped ones wait to join, cp-1 has no leader.
	waitService(ctx, t, c, "cp-2", "Preparing", "Running pre state")
	waitService(ctx, t, c, "cp-3", "Preparing", "Running pre state")
	eventually(t, time.Minute, "cp-1 without leader", func() error {
		m := etcdOf(c.EtcdView(ctx), "cp-1")
		if m.Service != "Running" || m.Healthy || m.Leader != 0 {
			return fmt.Errorf("cp-1 etcd %+v", m)
		}

		return nil
	})

	// Refusals. Uploads go one-to-many (`nodes`, as talosctl -n sends them): apid fans the
	// client stream out and merges the replies, a refusal arrives as the node's metadata error.
	upload := func(ip string, data []byte) error {
		_, err := cli.EtcdRecover(client.WithNodes(ctx, ip), bytes.NewReader(data))

		return err
	}

	if err := upload(worker, snap); err == nil || !strings.Contains(err.Error(), "code = Unimplemented desc = etcd recover is only available on control plane nodes") {
		t.Fatalf("EtcdRecover on a worker = %v", err)
	}

	if _, err := cli.EtcdRecover(client.WithNode(ctx, worker), bytes.NewReader(snap)); status.Code(err) != codes.Unimplemented {
		t.Fatalf("EtcdRecover one-to-one on a worker = %v, want Unimplemented", err)
	}

	if err := cli.Bootstrap(client.WithNode(ctx, worker), &machineapi.BootstrapRequest{RecoverEtcd: true}); status.Code(err) != codes.Unimplemented {
		t.Fatalf("Bootstrap on a worker = %v, want Unimplemented", err)
	}

	if err := cli.Bootstrap(client.WithNode(ctx, cp1), &machineapi.BootstrapRequest{RecoverEtcd: true}); status.Code(err) != codes.AlreadyExists || !strings.Contains(err.Error(), "etcd data directory is not empty") {
		t.Fatalf("Bootstrap on cp-1 (stale data) = %v, want AlreadyExists", err)
	}

	// Bootstrap with recover_etcd and nothing uploaded: accepted, the etcd service fails.
	if err := cli.Bootstrap(client.WithNode(ctx, cp2), &machineapi.BootstrapRequest{RecoverEtcd: true}); err != nil {
		t.Fatalf("Bootstrap{RecoverEtcd} without upload: %v (Talos accepts it and fails the service)", err)
	}

	waitService(ctx, t, c, "cp-2", "Failed", "Failed to run pre stage: error verifying snapshot")

	if err := upload(cp2, snap); err != nil {
		t.Fatalf("EtcdRecover: %v", err)
	}

	path := c.Etcd().Member(etcdOf(c.EtcdView(ctx), "cp-2").Member).RecoverySnapshotPath()
	if got, err := os.ReadFile(path); err != nil || !bytes.Equal(got, snap) {
		t.Fatalf("uploaded snapshot at %s: %d bytes, %v; want the %d bytes sent", path, len(got), err, len(snap))
	}

	if err := cli.Bootstrap(client.WithNode(ctx, cp2), &machineapi.BootstrapRequest{RecoverEtcd: true}); err != nil {
		t.Fatalf("Bootstrap{RecoverEtcd}: %v", err)
	}

	waitService(ctx, t, c, "cp-2", "Running", "")

	if _, err := os.Stat(path); !os.IsNotExist(err) {
		t.Fatalf("snapshot not removed after the restore: %v", err)
	}

	if err := cli.Bootstrap(client.WithNode(ctx, cp2), &machineapi.BootstrapRequest{RecoverEtcd: true}); status.Code(err) != codes.AlreadyExists {
		t.Fatalf("second Bootstrap = %v, want AlreadyExists", err)
	}

	// RecoveryCounts counts what was accepted: the upload, the bootstrap without one (accepted,
	// then the service failed) and the real one; never the refusals above.
	if got := c.RecoveryCounts("cp-2"); got != (sim.RecoveryCounts{Uploads: 1, Bootstraps: 2}) {
		t.Fatalf("cp-2 recovery counts %+v, want 1 upload and 2 bootstraps", got)
	}

	for _, n := range []string{"cp-1", "worker-1"} {
		if got := c.RecoveryCounts(n); got != (sim.RecoveryCounts{}) {
			t.Fatalf("%s recovery counts %+v, want none (every call was refused)", n, got)
		}
	}

	// cp-3 joins by itself; cp-1 stays out on its stale data until its EPHEMERAL is wiped.
	waitService(ctx, t, c, "cp-3", "Running", "")

	if m := etcdOf(c.EtcdView(ctx), "cp-1"); m.Leader != 0 {
		t.Fatalf("cp-1 on stale data sees leader %x", m.Leader)
	}

	if err := cli.ResetGeneric(client.WithNode(ctx, cp1), &machineapi.ResetRequest{
		Reboot: true, Graceful: false,
		SystemPartitionsToWipe: []*machineapi.ResetPartitionSpec{{Label: "EPHEMERAL", Wipe: true}},
	}); err != nil {
		t.Fatalf("reset cp-1 EPHEMERAL: %v", err)
	}

	v, err := c.WaitEtcdHealthy(ctx, 3)
	if err != nil {
		t.Fatal(err)
	}

	if v.Leader == "" || len(v.Voters) != 3 {
		t.Fatalf("view %+v", v)
	}

	// The apiserver was restarted on the restored data: the snapshot's object is back, the
	// later one is gone, and it takes writes again.
	eventually(t, time.Minute, "apiserver serves the restored data", func() error {
		if _, err := cms.Get(ctx, "before-snapshot", metav1.GetOptions{}); err != nil {
			return err
		}

		if _, err := cms.Get(ctx, "after-snapshot", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
			return fmt.Errorf("after-snapshot: %v, want NotFound", err)
		}

		return nil
	})

	mk("after-recovery")
}

// TestEtcdDataLostOnOneMemberRejoins: losing one member's data while the others keep quorum
// heals by itself, as on Talos: the node's etcd service finds the cluster, removes its old
// member by name, joins as a learner and is promoted. The fault comes over the control API.
func TestEtcdDataLostOnOneMemberRejoins(t *testing.T) {
	t.Parallel()
	slow(t)
	c, _ := startSim(t, sim.Options{ControlPlanes: 3, Workers: 1})

	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()

	before := etcdOf(c.EtcdView(ctx), "cp-2").ID

	var f sim.Fault
	if err := f.UnmarshalJSON([]byte(`{"etcdDataLost":true}`)); err != nil || !f.EtcdDataLost {
		t.Fatalf("fault JSON: %+v, %v", f, err)
	}

	if err := c.Inject(ctx, "cp-2", f); err != nil {
		t.Fatal(err)
	}

	v, err := c.WaitEtcdHealthy(ctx, 3)
	if err != nil {
		t.Fatal(err)
	}

	if after := etcdOf(v, "cp-2").ID; after == before || after == 0 {
		t.Fatalf("cp-2 member id %x → %x, want a new member", before, after)
	}

	if err := c.Inject(ctx, "worker-1", sim.Fault{EtcdDataLost: true}); err == nil || !strings.Contains(err.Error(), "worker") {
		t.Fatalf("etcdDataLost on a worker = %v, want a refusal naming the worker", err)
	}
}

// TestControlAPIEtcdLoseQuorum: the control API loses quorum (POST /etcd/lose-quorum) and
// shows each control plane's etcd (GET /etcd), for the demo and for guides run by hand.
func TestControlAPIEtcdLoseQuorum(t *testing.T) {
	t.Parallel()
	slow(t)
	c, _ := startSim(t, sim.Options{ControlPlanes: 3})

	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()

	addr, err := c.ServeControl("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}

	do := func(method, path string, out any) {
		t.Helper()

		req, err := http.NewRequestWithContext(ctx, method, "http://"+addr+path, nil)
		if err != nil {
			t.Fatal(err)
		}

		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close() //nolint:errcheck

		if resp.StatusCode != http.StatusOK {
			t.Fatalf("%s %s: %s", method, path, resp.Status)
		}

		if err := json.NewDecoder(resp.Body).Decode(out); err != nil {
			t.Fatal(err)
		}
	}

	var v sim.EtcdView

	do(http.MethodGet, "/etcd", &v)

	if v.Leader == "" || len(v.Voters) != 3 || len(v.Members) != 3 {
		t.Fatalf("GET /etcd on a healthy cluster: %+v", v)
	}

	var lost map[string][]string

	do(http.MethodPost, "/etcd/lose-quorum", &lost)

	if !slices.Equal(lost["lost"], []string{"cp-2", "cp-3"}) {
		t.Fatalf("lose-quorum: %v", lost)
	}

	eventually(t, time.Minute, "no leader, two Preparing", func() error {
		do(http.MethodGet, "/etcd", &v)

		preparing := 0

		for _, m := range v.Members {
			if m.Service == "Preparing" {
				preparing++
			}
		}

		if v.Leader != "" || v.Voters != nil || preparing != 2 {
			return fmt.Errorf("view %+v", v)
		}

		return nil
	})
}

// The control API's JSON follows Fault's tags: every key round-trips, durations are duration
// strings, and an unknown key is refused with the known ones named.
func TestFaultJSONFollowsTheStruct(t *testing.T) {
	t.Parallel()
	in := sim.Fault{Latency: 250 * time.Millisecond, SlowReboot: 5 * time.Second, Unreachable: true, UnhealthyService: "kubelet", StaticPodNotReady: "kube-apiserver"}
	b, err := json.Marshal(in)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(b), `"latency":"250ms"`) || !strings.Contains(string(b), `"slowReboot":"5s"`) {
		t.Fatalf("wire form %s: want durations as strings", b)
	}
	var out sim.Fault
	if err := json.Unmarshal(b, &out); err != nil || out != in {
		t.Fatalf("round trip: %+v, %v; want %+v", out, err, in)
	}
	err = json.Unmarshal([]byte(`{"unreachabel":true}`), &out)
	if err == nil || !strings.Contains(err.Error(), "unreachable") || !strings.Contains(err.Error(), "slowReboot") {
		t.Fatalf("typo: %v, want a refusal naming the known keys", err)
	}
}
