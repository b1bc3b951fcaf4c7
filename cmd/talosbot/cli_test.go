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
	return runExe(t, talosbotBinary(t), args...)
}

func runExe(t *testing.T, bin string, args ...string) (string, int) {
	t.Helper()
	cmd := exec.Command(bin, args...)
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
	// config check resolves the secrets serve reads at start, as serve does.
	for _, v := range []string{"SLACK_APP_TOKEN", "SLACK_BOT_TOKEN", "TALOSBOT_AUDIT_TOKEN", "TALOSBOT_ALERTS_TOKEN"} {
		t.Setenv(v, strings.ToLower(v)+"-0123456789abcdef0123456789abcdef")
	}
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
	for _, c := range []struct {
		bin string
		sub []string
	}{
		{binPath, []string{"serve"}}, {binPath, []string{"audit", "verify"}}, {binPath, []string{"audit", "export"}}, {binPath, []string{"audit", "repair-head"}},
		{binPath, []string{"config", "check"}}, {binPath, []string{"version"}},
		{demoBinPath, []string{"demo"}}, {demoBinPath, []string{"sim"}},
		{pluginsBinPath, []string{"plugin"}}, {pluginsBinPath, []string{"manifests"}},
	} {
		out, code := runExe(t, c.bin, append(c.sub, "--help")...)
		if code != 0 || !strings.Contains(out, "Examples:") {
			t.Errorf("%s %s --help: exit %d, no example:\n%s", filepath.Base(c.bin), strings.Join(c.sub, " "), code, out)
		}
	}
	out, code := runExe(t, pluginsBinPath, "plugin", "nope")
	if code != 2 || !strings.Contains(out, `unknown plugin "nope"`) {
		t.Fatalf("unknown plugin: exit %d\n%s", code, out)
	}
}

// TestProductionBuildPointsToTheDemoBuild: demo and sim are not in the
// production binary; asking for them says where they are.
func TestProductionBuildPointsToTheDemoBuild(t *testing.T) {
	for _, sub := range []string{"demo", "sim"} {
		out, code := run(t, sub)
		if code != 2 || !strings.Contains(out, "make demo") || !strings.Contains(out, "bin/talosbot-demo "+sub) {
			t.Errorf("talosbot %s: exit %d\n%s", sub, code, out)
		}
	}
}

// TestServeBinaryLinksNoClusterLibraries: the long-running bot links none of
// the cluster libraries or the simulator (they live in talosbot-plugins and
// the demo build), so its idle memory stays small. go list -deps is what the
// linker sees.
func TestServeBinaryLinksNoClusterLibraries(t *testing.T) {
	deps := func(args ...string) []string {
		out, err := exec.Command("go", append([]string{"list", "-deps"}, args...)...).Output()
		if err != nil {
			t.Fatalf("go list -deps %v: %v", args, err)
		}
		return strings.Fields(string(out))
	}
	banned := []string{"k8s.io/client-go", "github.com/siderolabs/talos/pkg/machinery", "go.etcd.io/etcd/server/v3",
		"github.com/talosbot/talosbot/sim", "github.com/talosbot/talosbot/internal/testenv", "github.com/talosbot/talosbot/plugins/builtin"}
	linked := func(pkgs []string, b string) bool {
		for _, p := range pkgs {
			if p == b || strings.HasPrefix(p, b+"/") {
				return true
			}
		}
		return false
	}
	bot := deps(".")
	for _, b := range banned {
		if linked(bot, b) {
			t.Errorf("cmd/talosbot links %s", b)
		}
	}
	// The check itself works: the demo build does link the simulator.
	if !linked(deps("-tags", "demo", "."), "github.com/talosbot/talosbot/sim") {
		t.Error("the demo build does not link sim: is the demo tag still what builds it?")
	}
}

// TestServeRefusesToStartWithoutPluginsBinary: a bot installed without
// talosbot-plugins next to it (and no TALOSBOT_PLUGINS_BIN) does not start,
// and says how to fix it, rather than accepting commands it cannot run.
func TestServeRefusesToStartWithoutPluginsBinary(t *testing.T) {
	dir := t.TempDir()
	raw, err := os.ReadFile(binPath)
	if err != nil {
		t.Fatal(err)
	}
	lone := filepath.Join(dir, "talosbot")
	if err := os.WriteFile(lone, raw, 0o755); err != nil {
		t.Fatal(err)
	}
	tc := filepath.Join(dir, "talosconfig")
	_ = os.WriteFile(tc, []byte("context: x\n"), 0o600)
	cfg := filepath.Join(dir, "talosbot.yaml")
	_ = os.WriteFile(cfg, []byte(`
data_dir: `+dir+`/data
listen: 127.0.0.1:0
clusters:
  - name: staging
    environment: staging
    endpoints: [127.0.0.1]
    nodes: [{name: cp-1, address: 127.0.0.1, role: controlplane, host: pve1}]
    credentials: {source: files, talosconfig: "file:`+tc+`"}
policy:
  staging: {operators: [alice]}
`), 0o600)
	cmd := exec.Command(lone, "serve", "--config", cfg)
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "TALOSBOT_PLUGINS_BIN=") {
			cmd.Env = append(cmd.Env, kv)
		}
	}
	out, err := cmd.CombinedOutput()
	want := filepath.Join(dir, "talosbot-plugins")
	if err == nil || !strings.Contains(string(out), want) || !strings.Contains(string(out), "install talosbot-plugins next to talosbot") {
		t.Fatalf("serve without talosbot-plugins: err %v\n%s", err, out)
	}
}
