package main

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

const checkClusters = `
clusters:
  - name: staging
    environment: staging
    channels: [ops]
    endpoints: [127.0.0.1]
    nodes: [{name: cp-1, address: 127.0.0.1, role: controlplane, host: pve1}]
    credentials: {source: files, talosconfig: "file:/etc/tc"}
  - name: production
    environment: production
    endpoints: [127.0.0.2]
    nodes: [{name: cp-1, address: 127.0.0.2, role: controlplane, host: pve1}]
    credentials: {source: files, talosconfig: "file:/etc/tc"}
`

func writeConfig(t *testing.T, doc string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "talosbot.yaml")
	must(t, os.WriteFile(p, []byte(doc), 0o600))
	return p
}

// The typos: each is listed, with its path and the fix, in one run,
// and config check exits 2.
func TestConfigCheckListsEveryTypoAtOnce(t *testing.T) {
	p := writeConfig(t, checkClusters+`
policy:
  staging: {operators: [group:sre]}
  production:
    operators: [alice]
    approvers: [bob]
    no_approval_commands: [upgrade-talos]
    expirey: 30m
chat:
  discord: {token: env:DISCORD_TOKEN, application_id: "1", public_key: "not-a-key"}
snapshots: {max_age: 213504d}
`)
	out, code := run(t, "config", "check", "--config", p)
	if code != 2 {
		t.Fatalf("exit %d, want 2\n%s", code, out)
	}
	for _, want := range []string{
		`policy.staging.operators[0]: group "sre" is not defined under groups`,
		`policy.staging.operators: no one has a role in staging`,
		`policy.production.no_approval_commands[0]: unknown command "upgrade-talos"; did you mean "upgrade talos"?`,
		`policy.production.expirey: unknown key "expirey"; did you mean "expiry"?`,
		`chat.discord.public_key: must be the application's 64-hex-digit Ed25519 public key`,
		`snapshots.max_age: "213504d" is longer than the maximum of 3650d`,
	} {
		if !strings.Contains(out, want) {
			t.Errorf("missing %q in\n%s", want, out)
		}
	}
}

// External plugins' commands are known to config check (it reads their
// manifests as serve does), and serve refuses to start on a name config
// check refuses: the two agree.
func TestConfigCheckAndServeAgreeOnExternalCommands(t *testing.T) {
	plugin, sum := buildEnginePlugin(t)
	doc := func(exempt string) string {
		return fmt.Sprintf(`%s
data_dir: %s
listen: 127.0.0.1:0
policy:
  staging: {operators: [alice]}
  production: {operators: [alice], approvers: [bob], no_approval_commands: [%s]}
plugins:
  external: [{name: eng, path: %s, sha256: %s}]
`, checkClusters, t.TempDir(), exempt, plugin, sum)
	}
	if out, code := run(t, "config", "check", "--config", writeConfig(t, doc("roll"))); code != 0 {
		t.Fatalf("an external plugin's command: exit %d\n%s", code, out)
	}
	bad := writeConfig(t, doc("rol"))
	out, code := run(t, "config", "check", "--config", bad)
	want := `policy.production.no_approval_commands[0]: unknown command "rol"; did you mean "roll"?`
	if code != 2 || !strings.Contains(out, want) {
		t.Fatalf("config check: exit %d\n%s", code, out)
	}
	out, code = run(t, "serve", "--config", bad)
	if code != 2 || !strings.Contains(out, want) {
		t.Fatalf("serve must refuse what config check refuses: exit %d\n%s", code, out)
	}
	// A checksum mismatch is found by config check too.
	wrong := strings.Replace(doc("roll"), sum, strings.Repeat("0", 64), 1)
	if out, code := run(t, "config", "check", "--config", writeConfig(t, wrong)); code != 2 || !strings.Contains(out, "plugins.external") {
		t.Fatalf("checksum mismatch: exit %d\n%s", code, out)
	}
}
