package sim_test

import (
	"strings"
	"testing"
	"time"

	"github.com/talosbot/talosbot/sim"
)

// TestTalosctlImageFailures: the real talosctl v1.13.9 against the image failure modes, as real
// Talos answers it: an image no registry has, an installer whose pre-flight refuses the host
// (talosctl reports the exit code), an installer the image GC removed (gone from `image list`
// 75 minutes after the pull on the sim's clock), and a registry the node cannot reach (the pull
// waits, then fails with image.Pull's timeout).
func TestTalosctlImageFailures(t *testing.T) {
	t.Parallel()
	slow(t)
	bin := needTalosctl(t)
	clock := newTestClock()
	c, _ := startSim(t, sim.Options{ControlPlanes: 1, Workers: 1, TalosVersion: "v1.13.9", Now: clock.Now, RebootDelay: 50 * time.Millisecond})
	tc := newTalosctl(bin, c)
	worker := nodeIP(t, c, "worker-1")

	t.Run("unknown image", func(t *testing.T) {
		out, err := tc.run(t, "-n", worker, "upgrade", "--image", "docker.io/library/nginx:v1.2.3")
		if err == nil {
			t.Fatalf("upgrade to nginx succeeded:\n%s", out)
		}

		mustContain(t, "upgrade --image nginx", out, "error pulling upgrade image",
			`failed to pull image "docker.io/library/nginx:v1.2.3": docker.io/library/nginx:v1.2.3: not found`)

		if v := c.NodeVersion("worker-1"); v != "v1.13.9" {
			t.Fatalf("worker-1 runs %s", v)
		}
	})

	t.Run("pre-flight refuses a downgrade too far", func(t *testing.T) {
		out, err := tc.run(t, "-n", worker, "upgrade", "--image", "ghcr.io/siderolabs/installer:v1.9.0")
		if err == nil {
			t.Fatalf("downgrade to v1.9.0 succeeded:\n%s", out)
		}

		mustContain(t, "upgrade --image installer:v1.9.0", out, worker+": running pre-flight checks", worker+": host Talos version: v1.13.9",
			worker+": pre-flight checks failed: host version 1.13.9 is too new to downgrade to Talos 1.9.0",
			"error during upgrade: node "+worker+": upgrade failed with exit code 1")

		if v := c.NodeVersion("worker-1"); v != "v1.13.9" {
			t.Fatalf("worker-1 runs %s", v)
		}
	})

	t.Run("image GC", func(t *testing.T) {
		img := "ghcr.io/siderolabs/installer:v1.13.8"
		tc.mustRun(t, "-n", worker, "image", "pull", "--namespace", "system", img)
		mustContain(t, "image list", tc.mustRun(t, "-n", worker, "image", "list", "--namespace", "system"), img)

		clock.Add(90 * time.Minute)

		if out := tc.mustRun(t, "-n", worker, "image", "list", "--namespace", "system"); strings.Contains(out, img) {
			t.Fatalf("image list 90 minutes later still has %s:\n%s", img, out)
		}
	})

	t.Run("registry unreachable", func(t *testing.T) {
		if err := c.Inject(t.Context(), "worker-1", sim.Fault{RegistryUnreachable: true}); err != nil {
			t.Fatal(err)
		}

		type result struct {
			out string
			err error
		}

		done := make(chan result, 1)

		go func() {
			out, err := tc.run(t, "-n", worker, "image", "pull", "--namespace", "system", "ghcr.io/siderolabs/installer:v1.13.7")
			done <- result{out, err}
		}()

		var r result

		tick := time.NewTicker(50 * time.Millisecond)
		defer tick.Stop()

	wait:
		for {
			select {
			case r = <-done:
				break wait
			case <-tick.C:
				clock.Add(2 * time.Minute)
			}
		}

		if r.err == nil {
			t.Fatalf("pull with the registry unreachable succeeded:\n%s", r.out)
		}

		mustContain(t, "image pull, registry unreachable", r.out, "code = Unknown desc = 2 error(s) occurred:",
			`failed to pull image "ghcr.io/siderolabs/installer:v1.13.7": failed to resolve reference`, "dial tcp: lookup ghcr.io: i/o timeout", "\ttimeout")
	})
}
