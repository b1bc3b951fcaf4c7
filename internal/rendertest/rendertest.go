// Package rendertest builds the operations the message tests render on
// every platform (render, slack, discord, the console in Chromium): a
// five-node production Talos upgrade shaped like the talosupgrade plugin's
// plan (snapshot, gate probes, per-node quorum/upgrade/gate steps, verify),
// awaiting approval and half way through its run, with its facts.
package rendertest

import (
	"fmt"
	"time"

	"google.golang.org/protobuf/encoding/protojson"

	"github.com/talosbot/talosbot/approvals"
	"github.com/talosbot/talosbot/bot/opfacts"
	lifecyclev1 "github.com/talosbot/talosbot/plugins/sdk/proto/lifecycle/v1"
	"github.com/talosbot/talosbot/state"
)

// Now is the moment the fixtures are rendered at.
var Now = time.Date(2026, 12, 1, 8, 1, 0, 0, time.UTC)

// Installer is the plan's one installer image.
const Installer = "factory.talos.dev/metal-installer/376567988ad370138ad8b2698212367b8edcb69b5fd68c80be1f2ec7d603b4ba:v1.13.9"

var (
	nodes  = []struct{ name, role string }{{"worker-1", "worker"}, {"worker-2", "worker"}, {"cp-2", "controlplane"}, {"cp-3", "controlplane"}, {"cp-1", "controlplane"}}
	probes = []string{"etcd", "nodes", "static-pods", "pods", "flux", "certificates"}
)

func plan() *lifecyclev1.OperationPlan {
	p := &lifecyclev1.OperationPlan{
		Summary:  "Talos v1.13.9 on production: 5 node(s) to upgrade one at a time (workers first, etcd leader cp-1 last), 0 already there",
		Target:   "v1.13.9",
		Warnings: []string{"worker-2 runs the only replica of deployment/ingress-nginx; it is unavailable while worker-2 drains"},
		Preconditions: []*lifecyclev1.Precondition{
			{Name: "upgrade path", Ok: true, Rule: "R10", Detail: "every node at v1.13.9 or one adjacent step below it"},
			{Name: "installer platform and schematic", Ok: true, Rule: "R14", Detail: "unchanged on every node"},
		},
	}
	for _, s := range []string{"snapshot-source", "snapshot-space", "snapshot-write", "snapshot-offsite", "snapshot-retention"} {
		p.Steps = append(p.Steps, &lifecyclev1.Step{Id: s, Title: "snapshot: " + s, Kind: "snapshot"})
	}
	for _, pr := range probes {
		p.Steps = append(p.Steps, &lifecyclev1.Step{Id: "gate-before/" + pr, Title: "gate before: " + pr, Kind: "gate"})
	}
	for i, n := range nodes {
		cp := n.role == "controlplane"
		if cp {
			p.Steps = append(p.Steps, &lifecyclev1.Step{Id: n.name + "/quorum-before", Title: n.name + ": etcd quorum before", Node: n.name, Kind: "quorum"})
		}
		p.Steps = append(p.Steps, &lifecyclev1.Step{Id: n.name + "/upgrade", Title: fmt.Sprintf("node %d/5 %s: v1.12.6 → v1.13.9", i+1, n.name), Node: n.name,
			FromVersion: "v1.12.6", ToVersion: "v1.13.9", Image: Installer, Kind: "upgrade"})
		if cp {
			p.Steps = append(p.Steps, &lifecyclev1.Step{Id: n.name + "/quorum-after", Title: n.name + ": etcd quorum after", Node: n.name, Kind: "quorum"})
		}
		p.Steps = append(p.Steps, &lifecyclev1.Step{Id: n.name + "/gate", Title: n.name + ": health gate", Node: n.name, Kind: "gate"})
	}
	p.Steps = append(p.Steps, &lifecyclev1.Step{Id: "verify", Title: "every node at v1.13.9, Flux ready", Kind: "verify"})
	for _, pr := range probes {
		p.Steps = append(p.Steps, &lifecyclev1.Step{Id: "gate-after/" + pr, Title: "gate after: " + pr, Kind: "gate"})
	}
	return p
}

func facts() *opfacts.Facts {
	f := &opfacts.Facts{Now: Now, Required: 2, Approvers: []string{"bob", "dave"}, Roles: map[string]string{}}
	for _, n := range nodes {
		f.Roles[n.name] = n.role
	}
	f.Staging = &state.Operation{ID: "5f2c81d0a9e4", Cluster: "staging", Command: "upgrade talos", State: state.StateSucceeded,
		StartedAt: Now.Add(-26 * time.Hour), EndedAt: Now.Add(-25 * time.Hour)}
	f.Snapshot = &state.Operation{ID: "77aa01b2c3d4", Cluster: "production", Command: "snapshot", State: state.StateSucceeded, EndedAt: Now.Add(-3 * time.Hour)}
	// Two past runs: nodes took 4 and 6 minutes.
	for i, per := range []time.Duration{4 * time.Minute, 6 * time.Minute} {
		o := &state.Operation{ID: fmt.Sprintf("past%d", i), Cluster: "production", Command: "upgrade talos", State: state.StateSucceeded}
		o.Plan, _ = protojson.Marshal(plan())
		start := Now.Add(-time.Duration(10*(i+1)) * 24 * time.Hour)
		o.StartedAt = start
		t := start.Add(2 * time.Minute)
		for _, n := range nodes {
			o.Steps = append(o.Steps, state.Step{ID: n.name + "/upgrade", Node: n.name, Status: "ok", StartedAt: t, EndedAt: t.Add(per - time.Minute)},
				state.Step{ID: n.name + "/gate", Node: n.name, Status: "ok", StartedAt: t.Add(per - time.Minute), EndedAt: t.Add(per)})
			t = t.Add(per)
		}
		o.EndedAt = t.Add(time.Minute)
		f.Past = append(f.Past, o)
	}
	return f
}

func base() *state.Operation {
	p := plan()
	raw, _ := protojson.Marshal(p)
	op := &state.Operation{ID: "9c41d7e2b6a0", Cluster: "production", Environment: "production", Command: "upgrade talos",
		Args: map[string]string{"version": "v1.13.9"}, Target: "v1.13.9", Disruptive: true, Requester: "alice", Channel: "ops",
		Digest: "3f6d2a9be01c4d8f9e77a0b1c2d3e4f5", Plan: raw, Flags: []string{approvals.FlagPromotedFrom + "5f2c81d0a9e4"},
		CreatedAt: Now.Add(-time.Minute)}
	for _, s := range p.GetSteps() {
		op.Steps = append(op.Steps, state.Step{ID: s.GetId(), Title: s.GetTitle(), Node: s.GetNode(), Status: "pending"})
	}
	return op
}

// Awaiting is the upgrade awaiting its two approvals, expiring in 30 min.
func Awaiting() (*state.Operation, *opfacts.Facts) {
	op := base()
	op.State = state.StateAwaitingApproval
	op.ExpiresAt = Now.Add(30 * time.Minute)
	return op, facts()
}

// Running is the upgrade approved by bob and dave, with its first two nodes
// done, cp-2 upgrading, and one gate probe that could not run.
func Running() (*state.Operation, *opfacts.Facts) {
	op := base()
	op.State = state.StateRunning
	op.StartedAt = Now.Add(-11 * time.Minute)
	op.Attempts = 1
	f := facts()
	f.Approvers = nil
	f.Approvals = []state.Approval{{OpID: op.ID, User: "bob", Digest: op.Digest, At: Now.Add(-13 * time.Minute)},
		{OpID: op.ID, User: "dave", Digest: op.Digest, At: Now.Add(-12 * time.Minute)}}
	t := op.StartedAt
	for i := range op.Steps {
		s := &op.Steps[i]
		switch {
		case s.Node == "" && s.ID != "verify" && s.ID[:min(len(s.ID), 10)] != "gate-after":
			s.Status, s.StartedAt, s.EndedAt = "ok", t, t.Add(10*time.Second)
			if s.ID == "gate-before/flux" {
				s.Status, s.Detail = "skipped", "no Flux installed"
			}
		case s.Node == "worker-1" || s.Node == "worker-2":
			d := 2 * time.Minute
			s.Status, s.StartedAt, s.EndedAt, s.Detail = "ok", t, t.Add(d), "ok"
			t = t.Add(d)
		case s.Node == "cp-2" && s.ID == "cp-2/quorum-before":
			s.Status, s.StartedAt, s.EndedAt, s.Detail = "ok", t, t.Add(30*time.Second), "3/3 members healthy"
		case s.ID == "cp-2/upgrade":
			s.Status, s.StartedAt = "running", t.Add(30*time.Second)
		}
	}
	return op, f
}
