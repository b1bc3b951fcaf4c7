package conformance

import (
	"context"
	"fmt"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"go.etcd.io/etcd/etcdutl/v3/snapshot"
	"go.uber.org/zap"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/talosbot/talosbot/internal/testenv"
	"github.com/talosbot/talosbot/sim"
)

// Versions of the main cluster: Talos v1.13 (the new upgrade API, and the only Talos that
// supports Kubernetes 1.36), Kubernetes 1.35 to be upgraded to 1.36. The kube-apiserver that
// `make tools` builds is v1.36.3 whatever the sim's images say; upgrade-k8s targets that
// version so that, once it is done, the images agree with the real server's /version.
const (
	mainTalos    = "v1.13.4"
	nextTalos    = "v1.13.9"
	mainK8s      = "v1.35.2"
	targetK8s    = "1.36.3"
	legacyTalos  = "v1.12.6"
	legacyTarget = "v1.13.9"
)

func installer(version string) string {
	return "factory.talos.dev/nocloud-installer/" + sim.DefaultSchematic + ":" + version
}

// mainSuite is the main cluster's run for one talosctl release against nodes of its minor.
type mainSuite struct {
	name        string // the sim cluster's name
	env         string // the variable naming the talosctl binary
	client      string // the talosctl release, as `talosctl version` prints it
	talos, next string // the nodes' Talos version, and the one a worker is upgraded to
	k8s         string // the nodes' Kubernetes version
	targetK8s   string // upgrade-k8s's target
}

// TestConformance runs the real talosctl v1.13.9 against one sim of 3 control planes and 2
// workers at v1.13 with a kube-apiserver on the sim's etcd. Read-only commands come first, then
// the ones that change the cluster, each on a node of its own, with reset last.
func TestConformance(t *testing.T) {
	t.Parallel()

	mainSuite{name: "conformance", env: EnvTalosctl, client: "v1.13.9", talos: mainTalos, next: nextTalos, k8s: mainK8s, targetK8s: targetK8s}.run(t)
}

// TestConformanceV114 is the same suite with the real talosctl v1.14.1 against nodes at
// v1.14.0, a worker upgraded to v1.14.1 and rolled back.
func TestConformanceV114(t *testing.T) {
	t.Parallel()

	mainSuite{name: "conformance-v114", env: EnvTalosctlV114, client: "v1.14.1", talos: "v1.14.0", next: "v1.14.1", k8s: mainK8s, targetK8s: targetK8s}.run(t)
}

func (s mainSuite) run(t *testing.T) {
	t.Helper()

	cl := startClusterWith(t, s.env, sim.Options{
		Name: s.name, ControlPlanes: 3, Workers: 2,
		TalosVersion: s.talos, KubernetesVersion: s.k8s,
		RebootDelay: 300 * time.Millisecond,
	}, true)

	all := cl.nodes("")
	cps := cl.nodes(sim.RoleControlPlane)
	workers := cl.nodes(sim.RoleWorker)
	cp1 := cps[0]

	t.Run("names-differ", func(t *testing.T) { checkNamesDiffer(t, all) })

	t.Run("version", func(t *testing.T) {
		r := cl.ok(t, "-n", strings.Join(ips(all), ","), "version")
		mustContain(t, r, r.stdout, "Client:", "Tag:         "+s.client, "Server:")

		if got := strings.Count(r.stdout, "Tag:         "+s.talos); got != len(all) {
			t.Fatalf("want %d servers at %s, got %d:\n%s", len(all), s.talos, got, r)
		}

		for _, n := range all {
			mustContain(t, r, r.stdout, "NODE:        "+n.IP)
		}
	})

	t.Run("get/members", func(t *testing.T) {
		r := cl.ok(t, "-n", cp1.IP, "get", "members")
		mustContain(t, r, r.stdout, "HOSTNAME", "MACHINE TYPE")

		for _, n := range all {
			mustMatch(t, r, r.stdout, `(?m)\s`+hostname(n)+`\s+`+n.Role+`\s.*`+n.IP)
		}
	})

	t.Run("get/machineconfig", func(t *testing.T) {
		r := cl.ok(t, "-n", cp1.IP, "get", "machineconfig", "-o", "yaml")
		mustContain(t, r, r.stdout, "type: MachineConfigs.config.talos.dev", "id: v1alpha1",
			"type: controlplane", "image: registry.k8s.io/kube-apiserver:"+s.k8s)
	})

	t.Run("get/nodename", func(t *testing.T) {
		r := cl.ok(t, "-n", strings.Join(ips(all), ","), "get", "nodename")

		for _, n := range all {
			mustMatch(t, r, r.stdout, `(?m)^`+n.IP+`\s.*\s`+nodename(n)+`\s*$`)
		}
	})

	t.Run("get/machinestatus", func(t *testing.T) {
		r := cl.ok(t, "-n", cp1.IP, "get", "machinestatus", "-o", "yaml")
		mustContain(t, r, r.stdout, "stage: running", "ready: true")
	})

	t.Run("read/state-config-notfound", func(t *testing.T) {
		r := cl.fails(t, "-n", cp1.IP, "read", "/system/state/config.yaml")
		mustContain(t, r, r.combined(), "code = NotFound")
	})

	t.Run("service/etcd", func(t *testing.T) {
		r := cl.ok(t, "-n", cp1.IP, "service", "etcd")
		mustMatch(t, r, r.stdout, `(?m)^ID\s+etcd$`, `(?m)^STATE\s+Running$`, `(?m)^HEALTH\s+OK$`)
	})

	t.Run("etcd/status", func(t *testing.T) {
		r := cl.ok(t, "-n", strings.Join(ips(cps), ","), "etcd", "status")
		mustContain(t, r, r.stdout, "MEMBER", "LEADER", "RAFT INDEX")

		leaders := map[string]bool{}

		for _, n := range cps {
			line := lineStarting(r.stdout, n.IP+" ")
			if line == "" {
				t.Fatalf("no status row for %s:\n%s", n.IP, r)
			}

			f := strings.Fields(line)
			leaders[f[7]] = true // NODE MEMBER DB-SIZE(2 fields) IN-USE(3 fields) LEADER
		}

		if len(leaders) != 1 {
			t.Fatalf("members disagree on the leader %v:\n%s", leaders, r)
		}
	})

	t.Run("etcd/status-version", func(t *testing.T) {
		// Each node reports the etcd of the release it runs (DefaultEtcdVersion at the tag).
		rel, ok := sim.LookupRelease(s.talos)
		if !ok {
			t.Fatalf("%s is not in the sim's release catalogue", s.talos)
		}

		r := cl.ok(t, "-n", cp1.IP, "etcd", "status")
		if line := lineStarting(r.stdout, cp1.IP+" "); !strings.Contains(line, " "+rel.Etcd+" ") {
			t.Fatalf("etcd status of a %s node does not name etcd %s:\n%s", s.talos, rel.Etcd, r)
		}
	})

	t.Run("etcd/members", func(t *testing.T) {
		r := cl.ok(t, "-n", cp1.IP, "etcd", "members")

		for _, n := range cps {
			mustMatch(t, r, r.stdout, `(?m)\s`+etcdMember(n)+`\s+\S*`+n.IP+`:2380`)
		}

		for _, n := range workers {
			if strings.Contains(r.stdout, n.IP) {
				t.Fatalf("worker %s listed as an etcd member:\n%s", n.Name, r)
			}
		}
	})

	t.Run("etcd/snapshot", func(t *testing.T) {
		path := filepath.Join(t.TempDir(), "etcd.snapshot")
		r := cl.ok(t, "-n", cp1.IP, "etcd", "snapshot", path)
		mustContain(t, r, r.stdout, "etcd snapshot saved to \""+path+"\"", "total keys")

		st, err := snapshot.NewV3(zap.NewNop()).Status(path)
		if err != nil {
			t.Fatalf("etcdutl snapshot status %s: %v", path, err)
		}

		if st.TotalKey == 0 {
			t.Fatalf("snapshot has no keys: %+v", st)
		}

		if !strings.Contains(r.stdout, fmt.Sprintf("total keys %d", st.TotalKey)) {
			t.Fatalf("talosctl and etcdutl disagree on the key count (etcdutl: %d):\n%s", st.TotalKey, r)
		}

		// The kube-apiserver stores into the sim's etcd: the snapshot holds its Nodes.
		if n := registryKeys(t, path, "/registry/minions/"); n != len(all) {
			t.Fatalf("snapshot holds %d Node keys under /registry/minions/, want %d", n, len(all))
		}
	})

	nodeFlags := []string{
		"--control-plane-nodes", strings.Join(ips(cps), ","),
		"--worker-nodes", strings.Join(ips(workers), ","),
		"--wait-timeout", "90s",
	}

	t.Run("health/client-side", func(t *testing.T) {
		r := cl.ok(t, append([]string{"-n", cp1.IP, "health", "--server=false"}, nodeFlags...)...)
		checkHealthOutput(t, r)
	})

	t.Run("health/server-side", func(t *testing.T) {
		r := cl.ok(t, append([]string{"-n", cp1.IP, "health"}, nodeFlags...)...)
		checkHealthOutput(t, r)
	})

	t.Run("health/worker-refused", func(t *testing.T) {
		r := cl.fails(t, append([]string{"-n", workers[0].IP, "health"}, nodeFlags...)...)
		mustContain(t, r, r.combined(), "only available on control plane nodes")

		if strings.Contains(r.combined(), ": OK") {
			t.Fatalf("a worker ran health checks:\n%s", r)
		}
	})

	t.Run("kubeconfig", func(t *testing.T) {
		// talosctl validates the RPC's kubeconfig against the structure Talos generates
		// (v1.14.1: pkg/kubeconfig LoadAndValidate) before it writes the file.
		path := filepath.Join(t.TempDir(), "kubeconfig")
		cl.ok(t, "-n", cp1.IP, "kubeconfig", path)
		checkKubeconfig(t, path, len(all))
	})

	t.Run("upgrade-k8s/dry-run", func(t *testing.T) {
		r := cl.ok(t, "-n", cp1.IP, "upgrade-k8s", "--to", s.targetK8s, "--dry-run")
		out := r.combined()
		mustContain(t, r, out,
			"automatically detected the lowest Kubernetes version "+strings.TrimPrefix(s.k8s, "v"),
			"discovered controlplane nodes",
			"is compatible with Kubernetes version "+s.targetK8s,
			" > update kubelet: "+strings.TrimPrefix(s.k8s, "v")+" -> "+s.targetK8s,
			" > skipped in dry-run")

		// talosctl v1.13.9 prints the running version of a component as its image tag
		// ("v1.35.2 -> 1.36.3"), v1.14.1 without the "v".
		for _, comp := range []string{"kube-apiserver", "kube-controller-manager", "kube-scheduler"} {
			mustMatch(t, r, out, regexp.QuoteMeta(" > update "+comp+": ")+"v?"+regexp.QuoteMeta(strings.TrimPrefix(s.k8s, "v")+" -> "+s.targetK8s))
		}

		for _, n := range all {
			mustContain(t, r, out, fmt.Sprintf("%q", n.IP))
		}

		// The manifest sync's server-side dry run (Talos ≥ 1.13) against what the sim applied
		// at bootstrap as that Talos does: every bootstrap object unchanged, none to prune
		// (sim/bootstrap_manifests.go; docs/SIMULATOR.md "Bootstrap manifest apply").
		mustContain(t, r, out, "updating manifests (dry run)", " < unchanged Deployment/kube-system/coredns",
			" < unchanged DaemonSet/kube-system/kube-flannel", " < unchanged Secret/kube-system/bootstrap-token-simsim")
		for _, changed := range []string{" < configured ", " < created ", " < deleted "} {
			if strings.Contains(out, changed) {
				t.Fatalf("the manifest sync would change the sim's bootstrap objects (%q):\n%s", changed, r)
			}
		}

		// Nothing changed.
		assertImages(t, cl, s.k8s)
	})

	t.Run("upgrade-k8s", func(t *testing.T) {
		r := cl.ok(t, "-n", cp1.IP, "upgrade-k8s", "--to", s.targetK8s)
		out := r.combined()
		mustContain(t, r, out, "updating \"kube-apiserver\" to version \""+s.targetK8s+"\"",
			"updating kube-proxy to version \""+s.targetK8s+"\"",
			"updating kubelet to version \""+s.targetK8s+"\"",
			// The manifest sync (server-side apply) rolls the kube-proxy DaemonSet and waits for it.
			"updating manifests", "configured DaemonSet/kube-system/kube-proxy",
			"+        image: registry.k8s.io/kube-proxy:v"+s.targetK8s, "waiting for kubernetes objects to be fully reconciled")

		for _, n := range all {
			mustContain(t, r, out, fmt.Sprintf(" < %q: successfully updated", n.IP))
		}

		assertImages(t, cl, "v"+s.targetK8s)

		// A second run finds nothing to do.
		r = cl.ok(t, "-n", cp1.IP, "upgrade-k8s", "--to", s.targetK8s, "--dry-run")
		if strings.Contains(r.combined(), " > update kube-apiserver") {
			t.Fatalf("upgrade-k8s still wants to update after the upgrade:\n%s", r)
		}
	})

	upgraded := workers[0]

	t.Run("upgrade/new-api-with-drain", func(t *testing.T) {
		pod := createRunningPod(t, cl, nodename(upgraded))

		r := cl.ok(t, "-n", upgraded.IP, "upgrade", "--image", installer(s.next), "--wait", "--timeout", "3m")
		out := r.combined()
		nn := nodename(upgraded)
		mustContain(t, r, out, "upgrade completed",
			nn+": node cordoned", nn+": evicting pod default/"+pod.Name, nn+": evicted pod default/"+pod.Name,
			nn+": node drained", "post check passed", nn+": node uncordoned")

		if strings.Contains(out, "falling back to legacy") {
			t.Fatalf("a v1.13+ node must be upgraded through LifecycleService:\n%s", r)
		}

		assertVersion(t, cl, upgraded, s.next)

		_, err := cl.kube.Client.CoreV1().Pods(pod.Namespace).Get(t.Context(), pod.Name, metav1.GetOptions{})
		if err == nil {
			t.Fatalf("pod %s/%s still exists: the drain did not evict it", pod.Namespace, pod.Name)
		}

		kn, err := cl.kube.Client.CoreV1().Nodes().Get(t.Context(), nodename(upgraded), metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}

		if kn.Spec.Unschedulable {
			t.Fatalf("node %s still cordoned after the upgrade", kn.Name)
		}
	})

	t.Run("reboot", func(t *testing.T) {
		n := workers[1]
		r := cl.ok(t, "-n", n.IP, "reboot", "--wait", "--timeout", "3m")
		// "post check passed" is talosctl's boot-id check (BootIDChangedPostCheckFn): the node
		// rebooted. The "sequence: reboot" line is not asserted: it shows only when talosctl's
		// event watch subscribes before the node goes down, which on a loaded machine the sim's
		// short reboot can beat (the events of a boot are gone with it, as on Talos).
		mustContain(t, r, r.combined(), "post check passed")
	})

	t.Run("rollback", func(t *testing.T) {
		r := cl.ok(t, "-n", upgraded.IP, "rollback")
		if strings.TrimSpace(r.stdout) != "" {
			t.Fatalf("rollback prints nothing on success:\n%s", r)
		}

		assertVersion(t, cl, upgraded, s.talos)
	})

	t.Run("reset", func(t *testing.T) {
		n := cps[len(cps)-1]
		r := cl.ok(t, "-n", n.IP, "reset", "--graceful", "--wait", "--timeout", "40s")
		mustContain(t, r, r.combined(), "task: cordonAndDrainNode", "task: leaveEtcd action: STOP",
			"phase: stopEverything action: START", "events check condition met")

		r = cl.ok(t, "-n", cp1.IP, "etcd", "members")
		if strings.Contains(r.stdout, n.IP+":2380") {
			t.Fatalf("reset node %s is still an etcd member:\n%s", n.Name, r)
		}
	})
}

// TestConformanceLegacyUpgrade upgrades a v1.12 node: talosctl v1.13.9 finds the new API missing
// and falls back to MachineService.Upgrade, then follows the reboot through events.
func TestConformanceLegacyUpgrade(t *testing.T) {
	t.Parallel()

	cl := startCluster(t, sim.Options{
		Name: "legacy", ControlPlanes: 1, Workers: 1, TalosVersion: legacyTalos,
		RebootDelay: 300 * time.Millisecond,
	}, false)

	w := cl.nodes(sim.RoleWorker)[0]

	r := cl.ok(t, "-n", w.IP, "upgrade", "--image", installer(legacyTarget), "--wait", "--timeout", "3m")
	mustContain(t, r, r.combined(), "New upgrade API is not available, falling back to legacy", "post check passed")
	assertVersion(t, cl, w, legacyTarget)
}

var healthChecks = []string{
	"etcd to be healthy",
	"etcd members to be consistent across nodes",
	"etcd members to be control plane nodes",
	"apid to be ready",
	"all nodes memory sizes",
	"all nodes disk sizes",
	"no diagnostics",
	"kubelet to be healthy",
	"all nodes to finish boot sequence",
	"all k8s nodes to report",
	"all control plane static pods to be running",
	"all control plane components to be ready",
	"all k8s nodes to report ready",
	"all k8s nodes to report schedulable",
}

// checkHealthOutput: every default check of pkg/cluster/check ran and passed, kube-proxy's
// DaemonSet included. CoreDNS may be skipped (the sim renders no CoreDNS Deployment).
func checkHealthOutput(t *testing.T, r result) {
	t.Helper()

	out := r.combined()
	for _, c := range healthChecks {
		mustContain(t, r, out, "waiting for "+c+": OK")
	}

	mustContain(t, r, out, "waiting for kube-proxy to report ready: OK")
	mustMatch(t, r, out, `waiting for coredns to report ready: (OK|SKIP)`)
}

func lineStarting(out, prefix string) string {
	for l := range strings.SplitSeq(out, "\n") {
		if strings.HasPrefix(l, prefix) {
			return l
		}
	}

	return ""
}

// assertVersion waits until the node answers `version` with want (it may still be rebooting).
func assertVersion(t *testing.T, cl *cluster, n sim.NodeInfo, want string) {
	t.Helper()

	eventually(t, 2*time.Minute, n.Name+" at "+want, func() error {
		r := cl.run(t, "-n", n.IP, "version", "--short")
		if r.err != nil {
			return r.err
		}

		if !strings.Contains(r.stdout, "Server:") || !strings.Contains(r.stdout, "Tag:         "+want) && !strings.Contains(r.stdout, want) {
			return fmt.Errorf("version says:\n%s", r.stdout)
		}

		return nil
	})
}

// assertImages checks the control planes' mirror pods, the kube-proxy DaemonSet's pods and
// every kubelet run the given version.
func assertImages(t *testing.T, cl *cluster, version string) {
	t.Helper()

	ctx := t.Context()

	pods, err := cl.kube.Client.CoreV1().Pods("kube-system").List(ctx, metav1.ListOptions{LabelSelector: "tier=control-plane"})
	if err != nil {
		t.Fatal(err)
	}

	if want := 3 * len(cl.nodes(sim.RoleControlPlane)); len(pods.Items) != want {
		t.Fatalf("%d control-plane static pods, want %d", len(pods.Items), want)
	}

	for _, p := range pods.Items {
		if img := p.Spec.Containers[0].Image; !strings.HasSuffix(img, ":"+version) {
			t.Fatalf("static pod %s runs %s, want %s", p.Name, img, version)
		}
	}

	proxies, err := cl.kube.Client.CoreV1().Pods("kube-system").List(ctx, metav1.ListOptions{LabelSelector: "k8s-app=kube-proxy"})
	if err != nil {
		t.Fatal(err)
	}

	if want := len(cl.nodes("")); len(proxies.Items) != want {
		t.Fatalf("%d kube-proxy pods, want one per node (%d)", len(proxies.Items), want)
	}

	for _, p := range proxies.Items {
		if img := p.Spec.Containers[0].Image; img != "registry.k8s.io/kube-proxy:"+version {
			t.Fatalf("kube-proxy pod %s runs %s, want %s", p.Name, img, version)
		}
	}

	nodes, err := cl.kube.Client.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}

	for _, n := range nodes.Items {
		if n.Status.NodeInfo.KubeletVersion != version {
			t.Fatalf("node %s: kubelet %s, want %s", n.Name, n.Status.NodeInfo.KubeletVersion, version)
		}
	}
}

// createRunningPod creates an unmanaged pod on the node, running and ready, for a drain to evict.
func createRunningPod(t *testing.T, cl *cluster, nodeName string) *corev1.Pod {
	t.Helper()

	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()

	pod, err := cl.kube.Client.CoreV1().Pods("default").Create(ctx, &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "drain-me", Namespace: "default"},
		Spec: corev1.PodSpec{
			NodeName:   nodeName,
			Containers: []corev1.Container{{Name: "app", Image: "registry.k8s.io/pause:3.10"}},
		},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}

	if err := testenv.SetPodRunningReady(ctx, cl.kube.Client, pod.Namespace, pod.Name); err != nil {
		t.Fatal(err)
	}

	return pod
}
