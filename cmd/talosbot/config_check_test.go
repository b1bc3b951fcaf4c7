package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
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
	// Each error starts with FILE:LINE, the catalogue's too.
	for _, want := range []string{
		p + ":20: policy.production.no_approval_commands[0]: unknown command",
		p + ":21: policy.production.expirey: unknown key",
		p + ":24: snapshots.max_age:",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("missing %q in\n%s", want, out)
		}
	}
}

// A YAML syntax error names the line that broke the document, as FILE:LINE,
// in config check and serve alike: yaml.v3 itself names the line where the
// enclosing block starts (a mis-indented key on line 4 was "line 1") or the
// line before a tab. Both commands print "error:" as every command does.
func TestConfigSyntaxErrorsNameTheirLine(t *testing.T) {
	for _, tc := range []struct{ doc, want string }{
		{"clusters:\n  - name: staging\n    environment: staging\n   endpoints: [10.0.20.204]\n", ":4: (document): did not find expected '-' indicator"},
		{"clusters:\n  - name: staging\n    environment: staging\n\tendpoints: [10.0.20.204]\n", ":4: (document): found a tab character"},
		{"clusters:\n  - name: staging\n    environment: staging\n      endpoints: [10.0.20.204]\n", ":4: (document): mapping values are not allowed"},
	} {
		p := writeConfig(t, tc.doc)
		for _, cmd := range [][]string{{"config", "check"}, {"serve"}} {
			out, code := run(t, append(cmd, "--config", p)...)
			if code != 2 || !strings.Contains(out, p+tc.want) || !strings.HasPrefix(out, "error: ") {
				t.Errorf("%s: exit %d, want 2 and %q after \"error: \"\n%s", cmd, code, p+tc.want, out)
			}
		}
	}
}

// External plugins' commands are known to config check (it reads their
// manifests as serve does), and serve refuses to start on a name config
// check refuses: the two agree.
func TestConfigCheckAndServeAgreeOnExternalCommands(t *testing.T) {
	slow(t)
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
	// The plugin owns its section: this one takes none, and says so.
	withSection := doc("roll") + "  eng: {limit: 3}\n"
	if out, code := run(t, "config", "check", "--config", writeConfig(t, withSection)); code != 2 || !strings.Contains(out, "plugins.eng: this plugin takes no configuration; remove its section") {
		t.Fatalf("a section for a plugin that takes none: exit %d\n%s", code, out)
	}
	// A checksum mismatch is found by config check too.
	wrong := strings.Replace(doc("roll"), sum, strings.Repeat("0", 64), 1)
	if out, code := run(t, "config", "check", "--config", writeConfig(t, wrong)); code != 2 || !strings.Contains(out, "plugins.external") {
		t.Fatalf("checksum mismatch: exit %d\n%s", code, out)
	}
}

// runEnv runs the binary with extra environment. The deadline only turns a
// serve that wrongly started (or blocked on a secret) into a failure
// instead of a hung test; nothing is timed.
func runEnv(t *testing.T, env []string, args ...string) (string, int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, talosbotBinary(t), args...)
	cmd.Env = append(os.Environ(), env...)
	out, err := cmd.CombinedOutput()
	if ctx.Err() != nil {
		t.Fatalf("%v did not end:\n%s", args, out)
	}
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		return string(out), ee.ExitCode()
	}
	if err != nil {
		t.Fatal(err)
	}
	return string(out), 0
}

// config check and serve refuse the same configurations with the same
// errors (exit 2), through the real binary: both run checkConfig. Before,
// config check passed two console users with the same token value and a
// missing variable, and serve then exited 1, naming one missing variable
// per start (a restart loop under systemd's Restart=on-failure).
func TestConfigCheckAndServeAgree(t *testing.T) {
	strong := func(s string) string { return s + "-" + strings.Repeat("0", 40) }
	dir := t.TempDir()
	fifo := filepath.Join(dir, "fifo")
	must(t, syscall.Mkfifo(fifo, 0o600))
	policy := `policy:
  staging: {operators: [alice, bob]}
  production: {operators: [alice], approvers: [bob]}
`
	web := "chat:\n  web: {enabled: true, users: [{name: alice, token: env:CC_ALICE}, {name: bob, token: env:CC_BOB}]}\n"
	// The 31 KB alias bomb of config/hardening_test.go: 1500 policies aliasing
	// one whose 3000 windows alias one with 1500 days.
	bomb := "policy:\n  staging: &p {operators: [alice], maintenance_windows: [&w {days: [" +
		strings.TrimSuffix(strings.Repeat("mon,", 1500), ",") + `], start: "22:00", end: "23:00", timezone: UTC}` + strings.Repeat(",*w", 3000) + "]}\n"
	for i := range 1500 {
		bomb += fmt.Sprintf("  k%d: *p\n", i)
	}
	for _, tc := range []struct {
		name string
		doc  string
		env  []string
		want []string
	}{
		{"duplicated env token", policy + web, []string{"CC_ALICE=" + strong("same"), "CC_BOB=" + strong("same")},
			[]string{"chat.web.users[1].token: the token of console user bob has the same value as chat.web.users[0].token (console user alice)"}},
		{"missing variables", policy + web + "audit: {token: env:CC_AUDIT}\nalerts: {token: env:CC_ALERTS}\n", nil,
			[]string{"environment variable CC_ALICE is not set", "environment variable CC_BOB is not set",
				"environment variable CC_AUDIT is not set", "environment variable CC_ALERTS is not set"}},
		{"short and shared tokens", policy + web + "audit: {token: env:CC_AUDIT}\nalerts: {token: env:CC_ALERTS}\n",
			[]string{"CC_ALICE=" + strong("alice"), "CC_BOB=x", "CC_AUDIT=" + strong("alice"), "CC_ALERTS=" + strong("alerts")},
			[]string{"chat.web.users[1].token: the token of console user bob is shorter than 32 characters",
				"chat.web.users[0].token: the token of console user alice has the same value as audit.token"}},
		{"file:/dev/zero", policy + "audit: {token: file:/dev/zero}\n", nil, []string{"audit.token: secret file:/dev/zero: /dev/zero is not a regular file"}},
		{"FIFO", policy + fmt.Sprintf("alerts: {token: \"file:%s\"}\n", fifo), nil, []string{"alerts.token: secret file:" + fifo + ": " + fifo + " is not a regular file"}},
		{"pass_env names a secret", policy + "chat:\n  discord: {token: env:CC_DISCORD, application_id: \"1\"}\nplugins: {pass_env: [CC_DISCORD]}\n",
			[]string{"CC_DISCORD=" + strong("discord-bot")}, []string{"plugins.pass_env[0]: CC_DISCORD holds chat.discord.token"}},
		{"a section no plugin owns", policy + "plugins:\n  pas_env: [X]\n  noplugin: {a: 1}\n", nil,
			[]string{`plugins.pas_env: no plugin is named "pas_env"; did you mean "pass_env"?`, `plugins.noplugin: no plugin is named "noplugin" (plugins: `}},
		// A built-in's section is checked by the built-in itself, started
		// from talosbot-plugins: the branch of checkPluginSections no other
		// case takes.
		{"a built-in's section", policy + "plugins:\n  talosupgrade: {refuse_non_latest_pach: true}\n", nil,
			[]string{`plugins.talosupgrade.refuse_non_latest_pach: unknown key "refuse_non_latest_pach"; did you mean "refuse_non_latest_patch"?`}},
		{"a built-in's storage key", policy + "plugins:\n  rollback: {storage: {last_replica: maybe}}\n  noderemove: {storage: {swichover: refuse}}\n", nil,
			[]string{`plugins.rollback.storage.last_replica: is "maybe": use "wait" or "refuse"`,
				`plugins.noderemove.storage.swichover: unknown key "swichover"; did you mean "switchover"?`}},
		// The settings that were Settings.extra keys, which no config
		// could reach, are the plugins' own sections now.
		{"the gates' section", policy + "plugins:\n  gates: {flux_pth: ./clusters/production}\n", nil,
			[]string{`plugins.gates.flux_pth: unknown key "flux_pth"; did you mean "flux_path"?`}},
		{"a terraform guard's section", policy + "plugins:\n  tfguard: {terraform_guard: {protected_vm: [talos_node]}}\n  k8supgrade: {terraform_guard: {no_refresh: maybe}}\n", nil,
			[]string{`plugins.tfguard.terraform_guard.protected_vm: unknown key "protected_vm"; did you mean "protected_vms"?`,
				`plugins.k8supgrade.terraform_guard.no_refresh: `}},
		{"a setting that moved into its plugin", policy + "releases: {talos: [v1.13.9], refuse_non_latest_patch: true}\n", nil,
			[]string{"releases.refuse_non_latest_patch: moved to plugins.talosupgrade.refuse_non_latest_patch (the talosupgrade plugin owns it now): delete it here and write it under plugins: as `plugins: {talosupgrade: {refuse_non_latest_patch: VALUE}}`"}},
		{"a cluster's setting that moved into two plugins", policy, nil,
			[]string{"clusters[0].credentials.terraform.plan_before_upgrade: moved to plugins.talosupgrade.plan_before_upgrade and plugins.k8supgrade.plan_before_upgrade (the talosupgrade and the k8supgrade plugins own it now): delete it here and write it under plugins: as `plugins: {talosupgrade: {plan_before_upgrade: [CLUSTER, ...]}, k8supgrade: {plan_before_upgrade: [CLUSTER, ...]}}`"}},
		{"plan_before_upgrade names no cluster", policy + "plugins:\n  talosupgrade: {plan_before_upgrade: [stagin]}\n", nil,
			[]string{`plugins.talosupgrade.plan_before_upgrade[0]: no cluster is named "stagin"; did you mean "staging"?`}},
		{"min_approvals 0", strings.Replace(policy, "approvers: [bob]", "approvers: [bob], min_approvals: 0", 1), nil,
			[]string{"policy.production.min_approvals: is 0"}},
		{"second document", policy + "---\npolicy: {production: {min_approvals: 2}}\n", nil, []string{"a second YAML document"}},
		{"terraform root", policy, nil, []string{`clusters[0].credentials.terraform.root: "../../etc" must be an absolute path`}},
		{"alias bomb", bomb, nil, []string{"alias limit"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			clusters := checkClusters
			if tc.name == "terraform root" {
				clusters = strings.Replace(clusters, `{source: files, talosconfig: "file:/etc/tc"}`, `{source: terraform, terraform: {root: ../../etc}}`, 1)
			}
			if tc.name == "a cluster's setting that moved into two plugins" {
				clusters = strings.Replace(clusters, `{source: files, talosconfig: "file:/etc/tc"}`, `{source: terraform, terraform: {root: /srv/tf, plan_before_upgrade: true}}`, 1)
			}
			p := writeConfig(t, fmt.Sprintf("data_dir: %s\nlisten: 127.0.0.1:0\n%s%s", t.TempDir(), clusters, tc.doc))
			for _, args := range [][]string{{"config", "check", "--config", p}, {"serve", "--config", p}} {
				out, code := runEnv(t, tc.env, args...)
				if code != 2 {
					t.Errorf("%s: exit %d, want 2\n%s", args[0], code, out)
				}
				for _, w := range tc.want {
					if !strings.Contains(out, w) {
						t.Errorf("%s: missing %q in\n%s", args[0], w, out)
					}
				}
				for _, e := range tc.env {
					if _, v, _ := strings.Cut(e, "="); len(v) > 1 && strings.Contains(out, v) {
						t.Errorf("%s shows a secret:\n%s", args[0], out)
					}
				}
			}
		})
	}
}

// A path in the config that names a FIFO or a device is refused with
// "not a regular file", through the real binary, by config check and serve
// alike. Before, opening a FIFO as the config file waited for a writer, and an
// external plugin at /dev/zero or a FIFO was hashed for ever (or waited on
// open): config check and serve's start hung instead of naming the path.
func TestConfigAndPluginPathsMustBeRegularFiles(t *testing.T) {
	dir := t.TempDir()
	fifo := filepath.Join(dir, "fifo")
	must(t, syscall.Mkfifo(fifo, 0o600))
	policy := "policy:\n  staging: {operators: [alice]}\n  production: {operators: [alice], approvers: [bob]}\n"
	plugin := func(path string) string {
		return writeConfig(t, fmt.Sprintf("%sdata_dir: %s\nlisten: 127.0.0.1:0\n%splugins:\n  external: [{name: eng, path: %q, sha256: %s}]\n",
			checkClusters, t.TempDir(), policy, path, strings.Repeat("0", 64)))
	}
	for _, tc := range []struct {
		name, config, want string
	}{
		{"config file is a FIFO", fifo, "read config " + fifo + ": not a regular file"},
		{"plugin at /dev/zero", plugin("/dev/zero"), `plugin "eng" (/dev/zero): cannot open the executable: not a regular file (a device)`},
		{"plugin at a FIFO", plugin(fifo), `plugin "eng" (` + fifo + `): cannot open the executable: not a regular file (a FIFO)`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			for _, args := range [][]string{{"config", "check", "--config", tc.config}, {"serve", "--config", tc.config}} {
				out, code := runEnv(t, nil, args...)
				if code == 0 || !strings.Contains(out, "not a regular file") {
					t.Errorf("%s: exit %d, want a refusal naming the path as not a regular file\n%s", args[0], code, out)
				}
				if args[0] == "config" && (code != 2 || !strings.Contains(out, tc.want)) {
					t.Errorf("config check: exit %d, want 2 and %q\n%s", code, tc.want, out)
				}
			}
		})
	}
}
