package releaseinfo_test

import (
	"context"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/talosbot/talosbot/internal/factory"
	"github.com/talosbot/talosbot/internal/factory/factoryfake"
	"github.com/talosbot/talosbot/internal/releases"
	"github.com/talosbot/talosbot/internal/releases/compat"
	"github.com/talosbot/talosbot/internal/testenv"
	"github.com/talosbot/talosbot/plugins/releaseinfo"
	"github.com/talosbot/talosbot/plugins/sdk"
	"github.com/talosbot/talosbot/plugins/sdk/sdktest"
	"github.com/talosbot/talosbot/sim"
	"github.com/talosbot/talosbot/state"
)

var factoryVersions = []string{"v1.11.3", "v1.11.6", "v1.12.0", "v1.12.6", "v1.13.0", "v1.13.9", "v1.14.0-beta.0"}

// notes is the release data as the bot hands it over: read from a
// (fake) Image Factory through the release source and its store cache.
func notes(t *testing.T, kubernetes ...string) (*sdk.Releases, *factoryfake.Factory) {
	t.Helper()
	now := time.Date(2026, 12, 1, 9, 0, 0, 0, time.UTC)
	f := factoryfake.Start(t, factoryVersions...)
	st, err := state.Open(filepath.Join(t.TempDir(), "s.db"), state.Options{Clock: func() time.Time { return now }})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = st.Close() })
	fc, err := factory.New(f.URL(), nil)
	if err != nil {
		t.Fatal(err)
	}
	src := &releases.Source{Fetcher: fc, URL: f.URL(), Store: st, Refresh: time.Hour, Now: func() time.Time { return now }}
	l, err := src.Talos(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	return releases.NotesOf(l, kubernetes, now.Add(2*time.Hour)), f
}

func request(c *sim.Cluster, kubeconfig []byte, rel *sdk.Releases, declared map[string]string) *sdk.OperationRequest {
	pc := &sdk.Cluster{Name: "staging", Environment: "staging", Declared: declared}
	for _, n := range c.Nodes() {
		pc.Nodes = append(pc.Nodes, &sdk.Node{Name: n.Name, Address: n.IP, Role: n.Role, Host: n.Host})
	}
	return &sdk.OperationRequest{OperationID: "op-1", Command: releaseinfo.Command, Cluster: *pc,
		Credentials: sdk.Credentials{Talosconfig: c.Talosconfig(), Kubeconfig: kubeconfig},
		Evidence:    sdk.Evidence{Releases: rel}}
}

func TestReleasesOnASimCluster(t *testing.T) {
	kube := testenv.StartKube(t)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	c, err := sim.Start(ctx, sim.Options{ControlPlanes: 1, Workers: 1, Kube: kube.Client, TalosVersion: "v1.11.3", KubernetesVersion: "v1.33.4"})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	extra, f := notes(t, "1.33.9", "1.34.5", "1.35.2", "1.36.3")
	fc, err := factory.New(f.URL(), nil)
	if err != nil {
		t.Fatal(err)
	}
	schematic, err := fc.CreateSchematic(ctx, &factory.Schematic{Customization: factory.Customization{SystemExtensions: factory.SystemExtensions{
		OfficialExtensions: []string{"siderolabs/iscsi-tools"}}}})
	if err != nil {
		t.Fatal(err)
	}
	req := request(c, kube.Kubeconfig, extra, map[string]string{"schematic_id": schematic})

	plan, err := sdktest.Plan(ctx, releaseinfo.New(), req)
	if err != nil {
		t.Fatal(err)
	}
	in, err := releases.InspectionFromPlan(plan.CanonicalInputs)
	if err != nil {
		t.Fatal(err)
	}
	if in.Talos.Tag() != "v1.11.3" || in.Kubernetes.Plain() != "1.33.4" || in.Supports[mustV("v1.13.9")].String() != "1.31–1.36" || !in.KubernetesOK(mustV("v1.13.9")) {
		t.Errorf("inspection %+v", in)
	}
	// The Plan is also /talos status's versions line (Command.status_label).
	if got := strings.Join(plan.Status, " · "); got != "Talos v1.11.3 (2 nodes) · Kubernetes v1.33.4" {
		t.Errorf("status lines = %q", got)
	}

	rec, err := sdktest.Run(ctx, releaseinfo.New(), req, nil)
	if err != nil {
		t.Fatal(err)
	}
	res := rec.FinalResult()
	all := strings.Join(res.Lines, "\n")
	for _, want := range []string{
		"running: Talos v1.11.3 (v1.11.3 on ",
		"running: Kubernetes 1.33.4; Talos v1.11 supports Kubernetes 1.29–1.34",
		"release data: Image Factory http://127.0.0.1:",
		", read 2h ago",
		"latest patch per minor: v1.11.6, v1.12.6, v1.13.9",
		"path: v1.11.3 → v1.11.6 → v1.12.6 → v1.13.9 (3 hops, one rolling upgrade each)",
		"hop 2/3: v1.11.6 → v1.12.6 — Talos v1.12 supports Kubernetes 1.30–1.35; Kubernetes 1.33.4 supported",
		"Kubernetes targets (releases.kubernetes) supported by Talos v1.11.3: 1.33.9, 1.34.5",
		"Kubernetes 1.36.3: ⛔ R20",
		"upgrade Talos first",
		"✅ installer class default (schematic " + schematic[:12] + "…): siderolabs/iscsi-tools built for v1.13.9",
	} {
		if !strings.Contains(all, want) {
			t.Errorf("lines lack %q:\n%s", want, all)
		}
	}
	if !res.OK || len(res.SuggestedActions) != 1 || res.SuggestedActions[0].Command != "/talos upgrade talos v1.13.9 staging" {
		t.Errorf("result %v", res)
	}

	// The factory stops building iscsi-tools for v1.13.9 (R14), and a
	// schematic it does not know (R13): both named.
	f.SetExtensions("v1.13.9", "siderolabs/util-linux-tools")
	rec, err = sdktest.Run(ctx, releaseinfo.New(), req, nil)
	if err != nil {
		t.Fatal(err)
	}
	if all := strings.Join(rec.FinalResult().Lines, "\n"); !strings.Contains(all, "siderolabs/iscsi-tools not built for v1.13.9 (R14") {
		t.Errorf("missing extension not reported:\n%s", all)
	}
	req.Cluster.Declared["schematic_id"] = strings.Repeat("0", 64)
	rec, err = sdktest.Run(ctx, releaseinfo.New(), req, nil)
	if err != nil {
		t.Fatal(err)
	}
	if all := strings.Join(rec.FinalResult().Lines, "\n"); !strings.Contains(all, "Image Factory does not know schematic 000000000000… (schematic_id): the installer for v1.13.9 cannot be pulled (R13)") {
		t.Errorf("unknown schematic not reported:\n%s", all)
	}
}

func mustV(s string) releases.Version {
	v, err := releases.Parse(s)
	if err != nil {
		panic(err)
	}
	return v
}

func TestReportRefusesAPathThatStrandsKubernetes(t *testing.T) {
	n, _ := releases.ReadNotes(&sdk.Releases{Versions: []string{"v1.12.6", "v1.13.9"}, Targets: []string{"v1.12.6", "v1.13.9"}, Origin: "releases.talos", Kubernetes: []string{"1.31.14"}})
	o := releaseinfo.Observed{Talos: mustV("v1.12.6"), ByNode: map[string]string{"cp-1": "v1.12.6"}, Kubernetes: mustV("1.30.4")}
	rep := releaseinfo.Report(compat.Machinery{}, "production", o, n)
	all := strings.Join(rep.Lines, "\n")
	for _, want := range []string{"newest: v1.13.9 — ⛔ R20: hop 1 (v1.12.6 → v1.13.9) would leave Kubernetes 1.30.4 unsupported", "→ upgrade Kubernetes first (R11: its own operation): /talos upgrade k8s 1.31.14"} {
		if !strings.Contains(all, want) {
			t.Errorf("lines lack %q:\n%s", want, all)
		}
	}
	if len(rep.Actions) != 0 || !strings.Contains(rep.Summary, "blocked (R20)") {
		t.Errorf("report %+v", rep)
	}
	// No release data from the bot: the configured list, and an unknown Kubernetes.
	rep = releaseinfo.Report(compat.Machinery{}, "production", releaseinfo.Observed{Talos: mustV("v1.13.9"), ByNode: map[string]string{"cp-1": "v1.13.9"}, KubeNote: "no kubeconfig"}, n)
	if all := strings.Join(rep.Lines, "\n"); !strings.Contains(all, "Kubernetes unknown (no kubeconfig)") || !strings.Contains(all, "runs the newest release, v1.13.9") {
		t.Errorf("lines:\n%s", all)
	}
}

// StatusLines names every version with its nodes when they differ, the
// nodes that did not answer, and why Kubernetes was not read: never a guess.
func TestStatusLinesSayWhatWasNotRead(t *testing.T) {
	o := releaseinfo.Observed{ByNode: map[string]string{"cp-1": "v1.13.9", "cp-2": "v1.12.6", "w-1": "v1.13.9"},
		Unread: map[string]string{"w-2": "connection refused"}, KubeNote: "no kubeconfig"}
	got := strings.Join(releaseinfo.StatusLines(o), " · ")
	if want := "Talos mixed: v1.12.6 on cp-2; v1.13.9 on cp-1, w-1 (not read from w-2) · Kubernetes not read (no kubeconfig)"; got != want {
		t.Errorf("status lines\n got %q\nwant %q", got, want)
	}
}

// TestReportNamesTheBreakingChangesOnTheWay: /talos releases on a v1.13.9
// cluster with v1.14.1 out lists v1.14's breaking changes with what to do
// and which ones the upgrade's pre-flight checks; none within a minor.
func TestReportNamesTheBreakingChangesOnTheWay(t *testing.T) {
	n, _ := releases.ReadNotes(&sdk.Releases{Versions: []string{"v1.13.9", "v1.14.0", "v1.14.1"}, Targets: []string{"v1.13.9", "v1.14.0", "v1.14.1"}, Origin: "Image Factory", Kubernetes: []string{"1.36.3"}})
	o := releaseinfo.Observed{Talos: mustV("v1.13.9"), ByNode: map[string]string{"cp-1": "v1.13.9"}, Kubernetes: mustV("1.36.3")}
	rep := releaseinfo.Report(compat.Machinery{}, "production", o, n)
	all := strings.Join(rep.Lines, "\n")
	for _, want := range []string{"newest: v1.14.1", "breaking changes between v1.13.9 and v1.14.1 (",
		"• v1.14 etcd metrics on port 2383: etcd serves /metrics and /health on port 2383", "scrape etcd on 2383",
		"• v1.14 installer only from Image Factory", "(the upgrade's pre-flight refuses a cluster it affects)"} {
		if !strings.Contains(all, want) {
			t.Errorf("lines lack %q:\n%s", want, all)
		}
	}
	if strings.Contains(all, "extraKernelArgs") {
		t.Errorf("a v1.13 change listed for a v1.13.9 cluster:\n%s", all)
	}
	o = releaseinfo.Observed{Talos: mustV("v1.14.0"), ByNode: map[string]string{"cp-1": "v1.14.0"}, Kubernetes: mustV("1.36.3")}
	if all := strings.Join(releaseinfo.Report(compat.Machinery{}, "production", o, n).Lines, "\n"); strings.Contains(all, "breaking changes") {
		t.Errorf("a patch upgrade lists breaking changes:\n%s", all)
	}
}
