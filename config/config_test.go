package config

import (
	"errors"
	"strings"
	"testing"
	"time"
)

func TestExampleConfigPasses(t *testing.T) {
	c, err := Load("../deploy/examples/talosbot.yaml")
	if err != nil {
		t.Fatalf("example config must pass config check: %v", err)
	}
	if got := c.ClusterNames(); strings.Join(got, ",") != "staging,production" {
		t.Fatalf("clusters = %v", got)
	}
	if n := len(c.Cluster("production").ControlPlanes()); n != 3 {
		t.Fatalf("production control planes = %d, want 3", n)
	}
	tf := c.Cluster("staging").Credentials.Terraform
	if tf.Outputs["kubeconfig"] != "talos_kubeconfig" {
		t.Fatalf("terraform output defaults not applied: %v", tf.Outputs)
	}
	if c.Policy[EnvProduction].Expiry.D() != 30*time.Minute || c.Policy[EnvProduction].PromotionMaxAge.D() != 14*24*time.Hour {
		t.Fatalf("policy durations: %+v", c.Policy[EnvProduction])
	}
}

const badConfig = `
listen: nope
clusters:
  - name: staging
    environment: staging
    endpoints: [10.0.20.204]
    nodes:
      - {name: cp-1, address: 10.0.20.204, role: controlplane, host: pve5}
    credentials: {source: files, talosconfig: file:/etc/talosconfig}
  - name: Production
    environment: prod
    endpoints: []
    nodes:
      - {name: a, address: 10.0.30.1, role: controlplane, host: pve1}
      - {name: a, address: 10.0.30.2, role: boss, host: pve2}
      - {name: c, address: 10.0.20, role: worker}
    credentials: {source: files, talosconfig: "hunter2-inline-secret"}
releases:
  talos: [1.13]
`

func TestBadConfigListsEveryErrorWithPath(t *testing.T) {
	_, err := Parse([]byte(badConfig))
	var errs *Errors
	if !errors.As(err, &errs) {
		t.Fatalf("want *Errors, got %v", err)
	}
	msg := err.Error()
	for _, want := range []string{
		`listen: "nope" is not host:port`,
		`clusters[1].name: "Production" must be lower-case`,
		`clusters[1].environment: "prod" must be "staging" or "production"`,
		`clusters[1].endpoints: at least one Talos endpoint is required`,
		`clusters[1].nodes[1].name: "a" is used by another node`,
		`clusters[1].nodes[1].role: "boss" must be "controlplane" or "worker"`,
		`clusters[1].nodes[2].address: "10.0.20" is not an IP address`,
		`clusters[1].nodes[2].host: is required`,
		`clusters[1].credentials.talosconfig: secrets are given by reference only`,
		`releases.talos[0]: "1.13" is not a Talos release tag`,
	} {
		if !strings.Contains(msg, want) {
			t.Errorf("missing %q in:\n%s", want, msg)
		}
	}
	if strings.Contains(msg, "hunter2") {
		t.Fatalf("an inline secret was echoed: %s", msg)
	}
}

func TestUnknownFieldIsNamed(t *testing.T) {
	_, err := Parse([]byte("clusterz: []\n"))
	if err == nil || !strings.Contains(err.Error(), "clusterz") {
		t.Fatalf("want unknown field named, got %v", err)
	}
}

func TestRefResolve(t *testing.T) {
	t.Setenv("TB_TEST_SECRET", "s3cret")
	b, err := Ref("env:TB_TEST_SECRET").Resolve()
	if err != nil || string(b) != "s3cret" {
		t.Fatalf("resolve env: %q %v", b, err)
	}
	_, err = Ref("env:TB_TEST_MISSING").Resolve()
	if err == nil || !strings.Contains(err.Error(), "TB_TEST_MISSING is not set") {
		t.Fatalf("missing env: %v", err)
	}
	_, err = Ref("plain-secret").Resolve()
	if err == nil || strings.Contains(err.Error(), "plain-secret") {
		t.Fatalf("inline value must be refused without echo: %v", err)
	}
}

func TestParseDuration(t *testing.T) {
	for in, want := range map[string]time.Duration{"14d": 336 * time.Hour, "30m": 30 * time.Minute, "1h30m": 90 * time.Minute} {
		if got, err := ParseDuration(in); err != nil || got != want {
			t.Errorf("ParseDuration(%q) = %v, %v", in, got, err)
		}
	}
	if _, err := ParseDuration("7x"); err == nil {
		t.Error("7x must fail")
	}
}
