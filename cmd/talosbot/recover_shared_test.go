package main

import (
	"context"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	typedcorev1 "k8s.io/client-go/kubernetes/typed/core/v1"

	"github.com/talosbot/talosbot/internal/servetest"
	"github.com/talosbot/talosbot/internal/testenv"
	"github.com/talosbot/talosbot/sim"
)

// recoverFixture is the recovery e2e tests' world: a 3 control plane sim
// (plus a worker) whose kube-apiserver stores into the sim's etcd, and the
// bot serving the web console for production, where bob and carol approve.
type recoverFixture struct {
	t    *testing.T
	ctx  context.Context
	c    *sim.Cluster
	kube *testenv.Kube
	b    *servetest.Bot
	cms  typedcorev1.ConfigMapInterface
}

// startRecoverFixture starts the sim (onCall, when set, is its
// Options.OnCall) and the bot.
func startRecoverFixture(t *testing.T, onCall func(ctx context.Context, node, method string) error) *recoverFixture {
	t.Helper()
	dir := t.TempDir()
	startKube := testenv.KubeStarter(t)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	t.Cleanup(cancel)
	f := &recoverFixture{t: t, ctx: ctx}
	c, err := sim.Start(ctx, sim.Options{Dir: filepath.Join(dir, "sim"), Name: "production", ControlPlanes: 3, Workers: 1,
		RebootDelay: 300 * time.Millisecond, StaticPods: true, BootstrapManifests: true, OnCall: onCall,
		KubeOnEtcd: func(ctx context.Context, servers []string) (sim.KubeBackend, error) {
			k, err := startKube(ctx, servers)
			if err != nil {
				return sim.KubeBackend{}, err
			}
			f.kube = k
			return sim.KubeBackend{Client: k.Client, Kubeconfig: k.Kubeconfig, Stop: k.Stop, Restart: k.Restart}, nil
		}})
	must(t, err)
	f.c = c
	t.Cleanup(func() { _ = c.Close() })
	f.cms = f.kube.Client.CoreV1().ConfigMaps("default")
	f.b = servetest.Config{Dir: dir, Users: []string{"alice", "bob", "carol"},
		Clusters: []servetest.Cluster{{Name: "production", Sim: c, Kubeconfig: f.kube.Kubeconfig}},
		Policy:   "{production: {approvers: [bob, carol], operators: [alice, bob, carol]}}",
		Timeouts: "{gate: 3m, node: 3m}"}.Bot(t, talosbotBinary(t))
	f.b.Start()
	t.Cleanup(func() { _ = f.b.Cmd.Process.Signal(syscall.SIGTERM); _ = f.b.Cmd.Wait() })
	return f
}

// mk writes a ConfigMap in default.
func (f *recoverFixture) mk(name string) {
	f.t.Helper()
	_, err := f.cms.Create(f.ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: name}}, metav1.CreateOptions{})
	must(f.t, err)
}

// opOf waits for a message whose title contains title and that pred accepts.
func (f *recoverFixture) opOf(title string, pred func(servetest.Message) bool) (m servetest.Message) {
	f.t.Helper()
	f.b.WaitForWithin(title, 2*time.Minute, func() bool {
		for _, x := range f.b.Messages("ops") {
			if strings.Contains(x.Title, title) && pred(x) {
				m = x
				return true
			}
		}
		return false
	})
	return m
}

// snapshot takes a snapshot of production through the bot.
func (f *recoverFixture) snapshot() {
	f.t.Helper()
	f.b.Command("alice", "ops", "/talos snapshot production")
	snap := f.opOf("snapshot", func(m servetest.Message) bool { return m.Field("Operation") != "" })
	if st := f.b.AwaitEnd("ops", snap.Field("Operation"), 2*time.Minute); st != "succeeded" {
		f.t.Fatalf("snapshot: %s", st)
	}
}

// approve presses Approve on the approval card m as user.
func (f *recoverFixture) approve(user string, m servetest.Message) {
	f.t.Helper()
	if code := f.b.Post("/api/console/actions", map[string]string{"user": user, "message_id": m.ID, "action_id": m.Button("Approve")}); code != 202 {
		f.t.Fatalf("%s approve: HTTP %d", user, code)
	}
}

// approveByBoth has bob, then carol approve the card m: bob's approval is
// seen to count before carol's is sent.
func (f *recoverFixture) approveByBoth(m servetest.Message) {
	f.t.Helper()
	bobs := func() int {
		n := 0
		for _, x := range f.b.Messages("ops") {
			n += strings.Count(x.Text, "approved by bob (1/2)")
		}
		return n
	}
	before := bobs()
	f.approve("bob", m)
	f.b.WaitFor("bob's approval to count", func() bool { return bobs() > before })
	f.approve("carol", m)
}

// killAndRestart SIGKILLs the bot and starts it again.
func (f *recoverFixture) killAndRestart() {
	f.t.Helper()
	must(f.t, f.b.Cmd.Process.Signal(syscall.SIGKILL))
	_ = f.b.Cmd.Wait()
	f.b.Start()
}

// voidedRe finds the engine's notice that a plan changed: the new digest
// names the plan to approve (a notice may be rendered more than once).
var voidedRe = regexp.MustCompile(`digest [0-9a-f]+ → ([0-9a-f]+)\); approvals are void`)

// approveResumed waits, after a resume of id, until the operation runs or
// succeeded, approving every new plan it asks for on the way: resume plans
// again, and when the cluster changed while the bot was down the new plan's
// digest differs and the old approvals are void; while the cluster settles
// after the restore (members rejoining) the re-plan right before the run
// can differ once more and ask again. Each new plan (by digest) is
// approved once. stop, when it reports true, ends the wait early (the run
// reached what the caller waits for).
func (f *recoverFixture) approveResumed(id string, stop func() bool) {
	f.t.Helper()
	handled, used := map[string]bool{}, map[string]bool{}
	pending := func() string {
		for _, m := range f.b.Messages("ops") {
			for _, g := range voidedRe.FindAllStringSubmatch(m.Text, -1) {
				if !handled[g[1]] {
					return g[1]
				}
			}
		}
		return ""
	}
	for round := 0; round < 8; round++ {
		digest := ""
		f.b.WaitForWithin("the resumed recovery to run or ask again", 3*time.Minute, func() bool {
			if stop != nil && stop() {
				return true
			}
			if digest = pending(); digest != "" {
				return true
			}
			for _, m := range f.b.Messages("ops") {
				if m.Field("Operation") == id && (m.Field("State") == "running" || m.Field("State") == "succeeded") {
					return true
				}
			}
			return false
		})
		if digest == "" {
			return
		}
		handled[digest] = true
		// The card's buttons are edited to the new plan's a moment after
		// the notice (chat edits are rate-limited): a button already used
		// belongs to a void plan.
		var card servetest.Message
		f.b.WaitFor("the new plan's approval card", func() bool {
			for _, m := range f.b.Messages("ops") {
				if m.Field("Operation") == id && m.Button("Approve") != "" && !used[m.Button("Approve")] {
					card = m
					return true
				}
			}
			return false
		})
		used[card.Button("Approve")] = true
		f.approveByBoth(card)
	}
	f.t.Fatalf("%s asked for approval 8 times after a resume", id)
}

// awaitSucceeded waits for id to end and fails unless it succeeded; it
// returns the operation's last message text (the report).
func (f *recoverFixture) awaitSucceeded(id string) string {
	f.t.Helper()
	st := f.b.AwaitEnd("ops", id, 8*time.Minute)
	var report string
	for _, m := range f.b.Messages("ops") {
		if m.Field("Operation") == id {
			report = m.Text
			if st != "succeeded" {
				f.t.Logf("%s", m.Text)
			}
		}
	}
	if st != "succeeded" {
		f.t.Fatalf("recovery: %s\n%s", st, f.b.Stderr.String())
	}
	return report
}

// assertRecovered checks the end state from the sim's side: one leader and
// three voting members, before-snapshot back, after-snapshot gone, and the
// upload and the bootstrap accepted by the recovery node only, the
// bootstrap exactly once.
func (f *recoverFixture) assertRecovered(recoveryNode string) {
	f.t.Helper()
	v, err := f.c.WaitEtcdHealthy(f.ctx, 3)
	must(f.t, err)
	if v.Leader == "" || len(v.Voters) != 3 || len(v.Learners) != 0 {
		f.t.Fatalf("etcd: %+v", v)
	}
	if _, err := f.cms.Get(f.ctx, "before-snapshot", metav1.GetOptions{}); err != nil {
		f.t.Fatalf("object from before the snapshot: %v", err)
	}
	if _, err := f.cms.Get(f.ctx, "after-snapshot", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		f.t.Fatalf("object from after the snapshot: %v, want NotFound", err)
	}
	for _, n := range f.c.Nodes() {
		got := f.c.RecoveryCounts(n.Name)
		switch {
		case n.Name != recoveryNode && got != (sim.RecoveryCounts{}):
			f.t.Fatalf("%s accepted %d uploads and %d bootstraps: only the recovery node %s may", n.Name, got.Uploads, got.Bootstraps, recoveryNode)
		case n.Name == recoveryNode && (got.Uploads == 0 || got.Bootstraps != 1):
			f.t.Fatalf("%s accepted %d uploads and %d bootstraps: want at least one upload and exactly one bootstrap", n.Name, got.Uploads, got.Bootstraps)
		}
	}
}

// killPoint is one step of a recovery (plugins/recover's Run) and the call
// at which the sim holds it: the call reaching the node is the proof that
// the step began, and the bot is SIGKILLed while the call is held, so the
// step's effect (if any) has not happened when the bot dies.
type killPoint struct {
	step string
	// match reports whether the call node/method is the one to hold; it is
	// asked for every call while this point is armed.
	match func(node, method string) bool
}

// holder holds the call the armed kill point matches until the call's
// context ends (the bot died) or the test lets go.
type holder struct {
	mu      sync.Mutex
	armed   *killPoint
	hit     chan string
	release chan struct{}
}

func (h *holder) arm(kp *killPoint) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.armed, h.release = kp, make(chan struct{})
}

func (h *holder) onCall(ctx context.Context, node, method string) error {
	h.mu.Lock()
	kp, release := h.armed, h.release
	if kp == nil || !kp.match(node, method) {
		h.mu.Unlock()
		return nil
	}
	h.armed = nil
	h.mu.Unlock()
	h.hit <- kp.step
	select {
	case <-ctx.Done():
		return status.FromContextError(ctx.Err()).Err()
	case <-release:
		return status.Error(codes.Unavailable, "held by the test until its client died")
	}
}

func (h *holder) letGo() {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.release != nil {
		close(h.release)
		h.release = nil
	}
}
