package conformance

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/talosbot/talosbot/sim"
)

// checkKubeconfig: the file talosctl wrote authenticates with a client certificate only (no
// token: Talos never writes one) and the kube-apiserver lists the cluster's Nodes with it.
func checkKubeconfig(t *testing.T, path string, nodes int) {
	t.Helper()

	st, err := os.Stat(path)
	if err != nil {
		t.Fatalf("talosctl kubeconfig wrote nothing: %v", err)
	}

	if st.Mode().Perm()&0o077 != 0 {
		t.Errorf("kubeconfig %s has mode %v: credentials must not be group or world readable", path, st.Mode().Perm())
	}

	kc, err := clientcmd.LoadFromFile(path)
	if err != nil {
		t.Fatal(err)
	}

	for name, u := range kc.AuthInfos {
		if u.Token != "" || len(u.ClientCertificateData) == 0 {
			t.Fatalf("user %s: want a client certificate and no token", name)
		}
	}

	rc, err := clientcmd.BuildConfigFromFlags("", path)
	if err != nil {
		t.Fatal(err)
	}

	cs, err := kubernetes.NewForConfig(rc)
	if err != nil {
		t.Fatal(err)
	}

	list, err := cs.CoreV1().Nodes().List(t.Context(), metav1.ListOptions{})
	if err != nil {
		t.Fatalf("the kube-apiserver refuses the kubeconfig from talosctl: %v", err)
	}

	if len(list.Items) != nodes {
		t.Fatalf("%d Nodes through the kubeconfig, want %d", len(list.Items), nodes)
	}
}

// TestConformanceV114Hop crosses the minor with the real talosctl v1.14.1, as the second hop of
// a v1.12 → v1.13 → v1.14 roll does: a cluster at v1.13.9 (no Kubernetes, so talosctl's own
// drain is off) has its worker, then its control plane, upgraded to v1.14.1 through
// LifecycleService. Mid-way the cluster is mixed and each node answers by its own version:
// etcd on the v1.13.9 control plane is 3.6.12, on v1.14.1 3.7.1. Once the worker runs v1.14.1,
// talosctl v1.13.9 (when TALOSBOT_TALOSCTL is set too) asks it for apply-config --mode=reboot,
// which v1.14 refuses.
func TestConformanceV114Hop(t *testing.T) {
	t.Parallel()

	cl := startClusterWith(t, EnvTalosctlV114, sim.Options{
		Name: "hop-v114", ControlPlanes: 1, Workers: 1, TalosVersion: "v1.13.9",
		RebootDelay: 300 * time.Millisecond,
	}, false)

	cp, w := cl.nodes(sim.RoleControlPlane)[0], cl.nodes(sim.RoleWorker)[0]

	upgrade := func(n sim.NodeInfo) {
		r := cl.ok(t, "-n", n.IP, "upgrade", "--image", installer("v1.14.1"), "--drain=false", "--wait", "--timeout", "3m")
		mustContain(t, r, r.combined(), "upgrade completed", "post check passed")

		if strings.Contains(r.combined(), "falling back to legacy") {
			t.Fatalf("a v1.13 node must be upgraded through LifecycleService:\n%s", r)
		}

		assertVersion(t, cl, n, "v1.14.1")
	}

	etcdOf := func(want string) {
		t.Helper()

		r := cl.ok(t, "-n", cp.IP, "etcd", "status")
		if line := lineStarting(r.stdout, cp.IP+" "); !strings.Contains(line, " "+want+" ") {
			t.Fatalf("etcd status does not name etcd %s:\n%s", want, r)
		}
	}

	upgrade(w)

	r := cl.ok(t, "-n", cp.IP+","+w.IP, "version")
	mustContain(t, r, r.stdout, "Tag:         v1.13.9", "Tag:         v1.14.1")
	etcdOf("3.6.12")

	t.Run("apply-config-reboot-refused-on-v1.14", func(t *testing.T) {
		old := os.Getenv(EnvTalosctl)
		if old == "" {
			t.Skipf("skipping: needs talosctl v1.13.9 too (%s): v1.14.1 no longer offers --mode=reboot", EnvTalosctl)
		}

		mc := cl.ok(t, "-n", w.IP, "get", "machineconfig", "v1alpha1", "-o", "jsonpath={.spec}")
		path := filepath.Join(t.TempDir(), "config.yaml")

		if err := os.WriteFile(path, []byte(mc.stdout), 0o600); err != nil {
			t.Fatal(err)
		}

		v113 := &cluster{sim: cl.sim, bin: old, talosconfig: cl.talosconfig, dir: cl.dir}
		r := v113.fails(t, "-n", w.IP, "apply-config", "--mode", "reboot", "-f", path)
		mustContain(t, r, r.combined(), "Unimplemented", "the REBOOT mode is not supported, please use AUTO or NO_REBOOT modes instead")
	})

	upgrade(cp)
	etcdOf("3.7.1")
}
