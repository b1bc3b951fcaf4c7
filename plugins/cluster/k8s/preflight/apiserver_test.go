package preflight

import (
	"context"
	"os/exec"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/talosbot/talosbot/internal/testenv"
)

// apiserverSays runs the real kube-apiserver with one argument and returns what it printed. It
// never serves: without --etcd-servers its option validation fails, after the flag parsing and
// the feature gate and admission plugin checks this test is about. Its self-signed serving
// certificate goes to a temp dir.
func apiserverSays(t *testing.T, bin, arg string) string {
	t.Helper()

	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()

	dir := t.TempDir()
	cmd := exec.CommandContext(ctx, bin, "--cert-dir="+dir, arg)
	cmd.Dir = dir
	cmd.Env = []string{"HOME=" + dir}

	out, err := cmd.CombinedOutput()
	if err == nil {
		t.Fatalf("kube-apiserver %s exited 0 (it should never get to serve here):\n%s", arg, out)
	}

	if ctx.Err() != nil {
		t.Fatalf("kube-apiserver %s did not exit: %v\n%s", arg, ctx.Err(), out)
	}

	return string(out)
}

// TestApiserverRejectsRemovedItems checks the kube-apiserver half of the data against the real
// kube-apiserver that `make tools` builds: every flag, feature gate and admission plugin the
// table says a minor up to the binary's removed is refused by it, by name. A known flag, gate
// and plugin are not: the error text the test looks for is specific.
func TestApiserverRejectsRemovedItems(t *testing.T) {
	bin, err := testenv.KubeAPIServerPath()
	testenv.Require(t, err)

	v, err := exec.CommandContext(t.Context(), bin, "--version").Output()
	if err != nil {
		t.Fatalf("kube-apiserver --version: %v", err)
	}

	minor, err := minorOf(strings.TrimPrefix(strings.TrimSpace(string(v)), "Kubernetes "))
	if err != nil {
		t.Fatalf("kube-apiserver --version said %q: %v", v, err)
	}

	if minor < LastMinor {
		t.Logf("kube-apiserver is 1.%d; removals of later minors are not checked", minor)
	}

	type probe struct{ arg, refusal string }

	controls := []probe{
		{"--secure-port=0", "unknown flag"},
		{"--feature-gates=StrictIPCIDRValidation=true", "unrecognized feature gate"},
		{"--enable-admission-plugins=NodeRestriction", "is unknown"},
	}

	var probes []probe

	for _, r := range Kubernetes() {
		if r.Minor > minor {
			continue
		}

		for _, f := range r.Flags[APIServer] {
			probes = append(probes, probe{"--" + f + "=x", "unknown flag: --" + f})
		}

		for _, g := range r.FeatureGates {
			probes = append(probes, probe{"--feature-gates=" + g + "=true", "unrecognized feature gate: " + g})
		}

		for _, p := range r.AdmissionPlugins {
			probes = append(probes, probe{"--enable-admission-plugins=" + p, `enable-admission-plugins plugin \"` + p + `\" is unknown`})
			probes = append(probes, probe{"--disable-admission-plugins=" + p, `disable-admission-plugins plugin \"` + p + `\" is unknown`})
		}
	}

	// Two at a time: the machine is shared.
	var (
		wg   sync.WaitGroup
		sem  = make(chan struct{}, 2)
		mu   sync.Mutex
		fail []string
	)

	run := func(p probe, wantRefused bool) {
		defer wg.Done()

		sem <- struct{}{}
		defer func() { <-sem }()

		out := apiserverSays(t, bin, p.arg)
		if strings.Contains(out, p.refusal) != wantRefused {
			mu.Lock()
			fail = append(fail, p.arg+": want refused="+map[bool]string{true: "yes", false: "no"}[wantRefused]+" ("+p.refusal+"), got:\n"+lastLines(out, 3))
			mu.Unlock()
		}
	}

	for _, p := range controls {
		wg.Add(1)

		go run(p, false)
	}

	for _, p := range probes {
		wg.Add(1)

		go run(p, true)
	}

	wg.Wait()

	if len(fail) > 0 {
		t.Fatalf("kube-apiserver 1.%d disagrees with the table on %d item(s):\n%s", minor, len(fail), strings.Join(fail, "\n"))
	}

	t.Logf("kube-apiserver 1.%d refused all %d removed items", minor, len(probes))
}

func lastLines(s string, n int) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}

	return strings.Join(lines, "\n")
}
