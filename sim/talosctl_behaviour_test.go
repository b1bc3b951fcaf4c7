package sim_test

import (
	"bytes"
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	machineapi "github.com/siderolabs/talos/pkg/machinery/api/machine"
	"github.com/siderolabs/talos/pkg/machinery/client"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/talosbot/talosbot/internal/testenv"
	"github.com/talosbot/talosbot/sim"
)

// realTalosctl runs the real talosctl v1.13.9 (TALOSBOT_TALOSCTL) against the sim's talosconfig and
// returns its combined output.
type realTalosctl struct {
	t    *testing.T
	bin  string
	conf string
}

func newRealTalosctl(t *testing.T, c *sim.Cluster) *realTalosctl {
	t.Helper()

	bin := os.Getenv("TALOSBOT_TALOSCTL")
	if bin == "" {
		t.Skip("real talosctl not configured: export TALOSBOT_TALOSCTL=/work/shared/tools/talosctl (see ../shared/tools/README.md)")
	}

	return &realTalosctl{t: t, bin: bin, conf: filepath.Join(c.Dir(), "talosconfig")}
}

func (tc *realTalosctl) run(ctx context.Context, args ...string) (string, error) {
	tc.t.Helper()

	ctx, cancel := context.WithTimeout(ctx, 3*time.Minute)
	defer cancel()

	cmd := exec.CommandContext(ctx, tc.bin, append([]string{"--talosconfig", tc.conf}, args...)...)
	cmd.Env = append(os.Environ(), "HOME="+tc.t.TempDir())

	var out bytes.Buffer

	cmd.Stdout, cmd.Stderr = &out, &out
	start := time.Now()
	err := cmd.Run()
	tc.t.Logf("talosctl %s: %s\n%s", strings.Join(args, " "), time.Since(start).Round(time.Millisecond), out.String())

	return out.String(), err
}

func (tc *realTalosctl) must(ctx context.Context, args ...string) string {
	tc.t.Helper()

	out, err := tc.run(ctx, args...)
	if err != nil {
		tc.t.Fatalf("talosctl %s: %v\n%s", strings.Join(args, " "), err, out)
	}

	return out
}

// talosctl's trackers retry their event watch a second after the sequence started; a reboot that
// takes 2 s lets them see the node down, as they do with a real machine.

func TestTalosctlBehaviourRebootWaitAndRollback(t *testing.T) {
	t.Parallel()
	slow(t)
	c, cli := startSim(t, sim.Options{ControlPlanes: 1, Workers: 1, RebootDelay: 2 * time.Second})
	tc := newRealTalosctl(t, c)
	ctx := t.Context()
	w1 := nodeIP(t, c, "worker-1")
	before := bootID(ctx, t, cli, w1)

	out := tc.must(ctx, "-n", w1, "reboot", "--wait", "--timeout", "2m", "--progress", "plain")
	if !strings.Contains(out, "post check passed") {
		t.Fatalf("reboot --wait output lacks the post check:\n%s", out)
	}

	if bootID(ctx, t, cli, w1) == before {
		t.Fatal("boot id unchanged after talosctl reboot --wait")
	}

	// Legacy upgrade (v1.12 node), then rollback.
	out = tc.must(ctx, "-n", w1, "upgrade", "--image", upgradeImage, "--wait", "--timeout", "2m", "--progress", "plain")
	if !strings.Contains(out, "falling back to legacy") || !strings.Contains(out, "post check passed") {
		t.Fatalf("legacy upgrade --wait output:\n%s", out)
	}

	if v, err := version(ctx, cli, w1); err != nil || v != "v1.13.9" {
		t.Fatalf("after talosctl upgrade: %s %v", v, err)
	}

	tc.must(ctx, "-n", w1, "rollback")
	waitVersion(ctx, t, cli, w1, sim.DefaultTalosVersion)
}

func TestTalosctlBehaviourUpgradeNewAPI(t *testing.T) {
	t.Parallel()
	slow(t)
	kube := testenv.StartKube(t)
	c, cli := startSim(t, sim.Options{ControlPlanes: 1, Workers: 1, TalosVersion: "v1.13.0", RebootDelay: 2 * time.Second,
		Kube: kube.Client, Kubeconfig: kube.Kubeconfig})
	tc := newRealTalosctl(t, c)
	ctx := t.Context()
	w1 := nodeIP(t, c, "worker-1")

	// talosctl pulls the installer itself before LifecycleService.Upgrade; pulling first by
	// hand (as the conformance list does) must not get in its way.
	tc.must(ctx, "-n", w1, "image", "pull", "--namespace", "system", upgradeImage)

	// The new API with talosctl's own drain (through the Kubeconfig RPC and the Nodename resource).
	out := tc.must(ctx, "-n", w1, "upgrade", "--image", upgradeImage, "--wait", "--timeout", "2m", "--progress", "plain")
	if strings.Contains(out, "falling back to legacy") || !strings.Contains(out, "post check passed") {
		t.Fatalf("upgrade --wait output:\n%s", out)
	}

	if v, err := version(ctx, cli, w1); err != nil || v != "v1.13.9" {
		t.Fatalf("after talosctl upgrade: %s %v", v, err)
	}

	n, err := kube.Client.CoreV1().Nodes().Get(ctx, "worker-1", metav1.GetOptions{})
	if err != nil || n.Spec.Unschedulable {
		t.Fatalf("worker-1 after talosctl's drain and uncordon: %v %v", n.Spec.Unschedulable, err)
	}
}

func TestTalosctlBehaviourResetGracefulWait(t *testing.T) {
	t.Parallel()
	slow(t)
	c, cli := startSim(t, sim.Options{ControlPlanes: 3, RebootDelay: 300 * time.Millisecond})
	tc := newRealTalosctl(t, c)
	ctx := t.Context()
	cp1, cp3 := nodeIP(t, c, "cp-1"), nodeIP(t, c, "cp-3")

	out := tc.must(ctx, "-n", cp3, "reset", "--graceful", "--wait", "--reboot=false", "--timeout", "2m")
	if !strings.Contains(out, "events check condition met") {
		t.Fatalf("reset --graceful --wait output:\n%s", out)
	}

	ml, err := cli.EtcdMemberList(client.WithNode(ctx, cp1), &machineapi.EtcdMemberListRequest{})
	if err != nil || len(ml.Messages[0].Members) != 2 {
		t.Fatalf("etcd members after reset: %v %v", ml, err)
	}
}

func TestTalosctlBehaviourHealth(t *testing.T) {
	t.Parallel()
	slow(t)
	kube := testenv.StartKube(t)
	c, _ := startSim(t, sim.Options{ControlPlanes: 3, Workers: 1, Kube: kube.Client, Kubeconfig: kube.Kubeconfig,
		StaticPods: true, HealthCheckInterval: 200 * time.Millisecond})
	tc := newRealTalosctl(t, c)
	ctx := t.Context()
	cp1, w1 := nodeIP(t, c, "cp-1"), nodeIP(t, c, "worker-1")

	out := tc.must(ctx, "-n", cp1, "health", "--wait-timeout", "1m")
	for _, want := range []string{"discovered nodes:", "waiting for etcd to be healthy: OK", "waiting for all k8s nodes to report schedulable: OK"} {
		if !strings.Contains(out, want) {
			t.Fatalf("health output lacks %q:\n%s", want, out)
		}
	}

	out, err := tc.run(ctx, "-n", w1, "health", "--wait-timeout", "20s")

	var exit *exec.ExitError
	if !errors.As(err, &exit) || !strings.Contains(out, "only available on control plane nodes") {
		t.Fatalf("health on a worker must be refused: %v\n%s", err, out)
	}
}
