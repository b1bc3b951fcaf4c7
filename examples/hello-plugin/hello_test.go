package main

import (
	"strings"
	"testing"

	lifecyclev1 "github.com/talosbot/talosbot/plugins/sdk/proto/lifecycle/v1"
	"github.com/talosbot/talosbot/plugins/sdk/sdktest"
)

func request(name string) *lifecyclev1.OperationRequest {
	return &lifecyclev1.OperationRequest{Command: "hello", Args: map[string]string{"name": name},
		Cluster: &lifecyclev1.Cluster{Name: "staging", Nodes: []*lifecyclev1.Node{{Name: "cp-1", Role: "controlplane"}}}}
}

func TestHelloPlanAndRun(t *testing.T) {
	plan, err := sdktest.Plan(t.Context(), hello{}, request("ops"))
	if err != nil || plan.GetRefusal() != nil || !strings.Contains(string(plan.GetCanonicalInputs()), `name="ops"`) {
		t.Fatalf("plan = %v, %v", plan, err)
	}
	rec, err := sdktest.Run(t.Context(), hello{}, request("ops"), nil)
	res := rec.FinalResult()
	if err != nil || !res.GetOk() || res.GetSummary() != "👋 hello, ops, from staging" || len(res.GetLines()) != 1 {
		t.Fatalf("run: %v, %v", res, err)
	}
}

func TestHelloRefusesLongName(t *testing.T) {
	plan, err := sdktest.Plan(t.Context(), hello{}, request(strings.Repeat("x", maxName+1)))
	if err != nil || plan.GetRefusal().GetRule() != "EX1" || plan.GetRefusal().GetFix() == "" {
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
