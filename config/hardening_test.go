package config

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/talosbot/talosbot/bot/chat/web"
)

// aliasBomb is a document of about size bytes whose policy is an alias
// bomb along the types the unknown-key check walks: keys policies alias one
// Policy, whose maintenance_windows are windows aliases of one Window with
// days days, so a walk that follows aliases visits keys×windows×days
// values. Before the bound, 31 KB of this did not end.
func aliasBomb(keys, windows, days, size int) string {
	var b strings.Builder
	b.WriteString(base + "policy:\n")
	fmt.Fprintf(&b, "  staging: &p {operators: [alice], maintenance_windows: [&w {days: [%s], start: \"22:00\", end: \"23:00\", timezone: UTC}%s]}\n",
		strings.TrimSuffix(strings.Repeat("mon,", days), ","), strings.Repeat(",*w", windows))
	for i := range keys {
		fmt.Fprintf(&b, "  k%d: *p\n", i)
	}
	for b.Len() < size {
		b.WriteString("# padding to the size of the reported file\n")
	}
	return b.String()
}

// The alias bombs (4 KB took 20 s, 31 KB did not finish in 100 s)
// are refused before anything follows an alias. No timing is asserted:
// without the bound the test runs into its own timeout.
func TestAliasBombIsRefused(t *testing.T) {
	for name, doc := range map[string]string{
		// 90 aliases (under MaxAliases) that expand to 45·45·600 values.
		"4KB": aliasBomb(45, 45, 600, 4<<10),
		// Thousands of aliases, as in the 31 KB report.
		"31KB": aliasBomb(1500, 3000, 1500, 31<<10),
	} {
		t.Run(name, func(t *testing.T) {
			if n := len(doc); n < 4<<10 || n > 32<<10 {
				t.Fatalf("the document is %d bytes", n)
			}
			c, errs := Decode([]byte(doc))
			if c != nil || len(errs) != 1 || !strings.Contains(errs[0].Msg, "alias limit") {
				t.Fatalf("want one error naming the alias limit, got %v", errs)
			}
		})
	}
	// A few honest aliases still work.
	doc := base + "groups:\n  sre: &sre [alice, bob]\n" + `policy:
  staging: {operators: *sre}
  production: {operators: *sre, approvers: *sre}
`
	if _, err := Parse([]byte(doc)); err != nil {
		t.Fatalf("a plain alias: %v", err)
	}
}

func TestDocumentBounds(t *testing.T) {
	deep := base + "groups:\n  x: " + strings.Repeat("[", MaxDepth+5) + strings.Repeat("]", MaxDepth+5) + "\n"
	wantErrs(t, deep, "nesting limit")
	wantErrs(t, "a: &a [*a]\n", "contains it")
	big := base + strings.Repeat("# padding\n", MaxConfigSize/10+1)
	wantErrs(t, big, "config size limit")
	p := filepath.Join(t.TempDir(), "big.yaml")
	if err := os.WriteFile(p, []byte(big), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := Load(p); err == nil || !strings.Contains(err.Error(), "config size limit") {
		t.Fatalf("Load of a big file: %v", err)
	}
	if _, err := Load(t.TempDir()); err == nil {
		t.Fatal("Load of a directory: no error")
	}
}

// A second document is refused, not silently ignored: whatever it says
// (here a policy) would otherwise never apply.
func TestSecondDocumentIsRefused(t *testing.T) {
	wantErrs(t, base+goodPolicy+"---\npolicy: {production: {min_approvals: 3}}\n", "a second YAML document")
	wantErrs(t, base+goodPolicy+"---\n", "a second YAML document")
	if _, err := Parse([]byte("---\n" + base + goodPolicy)); err != nil {
		t.Fatalf("a leading --- is one document: %v", err)
	}
}

// min_approvals: 0 was silently raised to 1; written out, it is an error.
// Left out, the default (1) still applies.
func TestMinApprovalsZeroIsRefused(t *testing.T) {
	doc := base + strings.Replace(goodPolicy, "approvers: [group:sre]}", "approvers: [group:sre], min_approvals: 0}", 1)
	wantErrs(t, doc, "policy.production.min_approvals: is 0")
	c, err := Parse([]byte(base + goodPolicy))
	if err != nil || c.Policy[EnvProduction].MinApprovals != 1 {
		t.Fatalf("default min_approvals: %v %+v", err, c)
	}
}

func TestTerraformRootMustNotEscape(t *testing.T) {
	tf := func(root string) string {
		return strings.Replace(base, "credentials: {source: files, talosconfig: file:/etc/tc}",
			fmt.Sprintf("credentials: {source: terraform, terraform: {root: %q}}", root), 1) + goodPolicy
	}
	wantErrs(t, tf("../../etc"), `clusters[0].credentials.terraform.root: "../../etc" must be an absolute path`)
	wantErrs(t, tf("/srv/tf/../../etc"), `clusters[0].credentials.terraform.root: "/srv/tf/../../etc" must not contain .. segments; write the directory itself (/etc)`)
	if _, err := Parse([]byte(tf("/srv/homelab/terraform"))); err != nil {
		t.Fatalf("an absolute root: %v", err)
	}
}

// file: secrets are regular files (a symlink is followed to one) of a
// bounded size: /dev/zero would fill memory, a FIFO would block the start.
func TestFileSecretMustBeARegularFile(t *testing.T) {
	dir := t.TempDir()
	good := filepath.Join(dir, "token")
	fifo := filepath.Join(dir, "fifo")
	big := filepath.Join(dir, "big")
	toZero := filepath.Join(dir, "to-zero")
	toGood := filepath.Join(dir, "to-good")
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(os.WriteFile(good, []byte("s3cret\n"), 0o600))
	must(syscall.Mkfifo(fifo, 0o600))
	must(os.WriteFile(big, make([]byte, MaxSecretSize+1), 0o600))
	must(os.Symlink("/dev/zero", toZero))
	must(os.Symlink(good, toGood))
	for _, p := range []string{"/dev/zero", fifo, dir, toZero} {
		if _, err := Ref("file:" + p).Resolve(); err == nil || !strings.Contains(err.Error(), "is not a regular file") {
			t.Errorf("file:%s: %v", p, err)
		}
	}
	if _, err := Ref("file:" + big).Resolve(); err == nil || !strings.Contains(err.Error(), "secret size limit") {
		t.Errorf("a file over the limit: %v", err)
	}
	for _, p := range []string{good, toGood} {
		if b, err := Ref("file:" + p).Resolve(); err != nil || string(b) != "s3cret" {
			t.Errorf("file:%s: %q %v", p, b, err)
		}
	}
}

// plugins.pass_env cannot hand one of the bot's secrets to plugins: not a
// variable any env: reference of the config names, nor the usual chat
// secret variables.
func TestPassEnvCannotNameASecret(t *testing.T) {
	doc := base + goodPolicy + `chat:
  slack: {mode: http, bot_token: env:MY_SLACK_BOT, signing_secret: env:MY_SLACK_SIGNING}
  web: {enabled: true, users: [{name: alice, token: env:ALICE_TOK}]}
audit: {token: env:MY_AUDIT}
plugins:
  pass_env: [TF_CLI_CONFIG_FILE, MY_SLACK_SIGNING, ALICE_TOK, DISCORD_TOKEN, MY_AUDIT, "A=B"]
`
	got := strings.Join(parseErrs(t, doc), "\n")
	for _, want := range []string{
		"plugins.pass_env[1]: MY_SLACK_SIGNING holds chat.slack.signing_secret, a secret of the bot; plugins must never receive it: remove it from pass_env",
		"plugins.pass_env[2]: ALICE_TOK holds chat.web.users[0].token",
		"plugins.pass_env[3]: DISCORD_TOKEN is where chat and API tokens are kept",
		"plugins.pass_env[4]: MY_AUDIT holds audit.token",
		`plugins.pass_env[5]: "A=B" is not an environment variable name`,
	} {
		if !strings.Contains(got, want) {
			t.Errorf("missing %q in\n%s", want, got)
		}
	}
	if strings.Contains(got, "pass_env[0]") {
		t.Errorf("TF_CLI_CONFIG_FILE refused:\n%s", got)
	}
}

// Every bearer token (audit, alerts, each console user) is at least
// MinTokenLen characters and differs from every other, and every missing
// variable is reported in one go.
func TestStartupSecrets(t *testing.T) {
	strong := func(s string) string { return s + strings.Repeat("0", MinTokenLen) }
	doc := base + goodPolicy + `chat:
  web: {enabled: true, users: [{name: alice, token: env:T_ALICE}, {name: bob, token: env:T_BOB}, {name: carol, token: env:T_CAROL}]}
  discord: {token: env:T_DISCORD, application_id: "1"}
audit: {token: env:T_AUDIT}
alerts: {token: env:T_ALERTS}
`
	c, err := Parse([]byte(doc))
	if err != nil {
		t.Fatal(err)
	}
	resolve := func() string {
		_, errs := c.ResolveSecrets()
		var out []string
		for _, fe := range errs {
			out = append(out, fe.String())
		}
		return strings.Join(out, "\n")
	}
	// Nothing set: every variable is named at once.
	got := resolve()
	for _, v := range []string{"T_ALICE", "T_BOB", "T_CAROL", "T_DISCORD", "T_AUDIT", "T_ALERTS"} {
		if !strings.Contains(got, "environment variable "+v+" is not set") {
			t.Errorf("%s not reported in\n%s", v, got)
		}
	}
	t.Setenv("T_ALICE", strong("alice"))
	t.Setenv("T_BOB", strong("alice")) // the same as alice's
	t.Setenv("T_CAROL", "x")
	t.Setenv("T_DISCORD", "discord-token")
	t.Setenv("T_AUDIT", strong("shared"))
	t.Setenv("T_ALERTS", strong("shared")) // the same as the audit API's
	got = resolve()
	for _, want := range []string{
		"chat.web.users[2].token: the token of console user carol is shorter than 32 characters",
		"alerts.token: the token of the alert webhook has the same value as audit.token (the audit API)",
		"chat.web.users[1].token: the token of console user bob has the same value as chat.web.users[0].token (console user alice)",
	} {
		if !strings.Contains(got, want) {
			t.Errorf("missing %q in\n%s", want, got)
		}
	}
	for _, secret := range []string{strong("alice"), strong("shared"), "discord-token"} {
		if strings.Contains(got, secret) {
			t.Errorf("an error shows a secret:\n%s", got)
		}
	}
	t.Setenv("T_AUDIT", "x")
	if got := resolve(); !strings.Contains(got, "audit.token: the token of the audit API is shorter than 32") {
		t.Errorf("a one-character audit token:\n%s", got)
	}
	// Padding does not make a token long enough, and a token an HTTP
	// header cannot carry (its ends are trimmed) is refused at start.
	t.Setenv("T_AUDIT", strings.Repeat(" ", MinTokenLen)+"x")
	t.Setenv("T_ALERTS", strong("alerts")+"\n")
	got = resolve()
	for _, want := range []string{"audit.token: the token of the audit API contains spaces or control characters",
		"alerts.token: the token of the alert webhook contains spaces or control characters"} {
		if !strings.Contains(got, want) {
			t.Errorf("missing %q in\n%s", want, got)
		}
	}
	// An empty file: Resolve accepts it, the start-up check does not (the
	// Discord adapter would otherwise refuse it in serve only).
	empty := filepath.Join(t.TempDir(), "empty")
	if err := os.WriteFile(empty, []byte("\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	c.Chat.Discord.Token = Ref("file:" + empty)
	if got := resolve(); !strings.Contains(got, "chat.discord.token: secret file:"+empty+" is empty") {
		t.Errorf("an empty file secret:\n%s", got)
	}
	c.Chat.Discord.Token = "env:T_DISCORD"
	t.Setenv("T_BOB", strong("bob"))
	t.Setenv("T_CAROL", strong("carol"))
	t.Setenv("T_AUDIT", strong("audit"))
	t.Setenv("T_ALERTS", strong("alerts"))
	s, errs := c.ResolveSecrets()
	if len(errs) > 0 || s.ConsoleTokens["bob"] != strong("bob") || s.AuditToken != strong("audit") || s.DiscordToken != "discord-token" {
		t.Fatalf("good secrets: %v %+v", errs, s)
	}
}

// One floor for every token: the console enforces the one config check does.
func TestOneTokenFloor(t *testing.T) {
	if MinTokenLen != web.MinTokenLen {
		t.Fatalf("config.MinTokenLen %d, web.MinTokenLen %d", MinTokenLen, web.MinTokenLen)
	}
}

// Errors carry the line of their key, and the file when there is one.
func TestErrorsCarryTheLine(t *testing.T) {
	p := filepath.Join(t.TempDir(), "talosbot.yaml")
	doc := base + goodPolicy + "listen: nope\n"
	if err := os.WriteFile(p, []byte(doc), 0o600); err != nil {
		t.Fatal(err)
	}
	_, err := Load(p)
	var ce *Errors
	if !errors.As(err, &ce) {
		t.Fatalf("want *Errors, got %v", err)
	}
	line := strings.Count(doc, "\n")
	if want := fmt.Sprintf("%s:%d: listen: \"nope\" is not host:port", p, line); !strings.Contains(err.Error(), want) {
		t.Fatalf("want %q in\n%v", want, err)
	}
}

// A node's name is part of its snapshots' file names: one with a '/' or
// ".." would write a snapshot outside the snapshot directory, one with a
// space a snapshot that listing, retention and recover never see. Both
// were accepted.
func TestNodeNameIsAFileNameComponent(t *testing.T) {
	node := func(name string) string {
		return strings.Replace(base, "{name: cp-1,", fmt.Sprintf("{name: %q,", name), 1) + goodPolicy
	}
	for _, bad := range []string{"../../../../tmp/evil", "cp/1", "cp 1", ".hidden", "-cp", "cp-1\n", "<!here>"} {
		wantErrs(t, node(bad), fmt.Sprintf("clusters[0].nodes[0].name: %q is not a node name", bad))
	}
	for _, good := range []string{"cp-1", "talos-cp-01.lab.example", "Node_7"} {
		if _, err := Parse([]byte(node(good))); err != nil {
			t.Errorf("node name %q: %v", good, err)
		}
	}
}
