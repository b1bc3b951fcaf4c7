package gate

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/talosbot/talosbot/plugins/cluster"
	"github.com/talosbot/talosbot/plugins/cluster/identity"
	"github.com/talosbot/talosbot/plugins/cluster/storage"
	"github.com/talosbot/talosbot/plugins/sdk"
	"k8s.io/apimachinery/pkg/util/wait"
)

// Status is a probe's verdict. Only StatusFail fails the gate.
type Status int

const (
	StatusOK Status = iota
	StatusWarn
	StatusFail
	// StatusNotChecked: the probe could not run (no kubeconfig, no Flux
	// installed, Kubernetes API unreachable when not required). It is never
	// shown as passed: its icon is ❔ (as chat.StatusMark("not-checked")), its detail starts with "not checked",
	// and Report sends it as a SKIPPED step.
	StatusNotChecked
)

// NotChecked is how a probe that could not run starts its detail, in the
// gate's lines, its steps and its summary.
const NotChecked = "not checked"

// Icon is the chat marker of a status.
func (s Status) Icon() string {
	switch s {
	case StatusOK:
		return "✅"
	case StatusWarn:
		return "⚠️"
	case StatusNotChecked:
		return "❔" // the same marker as every renderer's "not checked"
	default:
		return "❌"
	}
}

// notChecked is the result of a probe that could not run: a failure when
// the caller requires Kubernetes (a disruptive run with a kubeconfig), else
// "not checked" with why.
func notChecked(required bool, why string) ProbeResult {
	if required {
		return ProbeResult{Status: StatusFail, Detail: why}
	}
	return ProbeResult{Status: StatusNotChecked, Detail: NotChecked + ": " + why}
}

// NoKubeconfig is why the Kubernetes probes cannot run without a kubeconfig.
const NoKubeconfig = "no Kubernetes API (no kubeconfig for this cluster)"

// DefaultTimeout bounds one gate run when settings.gate_timeout_ms is unset
// (config timeouts.gate). On a real cluster Talos's server-side check alone
// polls each condition every 5 s (30 s for "all k8s nodes to report", which
// builds a kubeconfig first); a minute lets a healthy cluster pass with
// room to spare and a broken one fail within a minute.
const DefaultTimeout = time.Minute

// Options tune one gate run. The zero value is usable.
type Options struct {
	// Timeout bounds the whole gate (default DefaultTimeout): with the
	// cluster down the gate fails within it, naming every unreachable node.
	Timeout time.Duration
	// ProbeTimeout bounds each probe (default and maximum: a little under Timeout).
	ProbeTimeout time.Duration
	// HealthCheckWait is how long Talos's server-side health check may wait
	// for its checks to pass (talosctl health's --wait-timeout). Default and
	// maximum: three quarters of what is left of the probe timeout, so the
	// server still has time to say what it was waiting for.
	HealthCheckWait time.Duration
	// Resolver resolves inventory addresses that are host names into the IP
	// literals the health check takes (default net.DefaultResolver).
	Resolver Resolver
	// DrainNodes are the node names about to be drained: the PDB probe fails
	// when a PodDisruptionBudget would block any of them. Nil: every node,
	// which is what a full upgrade drains.
	DrainNodes []string
	// Identity is the operation's resolved node identity: the Kubernetes
	// probes find each node's Node through it. Nil (a read-only /talos
	// health): by InternalIP, then by name.
	Identity *identity.Map
	// RequireKubernetes turns a Kubernetes probe that could not run (no
	// kubeconfig, API unreachable) into a failure instead of "not checked".
	RequireKubernetes bool
	// MaxRaftIndexLag is how far apart the members' raft indexes may be
	// (default 1000: members answer at slightly different instants).
	MaxRaftIndexLag uint64
	// WorstPods is how many unhealthy pods the pod probe names (default 5).
	WorstPods int
	// Now stamps Result.Started (default time.Now).
	Now func() time.Time
	// Storage are the storage settings of the plugin that runs the gate:
	// the Storage probe reads only the integrations they enable. Nil:
	// storage.Defaults (both).
	Storage *storage.Settings
}

// OptionsFrom reads the host settings (gate_timeout_ms).
func OptionsFrom(s sdk.Settings) Options {
	var o Options
	if ms := s.GateTimeoutMs; ms > 0 {
		o.Timeout = time.Duration(ms) * time.Millisecond
	}
	return o
}

func (o Options) withDefaults() Options {
	if o.Timeout <= 0 {
		o.Timeout = DefaultTimeout
	}
	// Probes stop a little before the gate so that each reports its own
	// reason (which node, which call) instead of a bare "no answer".
	margin := min(o.Timeout/10, 500*time.Millisecond)
	if o.ProbeTimeout <= 0 || o.ProbeTimeout > o.Timeout-margin {
		o.ProbeTimeout = o.Timeout - margin
	}
	if o.MaxRaftIndexLag == 0 {
		o.MaxRaftIndexLag = 1000
	}
	if o.WorstPods <= 0 {
		o.WorstPods = 5
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	return o
}

// ProbeResult is one line of the gate.
type ProbeResult struct {
	Name   string // stable id, e.g. "etcd-status"
	Title  string // e.g. "etcd status"
	Status Status
	Detail string
	// Checks are the server's own lines, for the cluster-health probe: the
	// "discovered nodes" line, then the last line of each check Talos ran, as
	// `talosctl health` prints them ("waiting for etcd to be healthy: OK").
	Checks []string
	// Unreachable names the nodes this probe could not reach.
	Unreachable []string
	Duration    time.Duration
}

// Line is the chat line: icon, title, detail.
func (p ProbeResult) Line() string { return p.Status.Icon() + " " + p.Title + ": " + p.Detail }

// Result is the gate's verdict with every reason.
type Result struct {
	Passed bool
	// Probes are in the fixed order of Probes().
	Probes []ProbeResult
	// Reasons lists every failing probe ("etcd status: no leader on cp-1").
	Reasons []string
	// Unreachable lists every node some probe could not reach, in inventory order.
	Unreachable []string
	Started     time.Time
	Duration    time.Duration
}

// Lines returns one chat line per probe. The server's check lines follow
// (indented) only a probe that did not pass, where they say what went
// wrong; after a pass the probe's line counts them ("11 checks passed on
// cp-1"), and each is in the operation's log (Report): eleven "waiting for
// …: OK" lines in chat told a tired reader nothing (issue 31).
func (r *Result) Lines() []string {
	out := make([]string, 0, len(r.Probes))
	for _, p := range r.Probes {
		out = append(out, p.Line())
		if p.Status == StatusOK {
			continue
		}
		for _, c := range p.Checks {
			out = append(out, "    "+c)
		}
	}
	return out
}

// NotCheckedTitles names the probes that could not run, in report order.
func (r *Result) NotCheckedTitles() []string {
	var out []string
	for _, p := range r.Probes {
		if p.Status == StatusNotChecked {
			out = append(out, p.Title)
		}
	}
	return out
}

// Summary is a one-line verdict, its headline first. A gate that passed
// without every probe says how many ran ("health gate passed 4 of 8 probes;
// 4 not checked: …"), never a bare "passed"; every warning's text is in it,
// not only its count, since the summary is what the thread, the record and
// the node's gate step show.
func (r *Result) Summary() string {
	var warns []string
	for _, p := range r.Probes {
		if p.Status == StatusWarn {
			warns = append(warns, p.Title+": "+p.Detail)
		}
	}
	nc := r.NotCheckedTitles()
	var b strings.Builder
	switch {
	case !r.Passed:
		fmt.Fprintf(&b, "health gate failed (%d of %d probes)", len(r.Reasons), len(r.Probes))
	case len(nc) > 0:
		fmt.Fprintf(&b, "health gate passed %d of %d probes", len(r.Probes)-len(nc), len(r.Probes))
	default:
		b.WriteString("health gate passed")
	}
	if len(nc) > 0 {
		fmt.Fprintf(&b, "; %d %s", len(nc), r.notCheckedWhy())
	}
	if len(warns) > 0 {
		fmt.Fprintf(&b, "; %d %s: %s", len(warns), plural(len(warns), "warning", "warnings"), strings.Join(warns, "; "))
	}
	if len(r.Unreachable) > 0 {
		b.WriteString("; unreachable: " + strings.Join(r.Unreachable, ", "))
	}
	return b.String()
}

// notCheckedWhy names the probes that could not run grouped by why, in
// report order: "not checked: Pods, Flux (no Kubernetes API (…))".
func (r *Result) notCheckedWhy() string {
	var whys []string
	titles := map[string][]string{}
	for _, p := range r.Probes {
		if p.Status != StatusNotChecked {
			continue
		}
		why := strings.TrimPrefix(strings.TrimPrefix(p.Detail, NotChecked), ": ")
		if _, ok := titles[why]; !ok {
			whys = append(whys, why)
		}
		titles[why] = append(titles[why], p.Title)
	}
	parts := make([]string, 0, len(whys))
	for _, why := range whys {
		part := strings.Join(titles[why], ", ")
		if why != "" {
			part += " — " + why
		}
		parts = append(parts, part)
	}
	return NotChecked + ": " + strings.Join(parts, "; ")
}

func plural(n int, one, many string) string {
	if n == 1 {
		return one
	}
	return many
}

// Err is nil when the gate passed, else an error listing every reason; the
// disruptive plugins refuse (R1) with it.
func (r *Result) Err() error {
	if r.Passed {
		return nil
	}
	return fmt.Errorf("health gate failed (R3): %s", strings.Join(r.Reasons, "; "))
}

// ProbeInfo describes a probe for plans.
type ProbeInfo struct {
	Name, Title, What string
	Kubernetes        bool
}

type probe struct {
	ProbeInfo
	run func(ctx context.Context, g *gateRun) ProbeResult
}

// probes is the gate (R2): one probe per item of the runbook's health gate.
func probes() []probe {
	return []probe{
		{ProbeInfo{"talos-version", "Talos version", "Talos version on every node, with version skew", false}, probeTalosVersion},
		{ProbeInfo{"cluster-health", "Cluster health", "Talos server-side health check on one control plane, given every node", false}, probeClusterHealth},
		{ProbeInfo{"controlplane-services", "Control-plane services", "etcd (and every other service) healthy on every control plane", false}, probeServices},
		{ProbeInfo{"etcd-status", "etcd status", "one agreed non-zero leader, no errors, alarms or learners, raft indexes close", false}, probeEtcdStatus},
		{ProbeInfo{"kube-nodes", "Kubernetes nodes", "every node registered, Ready and schedulable", true}, probeKubeNodes},
		{ProbeInfo{"pods", "Pods", "pods in all namespaces: counts and the worst few", true}, probePods},
		{ProbeInfo{"flux", "Flux", "Kustomizations and HelmReleases Ready", true}, probeFlux},
		{ProbeInfo{"pdb", "PodDisruptionBudgets", "no budget with 0 disruptions allowed covers a pod on a node to drain", true}, probePDBs},
		{ProbeInfo{"storage", "Storage", "every Longhorn volume healthy, every CloudNativePG cluster's instances ready", true}, probeStorage},
	}
}

// Probes lists the gate's probes in report order.
func Probes() []ProbeInfo {
	ps := probes()
	out := make([]ProbeInfo, len(ps))
	for i, p := range ps {
		out[i] = p.ProbeInfo
	}
	return out
}

type gateRun struct {
	c    *cluster.Clients
	inv  cluster.Inventory
	opts Options
}

type probeDone struct {
	i int
	r ProbeResult
}

// Run is the standard health gate (R1–R3), the one implementation that every
// disruptive plugin runs as its first and last step. All probes run in
// parallel, each under its own timeout, and the gate returns within
// opts.Timeout whatever the cluster does. It never returns nil.
func Run(ctx context.Context, c *cluster.Clients, inv cluster.Inventory, opts Options) *Result {
	opts = opts.withDefaults()
	res := &Result{Started: opts.Now()}
	t0 := time.Now()
	// R24: the gate answers within opts.Timeout even when a node or the
	// cluster never does; a probe still waiting is a failed line, not a hang.
	gctx, cancel := context.WithTimeout(ctx, opts.Timeout) // rule:R24
	defer cancel()

	g := &gateRun{c: c, inv: inv, opts: opts}
	ps := probes() // rule:R2
	results := make([]ProbeResult, len(ps))
	got := make([]bool, len(ps))
	done := make(chan probeDone, len(ps)) // buffered: a late probe never blocks
	for i, p := range ps {
		go func() {
			pctx, pcancel := context.WithTimeout(gctx, opts.ProbeTimeout)
			defer pcancel()
			start := time.Now()
			r := runProbe(pctx, g, p)
			r.Name, r.Title, r.Duration = p.Name, p.Title, time.Since(start)
			done <- probeDone{i, r}
		}()
	}
wait:
	for range ps {
		select {
		case d := <-done:
			results[d.i], got[d.i] = d.r, true
		case <-gctx.Done():
			break wait
		}
	}
	for i, p := range ps {
		if !got[i] {
			results[i] = ProbeResult{Name: p.Name, Title: p.Title, Status: StatusFail,
				Detail: fmt.Sprintf("no answer within the gate timeout (%s)", opts.Timeout), Duration: time.Since(t0)}
		}
	}

	res.Probes = results
	unreachable := map[string]bool{}
	for _, r := range results {
		for _, n := range r.Unreachable {
			unreachable[n] = true
		}
	}
	for _, n := range inv.Nodes {
		if unreachable[n.Name] {
			res.Unreachable = append(res.Unreachable, n.Name)
		}
	}
	explainAddresses(ctx, g, res.Unreachable, results) // address.go
	for _, r := range results {
		if r.Status == StatusFail { // rule:R3
			res.Reasons = append(res.Reasons, r.Title+": "+r.Detail)
		}
	}
	res.Passed = len(res.Reasons) == 0
	res.Duration = time.Since(t0)
	return res
}

// runProbe runs one probe, turning a panic into a failed line so one broken
// probe cannot take the gate (or the plugin process) down.
func runProbe(ctx context.Context, g *gateRun, p probe) (r ProbeResult) {
	defer func() {
		if v := recover(); v != nil {
			r = ProbeResult{Status: StatusFail, Detail: fmt.Sprintf("probe panicked: %v", v)}
		}
	}()
	if p.Kubernetes && (g.c.Kube == nil || g.c.Dynamic == nil) {
		return notChecked(g.opts.RequireKubernetes, NoKubeconfig)
	}
	return p.run(ctx, g)
}

// Timeout reads settings.gate_timeout_ms (default DefaultTimeout): one gate
// run, and with it the gate before a node.
func Timeout(s sdk.Settings) time.Duration {
	if ms := s.GateTimeoutMs; ms > 0 {
		return time.Duration(ms) * time.Millisecond
	}
	return DefaultTimeout
}

// The waits of the gate per use (docs/HEALTHGATE.md, "Waits"). talosctl
// health waits up to 20 minutes (--wait-timeout), because it is what one
// runs while a cluster bootstraps. Ours are shorter and per use:
//   - before a node (and before the first one): one run, DefaultTimeout. The
//     cluster was not touched; a gate that does not pass now says why now.
//   - after a node (between nodes, the closing gate, after a rollback or a
//     removal, and on resume): the node already answered the node wait
//     (timeouts.node); what is left — kubelet Ready, etcd caught up, pods
//     rescheduled — takes minutes on real hardware, so the gate is re-run
//     until it passes, for up to DefaultAfterWait.
//   - /talos health: re-run until it passes, for up to DefaultHealthWait, so
//     a transient does not fail a question about now.
const (
	DefaultAfterWait  = 10 * time.Minute
	DefaultHealthWait = 2 * time.Minute
)

// AfterWait reads settings.gate_after_timeout_ms (default DefaultAfterWait).
func AfterWait(s sdk.Settings) time.Duration {
	if ms := s.GateAfterTimeoutMs; ms > 0 {
		return time.Duration(ms) * time.Millisecond
	}
	return DefaultAfterWait
}

// HealthWait reads settings.health_timeout_ms (default DefaultHealthWait).
func HealthWait(s sdk.Settings) time.Duration {
	if ms := s.HealthTimeoutMs; ms > 0 {
		return time.Duration(ms) * time.Millisecond
	}
	return DefaultHealthWait
}

// Until runs the gate until it passes or within runs out and returns the
// last result. Between nodes a freshly rebooted node needs a moment (kubelet
// Ready, etcd caught up); the gate is the judge, this only gives it time.
//
// within bounds when the last gate may start, not the gate itself (that is
// opts.Timeout): a gate cut short by a deadline would report the deadline
// instead of the cluster.
func Until(ctx context.Context, c *cluster.Clients, inv cluster.Inventory, opts Options, within time.Duration) *Result {
	deadline := time.Now().Add(within)
	var res *Result
	_ = wait.PollUntilContextCancel(ctx, 250*time.Millisecond, true, func(context.Context) (bool, error) {
		res = Run(ctx, c, inv, opts)
		return res.Passed || time.Now().After(deadline), nil
	})
	return res // the last gate, also when ctx ended
}

// OptionsFor returns the gate options of the disruptive run of session s: the host's
// settings, with Kubernetes required whenever a kubeconfig was given (a
// disruptive operation must not pass a gate that silently skipped the
// Kubernetes probes), draining the given nodes (nil: every node).
func OptionsFor(s *cluster.Session, settings sdk.Settings, drain []string) Options {
	o := OptionsFrom(settings)
	o.RequireKubernetes = s.Kube != nil
	o.DrainNodes = drain
	return o
}
