package recover

import (
	"context"
	"fmt"
	pathpkg "path"
	"strings"

	"github.com/talosbot/talosbot/plugins/cluster"
	"github.com/talosbot/talosbot/plugins/sdk"
)

// GuideStep is one command of the guide and what to check before the next.
type GuideStep struct {
	Command string // a command line, runnable as written (talosctl reads TALOSCONFIG from the environment)
	Check   string
	// Node is the node the command targets ("" for a local command).
	Node string
}

// GuideSource is the snapshot the guide restores, as the person following
// it reaches it.
type GuideSource struct {
	Path      string // the file on the bot's host
	Encrypted bool
	// Remote, when the only copy is off-site, is its s3:// URL and API its
	// S3 endpoint: the guide downloads it first, since the bot's own
	// download is removed when the guide is rendered.
	Remote string
	API    string
}

// Guide is the manual recovery of a cluster from a snapshot.
type Guide struct {
	Snapshot string // the snapshot file the commands restore
	Steps    []GuideStep
	Notes    []string
}

// BuildGuide renders Talos's recovery path as talosctl commands for inv
// and the snapshot src (plain, or .age). view, when the API answered,
// says which control planes are stale; without it every other control
// plane is listed for the EPHEMERAL reset "only if its etcd is Running".
// The commands name no credential: talosctl reads TALOSCONFIG (or
// ~/.talos/config), and -e points at the node itself so that no other node
// needs to answer.
func BuildGuide(inv cluster.Inventory, src GuideSource, view *View) Guide {
	var g Guide
	path := src.Path
	if src.Remote != "" {
		path = pathpkg.Base(src.Remote)
		g.Steps = append(g.Steps, GuideStep{Command: fmt.Sprintf("aws s3 cp --endpoint-url %s %s %s", src.API, src.Remote, path),
			Check: path + " exists (any S3 client will do; the bot keeps no local copy of this snapshot)"})
	}
	g.Snapshot = path
	cps := inv.ControlPlanes()
	tc := func(n cluster.Node, args string) string {
		return fmt.Sprintf("talosctl -n %s -e %s %s", n.Address, n.Address, args)
	}
	for _, n := range cps {
		g.Steps = append(g.Steps, GuideStep{Node: n.Name, Command: tc(n, "service etcd"),
			Check: "STATE is Preparing (empty data, waiting to join) or Running with HEALTH not OK (stale data, no leader). If a majority is Running and OK, quorum is NOT lost: stop here and replace the broken members instead"})
	}
	recovery := cps[0]
	stale := map[string]bool{}
	known := view != nil
	if known {
		if m, _, err := view.RecoveryNode(); err == nil {
			if n, ok := inv.Node(m.Node); ok {
				recovery = n
			}
		}
		for _, m := range view.Members {
			if m.State == Stale || m.State == Failed {
				stale[m.Node] = true
			}
		}
	}
	snap := path
	if src.Encrypted {
		snap = "db.snapshot"
		g.Steps = append(g.Steps, GuideStep{Command: fmt.Sprintf("age -d -i <your age identity file> -o db.snapshot %s", path),
			Check: "db.snapshot exists; keep it private (chmod 600) and delete it when done"})
	}
	for _, n := range cps {
		if n.Name == recovery.Name || (known && !stale[n.Name]) {
			continue
		}
		check := "the node reboots; then `" + tc(n, "service etcd") + "` shows STATE Preparing"
		if !known {
			check = "ONLY if its etcd is Running (stale data); " + check
		}
		g.Steps = append(g.Steps, GuideStep{Node: n.Name, Command: tc(n, "reset --graceful=false --reboot --system-labels-to-wipe=EPHEMERAL --wait=false"), Check: check})
	}
	if recoveryStale := known && stale[recovery.Name]; recoveryStale || !known {
		g.Notes = append(g.Notes, fmt.Sprintf("%s must show Preparing before the bootstrap; if it is Running (stale data), reset its EPHEMERAL as above first", recovery.Name))
		g.Notes = append(g.Notes, "Talos v1.14 with a dedicated ETCD volume (a VolumeConfig named ETCD that provisions it; `talosctl get volumestatus ETCD` shows a location): wiping EPHEMERAL no longer clears etcd, so every reset above takes --system-labels-to-wipe=EPHEMERAL,ETCD")
	}
	g.Steps = append(g.Steps,
		GuideStep{Node: recovery.Name, Command: tc(recovery, "bootstrap --recover-from="+snap),
			Check: "it prints `recovering from snapshot …: hash …, revision N`; AlreadyExists means this node's data dir is not empty (reset its EPHEMERAL, or pick a node showing Preparing)"},
		GuideStep{Node: recovery.Name, Command: tc(recovery, "service etcd"),
			Check: "STATE Running and HEALTH OK (repeat until it is; STATE Failed with \"error recovering from the snapshot\" means the file does not restore)"},
		GuideStep{Node: recovery.Name, Command: tc(recovery, "etcd members"),
			Check: fmt.Sprintf("%d members, LEARNER false for each (repeat until every control plane has joined and been promoted)", len(cps))},
		GuideStep{Node: recovery.Name, Command: fmt.Sprintf("talosctl -n %s -e %s etcd status", strings.Join(cluster.Addresses(cps), ","), recovery.Address),
			Check: "every row names the same LEADER"},
	)
	health := fmt.Sprintf("talosctl -n %s -e %s health --control-plane-nodes %s", recovery.Address, recovery.Address, strings.Join(cluster.Addresses(cps), ","))
	var workers []cluster.Node
	for _, n := range inv.Nodes {
		if !n.IsControlPlane() {
			workers = append(workers, n)
		}
	}
	if len(workers) > 0 {
		health += " --worker-nodes " + strings.Join(cluster.Addresses(workers), ",")
	}
	g.Steps = append(g.Steps, GuideStep{Node: recovery.Name, Command: health + " --wait-timeout 10m", Check: "all checks OK: the recovery is done; data written after the snapshot is lost"})
	return g
}

// Lines renders the guide for chat.
func (g Guide) Lines() []string {
	out := []string{"📖 Export TALOSCONFIG to your talosconfig first (the commands name no credential)."}
	for i, s := range g.Steps {
		out = append(out, fmt.Sprintf("%d. `%s`", i+1, s.Command), "   check: "+s.Check)
	}
	for _, n := range g.Notes {
		out = append(out, "⚠️ "+n)
	}
	return out
}

func (p *Plugin) planGuide(req *sdk.OperationRequest) (*sdk.OperationPlan, error) {
	inv, err := cluster.InventoryFrom(&req.Cluster)
	if err != nil {
		return nil, err
	}
	return &sdk.OperationPlan{Summary: "the talosctl commands to recover etcd of " + inv.Name + " (read-only)",
		Steps:           []*sdk.Step{{ID: "guide", Title: "render the recovery guide", Kind: "note"}},
		CanonicalInputs: sdk.NewCanonical(req).Str("from", req.Args["from"]).Bytes()}, nil
}

// runGuide never needs the cluster: the snapshot comes from the bot's
// storage, and the evidence, when the API answers, only sharpens the list
// of members to reset.
func (p *Plugin) runGuide(ctx context.Context, req *sdk.OperationRequest, r sdk.Reporter) error {
	inv, err := cluster.InventoryFrom(&req.Cluster)
	if err != nil {
		return err
	}
	snap, err := OpenSnapshot(ctx, req, inv.Name, req.Args["from"], false)
	src, note := GuideSource{Path: "<snapshot file>"}, ""
	if err != nil {
		note = "⚠️ no verified snapshot: " + err.Error()
	} else {
		defer snap.Close()
		src = GuideSource{Path: snap.Stored, Encrypted: snap.Encrypted, Remote: snap.Remote, API: snap.RemoteAPI}
		rev := fmt.Sprintf("revision %d", snap.Revision)
		if snap.Encrypted {
			rev = "age-encrypted (decrypt it with the age command below; the guide never holds the identity)"
		}
		note = fmt.Sprintf("💾 %s: %s, taken %s, off-site %s", snap.ID, rev, snap.At.UTC().Format("2006-01-02 15:04 MST"), snap.Offsite)
	}
	var view *View
	if s, err := cluster.OpenRequest(ctx, req); err == nil {
		v := ReadView(ctx, s.Clients, inv, evidenceTimeout(req.Settings))
		_ = s.Close()
		if v.Count(Unreachable) < len(v.Members) {
			view = &v
		}
	}
	g := BuildGuide(inv, src, view)
	lines := append([]string{note}, g.Lines()...)
	if view != nil {
		lines = append([]string{"etcd now: " + strings.Join(view.Lines(), "; ")}, lines...)
	} else {
		lines = append([]string{"no control plane answered: the reset list covers every other control plane"}, lines...)
	}
	_ = r.StepOK("guide", fmt.Sprintf("%d commands", len(g.Steps)))
	return r.Result(&sdk.Result{OK: true, Summary: "etcd recovery guide for " + inv.Name, Lines: lines})
}
