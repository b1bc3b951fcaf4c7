package k8s

import (
	"context"
	"encoding/json"
	"fmt"
	"reflect"
	"sort"
	"strings"
	"time"

	"github.com/cosi-project/runtime/pkg/safe"
	"github.com/siderolabs/talos/pkg/machinery/client"
	"github.com/siderolabs/talos/pkg/machinery/constants"
	talosk8s "github.com/siderolabs/talos/pkg/machinery/resources/k8s"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/discovery/cached/memory"
	"k8s.io/client-go/restmapper"

	"github.com/talosbot/talosbot/plugins/cluster"
)

// The bootstrap manifest sync of `talosctl upgrade-k8s` (Talos v1.13.9
// pkg/cluster/kubernetes/talos_managed.go PerformManifestsSync): the manifests are the
// k8s.Manifest resources a control plane's ManifestController rendered from its machine
// config and Talos version (manifests.GetBootstrapManifests reads them through COSI), and
// they are server-side applied with field manager "talos" (syncManifestsSSA, for Talos ≥
// 1.13; go-kubernetes' ssa.Manager), a dry run showing each object's diff instead. As
// ssa.Manager does with talosctl's default policy AdoptIfNoInventory, each object carries the
// inventory annotation, the inventory ConfigMap kube-system/talos-bootstrap-manifests-inventory
// records every applied object, and an object the inventory lists that Talos no longer renders
// is deleted (pruned); an object owned by another inventory is refused.

// ManifestChange is what the sync does (or, in a dry run, would do) to one object.
type ManifestChange struct {
	// Action is "created", "configured", "unchanged" or "deleted" (ssa's words, which talosctl
	// prints; "deleted" is a prune).
	Action string
	// Subject is Kind/namespace/name (Kind/name for a cluster-scoped object).
	Subject string
	// Diff lists the changed fields, "path: old → new", one per line (empty when unchanged).
	Diff []string
}

// String is the change as one line, "configured Deployment/kube-system/coredns".
func (c ManifestChange) String() string { return c.Action + " " + c.Subject }

// BootstrapManifests reads a control plane's bootstrap manifests: every k8s.Manifest of the
// controlplane namespace, in id order (the order Talos applies them), each object as it is.
func BootstrapManifests(ctx context.Context, c *cluster.Clients, cp cluster.Node) ([]*unstructured.Unstructured, error) {
	list, err := safe.StateListAll[*talosk8s.Manifest](client.WithNode(ctx, cp.Address), c.COSI)
	if err != nil {
		return nil, fmt.Errorf("read the bootstrap manifests (k8s.Manifest resources) of %s: %w", cp.Name, err)
	}

	var ids []string

	byID := map[string]*talosk8s.Manifest{}

	for m := range list.All() {
		ids = append(ids, m.Metadata().ID())
		byID[m.Metadata().ID()] = m
	}

	sort.Strings(ids)

	var out []*unstructured.Unstructured

	for _, id := range ids {
		for _, item := range byID[id].TypedSpec().Items {
			out = append(out, &unstructured.Unstructured{Object: item.Object})
		}
	}

	return out, nil
}

// SyncOptions tunes SyncManifests.
type SyncOptions struct {
	// DryRun computes the changes with a server-side dry run and changes nothing.
	DryRun bool
	// Wait bounds the wait for the applied workloads to roll out (0: no wait).
	Wait time.Duration
}

// SyncManifests server-side applies objs with field manager "talos", forcing ownership (the
// objects are Talos's), records them in the inventory, prunes what the inventory lists and
// objs no longer have, and waits for the Deployments and DaemonSets it changed to roll out.
// With DryRun every apply is a server-side dry run (the API server computes the result,
// defaults included) and the change is the difference from the live object; nothing is
// written or deleted.
func SyncManifests(ctx context.Context, c *cluster.Clients, objs []*unstructured.Unstructured, opts SyncOptions) ([]ManifestChange, error) {
	if c.Dynamic == nil || c.Kube == nil {
		return nil, fmt.Errorf("no Kubernetes client: the bootstrap manifests cannot be synced without the cluster's kubeconfig")
	}

	mapper := restmapper.NewDeferredDiscoveryRESTMapper(memory.NewMemCacheClient(c.Kube.Discovery()))

	inv, err := readInventory(ctx, c)
	if err != nil {
		return nil, err
	}

	var (
		out     []ManifestChange
		changed []*unstructured.Unstructured
		want    = map[string]bool{}
	)

	for _, o := range objs {
		o = o.DeepCopy()
		ann := o.GetAnnotations()
		if ann == nil {
			ann = map[string]string{}
		}
		ann[InventoryAnnotation] = constants.KubernetesBootstrapManifestsInventoryName
		o.SetAnnotations(ann)

		ch, applied, err := applyOne(ctx, c, mapper, o, opts.DryRun)
		if err != nil {
			return out, err
		}

		out = append(out, ch)
		want[InventoryKey(o)] = true

		if ch.Action != "unchanged" {
			changed = append(changed, applied)
		}
	}

	for key := range want {
		inv[key] = ""
	}

	if !opts.DryRun {
		if err := writeInventory(ctx, c, inv); err != nil {
			return out, err
		}
	}

	pruned, err := prune(ctx, c, mapper, inv, want, opts.DryRun)
	out = append(out, pruned...)

	if err != nil {
		return out, err
	}

	if !opts.DryRun && len(pruned) > 0 {
		if err := writeInventory(ctx, c, inv); err != nil {
			return out, err
		}
	}

	if opts.DryRun || opts.Wait <= 0 {
		return out, nil
	}

	for _, o := range changed {
		if err := waitRolledOut(ctx, c, mapper, o, opts.Wait); err != nil {
			return out, err
		}
	}

	return out, nil
}

// InventoryAnnotation marks an object as owned by an inventory (cli-utils' owning-inventory).
const InventoryAnnotation = "config.k8s.io/owning-inventory"

// InventoryKey is an object's key in the inventory ConfigMap, as go-kubernetes' ssa inventory
// (v0.2.38, kubernetes/ssa/internal/inventory/configmap) stores it: cli-utils' ObjMetadata
// string "<namespace>_<name>_<group>_<Kind>", a colon in a name written "__".
func InventoryKey(o *unstructured.Unstructured) string {
	gvk := o.GroupVersionKind()
	return o.GetNamespace() + "_" + strings.ReplaceAll(o.GetName(), ":", "__") + "_" + gvk.Group + "_" + gvk.Kind
}

// parseInventoryKey is InventoryKey read back.
func parseInventoryKey(key string) (ns, name string, gk schema.GroupKind, ok bool) {
	first := strings.Index(key, "_")
	last := strings.LastIndex(key, "_")
	if first < 0 || last <= first {
		return "", "", gk, false
	}
	ns, rest, kind := key[:first], key[first+1:last], key[last+1:]
	g := strings.LastIndex(rest, "_")
	if g < 0 {
		return "", "", gk, false
	}
	return ns, strings.ReplaceAll(rest[:g], "__", ":"), schema.GroupKind{Group: rest[g+1:], Kind: kind}, true
}

// readInventory reads the inventory's keys (none when it does not exist yet).
func readInventory(ctx context.Context, c *cluster.Clients) (map[string]string, error) {
	cm, err := c.Kube.CoreV1().ConfigMaps(constants.KubernetesInventoryNamespace).Get(ctx, constants.KubernetesBootstrapManifestsInventoryName, metav1.GetOptions{})
	switch {
	case apierrors.IsNotFound(err):
		return map[string]string{}, nil
	case err != nil:
		return nil, fmt.Errorf("read the bootstrap manifests inventory: %w", err)
	}
	inv := make(map[string]string, len(cm.Data))
	for k := range cm.Data {
		inv[k] = ""
	}
	return inv, nil
}

// writeInventory creates or replaces the inventory ConfigMap with these keys.
func writeInventory(ctx context.Context, c *cluster.Clients, inv map[string]string) error {
	cms := c.Kube.CoreV1().ConfigMaps(constants.KubernetesInventoryNamespace)
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: constants.KubernetesBootstrapManifestsInventoryName, Namespace: constants.KubernetesInventoryNamespace},
		Data: inv}
	cur, err := cms.Get(ctx, cm.Name, metav1.GetOptions{})
	switch {
	case apierrors.IsNotFound(err):
		_, err = cms.Create(ctx, cm, metav1.CreateOptions{})
	case err == nil:
		cur.Data = inv
		_, err = cms.Update(ctx, cur, metav1.UpdateOptions{})
	}
	if err != nil {
		return fmt.Errorf("write the bootstrap manifests inventory: %w", err)
	}
	return nil
}

// prune deletes (background propagation) every object the inventory lists that want does
// not, and drops it from inv; one already gone only leaves the inventory. An object owned by
// another inventory is never deleted: the sync stops naming it.
func prune(ctx context.Context, c *cluster.Clients, mapper meta.RESTMapper, inv map[string]string, want map[string]bool, dryRun bool) ([]ManifestChange, error) {
	var keys []string
	for k := range inv {
		if !want[k] {
			keys = append(keys, k)
		}
	}
	sort.Strings(keys)
	var out []ManifestChange
	for _, key := range keys {
		ns, name, gk, ok := parseInventoryKey(key)
		if !ok {
			return out, fmt.Errorf("the bootstrap manifests inventory has an entry that is not an object reference: %q", key)
		}
		m, err := mapper.RESTMapping(gk)
		if err != nil {
			return out, fmt.Errorf("prune %s %s: no API resource: %w", gk, name, err)
		}
		var rc dynamicResource = c.Dynamic.Resource(m.Resource)
		if m.Scope.Name() == meta.RESTScopeNameNamespace {
			rc = c.Dynamic.Resource(m.Resource).Namespace(ns)
		}
		live, err := rc.Get(ctx, name, metav1.GetOptions{})
		switch {
		case apierrors.IsNotFound(err):
			delete(inv, key)
			continue
		case err != nil:
			return out, fmt.Errorf("prune %s: %w", key, err)
		}
		if owner := live.GetAnnotations()[InventoryAnnotation]; owner != "" && owner != constants.KubernetesBootstrapManifestsInventoryName {
			return out, fmt.Errorf("not pruning %s: it belongs to inventory %q, not %q", subject(live), owner, constants.KubernetesBootstrapManifestsInventoryName)
		}
		out = append(out, ManifestChange{Action: "deleted", Subject: subject(live)})
		if dryRun {
			continue
		}
		bg := metav1.DeletePropagationBackground
		if err := rc.Delete(ctx, name, metav1.DeleteOptions{PropagationPolicy: &bg}); err != nil && !apierrors.IsNotFound(err) {
			return out, fmt.Errorf("prune %s: %w", subject(live), err)
		}
		delete(inv, key)
	}
	return out, nil
}

// dynamicResource is the part of a dynamic resource client the sync uses.
type dynamicResource interface {
	Get(ctx context.Context, name string, opts metav1.GetOptions, sub ...string) (*unstructured.Unstructured, error)
	Patch(ctx context.Context, name string, pt types.PatchType, data []byte, opts metav1.PatchOptions, sub ...string) (*unstructured.Unstructured, error)
	Delete(ctx context.Context, name string, opts metav1.DeleteOptions, sub ...string) error
}

func subject(o *unstructured.Unstructured) string {
	if o.GetNamespace() == "" {
		return o.GetKind() + "/" + o.GetName()
	}

	return o.GetKind() + "/" + o.GetNamespace() + "/" + o.GetName()
}

func applyOne(ctx context.Context, c *cluster.Clients, mapper meta.RESTMapper, o *unstructured.Unstructured, dryRun bool) (ManifestChange, *unstructured.Unstructured, error) {
	ch := ManifestChange{Subject: subject(o)}
	gvk := o.GroupVersionKind()

	m, err := mapper.RESTMapping(gvk.GroupKind(), gvk.Version)
	if err != nil {
		return ch, nil, fmt.Errorf("bootstrap manifest %s: no API resource for %s: %w", ch.Subject, gvk, err)
	}

	ri := c.Dynamic.Resource(m.Resource)

	var rc dynamicResource = ri

	if m.Scope.Name() == meta.RESTScopeNameNamespace {
		ns := o.GetNamespace()
		if ns == "" {
			ns = metav1.NamespaceDefault
		}

		rc = ri.Namespace(ns)
	}

	live, err := rc.Get(ctx, o.GetName(), metav1.GetOptions{})

	switch {
	case apierrors.IsNotFound(err):
		live = nil
	case err != nil:
		return ch, nil, fmt.Errorf("bootstrap manifest %s: read the live object: %w", ch.Subject, err)
	}

	// AdoptIfNoInventory (talosctl's default --manifests-inventory-policy): an object with
	// no owning inventory is adopted, one owned by another inventory is refused.
	if owner := ownerOf(live); owner != "" && owner != constants.KubernetesBootstrapManifestsInventoryName {
		return ch, nil, fmt.Errorf("bootstrap manifest %s: the live object belongs to inventory %q, not %q; nothing of it was changed (talosctl refuses it too under its default policy AdoptIfNoInventory)",
			ch.Subject, owner, constants.KubernetesBootstrapManifestsInventoryName)
	}

	body, err := json.Marshal(o.Object)
	if err != nil {
		return ch, nil, fmt.Errorf("bootstrap manifest %s: %w", ch.Subject, err)
	}

	force := true
	popts := metav1.PatchOptions{FieldManager: constants.KubernetesFieldManagerName, Force: &force}

	if dryRun {
		popts.DryRun = []string{metav1.DryRunAll}
	}

	applied, err := rc.Patch(ctx, o.GetName(), types.ApplyPatchType, body, popts)
	if err != nil {
		return ch, nil, fmt.Errorf("bootstrap manifest %s: server-side apply: %w", ch.Subject, err)
	}

	switch {
	case live == nil:
		ch.Action = "created"
	default:
		ch.Diff = diffObjects(live.Object, applied.Object)
		ch.Action = "configured"

		if len(ch.Diff) == 0 {
			ch.Action = "unchanged"
		}
	}

	return ch, applied, nil
}

// diffObjects lists the fields whose values differ, without the fields the server keeps
// for itself (metadata bookkeeping and status).
func diffObjects(live, applied map[string]any) []string {
	clean := func(o map[string]any) map[string]any {
		o = deepCopy(o)
		delete(o, "status")

		if md, ok := o["metadata"].(map[string]any); ok {
			for _, k := range []string{"managedFields", "resourceVersion", "generation", "uid", "creationTimestamp"} {
				delete(md, k)
			}
		}

		return o
	}

	var out []string

	diffValue("", clean(live), clean(applied), &out)
	sort.Strings(out)

	return out
}

func deepCopy(o map[string]any) map[string]any {
	return (&unstructured.Unstructured{Object: o}).DeepCopy().Object
}

func diffValue(path string, a, b any, out *[]string) {
	am, aok := a.(map[string]any)
	bm, bok := b.(map[string]any)

	if aok && bok {
		keys := map[string]bool{}
		for k := range am {
			keys[k] = true
		}

		for k := range bm {
			keys[k] = true
		}

		for k := range keys {
			diffValue(joinPath(path, k), am[k], bm[k], out)
		}

		return
	}

	as, aok := a.([]any)
	bs, bok := b.([]any)

	if aok && bok && len(as) == len(bs) {
		for i := range as {
			diffValue(fmt.Sprintf("%s[%d]", path, i), as[i], bs[i], out)
		}

		return
	}

	if reflect.DeepEqual(a, b) {
		return
	}

	*out = append(*out, fmt.Sprintf("%s: %s → %s", path, show(a), show(b)))
}

func joinPath(path, k string) string {
	if path == "" {
		return k
	}

	return path + "." + k
}

// show renders a value for a diff line, short.
func show(v any) string {
	if v == nil {
		return "(none)"
	}

	if s, ok := v.(string); ok {
		if len(s) > 80 || strings.Contains(s, "\n") {
			return fmt.Sprintf("(%d characters)", len(s))
		}

		return s
	}

	b, err := json.Marshal(v)
	if err != nil || len(b) > 120 {
		return fmt.Sprintf("(%T)", v)
	}

	return string(b)
}

// waitRolledOut waits until a Deployment or DaemonSet the sync changed has rolled out (its
// controller observed the change and every replica is updated and ready), as talosctl waits
// for the applied objects' reconciliation (ssacli.Wait). Other kinds need no wait.
func waitRolledOut(ctx context.Context, c *cluster.Clients, mapper meta.RESTMapper, o *unstructured.Unstructured, timeout time.Duration) error {
	kind := o.GetKind()
	if kind != "Deployment" && kind != "DaemonSet" {
		return nil
	}

	m, err := mapper.RESTMapping(schema.GroupKind{Group: "apps", Kind: kind}, "v1")
	if err != nil {
		return err
	}

	rc := c.Dynamic.Resource(m.Resource).Namespace(o.GetNamespace())
	last := "not read yet"

	err = wait.PollUntilContextTimeout(ctx, 500*time.Millisecond, timeout, true, func(ctx context.Context) (bool, error) {
		cur, err := rc.Get(ctx, o.GetName(), metav1.GetOptions{})
		if err != nil {
			last = err.Error()

			return false, nil //nolint:nilerr // retried until the timeout, which reports it
		}

		n := func(f string) int64 { v, _, _ := unstructured.NestedInt64(cur.Object, "status", f); return v }
		observed := n("observedGeneration") >= cur.GetGeneration()

		var want, updated, ready int64

		if kind == "Deployment" {
			want, _, _ = unstructured.NestedInt64(cur.Object, "spec", "replicas")
			updated, ready = n("updatedReplicas"), n("readyReplicas")
		} else {
			want, updated, ready = n("desiredNumberScheduled"), n("updatedNumberScheduled"), n("numberReady")
		}

		last = fmt.Sprintf("generation %d observed: %v; %d of %d updated, %d ready", cur.GetGeneration(), observed, updated, want, ready)

		return observed && updated >= want && ready >= want, nil
	})
	if err != nil {
		return fmt.Errorf("%s did not roll out within %s (%s): %w", subject(o), timeout, last, err)
	}

	return nil
}

// ownerOf is the live object's owning inventory ("" for none, or no object).
func ownerOf(live *unstructured.Unstructured) string {
	if live == nil {
		return ""
	}

	return live.GetAnnotations()[InventoryAnnotation]
}
