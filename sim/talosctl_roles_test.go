package sim_test

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/talosbot/talosbot/sim"
)

// TestTalosctlRolesAndFaults: the real talosctl meets the sim's access table, the smaller
// differences and the new faults as it would meet Talos: PermissionDenied "not authorized" for
// a reader's boot-id read and reboot, Unimplemented for a worker's kubeconfig, GRUB's error for
// a rollback with no previous entry, etcd's NOSPACE in the alarm list, and x509 errors for an
// apid certificate that expired or does not name the node's address.
func TestTalosctlRolesAndFaults(t *testing.T) {
	t.Parallel()
	slow(t)
	bin := needTalosctl(t)
	c, _ := startSim(t, sim.Options{ControlPlanes: 1, Workers: 1, TalosVersion: "v1.13.9"})
	tc := newTalosctl(bin, c)

	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()

	cp, w := nodeIP(t, c, "cp-1"), nodeIP(t, c, "worker-1")

	b, err := c.TalosconfigWithRole("os:reader")
	if err != nil {
		t.Fatal(err)
	}

	readerCfg := filepath.Join(t.TempDir(), "talosconfig")
	if err := os.WriteFile(readerCfg, b, 0o600); err != nil {
		t.Fatal(err)
	}

	reader := talosctl{bin: bin, cfg: readerCfg}

	mustContain(t, "reader version", reader.mustRun(t, "-n", w, "version"), "Tag:")

	out, err := reader.run(t, "-n", w, "read", "/proc/sys/kernel/random/boot_id")
	if err == nil {
		t.Fatalf("a reader read the boot id:\n%s", out)
	}

	mustContain(t, "reader read", out, "PermissionDenied", "not authorized")

	out, err = reader.run(t, "-n", w, "reboot", "--wait=false")
	if err == nil {
		t.Fatalf("a reader rebooted a node:\n%s", out)
	}

	mustContain(t, "reader reboot", out, "not authorized")

	out, err = tc.run(t, "-n", w, "kubeconfig", "--force", filepath.Join(t.TempDir(), "kc"))
	if err == nil {
		t.Fatalf("kubeconfig from a worker:\n%s", out)
	}

	mustContain(t, "worker kubeconfig", out, "Unimplemented", "kubeconfig is only available on control plane nodes")

	out, err = tc.run(t, "-n", w, "rollback")
	if err == nil {
		t.Fatalf("rollback with no previous entry:\n%s", out)
	}

	mustContain(t, "rollback", out, `cannot rollback to "", label does not exist`)

	if err := c.Inject(ctx, "cp-1", sim.Fault{EtcdNoSpace: true}); err != nil {
		t.Fatal(err)
	}

	mustContain(t, "etcd alarm list", tc.mustRun(t, "-n", cp, "etcd", "alarm", "list"), "NOSPACE")

	if err := c.Clear(ctx, "cp-1"); err != nil {
		t.Fatal(err)
	}

	for mode, want := range map[string]string{"expired": "certificate has expired", "noSAN": "certificate is valid for 192.0.2.1"} {
		if err := c.Inject(ctx, "worker-1", sim.Fault{ApidCertificate: mode}); err != nil {
			t.Fatal(err)
		}

		out, err := tc.run(t, "-e", w, "-n", w, "version")
		if err == nil {
			t.Fatalf("%s: talosctl version passed:\n%s", mode, out)
		}

		mustContain(t, mode, out, want)
	}
}
