package gate

import (
	"context"
	"errors"
	"io"
	"net/netip"
	"strings"
	"sync"
	"testing"
	"time"

	clusterapi "github.com/siderolabs/talos/pkg/machinery/api/cluster"
	"github.com/siderolabs/talos/pkg/machinery/api/common"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	dynfake "k8s.io/client-go/dynamic/fake"
	kubefake "k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"

	"github.com/talosbot/talosbot/plugins/cluster"
	"github.com/talosbot/talosbot/plugins/sdk"
	"github.com/talosbot/talosbot/plugins/sdk/sdktest"
)

// fluxLists are the list kinds the fake dynamic client needs for Flux.
var fluxLists = map[schema.GroupVersionResource]string{KustomizationGVR: "KustomizationList", HelmReleaseGVR: "HelmReleaseList"}

// noFlux is a dynamic client whose API server does not serve the Flux
// groups: every list answers 404, as a real kube-apiserver does.
func noFlux() *dynfake.FakeDynamicClient {
	dyn := dynfake.NewSimpleDynamicClientWithCustomListKinds(runtime.NewScheme(), fluxLists)
	dyn.PrependReactor("list", "*", func(a k8stesting.Action) (bool, runtime.Object, error) {
		return true, nil, apierrors.NewNotFound(a.GetResource().GroupResource(), "")
	})
	return dyn
}

func TestFluxWithNothingToCheckIsNotChecked(t *testing.T) {
	t.Parallel()
	for name, dyn := range map[string]*dynfake.FakeDynamicClient{
		"not installed":       noFlux(),
		"installed but empty": dynfake.NewSimpleDynamicClientWithCustomListKinds(runtime.NewScheme(), fluxLists),
	} {
		t.Run(name, func(t *testing.T) {
			// RequireKubernetes does not make Flux required: a cluster
			// without Flux is not broken, it is not checked.
			g := &gateRun{c: &cluster.Clients{Dynamic: dyn}, inv: threeCP(), opts: Options{RequireKubernetes: true}.withDefaults()}
			r := probeFlux(context.Background(), g)
			if r.Status != StatusNotChecked || !strings.HasPrefix(r.Detail, "not checked: ") || strings.Contains(r.Detail, "all Ready") {
				t.Fatalf("got %s, want ❔ not checked", r.Line())
			}
		})
	}
}

func TestKubernetesUnreachableNotRequiredIsNotChecked(t *testing.T) {
	t.Parallel()
	kube := kubefake.NewClientset()
	kube.PrependReactor("list", "*", func(k8stesting.Action) (bool, runtime.Object, error) {
		return true, nil, errors.New("dial tcp 10.0.0.1:6443: connect: connection refused")
	})
	dyn := noFlux()
	dyn.PrependReactor("list", "*", func(k8stesting.Action) (bool, runtime.Object, error) {
		return true, nil, errors.New("dial tcp 10.0.0.1:6443: connect: connection refused")
	})
	for _, required := range []bool{false, true} {
		g := &gateRun{c: &cluster.Clients{Kube: kube, Dynamic: dyn}, inv: threeCP(), opts: Options{RequireKubernetes: required}.withDefaults()}
		for _, run := range []func(context.Context, *gateRun) ProbeResult{probeKubeNodes, probePods, probeFlux, probePDBs} {
			r := run(context.Background(), g)
			want := StatusNotChecked
			if required {
				want = StatusFail
			}
			if r.Status != want || !strings.Contains(r.Detail, "connection refused") {
				t.Errorf("required=%v: got %s, want status %d naming the error", required, r.Line(), want)
			}
		}
	}
}

// TestNotCheckedIsNeverReportedAsPassed: in the result's lines, its summary
// and the steps Report sends, a probe that could not run is "not checked"
// and SKIPPED, never ✅ or OK.
func TestNotCheckedIsNeverReportedAsPassed(t *testing.T) {
	t.Parallel()
	res := &Result{Passed: true, Probes: []ProbeResult{
		{Name: "talos-version", Title: "Talos version", Status: StatusOK, Detail: "v1.13.9 on all 4 nodes"},
		{Name: "flux", Title: "Flux", Status: StatusNotChecked, Detail: "not checked: " + FluxNotInstalled},
		{Name: "pods", Title: "Pods", Status: StatusNotChecked, Detail: "not checked: " + NoKubeconfig},
	}}
	lines := strings.Join(res.Lines(), "\n")
	if strings.Contains(lines, "✅ Flux") || strings.Contains(lines, "✅ Pods") ||
		!strings.Contains(lines, "❔ Flux: not checked: Flux is not installed") || !strings.Contains(lines, "❔ Pods: not checked") {
		t.Fatalf("lines:\n%s", lines)
	}
	if got, want := res.Summary(), "health gate passed 1 of 3 probes; 2 not checked: Flux — "+FluxNotInstalled+"; Pods — "+NoKubeconfig; got != want {
		t.Fatalf("summary = %q, want %q", got, want)
	}
	rec := sdktest.NewRecorder(nil)
	if err := Report(rec, "gate-before/", res); err != nil {
		t.Fatal(err)
	}
	for _, s := range rec.Steps() {
		notChecked := s.StepID != "gate-before/talos-version"
		if notChecked && (s.Status != sdk.StepSkipped || !strings.HasPrefix(s.Detail, "not checked: ")) {
			t.Errorf("step %s = %s %q, want SKIPPED \"not checked: …\"", s.StepID, s.Status, s.Detail)
		}
	}
}

// recordingHealth is a server-side health check that records where it was
// sent and answers with canned lines, as machined's stream does.
type recordingHealth struct {
	mu    sync.Mutex
	nodes []string
	reqs  []*clusterapi.HealthCheckRequest
	down  map[string]bool // address → Unavailable
	lines []string
	err   error // ends the stream after the lines (nil: EOF)
}

func (h *recordingHealth) HealthCheck(ctx context.Context, in *clusterapi.HealthCheckRequest, _ ...grpc.CallOption) (grpc.ServerStreamingClient[clusterapi.HealthCheckProgress], error) {
	md, _ := metadata.FromOutgoingContext(ctx)
	node := strings.Join(md.Get("node"), ",")
	h.mu.Lock()
	h.nodes = append(h.nodes, node)
	h.reqs = append(h.reqs, in)
	h.mu.Unlock()
	if h.down[node] {
		return nil, status.Error(codes.Unavailable, "connection error: connect: connection refused")
	}
	return &lineStream{lines: h.lines, err: h.err}, nil
}

type lineStream struct {
	grpc.ClientStream
	lines []string
	err   error
}

func (s *lineStream) Recv() (*clusterapi.HealthCheckProgress, error) {
	if len(s.lines) == 0 {
		if s.err != nil {
			return nil, s.err
		}
		return nil, io.EOF
	}
	l := s.lines[0]
	s.lines = s.lines[1:]
	return &clusterapi.HealthCheckProgress{Metadata: &common.Metadata{}, Message: l}, nil
}

// fakeResolver resolves host names from a table.
type fakeResolver map[string]string

func (r fakeResolver) LookupNetIP(_ context.Context, _, host string) ([]netip.Addr, error) {
	if ip, ok := r[host]; ok {
		return []netip.Addr{netip.MustParseAddr(ip)}, nil
	}
	return nil, errors.New("no such host")
}

func TestClusterHealthAsksControlPlanesOnlyWithIPLiterals(t *testing.T) {
	t.Parallel()
	inv := threeCP()
	inv.Nodes[2].Address = "cp-3.lan"   // a name in the inventory: resolved
	inv.Nodes[3].Address = "worker.lan" // the worker, too
	h := &recordingHealth{down: map[string]bool{"10.0.0.1": true}, lines: []string{
		`discovered nodes: ["10.0.0.1" "10.0.0.2" "10.0.0.3" "10.0.0.4"]`,
		"waiting for etcd to be healthy: ...",
		"waiting for etcd to be healthy: OK",
		"waiting for kube-proxy to report ready: ...",
		"waiting for kube-proxy to report ready: SKIP",
		"waiting for all k8s nodes to report schedulable: OK",
	}}
	g := &gateRun{c: &cluster.Clients{Health: h}, inv: inv,
		opts: Options{Timeout: 10 * time.Second, Resolver: fakeResolver{"cp-3.lan": "10.0.0.3", "worker.lan": "10.0.0.4"}}.withDefaults()}
	pctx, cancel := context.WithTimeout(context.Background(), g.opts.ProbeTimeout)
	defer cancel()
	r := probeClusterHealth(pctx, g)

	// cp-1 is down: the next control plane is asked; a worker never is.
	if strings.Join(h.nodes, " ") != "10.0.0.1 10.0.0.2" {
		t.Fatalf("asked %v, want cp-1 then cp-2 only", h.nodes)
	}
	for _, req := range h.reqs {
		ci := req.GetClusterInfo()
		if strings.Join(ci.GetControlPlaneNodes(), ",") != "10.0.0.1,10.0.0.2,10.0.0.3" || strings.Join(ci.GetWorkerNodes(), ",") != "10.0.0.4" {
			t.Fatalf("cluster info = %v, want IP literals split by role", ci)
		}
		if w := req.GetWaitTimeout().AsDuration(); w <= 0 || w > g.opts.ProbeTimeout {
			t.Fatalf("wait timeout %s, want most of the probe timeout %s", w, g.opts.ProbeTimeout)
		}
	}
	// cp-1 was unreachable, so the probe fails naming it, and still carries
	// the server's lines, as talosctl health prints them, last per check.
	if r.Status != StatusFail || !strings.Contains(r.Detail, "cp-1") || !strings.Contains(r.Detail, "2 checks passed on cp-2, 1 skipped by Talos (kube-proxy to report ready)") {
		t.Fatalf("got %s", r.Line())
	}
	want := []string{`discovered nodes: ["10.0.0.1" "10.0.0.2" "10.0.0.3" "10.0.0.4"]`,
		"waiting for etcd to be healthy: OK", "waiting for kube-proxy to report ready: SKIP", "waiting for all k8s nodes to report schedulable: OK"}
	if strings.Join(r.Checks, "\n") != strings.Join(want, "\n") {
		t.Fatalf("checks:\n%s\nwant:\n%s", strings.Join(r.Checks, "\n"), strings.Join(want, "\n"))
	}
}

func TestClusterHealthFailureNamesTheCheckStillWaiting(t *testing.T) {
	t.Parallel()
	h := &recordingHealth{lines: []string{
		"discovered nodes: [...]",
		"waiting for etcd to be healthy: OK",
		"waiting for all k8s nodes to report ready: ...",
		"waiting for all k8s nodes to report ready: some nodes are not ready: [worker-1]",
	}, err: status.Error(codes.DeadlineExceeded, "context deadline exceeded")}
	g := &gateRun{c: &cluster.Clients{Health: h}, inv: threeCP(), opts: Options{Timeout: 5 * time.Second}.withDefaults()}
	r := probeClusterHealth(context.Background(), g)
	if r.Status != StatusFail || r.Detail != "waiting for all k8s nodes to report ready: some nodes are not ready: [worker-1] (run on cp-1)" || len(r.Checks) != 3 {
		t.Fatalf("got %s %v", r.Line(), r.Checks)
	}
	if strings.Join(h.nodes, ",") != "10.0.0.1" {
		t.Fatalf("asked %v", h.nodes)
	}
}

func TestUnresolvableAddressFailsByNode(t *testing.T) {
	t.Parallel()
	inv := threeCP()
	inv.Nodes[3].Address = "gone.lan"
	h := &recordingHealth{}
	g := &gateRun{c: &cluster.Clients{Health: h}, inv: inv, opts: Options{Resolver: fakeResolver{}}.withDefaults()}
	r := probeClusterHealth(context.Background(), g)
	if r.Status != StatusFail || !strings.Contains(r.Detail, "w-1: address \"gone.lan\" is not an IP") || len(h.nodes) != 0 {
		t.Fatalf("got %s (asked %v)", r.Line(), h.nodes)
	}
}

func TestWaitsDefaultsAndSettings(t *testing.T) {
	t.Parallel()
	var none sdk.Settings
	if Timeout(none) != DefaultTimeout || AfterWait(none) != DefaultAfterWait || HealthWait(none) != DefaultHealthWait {
		t.Fatalf("defaults: %s %s %s", Timeout(none), AfterWait(none), HealthWait(none))
	}
	if DefaultTimeout != time.Minute || DefaultAfterWait != 10*time.Minute || DefaultHealthWait != 2*time.Minute {
		t.Fatal("the documented defaults (docs/HEALTHGATE.md) changed")
	}
	s := sdk.Settings{GateTimeoutMs: 5000, GateAfterTimeoutMs: 7000, HealthTimeoutMs: 9000}
	if Timeout(s) != 5*time.Second || AfterWait(s) != 7*time.Second || HealthWait(s) != 9*time.Second {
		t.Fatalf("settings: %s %s %s", Timeout(s), AfterWait(s), HealthWait(s))
	}
}

func TestPlanWarningsWhenKubernetesProbesCannotRun(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	w := PlanWarnings(ctx, &cluster.Clients{})
	if len(w) != 1 || !strings.Contains(w[0], "no kubeconfig") || !strings.Contains(w[0], "Kubernetes nodes, Pods, Flux, PodDisruptionBudgets") ||
		!strings.Contains(w[0], "not checked") {
		t.Fatalf("no kubeconfig: %q", w)
	}
	down := kubefake.NewClientset()
	down.PrependReactor("list", "*", func(k8stesting.Action) (bool, runtime.Object, error) {
		return true, nil, errors.New("connect: connection refused")
	})
	if w := PlanWarnings(ctx, &cluster.Clients{Kube: down, Dynamic: noFlux()}); len(w) != 1 || !strings.Contains(w[0], "did not answer") ||
		!strings.Contains(w[0], "stop this operation") {
		t.Fatalf("API down: %q", w)
	}
	if w := PlanWarnings(ctx, &cluster.Clients{Kube: kubefake.NewClientset(), Dynamic: noFlux()}); len(w) != 1 || !strings.Contains(w[0], FluxNotInstalled) {
		t.Fatalf("no Flux: %q", w)
	}
}

// TestSummaryNamesWhatItCounts: the summary is what the thread, the record
// and a node's gate step show, so every warning's text is in it, not only
// their count, and a gate that passed without some probes says how many ran
// and why the others did not (issue 31).
func TestSummaryNamesWhatItCounts(t *testing.T) {
	t.Parallel()
	ok := func(name string) ProbeResult {
		return ProbeResult{Name: name, Title: name, Status: StatusOK, Detail: "fine"}
	}
	res := &Result{Passed: true, Probes: []ProbeResult{
		ok("talos-version"), ok("cluster-health"), ok("controlplane-services"), ok("etcd-status"),
		{Name: "kube-nodes", Title: "Kubernetes nodes", Status: StatusNotChecked, Detail: NotChecked + ": " + NoKubeconfig},
		{Name: "pods", Title: "Pods", Status: StatusNotChecked, Detail: NotChecked + ": " + NoKubeconfig},
		{Name: "flux", Title: "Flux", Status: StatusWarn, Detail: "HelmRelease podinfo/podinfo suspended"},
		{Name: "pdb", Title: "PodDisruptionBudgets", Status: StatusNotChecked, Detail: NotChecked + ": " + NoKubeconfig},
	}}
	want := "health gate passed 5 of 8 probes; 3 not checked: Kubernetes nodes, Pods, PodDisruptionBudgets — " + NoKubeconfig +
		"; 1 warning: Flux: HelmRelease podinfo/podinfo suspended"
	if got := res.Summary(); got != want {
		t.Fatalf("summary\n got %q\nwant %q", got, want)
	}
	all := &Result{Passed: true, Probes: []ProbeResult{ok("a"), ok("b"),
		{Name: "c", Title: "c", Status: StatusWarn, Detail: "one"}, {Name: "d", Title: "d", Status: StatusWarn, Detail: "two"}}}
	if got, want := all.Summary(), "health gate passed; 2 warnings: c: one; d: two"; got != want {
		t.Fatalf("summary\n got %q\nwant %q", got, want)
	}
}

// TestLinesListChecksOnlyWhenTheyExplain: the server's check lines follow a
// probe that did not pass (they say what went wrong) and never one that
// passed, whose line counts them (issue 31).
func TestLinesListChecksOnlyWhenTheyExplain(t *testing.T) {
	t.Parallel()
	checks := []string{"waiting for etcd to be healthy: OK", "waiting for apid to be ready: OK"}
	passed := &Result{Passed: true, Probes: []ProbeResult{{Title: "Cluster health", Status: StatusOK, Detail: "2 checks passed on cp-1", Checks: checks}}}
	if got := strings.Join(passed.Lines(), "\n"); got != "✅ Cluster health: 2 checks passed on cp-1" {
		t.Errorf("passed probe lines:\n%s", got)
	}
	failed := &Result{Probes: []ProbeResult{{Title: "Cluster health", Status: StatusFail, Detail: "etcd not healthy (run on cp-1)", Checks: checks}}}
	if got := strings.Join(failed.Lines(), "\n"); !strings.Contains(got, "\n    waiting for apid to be ready: OK") {
		t.Errorf("failed probe lines lack the checks:\n%s", got)
	}
}
