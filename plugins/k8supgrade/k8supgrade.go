// Package k8supgrade is the built-in plugin behind `/talos upgrade k8s <version> [cluster]
// [--dry-run]`: a Kubernetes upgrade through the Talos API, separate from Talos upgrades
// (R11). The plan (which is the dry run) reads what runs and refuses a downgrade (R21), a
// skipped minor or a target the nodes' Talos does not support (R20). The run takes an etcd
// snapshot and runs the gate, then per control plane, one at a time, retags the apiserver,
// controller-manager and scheduler images in the machine config, applies it NO_REBOOT and
// waits for the static pods; then kube-proxy; then each kubelet (control planes first); then
// the gate again and a Terraform drift note. Every step whose effect is in place is
// skipped, so a resumed run continues where the last one stopped. See docs/K8S-UPGRADE.md.
package k8supgrade

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/talosbot/talosbot/internal/version"
	"github.com/talosbot/talosbot/plugins/cluster"
	lifecyclev1 "github.com/talosbot/talosbot/plugins/proto/lifecycle/v1"
	"github.com/talosbot/talosbot/plugins/sdk"
)

// Name is the plugin's catalogue name.
const Name = "k8supgrade"

// Command is the chat command.
const Command = "upgrade k8s"

// DefaultNodeTimeout bounds each wait for static pods or a kubelet when
// settings.node_timeout_ms is unset.
const DefaultNodeTimeout = 5 * time.Minute

// Plugin implements sdk.Plugin. It keeps no state between calls.
type Plugin struct {
	// now stamps snapshot names (nil: time.Now).
	now func() time.Time
}

// New returns the plugin.
func New() sdk.Plugin { return &Plugin{} }

// Describe returns the manifest.
func (*Plugin) Describe(context.Context) (*lifecyclev1.Manifest, error) {
	return &lifecyclev1.Manifest{Name: Name, Version: version.Version, Commands: []*lifecyclev1.Command{{
		Name: Command,
		Summary: "Upgrade Kubernetes (not Talos) to a patch or the next minor: etcd snapshot, gate, control planes one at a time, " +
			"kube-proxy, kubelets, gate. --dry-run shows the plan and changes nothing",
		Args: []*lifecyclev1.Arg{
			{Name: "version", Description: "target Kubernetes version, e.g. v1.36.3 (the leading v is optional)", Required: true},
			{Name: "cluster", Description: "cluster to upgrade (default: the channel's cluster)"},
			{Name: "dry-run", Description: "only report the plan; change nothing", Flag: true, Boolean: true},
		},
		Effect:        lifecyclev1.Effect_EFFECT_DISRUPTIVE,
		NeedsSnapshot: true,
		Drill:         lifecyclev1.Drill_DRILL_KUBERNETES_UPGRADE,
		Example:       "/talos upgrade k8s v1.36.3 staging --dry-run",
	}}}, nil
}

// parse validates the request and normalises the target version.
func parse(req *lifecyclev1.OperationRequest) (cluster.Inventory, string, error) {
	inv, err := cluster.InventoryFrom(req.GetCluster())
	if err != nil {
		return cluster.Inventory{}, "", err
	}
	raw := req.GetArgs()["version"]
	if raw == "" {
		return cluster.Inventory{}, "", errors.New("no target version: use /talos upgrade k8s <version>, e.g. v1.36.3")
	}
	target, _, err := cluster.ParseK8sVersion(raw)
	if err != nil {
		return cluster.Inventory{}, "", err
	}
	return inv, target, nil
}

// Plan reads the cluster (read-only) and returns the steps, or a refusal.
func (*Plugin) Plan(ctx context.Context, req *lifecyclev1.OperationRequest) (*lifecyclev1.OperationPlan, error) {
	inv, target, err := parse(req)
	if err != nil {
		return nil, err
	}
	if len(req.GetCredentials().GetKubeconfig()) == 0 {
		return &lifecyclev1.OperationPlan{Target: target, Refusal: refuse("R20",
			"no kubeconfig for "+inv.Name+": the running Kubernetes versions cannot be read, so the version rules cannot be checked",
			"configure the cluster's kubeconfig (Terraform output or file)")}, nil
	}
	clients, err := cluster.Connect(ctx, inv, req.GetCredentials())
	if err != nil {
		return nil, err
	}
	defer clients.Close()
	a, err := assess(ctx, clients, inv, req, target)
	if err != nil {
		return nil, err
	}
	return a.plan(), nil
}

// run is one Run: its reporter, clients and the lines of the chat result.
type run struct {
	r       sdk.Reporter
	c       *cluster.Clients
	a       *assessment
	timeout time.Duration
	lines   []string
	skipped int
}

// Run executes the upgrade (or, with --dry-run, reports the plan).
func (p *Plugin) Run(ctx context.Context, req *lifecyclev1.OperationRequest, r sdk.Reporter) error {
	inv, target, err := parse(req)
	if err != nil {
		return err
	}
	if len(req.GetCredentials().GetKubeconfig()) == 0 {
		return r.Result(&lifecyclev1.Result{Ok: false, Summary: "refused", Refusal: refuse("R20",
			"no kubeconfig for "+inv.Name, "configure the cluster's kubeconfig (Terraform output or file)")})
	}
	clients, err := cluster.Connect(ctx, inv, req.GetCredentials())
	if err != nil {
		return err
	}
	defer clients.Close()

	// The rules are checked again: a resumed run does not re-plan, and the cluster may
	// have changed since the approval.
	a, err := assess(ctx, clients, inv, req, target)
	if err != nil {
		return err
	}
	if a.refusal != nil {
		return r.Result(&lifecyclev1.Result{Ok: false, Summary: "Kubernetes upgrade to " + target + " refused", Refusal: a.refusal})
	}
	if a.dryRun {
		for _, s := range a.plan().GetSteps() {
			if err := r.StepSkipped(s.GetId(), "dry run"); err != nil {
				return err
			}
		}
		return r.Result(&lifecyclev1.Result{Ok: true, Lines: a.dryRunLines(),
			Summary: fmt.Sprintf("dry run: %s can go from %s to %s; nothing was changed", inv.Name, a.versions.Lowest().Version, target)})
	}

	timeout := DefaultNodeTimeout
	if ms := req.GetSettings().GetNodeTimeoutMs(); ms > 0 {
		timeout = time.Duration(ms) * time.Millisecond
	}
	ru := &run{r: r, c: clients, a: a, timeout: timeout}
	return ru.execute(ctx, req, p.now)
}

// stop ends the run with a failed result that names the step and says how to continue.
func (ru *run) stop(ctx context.Context, where string, err error) error {
	if ctx.Err() != nil {
		return fmt.Errorf("%s: %w", where, ctx.Err())
	}
	lines := append(ru.lines, "❌ "+where+": "+err.Error(),
		"⏸️ the remaining steps were not run; fix the cause and run the same command again: steps already at "+ru.a.target+" are skipped")
	return ru.r.Result(&lifecyclev1.Result{Ok: false, Lines: lines, Error: err.Error(),
		Summary: fmt.Sprintf("Kubernetes upgrade of %s to %s stopped at %s", ru.a.cluster, ru.a.target, where)})
}

func (ru *run) execute(ctx context.Context, req *lifecyclev1.OperationRequest, now func() time.Time) error {
	a, r := ru.a, ru.r
	inv := a.inv

	// R20: snapshot, then gate, before anything changes.
	sopts := cluster.SnapshotOptionsFor(req)
	sopts.Now = now
	sopts.Step = func(id, detail string, err error) {
		if err != nil {
			_ = r.StepFailed(id, err.Error())
			return
		}
		_ = r.StepOK(id, detail)
	}
	snap, err := cluster.TakeSnapshot(ctx, ru.c, inv, sopts)
	if snap == nil {
		return ru.stop(ctx, "etcd snapshot", err)
	}
	if err := r.Artifact(snap.Artifact()); err != nil {
		return err
	}
	ru.lines = append(ru.lines, "✅ etcd snapshot "+snap.ID+" ("+snap.Path+")")

	gopts := cluster.GateOptionsFrom(req.GetSettings())
	gopts.RequireKubernetes = true
	gate := cluster.Gate(ctx, ru.c, inv, gopts)
	if err := cluster.ReportGate(r, gateBefore, gate); err != nil {
		return err
	}
	if err := cluster.CheckGateBefore("the Kubernetes upgrade", gate.Reasons); err != nil {
		res := sdk.RefusedResult(err, "Kubernetes upgrade refused: "+gate.Summary())
		res.Lines = gate.Lines()
		return r.Result(res)
	}

	for _, cp := range inv.ControlPlanes() {
		if err := ru.controlPlane(ctx, cp); err != nil {
			return ru.stop(ctx, "control plane "+cp.Name, err)
		}
	}
	if err := ru.kubeProxy(ctx); err != nil {
		return ru.stop(ctx, "kube-proxy", err)
	}
	for _, n := range a.kubeletOrder() {
		if err := ru.kubelet(ctx, n); err != nil {
			return ru.stop(ctx, "kubelet on "+n.Name, err)
		}
	}

	gate = cluster.Gate(ctx, ru.c, inv, gopts)
	if err := cluster.ReportGate(r, gateAfter, gate); err != nil {
		return err
	}
	if !gate.Passed {
		return ru.stop(ctx, "the health gate after the upgrade", gate.Err())
	}

	note := fmt.Sprintf("talos_kubernetes_version = %q", a.target)
	if decl := req.GetCluster().GetDeclared()["talos_kubernetes_version"]; decl != "" && !sameVersion(decl, a.target) {
		note += fmt.Sprintf(" (Terraform declares %q: update it, or the next apply reports drift)", decl)
	}
	if err := r.StepOK(stepDriftNote, note); err != nil {
		return err
	}
	lines := append(ru.lines, "📝 Terraform: set "+note)
	for _, d := range differences {
		lines = append(lines, "ℹ️ not done (unlike talosctl upgrade-k8s): "+d)
	}
	summary := fmt.Sprintf("Kubernetes on %s is at %s", a.cluster, a.target)
	if ru.skipped > 0 {
		summary += fmt.Sprintf(" (%d step(s) were already done and skipped)", ru.skipped)
	}
	// The gate after the upgrade passed: Terraform's variable may follow
	// (R18). It is written with a leading v.
	return r.Result(&lifecyclev1.Result{Ok: true, Summary: summary, Lines: lines,
		Declared: map[string]string{"talos_kubernetes_version": "v" + strings.TrimPrefix(a.target, "v")}})
}

func (ru *run) step(id, node, from, detail string, st lifecyclev1.StepStatus) error {
	return ru.r.Step(&lifecyclev1.StepEvent{StepId: id, Status: st, Detail: detail, Node: node, FromVersion: from, ToVersion: ru.a.target})
}

// controlPlane upgrades one control plane's static pods. A node whose config and pods
// already run the target is skipped; a config already at target (a run killed while
// waiting) is not applied again, only waited for.
func (ru *run) controlPlane(ctx context.Context, cp cluster.Node) error {
	id, target := stepControlPlane+cp.Name, ru.a.target
	cfg, err := cluster.ReadMachineConfig(ctx, ru.c, cp)
	if err != nil {
		_ = ru.step(id, cp.Name, "", err.Error(), lifecyclev1.StepStatus_STEP_STATUS_FAILED)
		return err
	}
	imgs := cluster.K8sImagesOf(cfg)
	from := imageTag(imgs.APIServer)
	applied := false
	if !imgs.AtVersion(cluster.K8sControlPlaneImages, target) {
		_ = ru.step(id, cp.Name, from, "applying apiserver, controller-manager and scheduler "+target+" (NO_REBOOT)", lifecyclev1.StepStatus_STEP_STATUS_RUNNING)
		data, err := cluster.SetK8sImages(cfg, cluster.K8sControlPlaneImages, target)
		if err == nil {
			err = cluster.ApplyNoReboot(ctx, ru.c, cp, data)
		}
		if err != nil {
			_ = ru.step(id, cp.Name, from, err.Error(), lifecyclev1.StepStatus_STEP_STATUS_FAILED)
			return err
		}
		applied = true
	}
	if err := cluster.WaitStaticPods(ctx, ru.c.Kube, cp.Name, target, cluster.StaticPodComponents(), ru.timeout); err != nil {
		_ = ru.step(id, cp.Name, from, err.Error(), lifecyclev1.StepStatus_STEP_STATUS_FAILED)
		return err
	}
	if !applied {
		ru.skipped++
		ru.lines = append(ru.lines, "⏭️ "+cp.Name+": control plane already at "+target)
		return ru.step(id, cp.Name, from, "already at "+target+"; static pods Ready", lifecyclev1.StepStatus_STEP_STATUS_SKIPPED)
	}
	ru.lines = append(ru.lines, fmt.Sprintf("✅ %s: control plane %s → %s, static pods Ready", cp.Name, from, target))
	return ru.step(id, cp.Name, from, "static pods Ready at "+target, lifecyclev1.StepStatus_STEP_STATUS_OK)
}

// kubeProxy sets cluster.proxy.image on every control plane (where kube-proxy is enabled)
// and rolls the kube-proxy DaemonSet when there is one.
func (ru *run) kubeProxy(ctx context.Context) error {
	target := ru.a.target
	var applied []string
	enabled := false
	for _, cp := range ru.a.inv.ControlPlanes() {
		cfg, err := cluster.ReadMachineConfig(ctx, ru.c, cp)
		if err != nil {
			_ = ru.r.StepFailed(stepKubeProxy, err.Error())
			return err
		}
		imgs := cluster.K8sImagesOf(cfg)
		if !imgs.ProxyEnabled {
			continue
		}
		enabled = true
		if imgs.AtVersion(cluster.K8sProxyImage, target) {
			continue
		}
		data, err := cluster.SetK8sImages(cfg, cluster.K8sProxyImage, target)
		if err == nil {
			err = cluster.ApplyNoReboot(ctx, ru.c, cp, data)
		}
		if err != nil {
			_ = ru.r.StepFailed(stepKubeProxy, err.Error())
			return err
		}
		applied = append(applied, cp.Name)
	}
	if !enabled {
		ru.skipped++
		return ru.r.StepSkipped(stepKubeProxy, "kube-proxy is disabled in the machine config (cluster.proxy.disabled)")
	}
	detail, dsSkipped, err := cluster.UpgradeKubeProxyDaemonSet(ctx, ru.c.Kube, target, ru.timeout)
	if err != nil {
		_ = ru.r.StepFailed(stepKubeProxy, err.Error())
		return err
	}
	if len(applied) == 0 && dsSkipped {
		ru.skipped++
		return ru.r.StepSkipped(stepKubeProxy, "cluster.proxy.image already at "+target+"; "+detail)
	}
	msg := detail
	if len(applied) > 0 {
		msg = "cluster.proxy.image → " + target + " on " + strings.Join(applied, ", ") + "; " + detail
	}
	ru.lines = append(ru.lines, "✅ kube-proxy: "+msg)
	return ru.r.StepOK(stepKubeProxy, msg)
}

// kubelet upgrades one node's kubelet and waits until the Node reports the target.
func (ru *run) kubelet(ctx context.Context, n cluster.Node) error {
	id, target := stepKubelet+n.Name, ru.a.target
	cfg, err := cluster.ReadMachineConfig(ctx, ru.c, n)
	if err != nil {
		_ = ru.step(id, n.Name, "", err.Error(), lifecyclev1.StepStatus_STEP_STATUS_FAILED)
		return err
	}
	from := imageTag(cluster.K8sImagesOf(cfg).Kubelet)
	applied := false
	if !cluster.K8sImagesOf(cfg).AtVersion(cluster.K8sKubeletImage, target) {
		_ = ru.step(id, n.Name, from, "applying kubelet "+target+" (NO_REBOOT)", lifecyclev1.StepStatus_STEP_STATUS_RUNNING)
		data, err := cluster.SetK8sImages(cfg, cluster.K8sKubeletImage, target)
		if err == nil {
			err = cluster.ApplyNoReboot(ctx, ru.c, n, data)
		}
		if err != nil {
			_ = ru.step(id, n.Name, from, err.Error(), lifecyclev1.StepStatus_STEP_STATUS_FAILED)
			return err
		}
		applied = true
	}
	if err := cluster.WaitKubeletVersion(ctx, ru.c.Kube, n.Name, target, ru.timeout); err != nil {
		_ = ru.step(id, n.Name, from, err.Error(), lifecyclev1.StepStatus_STEP_STATUS_FAILED)
		return err
	}
	if !applied {
		ru.skipped++
		ru.lines = append(ru.lines, "⏭️ kubelet on "+n.Name+" already at "+target)
		return ru.step(id, n.Name, from, "already at "+target, lifecyclev1.StepStatus_STEP_STATUS_SKIPPED)
	}
	ru.lines = append(ru.lines, fmt.Sprintf("✅ kubelet on %s %s → %s", n.Name, from, target))
	return ru.step(id, n.Name, from, "kubelet reports "+target, lifecyclev1.StepStatus_STEP_STATUS_OK)
}

// imageTag is the tag of an image reference, for step details.
func imageTag(ref string) string {
	if i := strings.Index(ref, "@"); i >= 0 {
		ref = ref[:i]
	}
	slash, colon := strings.LastIndex(ref, "/"), strings.LastIndex(ref, ":")
	if colon <= slash {
		return ""
	}
	return ref[colon+1:]
}
