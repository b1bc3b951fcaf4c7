package main

import (
	"strings"
	"testing"

	"github.com/talosbot/talosbot/plugins/sdk"
	"github.com/talosbot/talosbot/plugins/sdk/sdktest"
)

func request(name string) *sdk.OperationRequest {
	return &sdk.OperationRequest{Command: "hello", Args: map[string]string{"name": name},
		Cluster: sdk.Cluster{Name: "staging", Nodes: []*sdk.Node{{Name: "cp-1", Role: "controlplane"}}}}
}

func TestHelloPlanAndRun(t *testing.T) {
	plan, err := sdktest.Plan(t.Context(), hello{}, request("ops"))
	if err != nil || plan.Refusal != nil || !strings.Contains(string(plan.CanonicalInputs), `name="ops"`) {
		t.Fatalf("plan = %v, %v", plan, err)
	}
	rec, err := sdktest.Run(t.Context(), hello{}, request("ops"), nil)
	res := rec.FinalResult()
	if err != nil || !res.OK || res.Summary != "👋 hello, ops, from staging" || len(res.Lines) != 1 {
		t.Fatalf("run: %v, %v", res, err)
	}
}

func TestHelloRefusesLongName(t *testing.T) {
	plan, err := sdktest.Plan(t.Context(), hello{}, request(strings.Repeat("x", maxName+1)))
	if err != nil || plan.Refusal.Rule != "EX1" || plan.Refusal.Fix == "" {
		t.Fatalf("plan = %v, %v: want an EX1 refusal with a fix", plan, err)
	}
}

func TestHelloUnknownCommandRefusedBySDK(t *testing.T) {
	req := request("ops")
	req.Command = "goodbye"
	if _, err := sdktest.Plan(t.Context(), hello{}, req); err == nil {
		t.Fatal("the SDK must refuse a command the manifest does not declare")
	}
}
