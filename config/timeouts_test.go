package config

import (
	"strings"
	"testing"
	"time"
)

const gateCluster = `
clusters:
  - name: staging
    environment: staging
    endpoints: [10.0.20.204]
    nodes:
      - {name: cp-1, address: 10.0.20.204, role: controlplane, host: pve5}
    credentials: {source: files, talosconfig: file:/etc/talosconfig}
policy: {staging: {operators: ["*"]}}
`

func TestGateWaitDefaults(t *testing.T) {
	c, err := Parse([]byte(gateCluster))
	if err != nil {
		t.Fatal(err)
	}
	if c.Timeouts.Gate.D() != time.Minute || c.Timeouts.GateAfter.D() != 10*time.Minute || c.Timeouts.Health.D() != 2*time.Minute {
		t.Fatalf("gate waits = %+v, want the documented 1m, 10m, 2m", c.Timeouts)
	}
	c, err = Parse([]byte(gateCluster + "timeouts: {gate: 90s, gate_after: 20m, health: 5m}\n"))
	if err != nil {
		t.Fatal(err)
	}
	if c.Timeouts.Gate.D() != 90*time.Second || c.Timeouts.GateAfter.D() != 20*time.Minute || c.Timeouts.Health.D() != 5*time.Minute {
		t.Fatalf("gate waits = %+v", c.Timeouts)
	}
}

func TestGateWaitValidation(t *testing.T) {
	for doc, want := range map[string]string{
		"timeouts: {gate: 5m, gate_after: 2m}\n": "timeouts.gate_after: 2m0s is shorter than one gate run (timeouts.gate 5m0s)",
		"timeouts: {health: 5h}\n":               "timeouts.health: 5h0m0s is longer than an operation may run (timeouts.run 4h0m0s)",
		"timeouts: {gate_after: 5h, run: 1h}\n":  "timeouts.gate_after: 5h0m0s is longer than an operation may run (timeouts.run 1h0m0s)",
		"timeouts: {health: -1s}\n":              "timeouts.health: \"-1s\" is negative",
		"timeouts: {gate_afte: 5m}\n":            "gate_afte",
	} {
		_, err := Parse([]byte(gateCluster + doc))
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%q: got %v, want %q", doc, err, want)
		}
	}
}
