package config

import (
	"strings"
	"testing"
	"time"
)

const snapBase = `
clusters:
  - name: staging
    environment: staging
    endpoints: [127.0.0.1]
    nodes: [{name: cp-1, address: 127.0.0.1, role: controlplane, host: pve1}]
    credentials: {source: files, talosconfig: file:/etc/talosconfig}
policy: {staging: {operators: [alice]}}
`

func TestSnapshotsDefaults(t *testing.T) {
	c, err := Parse([]byte(snapBase))
	if err != nil {
		t.Fatal(err)
	}
	if c.Snapshots.Keep != DefaultSnapshotKeep || c.Snapshots.Soak.D() != 7*24*time.Hour {
		t.Fatalf("defaults: %+v", c.Snapshots)
	}
	c, err = Parse([]byte(snapBase + `
snapshots:
  daily: 7
  encryption: {recipients: [age1ql3z7hjy54pw3hyww5ayyfg7zqgvc7w3j2elw8zmrj2kg5sfn9aqmcac8p], identity: "file:/etc/talosbot/age.key"}
  offsite: {endpoint: "127.0.0.1:9000", insecure: true, bucket: b, access_key_id: env:K, secret_access_key: env:S}
  schedule: {staging: "0 * * * *"}
`))
	if err != nil {
		t.Fatal(err)
	}
	if c.Snapshots.Keep != 0 || c.Snapshots.Daily != 7 || c.Snapshots.Offsite.Retention.Daily != 7 {
		t.Fatalf("generations: %+v, off-site %+v", c.Snapshots.Local(), c.Snapshots.Offsite.Retention)
	}
}

func TestSnapshotsInvalid(t *testing.T) {
	_, err := Parse([]byte(snapBase + `
snapshots:
  keep: -1
  soak: 400d
  encryption: {recipients: ["AGE-SECRET-KEY-1QQQ", "age1nope"]}
  offsite: {endpoint: "https://s3.example.com", bucket: "", access_key_id: "K"}
  schedule: {staging: "every hour", prod: "0 * * * *"}
`))
	if err == nil {
		t.Fatal("invalid snapshots section accepted")
	}
	for _, want := range []string{
		"snapshots.keep: -1 must be between",
		"snapshots.soak:",
		"snapshots.encryption.recipients[0]: is an age identity (secret key)",
		"snapshots.encryption.recipients[1]: \"age1nope\" is not an age recipient",
		"snapshots.offsite.endpoint: \"https://s3.example.com\" must be host[:port]",
		"snapshots.offsite.bucket: is required",
		"snapshots.offsite.access_key_id:",
		"snapshots.offsite.secret_access_key: is required",
		"snapshots.schedule.staging: \"every hour\" is not a cron expression",
		"snapshots.schedule.prod: no cluster is named \"prod\"",
	} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("missing %q in:\n%v", want, err)
		}
	}
	_, err = Parse([]byte(snapBase + `
snapshots:
  offsite: {endpoint: "s3.example.com", insecure: true, bucket: b, access_key_id: env:K, secret_access_key: env:S}
`))
	if err == nil || !strings.Contains(err.Error(), "plain http is allowed only for a loopback endpoint") {
		t.Fatalf("insecure remote endpoint: %v", err)
	}
}
