package sim_test

import (
	"context"
	"errors"
	"io"
	"strings"
	"sync"
	"testing"
	"time"

	machineapi "github.com/siderolabs/talos/pkg/machinery/api/machine"
	"github.com/siderolabs/talos/pkg/machinery/client"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/talosbot/talosbot/sim"
)

// testClock is a clock a test moves by hand (sim.Options.Now).
type testClock struct {
	mu  sync.Mutex
	now time.Time
}

func newTestClock() *testClock { return &testClock{now: time.Now()} }

func (c *testClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()

	return c.now
}

func (c *testClock) Add(d time.Duration) {
	c.mu.Lock()
	c.now = c.now.Add(d)
	c.mu.Unlock()
}

func pull(ctx context.Context, cli *client.Client, ref string) error {
	stream, err := cli.ImageClient.Pull(ctx, &machineapi.ImageServicePullRequest{ImageRef: ref, Containerd: systemNS})
	if err != nil {
		return err
	}

	for {
		if _, err := stream.Recv(); errors.Is(err, io.EOF) {
			return nil
		} else if err != nil {
			return err
		}
	}
}

// install runs LifecycleService.Upgrade and returns the installer's lines and exit code.
func install(ctx context.Context, cli *client.Client, ref string) ([]string, int32, error) {
	stream, err := cli.LifecycleClient.Upgrade(ctx, &machineapi.LifecycleServiceUpgradeRequest{
		Containerd: systemNS, Source: &machineapi.InstallArtifactsSource{ImageName: ref}})
	if err != nil {
		return nil, -1, err
	}

	var lines []string

	exit := int32(-1)

	for {
		resp, err := stream.Recv()
		if errors.Is(err, io.EOF) {
			return lines, exit, nil
		}

		if err != nil {
			return lines, exit, err
		}

		switch r := resp.GetProgress().GetResponse().(type) {
		case *machineapi.LifecycleServiceInstallProgress_Message:
			lines = append(lines, r.Message)
		case *machineapi.LifecycleServiceInstallProgress_ExitCode:
			exit = r.ExitCode
		}
	}
}

// TestRegistryServesOnlyCataloguedImages: an image the registry does not have (not an installer,
// or an installer of a version never released) is NotFound at once, in the words containerd
// and Talos's ImageService.Pull use; a released installer pulls.
func TestRegistryServesOnlyCataloguedImages(t *testing.T) {
	t.Parallel()
	c, cli := startSim(t, sim.Options{ControlPlanes: 1, Workers: 1, TalosVersion: "v1.13.9"})
	nctx := client.WithNode(t.Context(), nodeIP(t, c, "worker-1"))

	for ref, want := range map[string]string{
		"docker.io/library/nginx:v1.2.3":       `error pulling image: failed to pull image "docker.io/library/nginx:v1.2.3": docker.io/library/nginx:v1.2.3: not found`,
		"nginx:v1.2.3":                         `error pulling image: failed to pull image "docker.io/library/nginx:v1.2.3": docker.io/library/nginx:v1.2.3: not found`,
		"ghcr.io/siderolabs/installer:v1.99.0": `error pulling image: failed to pull image "ghcr.io/siderolabs/installer:v1.99.0": ghcr.io/siderolabs/installer:v1.99.0: not found`,
		// v1.14 publishes only Image Factory installers (hack/release.toml notes.defaultInstaller).
		"ghcr.io/siderolabs/installer:v1.14.1":                `error pulling image: failed to pull image "ghcr.io/siderolabs/installer:v1.14.1": ghcr.io/siderolabs/installer:v1.14.1: not found`,
		"factory.talos.dev/nocloud-installer/abc123:v1.13.99": `factory.talos.dev/nocloud-installer/abc123:v1.13.99: not found`,
	} {
		err := pull(nctx, cli, ref)
		if status.Code(err) != codes.NotFound || !strings.Contains(status.Convert(err).Message(), want) {
			t.Fatalf("pull %s: %v, want NotFound %q", ref, err, want)
		}
	}

	for _, ref := range []string{upgradeImage, installerFor("v1.14.1"), "ghcr.io/siderolabs/installer:v1.13.9", "ghcr.io/siderolabs/installer:v1.12.6", "registry.k8s.io/kube-apiserver:v1.36.3"} {
		if err := pull(nctx, cli, ref); err != nil {
			t.Fatalf("pull %s: %v", ref, err)
		}
	}
}

// TestInstallerPreflightRefusesDowngradeTooFar: the installer's pre-flight refuses a host its
// version cannot upgrade (machinery's compatibility table): it prints why and exits 1; the
// RPC itself succeeds, and the node keeps booting its version.
func TestInstallerPreflightRefusesDowngradeTooFar(t *testing.T) {
	t.Parallel()
	c, cli := startSim(t, sim.Options{ControlPlanes: 1, Workers: 1, TalosVersion: "v1.13.9", RebootDelay: 50 * time.Millisecond})
	ctx := t.Context()
	nctx := client.WithNode(ctx, nodeIP(t, c, "worker-1"))
	old := "ghcr.io/siderolabs/installer:v1.9.0"

	if err := pull(nctx, cli, old); err != nil {
		t.Fatal(err)
	}

	lines, exit, err := install(nctx, cli, old)
	if err != nil || exit != 1 {
		t.Fatalf("install %s: exit %d, %v (%v), want exit code 1", old, exit, err, lines)
	}

	if got := strings.Join(lines, "\n"); !strings.Contains(got, "pre-flight checks failed: host version 1.13.9 is too new to downgrade to Talos 1.9.0") ||
		!strings.Contains(got, "host Talos version: v1.13.9") || strings.Contains(got, "writing boot entry") {
		t.Fatalf("installer output:\n%s", got)
	}

	// Nothing was installed: a reboot comes back on v1.13.9.
	ip := nodeIP(t, c, "worker-1")
	before := bootID(ctx, t, cli, ip)

	if _, err := cli.MachineClient.Reboot(nctx, &machineapi.RebootRequest{}); err != nil {
		t.Fatal(err)
	}

	eventually(t, 30*time.Second, "worker-1 rebooted", func() error {
		if bootID(ctx, t, cli, ip) == before {
			return errors.New("not rebooted yet")
		}

		return nil
	})

	if v := c.NodeVersion("worker-1"); v != "v1.13.9" {
		t.Fatalf("after a refused install and a reboot worker-1 runs %s", v)
	}

	// An installer of a version the compatibility table does not know refuses too.
	if _, err := c.PublishImage("ghcr.io/siderolabs/installer:next", "v1.15.0"); err != nil {
		t.Fatal(err)
	}

	if err := pull(nctx, cli, "ghcr.io/siderolabs/installer:next"); err != nil {
		t.Fatal(err)
	}

	if lines, exit, err = install(nctx, cli, "ghcr.io/siderolabs/installer:next"); err != nil || exit != 1 ||
		!strings.Contains(strings.Join(lines, "\n"), "pre-flight checks failed: upgrades to version 1.15.0 are not supported") {
		t.Fatalf("install of an unknown version: exit %d, %v:\n%s", exit, err, strings.Join(lines, "\n"))
	}

	// An adjacent minor passes the same check.
	next := installerFor("v1.14.1") // v1.14 installers come from Image Factory only
	if err := pull(nctx, cli, next); err != nil {
		t.Fatal(err)
	}

	if lines, exit, err = install(nctx, cli, next); err != nil || exit != 0 || !strings.Contains(strings.Join(lines, "\n"), "all pre-flight checks successful") {
		t.Fatalf("install %s: exit %d, %v:\n%s", next, exit, err, strings.Join(lines, "\n"))
	}
}

// TestImageGCRemovesAnIdleInstaller: Talos's image GC ticks every 15 minutes from the boot and
// removes an image nothing uses 60 minutes after it first saw it, so an installer pulled and
// left alone is installable an hour later and gone by 75 minutes: LifecycleService.Upgrade then
// fails as Talos's does, and a pull brings it back.
func TestImageGCRemovesAnIdleInstaller(t *testing.T) {
	t.Parallel()
	clock := newTestClock()
	c, cli := startSim(t, sim.Options{ControlPlanes: 1, Workers: 1, TalosVersion: "v1.13.0", Now: clock.Now})
	nctx := client.WithNode(t.Context(), nodeIP(t, c, "worker-1"))

	clock.Add(time.Minute) // pulled one minute after the boot: first seen by the GC at 15 minutes
	if err := pull(nctx, cli, upgradeImage); err != nil {
		t.Fatal(err)
	}

	clock.Add(73 * time.Minute) // boot + 74 minutes: the tick at 75 has not come
	if _, exit, err := install(nctx, cli, upgradeImage); err != nil || exit != 0 {
		t.Fatalf("install 73 minutes after the pull: exit %d, %v", exit, err)
	}

	if names := listImages(t, nctx, cli); !strings.Contains(names, upgradeImage) {
		t.Fatalf("image list lacks the installer before the GC:\n%s", names)
	}

	clock.Add(time.Minute) // boot + 75 minutes: deleted
	_, _, err := install(nctx, cli, upgradeImage)
	want := `upgrade failed: installer image "` + upgradeImage + `" not found in containerd store`

	if status.Code(err) != codes.Internal || !strings.Contains(err.Error(), want) {
		t.Fatalf("install after the GC: %v, want Internal %q", err, want)
	}

	if names := listImages(t, nctx, cli); strings.Contains(names, "nocloud-installer") {
		t.Fatalf("image list still has the installer after the GC:\n%s", names)
	}

	if err := pull(nctx, cli, upgradeImage); err != nil {
		t.Fatal(err)
	}

	if _, exit, err := install(nctx, cli, upgradeImage); err != nil || exit != 0 {
		t.Fatalf("install after pulling again: exit %d, %v", exit, err)
	}
}

func listImages(t *testing.T, ctx context.Context, cli *client.Client) string {
	t.Helper()

	stream, err := cli.ImageClient.List(ctx, &machineapi.ImageServiceListRequest{Containerd: systemNS})
	if err != nil {
		t.Fatal(err)
	}

	var names []string

	for {
		it, err := stream.Recv()
		if errors.Is(err, io.EOF) {
			return strings.Join(names, "\n")
		}

		if err != nil {
			t.Fatal(err)
		}

		names = append(names, it.GetName())
	}
}

// TestRegistryUnreachablePullRetries: with the registry unreachable a pull neither fails nor
// succeeds at once: it waits, sending nothing, until the caller gives up, the fault clears
// (then it pulls), or 20 minutes pass on the sim's clock (then it fails as image.Pull's retry
// gives up). An image the node already has does not need the registry.
func TestRegistryUnreachablePullRetries(t *testing.T) {
	t.Parallel()
	clock := newTestClock()
	c, cli := startSim(t, sim.Options{ControlPlanes: 1, Workers: 1, TalosVersion: "v1.13.0", Now: clock.Now})
	ctx := t.Context()
	nctx := client.WithNode(ctx, nodeIP(t, c, "worker-1"))
	have := "ghcr.io/siderolabs/installer:v1.13.0"

	if err := pull(nctx, cli, have); err != nil {
		t.Fatal(err)
	}

	if err := c.Inject(ctx, "worker-1", sim.Fault{RegistryUnreachable: true}); err != nil {
		t.Fatal(err)
	}

	if err := pull(nctx, cli, have); err != nil {
		t.Fatalf("pull of an image the node has: %v", err)
	}

	// The caller's deadline ends the wait: neither the pull's success nor its failure came first.
	short, cancel := context.WithTimeout(nctx, 300*time.Millisecond)
	err := pull(short, cli, upgradeImage)

	cancel()

	if status.Code(err) != codes.DeadlineExceeded {
		t.Fatalf("pull with the registry unreachable, caller gives up first: %v, want DeadlineExceeded", err)
	}

	// 20 minutes on the sim's clock: go-retry's error set, the attempt's error and "timeout".
	done := make(chan error, 1)

	go func() { done <- pull(nctx, cli, upgradeImage) }()

	err = waitPull(t, done, func() { clock.Add(5 * time.Minute) })
	for _, want := range []string{`failed to pull image "` + upgradeImage + `": failed to resolve reference`,
		"https://factory.talos.dev/v2/nocloud-installer/abc123/manifests/v1.13.9", "dial tcp: lookup factory.talos.dev: i/o timeout", "\ttimeout"} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Fatalf("pull after 20 minutes: %v, want %q", err, want)
		}
	}

	// Cleared while a pull waits: the pull goes on and succeeds.
	go func() { done <- pull(nctx, cli, upgradeImage) }()

	cleared := false

	if err := waitPull(t, done, func() {
		if !cleared && c.Calls("worker-1", "/machine.ImageService/Pull") == 5 {
			cleared = true

			_ = c.Clear(ctx, "worker-1")
		}
	}); err != nil {
		t.Fatalf("pull once the registry is back: %v", err)
	}
}

// waitPull calls step until the pull in flight ends, and returns its error.
func waitPull(t *testing.T, done chan error, step func()) error {
	t.Helper()

	deadline := time.After(30 * time.Second)
	tick := time.NewTicker(20 * time.Millisecond)

	defer tick.Stop()

	for {
		select {
		case err := <-done:
			return err
		case <-deadline:
			t.Fatal("the pull did not end")
		case <-tick.C:
			step()
		}
	}
}
