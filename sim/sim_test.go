package sim_test

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	clusterapi "github.com/siderolabs/talos/pkg/machinery/api/cluster"
	"github.com/siderolabs/talos/pkg/machinery/api/common"
	machineapi "github.com/siderolabs/talos/pkg/machinery/api/machine"
	"github.com/siderolabs/talos/pkg/machinery/client"
	clientconfig "github.com/siderolabs/talos/pkg/machinery/client/config"
	"github.com/siderolabs/talos/pkg/machinery/config/configloader"
	"go.etcd.io/etcd/etcdutl/v3/snapshot"
	"go.uber.org/zap"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/talosbot/talosbot/sim"
)

const upgradeImage = "factory.talos.dev/nocloud-installer/abc123:v1.13.9"

// systemNS is the containerd instance talosctl pulls installers into.
var systemNS = &common.ContainerdInstance{Driver: common.ContainerDriver_CONTAINERD, Namespace: common.ContainerdNamespace_NS_SYSTEM}

func startSim(t *testing.T, opts sim.Options) (*sim.Cluster, *client.Client) {
	t.Helper()

	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()

	if opts.Dir == "" {
		opts.Dir = t.TempDir()
	}

	c, err := sim.Start(ctx, opts)
	if err != nil {
		t.Fatalf("start sim: %v", err)
	}

	t.Cleanup(func() {
		if err := c.Close(); err != nil {
			t.Errorf("close sim: %v", err)
		}
	})

	cfg, err := clientconfig.FromBytes(c.Talosconfig())
	if err != nil {
		t.Fatalf("parse talosconfig: %v", err)
	}

	cli, err := client.New(ctx, client.WithConfig(cfg))
	if err != nil {
		t.Fatalf("client: %v", err)
	}

	t.Cleanup(func() { _ = cli.Close() })

	return c, cli
}

func ips(c *sim.Cluster, role string) []string {
	var out []string

	for _, n := range c.Nodes() {
		if role == "" || n.Role == role {
			out = append(out, n.IP)
		}
	}

	return out
}

func nodeIP(t *testing.T, c *sim.Cluster, name string) string {
	t.Helper()

	for _, n := range c.Nodes() {
		if n.Name == name {
			return n.IP
		}
	}

	t.Fatalf("no node %s", name)

	return ""
}

// eventually polls cond until it returns nil or the deadline passes.
func eventually(t *testing.T, timeout time.Duration, what string, cond func() error) {
	t.Helper()

	deadline := time.Now().Add(timeout)
	tick := time.NewTicker(50 * time.Millisecond)

	defer tick.Stop()

	var err error

	for time.Now().Before(deadline) {
		if err = cond(); err == nil {
			return
		}

		<-tick.C
	}

	t.Fatalf("%s: not reached within %s: %v", what, timeout, err)
}

func version(ctx context.Context, cli *client.Client, ip string) (string, error) {
	resp, err := cli.Version(client.WithNode(ctx, ip))
	if err != nil {
		return "", err
	}

	return resp.Messages[0].Version.Tag, nil
}

func bootID(ctx context.Context, t *testing.T, cli *client.Client, ip string) string {
	t.Helper()

	// A node that just came back may still be booting, or its apid backend
	// still backing off, and refuse the connection for a moment: retry that.
	var id string

	eventually(t, 30*time.Second, "the boot id of "+ip, func() error {
		r, err := cli.Read(client.WithNode(ctx, ip), "/proc/sys/kernel/random/boot_id")
		if err != nil {
			if status.Code(err) == codes.Unavailable {
				return err
			}

			t.Fatalf("read boot id: %v", err)
		}

		b, err := io.ReadAll(r)
		if err != nil {
			return fmt.Errorf("read boot id: %w", err)
		}

		id = strings.TrimSpace(string(b))

		return nil
	})

	return id
}

func TestClusterBasics(t *testing.T) {
	t.Parallel()
	slow(t)
	c, cli := startSim(t, sim.Options{ControlPlanes: 3, Workers: 2})
	ctx := t.Context()

	t.Run("talosconfig file is private", func(t *testing.T) {
		st, err := os.Stat(filepath.Join(c.Dir(), "talosconfig"))
		if err != nil {
			t.Fatal(err)
		}

		if st.Mode().Perm() != 0o600 {
			t.Fatalf("talosconfig mode %v, want 0600", st.Mode().Perm())
		}

		cfg, err := clientconfig.FromBytes(c.Talosconfig())
		if err != nil {
			t.Fatal(err)
		}

		if cfg.Context != "talosbot-sim" || len(cfg.Contexts[cfg.Context].Endpoints) != 3 {
			t.Fatalf("context %q endpoints %v", cfg.Context, cfg.Contexts[cfg.Context].Endpoints)
		}
	})

	t.Run("nodes", func(t *testing.T) {
		nodes := c.Nodes()
		if len(nodes) != 5 || nodes[0].Name != "cp-1" || nodes[4].Name != "worker-2" || nodes[3].Role != sim.RoleWorker {
			t.Fatalf("nodes: %+v", nodes)
		}

		if nodes[0].Host != "pve1" || nodes[1].Host != "pve2" || nodes[3].Host != "pve1" || nodes[0].Platform != "nocloud" {
			t.Fatalf("hosts/platform: %+v", nodes)
		}
	})

	t.Run("version on all nodes with hostname metadata", func(t *testing.T) {
		all := ips(c, "")

		resp, err := cli.Version(client.WithNodes(ctx, all...))
		if err != nil {
			t.Fatal(err)
		}

		if len(resp.Messages) != len(all) {
			t.Fatalf("%d messages, want %d", len(resp.Messages), len(all))
		}

		seen := map[string]bool{}

		for _, m := range resp.Messages {
			if m.Version.Tag != sim.DefaultTalosVersion {
				t.Errorf("%s: version %s", m.Metadata.GetHostname(), m.Version.Tag)
			}

			seen[m.Metadata.GetHostname()] = true
		}

		for _, ip := range all {
			if !seen[ip] {
				t.Errorf("no reply with Metadata.Hostname %s", ip)
			}
		}
	})

	t.Run("direct call has no metadata", func(t *testing.T) {
		resp, err := cli.Version(ctx)
		if err != nil {
			t.Fatal(err)
		}

		if len(resp.Messages) != 1 || resp.Messages[0].Metadata != nil {
			t.Fatalf("direct reply: %v", resp)
		}
	})

	t.Run("service list", func(t *testing.T) {
		cp, err := cli.ServiceInfo(client.WithNode(ctx, nodeIP(t, c, "cp-1")), "etcd")
		if err != nil || len(cp) != 1 || cp[0].Service.State != "Running" || !cp[0].Service.Health.Healthy {
			t.Fatalf("etcd on cp-1: %v %v", cp, err)
		}

		w, err := cli.ServiceInfo(client.WithNode(ctx, nodeIP(t, c, "worker-1")), "etcd")
		if err != nil || len(w) != 0 {
			t.Fatalf("etcd on worker-1: %v %v", w, err)
		}

		kl, err := cli.ServiceInfo(client.WithNodes(ctx, ips(c, "")...), "kubelet")
		if err != nil || len(kl) != 5 {
			t.Fatalf("kubelet everywhere: %d %v", len(kl), err)
		}
	})

	t.Run("etcd status on control planes reports one leader", func(t *testing.T) {
		resp, err := cli.EtcdStatus(client.WithNodes(ctx, ips(c, sim.RoleControlPlane)...))
		if err != nil {
			t.Fatal(err)
		}

		if len(resp.Messages) != 3 {
			t.Fatalf("%d replies", len(resp.Messages))
		}

		leaders := map[uint64]bool{}
		ids := map[uint64]bool{}

		for _, m := range resp.Messages {
			leaders[m.MemberStatus.Leader] = true
			ids[m.MemberStatus.MemberId] = true
		}

		if len(leaders) != 1 || leaders[0] || len(ids) != 3 {
			t.Fatalf("leaders %v member ids %v", leaders, ids)
		}

		for id := range leaders {
			if !ids[id] {
				t.Fatalf("leader %x is not a member", id)
			}
		}
	})

	t.Run("etcd on a worker is refused", func(t *testing.T) {
		_, err := cli.EtcdStatus(client.WithNode(ctx, nodeIP(t, c, "worker-1")))
		if status.Code(err) != codes.Unimplemented {
			t.Fatalf("got %v, want Unimplemented", err)
		}
	})

	t.Run("member list and alarms", func(t *testing.T) {
		ml, err := cli.EtcdMemberList(client.WithNode(ctx, nodeIP(t, c, "cp-2")), &machineapi.EtcdMemberListRequest{})
		if err != nil || len(ml.Messages[0].Members) != 3 {
			t.Fatalf("member list: %v %v", ml, err)
		}

		al, err := cli.EtcdAlarmList(client.WithNodes(ctx, ips(c, sim.RoleControlPlane)...))
		if err != nil || len(al.Messages) != 3 || len(al.Messages[0].MemberAlarms) != 0 {
			t.Fatalf("alarms: %v %v", al, err)
		}
	})

	t.Run("snapshot is a valid etcd snapshot", func(t *testing.T) {
		ecli, err := c.Etcd().Client(ctx)
		if err != nil {
			t.Fatal(err)
		}

		defer ecli.Close() //nolint:errcheck

		if _, err = ecli.Put(ctx, "/talosbot/probe", "1"); err != nil {
			t.Fatal(err)
		}

		r, err := cli.EtcdSnapshot(client.WithNode(ctx, nodeIP(t, c, "cp-1")), &machineapi.EtcdSnapshotRequest{})
		if err != nil {
			t.Fatal(err)
		}

		data, err := io.ReadAll(r)
		if err != nil {
			t.Fatal(err)
		}

		if len(data)%512 != sha256.Size {
			t.Fatalf("snapshot size %d %% 512 = %d, want 32", len(data), len(data)%512)
		}

		sum := sha256.Sum256(data[:len(data)-sha256.Size])
		if !bytes.Equal(sum[:], data[len(data)-sha256.Size:]) {
			t.Fatal("sha256 trailer does not verify")
		}

		path := filepath.Join(t.TempDir(), "snap.db")
		if err := os.WriteFile(path, data, 0o600); err != nil {
			t.Fatal(err)
		}

		st, err := snapshot.NewV3(zap.NewNop()).Status(path)
		if err != nil {
			t.Fatalf("etcdutl status: %v", err)
		}

		if st.TotalKey == 0 || st.Revision == 0 {
			t.Fatalf("snapshot misses the key written before it: %+v", st)
		}
	})

	t.Run("read config", func(t *testing.T) {
		b := machineConfig(ctx, t, cli, nodeIP(t, c, "worker-2"))

		cfg, err := configloader.NewFromBytes(b)
		if err != nil {
			t.Fatalf("config does not load: %v\n%s", err, b)
		}

		if cfg.Machine().Type().String() != "worker" || !strings.HasSuffix(cfg.Machine().Install().Image(), ":"+sim.DefaultTalosVersion) {
			t.Fatalf("type %s install %s", cfg.Machine().Type(), cfg.Machine().Install().Image())
		}
	})

	t.Run("kubeconfig", func(t *testing.T) {
		kc, err := cli.Kubeconfig(client.WithNode(ctx, nodeIP(t, c, "cp-1")))
		if err != nil || !bytes.Contains(kc, []byte("kind: Config")) {
			t.Fatalf("kubeconfig: %q %v", kc, err)
		}
	})

	t.Run("health check passes", func(t *testing.T) {
		hctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		defer cancel()

		stream, err := cli.ClusterHealthCheck(hctx, 20*time.Second, &clusterapi.ClusterInfo{
			ControlPlaneNodes: ips(c, sim.RoleControlPlane),
			WorkerNodes:       ips(c, sim.RoleWorker),
		})
		if err != nil {
			t.Fatal(err)
		}

		var msgs []string

		for {
			p, err := stream.Recv()
			if errors.Is(err, io.EOF) {
				break
			}

			if err != nil {
				t.Fatalf("health check: %v (progress %q)", err, msgs)
			}

			msgs = append(msgs, p.Message)
		}

		// Without a Kubernetes side the sim runs Talos's Kubernetes checks as SKIP, never
		// silently leaves them out (sim/health.go skippedKubernetesChecks).
		if len(msgs) == 0 || !slices.Contains(msgs, "waiting for all nodes to finish boot sequence: OK") ||
			msgs[len(msgs)-1] != "waiting for all k8s nodes to report schedulable: SKIP" ||
			!slices.Contains(msgs, "waiting for all k8s nodes to report: SKIP") {
			t.Fatalf("progress %q", msgs)
		}
	})

	t.Run("lifecycle service is absent before v1.13", func(t *testing.T) {
		stream, err := cli.LifecycleClient.Upgrade(client.WithNode(ctx, nodeIP(t, c, "worker-1")), &machineapi.LifecycleServiceUpgradeRequest{
			Source: &machineapi.InstallArtifactsSource{ImageName: upgradeImage},
		})
		if err == nil {
			_, err = stream.Recv()
		}

		if status.Code(err) != codes.Unimplemented {
			t.Fatalf("got %v, want Unimplemented", err)
		}
	})

	t.Run("one-to-many is refused for ImageService", func(t *testing.T) {
		stream, err := cli.ImageClient.Pull(client.WithNodes(ctx, ips(c, "")...), &machineapi.ImageServicePullRequest{ImageRef: upgradeImage})
		if err == nil {
			_, err = stream.Recv()
		}

		if status.Code(err) != codes.InvalidArgument {
			t.Fatalf("got %v, want InvalidArgument", err)
		}
	})

	if n := c.Calls("cp-1", "EtcdSnapshot"); n != 1 {
		t.Errorf("cp-1 EtcdSnapshot calls = %d, want 1", n)
	}
}

func TestUnreachableNode(t *testing.T) {
	t.Parallel()
	slow(t)
	c, cli := startSim(t, sim.Options{ControlPlanes: 1, Workers: 2})
	ctx := t.Context()

	if err := c.Inject(ctx, "worker-1", sim.Fault{Unreachable: true}); err != nil {
		t.Fatal(err)
	}

	w1 := nodeIP(t, c, "worker-1")

	// Like a machine that is off: the call waits for the dial until the caller's deadline.
	start := time.Now()
	sctx, cancel := context.WithTimeout(ctx, 1500*time.Millisecond)
	_, err := cli.Version(client.WithNode(sctx, w1))
	cancel()

	if status.Code(err) != codes.DeadlineExceeded || time.Since(start) < 1400*time.Millisecond {
		t.Fatalf("single target: got %v after %s, want DeadlineExceeded at the deadline", err, time.Since(start))
	}

	// One-to-many waits for every target, so the caller's deadline ends the whole call.
	mctx, cancel := context.WithTimeout(ctx, 1500*time.Millisecond)
	_, err = cli.Version(client.WithNodes(mctx, ips(c, "")...))
	cancel()

	if status.Code(err) != codes.DeadlineExceeded {
		t.Fatalf("one-to-many: got %v, want DeadlineExceeded", err)
	}

	if c.Calls("worker-1", "Version") != 0 {
		t.Fatal("an unreachable node counted a call")
	}

	if err := c.Clear(ctx, "worker-1"); err != nil {
		t.Fatal(err)
	}

	eventually(t, 10*time.Second, "worker-1 reachable again", func() error {
		_, err := version(ctx, cli, w1)

		return err
	})
}

// watchEvents collects a node's events until the stream breaks (the node reboots).
func watchEvents(ctx context.Context, t *testing.T, cli *client.Client, ip string) <-chan client.EventResult {
	t.Helper()

	ch := make(chan client.EventResult, 256)
	if err := cli.EventsWatchV2(client.WithNode(ctx, ip), ch); err != nil {
		t.Fatalf("watch events: %v", err)
	}

	return ch
}

func TestUpgradeRollback(t *testing.T) {
	t.Parallel()
	slow(t)
	c, cli := startSim(t, sim.Options{ControlPlanes: 3, Workers: 0, RebootDelay: 300 * time.Millisecond})
	ctx := t.Context()
	ip := nodeIP(t, c, "cp-2")

	before := bootID(ctx, t, cli, ip)
	events := watchEvents(ctx, t, cli, ip)

	resp, err := cli.Upgrade(client.WithNode(ctx, ip), upgradeImage, false, false)
	if err != nil {
		t.Fatalf("upgrade: %v", err)
	}

	actor := resp.Messages[0].ActorId

	var seq []string

	func() {
		for ev := range events {
			if ev.Error != nil {
				return // the node went down
			}

			switch p := ev.Event.Payload.(type) {
			case *machineapi.SequenceEvent:
				if ev.Event.ActorID != actor {
					t.Errorf("sequence event actor %q, want %q", ev.Event.ActorID, actor)
				}

				seq = append(seq, p.Sequence+":"+p.Action.String())
			case *machineapi.MachineStatusEvent:
				seq = append(seq, "stage:"+p.Stage.String())
			}
		}
	}()

	// The sequence runs up to the reboot task; machined exits on its RestartEvent, so no STOP.
	want := []string{"upgrade:START", "stage:UPGRADING"}
	if strings.Join(seq, ",") != strings.Join(want, ",") {
		t.Fatalf("events before reboot %v, want %v", seq, want)
	}

	eventually(t, 30*time.Second, "cp-2 runs v1.13.9", func() error {
		v, err := version(ctx, cli, ip)
		if err == nil && v != "v1.13.9" {
			err = errors.New("still " + v)
		}

		return err
	})

	// An endpoint connection that was refused during the reboot waits out its backoff: retry.
	var after string

	eventually(t, 30*time.Second, "cp-2's new boot id", func() error {
		r, err := cli.Read(client.WithNode(ctx, ip), "/proc/sys/kernel/random/boot_id")
		if err != nil {
			return err
		}

		b, err := io.ReadAll(r)
		after = strings.TrimSpace(string(b))

		return err
	})

	if after == before {
		t.Fatal("boot id did not change")
	}

	// The boot sequence is in the new boot's history. The node may still be
	// booting (and refusing connections) right after its new boot id shows.
	eventually(t, 30*time.Second, "the new boot's running stage in the event history", func() error {
		hist, err := cli.Events(client.WithNode(ctx, ip), client.WithTailEvents(-1))
		if err != nil {
			return err
		}

		for {
			e, err := hist.Recv()
			if err != nil {
				return fmt.Errorf("history: %w", err)
			}

			ev, err := client.UnmarshalEvent(e)
			if err != nil {
				continue
			}

			if ms, ok := ev.Payload.(*machineapi.MachineStatusEvent); ok && ms.Stage == machineapi.MachineStatusEvent_RUNNING && ms.Status.Ready {
				return nil
			}
		}
	})

	if n := c.Calls("cp-2", "/machine.MachineService/Upgrade"); n != 1 {
		t.Fatalf("upgrade calls %d, want 1", n)
	}

	eventually(t, 30*time.Second, "etcd has 3 running members again", func() error {
		resp, err := cli.EtcdStatus(client.WithNodes(ctx, ips(c, sim.RoleControlPlane)...))
		if err == nil && len(resp.Messages) != 3 {
			err = errors.New("not 3 replies")
		}

		return err
	})

	if err := cli.Rollback(client.WithNode(ctx, ip)); err != nil {
		t.Fatalf("rollback: %v", err)
	}

	eventually(t, 30*time.Second, "cp-2 back on v1.12.6", func() error {
		v, err := version(ctx, cli, ip)
		if err == nil && v != sim.DefaultTalosVersion {
			err = errors.New("still " + v)
		}

		return err
	})

	if bootID(ctx, t, cli, ip) == after {
		t.Fatal("rollback did not reboot")
	}
}

func TestUpgradeEtcdSafetyAndReset(t *testing.T) {
	t.Parallel()
	slow(t)
	c, cli := startSim(t, sim.Options{ControlPlanes: 3, Workers: 1, RebootDelay: 200 * time.Millisecond})
	ctx := t.Context()
	cp1, cp3 := nodeIP(t, c, "cp-1"), nodeIP(t, c, "cp-3")

	ml, err := cli.EtcdMemberList(client.WithNode(ctx, cp1), &machineapi.EtcdMemberListRequest{})
	if err != nil {
		t.Fatal(err)
	}

	var cp3ID uint64

	for _, m := range ml.Messages[0].Members {
		if m.Hostname == "cp-3" {
			cp3ID = m.Id
		}
	}

	if err := c.Inject(ctx, "cp-3", sim.Fault{EtcdStopped: true}); err != nil {
		t.Fatal(err)
	}

	_, err = cli.Upgrade(client.WithNode(ctx, cp1), upgradeImage, false, false)
	if err == nil || !strings.Contains(err.Error(), "all members must be healthy to perform an upgrade") {
		t.Fatalf("upgrade with a stopped member: %v", err)
	}

	if err := c.Clear(ctx, "cp-3"); err != nil {
		t.Fatal(err)
	}

	if err := cli.Reset(client.WithNode(ctx, cp3), true, false); err != nil {
		t.Fatalf("reset: %v", err)
	}

	eventually(t, 40*time.Second, "cp-3 left etcd", func() error {
		ml, err := cli.EtcdMemberList(client.WithNode(ctx, cp1), &machineapi.EtcdMemberListRequest{})
		if err != nil {
			return err
		}

		for _, m := range ml.Messages[0].Members {
			if m.Id == cp3ID {
				return errors.New("cp-3 still a member")
			}
		}

		if len(ml.Messages[0].Members) != 2 {
			return errors.New("not 2 members")
		}

		return nil
	})

	eventually(t, 10*time.Second, "cp-3 down after reset", func() error {
		vctx, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
		defer cancel()

		_, err := version(vctx, cli, cp3)
		if status.Code(err) != codes.DeadlineExceeded {
			return fmt.Errorf("still answers (%v)", err)
		}

		return nil
	})

	_, err = cli.Upgrade(client.WithNode(ctx, cp1), upgradeImage, false, false)
	if err == nil || !strings.Contains(err.Error(), "etcd member count(2) is insufficient to maintain quorum") {
		t.Fatalf("upgrade at 2 members: %v", err)
	}

	if n := c.Calls("cp-1", "Upgrade"); n != 2 {
		t.Fatalf("cp-1 upgrade calls %d, want 2", n)
	}

	// Forced, it goes ahead.
	if _, err = cli.Upgrade(client.WithNode(ctx, cp1), upgradeImage, false, true); err != nil {
		t.Fatalf("forced upgrade: %v", err)
	}
}

func TestLifecycleUpgradeV113(t *testing.T) {
	t.Parallel()
	slow(t)
	c, cli := startSim(t, sim.Options{ControlPlanes: 1, Workers: 1, TalosVersion: "v1.13.0", RebootDelay: 100 * time.Millisecond})
	ctx := t.Context()
	ip := nodeIP(t, c, "worker-1")
	nctx := client.WithNode(ctx, ip)

	if err := c.Inject(ctx, "worker-1", sim.Fault{ImagePullFailure: true}); err != nil {
		t.Fatal(err)
	}

	pull, err := cli.ImageClient.Pull(nctx, &machineapi.ImageServicePullRequest{ImageRef: upgradeImage, Containerd: systemNS})
	if err == nil {
		_, err = pull.Recv()
	}

	if err == nil || !strings.Contains(err.Error(), "error pulling image") {
		t.Fatalf("pull with fault: %v", err)
	}

	if err := c.Clear(ctx, "worker-1"); err != nil {
		t.Fatal(err)
	}

	pull, err = cli.ImageClient.Pull(nctx, &machineapi.ImageServicePullRequest{ImageRef: upgradeImage, Containerd: systemNS})
	if err != nil {
		t.Fatal(err)
	}

	for {
		_, err := pull.Recv()
		if errors.Is(err, io.EOF) {
			break
		}

		if err != nil {
			t.Fatal(err)
		}
	}

	up, err := cli.LifecycleClient.Upgrade(nctx, &machineapi.LifecycleServiceUpgradeRequest{
		Source:     &machineapi.InstallArtifactsSource{ImageName: upgradeImage},
		Containerd: systemNS,
	})
	if err != nil {
		t.Fatal(err)
	}

	exit := int32(-1)

	for {
		p, err := up.Recv()
		if errors.Is(err, io.EOF) {
			break
		}

		if err != nil {
			t.Fatal(err)
		}

		if e, ok := p.Progress.Response.(*machineapi.LifecycleServiceInstallProgress_ExitCode); ok {
			exit = e.ExitCode
		}
	}

	if exit != 0 {
		t.Fatalf("exit code %d", exit)
	}

	if v, _ := version(ctx, cli, ip); v != "v1.13.0" {
		t.Fatalf("version switched before the reboot: %s", v)
	}

	if err := cli.Reboot(nctx); err != nil {
		t.Fatal(err)
	}

	eventually(t, 20*time.Second, "worker-1 on v1.13.9", func() error {
		v, err := version(ctx, cli, ip)
		if err == nil && v != "v1.13.9" {
			err = errors.New("still " + v)
		}

		return err
	})
}

func TestApplyConfigurationNoReboot(t *testing.T) {
	t.Parallel()
	c, cli := startSim(t, sim.Options{ControlPlanes: 1})
	ctx := client.WithNode(t.Context(), c.Nodes()[0].IP)

	cfg := machineConfig(ctx, t, cli, c.Nodes()[0].IP)

	newCfg := bytes.ReplaceAll(cfg, []byte(":"+sim.DefaultKubernetesVersion), []byte(":v1.36.0"))

	if _, err := cli.ApplyConfiguration(ctx, &machineapi.ApplyConfigurationRequest{Data: newCfg, Mode: machineapi.ApplyConfigurationRequest_REBOOT}); status.Code(err) != codes.Unimplemented {
		t.Fatalf("REBOOT mode: %v", err)
	}

	if _, err := cli.ApplyConfiguration(ctx, &machineapi.ApplyConfigurationRequest{Data: newCfg, Mode: machineapi.ApplyConfigurationRequest_NO_REBOOT}); err != nil {
		t.Fatal(err)
	}

	got := machineConfig(ctx, t, cli, c.Nodes()[0].IP)
	if !bytes.Contains(got, []byte("kube-apiserver:v1.36.0")) {
		t.Fatalf("stored config:\n%s", got)
	}
}

func TestControlAPIFaults(t *testing.T) {
	t.Parallel()
	slow(t)
	c, cli := startSim(t, sim.Options{ControlPlanes: 3, Workers: 1, RebootDelay: 100 * time.Millisecond})
	ctx := t.Context()
	cp1, w1 := nodeIP(t, c, "cp-1"), nodeIP(t, c, "worker-1")

	addr, err := c.ServeControl("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}

	if _, err := c.ServeControl("0.0.0.0:0"); err == nil {
		t.Fatal("control API accepted a non-loopback address")
	}

	post := func(body string) {
		t.Helper()

		resp, err := http.Post("http://"+addr+"/faults", "application/json", strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}

		defer resp.Body.Close() //nolint:errcheck

		if resp.StatusCode != http.StatusOK {
			b, _ := io.ReadAll(resp.Body)
			t.Fatalf("POST /faults %s: %d %s", body, resp.StatusCode, b)
		}
	}

	del := func(query string) {
		t.Helper()

		req, _ := http.NewRequestWithContext(ctx, http.MethodDelete, "http://"+addr+"/faults"+query, nil)

		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}

		_ = resp.Body.Close()

		if resp.StatusCode != http.StatusOK {
			t.Fatalf("DELETE /faults%s: %d", query, resp.StatusCode)
		}
	}

	// Latency: the call cannot finish before the injected delay.
	post(`{"node":"worker-1","fault":{"latency":"300ms","unhealthyService":"kubelet"}}`)

	start := time.Now()
	if _, err := version(ctx, cli, w1); err != nil {
		t.Fatal(err)
	}

	if d := time.Since(start); d < 300*time.Millisecond {
		t.Fatalf("call took %s despite 300ms latency", d)
	}

	svc, err := cli.ServiceInfo(client.WithNode(ctx, w1), "kubelet")
	if err != nil || len(svc) != 1 || svc[0].Service.Health.Healthy {
		t.Fatalf("kubelet should be unhealthy: %v %v", svc, err)
	}

	del("?node=worker-1")

	// No etcd leader: cp-1's member keeps running but loses its leader; health check fails.
	post(`{"node":"cp-1","fault":{"noEtcdLeader":true}}`)

	eventually(t, 20*time.Second, "cp-1 reports no leader", func() error {
		resp, err := cli.EtcdStatus(client.WithNode(ctx, cp1))
		if err != nil {
			return nil //nolint:nilerr // an error is also "no leader"
		}

		if resp.Messages[0].MemberStatus.Leader != 0 {
			return errors.New("still has a leader")
		}

		return nil
	})

	hctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()

	stream, err := cli.ClusterHealthCheck(hctx, time.Second, &clusterapi.ClusterInfo{})

	var lastMsg string

	if err == nil {
		for err == nil {
			var p *clusterapi.HealthCheckProgress

			if p, err = stream.Recv(); err == nil {
				lastMsg = p.GetMessage()
			}
		}
	}

	if status.Code(err) != codes.DeadlineExceeded || !strings.Contains(lastMsg, "waiting for etcd to be healthy: ") {
		t.Fatalf("health check with no leader: %v (last progress %q)", err, lastMsg)
	}

	del("")

	eventually(t, 30*time.Second, "etcd leader back on all control planes", func() error {
		resp, err := cli.EtcdStatus(client.WithNodes(ctx, ips(c, sim.RoleControlPlane)...))
		if err != nil {
			return err
		}

		for _, m := range resp.Messages {
			if m.MemberStatus.Leader == 0 {
				return errors.New("no leader yet")
			}
		}

		return nil
	})

	// Never return: a rebooted node stays down until the fault is cleared.
	post(`{"node":"worker-1","fault":{"neverReturn":true}}`)

	if err := cli.Reboot(client.WithNode(ctx, w1)); err != nil {
		t.Fatal(err)
	}

	eventually(t, 10*time.Second, "worker-1 down", func() error {
		vctx, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
		defer cancel()

		// Refused while it rebooted, then unanswered: the proxying apid fails fast with the
		// last dial error while its connection stays in TRANSIENT_FAILURE, or the call waits.
		if _, err := version(vctx, cli, w1); status.Code(err) != codes.DeadlineExceeded && status.Code(err) != codes.Unavailable {
			return fmt.Errorf("still up (%v)", err)
		}

		return nil
	})

	del("?node=worker-1")

	eventually(t, 10*time.Second, "worker-1 back", func() error {
		_, err := version(ctx, cli, w1)

		return err
	})

	resp, err := http.Get("http://" + addr + "/calls")
	if err != nil {
		t.Fatal(err)
	}

	defer resp.Body.Close() //nolint:errcheck

	var calls map[string]map[string]int
	if err := json.NewDecoder(resp.Body).Decode(&calls); err != nil {
		t.Fatal(err)
	}

	if calls["worker-1"]["/machine.MachineService/Reboot"] != 1 {
		t.Fatalf("calls: %v", calls["worker-1"])
	}
}

// BenchmarkStart measures starting and closing a 3 control plane + 2 worker sim.
func BenchmarkStart(b *testing.B) {
	for b.Loop() {
		c, err := sim.Start(b.Context(), sim.Options{Dir: b.TempDir(), ControlPlanes: 3, Workers: 2})
		if err != nil {
			b.Fatal(err)
		}

		if err := c.Close(); err != nil {
			b.Fatal(err)
		}
	}
}

// NoEtcdLeader is in place when Inject returns: the surviving member already
// knows it has no leader (raft steps it down only after its election
// timeout, and a gate read in between once saw the old leader).
func TestNoEtcdLeaderHoldsWhenInjectReturns(t *testing.T) {
	t.Parallel()
	slow(t)
	c, _ := startSim(t, sim.Options{ControlPlanes: 3})
	ctx := t.Context()

	var member string

	for _, n := range c.Nodes() {
		if n.Name == "cp-1" {
			member = n.EtcdMember
		}
	}

	m := c.Etcd().Member(member)
	if m == nil || !m.KnowsLeader() {
		t.Fatalf("member %q of cp-1 should follow a leader before the fault", member)
	}

	if err := c.Inject(ctx, "cp-1", sim.Fault{NoEtcdLeader: true}); err != nil {
		t.Fatal(err)
	}

	if m.KnowsLeader() {
		t.Fatal("cp-1's member still follows a leader when Inject returned")
	}

	if err := m.Healthy(ctx); err == nil || !strings.Contains(err.Error(), "no leader") {
		t.Fatalf("health of cp-1's member = %v, want no leader", err)
	}

	if err := c.Clear(ctx, "cp-1"); err != nil {
		t.Fatal(err)
	}

	eventually(t, 30*time.Second, "a leader again after Clear", func() error {
		if !m.KnowsLeader() {
			return errors.New("no leader yet")
		}

		return nil
	})
}
