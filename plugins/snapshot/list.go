package snapshot

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"time"

	"github.com/talosbot/talosbot/internal/offsite"
	"github.com/talosbot/talosbot/internal/seal"
	"github.com/talosbot/talosbot/plugins/cluster"
	"github.com/talosbot/talosbot/plugins/cluster/etcd"
	"github.com/talosbot/talosbot/plugins/sdk"
)

// ListCommand lists a cluster's snapshots.
const ListCommand = "snapshots"

func listCommand() *sdk.Command {
	return &sdk.Command{
		Name:    ListCommand,
		Summary: "List the local and off-site snapshots: age, size, encryption, the records that keep them, and the last restore drill",
		Args:    []*sdk.Arg{{Name: "cluster", Description: "cluster (default: the channel's cluster)"}},
		Effect:  sdk.EffectReadOnly,
		// It reads the off-site listing: the host sends the bucket's
		// credentials (never the age identity to a read-only command).
		ReadsSnapshot: true,
		Example:       "/talos snapshots production",
	}
}

func planList(inv cluster.Inventory) *sdk.OperationPlan {
	return &sdk.OperationPlan{Summary: "list the snapshots of " + inv.Name + " (read-only)", Target: inv.Name,
		Steps:           []*sdk.Step{{ID: "list", Title: "list local and off-site snapshots", Kind: "note"}},
		CanonicalInputs: sdk.CanonicalFor(ListCommand, inv.Name).Bytes()}
}

func (p *Plugin) runList(ctx context.Context, req *sdk.OperationRequest, inv cluster.Inventory, r sdk.Reporter) error {
	opts := etcd.SnapshotOptionsFor(req)
	now := p.clock()()
	by := req.Evidence.Backups.GetProtectedBy()
	keep := func(id string) string {
		if op := by[id]; op != "" {
			return " · 🔒 kept by record " + op
		}
		return ""
	}
	enc := func(e bool) string {
		if e {
			return "age-encrypted"
		}
		return "not encrypted"
	}
	var lines []string
	paths, items, err := etcd.LocalSnapshots(filepath.Join(opts.Dir, inv.Name), inv.Name)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		lines = append(lines, "💾 local: none in "+filepath.Join(opts.Dir, inv.Name))
	case err != nil:
		lines = append(lines, "⚠️ local: "+err.Error())
	default:
		sort.Slice(items, func(i, j int) bool { return items[i].At.After(items[j].At) })
		lines = append(lines, fmt.Sprintf("💾 local (%s), %d, keeping %s:", filepath.Join(opts.Dir, inv.Name), len(items), opts.Retention))
		for _, it := range items {
			var size int64
			if fi, err := os.Stat(paths[it.ID]); err == nil {
				size = fi.Size()
			}
			lines = append(lines, fmt.Sprintf("  %s · %s old · %s · %s%s", it.ID, ageOf(now, it.At), humanSize(size), enc(strings.HasSuffix(paths[it.ID], seal.Ext)), keep(it.ID)))
		}
	}
	if opts.Offsite == nil {
		lines = append(lines, "☁️ off-site: not configured (snapshots.offsite)")
	} else if st, err := offsite.New(*opts.Offsite); err != nil {
		lines = append(lines, "⚠️ off-site: "+err.Error())
	} else if objs, err := st.List(ctx, inv.Name); err != nil {
		lines = append(lines, "⚠️ off-site: "+err.Error())
	} else {
		sort.Slice(objs, func(i, j int) bool { return objs[i].At.After(objs[j].At) })
		lines = append(lines, fmt.Sprintf("☁️ off-site (%s), %d, keeping %s:", st.URL(opts.Offsite.Prefix+inv.Name+"/"), len(objs), opts.OffsiteRetention))
		for _, o := range objs {
			lines = append(lines, fmt.Sprintf("  %s · %s old · %s · %s%s", o.ID, ageOf(now, o.At), humanSize(o.Size), enc(o.Encrypted), keep(o.ID)))
		}
	}
	if d := req.Evidence.Backups.GetLastDrill(); d != "" {
		lines = append(lines, "🧪 last restore drill: "+d)
	} else {
		lines = append(lines, "🧪 last restore drill: none; run /talos restore-drill "+inv.Name)
	}
	_ = r.StepOK("list", fmt.Sprintf("%d local", len(items)))
	return r.Result(&sdk.Result{OK: true, Summary: "snapshots of " + inv.Name, Lines: lines})
}

func ageOf(now, at time.Time) string {
	d := now.Sub(at)
	switch {
	case d >= 48*time.Hour:
		return fmt.Sprintf("%dd", int(d.Hours()/24))
	case d >= time.Hour:
		return fmt.Sprintf("%dh", int(d.Hours()))
	default:
		return fmt.Sprintf("%dm", int(d.Minutes()))
	}
}
