package sim_test

import (
	"context"
	"io"
	"testing"
	"time"

	"github.com/cosi-project/runtime/pkg/safe"
	"github.com/siderolabs/talos/pkg/machinery/client"
	clientconfig "github.com/siderolabs/talos/pkg/machinery/client/config"
	"github.com/siderolabs/talos/pkg/machinery/resources/config"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/talosbot/talosbot/sim"
)

// roleClient is a client whose certificate carries the given roles.
func roleClient(t *testing.T, c *sim.Cluster, roles ...string) *client.Client {
	t.Helper()

	b, err := c.TalosconfigWithRole(roles...)
	if err != nil {
		t.Fatalf("talosconfig with %v: %v", roles, err)
	}

	cfg, err := clientconfig.FromBytes(b)
	if err != nil {
		t.Fatalf("parse talosconfig: %v", err)
	}

	cli, err := client.New(t.Context(), client.WithConfig(cfg))
	if err != nil {
		t.Fatalf("client: %v", err)
	}

	t.Cleanup(func() { _ = cli.Close() })

	return cli
}

// wantDenied asserts Talos's authz refusal, word for word.
func wantDenied(t *testing.T, what string, err error) {
	t.Helper()

	if status.Code(err) != codes.PermissionDenied || status.Convert(err).Message() != "not authorized" {
		t.Fatalf("%s: want PermissionDenied \"not authorized\", got %v", what, err)
	}
}

// TestAccessRoles: the sim enforces machined's access table per method, on the node called and
// on a node reached through another's apid (the roles travel with the request), and refuses
// the sensitive MachineConfig resource to non-admins.
func TestAccessRoles(t *testing.T) {
	t.Parallel()
	c, admin := startSim(t, sim.Options{ControlPlanes: 1, Workers: 1})

	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()

	cp, worker := nodeIP(t, c, "cp-1"), nodeIP(t, c, "worker-1")

	reader := roleClient(t, c, "os:reader")
	operator := roleClient(t, c, "os:operator")
	backup := roleClient(t, c, "os:etcd:backup")

	// Readers read.
	for _, ip := range []string{cp, worker} {
		if _, err := version(ctx, reader, ip); err != nil {
			t.Fatalf("reader Version on %s: %v", ip, err)
		}
	}

	if _, err := reader.EtcdMemberList(client.WithNode(ctx, cp), nil); err != nil {
		t.Fatalf("reader EtcdMemberList: %v", err)
	}

	// The boot id read is os:admin only; through the control plane's apid to the worker too.
	for _, ip := range []string{cp, worker} {
		r, err := reader.Read(client.WithNode(ctx, ip), "/proc/sys/kernel/random/boot_id")
		if err == nil {
			_, err = io.ReadAll(r)
		}

		wantDenied(t, "reader Read boot_id on "+ip, err)
	}

	err := reader.Reboot(client.WithNode(ctx, worker))
	wantDenied(t, "reader Reboot", err)

	err = operator.Rollback(client.WithNode(ctx, worker))
	wantDenied(t, "operator Rollback", err)

	err = operator.Reset(client.WithNode(ctx, worker), false, false)
	wantDenied(t, "operator Reset", err)

	_, err = operator.UpgradeWithOptions(client.WithNode(ctx, worker), client.WithUpgradeImage(upgradeImage))
	wantDenied(t, "operator Upgrade", err)

	_, err = operator.Kubeconfig(client.WithNode(ctx, cp))
	wantDenied(t, "operator Kubeconfig", err)

	err = operator.Bootstrap(client.WithNode(ctx, cp), nil)
	wantDenied(t, "operator Bootstrap", err)

	// The etcd backup role takes snapshots and nothing else of the sort.
	snap, err := backup.EtcdSnapshot(client.WithNode(ctx, cp), nil)
	if err != nil {
		t.Fatalf("etcd:backup EtcdSnapshot: %v", err)
	}

	_ = snap.Close()

	_, err = version(ctx, backup, cp)
	wantDenied(t, "etcd:backup Version", err)

	// Sensitive resources are admin only; the admin still reads everything.
	_, err = safe.StateGetByID[*config.MachineConfig](client.WithNode(ctx, cp), reader.COSI, config.ActiveID)
	wantDenied(t, "reader get machineconfig", err)

	if _, err := safe.StateGetByID[*config.MachineConfig](client.WithNode(ctx, cp), admin.COSI, config.ActiveID); err != nil {
		t.Fatalf("admin get machineconfig: %v", err)
	}

	// A client forging roles in the metadata is not believed: only apid's impersonator is.
	err = reader.Reboot(metadata.AppendToOutgoingContext(client.WithNode(ctx, worker), "talos-role", "os:admin"))
	wantDenied(t, "reader Reboot with forged talos-role metadata", err)

	if got := sim.AllowedRoles("/machine.MachineService/Rollback"); len(got) != 1 || got[0] != "os:admin" {
		t.Fatalf("AllowedRoles(Rollback) = %v, want [os:admin]", got)
	}

	if _, err := c.TalosconfigWithRole("os:root"); err == nil {
		t.Fatal("TalosconfigWithRole accepted an unknown role")
	}
}
