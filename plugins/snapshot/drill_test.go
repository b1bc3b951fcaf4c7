package snapshot

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"filippo.io/age"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/talosbot/talosbot/internal/testenv"
	"github.com/talosbot/talosbot/plugins/sdk"
	"github.com/talosbot/talosbot/plugins/sdk/sdktest"
	"github.com/talosbot/talosbot/sim"
)

// startSimWithKube starts a one-control-plane sim whose kube-apiserver
// stores into the sim's etcd, so snapshots hold real /registry data.
func startSimWithKube(t *testing.T) (*sim.Cluster, *testenv.Kube) {
	t.Helper()
	return startSimWithKubeOpts(t, sim.Options{})
}

// startSimWithKubeOpts is startSimWithKube with extra options (the Kubernetes side's).
func startSimWithKubeOpts(t *testing.T, extra sim.Options) (*sim.Cluster, *testenv.Kube) {
	t.Helper()
	startKube := testenv.KubeStarter(t)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	var kube *testenv.Kube
	c, err := sim.Start(ctx, sim.Options{Dir: t.TempDir(), ControlPlanes: 1, Workers: 1,
		StaticPods: extra.StaticPods, BootstrapManifests: extra.BootstrapManifests,
		KubeOnEtcd: func(ctx context.Context, servers []string) (sim.KubeBackend, error) {
			k, err := startKube(ctx, servers)
			if err != nil {
				return sim.KubeBackend{}, err
			}
			kube = k
			return sim.KubeBackend{Client: k.Client, Kubeconfig: k.Kubeconfig, Stop: k.Stop}, nil
		}})
	if err != nil {
		t.Fatalf("start sim: %v", err)
	}
	t.Cleanup(func() { _ = c.Close() })
	return c, kube
}

func createWorkload(t *testing.T, kube *testenv.Kube, ns string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cs := kube.Client
	if _, err := cs.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := cs.CoreV1().Secrets(ns).Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "db-password"},
		StringData: map[string]string{"password": "drill-secret-value"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	one := int32(1)
	labels := map[string]string{"app": "web"}
	if _, err := cs.AppsV1().Deployments(ns).Create(ctx, &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Name: "web"},
		Spec: appsv1.DeploymentSpec{Replicas: &one, Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: labels},
				Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "web", Image: "nginx:1.27"}}}}}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
}

func drillRequest(c *sim.Cluster, kube *testenv.Kube, dir string, args map[string]string) *sdk.OperationRequest {
	req := request(c, dir, 0)
	req.Command, req.Args = DrillCommand, args
	req.Credentials.Kubeconfig = kube.Kubeconfig
	return req
}

func runOK(t *testing.T, ctx context.Context, p *Plugin, req *sdk.OperationRequest) *sdk.Result {
	t.Helper()
	rec, err := sdktest.Run(ctx, p, req, nil)
	if err != nil {
		t.Fatal(err)
	}
	return rec.FinalResult()
}

func TestRestoreDrill(t *testing.T) {
	c, kube := startSimWithKube(t)
	createWorkload(t, kube, "drill-a")
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	dir := t.TempDir()
	p := &Plugin{now: fixedClock(time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC))}
	if res := runOK(t, ctx, p, request(c, dir, 0)); !res.OK {
		t.Fatalf("snapshot: %v", res)
	}
	// A namespace created after the snapshot: churn the tolerance covers,
	// and exactly what a zero tolerance reports missing.
	createWorkload(t, kube, "drill-b")

	t.Run("passes and reports counts", func(t *testing.T) {
		before := c.Calls("cp-1", "EtcdSnapshot") + c.Calls("cp-1", "EtcdStatus")
		res := runOK(t, ctx, p, drillRequest(c, kube, dir, nil))
		if after := c.Calls("cp-1", "EtcdSnapshot") + c.Calls("cp-1", "EtcdStatus"); after != before {
			t.Fatalf("the drill called the cluster's etcd API (%d calls before, %d after)", before, after)
		}
		text := strings.Join(res.Lines, "\n")
		if !res.OK {
			t.Fatalf("drill failed: %s\n%s", res.Error, text)
		}
		t.Logf("drill report:\n%s", text)
		for _, want := range []string{"✅ namespaces: ", "✅ secrets: ", "✅ deployments: ", "revision ", "restored in ", "old"} {
			if !strings.Contains(text, want) {
				t.Fatalf("report lacks %q:\n%s", want, text)
			}
		}
		left, _ := filepath.Glob(filepath.Join(dir, "staging", ".drill-*"))
		if len(left) != 0 {
			t.Fatalf("throwaway data left behind: %v", left)
		}
	})
	t.Run("zero tolerance names the missing namespace", func(t *testing.T) {
		res := runOK(t, ctx, p, drillRequest(c, kube, dir, map[string]string{"tolerance": "0"}))
		if res.OK || !strings.Contains(res.Error, "namespaces: ") || !strings.Contains(res.Error, "1 missing (tolerance 0)") {
			t.Fatalf("want a failure naming namespaces, got ok=%v %q\n%v", res.OK, res.Error, res.Lines)
		}
	})
	t.Run("truncated snapshot fails clearly", func(t *testing.T) {
		files, _ := filepath.Glob(filepath.Join(dir, "staging", "*.db"))
		b, err := os.ReadFile(files[0])
		if err != nil {
			t.Fatal(err)
		}
		trunc := filepath.Join(dir, "staging", "20260302T000000Z-cp-1.db") // newer: the drill picks it
		if err := os.WriteFile(trunc, b[:len(b)/2], 0o600); err != nil {
			t.Fatal(err)
		}
		defer os.Remove(trunc)
		res := runOK(t, ctx, p, drillRequest(c, kube, dir, nil))
		if res.OK || !strings.Contains(res.Error, "does not restore") && !strings.Contains(res.Error, "etcd cannot read the snapshot") {
			t.Fatalf("truncated snapshot: ok=%v %q", res.OK, res.Error)
		}
	})
	t.Run("refuses without kubeconfig", func(t *testing.T) {
		req := drillRequest(c, kube, dir, nil)
		req.Credentials.Kubeconfig = nil
		plan, err := p.Plan(ctx, req)
		if err != nil || plan.Refusal == nil || !strings.Contains(plan.Refusal.Fix, "kubeconfig") {
			t.Fatalf("plan = %v, %v", plan, err)
		}
	})
}

// TestRestoreDrillHealthyCluster: on a healthy cluster with nothing but what Talos's bootstrap
// manifests create (the demo's clusters: CoreDNS is the only Deployment, the bootstrap token
// the only Secret), the drill passes with the counts it finds; before, it required
// Deployments and Secrets of its own and failed ("no deployments in the restored etcd").
func TestRestoreDrillHealthyCluster(t *testing.T) {
	c, kube := startSimWithKubeOpts(t, sim.Options{StaticPods: true, BootstrapManifests: true})
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	deps, err := kube.Client.AppsV1().Deployments(metav1.NamespaceAll).List(ctx, metav1.ListOptions{})
	if err != nil || len(deps.Items) != 1 || deps.Items[0].Name != "coredns" {
		t.Fatalf("Deployments on a fresh cluster: %v %v, want CoreDNS only", deps, err)
	}
	dir := t.TempDir()
	p := &Plugin{now: fixedClock(time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC))}
	if res := runOK(t, ctx, p, request(c, dir, 0)); !res.OK {
		t.Fatalf("snapshot: %v", res)
	}
	res := runOK(t, ctx, p, drillRequest(c, kube, dir, map[string]string{"tolerance": "0"}))
	text := strings.Join(res.Lines, "\n")
	if !res.OK {
		t.Fatalf("drill of a healthy cluster failed: %s\n%s", res.Error, text)
	}
	if !strings.Contains(text, "✅ deployments: 1 in the snapshot, 1 live") {
		t.Fatalf("report lacks the CoreDNS Deployment:\n%s", text)
	}
}

// The drill fetches from off-site storage when it is configured (proving
// that path) and decrypts with the identity given for that operation.
func TestRestoreDrillOffsiteEncrypted(t *testing.T) {
	c, kube := startSimWithKube(t)
	createWorkload(t, kube, "drill-a")
	endpoint := startS3(t)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	id, err := age.GenerateX25519Identity()
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	p := &Plugin{now: fixedClock(time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC))}
	req := request(c, dir, 0)
	withOffsite(req, endpoint, 5)
	req.Evidence.Backups.AgeRecipients = []string{id.Recipient().String()}
	if res := runOK(t, ctx, p, req); !res.OK {
		t.Fatalf("snapshot: %v", res)
	}
	// Remove the local copy: the drill must use the off-site one.
	local, _ := filepath.Glob(filepath.Join(dir, "staging", "*.db.age"))
	for _, f := range local {
		_ = os.Remove(f)
	}
	drillReq := func(identity []byte) *sdk.OperationRequest {
		r := drillRequest(c, kube, dir, nil)
		withOffsite(r, endpoint, 5)
		r.Credentials.AgeIdentity = identity
		return r
	}
	t.Run("passes from off-site", func(t *testing.T) {
		res := runOK(t, ctx, p, drillReq([]byte(id.String()+"\n")))
		if !res.OK || !strings.Contains(strings.Join(res.Lines, "\n"), "s3://snaps/tb/staging/") {
			t.Fatalf("drill: %v %q %v", res.OK, res.Error, res.Lines)
		}
	})
	t.Run("wrong identity fails clearly", func(t *testing.T) {
		other, _ := age.GenerateX25519Identity()
		res := runOK(t, ctx, p, drillReq([]byte(other.String())))
		if res.OK || !strings.Contains(res.Error, "encrypted to other age recipients") || strings.Contains(res.Error, other.String()) {
			t.Fatalf("wrong identity: %v %q", res.OK, res.Error)
		}
	})
	t.Run("no identity fails clearly", func(t *testing.T) {
		res := runOK(t, ctx, p, drillReq(nil))
		if res.OK || !strings.Contains(res.Error, "snapshots.encryption.identity") {
			t.Fatalf("no identity: %v %q", res.OK, res.Error)
		}
	})
}
