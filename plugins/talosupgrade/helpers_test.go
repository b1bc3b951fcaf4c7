package talosupgrade

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/talosbot/talosbot/internal/testenv"
	"github.com/talosbot/talosbot/plugins/cluster/talos"
	"github.com/talosbot/talosbot/plugins/sdk"
	"github.com/talosbot/talosbot/plugins/sdk/sdktest"
	"github.com/talosbot/talosbot/sim"
)

const (
	from   = "v1.12.6"
	target = "v1.13.9"
)

type env struct {
	c    *sim.Cluster
	kube *testenv.Kube
}

// start runs a sim (and, with kube, a real kube-apiserver the sim registers
// its Nodes in).
func start(t testing.TB, cps, workers int, withKube bool, mutate func(*sim.Options)) *env {
	t.Helper()
	e := &env{}
	// Inventory names, hostnames, Kubernetes Node names and etcd member
	// names all differ, as on real clusters: nothing passes by assuming two
	// of them are equal.
	opts := sim.Options{ControlPlanes: cps, Workers: workers, TalosVersion: from, RebootDelay: 300 * time.Millisecond,
		DrainTimeout: 5 * time.Second, Naming: sim.DistinctNames}
	if withKube {
		e.kube = testenv.StartKube(t)
		opts.Kube, opts.Kubeconfig = e.kube.Client, e.kube.Kubeconfig
		// The sim plays the kubelets too (mirror pods, and evicted pods
		// finish terminating), as a drain needs: kubectl's drain waits until
		// every evicted pod is gone.
		opts.StaticPods = true
	}
	if mutate != nil {
		mutate(&opts)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	c, err := sim.Start(ctx, opts)
	if err != nil {
		t.Fatalf("start sim: %v", err)
	}
	t.Cleanup(func() { _ = c.Close() })
	e.c = c
	return e
}

// request is what the host sends for `/talos upgrade talos <version> staging`.
func (e *env) request(t testing.TB, version string) *sdk.OperationRequest {
	t.Helper()
	pc := &sdk.Cluster{Name: "staging", Environment: "staging",
		Declared: map[string]string{talos.DeclaredSchematic: sim.DefaultSchematic, talos.DeclaredVersion: from}}
	for _, n := range e.c.Nodes() {
		pc.Nodes = append(pc.Nodes, &sdk.Node{Name: n.Name, Address: n.IP, Role: n.Role, Host: n.Host,
			Platform: n.Platform, InstallerClass: n.InstallerClass})
		if n.Role == sim.RoleControlPlane {
			pc.Endpoints = append(pc.Endpoints, n.IP)
		}
	}
	creds := &sdk.Credentials{Talosconfig: e.c.Talosconfig()}
	if e.kube != nil {
		creds.Kubeconfig = e.kube.Kubeconfig
	}
	return &sdk.OperationRequest{OperationID: "op-1", Command: Command,
		Args: map[string]string{"version": version, "cluster": "staging"}, Cluster: *pc, Credentials: *creds,
		Evidence: sdk.Evidence{Backups: &sdk.Backups{Dir: t.TempDir()}, Releases: sdktest.Releases("v1.12.6", "v1.13.2", "v1.13.9")},
		Settings: sdk.Settings{NodeTimeoutMs: 20_000, GateTimeoutMs: 8_000}}
}

func (e *env) node(t testing.TB, req *sdk.OperationRequest, name string) *sdk.Node {
	t.Helper()
	for _, n := range req.Cluster.Nodes {
		if n.Name == name {
			return n
		}
	}
	t.Fatalf("no node %s", name)
	return nil
}

// leader is the inventory name of the etcd leader, from the sim's own etcd.
func (e *env) leader(t testing.TB) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	id, err := e.c.Etcd().WaitLeader(ctx)
	if err != nil {
		t.Fatal(err)
	}
	member := e.c.Etcd().MemberByID(id).Name()
	for _, n := range e.c.Nodes() {
		if n.EtcdMember == member {
			return n.Name
		}
	}
	t.Fatalf("etcd leader %s is no sim node", member)
	return ""
}

// info is the sim's view of the node with this inventory name.
func (e *env) info(t testing.TB, name string) sim.NodeInfo {
	t.Helper()
	for _, n := range e.c.Nodes() {
		if n.Name == name {
			return n
		}
	}
	t.Fatalf("no sim node %s", name)
	return sim.NodeInfo{}
}

// upgradeCalls counts both upgrade RPCs (legacy and LifecycleService).
func (e *env) upgradeCalls(node string) int { return e.c.Calls(node, "Upgrade") }

func (e *env) names() []string {
	var out []string
	for _, n := range e.c.Nodes() {
		out = append(out, n.Name)
	}
	return out
}

func ctxFor(t testing.TB, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

// watcher is an sdk.Reporter that records like sdktest and lets a test act
// on a step event the moment the plugin sends it (the plugin waits for the
// callback, as it would wait for a slow host).
type watcher struct {
	*sdktest.Recorder
	mu     sync.Mutex
	onStep func(*sdk.StepEvent)
}

var _ sdk.Reporter = (*watcher)(nil)

func (w *watcher) Step(ev *sdk.StepEvent) error {
	w.mu.Lock()
	f := w.onStep
	w.mu.Unlock()
	err := w.Recorder.Step(ev)
	if f != nil {
		f(ev)
	}
	return err
}

func (w *watcher) status(id, detail string, st sdk.StepStatus) error {
	return w.Step(&sdk.StepEvent{StepID: id, Status: st, Detail: detail})
}

func (w *watcher) StepStarted(id, detail string) error {
	return w.status(id, detail, sdk.StepRunning)
}

func (w *watcher) StepOK(id, detail string) error {
	return w.status(id, detail, sdk.StepOK)
}

func (w *watcher) StepFailed(id, detail string) error {
	return w.status(id, detail, sdk.StepFailed)
}

func (w *watcher) StepSkipped(id, detail string) error {
	return w.status(id, detail, sdk.StepSkipped)
}

// runWatched runs the plugin with a watcher.
func runWatched(ctx context.Context, p sdk.Plugin, req *sdk.OperationRequest, onStep func(*sdk.StepEvent)) *sdktest.Recorder {
	w := &watcher{Recorder: sdktest.NewRecorder(nil), onStep: onStep}
	err := p.Run(ctx, req, w)
	_ = w.Finish(err)
	return w.Recorder
}

func upgradeSteps(rec *sdktest.Recorder) []*sdk.StepEvent {
	var out []*sdk.StepEvent
	for _, s := range rec.Steps() {
		if strings.HasSuffix(s.StepID, "/upgrade") {
			out = append(out, s)
		}
	}
	return out
}

func requireRefusal(t testing.TB, plan *sdk.OperationPlan, rule, want string) {
	t.Helper()
	r := plan.Refusal
	if r == nil || r.Rule != rule || !strings.Contains(r.Reason+" "+r.Fix, want) {
		t.Fatalf("want a %s refusal containing %q, got %v", rule, want, plan)
	}
	if r.Fix == "" {
		t.Fatalf("refusal without a fix: %v", r)
	}
}

var simSchematic = sim.DefaultSchematic
