package conformance

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/talosbot/talosbot/internal/testenv"
	"github.com/talosbot/talosbot/sim"
)

// EnvTalosctl names the talosctl v1.13.9 binary the suite runs against v1.12 and v1.13 nodes.
const EnvTalosctl = "TALOSBOT_TALOSCTL"

// EnvTalosctlV114 names the talosctl v1.14.1 binary the suite runs against v1.14 nodes.
const EnvTalosctlV114 = "TALOSBOT_TALOSCTL_V114"

// clientOf is, per variable, the talosctl release it must name and where .ci/run finds it.
var clientOf = map[string]struct{ release, file string }{
	EnvTalosctl:     {"v1.13.9", "talosctl"},
	EnvTalosctlV114: {"v1.14.1", "talosctl-v1.14.1"},
}

// cmdTimeout bounds one talosctl run; the machine running the suite may be loaded.
const cmdTimeout = 4 * time.Minute

// talosctlPathFor returns the binary the variable env names or skips the test, saying how to
// set it.
func talosctlPathFor(t *testing.T, env string) string {
	t.Helper()

	c := clientOf[env]

	p := os.Getenv(env)
	if p == "" {
		t.Skipf("skipping: %s is unset; point it at a talosctl %s binary, e.g. "+
			"export %s=\"$(cd ../shared/tools && pwd)/%s\" from the repository root (.ci/run does this; "+
			"../shared/tools/README.md says how that binary was built)", env, c.release, env, c.file)
	}

	if st, err := os.Stat(p); err != nil || st.IsDir() || st.Mode().Perm()&0o111 == 0 {
		t.Fatalf("%s=%s is not an executable file (%v): fix the variable or unset it", env, p, err)
	}

	return p
}

// cluster is one sim under test with the talosctl that talks to it.
type cluster struct {
	sim         *sim.Cluster
	kube        *testenv.Kube // nil without Kubernetes
	bin         string
	talosconfig string
	dir         string
}

// startCluster starts a sim (with a kube-apiserver on its etcd when withKube) for the suite.
func startCluster(t *testing.T, opts sim.Options, withKube bool) *cluster {
	t.Helper()

	return startClusterWith(t, EnvTalosctl, opts, withKube)
}

// startClusterWith is startCluster with the talosctl that the variable env names.
func startClusterWith(t *testing.T, env string, opts sim.Options, withKube bool) *cluster {
	t.Helper()

	cl := &cluster{bin: talosctlPathFor(t, env), dir: t.TempDir()}

	var startKube func(context.Context, []string) (*testenv.Kube, error)
	if withKube {
		startKube = testenv.KubeStarter(t)
		opts.StaticPods = true
		opts.BootstrapManifests = true // CoreDNS, flannel, kube-proxy and the rest, as Talos applies them
		opts.KubeOnEtcd = func(ctx context.Context, servers []string) (sim.KubeBackend, error) {
			k, err := startKube(ctx, servers)
			if err != nil {
				return sim.KubeBackend{}, err
			}

			cl.kube = k

			return sim.KubeBackend{Client: k.Client, Kubeconfig: k.Kubeconfig, Stop: k.Stop, Restart: k.Restart}, nil
		}
	}

	opts.Dir = filepath.Join(cl.dir, "sim")
	applyNames(&opts)

	ctx, cancel := context.WithTimeout(t.Context(), 4*time.Minute)
	defer cancel()

	c, err := sim.Start(ctx, opts)
	if err != nil {
		t.Fatalf("start sim: %v", err)
	}

	t.Cleanup(func() {
		if err := c.Close(); err != nil {
			t.Errorf("close sim: %v", err)
		}
	})

	cl.sim = c
	cl.talosconfig = filepath.Join(opts.Dir, "talosconfig") // 0600, removed with the temp dir

	return cl
}

// result is one talosctl run.
type result struct {
	args           []string
	stdout, stderr string
	err            error
}

func (r result) String() string {
	return fmt.Sprintf("talosctl %s\n--- stdout\n%s--- stderr\n%s--- err: %v", strings.Join(r.args, " "), r.stdout, r.stderr, r.err)
}

// combined is stdout then stderr.
func (r result) combined() string { return r.stdout + r.stderr }

// run runs talosctl with the cluster's talosconfig. It never fails the test itself.
func (cl *cluster) run(t *testing.T, args ...string) result {
	t.Helper()

	ctx, cancel := context.WithTimeout(t.Context(), cmdTimeout)
	defer cancel()

	full := append([]string{"--talosconfig", cl.talosconfig}, args...)
	cmd := exec.CommandContext(ctx, cl.bin, full...)
	cmd.Dir = cl.dir
	// talosctl must not pick up a user's own configuration.
	cmd.Env = append(os.Environ(), "TALOSCONFIG="+cl.talosconfig, "HOME="+cl.dir, "KUBECONFIG="+filepath.Join(cl.dir, "no-kubeconfig"))

	var stdout, stderr bytes.Buffer

	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()

	if ctx.Err() != nil {
		err = errors.Join(err, fmt.Errorf("talosctl did not finish within %s: %w", cmdTimeout, ctx.Err()))
	}

	r := result{args: args, stdout: stdout.String(), stderr: stderr.String(), err: err}
	t.Logf("talosctl %s (exit: %v)", strings.Join(args, " "), err)

	return r
}

// ok runs talosctl and fails the test unless it exits 0.
func (cl *cluster) ok(t *testing.T, args ...string) result {
	t.Helper()

	r := cl.run(t, args...)
	if r.err != nil {
		t.Fatalf("want success:\n%s", r)
	}

	return r
}

// fails runs talosctl and fails the test if it exits 0.
func (cl *cluster) fails(t *testing.T, args ...string) result {
	t.Helper()

	r := cl.run(t, args...)
	if r.err == nil {
		t.Fatalf("want a failure:\n%s", r)
	}

	return r
}

// mustContain fails unless out contains every want.
func mustContain(t *testing.T, r result, out string, want ...string) {
	t.Helper()

	for _, w := range want {
		if !strings.Contains(out, w) {
			t.Fatalf("output lacks %q:\n%s", w, r)
		}
	}
}

// mustMatch fails unless out matches every pattern.
func mustMatch(t *testing.T, r result, out string, patterns ...string) {
	t.Helper()

	for _, p := range patterns {
		if !regexp.MustCompile(p).MatchString(out) {
			t.Fatalf("output does not match %q:\n%s", p, r)
		}
	}
}

func (cl *cluster) nodes(role string) []sim.NodeInfo {
	var out []sim.NodeInfo

	for _, n := range cl.sim.Nodes() {
		if role == "" || n.Role == role {
			out = append(out, n)
		}
	}

	return out
}

func ips(ns []sim.NodeInfo) []string {
	out := make([]string, len(ns))
	for i, n := range ns {
		out[i] = n.IP
	}

	return out
}

// eventually polls cond until it holds or the deadline passes (a condition, not a sleep).
func eventually(t *testing.T, within time.Duration, what string, cond func() error) {
	t.Helper()

	deadline := time.Now().Add(within)
	tick := time.NewTicker(100 * time.Millisecond)

	defer tick.Stop()

	for {
		err := cond()
		if err == nil {
			return
		}

		if time.Now().After(deadline) {
			t.Fatalf("%s: not within %s: %v", what, within, err)
		}

		select {
		case <-t.Context().Done():
			t.Fatalf("%s: %v", what, t.Context().Err())
		case <-tick.C:
		}
	}
}
