package sim_test

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/talosbot/talosbot/sim"
)

// talosctl runs the real talosctl (TALOSBOT_TALOSCTL) against the sim's talosconfig.
type talosctl struct {
	bin, cfg string
}

// needTalosctl skips the test when the real talosctl is not configured.
func needTalosctl(t *testing.T) string {
	t.Helper()

	bin := os.Getenv("TALOSBOT_TALOSCTL")
	if bin == "" {
		t.Skip("real talosctl not configured: set TALOSBOT_TALOSCTL to a talosctl v1.13.9 binary, e.g. export TALOSBOT_TALOSCTL=$(cd ../shared/tools && pwd)/talosctl (see ../shared/tools/README.md)")
	}

	return bin
}

func newTalosctl(bin string, c *sim.Cluster) talosctl {
	return talosctl{bin: bin, cfg: filepath.Join(c.Dir(), "talosconfig")}
}

// run returns stdout+stderr and the error of one talosctl command.
func (tc talosctl) run(t *testing.T, args ...string) (string, error) {
	t.Helper()

	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()

	cmd := exec.CommandContext(ctx, tc.bin, append([]string{"--talosconfig", tc.cfg}, args...)...)

	var out bytes.Buffer

	cmd.Stdout, cmd.Stderr = &out, &out
	err := cmd.Run()

	return out.String(), err
}

func (tc talosctl) mustRun(t *testing.T, args ...string) string {
	t.Helper()

	out, err := tc.run(t, args...)
	if err != nil {
		t.Fatalf("talosctl %s: %v\n%s", strings.Join(args, " "), err, out)
	}

	return out
}

// mustContain fails unless every want occurs in out.
func mustContain(t *testing.T, what, out string, want ...string) {
	t.Helper()

	for _, w := range want {
		if !strings.Contains(out, w) {
			t.Fatalf("%s: output lacks %q:\n%s", what, w, out)
		}
	}
}

func TestTalosctlResources(t *testing.T) {
	t.Parallel()
	slow(t)
	bin := needTalosctl(t)
	c, _ := startSim(t, sim.Options{ControlPlanes: 3, Workers: 1, TalosVersion: "v1.13.9"})
	tc := newTalosctl(bin, c)

	cp1, worker := nodeIP(t, c, "cp-1"), nodeIP(t, c, "worker-1")

	out := tc.mustRun(t, "-n", worker, "get", "machineconfig", "-o", "yaml")
	mustContain(t, "get machineconfig", out, "id: v1alpha1", "namespace: config", "type: MachineConfigs.config.talos.dev", "type: worker", ":v1.13.9")

	out = tc.mustRun(t, "-n", cp1, "get", "nodename")
	mustContain(t, "get nodename", out, "NODENAME", "k8s         Nodename   nodename", " cp-1")

	out = tc.mustRun(t, "-n", cp1, "get", "members")
	for _, n := range c.Nodes() {
		mustContain(t, "get members", out, n.Name, n.IP)
	}

	mustContain(t, "get members", out, "controlplane", "worker", "Talos (v1.13.9)")

	out = tc.mustRun(t, "-n", cp1, "get", "machinestatus", "-o", "yaml")
	mustContain(t, "get machinestatus", out, "stage: running", "ready: true")

	out = tc.mustRun(t, "-n", cp1, "get", "hostname")
	mustContain(t, "get hostname", out, "HostnameStatus   hostname", " cp-1")

	out = tc.mustRun(t, "-n", cp1, "get", "addresses")
	mustContain(t, "get addresses", out, "eth0/"+cp1+"/24", "lo/127.0.0.1/8")

	out = tc.mustRun(t, "-n", cp1, "get", "services")
	for _, svc := range []string{"apid", "etcd", "kubelet", "machined", "trustd"} {
		mustContain(t, "get services", out, "Service   "+svc)
	}

	out = tc.mustRun(t, "-n", cp1, "get", "etcdmembers")
	mustContain(t, "get etcdmembers", out, "EtcdMember   local")

	// talosctl queries node by node (the API is one-to-one only).
	out = tc.mustRun(t, "-n", cp1+","+worker, "get", "machinetype")
	mustContain(t, "get machinetype on two nodes", out, cp1+"   config      MachineType", worker+"   config      MachineType", "controlplane", "worker")

	// A type the sim does not serve fails as on a node without it.
	out, err := tc.run(t, "-n", cp1, "get", "disks")
	if err == nil {
		t.Fatalf("get disks succeeded:\n%s", out)
	}

	mustContain(t, "get disks", out, `resource "disks" is not registered`)

	out, err = tc.run(t, "-n", worker, "read", "/system/state/config.yaml")
	if err == nil {
		t.Fatalf("read /system/state/config.yaml succeeded on v1.13.9:\n%s", out)
	}

	mustContain(t, "read /system/state/config.yaml", out, "NotFound", "no such file or directory")
}

// TestTalosctlWithoutNodes: the talosconfig names a default node (the first
// control plane), so plain `talosctl version`, as the demo prints it, works
// without -n; a real talosconfig from `talosctl config node` does the same.
func TestTalosctlWithoutNodes(t *testing.T) {
	t.Parallel()
	slow(t)
	bin := needTalosctl(t)
	c, _ := startSim(t, sim.Options{ControlPlanes: 3, Workers: 1, TalosVersion: "v1.13.9"})
	out := newTalosctl(bin, c).mustRun(t, "version")
	mustContain(t, "version", out, "Server:", "NODE:        "+nodeIP(t, c, "cp-1"), "Tag:         v1.13.9")
}

// TestTalosctlLandingResources: the real talosctl reads what a node booted as it would on
// Talos: `get extensions` (Image Factory's "schematic" extension), `get kernelcmdline`,
// `get bootedentry`; and `get machinestatus` shows unmet conditions while a fault holds them.
func TestTalosctlLandingResources(t *testing.T) {
	t.Parallel()
	slow(t)
	bin := needTalosctl(t)
	c, _ := startSim(t, sim.Options{ControlPlanes: 1, Workers: 1, TalosVersion: "v1.13.9"})
	tc := newTalosctl(bin, c)
	worker := nodeIP(t, c, "worker-1")

	out := tc.mustRun(t, "-n", worker, "get", "extensions", "-o", "yaml")
	mustContain(t, "get extensions", out, "type: ExtensionStatuses.runtime.talos.dev", "name: schematic", "version: "+sim.DefaultSchematic)

	out = tc.mustRun(t, "-n", worker, "get", "kernelcmdline", "-o", "yaml")
	mustContain(t, "get kernelcmdline", out, "id: cmdline", "talos.platform=nocloud", "init_on_alloc=1")

	out = tc.mustRun(t, "-n", worker, "get", "bootedentry", "-o", "yaml")
	mustContain(t, "get bootedentry", out, "bootedEntry: Talos-v1.13.9.efi")

	if err := c.Inject(t.Context(), "worker-1", sim.Fault{UnmetConditions: "time"}); err != nil {
		t.Fatal(err)
	}

	out = tc.mustRun(t, "-n", worker, "get", "machinestatus", "-o", "yaml")
	mustContain(t, "get machinestatus", out, "stage: running", "ready: false", "name: time", "reason: time is not synced")
}
