// Package gates is the built-in plugin behind `/talos gates [cluster]`: the
// Talos lifecycle runbook's production readiness gates, each reported as
// pass, fail or manual. It changes nothing.
//
// Its section, plugins.gates (config.go; all keys optional):
//
//	host_label                          Node label carrying the Proxmox host (default topology.kubernetes.io/zone)
//	longhorn_volume                     Talos UserVolumeConfig name (default longhorn)
//	longhorn_namespace                  Longhorn namespace (default longhorn-system)
//	flux_path                           expected spec.path of the flux-system Kustomization
//	                                    (default: any path containing "production" and not "staging")
//
// The command needs NEED_STAGING_DRILLS: the host fills Evidence.staging_drills
// from the audit trail with the newest succeeded staging run of every command
// whose manifest declares a drill (e.g. `upgrade talos` declares
// DRILL_TALOS_UPGRADE). Unset means the host did not look, and the drill gate
// is manual; a drill without evidence means it has not succeeded on staging.
package gates

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/siderolabs/talos/pkg/machinery/client"
	talosconfig "github.com/siderolabs/talos/pkg/machinery/config"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"

	"github.com/talosbot/talosbot/internal/version"
	"github.com/talosbot/talosbot/plugins/cluster"
	"github.com/talosbot/talosbot/plugins/sdk"
)

// Name is the plugin's catalogue name.
const Name = "gates"

// Command is the chat command.
const Command = "gates"

// Defaults.
const (
	DefaultHostLabel         = "topology.kubernetes.io/zone"
	DefaultLonghornVolume    = "longhorn"
	DefaultLonghornNamespace = "longhorn-system"
	controlPlaneLabel        = "node-role.kubernetes.io/control-plane"
	podSecurityEnforce       = "pod-security.kubernetes.io/enforce"
)

// Drills are the staging drills the production gate needs.
func Drills() []Drill {
	return []Drill{
		{sdk.DrillTalosUpgrade, "Talos upgrade"},
		{sdk.DrillKubernetesUpgrade, "Kubernetes upgrade"},
		{sdk.DrillNodeReplacement, "node replacement"},
		{sdk.DrillEtcdRestore, "etcd restore"},
	}
}

// Drill is one staging drill.
type Drill struct {
	Kind  sdk.Drill
	Title string
}

// Status of a gate.
type Status string

// Gate verdicts.
const (
	Pass   Status = "pass"
	Fail   Status = "fail"
	Manual Status = "manual"
)

func (s Status) icon() string {
	switch s {
	case Pass:
		return "✅"
	case Manual:
		return "✋"
	default:
		return "❌"
	}
}

// Gate is one readiness gate's verdict.
type Gate struct {
	ID, Title string
	Status    Status
	Detail    string
}

// Line renders the gate for chat.
func (g Gate) Line() string {
	return fmt.Sprintf("%s %s (%s): %s", g.Status.icon(), g.Title, g.Status, g.Detail)
}

// gateList is the order and titles of the gates.
var gateTitles = [][2]string{
	{"control-planes", "three control planes on three Proxmox hosts"},
	{"endpoint-vip", "Kubernetes endpoint is a Talos VIP"},
	{"talosconfig-endpoints", "talosconfig lists every control plane"},
	{"host-labels", "every node labelled with its Proxmox host"},
	{"longhorn-volume", "Longhorn user volume on every node"},
	{"longhorn-namespace", "Longhorn namespace is privileged"},
	{"flux-path", "production Flux path"},
	{"backups", "backups scheduled (ADR 006)"},
	{"staging-drills", "staging drills passed"},
}

// Plugin implements sdk.Plugin. It keeps no state between calls.
type Plugin struct{}

// New returns the plugin.
func New() sdk.Plugin { return &Plugin{} }

// Describe returns the manifest.
func (*Plugin) Describe(context.Context) (*sdk.Manifest, error) {
	return &sdk.Manifest{Name: Name, Version: version.Version, Commands: []*sdk.Command{{
		Name:    Command,
		Summary: "Report the runbook's production readiness gates as pass, fail or manual (read-only)",
		Args:    []*sdk.Arg{{Name: "cluster", Description: "cluster to check (default: the channel's cluster)"}},
		Effect:  sdk.EffectReadOnly,
		Needs:   []sdk.Need{sdk.NeedStagingDrills},
		Example: "/talos gates production",
	}}}, nil
}

// Plan lists the gates. It does not contact the cluster.
func (*Plugin) Plan(_ context.Context, req *sdk.OperationRequest) (*sdk.OperationPlan, error) {
	inv, err := cluster.InventoryFrom(&req.Cluster)
	if err != nil {
		return nil, err
	}
	plan := &sdk.OperationPlan{Summary: fmt.Sprintf("Production readiness gates of %s: %d gates (read-only)", inv.Name, len(gateTitles)), Target: inv.Name}
	for _, g := range gateTitles {
		plan.Steps = append(plan.Steps, &sdk.Step{ID: g[0], Title: g[1], Kind: "gate"})
	}
	if len(req.Credentials.Kubeconfig) == 0 {
		plan.Warnings = append(plan.Warnings, "no kubeconfig: the Kubernetes gates will fail")
	}
	cfg, err := decodeConfig(req.Config)
	if err != nil {
		return nil, err
	}
	c := sdk.NewCanonical(req).List("nodes", cluster.Names(inv.Nodes)).Str("host_label", cfg.HostLabel).
		Str("longhorn_volume", cfg.LonghornVolume).Str("longhorn_namespace", cfg.LonghornNamespace).Str("flux_path", cfg.FluxPath).
		Bool("drills_known", req.Evidence.StagingDrills != nil)
	for i, ev := range req.Evidence.StagingDrills.GetDrills() {
		c.Sub("drill", i).Str("kind", ev.Drill.String()).Str("operation", ev.OperationID).Int("ended_unix", ev.EndedUnix)
	}
	plan.CanonicalInputs = c.Bytes()
	return plan, nil
}

// Inputs is what Evaluate looks at.
type Inputs struct {
	Inventory   cluster.Inventory
	Talosconfig []byte
	// Config is the plugin's section with its defaults filled.
	Config Config
	// Drills is Evidence.staging_drills: nil when the host did not look.
	Drills *sdk.StagingDrills
	// Configs maps node names to their machine configurations; ConfigErr
	// maps nodes whose configuration could not be read to why.
	Configs   map[string]talosconfig.Config
	ConfigErr map[string]string
	Kube      kubernetes.Interface
	Dynamic   dynamic.Interface
}

// Evaluate computes every gate.
func Evaluate(ctx context.Context, in Inputs) []Gate {
	checks := map[string]func(context.Context, Inputs) (Status, string){
		"control-planes":        controlPlanes,
		"endpoint-vip":          endpointVIP,
		"talosconfig-endpoints": talosconfigEndpoints,
		"host-labels":           hostLabels,
		"longhorn-volume":       longhornVolume,
		"longhorn-namespace":    longhornNamespace,
		"flux-path":             fluxPath,
		"backups":               backups,
		"staging-drills":        stagingDrills,
	}
	out := make([]Gate, len(gateTitles))
	var wg sync.WaitGroup
	for i, g := range gateTitles {
		wg.Go(func() {
			st, d := checks[g[0]](ctx, in)
			out[i] = Gate{ID: g[0], Title: g[1], Status: st, Detail: d}
		})
	}
	wg.Wait()
	return out
}

var errNoKube = errors.New("no Kubernetes API: configure the cluster's kubeconfig (Terraform output talos_kubeconfig)")

func controlPlanes(ctx context.Context, in Inputs) (Status, string) {
	if in.Kube == nil {
		return Fail, errNoKube.Error()
	}
	label := in.Config.HostLabel
	nodes, err := in.Kube.CoreV1().Nodes().List(ctx, metav1.ListOptions{LabelSelector: controlPlaneLabel})
	if err != nil {
		return Fail, "list control-plane nodes: " + err.Error()
	}
	hosts := map[string][]string{}
	var unlabelled []string
	for _, n := range nodes.Items {
		if h := n.Labels[label]; h != "" {
			hosts[h] = append(hosts[h], n.Name)
		} else {
			unlabelled = append(unlabelled, n.Name)
		}
	}
	desc := describeHosts(hosts)
	switch {
	case len(nodes.Items) < 3:
		return Fail, fmt.Sprintf("%d control-plane node(s) (%s); the runbook needs three hyperconverged control planes (ADR 007)", len(nodes.Items), desc)
	case len(unlabelled) > 0:
		return Fail, fmt.Sprintf("control planes without %s: %s", label, strings.Join(unlabelled, ", "))
	case len(hosts) < 3:
		return Fail, fmt.Sprintf("%d control planes on only %d Proxmox host(s) (%s); put each on its own host", len(nodes.Items), len(hosts), desc)
	}
	return Pass, fmt.Sprintf("%d control planes on %d hosts (%s)", len(nodes.Items), len(hosts), desc)
}

func describeHosts(hosts map[string][]string) string {
	keys := make([]string, 0, len(hosts))
	for h := range hosts {
		keys = append(keys, h)
	}
	sort.Strings(keys)
	parts := make([]string, len(keys))
	for i, h := range keys {
		sort.Strings(hosts[h])
		parts[i] = h + ": " + strings.Join(hosts[h], ", ")
	}
	return strings.Join(parts, "; ")
}

// configsOf returns the control planes' machine configurations, or a
// failure naming the nodes whose configuration could not be read.
func configsOf(in Inputs, nodes []cluster.Node) (map[string]talosconfig.Config, string) {
	out := map[string]talosconfig.Config{}
	var bad []string
	for _, n := range nodes {
		if c, ok := in.Configs[n.Name]; ok {
			out[n.Name] = c
		} else {
			bad = append(bad, n.Name+": "+in.ConfigErr[n.Name])
		}
	}
	if len(bad) > 0 {
		return nil, "cannot read the machine configuration of " + strings.Join(bad, "; ")
	}
	return out, ""
}

func vips(c talosconfig.Config) []string {
	var out []string
	for _, v := range c.NetworkVirtualIPConfigs() {
		out = append(out, v.VIP().String())
	}
	if c.Machine() != nil && c.Machine().Network() != nil {
		for _, d := range c.Machine().Network().Devices() {
			if v := d.VIPConfig(); v != nil && v.IP() != "" {
				out = append(out, v.IP())
			}
			for _, vl := range d.Vlans() {
				if v := vl.VIPConfig(); v != nil && v.IP() != "" {
					out = append(out, v.IP())
				}
			}
		}
	}
	return out
}

func endpointVIP(_ context.Context, in Inputs) (Status, string) {
	cps := in.Inventory.ControlPlanes()
	cfgs, bad := configsOf(in, cps)
	if bad != "" {
		return Fail, bad
	}
	var endpoint string
	for _, n := range cps {
		if k := cfgs[n.Name].K8sClusterConfig(); k != nil && k.ClusterEndpoint() != nil {
			endpoint = k.ClusterEndpoint().Hostname()
			break
		}
	}
	if endpoint == "" {
		return Fail, "no control plane declares cluster.controlPlane.endpoint"
	}
	if n, ok := in.Inventory.Node(endpoint); ok {
		return Fail, fmt.Sprintf("the Kubernetes endpoint %s is %s's own address: use a Talos Layer 2 VIP so the endpoint survives a control-plane failure", endpoint, n.Name)
	}
	if _, err := netip.ParseAddr(endpoint); err != nil {
		return Manual, fmt.Sprintf("the Kubernetes endpoint %s is a DNS name: confirm it resolves to the Talos VIP (or a load balancer over every control plane)", endpoint)
	}
	var missing []string
	for _, n := range cps {
		if !slices.Contains(vips(cfgs[n.Name]), endpoint) {
			missing = append(missing, n.Name)
		}
	}
	if len(missing) > 0 {
		return Fail, fmt.Sprintf("the Kubernetes endpoint %s is not a Talos VIP on %s: declare it (Layer2VIPConfig or machine.network.interfaces[].vip) on every control plane", endpoint, strings.Join(missing, ", "))
	}
	return Pass, fmt.Sprintf("%s is a Talos VIP on all %d control planes", endpoint, len(cps))
}

func talosconfigEndpoints(_ context.Context, in Inputs) (Status, string) {
	cfg, err := cluster.ParseTalosconfig(in.Talosconfig)
	if err != nil {
		return Fail, err.Error()
	}
	ctx := cfg.Contexts[cfg.Context]
	if ctx == nil {
		return Fail, fmt.Sprintf("talosconfig has no current context %q", cfg.Context)
	}
	listed := map[string]bool{}
	for _, ep := range ctx.Endpoints {
		if h, _, err := net.SplitHostPort(ep); err == nil {
			ep = h
		}
		listed[ep] = true
	}
	var missing []string
	for _, n := range in.Inventory.ControlPlanes() {
		if !listed[n.Address] {
			missing = append(missing, n.Name+" ("+n.Address+")")
		}
	}
	if len(missing) > 0 {
		return Fail, fmt.Sprintf("talosconfig context %s lacks %s: list every control-plane address, because the VIP depends on etcd quorum", cfg.Context, strings.Join(missing, ", "))
	}
	return Pass, fmt.Sprintf("context %s lists all %d control-plane addresses", cfg.Context, len(in.Inventory.ControlPlanes()))
}

func hostLabels(ctx context.Context, in Inputs) (Status, string) {
	if in.Kube == nil {
		return Fail, errNoKube.Error()
	}
	label := in.Config.HostLabel
	nodes, err := in.Kube.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
	if err != nil {
		return Fail, "list nodes: " + err.Error()
	}
	var problems []string
	for _, n := range nodes.Items {
		h := n.Labels[label]
		inv, known := in.Inventory.Node(n.Name)
		switch {
		case h == "":
			problems = append(problems, n.Name+" has no "+label)
		case known && inv.Host != "" && inv.Host != h:
			problems = append(problems, fmt.Sprintf("%s is labelled %s but the inventory puts it on %s", n.Name, h, inv.Host))
		}
	}
	if len(problems) > 0 {
		return Fail, strings.Join(problems, "; ") + "; label every node with its Proxmox host (Terraform node labels)"
	}
	if len(nodes.Items) == 0 {
		return Fail, "no Kubernetes nodes"
	}
	return Pass, fmt.Sprintf("all %d nodes carry %s matching the inventory", len(nodes.Items), label)
}

func longhornVolume(_ context.Context, in Inputs) (Status, string) {
	cfgs, bad := configsOf(in, in.Inventory.Nodes)
	if bad != "" {
		return Fail, bad
	}
	name := in.Config.LonghornVolume
	var missing []string
	for _, n := range in.Inventory.Nodes {
		found := false
		for _, v := range cfgs[n.Name].UserVolumeConfigs() {
			if v.Name() == name {
				found = true
			}
		}
		if !found {
			missing = append(missing, n.Name)
		}
	}
	if len(missing) > 0 {
		return Fail, fmt.Sprintf("no UserVolumeConfig %q on %s: add the Longhorn data disk and user volume (mounted at /var/mnt/%s) to every node", name, strings.Join(missing, ", "), name)
	}
	return Pass, fmt.Sprintf("UserVolumeConfig %q on all %d nodes", name, len(in.Inventory.Nodes))
}

func longhornNamespace(ctx context.Context, in Inputs) (Status, string) {
	if in.Kube == nil {
		return Fail, errNoKube.Error()
	}
	name := in.Config.LonghornNamespace
	ns, err := in.Kube.CoreV1().Namespaces().Get(ctx, name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return Fail, fmt.Sprintf("namespace %s does not exist: install Longhorn through Flux", name)
	}
	if err != nil {
		return Fail, "get namespace: " + err.Error()
	}
	if v := ns.Labels[podSecurityEnforce]; v != "privileged" {
		return Fail, fmt.Sprintf("namespace %s has %s=%q: Longhorn needs %s=privileged", name, podSecurityEnforce, v, podSecurityEnforce)
	}
	return Pass, fmt.Sprintf("namespace %s has %s=privileged", name, podSecurityEnforce)
}

var kustomizationGVR = schema.GroupVersionResource{Group: "kustomize.toolkit.fluxcd.io", Version: "v1", Resource: "kustomizations"}

func fluxPath(ctx context.Context, in Inputs) (Status, string) {
	if in.Dynamic == nil {
		return Fail, errNoKube.Error()
	}
	ks, err := in.Dynamic.Resource(kustomizationGVR).Namespace("flux-system").Get(ctx, "flux-system", metav1.GetOptions{})
	if apierrors.IsNotFound(err) || (err != nil && strings.Contains(err.Error(), "the server could not find the requested resource")) {
		return Fail, "no Kustomization flux-system/flux-system: bootstrap Flux with the production cluster path"
	}
	if err != nil {
		return Fail, "get Kustomization flux-system/flux-system: " + err.Error()
	}
	path, _, _ := unstructured.NestedString(ks.Object, "spec", "path")
	if want := in.Config.FluxPath; want != "" {
		if strings.TrimPrefix(path, "./") != strings.TrimPrefix(want, "./") {
			return Fail, fmt.Sprintf("Flux reconciles %q, not the production path %q", path, want)
		}
		return Pass, fmt.Sprintf("Flux reconciles %s", path)
	}
	if !strings.Contains(path, "production") || strings.Contains(path, "staging") {
		return Fail, fmt.Sprintf("Flux reconciles %q, which is not a production path: create the production cluster path (or set flux_path)", path)
	}
	return Pass, fmt.Sprintf("Flux reconciles %s", path)
}

func backups(context.Context, Inputs) (Status, string) {
	return Manual, "confirm every backup in the ADR 006 table has a scheduled job (a Proxmox disk with backup = true is only eligible, not scheduled)"
}

func stagingDrills(_ context.Context, in Inputs) (Status, string) {
	if in.Drills == nil {
		return Manual, "the bot was not given the staging audit summary: confirm a staging Talos upgrade, Kubernetes upgrade, node replacement and etcd restore passed"
	}
	var done, missing []string
	for _, d := range Drills() {
		if ev := drillEvidence(in.Drills, d.Kind); ev != nil {
			done = append(done, d.Title+" "+ev.OperationID+" "+time.Unix(ev.EndedUnix, 0).UTC().Format(time.RFC3339))
		} else {
			missing = append(missing, d.Title)
		}
	}
	if len(missing) > 0 {
		return Fail, "no succeeded staging " + strings.Join(missing, ", ") + " in the audit trail; run them on staging first" +
			map[bool]string{true: " (passed: " + strings.Join(done, "; ") + ")", false: ""}[len(done) > 0]
	}
	return Pass, strings.Join(done, "; ")
}

func drillEvidence(s *sdk.StagingDrills, kind sdk.Drill) *sdk.DrillEvidence {
	for _, ev := range s.GetDrills() {
		if ev.Drill == kind && ev.OperationID != "" {
			return ev
		}
	}
	return nil
}

// readConfigs reads every node's machine configuration through Talos.
func readConfigs(ctx context.Context, c *client.Client, inv cluster.Inventory) (map[string]talosconfig.Config, map[string]string) {
	cfgs, errs := map[string]talosconfig.Config{}, map[string]string{}
	var mu sync.Mutex
	var wg sync.WaitGroup
	for _, n := range inv.Nodes {
		wg.Go(func() {
			cfg, err := readConfig(ctx, c, n.Address)
			mu.Lock()
			defer mu.Unlock()
			if err != nil {
				errs[n.Name] = err.Error()
			} else {
				cfgs[n.Name] = cfg
			}
		})
	}
	wg.Wait()
	return cfgs, errs
}

func readConfig(ctx context.Context, c *client.Client, addr string) (talosconfig.Config, error) {
	// The machine config holds secrets: it stays in this function's caller's memory.
	return cluster.MachineConfigOf(ctx, c.COSI, addr)
}

// Run evaluates the gates and reports one step and line per gate.
func (*Plugin) Run(ctx context.Context, req *sdk.OperationRequest, r sdk.Reporter) error {
	inv, err := cluster.InventoryFrom(&req.Cluster)
	if err != nil {
		return err
	}
	for _, g := range gateTitles {
		if err := r.StepStarted(g[0], ""); err != nil {
			return err
		}
	}
	cfg, err := decodeConfig(req.Config)
	if err != nil {
		return err
	}
	creds := &req.Credentials
	in := Inputs{Inventory: inv, Talosconfig: creds.Talosconfig, Config: cfg, Drills: req.Evidence.StagingDrills}
	tc, err := cluster.NewTalosClient(ctx, creds.Talosconfig, cluster.Addresses(inv.ControlPlanes()))
	if err != nil {
		in.ConfigErr = map[string]string{}
		for _, n := range inv.Nodes {
			in.ConfigErr[n.Name] = err.Error()
		}
	} else {
		defer tc.Close()
		in.Configs, in.ConfigErr = readConfigs(ctx, tc, inv)
	}
	if kc := creds.Kubeconfig; len(kc) > 0 {
		if in.Kube, in.Dynamic, err = cluster.NewKubeClients(kc); err != nil {
			return err
		}
	}
	gs := Evaluate(ctx, in)
	counts := map[Status]int{}
	lines := make([]string, len(gs))
	var failed []string
	for i, g := range gs {
		counts[g.Status]++
		lines[i] = g.Line()
		switch g.Status {
		case Pass:
			err = r.StepOK(g.ID, g.Detail)
		case Manual:
			err = r.StepSkipped(g.ID, "manual: "+g.Detail)
		default:
			err = r.StepFailed(g.ID, g.Detail)
			failed = append(failed, g.Title)
		}
		if err != nil {
			return err
		}
	}
	res := &sdk.Result{OK: counts[Fail] == 0, Lines: lines,
		Summary: fmt.Sprintf("%s production readiness: %d pass, %d fail, %d manual", inv.Name, counts[Pass], counts[Fail], counts[Manual])}
	if len(failed) > 0 {
		res.Error = "not ready: " + strings.Join(failed, "; ")
	}
	return r.Result(res)
}
