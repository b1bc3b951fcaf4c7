package noderemove

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/cosi-project/runtime/pkg/safe"
	"github.com/siderolabs/talos/pkg/machinery/client"
	clientconfig "github.com/siderolabs/talos/pkg/machinery/client/config"
	"github.com/siderolabs/talos/pkg/machinery/resources/runtime"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/talosbot/talosbot/internal/testenv"
	"github.com/talosbot/talosbot/plugins/cluster/k8s"
	"github.com/talosbot/talosbot/plugins/sdk"
	"github.com/talosbot/talosbot/plugins/sdk/sdktest"
	"github.com/talosbot/talosbot/sim"
)

// TestResumeAfterResetDeletesTheNode: talosbot killed right after its
// graceful reset of cp-3 (the soak's seed 22) leaves the node reset and out
// of etcd, and its Kubernetes Node, cordoned by the reset's drain, behind. The
// resumed run finds cp-3 "already reset" and must still delete that Node:
// skipping it left the Node cordoned and failed the gate after ("unexpected
// nodes").
func TestResumeAfterResetDeletesTheNode(t *testing.T) {
	t.Parallel()
	slow(t)
	kube := testenv.StartKube(t)
	c := startSim(t, kube)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	// The killed run's reset.
	resetCP3(ctx, t, c, false)
	if err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, time.Minute, true, func(context.Context) (bool, error) {
		got := members(t, c)
		return len(got) == 2 && !c.NodeBooted("cp-3"), nil
	}); err != nil {
		t.Fatalf("cp-3 never left: members %v", members(t, c))
	}
	kn := nodeName(t, c, "cp-3")
	if _, err := kube.Client.CoreV1().Nodes().Get(ctx, kn, metav1.GetOptions{}); err != nil {
		t.Fatalf("the reset should leave cp-3's Node (%s) for the bot to delete: %v", kn, err)
	}

	req := request(c, kube, "cp-3")
	rec, _ := sdktest.Run(ctx, New(), req, nil)
	res := rec.FinalResult()
	if !res.OK {
		t.Fatalf("resumed removal: %v", res)
	}
	if c.Calls("cp-3", "Reset") != 1 {
		t.Fatalf("the resumed run reset cp-3 again (%d resets)", c.Calls("cp-3", "Reset"))
	}
	if _, err := kube.Client.CoreV1().Nodes().Get(ctx, kn, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Fatalf("cp-3's Node %s is still there after the resumed removal: %v", kn, err)
	}
}

// TestResumeWithResetInFlightWaitsInsteadOfR9: talosbot killed right after it sent cp-3's
// graceful reset, with etcd's NOSPACE alarm raised meanwhile (soak seed 1000). The resumed
// run, told the reset step was in flight, does not re-check R9 on a membership the reset is
// changing (its plan would be refused: every member reports the alarm), and once the alarm
// is disarmed it does not reset again: it waits for cp-3 to leave and deletes its Node, which
// the reset's drain left cordoned.
func TestResumeWithResetInFlightWaitsInsteadOfR9(t *testing.T) {
	t.Parallel()
	kube := testenv.StartKube(t)
	c := startSim(t, kube)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	// The killed run's reset, under the NOSPACE alarm.
	resetCP3(ctx, t, c, true)

	req := request(c, kube, "cp-3")
	req.Attempt = 2
	req.InterruptedSteps = []sdk.InterruptedStep{{ID: "membership", Node: "cp-3"}}
	plan, err := sdktest.Plan(ctx, New(), req)
	if err != nil || plan.Refusal != nil {
		t.Fatalf("the resumed removal's plan under the alarm: %v %v", plan.Refusal, err)
	}
	// The alarm is disarmed (the operator's fix); the resumed run finishes the removal.
	if err := c.Clear(ctx, "cp-1"); err != nil {
		t.Fatal(err)
	}
	rec, _ := sdktest.Run(ctx, New(), req, nil)
	res := rec.FinalResult()
	if res.Refusal != nil {
		t.Fatalf("the resumed removal was refused: %v", res)
	}
	if c.Calls("cp-3", "Reset") != 1 {
		t.Fatalf("the resumed run reset cp-3 again (%d resets)", c.Calls("cp-3", "Reset"))
	}
	if got := members(t, c); len(got) != 2 {
		t.Fatalf("members after the resumed removal: %v", got)
	}
	kn := nodeName(t, c, "cp-3")
	if _, err := kube.Client.CoreV1().Nodes().Get(ctx, kn, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Fatalf("cp-3's Node %s is still there after the resumed removal: %v (result %v)", kn, err, res)
	}
}

// TestFailureAfterResetNamesTheCordon: a removal that fails once the reset was sent (here a
// resumed run whose node never leaves within the node timeout) says that the node's Node is
// cordoned, as nothing later uncordons it (soak seed 1156: the ending said nothing of it).
func TestFailureAfterResetNamesTheCordon(t *testing.T) {
	t.Parallel()
	kube := testenv.StartKube(t)
	c := startSim(t, kube)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	kn := nodeName(t, c, "worker-1")
	// As the reset's drain leaves it.
	if err := k8s.Cordon(ctx, kube.Client, kn); err != nil {
		t.Fatal(err)
	}
	req := request(c, kube, "worker-1")
	req.Attempt = 2
	req.Settings.NodeTimeoutMs = 3000
	req.InterruptedSteps = []sdk.InterruptedStep{{ID: "reset", Node: "worker-1"}}
	rec, _ := sdktest.Run(ctx, New(), req, nil)
	res := rec.FinalResult()
	if res.OK || res.Summary != "worker-1 did not leave the cluster" {
		t.Fatalf("want the removal failed at the membership step, got %v", res)
	}
	if want := "🩺 Kubernetes node " + kn + " (worker-1) is cordoned: the graceful reset's drain cordoned it"; !slices.Contains(res.Lines, want) {
		t.Fatalf("the result does not name the cordon %q: %q", want, res.Lines)
	}
	if c.Calls("worker-1", "Reset") != 0 {
		t.Fatal("the resumed run sent a reset")
	}
}

// TestResumeSeesTheResetTheStoreMissed: talosbot was killed right after its reset reached cp-3
// but before it recorded the reset step (soak seed 1000's replay): the host names nothing in
// flight. The resumed run sees Talos's reset sequence running on cp-3 (MachineStatus stage
// resetting) and, under the NOSPACE alarm that would make R9 refuse, plans to wait for cp-3
// to leave rather than refusing or resetting it again.
func TestResumeSeesTheResetTheStoreMissed(t *testing.T) {
	t.Parallel()
	kube := testenv.StartKube(t)
	c := startSim(t, kube)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	cli, ip := resetCP3(ctx, t, c, true)
	if err := wait.PollUntilContextTimeout(ctx, 50*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		ms, err := safe.StateGetByID[*runtime.MachineStatus](client.WithNode(ctx, ip), cli.COSI, runtime.MachineStatusID)
		return err == nil && ms.TypedSpec().Stage == runtime.MachineStageResetting, nil
	}); err != nil {
		t.Fatal("cp-3 never showed its reset")
	}

	req := request(c, kube, "cp-3")
	req.Attempt = 2
	plan, err := sdktest.Plan(ctx, New(), req)
	if err != nil || plan.Refusal != nil {
		t.Fatalf("the resumed removal's plan while cp-3 resets: %v %v", plan.Refusal, err)
	}
	if c.Calls("cp-3", "Reset") != 1 {
		t.Fatalf("%d resets", c.Calls("cp-3", "Reset"))
	}
}

// TestResumeSeesASilentDrainedNode: talosbot was killed right after its reset reached cp-3 and
// before it recorded the reset step; by the resume cp-3 no longer answers (no MachineStatus to
// read) and is still an etcd member, under the NOSPACE alarm that makes R9 refuse (soak seed
// 1000: refused, cp-3's Node left cordoned and unsaid). The resumed run takes the cordon of a
// silent node as the reset's drain: its plan is not refused, it never resets again, and when
// cp-3 does not leave within the node timeout it fails naming the cordon.
func TestResumeSeesASilentDrainedNode(t *testing.T) {
	t.Parallel()
	kube := testenv.StartKube(t)
	c := startSim(t, kube)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	resetCP3(ctx, t, c, true)
	kn := nodeName(t, c, "cp-3")
	if err := wait.PollUntilContextTimeout(ctx, 50*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		cordoned, err := k8s.Cordoned(ctx, kube.Client, kn)
		return err == nil && cordoned, nil
	}); err != nil {
		t.Fatal("the reset's drain never cordoned cp-3")
	}
	if err := c.Inject(ctx, "cp-3", sim.Fault{Unreachable: true}); err != nil {
		t.Fatal(err)
	}

	req := request(c, kube, "cp-3")
	req.Attempt = 2
	req.Settings.NodeTimeoutMs = 3000
	plan, err := sdktest.Plan(ctx, New(), req)
	if err != nil || plan.Refusal != nil {
		t.Fatalf("the resumed removal's plan with cp-3 silent and drained: %v %v", plan.Refusal, err)
	}
	rec, _ := sdktest.Run(ctx, New(), req, nil)
	res := rec.FinalResult()
	if res.OK || res.Refusal != nil || res.Summary != "cp-3 did not leave the cluster" {
		t.Fatalf("want the removal failed waiting for cp-3 to leave, got %+v", res)
	}
	if want := "🩺 Kubernetes node " + kn + " (cp-3) is cordoned: the graceful reset's drain cordoned it"; !slices.Contains(res.Lines, want) {
		t.Fatalf("the result does not name the cordon %q: %q", want, res.Lines)
	}
	if c.Calls("cp-3", "Reset") != 1 {
		t.Fatalf("%d resets", c.Calls("cp-3", "Reset"))
	}
}

// TestSlowNodeIsNotTakenAsGone: waiting for a reset node to go, a read of the node that the
// wait's own deadline cuts short says nothing of it. Here worker-1 still runs and answers
// each call 4 s late, longer than the whole 3 s wait: the removal fails "did not leave" and
// its Node stays. (When any failed read counted as gone, a loaded machine read a live
// worker as gone and the removal deleted its Node: TestFailureAfterResetNamesTheCordon
// failed that way.)
func TestSlowNodeIsNotTakenAsGone(t *testing.T) {
	kube := testenv.StartKube(t)
	c := startSim(t, kube)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	kn := nodeName(t, c, "worker-1")
	if err := k8s.Cordon(ctx, kube.Client, kn); err != nil {
		t.Fatal(err)
	}
	if err := c.Inject(ctx, "worker-1", sim.Fault{Latency: 4 * time.Second}); err != nil {
		t.Fatal(err)
	}
	req := request(c, kube, "worker-1")
	req.Attempt = 2
	req.Settings.NodeTimeoutMs = 3000
	req.InterruptedSteps = []sdk.InterruptedStep{{ID: "reset", Node: "worker-1"}}
	rec, _ := sdktest.Run(ctx, New(), req, nil)
	if res := rec.FinalResult(); res.OK || res.Summary != "worker-1 did not leave the cluster" {
		t.Fatalf("want the removal failed at the membership step, got %+v", res)
	}
	if _, err := kube.Client.CoreV1().Nodes().Get(ctx, kn, metav1.GetOptions{}); err != nil {
		t.Fatalf("worker-1's Node: %v (it runs; its Node must stay)", err)
	}
}

// resetCP3 is what a removal of cp-3 killed right after its reset leaves:
// cp-3's graceful reset sent, as the plugin sends it, and nothing recorded;
// with noSpace, etcd's NOSPACE alarm raised first (soak seed 1000). It
// returns the Talos client (closed when the test ends) and cp-3's address.
func resetCP3(ctx context.Context, t *testing.T, c *sim.Cluster, noSpace bool) (*client.Client, string) {
	t.Helper()
	cfg, err := clientconfig.FromBytes(c.Talosconfig())
	if err != nil {
		t.Fatal(err)
	}
	cli, err := client.New(ctx, client.WithConfig(cfg))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cli.Close() })
	var ip string
	for _, n := range c.Nodes() {
		if n.Name == "cp-3" {
			ip = n.IP
		}
	}
	if noSpace {
		if err := c.Inject(ctx, "cp-1", sim.Fault{EtcdNoSpace: true}); err != nil {
			t.Fatal(err)
		}
	}
	if err := cli.Reset(client.WithNode(ctx, ip), true, false); err != nil {
		t.Fatal(err)
	}
	return cli, ip
}
