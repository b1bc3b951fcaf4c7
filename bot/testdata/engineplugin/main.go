// Command engineplugin is a lifecycle plugin for the engine tests, launched the
// way built-ins are: `engineplugin plugin NAME`. It serves a read-only "probe"
// and a disruptive "roll" whose behaviour is chosen by --mode. "roll" declares
// itself the Talos-upgrade staging drill, "stash" the etcd-restore drill,
// and "drills" needs the drill
// evidence, so the engine tests see inputs served by declaration only.
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
			{Name: "protected", Flag: true, Description: "write the protected snapshot ids the host sent to this file"},
			{Name: "inputs", Flag: true, Description: "write the typed inputs the host sent to this file"}}},
		{Name: "drills", Summary: "needs the staging drill evidence", Effect: ro, Needs: []lifecyclev1.Need{lifecyclev1.Need_NEED_STAGING_DRILLS},
			Args: []*lifecyclev1.Arg{{Name: "cluster"}, {Name: "inputs", Flag: true, Description: "write the typed inputs the host sent to this file"}}},
		{Name: "stash", Summary: "writes a file, leaves the cluster alone", Effect: lifecyclev1.Effect_EFFECT_WRITE, Drill: lifecyclev1.Drill_DRILL_ETCD_RESTORE, Args: []*lifecyclev1.Arg{{Name: "cluster"}}},
		{Name: "roll", Summary: "disruptive roll", Effect: dis, Drill: lifecyclev1.Drill_DRILL_TALOS_UPGRADE, Args: []*lifecyclev1.Arg{
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
	if req.GetCommand() == "probe" || req.GetCommand() == "drills" {
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

// inputs renders the host-served typed inputs for the engine tests.
func inputs(req *lifecyclev1.OperationRequest) string {
	s := req.GetSettings()
	drills := "unset"
	if d := s.GetStagingDrills(); d != nil {
		var ev []string
		for _, e := range d.GetDrills() {
			ev = append(ev, fmt.Sprintf("%s:%s:%s", e.GetDrill(), e.GetCommand(), e.GetOperationId()))
		}
		drills = "[" + strings.Join(ev, ",") + "]"
	}
	tf := s.GetTerraform()
	last := strings.Fields(s.GetBackups().GetLastDrill()) // "<op-id> <state> <time>"
	if len(last) > 2 {
		last = last[:2]
	}
	return fmt.Sprintf("attempt=%d drills=%s terraform=%s,%s,%s,%t last_drill=%s", req.GetAttempt(), drills,
		tf.GetRoot(), tf.GetBinary(), tf.GetConfigKey(), tf.GetPlanBeforeUpgrade(), strings.Join(last, " "))
}

func (p *plugin) Run(ctx context.Context, req *lifecyclev1.OperationRequest, r sdk.Reporter) error {
	a := req.GetArgs()
	if req.GetCommand() == "stash" {
		_ = r.StepOK("w", "written")
		return r.Result(&lifecyclev1.Result{Ok: true, Summary: "stashed"})
	}
	if f := a["inputs"]; f != "" {
		_ = os.WriteFile(f, []byte(inputs(req)), 0o600)
	}
	if req.GetCommand() == "probe" || req.GetCommand() == "drills" {
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
