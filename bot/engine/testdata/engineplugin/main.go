// Command engineplugin is a lifecycle plugin for the engine tests, launched the
// way built-ins are: `engineplugin plugin NAME`. It serves a read-only "probe"
// and a disruptive "roll" whose behaviour is chosen by --mode. "roll" declares
// itself the Talos-upgrade staging drill, "stash" the etcd-restore drill,
// and "drills" needs the drill
// evidence, so the engine tests see inputs served by declaration only.
package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"time"

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

func (p *plugin) Describe(context.Context) (*sdk.Manifest, error) {
	ro, dis := sdk.EffectReadOnly, sdk.EffectDisruptive
	return &sdk.Manifest{Name: p.name, Version: "test", Commands: []*sdk.Command{
		{Name: "probe", Summary: "read-only probe", Effect: ro, Args: []*sdk.Arg{{Name: "cluster"},
			{Name: "protected", Flag: true, Description: "write the protected snapshot ids the host sent to this file"},
			{Name: "inputs", Flag: true, Description: "write the typed inputs the host sent to this file"}}},
		{Name: "drills", Summary: "needs the staging drill evidence", Effect: ro, Needs: []sdk.Need{sdk.NeedStagingDrills},
			Args: []*sdk.Arg{{Name: "cluster"}, {Name: "inputs", Flag: true, Description: "write the typed inputs the host sent to this file"}}},
		{Name: "stash", Summary: "writes a file, leaves the cluster alone", Effect: sdk.EffectWrite, Drill: sdk.DrillEtcdRestore, Args: []*sdk.Arg{{Name: "cluster"}}},
		// versions answers /talos status (status_label): its Plan reports
		// the declared "versions" of the cluster, fails on "fail", and on
		// "down" waits for the host's deadline, as a dead cluster would.
		{Name: "versions", Summary: "status provider", Effect: ro, StatusLabel: "versions", Args: []*sdk.Arg{{Name: "cluster"}}},
		// push is disruptive and does not pause between nodes: the host
		// must not offer Pause on it.
		{Name: "push", Summary: "disruptive, no pause", Effect: dis, Args: []*sdk.Arg{{Name: "cluster"}}},
		// tidy is a maintenance command (as the etcd defrag): disruptive,
		// safe for the scheduler to start in the maintenance window.
		{Name: "tidy", Summary: "disruptive maintenance", Effect: dis, Maintenance: true, Args: []*sdk.Arg{{Name: "cluster"}}},
		{Name: "roll", Summary: "disruptive roll", Effect: dis, Drill: sdk.DrillTalosUpgrade, PausesBetweenNodes: true, Args: []*sdk.Arg{
			{Name: "target", Required: true}, {Name: "cluster"},
			{Name: "mode", Flag: true, Description: "ok, fail, crash or wait"},
			{Name: "marker", Flag: true}, {Name: "drift", Flag: true},
			{Name: "artifact", Flag: true, Description: "report an artifact with this id"},
			{Name: sdk.ArgDryRun, Flag: true, Boolean: true},
		}},
	}}, nil
}

func (p *plugin) Plan(ctx context.Context, req *sdk.OperationRequest) (*sdk.OperationPlan, error) {
	a := req.Args
	switch req.Command {
	case "versions":
		switch v := req.Cluster.Declared["versions"]; v {
		case "down":
			<-ctx.Done()
			return nil, ctx.Err()
		case "fail":
			return nil, errors.New("no node answered with its Talos version")
		default:
			return &sdk.OperationPlan{Summary: "versions", Status: strings.Split(v, ","), CanonicalInputs: []byte("versions")}, nil
		}
	case "push":
		return &sdk.OperationPlan{Summary: "push", Steps: []*sdk.Step{{ID: "p", Title: "push"}}, CanonicalInputs: []byte("push")}, nil
	}
	if req.Command == "tidy" {
		return &sdk.OperationPlan{Summary: "tidy", Steps: []*sdk.Step{{ID: "t", Title: "tidy"}}, CanonicalInputs: []byte("tidy")}, nil
	}
	if req.Command == "stash" {
		return &sdk.OperationPlan{Summary: "stash", Steps: []*sdk.Step{{ID: "w", Title: "write"}}, CanonicalInputs: []byte("stash")}, nil
	}
	if req.Command == "probe" || req.Command == "drills" {
		return &sdk.OperationPlan{Summary: "probe", Steps: []*sdk.Step{{ID: "p", Title: "probe"}}, CanonicalInputs: []byte("probe")}, nil
	}
	if a["target"] == "refuse" {
		return &sdk.OperationPlan{Refusal: &sdk.Refusal{Rule: "R10", Reason: "skipping a minor", Fix: "upgrade to the next minor first"}}, nil
	}
	if strings.HasPrefix(a["mode"], "nodes") {
		return nodesPlan(req), nil
	}
	drift := ""
	if a["drift"] != "" {
		b, _ := os.ReadFile(a["drift"])
		drift = string(b)
	}
	return &sdk.OperationPlan{
		Summary: "roll to " + a["target"], Target: a["target"],
		Steps:           []*sdk.Step{{ID: "s1", Title: "first node"}, {ID: "s2", Title: "second node"}},
		CanonicalInputs: []byte(fmt.Sprintf("roll target=%s drift=%s nodes=%d", a["target"], drift, len(req.Cluster.Nodes))),
	}, nil
}

// inputs renders the host-served typed inputs for the engine tests.
func inputs(req *sdk.OperationRequest) string {
	s := &req.Evidence
	drills := "unset"
	if d := s.StagingDrills; d != nil {
		var ev []string
		for _, e := range d.GetDrills() {
			ev = append(ev, fmt.Sprintf("%s:%s:%s", e.Drill, e.Command, e.OperationID))
		}
		drills = "[" + strings.Join(ev, ",") + "]"
	}
	tf := s.Terraform
	last := strings.Fields(s.Backups.GetLastDrill()) // "<op-id> <state> <time>"
	if len(last) > 2 {
		last = last[:2]
	}
	return fmt.Sprintf("attempt=%d drills=%s terraform=%s,%s,%s last_drill=%s", req.Attempt, drills,
		tf.GetRoot(), tf.GetBinary(), tf.GetConfigKey(), strings.Join(last, " "))
}

func (p *plugin) Run(ctx context.Context, req *sdk.OperationRequest, r sdk.Reporter) error {
	a := req.Args
	if req.Command == "push" {
		_ = r.StepStarted("p", "pushing")
		<-ctx.Done()
		return ctx.Err()
	}
	if req.Command == "tidy" {
		_ = r.StepOK("t", "tidied")
		return r.Result(&sdk.Result{OK: true, Summary: "tidied"})
	}
	if req.Command == "stash" {
		_ = r.StepOK("w", "written")
		return r.Result(&sdk.Result{OK: true, Summary: "stashed"})
	}
	if f := a["inputs"]; f != "" {
		_ = os.WriteFile(f, []byte(inputs(req)), 0o600)
	}
	if req.Command == "probe" || req.Command == "drills" {
		if f := a["protected"]; f != "" {
			_ = os.WriteFile(f, []byte(strings.Join(req.Evidence.Backups.GetProtectedSnapshots(), ",")), 0o600)
		}
		_ = r.StepOK("p", "all good")
		return r.Result(&sdk.Result{OK: true, Summary: "healthy", Lines: []string{"✅ etcd: leader agreed"}})
	}
	if strings.HasPrefix(a["mode"], "nodes") {
		return nodesRun(ctx, req, r)
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
		return r.Result(&sdk.Result{OK: false, Summary: "roll failed", Error: "cp-1 timed out", Declared: map[string]string{"talos_version": a["target"]},
			SuggestedActions: []*sdk.SuggestedAction{{Label: "Rollback node cp-1", Command: "/talos probe staging"}}})
	}
	if id := a["artifact"]; id != "" {
		_ = r.Artifact(&sdk.Artifact{ID: id, Name: "etcd snapshot"})
	}
	_ = r.StepOK("s1", "done")
	_ = r.StepOK("s2", "done")
	return r.Result(&sdk.Result{OK: true, Summary: "rolled to " + a["target"], Declared: map[string]string{"talos_version": a["target"]}})
}

// nodeVersions reads --drift's file of "node=version" lines: each node's
// version now (v1 when unlisted).
func nodeVersions(req *sdk.OperationRequest) map[string]string {
	out := map[string]string{}
	for _, n := range req.Cluster.Nodes {
		out[n.Name] = "v1"
	}
	if f := req.Args["drift"]; f != "" {
		b, _ := os.ReadFile(f)
		for _, l := range strings.Fields(string(b)) {
			if k, v, ok := strings.Cut(l, "="); ok {
				out[k] = v
			}
		}
	}
	return out
}

// nodesPlan is a node-by-node roll to the target: one versioned step and a
// check per node; its digest covers every node's version now.
func nodesPlan(req *sdk.OperationRequest) *sdk.OperationPlan {
	target := req.Args["target"]
	vs := nodeVersions(req)
	p := &sdk.OperationPlan{Summary: "roll nodes to " + target, Target: target}
	canon := "nodes target=" + target
	for _, n := range req.Cluster.Nodes {
		name := n.Name
		p.Steps = append(p.Steps,
			&sdk.Step{ID: "node/" + name + "/upgrade", Title: name + ": upgrade", Node: name, FromVersion: vs[name], ToVersion: target, Kind: "upgrade"},
			&sdk.Step{ID: "node/" + name + "/check", Title: name + ": check", Node: name, Kind: "gate"})
		canon += " " + name + "=" + vs[name]
	}
	p.CanonicalInputs = []byte(canon)
	return p
}

// nodesRun upgrades node after node (writing the new version to --drift's
// file), skipping nodes already at the target. "nodes-wait" waits, with the
// second node's upgrade running, for the context to end; "nodes" finishes.
func nodesRun(ctx context.Context, req *sdk.OperationRequest, r sdk.Reporter) error {
	a := req.Args
	target := a["target"]
	vs := nodeVersions(req)
	for i, n := range req.Cluster.Nodes {
		name := n.Name
		up, check := "node/"+name+"/upgrade", "node/"+name+"/check"
		if vs[name] == target {
			_ = r.StepSkipped(up, "already at "+target)
			_ = r.StepSkipped(check, "already at "+target)
			continue
		}
		if i == 1 && a["mode"] == "nodes-pause" && req.Attempt == 1 {
			// Hold at the boundary until the host asks for the pause.
			for !sdk.PauseRequested(req) && ctx.Err() == nil {
				time.Sleep(10 * time.Millisecond) // polling a file another process writes
			}
		}
		if sdk.PauseRequested(req) {
			return r.Result(sdk.PausedResult(name, nil))
		}
		if i == 1 && a["mode"] == "nodes-selfpause" && req.Attempt == 1 {
			// The plugin's own pause (a storage wait past its limit):
			// nobody asked, the run still pauses rather than fails.
			return r.Result(sdk.PausedResult(name, []string{"⏸️ after " + req.Cluster.Nodes[0].Name + ": Longhorn not healthy again within 2h0m0s"}))
		}
		_ = r.Step(&sdk.StepEvent{StepID: up, Status: sdk.StepRunning, Node: name, FromVersion: vs[name], ToVersion: target})
		if i == 1 && a["mode"] == "nodes-wait" && req.Attempt == 1 {
			<-ctx.Done()
			return ctx.Err()
		}
		vs[name] = target
		if f := a["drift"]; f != "" {
			var lines []string
			for _, m := range req.Cluster.Nodes {
				lines = append(lines, m.Name+"="+vs[m.Name])
			}
			_ = os.WriteFile(f, []byte(strings.Join(lines, "\n")), 0o600)
		}
		_ = r.StepOK(up, "at "+target)
		_ = r.StepOK(check, "healthy")
	}
	return r.Result(&sdk.Result{OK: true, Summary: "every node at " + target})
}
