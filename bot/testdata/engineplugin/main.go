// Command engineplugin is a lifecycle plugin for the engine tests, launched the
// way built-ins are: `engineplugin plugin NAME`. It serves a read-only "probe"
// and a disruptive "roll" whose behaviour is chosen by --mode.
package main

import (
	"context"
	"fmt"
	"os"
	"strings"

	lifecyclev1 "github.com/talosbot/talosbot/plugins/proto/lifecycle/v1"
	"github.com/talosbot/talosbot/plugins/sdk"
)

type plugin struct{ name string }

func main() {
	name := "eng"
	if len(os.Args) == 3 && os.Args[1] == "plugin" {
		name = os.Args[2]
	}
	sdk.Serve(&plugin{name: name})
}

func (p *plugin) Describe(context.Context) (*lifecyclev1.Manifest, error) {
	ro, dis := lifecyclev1.Effect_EFFECT_READ_ONLY, lifecyclev1.Effect_EFFECT_DISRUPTIVE
	return &lifecyclev1.Manifest{Name: p.name, Version: "test", Commands: []*lifecyclev1.Command{
		{Name: "probe", Summary: "read-only probe", Effect: ro, Args: []*lifecyclev1.Arg{{Name: "cluster"},
			{Name: "protected", Flag: true, Description: "write the protected snapshot ids the host sent to this file"}}},
		{Name: "stash", Summary: "writes a file, leaves the cluster alone", Effect: lifecyclev1.Effect_EFFECT_WRITE, Args: []*lifecyclev1.Arg{{Name: "cluster"}}},
		{Name: "roll", Summary: "disruptive roll", Effect: dis, Args: []*lifecyclev1.Arg{
			{Name: "target", Required: true}, {Name: "cluster"},
			{Name: "mode", Flag: true, Description: "ok, fail, crash or wait"},
			{Name: "marker", Flag: true}, {Name: "drift", Flag: true},
			{Name: "artifact", Flag: true, Description: "report an artifact with this id"},
			{Name: "dry-run", Flag: true, Boolean: true},
		}},
	}}, nil
}

func (p *plugin) Plan(_ context.Context, req *lifecyclev1.OperationRequest) (*lifecyclev1.OperationPlan, error) {
	a := req.GetArgs()
	if req.GetCommand() == "stash" {
		return &lifecyclev1.OperationPlan{Summary: "stash", Steps: []*lifecyclev1.Step{{Id: "w", Title: "write"}}, CanonicalInputs: []byte("stash")}, nil
	}
	if req.GetCommand() == "probe" {
		return &lifecyclev1.OperationPlan{Summary: "probe", Steps: []*lifecyclev1.Step{{Id: "p", Title: "probe"}}, CanonicalInputs: []byte("probe")}, nil
	}
	if a["target"] == "refuse" {
		return &lifecyclev1.OperationPlan{Refusal: &lifecyclev1.Refusal{Rule: "R10", Reason: "skipping a minor", Fix: "upgrade to the next minor first"}}, nil
	}
	drift := ""
	if a["drift"] != "" {
		b, _ := os.ReadFile(a["drift"])
		drift = string(b)
	}
	return &lifecyclev1.OperationPlan{
		Summary: "roll to " + a["target"], Target: a["target"],
		Steps:           []*lifecyclev1.Step{{Id: "s1", Title: "first node"}, {Id: "s2", Title: "second node"}},
		CanonicalInputs: []byte(fmt.Sprintf("roll target=%s drift=%s nodes=%d", a["target"], drift, len(req.GetCluster().GetNodes()))),
	}, nil
}

func (p *plugin) Run(ctx context.Context, req *lifecyclev1.OperationRequest, r sdk.Reporter) error {
	a := req.GetArgs()
	if req.GetCommand() == "stash" {
		_ = r.StepOK("w", "written")
		return r.Result(&lifecyclev1.Result{Ok: true, Summary: "stashed"})
	}
	if req.GetCommand() == "probe" {
		if f := a["protected"]; f != "" {
			_ = os.WriteFile(f, []byte(strings.Join(req.GetSettings().GetBackups().GetProtectedSnapshots(), ",")), 0o600)
		}
		_ = r.StepOK("p", "all good")
		return r.Result(&lifecyclev1.Result{Ok: true, Summary: "healthy", Lines: []string{"✅ etcd: leader agreed"}})
	}
	switch a["mode"] {
	case "crash":
		_ = r.StepStarted("s1", "working")
		os.Exit(3)
	case "wait":
		_ = r.StepStarted("s1", "working")
		<-ctx.Done()
		if a["marker"] != "" {
			_ = os.WriteFile(a["marker"], []byte("cancelled"), 0o600)
		}
		return ctx.Err()
	case "fail":
		_ = r.StepFailed("s1", "node did not come back")
		// A careless plugin that names a declared value on failure: the
		// engine must not pass it on (R18).
		return r.Result(&lifecyclev1.Result{Ok: false, Summary: "roll failed", Error: "cp-1 timed out", Declared: map[string]string{"talos_version": a["target"]},
			SuggestedActions: []*lifecyclev1.SuggestedAction{{Label: "Rollback node cp-1", Command: "/talos probe staging"}}})
	}
	if id := a["artifact"]; id != "" {
		_ = r.Artifact(&lifecyclev1.Artifact{Id: id, Name: "etcd snapshot"})
	}
	_ = r.StepOK("s1", "done")
	_ = r.StepOK("s2", "done")
	return r.Result(&lifecyclev1.Result{Ok: true, Summary: "rolled to " + a["target"], Declared: map[string]string{"talos_version": a["target"]}})
}
