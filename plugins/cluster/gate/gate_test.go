package gate

import (
	"context"
	"errors"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	clusterapi "github.com/siderolabs/talos/pkg/machinery/api/cluster"
	"github.com/siderolabs/talos/pkg/machinery/api/common"
	machineapi "github.com/siderolabs/talos/pkg/machinery/api/machine"
	"github.com/talosbot/talosbot/plugins/cluster"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/emptypb"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/intstr"
	dynfake "k8s.io/client-go/dynamic/fake"
	kubefake "k8s.io/client-go/kubernetes/fake"
)

// fakeMachine answers etcd status with canned per-node member statuses and
// records the nodes each call targeted.
type fakeMachine struct {
	cluster.MachineAPI
	status  map[string]*machineapi.EtcdMemberStatus // by address; nil entry = node error
	alarms  []*machineapi.EtcdMemberAlarm
	members int
	mu      sync.Mutex // the probes call concurrently, one call per node
	targets [][]string
}

func (f *fakeMachine) EtcdStatus(ctx context.Context, _ *emptypb.Empty, _ ...grpc.CallOption) (*machineapi.EtcdStatusResponse, error) {
	md, _ := metadata.FromOutgoingContext(ctx)
	nodes, one := md.Get("nodes"), false
	if len(nodes) == 0 {
		// "node": apid proxies one to one, and the reply carries no hostname.
		nodes, one = md.Get("node"), true
	}
	f.mu.Lock()
	f.targets = append(f.targets, nodes)
	f.mu.Unlock()
	resp := &machineapi.EtcdStatusResponse{}
	for _, n := range nodes {
		st, ok := f.status[n]
		if !ok || st == nil {
			if one {
				return nil, status.Error(codes.Unavailable, "connection refused")
			}
			resp.Messages = append(resp.Messages, &machineapi.EtcdStatus{Metadata: &common.Metadata{Hostname: n,
				Error: "connection refused", Status: status.New(codes.Unavailable, "x").Proto()}})
			continue
		}
		host := n
		if one {
			host = ""
		}
		resp.Messages = append(resp.Messages, &machineapi.EtcdStatus{Metadata: &common.Metadata{Hostname: host}, MemberStatus: st})
	}
	return resp, nil
}

func (f *fakeMachine) EtcdAlarmList(ctx context.Context, _ *emptypb.Empty, _ ...grpc.CallOption) (*machineapi.EtcdAlarmListResponse, error) {
	md, _ := metadata.FromOutgoingContext(ctx)
	resp := &machineapi.EtcdAlarmListResponse{}
	for _, n := range md.Get("nodes") {
		resp.Messages = append(resp.Messages, &machineapi.EtcdAlarm{Metadata: &common.Metadata{Hostname: n}, MemberAlarms: f.alarms})
	}
	return resp, nil
}

func (f *fakeMachine) EtcdMemberList(ctx context.Context, _ *machineapi.EtcdMemberListRequest, _ ...grpc.CallOption) (*machineapi.EtcdMemberListResponse, error) {
	md, _ := metadata.FromOutgoingContext(ctx)
	resp := &machineapi.EtcdMemberListResponse{}
	for _, n := range md.Get("nodes") {
		m := &machineapi.EtcdMembers{Metadata: &common.Metadata{Hostname: n}}
		for i := range f.members {
			m.Members = append(m.Members, &machineapi.EtcdMember{Id: uint64(i + 1)})
		}
		resp.Messages = append(resp.Messages, m)
	}
	return resp, nil
}

func threeCP() cluster.Inventory {
	return cluster.Inventory{Name: "t", Nodes: []cluster.Node{
		{Name: "cp-1", Address: "10.0.0.1", Role: cluster.RoleControlPlane},
		{Name: "cp-2", Address: "10.0.0.2", Role: cluster.RoleControlPlane},
		{Name: "cp-3", Address: "10.0.0.3", Role: cluster.RoleControlPlane},
		{Name: "w-1", Address: "10.0.0.4", Role: cluster.RoleWorker},
	}}
}

func healthyStatus() map[string]*machineapi.EtcdMemberStatus {
	return map[string]*machineapi.EtcdMemberStatus{
		"10.0.0.1": {MemberId: 1, Leader: 1, RaftIndex: 100},
		"10.0.0.2": {MemberId: 2, Leader: 1, RaftIndex: 101},
		"10.0.0.3": {MemberId: 3, Leader: 1, RaftIndex: 100},
	}
}

func runEtcd(f *fakeMachine) ProbeResult {
	g := &gateRun{c: &cluster.Clients{Machine: f}, inv: threeCP(), opts: Options{}.withDefaults()}
	return probeEtcdStatus(context.Background(), g)
}

func TestEtcdTargetsAreEveryControlPlane(t *testing.T) {
	t.Parallel()
	if got := strings.Join(cluster.EtcdTargets(threeCP()), ","); got != "10.0.0.1,10.0.0.2,10.0.0.3" {
		t.Fatalf("EtcdTargets = %s", got)
	}
	one := cluster.Inventory{Nodes: []cluster.Node{{Name: "cp", Address: "10.0.0.9", Role: cluster.RoleControlPlane}, {Name: "w", Address: "10.0.0.8", Role: cluster.RoleWorker}}}
	if got := strings.Join(cluster.EtcdTargets(one), ","); got != "10.0.0.9" {
		t.Fatalf("one-CP EtcdTargets = %s", got)
	}
	f := &fakeMachine{status: healthyStatus(), members: 3}
	if r := runEtcd(f); r.Status != StatusOK || !strings.Contains(r.Detail, "leader cp-1 agreed by 3") {
		t.Fatalf("healthy: %s", r.Line())
	}
	// One call per control plane (a stopped etcd holds a one-to-many call
	// until its deadline), and together they ask every control plane.
	var asked []string
	for _, tg := range f.targets {
		if len(tg) != 1 {
			t.Fatalf("etcd status targeted %v in one call, want one node per call", tg)
		}
		asked = append(asked, tg[0])
	}
	sort.Strings(asked)
	if strings.Join(asked, ",") != "10.0.0.1,10.0.0.2,10.0.0.3" {
		t.Fatalf("etcd status asked %v", asked)
	}
}

func TestEtcdStatusStopConditions(t *testing.T) {
	t.Parallel()
	cases := map[string]struct {
		mutate func(f *fakeMachine)
		want   string
	}{
		"no leader": {func(f *fakeMachine) {
			for _, s := range f.status {
				s.Leader = 0
			}
		}, "no etcd leader on cp-1, cp-2, cp-3"},
		"members disagree": {func(f *fakeMachine) { f.status["10.0.0.3"].Leader = 3 }, "members disagree on the leader"},
		"member errors":    {func(f *fakeMachine) { f.status["10.0.0.2"].Errors = []string{"disk slow"} }, "cp-2 reports errors: disk slow"},
		"learner":          {func(f *fakeMachine) { f.status["10.0.0.3"].IsLearner = true }, "cp-3 is a learner"},
		"raft lag":         {func(f *fakeMachine) { f.status["10.0.0.2"].RaftIndex = 5000 }, "raft indexes differ by 4900"},
		"member down":      {func(f *fakeMachine) { f.status["10.0.0.2"] = nil }, "unreachable: cp-2"},
		"alarm": {func(f *fakeMachine) {
			f.alarms = []*machineapi.EtcdMemberAlarm{{MemberId: 2, Alarm: machineapi.EtcdMemberAlarm_NOSPACE}}
		}, "alarm NOSPACE on member cp-2"},
		"extra member": {func(f *fakeMachine) { f.members = 4 }, "lists 4 etcd members but the inventory has 3 control planes"},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			f := &fakeMachine{status: healthyStatus(), members: 3}
			tc.mutate(f)
			r := runEtcd(f)
			if r.Status != StatusFail || !strings.Contains(r.Detail, tc.want) {
				t.Fatalf("got %s, want ❌ with %q", r.Line(), tc.want)
			}
		})
	}
}

// slowMachine never answers until its context ends.
type slowMachine struct{ cluster.MachineAPI }

func (slowMachine) Version(ctx context.Context, _ *emptypb.Empty, _ ...grpc.CallOption) (*machineapi.VersionResponse, error) {
	<-ctx.Done()
	return nil, status.FromContextError(ctx.Err()).Err()
}

func (s slowMachine) ServiceList(ctx context.Context, _ *emptypb.Empty, _ ...grpc.CallOption) (*machineapi.ServiceListResponse, error) {
	<-ctx.Done()
	return nil, errors.New("never")
}

func (s slowMachine) EtcdStatus(ctx context.Context, _ *emptypb.Empty, _ ...grpc.CallOption) (*machineapi.EtcdStatusResponse, error) {
	<-ctx.Done()
	return nil, status.FromContextError(ctx.Err()).Err()
}

// slowHealth never answers the health check until its context ends.
type slowHealth struct{ cluster.HealthAPI }

func (slowHealth) HealthCheck(ctx context.Context, _ *clusterapi.HealthCheckRequest, _ ...grpc.CallOption) (grpc.ServerStreamingClient[clusterapi.HealthCheckProgress], error) {
	<-ctx.Done()
	return nil, status.FromContextError(ctx.Err()).Err()
}

func TestGateWithoutKubernetesNeverPassesSilently(t *testing.T) {
	t.Parallel()
	res := Run(context.Background(), &cluster.Clients{Machine: slowMachine{}, Health: slowHealth{}}, threeCP(), Options{Timeout: 300 * time.Millisecond})
	if res.Passed {
		t.Fatal("gate passed against a silent cluster")
	}
	for _, p := range res.Probes {
		info := probeInfo(t, p.Name)
		if info.Kubernetes && (p.Status != StatusNotChecked || p.Detail != "not checked: "+NoKubeconfig) {
			t.Errorf("%s: %s", p.Name, p.Line())
		}
		if !info.Kubernetes && (p.Status != StatusFail || strings.Contains(p.Detail, "panic")) {
			t.Errorf("%s should fail: %s", p.Name, p.Line())
		}
	}
	strict := Run(context.Background(), &cluster.Clients{Machine: slowMachine{}, Health: slowHealth{}}, threeCP(), Options{Timeout: 100 * time.Millisecond, RequireKubernetes: true})
	if p := strict.Probes[4]; p.Status != StatusFail {
		t.Fatalf("RequireKubernetes: %s", p.Line())
	}
}

func probeInfo(t *testing.T, name string) ProbeInfo {
	for _, p := range Probes() {
		if p.Name == name {
			return p
		}
	}
	t.Fatalf("no probe %s", name)
	return ProbeInfo{}
}

func kubeGate(objs ...runtime.Object) *gateRun {
	return &gateRun{c: &cluster.Clients{Kube: kubefake.NewClientset(objs...)}, inv: threeCP(), opts: Options{}.withDefaults()}
}

func TestPodsWorstFirst(t *testing.T) {
	t.Parallel()
	pod := func(name string, phase corev1.PodPhase, waiting string, restarts int32) *corev1.Pod {
		p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "ns"}, Status: corev1.PodStatus{Phase: phase}}
		if waiting != "" {
			p.Status.ContainerStatuses = []corev1.ContainerStatus{{RestartCount: restarts,
				State: corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: waiting}}}}
		}
		return p
	}
	g := kubeGate(pod("ok", corev1.PodRunning, "", 0), pod("pending", corev1.PodPending, "", 0),
		pod("failed", corev1.PodFailed, "", 0), pod("crash-a", corev1.PodRunning, "CrashLoopBackOff", 3),
		pod("crash-b", corev1.PodRunning, "CrashLoopBackOff", 30))
	g.opts.WorstPods = 3
	r := probePods(context.Background(), g)
	want := "5 pods (1 Failed, 1 Pending, 3 Running); worst: ns/crash-b CrashLoopBackOff (30 restarts), ns/crash-a CrashLoopBackOff (3 restarts), ns/failed Failed"
	if r.Status != StatusWarn || r.Detail != want {
		t.Fatalf("got %q\nwant %q", r.Detail, want)
	}
}

func TestKubeNodesReadyAndSchedulable(t *testing.T) {
	t.Parallel()
	node := func(name string, ready corev1.ConditionStatus, cordoned bool) *corev1.Node {
		return &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: corev1.NodeSpec{Unschedulable: cordoned},
			Status: corev1.NodeStatus{Conditions: []corev1.NodeCondition{{Type: corev1.NodeReady, Status: ready}}}}
	}
	r := probeKubeNodes(context.Background(), kubeGate(node("cp-1", "True", false), node("cp-2", "False", false),
		node("cp-3", "True", true)))
	for _, want := range []string{"cp-2 NotReady", "cp-3 cordoned", "w-1 not registered"} {
		if r.Status != StatusFail || !strings.Contains(r.Detail, want) {
			t.Errorf("got %s, want %q", r.Line(), want)
		}
	}
}

func TestBlockingPDBIgnoresDaemonSetPods(t *testing.T) {
	t.Parallel()
	labels := map[string]string{"app": "x"}
	yes := true
	pod := func(name, node string, ds bool) *corev1.Pod {
		p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "ns", Labels: labels},
			Spec: corev1.PodSpec{NodeName: node}, Status: corev1.PodStatus{Phase: corev1.PodRunning}}
		if ds {
			p.OwnerReferences = []metav1.OwnerReference{{Kind: "DaemonSet", Name: "ds", Controller: &yes, APIVersion: appsv1.SchemeGroupVersion.String()}}
		}
		return p
	}
	one := intstr.FromInt32(1)
	pdb := &policyv1.PodDisruptionBudget{ObjectMeta: metav1.ObjectMeta{Name: "b", Namespace: "ns"},
		Spec:   policyv1.PodDisruptionBudgetSpec{MinAvailable: &one, Selector: &metav1.LabelSelector{MatchLabels: labels}},
		Status: policyv1.PodDisruptionBudgetStatus{DisruptionsAllowed: 0}}
	g := kubeGate(pdb, pod("agent", "cp-1", true), pod("app", "w-1", false))
	if r := probePDBs(context.Background(), g); r.Status != StatusFail || r.Detail != "PDB ns/b allows 0 disruptions and covers app on w-1: draining would block" {
		t.Fatalf("all nodes: %s", r.Line())
	}
	g.opts.DrainNodes = []string{"cp-1"}
	if r := probePDBs(context.Background(), g); r.Status != StatusOK {
		t.Fatalf("a DaemonSet pod does not block a drain: %s", r.Line())
	}
}

func TestFluxStalledAndSuspended(t *testing.T) {
	t.Parallel()
	ks := func(name string, ready string, suspend bool) *unstructured.Unstructured {
		return &unstructured.Unstructured{Object: map[string]any{
			"apiVersion": "kustomize.toolkit.fluxcd.io/v1", "kind": "Kustomization",
			"metadata": map[string]any{"name": name, "namespace": "flux-system"},
			"spec":     map[string]any{"suspend": suspend},
			"status": map[string]any{"conditions": []any{map[string]any{"type": "Ready", "status": ready,
				"reason": "BuildFailed", "message": "kustomize build failed"}}},
		}}
	}
	s := runtime.NewScheme()
	lists := map[schema.GroupVersionResource]string{KustomizationGVR: "KustomizationList", HelmReleaseGVR: "HelmReleaseList"}
	dyn := dynfake.NewSimpleDynamicClientWithCustomListKinds(s, lists, ks("infra", "True", false), ks("apps", "False", false), ks("old", "False", true))
	g := &gateRun{c: &cluster.Clients{Dynamic: dyn}, inv: threeCP(), opts: Options{}.withDefaults()}
	r := probeFlux(context.Background(), g)
	if r.Status != StatusFail || r.Detail != "Kustomization flux-system/apps not Ready (BuildFailed: kustomize build failed)" {
		t.Fatalf("got %s", r.Line())
	}
}
