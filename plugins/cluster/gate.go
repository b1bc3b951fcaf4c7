package cluster

import (
	"context"
	"fmt"
	"strings"
	"time"

	lifecyclev1 "github.com/talosbot/talosbot/plugins/proto/lifecycle/v1"
)

// Status is a probe's verdict. Only StatusFail fails the gate.
type Status int

const (
	StatusOK Status = iota
	StatusWarn
	StatusFail
)

// Icon is the chat marker of a status.
func (s Status) Icon() string {
	switch s {
	case StatusOK:
		return "✅"
	case StatusWarn:
		return "⚠️"
	default:
		return "❌"
	}
}

// DefaultGateTimeout bounds a whole gate when settings.gate_timeout_ms is unset.
const DefaultGateTimeout = 30 * time.Second

// GateOptions tune one gate run. The zero value is usable.
type GateOptions struct {
	// Timeout bounds the whole gate (default 30 s): with the cluster down the
	// gate fails within it, naming every unreachable node.
	Timeout time.Duration
	// ProbeTimeout bounds each probe (default and maximum: a little under Timeout).
	ProbeTimeout time.Duration
	// HealthCheckWait is how long Talos's server-side health check may wait
	// for conditions to settle (default 10 s, capped by the probe timeout).
	HealthCheckWait time.Duration
	// DrainNodes are the node names about to be drained: the PDB probe fails
	// when a PodDisruptionBudget would block any of them. Nil: every node,
	// which is what a full upgrade drains.
	DrainNodes []string
	// RequireKubernetes turns "skipped: no Kubernetes API" into a failure.
	RequireKubernetes bool
	// MaxRaftIndexLag is how far apart the members' raft indexes may be
	// (default 1000: members answer at slightly different instants).
	MaxRaftIndexLag uint64
	// WorstPods is how many unhealthy pods the pod probe names (default 5).
	WorstPods int
	// Now stamps GateResult.Started (default time.Now).
	Now func() time.Time
}

// GateOptionsFrom reads the host settings (gate_timeout_ms).
func GateOptionsFrom(s *lifecyclev1.Settings) GateOptions {
	var o GateOptions
	if ms := s.GetGateTimeoutMs(); ms > 0 {
		o.Timeout = time.Duration(ms) * time.Millisecond
	}
	return o
}

func (o GateOptions) withDefaults() GateOptions {
	if o.Timeout <= 0 {
		o.Timeout = DefaultGateTimeout
	}
	// Probes stop a little before the gate so that each reports its own
	// reason (which node, which call) instead of a bare "no answer".
	margin := min(o.Timeout/10, 500*time.Millisecond)
	if o.ProbeTimeout <= 0 || o.ProbeTimeout > o.Timeout-margin {
		o.ProbeTimeout = o.Timeout - margin
	}
	if o.HealthCheckWait <= 0 {
		o.HealthCheckWait = 10 * time.Second
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
	// Skipped marks a probe that could not run (no Kubernetes API).
	Skipped bool
	Detail  string
	// Unreachable names the nodes this probe could not reach.
	Unreachable []string
	Duration    time.Duration
}

// Line is the chat line: icon, title, detail.
func (p ProbeResult) Line() string { return p.Status.Icon() + " " + p.Title + ": " + p.Detail }

// GateResult is the gate's verdict with every reason.
type GateResult struct {
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

// Lines returns one chat line per probe.
func (r *GateResult) Lines() []string {
	out := make([]string, len(r.Probes))
	for i, p := range r.Probes {
		out[i] = p.Line()
	}
	return out
}

// Summary is a one-line verdict.
func (r *GateResult) Summary() string {
	warn := 0
	for _, p := range r.Probes {
		if p.Status == StatusWarn {
			warn++
		}
	}
	var b strings.Builder
	if r.Passed {
		b.WriteString("health gate passed")
	} else {
		fmt.Fprintf(&b, "health gate failed (%d of %d probes)", len(r.Reasons), len(r.Probes))
	}
	if warn > 0 {
		fmt.Fprintf(&b, ", %d warning(s)", warn)
	}
	if len(r.Unreachable) > 0 {
		b.WriteString("; unreachable: " + joinNames(r.Unreachable))
	}
	return b.String()
}

// Err is nil when the gate passed, else an error listing every reason; the
// disruptive plugins refuse (R1) with it.
func (r *GateResult) Err() error {
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
	c    *Clients
	inv  Inventory
	opts GateOptions
}

type probeDone struct {
	i int
	r ProbeResult
}

// Gate is the standard health gate (R1–R3), the one implementation that every
// disruptive plugin runs as its first and last step. All probes run in
// parallel, each under its own timeout, and the gate returns within
// opts.Timeout whatever the cluster does. It never returns nil.
func Gate(ctx context.Context, c *Clients, inv Inventory, opts GateOptions) *GateResult {
	opts = opts.withDefaults()
	res := &GateResult{Started: opts.Now()}
	t0 := time.Now()
	gctx, cancel := context.WithTimeout(ctx, opts.Timeout)
	defer cancel()

	g := &gateRun{c: c, inv: inv, opts: opts}
	ps := probes()
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
		if r.Status == StatusFail {
			res.Reasons = append(res.Reasons, r.Title+": "+r.Detail)
		}
		for _, n := range r.Unreachable {
			unreachable[n] = true
		}
	}
	for _, n := range inv.Nodes {
		if unreachable[n.Name] {
			res.Unreachable = append(res.Unreachable, n.Name)
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
		st := StatusWarn
		if g.opts.RequireKubernetes {
			st = StatusFail
		}
		return ProbeResult{Status: st, Skipped: true, Detail: "skipped: no Kubernetes API (no kubeconfig for this cluster)"}
	}
	return p.run(ctx, g)
}
