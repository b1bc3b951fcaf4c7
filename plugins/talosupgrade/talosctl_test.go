package talosupgrade

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"testing"
	"time"

	"github.com/cosi-project/runtime/pkg/safe"
	"github.com/siderolabs/talos/pkg/machinery/client"
	resconfig "github.com/siderolabs/talos/pkg/machinery/resources/config"
	"github.com/siderolabs/talos/pkg/machinery/resources/runtime"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/talosbot/talosbot/plugins/cluster"
	"github.com/talosbot/talosbot/plugins/cluster/talos"
	"github.com/talosbot/talosbot/plugins/sdk/sdktest"
	"github.com/talosbot/talosbot/sim"
)

// nodeState is what an upgrade leaves on a node, read from the Talos API,
// the Kubernetes API and the sim's call log.
type nodeState struct {
	Version       string
	Stage         string
	Ready         bool
	BootChanged   bool
	ConfigSame    bool
	KubeReady     bool
	Unschedulable bool
	PodGone       bool
	Calls         map[string]int
}

// upgradeRPCs are the calls whose counts must match.
var upgradeRPCs = []string{"/machine.ImageService/Pull", "/machine.LifecycleService/Upgrade", "/machine.MachineService/Upgrade",
	"/machine.MachineService/Reboot", "/machine.MachineService/Rollback"}

type before struct {
	bootID string
	config []byte
	pod    string
}

func readBefore(t *testing.T, s *cluster.Session, n cluster.Node, pod string) before {
	t.Helper()
	ctx := ctxFor(t, time.Minute)
	id, err := talos.BootID(ctx, s, n)
	if err != nil {
		t.Fatal(err)
	}
	mc, err := safe.StateGetByID[*resconfig.MachineConfig](client.WithNode(ctx, n.Address), s.COSI, resconfig.ActiveID)
	if err != nil {
		t.Fatal(err)
	}
	raw, err := mc.Provider().EncodeBytes()
	if err != nil {
		t.Fatal(err)
	}
	return before{bootID: id, config: raw, pod: pod}
}

func readState(t *testing.T, e *env, s *cluster.Session, n cluster.Node, b before) nodeState {
	t.Helper()
	ctx := ctxFor(t, time.Minute)
	info := e.info(t, n.Name)
	st := nodeState{Calls: map[string]int{}}
	var err error
	if st.Version, err = talos.TalosTag(ctx, s, n); err != nil {
		t.Fatal(err)
	}
	ms, err := safe.StateGetByID[*runtime.MachineStatus](client.WithNode(ctx, n.Address), s.COSI, runtime.MachineStatusID)
	if err != nil {
		t.Fatal(err)
	}
	st.Stage, st.Ready = ms.TypedSpec().Stage.String(), ms.TypedSpec().Status.Ready
	id, err := talos.BootID(ctx, s, n)
	if err != nil {
		t.Fatal(err)
	}
	st.BootChanged = id != b.bootID
	mc, err := safe.StateGetByID[*resconfig.MachineConfig](client.WithNode(ctx, n.Address), s.COSI, resconfig.ActiveID)
	if err != nil {
		t.Fatal(err)
	}
	raw, err := mc.Provider().EncodeBytes()
	if err != nil {
		t.Fatal(err)
	}
	st.ConfigSame = bytes.Equal(raw, b.config)
	kn, err := e.kube.Client.CoreV1().Nodes().Get(ctx, info.NodeName, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	st.Unschedulable = kn.Spec.Unschedulable
	for _, c := range kn.Status.Conditions {
		if c.Type == corev1.NodeReady {
			st.KubeReady = c.Status == corev1.ConditionTrue
		}
	}
	_, err = e.kube.Client.CoreV1().Pods("default").Get(ctx, b.pod, metav1.GetOptions{})
	st.PodGone = apierrors.IsNotFound(err)
	for _, m := range upgradeRPCs {
		st.Calls[m] = e.c.Calls(n.Name, m)
	}
	return st
}

// TestSameStateAsTalosctlUpgrade upgrades one v1.13 worker with the real
// talosctl (`talosctl upgrade --wait`, which drains) and the other with
// `/talos upgrade talos --nodes`, on one sim whose names all differ, and
// compares what each leaves: version, boot, machine config, machine stage,
// the Kubernetes Node (Ready, schedulable), the evicted pod and the RPCs
// the node served.
func TestSameStateAsTalosctlUpgrade(t *testing.T) {
	t.Parallel()
	slow(t)
	bin := os.Getenv("TALOSBOT_TALOSCTL")
	if bin == "" {
		t.Skip("skipping: TALOSBOT_TALOSCTL is unset; point it at talosctl v1.13.9 (../shared/tools/talosctl)")
	}
	e := start(t, 1, 2, true, func(o *sim.Options) { o.TalosVersion = "v1.13.2" })
	req := e.request(t, target)
	inv, err := cluster.InventoryFrom(&req.Cluster)
	if err != nil {
		t.Fatal(err)
	}
	ctx := ctxFor(t, 5*time.Minute)
	s, err := cluster.Open(ctx, inv, &req.Credentials)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close() //nolint:errcheck
	w1, _ := inv.Node("worker-1")
	w2, _ := inv.Node("worker-2")
	runningPods(t, e, e.info(t, "worker-1").NodeName, "a", "pod-a")
	runningPods(t, e, e.info(t, "worker-2").NodeName, "b", "pod-b")
	b1, b2 := readBefore(t, s, w1, "pod-a"), readBefore(t, s, w2, "pod-b")

	// talosctl on worker-1.
	dir := t.TempDir()
	tc := filepath.Join(dir, "talosconfig")
	if err := os.WriteFile(tc, e.c.Talosconfig(), 0o600); err != nil {
		t.Fatal(err)
	}
	cctx, cancel := context.WithTimeout(ctx, 4*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(cctx, bin, "--talosconfig", tc, "-e", e.info(t, "cp-1").IP, "-n", w1.Address, "upgrade",
		"--image", "factory.talos.dev/nocloud-installer/"+simSchematic+":"+target, "--wait", "--timeout", "3m")
	cmd.Env = append(os.Environ(), "TALOSCONFIG="+tc, "HOME="+dir, "KUBECONFIG="+filepath.Join(dir, "none"))
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("talosctl upgrade: %v\n%s", err, out)
	}

	// The bot on worker-2.
	req.Args["nodes"] = "worker-2"
	rec, _ := sdktest.Run(ctx, &Plugin{}, req, nil)
	if res := rec.FinalResult(); !res.OK {
		t.Fatalf("/talos upgrade talos: %v\n%s", res, dump(rec.Steps()))
	}

	if err := e.c.WaitEndpointsAnswer(ctx); err != nil { // apid's reconnect backoff
		t.Fatal(err)
	}
	got1, got2 := readState(t, e, s, w1, b1), readState(t, e, s, w2, b2)
	if got1.Version != target || !got1.BootChanged || !got1.PodGone {
		t.Fatalf("talosctl left worker-1 as %+v", got1)
	}
	if !reflect.DeepEqual(got1, got2) {
		t.Fatalf("different end states:\n talosctl upgrade:      %+v\n /talos upgrade talos:  %+v", got1, got2)
	}
}
