package conformance

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/talosbot/talosbot/sim"
)

// TestConformanceEtcdRecovery is Talos's etcd disaster recovery driven by the real talosctl
// against a 3 control plane sim whose kube-apiserver stores into the sim's etcd: `etcd
// snapshot`, quorum lost (sim.LoseEtcdQuorum), every refusal talosctl or the API gives, `bootstrap
// --recover-from` on a control plane that lost its data, `reset --system-labels-to-wipe=EPHEMERAL`
// of the one left on stale data, then `etcd members` / `etcd status` show three healthy voting
// members with one leader, the objects from before the snapshot are back, and `health` passes.
func TestConformanceEtcdRecovery(t *testing.T) {
	t.Parallel()

	cl := startCluster(t, sim.Options{
		Name: "recovery", ControlPlanes: 3, Workers: 1,
		TalosVersion: nextTalos, KubernetesVersion: mainK8s,
		RebootDelay: 300 * time.Millisecond,
	}, true)

	cps := cl.nodes(sim.RoleControlPlane)
	worker := cl.nodes(sim.RoleWorker)[0]
	cp1, cp2, cp3 := cps[0], cps[1], cps[2]

	ctx, cancel := context.WithTimeout(t.Context(), 8*time.Minute)
	defer cancel()

	cms := cl.kube.Client.CoreV1().ConfigMaps("default")
	mk := func(name string) {
		t.Helper()

		if _, err := cms.Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: name}}, metav1.CreateOptions{}); err != nil {
			t.Fatalf("create configmap %s: %v", name, err)
		}
	}

	mk("before-snapshot")

	snap := filepath.Join(cl.dir, "db.snapshot")
	r := cl.ok(t, "-n", cp1.IP, "etcd", "snapshot", snap)
	mustContain(t, r, r.stdout, "etcd snapshot saved to")

	mk("after-snapshot")

	// Refusals while etcd is healthy.
	r = cl.fails(t, "-n", cp1.IP, "bootstrap")
	mustContain(t, r, r.combined(), "error executing bootstrap", "AlreadyExists", "etcd data directory is not empty")

	r = cl.fails(t, "-n", worker.IP, "bootstrap")
	mustContain(t, r, r.combined(), "Unimplemented", "bootstrap is only available on control plane nodes")

	r = cl.fails(t, "-n", worker.IP, "bootstrap", "--recover-from", snap)
	mustContain(t, r, r.combined(), "error uploading snapshot", "etcd recover is only available on control plane nodes")

	r = cl.fails(t, "-n", cp1.IP+","+cp2.IP, "bootstrap", "--recover-from", snap)
	mustContain(t, r, r.combined(), `command "bootstrap" is not supported with multiple nodes`)

	// talosctl checks the file with etcdutl before uploading anything.
	garbage := filepath.Join(cl.dir, "not-a-snapshot")
	if err := os.WriteFile(garbage, []byte("not a snapshot"), 0o600); err != nil {
		t.Fatal(err)
	}

	cl.fails(t, "-n", cp2.IP, "bootstrap", "--recover-from", garbage)

	if n := cl.sim.Calls(cp2.Name, "/machine.MachineService/EtcdRecover"); n != 0 {
		t.Fatalf("talosctl uploaded a file etcdutl rejects (%d EtcdRecover calls)", n)
	}

	// Quorum lost: data gone on cp-2 and cp-3, cp-1 on stale data without a leader.
	lost, err := cl.sim.LoseEtcdQuorum(ctx)
	if err != nil || !slices.Equal(lost, []string{cps[1].Name, cps[2].Name}) {
		t.Fatalf("LoseEtcdQuorum = %v, %v", lost, err)
	}

	for _, n := range cps[1:] {
		r := cl.ok(t, "-n", n.IP, "service", "etcd")
		mustMatch(t, r, r.stdout, `(?m)^STATE\s+Preparing$`)
	}

	eventually(t, time.Minute, "cp-1's etcd without a leader", func() error {
		r := cl.ok(t, "-n", cp1.IP, "service", "etcd")
		if !strings.Contains(r.stdout, "no leader") {
			return fmt.Errorf("no \"no leader\" in:\n%s", r)
		}

		return nil
	})

	// The survivor answers status without a leader; the member list needs one.
	r = cl.ok(t, "-n", cp1.IP, "etcd", "status")
	mustMatch(t, r, r.stdout, `(?m)^`+regexp.QuoteMeta(cp1.IP)+`\s.*\s0000000000000000\s.*etcdserver: no leader\s*$`)
	cl.fails(t, "-n", cp1.IP, "etcd", "members")

	r = cl.ok(t, "-n", cp3.IP, "service", "etcd")
	mustMatch(t, r, r.stdout, `(?m)^STATE\s+Preparing$`, `(?m)^HEALTH\s+\?$`, `\[Preparing\]: Running pre state`)

	// A database copied out of a data dir has no hash: talosctl's etcdutl check and the API
	// accept it, the restore in the etcd service refuses it, and what etcdutl had copied stays,
	// so the node needs its EPHEMERAL wiped before it can bootstrap or join.
	raw := filepath.Join(cl.dir, "raw.db")

	data, err := os.ReadFile(snap)
	if err != nil {
		t.Fatal(err)
	}

	if err := os.WriteFile(raw, data[:len(data)-32], 0o600); err != nil {
		t.Fatal(err)
	}

	cl.ok(t, "-n", cp3.IP, "bootstrap", "--recover-from", raw)
	eventually(t, time.Minute, "cp-3's etcd fails its restore", func() error {
		r := cl.ok(t, "-n", cp3.IP, "service", "etcd")
		if !strings.Contains(r.stdout, "Failed to run pre stage: error recovering from the snapshot: snapshot missing hash but --skip-hash-check=false") {
			return fmt.Errorf("not yet:\n%s", r)
		}

		return nil
	})

	r = cl.fails(t, "-n", cp3.IP, "bootstrap", "--recover-from", snap)
	mustContain(t, r, r.combined(), "AlreadyExists", "etcd data directory is not empty")

	// cp-1 still has (stale) data: the upload works, the bootstrap is refused.
	r = cl.fails(t, "-n", cp1.IP, "bootstrap", "--recover-from", snap)
	mustContain(t, r, r.combined(), "recovering from snapshot", "error executing bootstrap", "AlreadyExists", "etcd data directory is not empty")

	// The recovery.
	r = cl.ok(t, "-n", cp2.IP, "bootstrap", "--recover-from", snap)
	mustMatch(t, r, r.stdout, `recovering from snapshot ".*": hash [0-9a-f]{8}, revision \d+, total keys \d+, total size \d+`)

	eventually(t, 2*time.Minute, "cp-2's etcd running and healthy", func() error {
		r := cl.run(t, "-n", cp2.IP, "service", "etcd")
		if r.err != nil || !strings.Contains(r.stdout, "Running") || !strings.Contains(r.stdout, "OK") {
			return fmt.Errorf("not yet:\n%s", r)
		}

		return nil
	})

	r = cl.fails(t, "-n", cp2.IP, "bootstrap")
	mustContain(t, r, r.combined(), "AlreadyExists", "etcd data directory is not empty")

	// cp-1 (stale data) and cp-3 (half-restored) are reset the way the guide says; they come
	// back and join.
	for _, n := range []sim.NodeInfo{cp1, cp3} {
		cl.ok(t, "-n", n.IP, "reset", "--graceful=false", "--reboot", "--system-labels-to-wipe=EPHEMERAL", "--wait=false")
	}

	if _, err := cl.sim.WaitEtcdHealthy(ctx, 3); err != nil {
		t.Fatal(err)
	}

	r = cl.ok(t, "-n", cp2.IP, "etcd", "members")
	for _, n := range cps {
		mustMatch(t, r, r.stdout, `(?m)\s`+etcdMember(n)+`\s+\S*`+n.IP+`:2380\s.*\sfalse\s*$`) // LEARNER false
	}

	r = cl.ok(t, "-n", strings.Join(ips(cps), ","), "etcd", "status")

	leaders := map[string]bool{}

	for _, n := range cps {
		line := lineStarting(r.stdout, n.IP+" ")
		if line == "" {
			t.Fatalf("no status row for %s:\n%s", n.IP, r)
		}

		leaders[strings.Fields(line)[7]] = true
	}

	if len(leaders) != 1 {
		t.Fatalf("want one leader, got %v:\n%s", leaders, r)
	}

	if _, err := cms.Get(ctx, "before-snapshot", metav1.GetOptions{}); err != nil {
		t.Fatalf("object from before the snapshot: %v", err)
	}

	if _, err := cms.Get(ctx, "after-snapshot", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Fatalf("object from after the snapshot: %v, want NotFound", err)
	}

	r = cl.ok(t, "-n", cp2.IP, "health",
		"--control-plane-nodes", strings.Join(ips(cps), ","),
		"--worker-nodes", worker.IP, "--wait-timeout", "2m")
	checkHealthOutput(t, r)
}
