package main

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

func run(t *testing.T, args ...string) (string, int) {
	t.Helper()
	cmd := exec.Command(talosbotBinary(t), args...)
	out, err := cmd.CombinedOutput()
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		return string(out), ee.ExitCode()
	}
	if err != nil {
		t.Fatal(err)
	}
	return string(out), 0
}

func TestConfigCheck(t *testing.T) {
	out, code := run(t, "config", "check", "--config", "../../deploy/examples/talosbot.yaml")
	if code != 0 || !strings.Contains(out, "OK (2 clusters: [staging production])") {
		t.Fatalf("example config: exit %d\n%s", code, out)
	}
	bad := filepath.Join(t.TempDir(), "bad.yaml")
	_ = os.WriteFile(bad, []byte(`
clusters:
  - name: staging
    environment: staging
    endpoints: [10.0.20.204]
    nodes:
      - {name: cp-1, address: 10.0.20.204, role: controlplane, host: pve5}
      - {name: w-1, address: 10.0.20, role: worker, host: pve5}
    credentials: {source: files, talosconfig: file:/etc/tc}
policy:
  production: {min_approvals: -1}
`), 0o600)
	out, code = run(t, "config", "check", "--config", bad)
	if code != 2 {
		t.Fatalf("bad config: exit %d, want 2\n%s", code, out)
	}
	for _, want := range []string{`clusters[0].nodes[1].address: "10.0.20" is not an IP address`, "policy.production.min_approvals: must be at least 1"} {
		if !strings.Contains(out, want) {
			t.Errorf("missing %q in\n%s", want, out)
		}
	}
}

func TestHelpTeachesWithExamples(t *testing.T) {
	for _, sub := range [][]string{{"serve"}, {"demo"}, {"sim"}, {"plugin"}, {"audit", "verify"}, {"audit", "export"}, {"config", "check"}, {"version"}} {
		out, code := run(t, append(sub, "--help")...)
		if code != 0 || !strings.Contains(out, "Examples:") {
			t.Errorf("talosbot %s --help: exit %d, no example:\n%s", strings.Join(sub, " "), code, out)
		}
	}
	out, code := run(t, "plugin", "nope")
	if code != 2 || !strings.Contains(out, `unknown plugin "nope"`) {
		t.Fatalf("unknown plugin: exit %d\n%s", code, out)
	}
}
