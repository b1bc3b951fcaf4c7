// Package k8supgrade is the built-in plugin behind `/talos upgrade k8s <version> [cluster]
// [--dry-run]`: a Kubernetes upgrade through the Talos API, separate from Talos upgrades
// (R11), in the order of `talosctl upgrade-k8s` (Talos v1.13.9
// pkg/cluster/kubernetes/talos_managed.go). The plan (which is the dry run) reads what runs
// and refuses a downgrade (R21), a skipped minor, a target the nodes' Talos does not support,
// or a target that removed a flag, admission plugin, feature gate or API resource the cluster
// still uses (talosctl's pre-flight checks; R20). The run takes an etcd snapshot and runs the
// gate, pre-pulls the target images, then goes component by component across all control
// planes — kube-apiserver on every control plane, then kube-controller-manager, then
// kube-scheduler — retagging one image in the machine config, applying it NO_REBOOT and
// waiting for that static pod's StaticPodStatus; then kube-proxy; then each kubelet (control
// planes first, keeping the image's -fat/-slim variant) until its Node is Ready at the
// target; then the gate again and a Terraform drift note. Every step whose effect is in
// place is skipped, so a resumed run continues where the last one stopped. See
// docs/K8S-UPGRADE.md.
package k8supgrade

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/siderolabs/talos/pkg/machinery/api/common"
	"github.com/siderolabs/talos/pkg/machinery/config"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/talosbot/talosbot/internal/version"
	"github.com/talosbot/talosbot/plugins/cluster"
	"github.com/talosbot/talosbot/plugins/cluster/etcd"
	"github.com/talosbot/talosbot/plugins/cluster/gate"
	"github.com/talosbot/talosbot/plugins/cluster/k8s"
	"github.com/talosbot/talosbot/plugins/cluster/k8s/preflight"
	"github.com/talosbot/talosbot/plugins/cluster/planguard"
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
	// removals is the pre-flight data (nil: preflight.Kubernetes()).
	removals preflight.Table
}

func (p *Plugin) table() preflight.Table {
	if p.removals != nil {
		return p.removals
	}
	return preflight.Kubernetes()
}

// New returns the plugin.
func New() sdk.Plugin { return &Plugin{} }

// Describe returns the manifest.
func (*Plugin) Describe(context.Context) (*sdk.Manifest, error) {
	return &sdk.Manifest{Name: Name, Version: version.Version, Commands: []*sdk.Command{{
		Name: Command,
		Summary: "Upgrade Kubernetes (not Talos) in talosctl upgrade-k8s's order: pre-flight checks, etcd snapshot, gate, " +
			"pre-pull, kube-apiserver on every control plane, then controller-manager, scheduler, kube-proxy, kubelets, gate; " +
			"two or more minors go one minor at a time under one approval. --dry-run shows the plan and changes nothing",
		Args: []*sdk.Arg{
			{Name: "version", Description: "target Kubernetes version, e.g. v1.36.3 (the leading v is optional)", Required: true},
			{Name: "cluster", Description: "cluster to upgrade (default: the channel's cluster)"},
			{Name: sdk.ArgDryRun, Description: "only report the plan; change nothing", Flag: true, Boolean: true},
		},
		Effect:        sdk.EffectDisruptive,
		NeedsSnapshot: true,
		Drill:         sdk.DrillKubernetesUpgrade,
		Example:       "/talos upgrade k8s v1.36.3 staging --dry-run",

		PausesBetweenNodes: true, // checks sdk.PauseRequested before each node
	}}}, nil
}

// parse validates the request and normalises the target version.
func parse(req *sdk.OperationRequest) (cluster.Inventory, string, error) {
	inv, err := cluster.InventoryFrom(&req.Cluster)
	if err != nil {
		return cluster.Inventory{}, "", err
	}
	raw := req.Args["version"]
	if raw == "" {
		return cluster.Inventory{}, "", errors.New("no target version: use /talos upgrade k8s <version>, e.g. v1.36.3")
	}
	target, _, err := k8s.ParseVersion(raw)
	if err != nil {
		return cluster.Inventory{}, "", err
	}
	return inv, target, nil
}

// Plan reads the cluster (read-only) and returns the steps, or a refusal.
func (p *Plugin) Plan(ctx context.Context, req *sdk.OperationRequest) (*sdk.OperationPlan, error) {
	if _, err := decodeConfig(req.Config); err != nil {
		return nil, err
	}
	inv, target, err := parse(req)
	if err != nil {
		return nil, err
	}
	if len(req.Credentials.Kubeconfig) == 0 {
		return &sdk.OperationPlan{Target: target, Refusal: sdk.Refuse("R20",
			"no kubeconfig for "+inv.Name+": the running Kubernetes versions cannot be read, so the version rules cannot be checked",
			"configure the cluster's kubeconfig (Terraform output or file)")}, nil
	}
	if err := cluster.CheckRole(req.Credentials.Talosconfig, "the Kubernetes upgrade", cluster.GateMethods, cluster.SnapshotMethods, cluster.K8sUpgradeMethods); err != nil {
		plan, perr := sdk.RefusalPlan(err)
		if plan != nil {
			plan.Target = target
		}
		return plan, perr
	}
	clients, err := cluster.Connect(ctx, inv, &req.Credentials)
	if err != nil {
		return nil, err
	}
	defer clients.Close()
	kp, err := assessPath(ctx, clients, inv, req, target, p.table())
	if err != nil {
		return nil, err
	}
	plan := kp.plan()
	plan.Warnings = append(plan.Warnings, gate.PlanWarnings(ctx, clients)...)
	return plan, nil
}

// run is one Run: its reporter, clients and the lines of the chat result.
type run struct {
	r       sdk.Reporter
	c       *cluster.Clients
	req     *sdk.OperationRequest
	table   preflight.Table
	path    *kubePath
	a       *assessment // the hop under way
	timeout time.Duration
	lines   []string
	skipped int
	// ended: a Result was sent (a stop, a refusal or a pause); nothing more runs.
	ended bool
}

// end sends the run's one Result.
func (ru *run) end(res *sdk.Result) error {
	ru.ended = true
	return ru.r.Result(res)
}

// paused reports (and ends the run with sdk.PausedResult) whether the host asked to pause
// before the next step that touches node: never inside a step.
func (ru *run) paused(node string, err *error) bool {
	if !sdk.PauseRequested(ru.req) {
		return false
	}
	*err = ru.end(sdk.PausedResult(node, append(ru.lines, ru.reached()...)))
	return true
}

// Run executes the upgrade (or, with --dry-run, reports the plan).
func (p *Plugin) Run(ctx context.Context, req *sdk.OperationRequest, r sdk.Reporter) error {
	inv, target, err := parse(req)
	if err != nil {
		return err
	}
	if len(req.Credentials.Kubeconfig) == 0 {
		return r.Result(&sdk.Result{OK: false, Summary: "refused", Refusal: sdk.Refuse("R20",
			"no kubeconfig for "+inv.Name, "configure the cluster's kubeconfig (Terraform output or file)")})
	}
	clients, err := cluster.Connect(ctx, inv, &req.Credentials)
	if err != nil {
		return err
	}
	defer clients.Close()

	// The rules are checked again: a resumed run does not re-plan, and the cluster may
	// have changed since the approval.
	kp, err := assessPath(ctx, clients, inv, req, target, p.table())
	if err != nil {
		return err
	}
	if ref := kp.refused(); ref != nil {
		return r.Result(&sdk.Result{OK: false, Summary: "Kubernetes upgrade to " + target + " refused", Refusal: ref})
	}
	if kp.hops[0].dryRun {
		for _, s := range kp.plan().Steps {
			if err := r.StepSkipped(s.ID, "dry run"); err != nil {
				return err
			}
		}
		how := ""
		if kp.multi() {
			how = " by the path " + kp.spelled
		}
		return r.Result(&sdk.Result{OK: true, Lines: kp.dryRunLines(),
			Summary: fmt.Sprintf("dry run: %s can go from %s to %s%s; nothing was changed", inv.Name, kp.hops[0].versions.Lowest().Version, target, how)})
	}

	timeout := DefaultNodeTimeout
	if ms := req.Settings.NodeTimeoutMs; ms > 0 {
		timeout = time.Duration(ms) * time.Millisecond
	}
	ru := &run{r: r, c: clients, req: req, table: p.table(), path: kp, timeout: timeout}
	return ru.execute(ctx, req, p.now)
}

// stop ends the run with a failed result that names the step and says how to continue.
func (ru *run) stop(ctx context.Context, where string, err error) error {
	if ctx.Err() != nil {
		return fmt.Errorf("%s: %w", where, ctx.Err())
	}
	where = ru.a.hop.title() + where
	lines := append(ru.lines, "❌ "+where+": "+err.Error(),
		"⏸️ the remaining steps were not run; fix the cause and run the same command again (or /talos resume): steps already at "+ru.a.target+" are skipped")
	lines = append(lines, ru.reached()...)
	return ru.end(&sdk.Result{OK: false, Lines: lines, Error: err.Error(),
		Summary: fmt.Sprintf("Kubernetes upgrade of %s to %s stopped at %s", ru.a.cluster, ru.path.target, where)})
}

// reached says, for a path of several hops, which hop the run reached: the record of a
// stop or a pause.
func (ru *run) reached() []string {
	if !ru.path.multi() || ru.a == nil {
		return nil
	}
	h := ru.a.hop
	done := "no hop finished"
	if h.hop > 1 {
		done = fmt.Sprintf("hops 1–%d done", h.hop-1)
		if h.hop == 2 {
			done = "hop 1 done"
		}
	}
	return []string{fmt.Sprintf("🧭 path %s: %s; stopped in hop %d/%d (→ %s)", ru.path.spelled, done, h.hop, h.hops, h.target)}
}

// execute runs the path hop by hop. The first hop is the one assessed at the start; each
// later hop is assessed again when it starts, from what runs then (its Talos support and
// pre-flight checks included). A failure stops at that hop: no later hop starts.
func (ru *run) execute(ctx context.Context, req *sdk.OperationRequest, now func() time.Time) error {
	first, r := ru.path.hops[0], ru.r

	// R5: with plugins.k8supgrade.plan_before_upgrade, no upgrade on top of a Terraform
	// migration (the same guard as the Talos upgrade's).
	cfg, err := decodeConfig(req.Config)
	if err != nil {
		return err // Plan decoded the same section: only a changed host gets here
	}
	guard := planguard.Wanted(req.Cluster.Name, cfg.PlanBeforeUpgrade)
	if ref := planguard.BeforeUpgrade(ctx, first.cluster, guard, req.Evidence, cfg.TerraformGuard, r); ref != nil {
		return r.Result(sdk.RefusedResult(ref, "Kubernetes upgrade of "+first.cluster+" refused: the Terraform plan guard stopped it; nothing was changed"))
	}
	for i, h := range ru.path.hops {
		if i > 0 {
			// Pause between hops, too: nothing of the next hop was touched.
			ru.a = h
			if err := error(nil); ru.paused("hop "+fmt.Sprint(h.hop.hop)+" ("+h.target+")", &err) {
				return err
			}
			live, err := assess(ctx, ru.c, h.inv, req, h.hop, first.ids, nil, ru.table)
			if err != nil {
				return ru.stop(ctx, "the checks before the hop (nothing of it was changed)", err)
			}
			if live.refusal != nil {
				res := sdk.RefusedResult(live.refusal,
					fmt.Sprintf("Kubernetes upgrade of %s stopped before hop %d/%d (→ %s): its checks refused it; nothing of it was changed", h.cluster, h.hop.hop, h.hop.hops, h.target))
				res.Lines = append(append(ru.lines, "❌ "+live.refusal.Reason+" — "+live.refusal.Fix), ru.reached()...)
				return ru.end(res)
			}
			h = live
		}
		ru.a = h
		if err := ru.hop(ctx, req, now); err != nil || ru.ended {
			return err
		}
	}
	return ru.finish(req)
}

// hop runs one hop: snapshot, gate, pre-pull, static pods, kube-proxy, kubelets, gate.
func (ru *run) hop(ctx context.Context, req *sdk.OperationRequest, now func() time.Time) error {
	a, r := ru.a, ru.r
	inv, px := a.inv, a.hop.prefix

	// R20: snapshot, then gate, before anything changes.
	sopts := etcd.SnapshotOptionsFor(req)
	sopts.Now = now
	sopts.Step = func(id, detail string, err error) { etcd.ReportStep(r, px+id, detail, err) }
	snap, err := etcd.TakeSnapshot(ctx, ru.c, inv, sopts)
	if snap == nil {
		return ru.stop(ctx, "etcd snapshot", err)
	}
	if err := r.Artifact(snap.Artifact()); err != nil {
		return err
	}
	ru.lines = append(ru.lines, "✅ "+a.hop.title()+"etcd snapshot "+snap.ID+" ("+snap.Path+")")

	gopts := gate.OptionsFrom(req.Settings)
	gopts.RequireKubernetes = true
	verdict := gate.Run(ctx, ru.c, inv, gopts)
	if err := gate.Report(r, px+gateBefore, verdict); err != nil {
		return err
	}
	if err := cluster.CheckGateBefore("the Kubernetes upgrade", verdict.Reasons); err != nil {
		res := sdk.RefusedResult(err, "Kubernetes upgrade refused: "+a.hop.title()+verdict.Summary())
		res.Lines = append(verdict.Lines(), ru.reached()...)
		return ru.end(res)
	}

	if err := ru.prePull(ctx); err != nil {
		return ru.stop(ctx, "the pre-pull (nothing was changed)", err)
	}
	// Pause between steps that touch a node (sdk.PauseRequested): checked before each
	// one, never inside it.
	var perr error
	for _, comp := range k8s.StaticPodComponents() {
		for _, cp := range inv.ControlPlanes() {
			if ru.paused(comp+" on "+cp.Name, &perr) {
				return perr
			}
			if err := ru.staticPod(ctx, comp, cp); err != nil {
				return ru.stop(ctx, comp+" on "+cp.Name, err)
			}
		}
	}
	if ru.paused("kube-proxy", &perr) {
		return perr
	}
	if err := ru.kubeProxy(ctx); err != nil {
		return ru.stop(ctx, "kube-proxy", err)
	}
	for _, n := range a.kubeletOrder() {
		if ru.paused("kubelet on "+n.Name, &perr) {
			return perr
		}
		if err := ru.kubelet(ctx, n); err != nil {
			return ru.stop(ctx, "kubelet on "+n.Name, err)
		}
	}
	if ru.paused("the bootstrap manifests", &perr) {
		return perr
	}
	if err := ru.syncManifests(ctx); err != nil { // manifests.go
		return ru.stop(ctx, "the bootstrap manifest sync", err)
	}

	verdict = gate.Until(ctx, ru.c, inv, gopts, gate.AfterWait(req.Settings))
	if err := gate.Report(r, px+gateAfter, verdict); err != nil {
		return err
	}
	if !verdict.Passed {
		return ru.stop(ctx, "the health gate after the upgrade", verdict.Err())
	}
	if !a.hop.last() {
		ru.lines = append(ru.lines, fmt.Sprintf("🧭 hop %d/%d done: every component at %s or newer; gate passed", a.hop.hop, a.hop.hops, a.target))
	}
	return nil
}

// finish ends a run whose every hop passed: the Terraform note and the result.
func (ru *run) finish(req *sdk.OperationRequest) error {
	a, r := ru.a, ru.r

	note := fmt.Sprintf("talos_kubernetes_version = %q", a.target)
	if decl := req.Cluster.Declared["talos_kubernetes_version"]; decl != "" && !sameVersion(decl, a.target) {
		note += fmt.Sprintf(" (Terraform declares %q: update it, or the next apply reports drift)", decl)
	}
	if err := r.StepOK(stepDriftNote, note); err != nil {
		return err
	}
	lines := append(ru.lines, "📝 Terraform: set "+note)
	for _, d := range differences() {
		lines = append(lines, "ℹ️ not done (unlike talosctl upgrade-k8s): "+d)
	}
	summary := fmt.Sprintf("Kubernetes on %s is at %s", a.cluster, a.target)
	if ru.path.multi() {
		summary += " by the path " + ru.path.spelled
	}
	if ru.skipped > 0 {
		summary += fmt.Sprintf(" (%d step(s) were already done and skipped)", ru.skipped)
	}
	// The gate after the upgrade passed: Terraform's variable may follow
	// (R18). It is written with a leading v.
	return ru.end(&sdk.Result{OK: true, Summary: summary, Lines: lines,
		Declared: map[string]string{"talos_kubernetes_version": "v" + strings.TrimPrefix(a.target, "v")}})
}

func (ru *run) step(id, node, from, detail string, st sdk.StepStatus) error {
	return ru.r.Step(&sdk.StepEvent{StepID: id, Status: st, Detail: detail, Node: node, FromVersion: from, ToVersion: ru.a.target})
}

// talosPullTimeout is how long Talos retries a registry it cannot reach before its pull fails
// (image.PullTimeout, internal/pkg/containers/image/image.go, v1.13.9).
const talosPullTimeout = 20 * time.Minute

// prePull pulls the target images before anything changes, as talosctl does (talos_managed.go
// prePullImages): the three control-plane images on every control plane into the CRI
// namespace, then every node's kubelet image (its own repository and variant) into the system
// namespace. A node that does not serve ImagePull is skipped, as talosctl skips it; any other
// failure stops the run with nothing changed.
func (ru *run) prePull(ctx context.Context) error {
	target := ru.a.target
	_ = ru.r.StepStarted(ru.a.hop.prefix+stepPrePull, "pulling the "+target+" images")
	var pulled, skipped []string
	do := func(n cluster.Node, ns common.ContainerdNamespace, image string) error {
		// Talos answers ImagePull only once the image is in, and retries a registry it
		// cannot reach for up to 20 minutes (image.PullTimeout): bound each pull by the node
		// timeout, so that a stalled registry ends with a clear failure, nothing changed.
		limit := min(ru.timeout, talosPullTimeout-time.Minute)
		pctx, cancel := context.WithTimeout(ctx, limit)
		err := k8s.PullImage(pctx, ru.c, n, ns, image)
		// The limit can show as the gRPC status before pctx's own timer fires: the
		// deadline travels to the node, whose side may end the call first.
		timedOut := errors.Is(pctx.Err(), context.DeadlineExceeded) || status.Code(err) == codes.DeadlineExceeded
		if err != nil && timedOut && ctx.Err() == nil {
			err = fmt.Errorf("pull %s on %s did not finish within %s (Talos retries a registry it cannot reach for up to %s): check that the node reaches the registry (network, DNS, registry mirrors), or raise timeouts.node",
				image, n.Name, limit, talosPullTimeout)
		}
		cancel()
		switch {
		case errors.Is(err, k8s.ErrPullUnsupported):
			skipped = append(skipped, n.Name)
			return nil
		case err != nil:
			_ = ru.r.StepFailed(ru.a.hop.prefix+stepPrePull, err.Error())
			return err
		}
		pulled = append(pulled, image+" on "+n.Name)
		return nil
	}
	cps := ru.a.inv.ControlPlanes()
	cfgs := make([]config.Provider, len(cps))
	for i, cp := range cps {
		cfg, err := k8s.ReadMachineConfig(ctx, ru.c, cp)
		if err != nil {
			_ = ru.r.StepFailed(ru.a.hop.prefix+stepPrePull, err.Error())
			return err
		}
		cfgs[i] = cfg
	}
	// talosctl's order: each image on every control plane, then the next image.
	for _, comp := range k8s.StaticPodComponents() {
		for i, cp := range cps {
			if err := do(cp, common.ContainerdNamespace_NS_CRI, k8s.Retag(k8s.ConfigImage(cfgs[i], comp), target)); err != nil {
				return err
			}
		}
	}
	for _, n := range ru.a.kubeletOrder() {
		ks, err := k8s.KubeletSpecOf(ctx, ru.c, n)
		if err != nil {
			_ = ru.r.StepFailed(ru.a.hop.prefix+stepPrePull, err.Error())
			return err
		}
		if err := do(n, common.ContainerdNamespace_NS_SYSTEM, k8s.KubeletTarget(ks.Image, target)); err != nil {
			return err
		}
	}
	detail := fmt.Sprintf("%d image pull(s) done", len(pulled))
	if len(skipped) > 0 {
		detail += "; ImagePull not served by " + strings.Join(dedupeNames(skipped), ", ") + " (not pre-pulled there, as talosctl skips it)"
	}
	ru.lines = append(ru.lines, "✅ pre-pull: "+detail)
	return ru.r.StepOK(ru.a.hop.prefix+stepPrePull, detail)
}

func dedupeNames(names []string) []string {
	var out []string
	seen := map[string]bool{}
	for _, n := range names {
		if !seen[n] {
			seen[n] = true
			out = append(out, n)
		}
	}
	return out
}

// staticPod upgrades one static pod on one control plane, as talosctl's
// upgradeStaticPodOnNode: set that component's image in the machine config, apply it
// NO_REBOOT, wait until the node's StaticPodStatus shows the pod Ready at the new image. A
// config already at the target (a run killed while waiting) is not applied again, only
// waited for; a pod already there is skipped.
func (ru *run) staticPod(ctx context.Context, comp string, cp cluster.Node) error {
	id, target := ru.a.hop.prefix+stepStaticPod(comp, cp.Name), ru.a.target
	fail := func(from string, err error) error {
		_ = ru.step(id, cp.Name, from, err.Error(), sdk.StepFailed)
		return err
	}
	cfg, err := k8s.ReadMachineConfig(ctx, ru.c, cp)
	if err != nil {
		return fail("", err)
	}
	cur := k8s.ConfigImage(cfg, comp)
	from, want := imageTag(cur), k8s.Retag(cur, target)
	if ru.a.done(from) {
		// A hop before the last never takes a component back.
		want = cur
	}
	applied := false
	if !k8s.SameImage(cur, want) {
		_ = ru.step(id, cp.Name, from, "applying "+want+" (NO_REBOOT)", sdk.StepRunning)
		data, err := k8s.SetImage(cfg, comp, want)
		if err == nil {
			err = k8s.ApplyNoReboot(ctx, ru.c, cp, data)
		}
		if err != nil {
			return fail(from, err)
		}
		applied = true
	}
	if err := k8s.WaitStaticPod(ctx, ru.c, cp, comp, want, ru.timeout); err != nil {
		return fail(from, err)
	}
	if !applied {
		ru.skipped++
		ru.lines = append(ru.lines, "⏭️ "+comp+" on "+cp.Name+" already at "+target)
		return ru.step(id, cp.Name, from, "already at "+target+"; Ready", sdk.StepSkipped)
	}
	ru.lines = append(ru.lines, fmt.Sprintf("✅ %s on %s %s → %s, Ready", comp, cp.Name, from, target))
	return ru.step(id, cp.Name, from, "Ready at "+want+" (StaticPodStatus)", sdk.StepOK)
}

// kubeProxy sets cluster.proxy.image on every control plane (where kube-proxy is enabled)
// and rolls the kube-proxy DaemonSet when there is one.
func (ru *run) kubeProxy(ctx context.Context) error {
	target := ru.a.target
	var applied []string
	enabled := false
	for _, cp := range ru.a.inv.ControlPlanes() {
		cfg, err := k8s.ReadMachineConfig(ctx, ru.c, cp)
		if err != nil {
			_ = ru.r.StepFailed(ru.a.hop.prefix+stepKubeProxy, err.Error())
			return err
		}
		imgs := k8s.ImagesOf(cfg)
		if !imgs.ProxyEnabled {
			continue
		}
		enabled = true
		want := k8s.Retag(imgs.Proxy, target)
		if k8s.SameImage(imgs.Proxy, want) || ru.a.done(imageTag(imgs.Proxy)) {
			continue
		}
		data, err := k8s.SetImage(cfg, k8s.ComponentKubeProxy, want)
		if err == nil {
			err = k8s.ApplyNoReboot(ctx, ru.c, cp, data)
		}
		if err != nil {
			_ = ru.r.StepFailed(ru.a.hop.prefix+stepKubeProxy, err.Error())
			return err
		}
		applied = append(applied, cp.Name)
	}
	if !enabled {
		ru.skipped++
		return ru.r.StepSkipped(ru.a.hop.prefix+stepKubeProxy, "kube-proxy is disabled in the machine config (cluster.proxy.disabled)")
	}
	detail, dsSkipped, err := k8s.UpgradeKubeProxyDaemonSet(ctx, ru.c.Kube, target, ru.timeout)
	if err != nil {
		_ = ru.r.StepFailed(ru.a.hop.prefix+stepKubeProxy, err.Error())
		return err
	}
	if len(applied) == 0 && dsSkipped {
		ru.skipped++
		return ru.r.StepSkipped(ru.a.hop.prefix+stepKubeProxy, "cluster.proxy.image already at "+target+"; "+detail)
	}
	msg := detail
	if len(applied) > 0 {
		msg = "cluster.proxy.image → " + target + " on " + strings.Join(applied, ", ") + "; " + detail
	}
	ru.lines = append(ru.lines, "✅ kube-proxy: "+msg)
	return ru.r.StepOK(ru.a.hop.prefix+stepKubeProxy, msg)
}

// kubelet upgrades one node's kubelet, as talosctl's upgradeKubeletOnNode: the running
// image comes from the node's KubeletSpec (the machine config may not set one), the new one
// keeps its repository and -fat/-slim variant; apply NO_REBOOT, then wait until the Node
// reports the target and is Ready.
func (ru *run) kubelet(ctx context.Context, n cluster.Node) error {
	id, target := ru.a.hop.prefix+stepKubelet+n.Name, ru.a.target
	fail := func(from string, err error) error {
		_ = ru.step(id, n.Name, from, err.Error(), sdk.StepFailed)
		return err
	}
	ks, err := k8s.KubeletSpecOf(ctx, ru.c, n)
	if err != nil {
		return fail("", err)
	}
	cfg, err := k8s.ReadMachineConfig(ctx, ru.c, n)
	if err != nil {
		return fail("", err)
	}
	from, want := imageTag(ks.Image), k8s.KubeletTarget(ks.Image, target)
	waitFor := target
	if ru.a.done(from) && !k8s.SameImage(ks.Image, want) {
		// Past this hop's version (a hop before the last): left as it is.
		want, waitFor = ks.Image, strings.TrimSuffix(from, k8s.KubeletSuffix(ks.Image))
	}
	applied := false
	if !k8s.SameImage(ks.Image, want) {
		_ = ru.step(id, n.Name, from, "applying "+want+" (NO_REBOOT)", sdk.StepRunning)
		data, err := k8s.SetImage(cfg, k8s.ComponentKubelet, want)
		if err == nil {
			err = k8s.ApplyNoReboot(ctx, ru.c, n, data)
		}
		if err != nil {
			return fail(from, err)
		}
		applied = true
	}
	if err := k8s.WaitKubelet(ctx, ru.c, n, ru.a.ids.KubeNode(n.Name), waitFor, ru.timeout); err != nil {
		return fail(from, err)
	}
	if !applied {
		ru.skipped++
		ru.lines = append(ru.lines, "⏭️ kubelet on "+n.Name+" already at "+target)
		return ru.step(id, n.Name, from, "already at "+target, sdk.StepSkipped)
	}
	ru.lines = append(ru.lines, fmt.Sprintf("✅ kubelet on %s %s → %s (%s), Node Ready", n.Name, from, target, want))
	return ru.step(id, n.Name, from, "Node Ready, kubelet "+target+" ("+want+")", sdk.StepOK)
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
