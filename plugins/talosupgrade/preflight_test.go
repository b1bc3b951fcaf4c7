package talosupgrade

import (
	"slices"
	"strings"
	"testing"
	"time"

	machineapi "github.com/siderolabs/talos/pkg/machinery/api/machine"
	"github.com/siderolabs/talos/pkg/machinery/client"
	"github.com/siderolabs/talos/pkg/machinery/config/encoder"
	"github.com/siderolabs/talos/pkg/machinery/config/types/meta"
	"github.com/siderolabs/talos/pkg/machinery/config/types/v1alpha1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/talosbot/talosbot/internal/releases"
	"github.com/talosbot/talosbot/plugins/cluster"
	"github.com/talosbot/talosbot/plugins/cluster/talos"
	"github.com/talosbot/talosbot/plugins/sdk"
	"github.com/talosbot/talosbot/plugins/sdk/sdktest"
	"github.com/talosbot/talosbot/sim"
)

// known are the releases the pre-flight tests plan against: v1.14.1 with
// the v1.12 and v1.13 stops before it.
var known = []string{"v1.12.6", "v1.13.2", "v1.13.9", "v1.14.1"}

// startAt runs a sim whose nodes run version.
func startAt(t *testing.T, version string, withKube bool) *env {
	t.Helper()
	return start(t, 1, 1, withKube, func(o *sim.Options) { o.TalosVersion = version })
}

// patchConfig applies node's machine config, patched, through the Talos API
// (ApplyConfiguration, no reboot), as an operator's Terraform change does.
func (e *env) patchConfig(t *testing.T, name string, patch func(*v1alpha1.Config)) {
	t.Helper()
	ctx := ctxFor(t, time.Minute)
	tc, err := cluster.NewTalosClient(ctx, e.c.Talosconfig(), []string{e.info(t, controlPlane(e, t)).IP})
	if err != nil {
		t.Fatal(err)
	}
	defer tc.Close() //nolint:errcheck
	addr := e.info(t, name).IP
	mc, err := cluster.MachineConfigOf(ctx, tc.COSI, addr)
	if err != nil {
		t.Fatal(err)
	}
	patched, err := mc.PatchV1Alpha1(func(c *v1alpha1.Config) error { patch(c); return nil })
	if err != nil {
		t.Fatal(err)
	}
	data, err := patched.EncodeBytes(encoder.WithComments(encoder.CommentsDisabled))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tc.ApplyConfiguration(client.WithNode(ctx, addr), &machineapi.ApplyConfigurationRequest{Data: data, Mode: machineapi.ApplyConfigurationRequest_NO_REBOOT}); err != nil {
		t.Fatalf("apply config to %s: %v", name, err)
	}
}

func (e *env) preflightRequest(t *testing.T, version string) *sdk.OperationRequest {
	t.Helper()
	req := e.request(t, version)
	req.Evidence.Releases = sdktest.Releases(known...)
	return req
}

func worker(e *env, t *testing.T) string { return e.c.Nodes()[len(e.c.Nodes())-1].Name }
func controlPlane(e *env, t *testing.T) string {
	t.Helper()
	for _, n := range e.c.Nodes() {
		if n.Role == sim.RoleControlPlane {
			return n.Name
		}
	}
	t.Fatal("no control plane")
	return ""
}

func precondition(p *sdk.OperationPlan, name string) *sdk.Precondition {
	for _, c := range p.Preconditions {
		if c.Name == name {
			return c
		}
	}
	return nil
}

func hasWarning(p *sdk.OperationPlan, parts ...string) bool {
	for _, w := range p.Warnings {
		all := true
		for _, s := range parts {
			all = all && strings.Contains(w, s)
		}
		if all {
			return true
		}
	}
	return false
}

// TestPreflightExtraKernelArgsOnTheLifecyclePath: a v1.13 node is upgraded
// through LifecycleService.Upgrade, which drops machine.install.
// extraKernelArgs (siderolabs/talos#13967): refused (R13) before anything
// is touched, naming the node, its arguments and the schematic fix. With
// grubUseUKICmdline the arguments had no effect anyway: a warning.
func TestPreflightExtraKernelArgsOnTheLifecyclePath(t *testing.T) {
	t.Parallel()
	slow(t)
	// A v1.13 node is drained before its reboot: Kubernetes must be
	// there, or the plan is refused for that first (R3).
	e := startAt(t, "v1.13.2", true)
	w := worker(e, t)
	e.patchConfig(t, w, func(c *v1alpha1.Config) {
		c.MachineConfig.MachineInstall.InstallExtraKernelArgs = []string{"console=ttyS1,115200", "siderolink.api=grpc://10.0.0.9:8090?jointoken=s3cr3t"}
		c.MachineConfig.MachineInstall.InstallGrubUseUKICmdline = new(false)
	})
	req := e.preflightRequest(t, "v1.13.9")
	refusedEverywhere(t, e, req, "R13", "machine.install.extraKernelArgs on "+w+" (console siderolink.api)")
	p := plan(t, req)
	// The arguments' values may be secrets (a join token): only names reach chat.
	if text := p.Refusal.Reason + p.Refusal.Fix + strings.Join(p.Warnings, " "); strings.Contains(text, "s3cr3t") || strings.Contains(text, "ttyS1") {
		t.Errorf("an argument's value reached the refusal: %v", p.Refusal)
	}
	for _, want := range []string{"#13967", "LifecycleService.Upgrade"} {
		if !strings.Contains(p.Refusal.Reason, want) {
			t.Errorf("reason %q lacks %q", p.Refusal.Reason, want)
		}
	}
	if !strings.Contains(p.Refusal.Fix, "customization.extraKernelArgs") {
		t.Errorf("fix %q does not name the schematic", p.Refusal.Fix)
	}

	e.patchConfig(t, w, func(c *v1alpha1.Config) { c.MachineConfig.MachineInstall.InstallGrubUseUKICmdline = new(true) })
	p = plan(t, req)
	if p.Refusal != nil || !hasWarning(p, w, "have no effect") {
		t.Fatalf("grubUseUKICmdline: want a plan with a warning, got %v %q", p.Refusal, p.Warnings)
	}
	if c := precondition(p, "target pre-flight"); c == nil || !strings.Contains(c.Detail, "→ v1.13.9") {
		t.Errorf("precondition: %v", c)
	}
}

// TestPreflightChecksEveryHop: from v1.12.6 the first hop (to v1.13.9) is
// a legacy upgrade, which keeps the arguments; the second hop starts on
// v1.13.9, on the LifecycleService path: the plan is refused for hop 2.
func TestPreflightChecksEveryHop(t *testing.T) {
	t.Parallel()
	e := startAt(t, "v1.12.6", false)
	w := worker(e, t)
	e.patchConfig(t, w, func(c *v1alpha1.Config) {
		c.MachineConfig.MachineInstall.InstallExtraKernelArgs = []string{"net.ifnames=0"}
	})
	req := e.preflightRequest(t, "v1.13.9")
	if p := plan(t, req); p.Refusal != nil {
		t.Fatalf("a legacy hop keeps the arguments: %v", p.Refusal)
	}
	req.Args["version"] = "v1.14.1"
	refusedEverywhere(t, e, req, "R13", "hop 2/2 → v1.14.1: machine.install.extraKernelArgs on "+w)
}

// TestPreflightV114Refusals: what Talos v1.14 refuses or no longer ships
// refuses a plan into v1.14, with the fix: an installer not from Image
// Factory (R13, before R14's generic refusal), a pinned etcd older than
// 3.6 and tls-min-version in the extraArgs of etcd or kube-apiserver (R10,
// which v1.14's deny lists reject, so the component would not start).
func TestPreflightV114Refusals(t *testing.T) {
	t.Parallel()
	slow(t)
	e := startAt(t, "v1.13.9", true)
	w, cp := worker(e, t), controlPlane(e, t)
	req := e.preflightRequest(t, "v1.14.1")
	// No kubeconfig configured: the roll drains with the one the Talos API
	// serves, and the checks that need Kubernetes read through it too.
	req.Credentials.Kubeconfig = nil
	p := plan(t, req)
	if p.Refusal != nil {
		t.Fatalf("a clean v1.13.9 cluster: %v", p.Refusal)
	}
	if hasWarning(p, "could not be looked for") {
		t.Errorf("Kubernetes is reachable through the Talos-served kubeconfig, yet: %q", p.Warnings)
	}
	if !hasWarning(p, "TLS 1.3 only") || !hasWarning(p, "ℹ️ → v1.14.1: v1.14 breaking changes:", "apply-config --mode=reboot removed") {
		t.Errorf("warnings: %q", p.Warnings)
	}

	var image string
	e.patchConfig(t, w, func(c *v1alpha1.Config) {
		image = c.MachineConfig.MachineInstall.InstallImage
		c.MachineConfig.MachineInstall.InstallImage = "ghcr.io/siderolabs/installer:v1.13.9"
	})
	refusedEverywhere(t, e, req, "R13", "machine.install.image is not from Image Factory on "+w+" (ghcr.io/siderolabs/installer:v1.13.9): ghcr.io/siderolabs/installer is no longer published")
	// The same image is fine within v1.13 (R14 decides there).
	req.Args["version"] = "v1.13.9"
	if r := plan(t, req).Refusal; r != nil && strings.Contains(r.Reason, "no longer published") {
		t.Errorf("a v1.13 target: %v", r)
	}
	req.Args["version"] = "v1.14.1"
	e.patchConfig(t, w, func(c *v1alpha1.Config) { c.MachineConfig.MachineInstall.InstallImage = image })

	e.patchConfig(t, cp, func(c *v1alpha1.Config) {
		if c.ClusterConfig.EtcdConfig == nil {
			c.ClusterConfig.EtcdConfig = &v1alpha1.EtcdConfig{}
		}
		c.ClusterConfig.EtcdConfig.ContainerImage = "gcr.io/etcd-development/etcd:v3.5.21"
	})
	refusedEverywhere(t, e, req, "R10", cp+" pins cluster.etcd.image gcr.io/etcd-development/etcd:v3.5.21: Talos v1.14 is compatible with etcd 3.6.x only")
	e.patchConfig(t, cp, func(c *v1alpha1.Config) {
		c.ClusterConfig.EtcdConfig.ContainerImage = "gcr.io/etcd-development/etcd:v3.6.9"
	})
	if p := plan(t, req); p.Refusal != nil || !hasWarning(p, "pins cluster.etcd.image gcr.io/etcd-development/etcd:v3.6.9") {
		t.Fatalf("etcd pinned at 3.6: %v %q", p.Refusal, p.Warnings)
	}
	e.patchConfig(t, cp, func(c *v1alpha1.Config) { c.ClusterConfig.EtcdConfig.ContainerImage = "" })

	e.patchConfig(t, cp, func(c *v1alpha1.Config) {
		if c.ClusterConfig.APIServerConfig == nil {
			c.ClusterConfig.APIServerConfig = &v1alpha1.APIServerConfig{}
		}
		if c.ClusterConfig.APIServerConfig.ExtraArgsConfig == nil {
			c.ClusterConfig.APIServerConfig.ExtraArgsConfig = meta.Args{}
		}
		c.ClusterConfig.APIServerConfig.ExtraArgsConfig["tls-min-version"] = meta.NewArgValue("VersionTLS12", nil)
	})
	refusedEverywhere(t, e, req, "R10", cp+" cluster.apiServer.extraArgs tls-min-version")
}

// TestPreflightWarnsFromKubernetes: with a kubeconfig, the pre-flight finds
// the Services that reach etcd's 2379 (metrics scrapers: etcd serves
// /metrics on 2383 from v1.14) and in-tree iSCSI PersistentVolumes
// (workload isolation stops them), and names them on the card.
func TestPreflightWarnsFromKubernetes(t *testing.T) {
	t.Parallel()
	slow(t)
	e := startAt(t, "v1.13.9", true)
	ctx := ctxFor(t, time.Minute)
	kc := e.kube.Client
	if _, err := kc.CoreV1().Services("kube-system").Create(ctx, &corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: "prom-kube-etcd"},
		Spec: corev1.ServiceSpec{ClusterIP: corev1.ClusterIPNone, Ports: []corev1.ServicePort{{Name: "http-metrics", Port: 2379}}}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := kc.CoreV1().PersistentVolumes().Create(ctx, &corev1.PersistentVolume{ObjectMeta: metav1.ObjectMeta{Name: "db-iscsi"},
		Spec: corev1.PersistentVolumeSpec{Capacity: corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("1Gi")},
			AccessModes: []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
			PersistentVolumeSource: corev1.PersistentVolumeSource{ISCSI: &corev1.ISCSIPersistentVolumeSource{
				TargetPortal: "10.0.0.9:3260", IQN: "iqn.2001-04.com.example:db", Lun: 0}}}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	p := plan(t, e.preflightRequest(t, "v1.14.1"))
	if p.Refusal != nil {
		t.Fatal(p.Refusal)
	}
	if !hasWarning(p, "Service kube-system/prom-kube-etcd reach(es) etcd on 2379", "2383") {
		t.Errorf("no scraper warning: %q", p.Warnings)
	}
	if !hasWarning(p, "in-tree iSCSI volumes (PV db-iscsi)", "CSI driver") {
		t.Errorf("no iSCSI warning: %q", p.Warnings)
	}
}

// BenchmarkTargetPreflight is what the pre-flight adds to a plan: reading
// every node's machine config, the etcd members and Kubernetes (3 control
// planes, 2 workers, a real kube-apiserver), then the checks of a hop
// into v1.14.
func BenchmarkTargetPreflight(b *testing.B) {
	e := start(b, 3, 2, true, func(o *sim.Options) { o.TalosVersion = "v1.13.9" })
	req := e.request(b, "v1.14.1")
	ctx := ctxFor(b, time.Minute)
	s, err := cluster.OpenRequest(ctx, req)
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close() //nolint:errcheck
	at := map[string]talos.Release{}
	for _, n := range s.Inv.Nodes {
		at[n.Name] = talos.Release{Major: 1, Minor: 13, Patch: 9}
	}
	stops := []releases.Version{{Major: 1, Minor: 14, Patch: 1}}
	b.ResetTimer()
	for range b.N {
		if _, err := runPreflight(ctx, s, at, stops, nil); err != nil {
			b.Fatal(err)
		}
	}
}

// TestPreflightChecksOnFacts covers what a sim cluster cannot show (its
// etcd is a real 3.6): a member that runs etcd 3.5, or whose version could
// not be read, refuses a hop into v1.14; a customised listen-metrics-urls
// keeps the metrics where they are (no warning); etcd's tls-min-version is
// refused, cipher suites and FlexVolume warned about; a hop within v1.14
// runs none of the v1.14 crossing checks.
func TestPreflightChecksOnFacts(t *testing.T) {
	t.Parallel()
	inv := cluster.Inventory{Name: "staging", Nodes: []cluster.Node{
		{Name: "cp-1", Role: cluster.RoleControlPlane, Address: "10.0.0.1"},
		{Name: "w-1", Role: cluster.RoleWorker, Address: "10.0.0.2"}}}
	v := func(s string) releases.Version { x, _ := releases.Parse(s); return x }
	hop := []preflightHop{{n: 1, of: 1, to: v("v1.14.1"), from: map[string]releases.Version{"cp-1": v("v1.13.9"), "w-1": v("v1.13.9")}}}
	facts := func() *clusterFacts {
		return &clusterFacts{nodes: map[string]nodeFacts{"cp-1": {node: inv.Nodes[0]}, "w-1": {node: inv.Nodes[1]}},
			etcd: map[string]string{"cp-1": "3.6.9"}, kube: true}
	}
	if r := targetPreflight(facts(), hop, inv); r.refusal != nil {
		t.Fatalf("clean: %v", r.refusal)
	}
	f := facts()
	f.etcd["cp-1"] = "3.5.17"
	if r := targetPreflight(f, hop, inv); r.refusal == nil || r.refusal.Rule != "R10" || !strings.Contains(r.refusal.Reason, "cp-1 runs etcd 3.5.17") {
		t.Errorf("etcd 3.5: %v", r.refusal)
	}
	f = facts()
	delete(f.etcd, "cp-1")
	if r := targetPreflight(f, hop, inv); r.refusal == nil || !strings.Contains(r.refusal.Reason, "the etcd version of cp-1 could not be read") {
		t.Errorf("etcd unread: %v", r.refusal)
	}
	f = facts()
	f.scrapers = []string{"Service monitoring/etcd"}
	if r := targetPreflight(f, hop, inv); !slices.ContainsFunc(r.warnings, func(w string) bool { return strings.Contains(w, "Service monitoring/etcd reach(es) etcd on 2379") }) {
		t.Errorf("scraper: %q", r.warnings)
	}
	cp := f.nodes["cp-1"]
	cp.etcdArgs = []string{"cipher-suites", "listen-metrics-urls"}
	f.nodes["cp-1"] = cp
	f.flex = []string{"PV old-flex"}
	r := targetPreflight(f, hop, inv)
	for _, w := range r.warnings {
		if strings.Contains(w, "2379") {
			t.Errorf("listen-metrics-urls is customised, yet: %q", w)
		}
	}
	if !slices.ContainsFunc(r.warnings, func(w string) bool { return strings.Contains(w, "cp-1 cluster.etcd.extraArgs cipher-suites: ignored") }) ||
		!slices.ContainsFunc(r.warnings, func(w string) bool { return strings.Contains(w, "FlexVolume volumes (PV old-flex)") }) {
		t.Errorf("warnings: %q", r.warnings)
	}
	cp.etcdArgs = []string{"tls-min-version"}
	f.nodes["cp-1"] = cp
	if r := targetPreflight(f, hop, inv); r.refusal == nil || !strings.Contains(r.refusal.Reason, "cp-1 cluster.etcd.extraArgs tls-min-version") {
		t.Errorf("etcd tls-min-version: %v", r.refusal)
	}
	// Within v1.14: nothing is crossed.
	within := []preflightHop{{n: 1, of: 1, to: v("v1.14.1"), from: map[string]releases.Version{"cp-1": v("v1.14.0")}}}
	if r := targetPreflight(f, within, inv); r.refusal != nil || len(r.warnings) != 0 {
		t.Errorf("within v1.14: %v %q", r.refusal, r.warnings)
	}
}
