// Package snapshot is the built-in plugin behind `/talos snapshot [cluster]`:
// a verified etcd snapshot copied off-cluster (etcd.TakeSnapshot, rule
// R12) with retention. It is READ_ONLY: it reads etcd and writes only to the
// bot's own snapshot directory, so it never disrupts the cluster and never
// waits for the cluster lock.
package snapshot

import (
	"context"
	"fmt"
	"time"

	"github.com/talosbot/talosbot/internal/version"
	"github.com/talosbot/talosbot/plugins/cluster"
	"github.com/talosbot/talosbot/plugins/cluster/etcd"
	"github.com/talosbot/talosbot/plugins/sdk"
)

// Name is the plugin's catalogue name.
const Name = "snapshot"

// Command is the chat command.
const Command = "snapshot"

// Plugin implements sdk.Plugin. now stamps snapshot names (nil: time.Now).
type Plugin struct {
	now       func() time.Time
	freeSpace func(string) (uint64, error)
}

func (p *Plugin) clock() func() time.Time {
	if p.now != nil {
		return p.now
	}
	return time.Now
}

// New returns the plugin.
func New() sdk.Plugin { return &Plugin{} }

// Describe returns the manifest.
func (*Plugin) Describe(context.Context) (*sdk.Manifest, error) {
	return &sdk.Manifest{Name: Name, Version: version.Version, Commands: []*sdk.Command{{
		Name: Command,
		Summary: "Take a verified etcd snapshot and store it off-cluster in snapshot_dir " +
			"(does not disrupt the cluster, but writes the snapshot and applies retention: operators only)",
		Args: []*sdk.Arg{{Name: "cluster", Description: "cluster to snapshot (default: the channel's cluster)"}},
		// WRITE, not READ_ONLY: the cluster is only read, but the run writes
		// a file and deletes old ones (retention), so viewers may not run it.
		Effect: sdk.EffectWrite,
		// It takes a snapshot: the host sends it the off-site credentials.
		NeedsSnapshot: true,
		Example:       "/talos snapshot production",
	}, drillCommand(), listCommand()}}, nil
}

// Plan lists the steps; it does not contact the cluster.
func (p *Plugin) Plan(_ context.Context, req *sdk.OperationRequest) (*sdk.OperationPlan, error) {
	inv, err := cluster.InventoryFrom(&req.Cluster)
	if err != nil {
		return nil, err
	}
	switch req.Command {
	case DrillCommand:
		return p.planDrill(req, inv)
	case ListCommand:
		return planList(inv), nil
	}
	opts := etcd.SnapshotOptionsFrom(req.Evidence)
	if err := cluster.CheckSnapshotDir(opts.Dir, "the snapshot"); err != nil {
		return sdk.RefusalPlan(err)
	}
	if err := cluster.CheckRole(req.Credentials.Talosconfig, "the snapshot", cluster.SnapshotMethods); err != nil {
		return sdk.RefusalPlan(err)
	}
	plan := &sdk.OperationPlan{
		Summary: fmt.Sprintf("etcd snapshot of %s into %s/%s, keep %s (read-only: no disruption)",
			inv.Name, opts.Dir, inv.Name, opts.Retention),
		Target: inv.Name,
	}
	for _, s := range etcd.SnapshotSteps() {
		plan.Steps = append(plan.Steps, &sdk.Step{ID: s[0], Title: s[1], Kind: "snapshot"})
	}
	plan.CanonicalInputs = sdk.NewCanonical(req).Str("dir", opts.Dir).Str("retention", opts.Retention.String()).
		List("controlplanes", cluster.EtcdTargets(inv)).Bytes()
	return plan, nil
}

// Run takes the snapshot and reports it as an artifact.
func (p *Plugin) Run(ctx context.Context, req *sdk.OperationRequest, r sdk.Reporter) error {
	inv, err := cluster.InventoryFrom(&req.Cluster)
	if err != nil {
		return err
	}
	switch req.Command {
	case DrillCommand:
		return p.runDrill(ctx, req, inv, r)
	case ListCommand:
		return p.runList(ctx, req, inv, r)
	}
	clients, err := cluster.Connect(ctx, inv, &req.Credentials)
	if err != nil {
		return err
	}
	defer clients.Close()

	opts := etcd.SnapshotOptionsFor(req)
	opts.Now, opts.FreeSpace = p.now, p.freeSpace
	opts.Step = func(id, detail string, err error) { etcd.ReportStep(r, id, detail, err) }
	opts.Waiting = func(holder string) {
		// On the card (the running step's detail) and in the operation's log.
		msg := "⏳ queued behind " + holder + " of " + inv.Name + ": snapshots of one cluster run one at a time; this one starts when it ends"
		_ = r.StepStarted(etcd.StepSnapshotSource, msg)
		_ = r.Log("info", etcd.StepSnapshotSource, msg)
	}
	snap, err := etcd.TakeSnapshot(ctx, clients, inv, opts)
	if snap == nil {
		return r.Result(&sdk.Result{OK: false, Summary: "etcd snapshot of " + inv.Name + " failed", Error: err.Error()})
	}
	if aerr := r.Artifact(snap.Artifact()); aerr != nil {
		return aerr
	}
	lines := []string{
		"✅ snapshot " + snap.ID + " from " + snap.Node,
		fmt.Sprintf("✅ verified in one pass: %d bytes, sha256 %s matches etcd's trailer (a restore drill proves etcd opens it)", snap.Size, snap.SHA256),
		"📁 " + snap.Path,
	}
	if snap.Encrypted {
		lines = append(lines, "🔒 age-encrypted at rest: no plaintext copy on disk")
	}
	if snap.Offsite != nil {
		lines = append(lines, "☁️ off-site: "+snap.Offsite.URL+" (checksum read back)")
	}
	for _, rm := range snap.Removed {
		lines = append(lines, "🗑️ retention removed "+rm)
	}
	if snap.Offsite != nil {
		for _, rm := range snap.Offsite.Removed {
			lines = append(lines, "🗑️ off-site retention removed "+rm)
		}
	}
	res := &sdk.Result{OK: true, Summary: "etcd snapshot " + snap.ID + " stored and verified", Lines: lines}
	if err != nil {
		// The snapshot is good; only clean-up failed.
		res.Lines = append(res.Lines, "⚠️ "+err.Error())
	}
	return r.Result(res)
}
