package snapshot

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"

	"github.com/talosbot/talosbot/internal/drill"
	"github.com/talosbot/talosbot/internal/offsite"
	"github.com/talosbot/talosbot/internal/retention"
	"github.com/talosbot/talosbot/internal/seal"
	"github.com/talosbot/talosbot/plugins/cluster"
	"github.com/talosbot/talosbot/plugins/cluster/etcd"
	"github.com/talosbot/talosbot/plugins/sdk"
)

// DrillCommand is the restore drill.
const DrillCommand = "restore-drill"

// DefaultTolerance is the default churn allowed between a snapshot's
// counts and the live API's, in percent of the live count.
const DefaultTolerance = 10

// Drill step ids.
const (
	StepDrillFetch   = "drill-fetch"
	StepDrillDecrypt = "drill-decrypt"
	StepDrillRestore = "drill-restore"
	StepDrillCompare = "drill-compare"
)

func drillCommand() *sdk.Command {
	return &sdk.Command{
		Name: DrillCommand,
		Summary: "Prove a snapshot restores: fetch it (off-site when configured), decrypt, restore it with etcdutl into a " +
			"throwaway etcd on loopback and compare its /registry counts with the live API (never touches the cluster)",
		Args: []*sdk.Arg{
			{Name: "cluster", Description: "cluster whose snapshot to drill (default: the channel's cluster)"},
			{Name: "snapshot", Description: "snapshot id or file name (default: the newest)"},
			{Name: "tolerance", Flag: true, DefaultValue: strconv.Itoa(DefaultTolerance), Description: "allowed difference per resource, in percent of the live count"},
		},
		// WRITE: it reads a backup of every Secret and writes (then deletes)
		// files, so it is an operator command; the cluster is only read.
		Effect:        sdk.EffectWrite,
		ReadsSnapshot: true,
		Drill:         sdk.DrillEtcdRestore,
		Example:       "/talos restore-drill staging",
	}
}

func drillSteps() []*sdk.Step {
	var out []*sdk.Step
	for _, s := range [][2]string{
		{StepDrillFetch, "fetch the snapshot and check its sha256"},
		{StepDrillDecrypt, "decrypt it and check etcd's trailer"},
		{StepDrillRestore, "restore with etcdutl and start a throwaway etcd on loopback"},
		{StepDrillCompare, "compare /registry counts with the live API"},
	} {
		out = append(out, &sdk.Step{ID: s[0], Title: s[1], Kind: "drill"})
	}
	return out
}

func tolerance(req *sdk.OperationRequest) (float64, error) {
	v := req.Args["tolerance"]
	if v == "" {
		return DefaultTolerance, nil
	}
	f, err := strconv.ParseFloat(strings.TrimSuffix(v, "%"), 64)
	if err != nil || f < 0 || f > 100 {
		return 0, fmt.Errorf("--tolerance %q must be a percentage between 0 and 100", v)
	}
	return f, nil
}

func (p *Plugin) planDrill(req *sdk.OperationRequest, inv cluster.Inventory) (*sdk.OperationPlan, error) {
	tol, err := tolerance(req)
	if err != nil {
		return &sdk.OperationPlan{Refusal: &sdk.Refusal{Reason: err.Error(), Fix: "for example --tolerance 5"}}, nil
	}
	if len(req.Credentials.Kubeconfig) == 0 {
		return &sdk.OperationPlan{Refusal: &sdk.Refusal{Rule: "R12",
			Reason: "the drill compares the restored etcd with the live Kubernetes API, and this cluster has no kubeconfig",
			Fix:    "set credentials.kubeconfig (or the Terraform kubeconfig output) for " + inv.Name}}, nil
	}
	opts := etcd.SnapshotOptionsFor(req)
	src := "local copies in " + filepath.Join(opts.Dir, inv.Name)
	if opts.Offsite != nil {
		src = "off-site copies in s3://" + opts.Offsite.Bucket + "/" + opts.Offsite.Prefix + inv.Name
	}
	which := req.Args["snapshot"]
	if which == "" {
		which = "the newest snapshot"
	}
	return &sdk.OperationPlan{
		Summary: fmt.Sprintf("restore drill of %s from %s, tolerance %g%% (never touches the cluster)", which, src, tol),
		Target:  inv.Name, Steps: drillSteps(),
		CanonicalInputs: sdk.NewCanonical(req).Str("snapshot", req.Args["snapshot"]).Str("tolerance", strconv.FormatFloat(tol, 'g', -1, 64)).
			Str("source", fmt.Sprint(src)).Bytes(),
	}, nil
}

// runDrill never talks to the cluster's Talos API or etcd: it reads the
// snapshot from storage and only lists objects from the Kubernetes API.
func (p *Plugin) runDrill(ctx context.Context, req *sdk.OperationRequest, inv cluster.Inventory, r sdk.Reporter) error {
	fail := func(step string, err error) error {
		_ = r.StepFailed(step, err.Error())
		return r.Result(&sdk.Result{OK: false, Summary: "restore drill of " + inv.Name + " failed", Error: err.Error()})
	}
	tol, err := tolerance(req)
	if err != nil {
		return fail(StepDrillFetch, err)
	}
	opts := etcd.SnapshotOptionsFor(req)
	if opts.Dir == "" {
		return fail(StepDrillFetch, errors.New("no snapshot directory is configured: set snapshot_dir"))
	}
	base := filepath.Join(opts.Dir, inv.Name)
	if err := os.MkdirAll(base, 0o700); err != nil {
		return fail(StepDrillFetch, err)
	}
	// The throwaway copy and data hold every Secret: a private directory
	// next to the snapshots (so the space is known), always removed.
	work, err := os.MkdirTemp(base, ".drill-")
	if err != nil {
		return fail(StepDrillFetch, fmt.Errorf("create the drill's work dir: %w", err))
	}
	defer os.RemoveAll(work)

	// 1. Fetch.
	chosen, local, source, err := p.fetch(ctx, opts, inv.Name, req.Args["snapshot"], work)
	if err != nil {
		return fail(StepDrillFetch, err)
	}
	fi, err := os.Stat(local)
	if err != nil {
		return fail(StepDrillFetch, err)
	}
	_ = r.StepOK(StepDrillFetch, fmt.Sprintf("%s from %s, %d bytes, sha256 verified", chosen.ID, source, fi.Size()))

	// 2. Decrypt (and, either way, check etcd's trailer in one pass).
	plain := local
	if strings.HasSuffix(local, seal.Ext) {
		key := req.Credentials.AgeIdentity
		if len(key) == 0 {
			return fail(StepDrillDecrypt, errors.New("the snapshot is encrypted and no age identity was given: set snapshots.encryption.identity (file: or env:)"))
		}
		ids, err := seal.Identities(key)
		if err != nil {
			return fail(StepDrillDecrypt, err)
		}
		f, err := os.Open(local)
		if err != nil {
			return fail(StepDrillDecrypt, err)
		}
		dec, err := seal.Decrypt(f, ids)
		if err != nil {
			f.Close()
			return fail(StepDrillDecrypt, err)
		}
		snap, err := etcd.WriteVerified(ctx, dec, work, "plain")
		f.Close()
		if err != nil {
			return fail(StepDrillDecrypt, fmt.Errorf("%s does not restore: decrypted: %w", chosen.ID, err))
		}
		plain = snap.Path
		_ = r.StepOK(StepDrillDecrypt, "age-decrypted; etcd's sha256 trailer matches")
	} else {
		f, err := os.Open(local)
		if err != nil {
			return fail(StepDrillDecrypt, err)
		}
		_, _, err = etcd.CheckStream(ctx, f)
		f.Close()
		if err != nil {
			return fail(StepDrillDecrypt, fmt.Errorf("%s does not restore: %w", chosen.ID, err))
		}
		_ = r.StepOK(StepDrillDecrypt, "not encrypted; etcd's sha256 trailer matches")
	}

	// 3. Restore with etcd's own code, into a throwaway etcd on loopback.
	restored, err := drill.Restore(ctx, plain, work)
	if err != nil {
		return fail(StepDrillRestore, err)
	}
	defer restored.Close()
	_ = r.StepOK(StepDrillRestore, fmt.Sprintf("restored in %s, revision %d, %d keys", restored.RestoreTime.Round(time.Millisecond), restored.Revision, restored.TotalKeys))

	// 4. Compare with the live API.
	res := drill.Resources()
	snapCounts, live := map[string]int64{}, map[string]int64{}
	_, dyn, err := cluster.NewKubeClients(req.Credentials.Kubeconfig)
	if err != nil {
		return fail(StepDrillCompare, err)
	}
	for _, rs := range res {
		if snapCounts[rs.Name], err = restored.Count(ctx, rs.Prefix); err != nil {
			return fail(StepDrillCompare, err)
		}
		if live[rs.Name], err = liveCount(ctx, dyn, gvr(rs.Name)); err != nil {
			return fail(StepDrillCompare, fmt.Errorf("count live %s: %w", rs.Name, err))
		}
	}
	findings, cmpErr := drill.Compare(res, snapCounts, live, tol)
	age := p.clock()().Sub(chosen.At).Round(time.Second)
	lines := []string{fmt.Sprintf("🧪 %s (%s): %s, revision %d, %s old, restored in %s", chosen.ID, source,
		humanSize(fi.Size()), restored.Revision, age, restored.RestoreTime.Round(time.Millisecond))}
	for _, f := range findings {
		mark := "✅"
		if f.Problem != "" {
			mark = "❌"
		}
		lines = append(lines, fmt.Sprintf("%s %s: %d in the snapshot, %d live (tolerance %d)", mark, f.Name, f.Snapshot, f.Live, f.Allowed))
	}
	if cmpErr != nil {
		_ = r.StepFailed(StepDrillCompare, cmpErr.Error())
		return r.Result(&sdk.Result{OK: false, Summary: "restore drill of " + inv.Name + " failed: the restored data does not match the live cluster",
			Error: cmpErr.Error(), Lines: lines})
	}
	_ = r.StepOK(StepDrillCompare, fmt.Sprintf("%d resource kinds within %g%%", len(findings), tol))
	lines = append(lines, "🗑️ throwaway etcd stopped and its data deleted")
	return r.Result(&sdk.Result{OK: true, Summary: "restore drill of " + inv.Name + " passed: " + chosen.ID + " restores", Lines: lines})
}

// fetch picks the snapshot (named, or the newest) and returns a local path
// to its bytes: downloaded into work (sha256-checked) when off-site storage
// is configured, so the drill proves the off-site path; else the local file.
func (p *Plugin) fetch(ctx context.Context, opts etcd.SnapshotOptions, clusterName, want, work string) (retention.Item, string, string, error) {
	match := func(id string) bool {
		if want == "" {
			return true
		}
		w := strings.TrimSuffix(strings.TrimSuffix(strings.TrimPrefix(want, clusterName+"/"), seal.Ext), ".db")
		return id == clusterName+"/"+w
	}
	newest := func(items []retention.Item) (retention.Item, bool) {
		var best retention.Item
		found := false
		for _, it := range items {
			if match(it.ID) && (!found || it.At.After(best.At) || (it.At.Equal(best.At) && it.ID > best.ID)) {
				best, found = it, true
			}
		}
		return best, found
	}
	notFound := func(where string) error {
		if want != "" {
			return fmt.Errorf("no snapshot %q among the %s; /talos snapshots %s lists them", want, where, clusterName)
		}
		return fmt.Errorf("no snapshot of %s among the %s; take one with /talos snapshot %s", clusterName, where, clusterName)
	}
	if opts.Offsite != nil {
		st, err := offsite.New(*opts.Offsite)
		if err != nil {
			return retention.Item{}, "", "", err
		}
		objs, err := st.List(ctx, clusterName)
		if err != nil {
			return retention.Item{}, "", "", err
		}
		var items []retention.Item
		keys := map[string]offsite.Object{}
		for _, o := range objs {
			items = append(items, retention.Item{ID: o.ID, At: o.At})
			keys[o.ID] = o
		}
		it, ok := newest(items)
		if !ok {
			return retention.Item{}, "", "", notFound("off-site copies")
		}
		obj := keys[it.ID]
		dst := filepath.Join(work, filepath.Base(obj.Key))
		f, err := os.OpenFile(dst, os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o600)
		if err != nil {
			return retention.Item{}, "", "", err
		}
		_, err = st.Get(ctx, obj.Key, f)
		if cerr := f.Close(); err == nil {
			err = cerr
		}
		if err != nil {
			return retention.Item{}, "", "", err
		}
		return it, dst, st.URL(obj.Key), nil
	}
	paths, items, err := etcd.LocalSnapshots(filepath.Join(opts.Dir, clusterName), clusterName)
	if err != nil {
		return retention.Item{}, "", "", err
	}
	it, ok := newest(items)
	if !ok {
		return retention.Item{}, "", "", notFound("local copies in " + filepath.Join(opts.Dir, clusterName))
	}
	return it, paths[it.ID], "local " + paths[it.ID], nil
}

func gvr(name string) schema.GroupVersionResource {
	if name == "deployments" {
		return schema.GroupVersionResource{Group: "apps", Version: "v1", Resource: name}
	}
	return schema.GroupVersionResource{Version: "v1", Resource: name}
}

// liveCount counts objects page by page (metadata is all that is needed,
// but the dynamic client keeps this one dependency-free).
func liveCount(ctx context.Context, dyn dynamic.Interface, g schema.GroupVersionResource) (int64, error) {
	var n int64
	opts := metav1.ListOptions{Limit: 500}
	for {
		l, err := dyn.Resource(g).List(ctx, opts)
		if err != nil {
			return 0, err
		}
		n += int64(len(l.Items))
		if l.GetContinue() == "" {
			return n, nil
		}
		opts.Continue = l.GetContinue()
	}
}

func humanSize(n int64) string {
	const mib = 1 << 20
	if n < mib {
		return fmt.Sprintf("%d KiB", n>>10)
	}
	return fmt.Sprintf("%.1f MiB", float64(n)/mib)
}
