package config

import (
	"strings"
	"testing"
	"time"
)

const followupBase = `
clusters:
  - name: staging
    environment: staging
    endpoints: [10.0.20.204]
    nodes: [{name: cp-1, address: 10.0.20.204, role: controlplane, host: pve5}]
    credentials: {source: files, talosconfig: file:/etc/talosconfig}
policy:
  staging: {operators: [alice]}
`

func TestFollowupDefaults(t *testing.T) {
	c, err := Parse([]byte(followupBase + `
alerts: {cluster_label: k8s_cluster}
silences: {alertmanager_url: "http://alertmanager:9093", token: env:AM_TOKEN, require_in: [production]}
git_followup: {remote: "git@git.example:ops/infra.git", ssh_key: file:/etc/talosbot/deploy_key, known_hosts: /etc/talosbot/known_hosts}
`))
	if err != nil {
		t.Fatal(err)
	}
	if s := c.Silences; s.ClusterLabel != "k8s_cluster" || s.Duration.D() != 30*time.Minute || !s.Required(EnvProduction) || s.Required(EnvStaging) {
		t.Fatalf("silences: %+v", s)
	}
	if g := c.Git; g.Base != "main" || g.FileFor("staging") != "terraform/variables_talos.tf" || g.BranchPrefix != "talosbot/" {
		t.Fatalf("git: %+v", g)
	}
	c, err = Parse([]byte(followupBase))
	if err != nil || c.Silences != nil || c.Git != nil {
		t.Fatalf("absent sections must stay off: %+v %+v %v", c.Silences, c.Git, err)
	}
}

// TestFollowupRefusals: each typo or pasted secret is refused with its path;
// none is accepted as a wider or credential-bearing setting.
func TestFollowupRefusals(t *testing.T) {
	for name, c := range map[string]struct{ yaml, path, msg string }{
		"url with credentials": {`silences: {alertmanager_url: "http://u:p@am:9093"}`, "silences.alertmanager_url", "must not hold credentials"},
		"not a url":            {`silences: {alertmanager_url: "am:9093"}`, "silences.alertmanager_url", "not an http(s) URL"},
		"inline token":         {`silences: {alertmanager_url: "http://am:9093", token: "s3cret"}`, "silences.token", "by reference only"},
		"bad label":            {`silences: {alertmanager_url: "http://am:9093", node_label: "no-de"}`, "silences.node_label", "not a Prometheus label"},
		"short duration":       {`silences: {alertmanager_url: "http://am:9093", duration: 10s}`, "silences.duration", "at least 1m"},
		"unknown env":          {`silences: {alertmanager_url: "http://am:9093", require_in: [prod]}`, "silences.require_in[0]", "not an environment"},
		"half basic auth":      {`silences: {alertmanager_url: "http://am:9093", username: am}`, "silences.password", "go together"},
		"remote with password": {`git_followup: {remote: "https://bot:tok@git.example/ops/infra.git", token: env:T}`, "git_followup.remote", "must not hold credentials"},
		"token as https user":  {`git_followup: {remote: "https://ghp_tok@git.example/ops/infra.git", token: env:T}`, "git_followup.remote", "must not hold credentials"},
		"ssh without key":      {`git_followup: {remote: "ssh://git@git.example/ops/infra.git", known_hosts: /k}`, "git_followup.ssh_key", "required"},
		"ssh without hosts":    {`git_followup: {remote: "git@git.example:ops/infra.git", ssh_key: file:/k}`, "git_followup.known_hosts", "pinned"},
		"https without token":  {`git_followup: {remote: "https://git.example/ops/infra.git"}`, "git_followup.token", "required"},
		"not a remote":         {`git_followup: {remote: "infra"}`, "git_followup.remote", "not a Git remote"},
		"escaping file":        {`git_followup: {remote: "file:///srv/infra.git", file: ../etc/passwd}`, "git_followup.file", "inside the repository"},
		"bad forge":            {`git_followup: {remote: "file:///srv/infra.git", pull_request: {forge: gitlab, api_url: "https://g", repository: o/r, token: env:T}}`, "git_followup.pull_request.forge", "not supported"},
		"pr without token":     {`git_followup: {remote: "file:///srv/infra.git", pull_request: {forge: github, api_url: "https://api.github.com", repository: o/r}}`, "git_followup.pull_request.token", "required"},
	} {
		t.Run(name, func(t *testing.T) {
			_, err := Parse([]byte(followupBase + c.yaml + "\n"))
			if err == nil {
				t.Fatal("accepted")
			}
			if !strings.Contains(err.Error(), c.path+": ") || !strings.Contains(err.Error(), c.msg) {
				t.Fatalf("error lacks %s: …%s…:\n%v", c.path, c.msg, err)
			}
			if strings.Contains(err.Error(), "s3cret") || strings.Contains(err.Error(), "tok@") || strings.Contains(err.Error(), "ghp_") {
				t.Fatalf("the error echoes a secret: %v", err)
			}
		})
	}
}
