package sim_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	machineapi "github.com/siderolabs/talos/pkg/machinery/api/machine"
	"github.com/siderolabs/talos/pkg/machinery/client"
	clientconfig "github.com/siderolabs/talos/pkg/machinery/client/config"

	"github.com/talosbot/talosbot/sim"
)

// TestEtcdNoSpaceFault: the NOSPACE alarm is etcd's own: the alarm list names it, writes are
// refused with etcd's "database space exceeded", and clearing the fault disarms it.
func TestEtcdNoSpaceFault(t *testing.T) {
	t.Parallel()
	c, cli := startSim(t, sim.Options{ControlPlanes: 1, Workers: 1})

	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()

	cp := nodeIP(t, c, "cp-1")

	if err := c.Inject(ctx, "worker-1", sim.Fault{EtcdNoSpace: true}); err == nil {
		t.Fatal("etcdNoSpace on a worker was accepted")
	}

	if err := c.Inject(ctx, "cp-1", sim.Fault{EtcdNoSpace: true}); err != nil {
		t.Fatal(err)
	}

	alarms := func() string {
		resp, err := cli.EtcdAlarmList(client.WithNode(ctx, cp))
		if err != nil {
			t.Fatal(err)
		}

		var out []string
		for _, m := range resp.GetMessages() {
			for _, a := range m.GetMemberAlarms() {
				out = append(out, a.GetAlarm().String())
			}
		}

		return strings.Join(out, ",")
	}

	if got := alarms(); got != machineapi.EtcdMemberAlarm_NOSPACE.String() {
		t.Fatalf("alarms = %q, want NOSPACE", got)
	}

	ec, err := c.Etcd().Client(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer ec.Close()

	if _, err := ec.Put(ctx, "/x", "1"); err == nil || !strings.Contains(err.Error(), "database space exceeded") {
		t.Fatalf("a write under NOSPACE: %v, want database space exceeded", err)
	}

	if err := c.Clear(ctx, "cp-1"); err != nil {
		t.Fatal(err)
	}

	if got := alarms(); got != "" {
		t.Fatalf("alarms after clearing = %q", got)
	}

	if _, err := ec.Put(ctx, "/x", "1"); err != nil {
		t.Fatalf("a write after disarming: %v", err)
	}
}

// TestApidCertificateFaults: an expired apid certificate, and one that does not name the
// node's address, fail the client's TLS handshake with Go's x509 errors; clearing restores it.
func TestApidCertificateFaults(t *testing.T) {
	t.Parallel()
	c, cli := startSim(t, sim.Options{ControlPlanes: 1, Workers: 1})

	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()

	w := nodeIP(t, c, "worker-1")

	if err := c.Inject(ctx, "worker-1", sim.Fault{ApidCertificate: "stale"}); err == nil {
		t.Fatal("an unknown apidCertificate value was accepted")
	}

	direct := func() error {
		cfg, err := clientconfigFor(c, w)
		if err != nil {
			return err
		}

		dc, err := client.New(ctx, client.WithConfig(cfg), client.WithEndpoints(w))
		if err != nil {
			return err
		}
		defer dc.Close()

		_, err = dc.Version(ctx)

		return err
	}

	for mode, want := range map[string]string{"expired": "certificate has expired", "noSAN": "certificate is valid for"} {
		if err := c.Inject(ctx, "worker-1", sim.Fault{ApidCertificate: mode}); err != nil {
			t.Fatal(err)
		}

		if err := direct(); err == nil || !strings.Contains(err.Error(), want) {
			t.Fatalf("%s: Version straight to the worker = %v, want %q", mode, err, want)
		}

		// Through the control plane's apid, too: its apid dials the worker the same way (after
		// its backoff from the previous failure, the new certificate's error).
		eventually(t, 30*time.Second, mode+" through the control plane", func() error {
			if _, err := version(ctx, cli, w); err == nil || !strings.Contains(err.Error(), want) {
				return fmt.Errorf("Version through the control plane = %v, want %q", err, want)
			}

			return nil
		})
	}

	if err := c.Clear(ctx, "worker-1"); err != nil {
		t.Fatal(err)
	}

	eventually(t, 30*time.Second, "the worker answers again", direct)
}

// TestEtcdRejoinFailureFault: after a normal reboot the member's etcd exits at start and the
// service waits to restart it forever; clearing the fault lets it start and rejoin.
func TestEtcdRejoinFailureFault(t *testing.T) {
	t.Parallel()
	slow(t)
	c, cli := startSim(t, sim.Options{ControlPlanes: 3})

	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()

	cp2 := nodeIP(t, c, "cp-2")
	if err := c.Inject(ctx, "cp-2", sim.Fault{EtcdRejoinFailure: true}); err != nil {
		t.Fatal(err)
	}

	before := bootID(ctx, t, cli, cp2)
	if err := cli.Reboot(client.WithNode(ctx, cp2)); err != nil {
		t.Fatal(err)
	}

	eventually(t, 30*time.Second, "cp-2 rebooted", func() error {
		if id := bootID(ctx, t, cli, cp2); id == before {
			return fmt.Errorf("same boot id")
		}

		return nil
	})

	msg := etcdService(ctx, t, c, "cp-2", "Waiting")
	if !strings.Contains(msg, `going to restart forever: task "etcd" failed: exit code 1`) {
		t.Fatalf("etcd service message %q", msg)
	}

	if err := c.Clear(ctx, "cp-2"); err != nil {
		t.Fatal(err)
	}

	if _, err := c.WaitEtcdHealthy(ctx, 3); err != nil {
		t.Fatal(err)
	}
}

// clientconfigFor is the cluster's talosconfig (its one context), for a client of its own.
func clientconfigFor(c *sim.Cluster, _ string) (*clientconfig.Config, error) {
	return clientconfig.FromBytes(c.Talosconfig())
}
