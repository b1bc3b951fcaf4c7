package config

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// base is a valid two-cluster document; tests append or replace parts.
const base = `
clusters:
  - name: staging
    environment: staging
    endpoints: [10.0.20.204]
    nodes: [{name: cp-1, address: 10.0.20.204, role: controlplane, host: pve5}]
    credentials: {source: files, talosconfig: file:/etc/tc}
  - name: production
    environment: production
    endpoints: [10.0.30.11]
    nodes: [{name: cp-1, address: 10.0.30.11, role: controlplane, host: pve1}]
    credentials: {source: files, talosconfig: file:/etc/tc}
`

const goodPolicy = `
groups:
  sre: [alice, bob]
policy:
  staging: {operators: ["*"]}
  production: {operators: [group:sre], viewers: [carol], approvers: [group:sre]}
`

func parseErrs(t *testing.T, doc string) []string {
	t.Helper()
	_, err := Parse([]byte(doc))
	if err == nil {
		return nil
	}
	var errs *Errors
	if !errors.As(err, &errs) {
		t.Fatalf("want *Errors, got %T %v", err, err)
	}
	var out []string
	for _, fe := range errs.List {
		out = append(out, fe.String())
	}
	return out
}

func wantErrs(t *testing.T, doc string, want ...string) {
	t.Helper()
	got := parseErrs(t, doc)
	joined := strings.Join(got, "\n")
	for _, w := range want {
		if !strings.Contains(joined, w) {
			t.Errorf("missing error %q in:\n%s", w, joined)
		}
	}
}

func TestGoodPolicyPasses(t *testing.T) {
	if errs := parseErrs(t, base+goodPolicy); len(errs) > 0 {
		t.Fatalf("errors: %v", errs)
	}
}

func TestUnknownKeysAreReportedWithPathAndClosestKeyAllAtOnce(t *testing.T) {
	doc := strings.Replace(base, "    endpoints: [10.0.30.11]", "    endpoint: [10.0.30.11]", 1) + `
groups:
  sre: [alice, bob]
policy:
  staging: {operators: ["*"]}
  production:
    operatrs: [group:sre]
    approvers: [group:sre]
    expiry: 213504d
    promotion_max_age: soon
timeouts: {gate: 99999999999d}
`
	wantErrs(t, doc,
		`clusters[1].endpoint: unknown key "endpoint"; did you mean "endpoints"?`,
		`policy.production.operatrs: unknown key "operatrs"; did you mean "operators"?`,
		`policy.production.expiry: "213504d" is longer than the maximum of 3650d`,
		`policy.production.promotion_max_age: "soon" is not a duration`,
		`timeouts.gate: "99999999999d" is longer than the maximum of 3650d`,
		// the ignored key leaves the real one empty: that is reported too
		`clusters[1].endpoints: at least one Talos endpoint is required`,
	)
}

func TestUndefinedGroupAnywhereIsAnError(t *testing.T) {
	for _, field := range []string{"operators", "viewers", "approvers"} {
		roles := map[string]string{"operators": "[alice]", "viewers": "[carol]", "approvers": "[alice, bob]"}
		roles[field] = "[group:sre, group:sres]"
		doc := base + `
groups:
  sre: [alice, bob]
policy:
  staging: {operators: ["*"]}
  production: {operators: ` + roles["operators"] + `, viewers: ` + roles["viewers"] + `, approvers: ` + roles["approvers"] + `}
`
		wantErrs(t, doc, `policy.production.`+field+`[1]: group "sres" is not defined under groups; did you mean group:sre?`)
	}
}

// The case: operators: [group:sre] with no group sre made everyone
// an operator. Now it is an error, and the role list does not open up.
func TestTypoedGroupIsRefusedNotOpened(t *testing.T) {
	doc := base + `
policy:
  staging: {operators: [group:sre]}
  production: {operators: [alice], approvers: [alice, bob]}
`
	wantErrs(t, doc,
		`policy.staging.operators[0]: group "sre" is not defined under groups`,
		`policy.staging.operators: no one has a role in staging`)
}

func TestEmptyRolesAreAnErrorAndOpenAccessMustBeWritten(t *testing.T) {
	wantErrs(t, base, `policy.staging.operators: no one has a role in staging`, `policy.production.operators: no one has a role in production`)
	wantErrs(t, base+`
groups:
  sre: []
policy:
  staging: {operators: ["*"]}
  production: {operators: [group:sre], approvers: ["*"]}
`, `groups.sre: group "sre" is empty`, `policy.production.approvers[0]: "*" is not allowed here`,
		`policy.production.approvers: 0 approver(s) cannot give the 1 approval(s) that production requires`)
	// Viewers alone are a valid read-only environment.
	if errs := parseErrs(t, base+`
policy:
  staging: {viewers: ["*"]}
  production: {operators: [alice], approvers: [bob]}
`); len(errs) > 0 {
		t.Fatalf("read-only staging: %v", errs)
	}
}

func TestProductionNeedsEnoughApprovers(t *testing.T) {
	wantErrs(t, base+`
policy:
  staging: {operators: ["*"]}
  production: {operators: [alice, bob], approvers: [bob], min_approvals: 2}
`, `policy.production.approvers: 1 approver(s) cannot give the 2 approval(s)`)
	// A solo production that opts out of approval in plain words needs none.
	if errs := parseErrs(t, base+`
policy:
  staging: {operators: ["*"]}
  production: {operators: [alice], no_approval_commands: ["*"]}
`); len(errs) > 0 {
		t.Fatalf("opted-out production: %v", errs)
	}
}

func TestNeedsApproval(t *testing.T) {
	list := func(s ...string) *[]string { return &s }
	for _, c := range []struct {
		name string
		env  string
		pol  Policy
		want bool
	}{
		{"production default", EnvProduction, Policy{}, true},
		{"production, empty lists", EnvProduction, Policy{Approval: list(), NoApproval: []string{}}, true},
		{"production, approval list naming another command", EnvProduction, Policy{Approval: list("rollback")}, true},
		{"production, exempted", EnvProduction, Policy{NoApproval: []string{"upgrade talos"}}, false},
		{"production, all exempted", EnvProduction, Policy{NoApproval: []string{"*"}}, false},
		{"production, another exempted", EnvProduction, Policy{NoApproval: []string{"rollback"}}, true},
		{"staging default", EnvStaging, Policy{}, false},
		{"staging, listed", EnvStaging, Policy{Approval: list("upgrade talos")}, true},
		{"staging, all", EnvStaging, Policy{Approval: list("*")}, true},
		{"staging, another listed", EnvStaging, Policy{Approval: list("rollback")}, false},
	} {
		if got := c.pol.NeedsApproval(c.env, "upgrade talos"); got != c.want {
			t.Errorf("%s: NeedsApproval = %v, want %v", c.name, got, c.want)
		}
	}
}

func TestCheckCommands(t *testing.T) {
	c, err := Parse([]byte(base + `
policy:
  staging: {operators: ["*"], approvers: [bob], approval_commands: ["*", upgrade-talos, freeze, health]}
  production: {operators: [alice], approvers: [bob], no_approval_commands: [rollbak, rollback]}
alerts:
  rules:
    - {name: a, match: {alertname: x}, commands: ["/talos health {{cluster}}", "/talos helth {{cluster}}"]}
`))
	if err != nil {
		t.Fatal(err)
	}
	cat := []CommandInfo{
		{Name: "help"}, {Name: "freeze", Disruptive: true},
		{Name: "health", Operation: true}, {Name: "upgrade talos", Operation: true, Disruptive: true},
		{Name: "rollback", Operation: true, Disruptive: true},
	}
	var got []string
	for _, fe := range c.CheckCommands(cat) {
		got = append(got, fe.String())
	}
	joined := strings.Join(got, "\n")
	for _, w := range []string{
		`policy.staging.approval_commands[1]: unknown command "upgrade-talos"; did you mean "upgrade talos"?`,
		`policy.staging.approval_commands[2]: "freeze" is a bot command and never waits for approval`,
		`policy.staging.approval_commands[3]: "health" is read-only and never needs approval`,
		`policy.production.no_approval_commands[0]: unknown command "rollbak"; did you mean "rollback"?`,
		`alerts.rules[0].commands[1]: "/talos helth {{cluster}}" names no command; did you mean /talos health?`,
	} {
		if !strings.Contains(joined, w) {
			t.Errorf("missing %q in:\n%s", w, joined)
		}
	}
	if len(got) != 5 {
		t.Errorf("want exactly 5 errors, got:\n%s", joined)
	}
}

func TestDiscordPublicKeyIsCheckedLikeTheAdapter(t *testing.T) {
	doc := base + goodPolicy + `
chat:
  discord: {token: env:DISCORD_TOKEN, application_id: "1", public_key: %s}
`
	wantErrs(t, strings.Replace(doc, "%s", "not-hex", 1), `chat.discord.public_key: must be the application's 64-hex-digit Ed25519 public key`)
	wantErrs(t, strings.Replace(doc, "%s", strings.Repeat("ab", 31), 1), `chat.discord.public_key:`)
	if errs := parseErrs(t, strings.Replace(doc, "%s", strings.Repeat("ab", 32), 1)); len(errs) > 0 {
		t.Fatalf("valid key refused: %v", errs)
	}
}

func TestParseDurationIsBounded(t *testing.T) {
	for s, want := range map[string]time.Duration{
		"30m": 30 * time.Minute, "14d": 14 * 24 * time.Hour, "3650d": MaxDuration, "87600h": MaxDuration, "0": 0,
	} {
		if got, err := ParseDuration(s); err != nil || got != want {
			t.Errorf("ParseDuration(%q) = %v, %v; want %v", s, got, err, want)
		}
	}
	for s, want := range map[string]string{
		"213504d":               "longer than the maximum",
		"3651d":                 "longer than the maximum",
		"99999999999d":          "longer than the maximum",
		"999999999999999999d":   "longer than the maximum",
		"87601h":                "longer than the maximum",
		"99999999999999999999h": "longer than the maximum",
		"-5d":                   "negative",
		"-1h":                   "negative",
		"5 days":                "is not a duration",
		"d":                     "is not a duration",
	} {
		if _, err := ParseDuration(s); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("ParseDuration(%q) = %v; want an error containing %q", s, err, want)
		}
	}
}

func TestFileSecretDropsOneTrailingNewline(t *testing.T) {
	dir := t.TempDir()
	for content, want := range map[string]string{
		"tok\n": "tok", "tok": "tok", "tok\r\n": "tok", "tok\n\n": "tok\n", "tok \n": "tok ",
	} {
		p := filepath.Join(dir, "s")
		if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
		got, err := Ref("file:" + p).Resolve()
		if err != nil || string(got) != want {
			t.Errorf("file %q resolved to %q, %v; want %q", content, got, err, want)
		}
	}
	t.Setenv("TB_TEST_SECRET", "tok\n")
	if got, err := Ref("env:TB_TEST_SECRET").Resolve(); err != nil || string(got) != "tok\n" {
		t.Errorf("env secrets are used as they are: %q %v", got, err)
	}
}

func TestTypeErrorsCarryTheirPath(t *testing.T) {
	wantErrs(t, base+goodPolicy+`
snapshots: {keep: lots}
timeouts: {gate: [1]}
`, "snapshots.keep: cannot unmarshal !!str `lots` into int (line ", `timeouts.gate: a duration is a single value`)
}

// Keys of an inline struct (snapshots: keep, max_age…) are known keys.
func TestInlineKeysAreKnown(t *testing.T) {
	if errs := parseErrs(t, base+goodPolicy+"snapshots: {keep: 3, max_age: 30d, daily: 7}\n"); len(errs) > 0 {
		t.Fatalf("inline keys refused: %v", errs)
	}
	wantErrs(t, base+goodPolicy+"snapshots: {kep: 3}\n", `snapshots.kep: unknown key "kep"; did you mean "keep"?`)
}

// An empty escalation.mention entry is refused: the second late notice
// would mention nobody.
func TestEscalationMentionEntryMustNotBeEmpty(t *testing.T) {
	wantErrs(t, base+goodPolicy+"escalation: {mention: ['@oncall', '']}\n", "escalation.mention[1]")
	if errs := parseErrs(t, base+goodPolicy+"escalation: {mention: ['@oncall']}\n"); len(errs) > 0 {
		t.Fatalf("errors: %v", errs)
	}
}
