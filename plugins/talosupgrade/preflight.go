package talosupgrade

// The target pre-flight (docs/UPGRADES.md "Target pre-flight"): before the
// approval card, every hop of the path is checked against the breaking
// changes its target brings (releases.BreakingChanges), read from the
// cluster's own state: each node's machine configuration (through the Talos
// API; only the fields below leave readFacts, the configuration holds
// secrets), the etcd members' versions, and, where a kubeconfig is given,
// Kubernetes' PersistentVolumes, Pods and Services. A check refuses (the
// cluster would break, or lose something silently) or warns, always with
// the fix. Plan and Run both run it (compute), so a cluster changed after
// the approval is checked again.

import (
	"context"
	"fmt"
	"slices"
	"sort"
	"strings"

	"github.com/siderolabs/talos/pkg/machinery/config"
	"google.golang.org/protobuf/types/known/emptypb"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	machineapi "github.com/siderolabs/talos/pkg/machinery/api/machine"

	"github.com/talosbot/talosbot/internal/releases"
	"github.com/talosbot/talosbot/plugins/cluster"
	"github.com/talosbot/talosbot/plugins/cluster/talos"
	"github.com/talosbot/talosbot/plugins/sdk"
)

// v114 is the first minor with the v1.14 breaking changes.
var v114 = releases.Version{Major: 1, Minor: 14}

// etcdMin is the oldest etcd Talos v1.14 starts from (3.6.0).
var etcdMin = releases.Version{Major: 3, Minor: 6}

// etcdMetricsPort is where etcd serves /metrics and /health up to v1.13,
// and gRPC only from v1.14 (which moves them to 2383).
const etcdMetricsPort = 2379

// nodeFacts is what the pre-flight reads from one node's machine
// configuration: no secret.
type nodeFacts struct {
	node cluster.Node
	// extraKernelArgs is machine.install.extraKernelArgs; grubUKI is
	// machine.install.grubUseUKICmdline (GRUB then takes the UKI's
	// command line, and the arguments had no effect on either path).
	extraKernelArgs []string
	grubUKI         bool
	installImage    string
	// etcdImage is cluster.etcd.image when set (a pin), else "".
	etcdImage string
	// etcdArgs, apiArgs are the keys of the extraArgs of etcd and
	// kube-apiserver (control planes).
	etcdArgs, apiArgs []string
	// isolated: SecurityProfileConfig workloadIsolation: true.
	isolated bool
}

// clusterFacts is the cluster's state the checks read.
type clusterFacts struct {
	nodes map[string]nodeFacts
	// etcd is each control plane's etcd server version (EtcdStatus).
	etcd map[string]string
	// kube says whether Kubernetes was read; kubeNote why not.
	kube     bool
	kubeNote string
	// iscsi, flex: PVs and Pods with in-tree iSCSI or FlexVolume volumes;
	// scrapers: Services that reach etcd's 2379 (metrics scrapers).
	iscsi, flex, scrapers []string
}

// readFacts reads what the checks need. A node whose configuration cannot
// be read is an error: the pre-flight fails closed.
func readFacts(ctx context.Context, s *cluster.Session) (*clusterFacts, error) {
	f := &clusterFacts{nodes: map[string]nodeFacts{}, etcd: map[string]string{}}
	for _, n := range s.Inv.Nodes {
		cfg, err := cluster.MachineConfigOf(ctx, s.Talos.COSI, n.Address)
		if err != nil {
			return nil, fmt.Errorf("read the machine configuration of %s: %w", n.Name, err)
		}
		f.nodes[n.Name] = factsOf(n, cfg)
	}
	ok, _ := cluster.PerNode(ctx, s.Inv, cluster.EtcdTargets(s.Inv), func(nctx context.Context) ([]*machineapi.EtcdStatus, error) {
		resp, err := s.Machine.EtcdStatus(nctx, &emptypb.Empty{})
		return resp.GetMessages(), err
	})
	for name, st := range ok {
		f.etcd[name] = st.GetMemberStatus().GetProtocolVersion()
	}
	f.readKube(ctx, s)
	return f, nil
}

func factsOf(n cluster.Node, cfg config.Provider) nodeFacts {
	nf := nodeFacts{node: n}
	if m := cfg.Machine(); m != nil {
		nf.extraKernelArgs = m.Install().ExtraKernelArgs()
		nf.grubUKI = m.Install().GrubUseUKICmdline()
		nf.installImage = m.Install().Image()
	}
	// Image() answers machinery's default when nothing is set: only the
	// raw field tells a pin from the default.
	if raw := cfg.RawV1Alpha1(); raw != nil && raw.ClusterConfig != nil && raw.ClusterConfig.EtcdConfig != nil {
		nf.etcdImage = raw.ClusterConfig.EtcdConfig.ContainerImage
	}
	if c := cfg.Cluster(); c != nil && c.Etcd() != nil {
		nf.etcdArgs = keys(c.Etcd().ExtraArgs())
	}
	if a := cfg.K8sAPIServerConfig(); a != nil {
		nf.apiArgs = keys(a.ExtraArgs())
	}
	if sp := cfg.SecurityProfileConfig(); sp != nil {
		nf.isolated = sp.WorkloadIsolation()
	}
	return nf
}

func keys(m map[string][]string) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

// readKube lists the PersistentVolumes, Pods and Services the checks look
// at, through the Kubernetes access the roll drains with: the configured
// kubeconfig or, without one, the one the Talos API serves (DrainKube), so
// that a cluster the bot can drain is also a cluster it can check. When
// neither reaches Kubernetes, the checks that need it say they could not run.
func (f *clusterFacts) readKube(ctx context.Context, s *cluster.Session) {
	kube, err := s.DrainKube(ctx)
	if err != nil {
		f.kubeNote = "no kubeconfig, and " + err.Error()
		return
	}
	pvs, err := kube.CoreV1().PersistentVolumes().List(ctx, metav1.ListOptions{})
	if err != nil {
		f.kubeNote = "Kubernetes did not answer: " + err.Error()
		return
	}
	for _, pv := range pvs.Items {
		if pv.Spec.ISCSI != nil {
			f.iscsi = append(f.iscsi, "PV "+pv.Name)
		}
		if pv.Spec.FlexVolume != nil {
			f.flex = append(f.flex, "PV "+pv.Name)
		}
	}
	pods, err := kube.CoreV1().Pods(metav1.NamespaceAll).List(ctx, metav1.ListOptions{})
	if err != nil {
		f.kubeNote = "Kubernetes did not answer: " + err.Error()
		return
	}
	for _, p := range pods.Items {
		for _, v := range p.Spec.Volumes {
			if v.ISCSI != nil {
				f.iscsi = append(f.iscsi, fmt.Sprintf("Pod %s/%s", p.Namespace, p.Name))
			}
			if v.FlexVolume != nil {
				f.flex = append(f.flex, fmt.Sprintf("Pod %s/%s", p.Namespace, p.Name))
			}
		}
	}
	svcs, err := kube.CoreV1().Services(metav1.NamespaceAll).List(ctx, metav1.ListOptions{})
	if err != nil {
		f.kubeNote = "Kubernetes did not answer: " + err.Error()
		return
	}
	for _, svc := range svcs.Items {
		if scrapesEtcd(svc) {
			f.scrapers = append(f.scrapers, fmt.Sprintf("Service %s/%s", svc.Namespace, svc.Name))
		}
	}
	f.kube = true
}

// scrapesEtcd: a Service whose port or target port is etcd's 2379, as the
// etcd Service of kube-prometheus-stack (kubeEtcd) is.
func scrapesEtcd(svc corev1.Service) bool {
	for _, p := range svc.Spec.Ports {
		if p.Port == etcdMetricsPort || p.TargetPort.IntValue() == etcdMetricsPort {
			return true
		}
	}
	return false
}

// preflightHop is one hop as the checks see it: its target and, per node
// it upgrades, the version the node starts the hop from.
type preflightHop struct {
	n, of int
	to    releases.Version
	from  map[string]releases.Version
}

// crosses reports whether the hop enters minor m from below it.
func (h preflightHop) crosses(m releases.Version) bool {
	if h.to.Compare(m) < 0 {
		return false
	}
	for _, f := range h.from {
		if f.Compare(m) < 0 {
			return true
		}
	}
	return false
}

func (h preflightHop) label() string {
	if h.of <= 1 {
		return "→ " + h.to.Tag()
	}
	return fmt.Sprintf("hop %d/%d → %s", h.n, h.of, h.to.Tag())
}

// preflightHops lays out the hops of stops from the nodes' versions at
// (the same decisions as hopRoll: a node done with a hop is not in it).
func preflightHops(at map[string]talos.Release, stops []releases.Version, only map[string]bool) []preflightHop {
	cur := map[string]releases.Version{}
	for n, v := range at {
		if only == nil || only[n] {
			cur[n] = releases.Version(v)
		}
	}
	var out []preflightHop
	for i, stop := range stops {
		last := i == len(stops)-1
		h := preflightHop{n: i + 1, of: len(stops), to: stop, from: map[string]releases.Version{}}
		for n, v := range cur {
			if !hopDone(talos.Release(v), talos.Release(stop), last) {
				h.from[n] = v
				cur[n] = stop
			}
		}
		out = append(out, h)
	}
	return out
}

// preflightResult is what the pre-flight found: the first refusal, the
// warnings, and the one line of the plan's precondition.
type preflightResult struct {
	refusal  *sdk.Refusal
	warnings []string
	summary  string
}

// targetPreflight runs every check on every hop. It changes nothing.
func targetPreflight(f *clusterFacts, hops []preflightHop, inv cluster.Inventory) preflightResult {
	var res preflightResult
	var checked []string
	for _, h := range hops {
		c := hopChecks{f: f, h: h, inv: inv}
		c.run()
		if c.refusal != nil && res.refusal == nil {
			res.refusal = c.refusal
		}
		res.warnings = append(res.warnings, c.warnings...)
		checked = append(checked, fmt.Sprintf("%s: %d check(s)", h.label(), c.ran))
		if len(h.from) > 0 {
			low := h.to
			for _, v := range h.from {
				if v.Compare(low) < 0 {
					low = v
				}
			}
			for _, l := range releases.CrossedLines(low, h.to) {
				res.warnings = append(res.warnings, fmt.Sprintf("ℹ️ %s: %s (docs/UPGRADES.md)", h.label(), l))
			}
		}
	}
	res.summary = strings.Join(checked, "; ")
	return res
}

// hopChecks runs the checks of one hop.
type hopChecks struct {
	f        *clusterFacts
	h        preflightHop
	inv      cluster.Inventory
	ran      int
	refusal  *sdk.Refusal
	warnings []string
}

func (c *hopChecks) refuse(rule, reason, fix string) {
	if c.refusal == nil {
		c.refusal = &sdk.Refusal{Rule: rule, Reason: c.h.label() + ": " + reason, Fix: fix}
	}
}

func (c *hopChecks) warn(format string, args ...any) {
	c.warnings = append(c.warnings, "⚠️ "+c.h.label()+": "+fmt.Sprintf(format, args...))
}

// nodes are the hop's nodes in inventory order, control planes only with cp.
func (c *hopChecks) nodes(cpOnly bool) []nodeFacts {
	var out []nodeFacts
	for _, n := range c.inv.Nodes {
		if _, in := c.h.from[n.Name]; !in || (cpOnly && !n.IsControlPlane()) {
			continue
		}
		out = append(out, c.f.nodes[n.Name])
	}
	return out
}

func (c *hopChecks) run() {
	c.extraKernelArgs()
	if c.h.to.Compare(v114) >= 0 {
		c.factoryInstaller()
	}
	if c.h.crosses(v114) {
		c.etcd36()
		c.tls13()
		c.etcdMetrics()
		c.volumes()
	}
}

// extraKernelArgs: a node upgraded through LifecycleService (it runs v1.13
// or later when the hop starts) would lose machine.install.extraKernelArgs
// silently (siderolabs/talos#13967).
func (c *hopChecks) extraKernelArgs() {
	c.ran++
	ch, _ := releases.ChangeByID("lifecycle-extra-kernel-args")
	var dropped, inert []string
	for _, nf := range c.nodes(false) {
		if talos.MechanicsFor(talos.Release(c.h.from[nf.node.Name])) != talos.MechanicsLifecycle || len(nf.extraKernelArgs) == 0 {
			continue
		}
		what := fmt.Sprintf("%s (%s)", nf.node.Name, strings.Join(argNames(nf.extraKernelArgs), " "))
		if nf.grubUKI {
			inert = append(inert, what)
			continue
		}
		dropped = append(dropped, what)
	}
	if len(dropped) > 0 { // rule:R13-kernelargs
		c.refuse("R13", fmt.Sprintf("machine.install.extraKernelArgs on %s: %s (%s)", strings.Join(dropped, ", "), ch.What, ch.Source), ch.Action)
	}
	if len(inert) > 0 {
		c.warn("machine.install.extraKernelArgs on %s have no effect (grubUseUKICmdline: true takes the UKI's command line); put them in the schematic if a node needs them", strings.Join(inert, ", "))
	}
}

// argNames are the names of kernel arguments, never their values: a value
// may be a secret (siderolink.api=…?jointoken=…, talos.config=… with a
// token), and the refusal goes to chat and the audit trail.
func argNames(args []string) []string {
	out := make([]string, len(args))
	for i, a := range args {
		name, _, _ := strings.Cut(a, "=")
		out[i] = name
	}
	return out
}

// factoryInstaller: from v1.14 only Image Factory installers are published
// (R13); a node whose machine.install.image is another one would reinstall
// from an image that does not exist.
func (c *hopChecks) factoryInstaller() {
	c.ran++
	ch, _ := releases.ChangeByID("factory-installer")
	var bad []string
	for _, nf := range c.nodes(false) {
		if nf.installImage == "" {
			continue
		}
		if inst, err := talos.ParseInstaller(nf.installImage); err != nil || inst.Registry != talos.FactoryRegistry {
			bad = append(bad, fmt.Sprintf("%s (%s)", nf.node.Name, nf.installImage))
		}
	}
	if len(bad) > 0 { // rule:R13-factory
		c.refuse("R13", fmt.Sprintf("machine.install.image is not from Image Factory on %s: %s (%s)", strings.Join(bad, ", "), ch.What, ch.Source), ch.Action)
	}
}

// etcd36: v1.14 starts only from etcd 3.6: every member's running version
// and every pinned image must be 3.6 or later.
func (c *hopChecks) etcd36() {
	c.ran++
	ch, _ := releases.ChangeByID("etcd-3.6")
	var old, unread []string
	for _, nf := range c.nodes(true) {
		v, ok := c.f.etcd[nf.node.Name]
		if !ok {
			unread = append(unread, nf.node.Name)
		} else if ev, err := releases.Parse(v); err != nil || ev.Compare(etcdMin) < 0 {
			old = append(old, fmt.Sprintf("%s runs etcd %s", nf.node.Name, v))
		}
		if nf.etcdImage == "" {
			continue
		}
		tag := nf.etcdImage[strings.LastIndex(nf.etcdImage, ":")+1:]
		if pv, err := releases.Parse(tag); err != nil || pv.Compare(etcdMin) < 0 {
			old = append(old, fmt.Sprintf("%s pins cluster.etcd.image %s", nf.node.Name, nf.etcdImage))
		} else {
			c.warn("%s pins cluster.etcd.image %s: Talos %s keeps the pin instead of its default etcd 3.7", nf.node.Name, nf.etcdImage, c.h.to.MinorTag())
		}
	}
	switch {
	case len(old) > 0: // rule:R10-etcd36
		c.refuse("R10", fmt.Sprintf("%s: %s (%s)", strings.Join(old, "; "), ch.What, ch.Source), ch.Action)
	case len(unread) > 0:
		c.refuse("R10", fmt.Sprintf("the etcd version of %s could not be read: %s", strings.Join(unread, ", "), ch.What),
			"bring etcd back on every control plane (/talos health), then plan again")
	}
}

// tls13: from v1.14 Talos sets tls-min-version for etcd and kube-apiserver
// itself and refuses it (and etcd's listen-client-http-urls) in extraArgs,
// so the component would not start; cipher suites are ignored.
func (c *hopChecks) tls13() {
	c.ran++
	ch, _ := releases.ChangeByID("tls13")
	var denied, ignored []string
	for _, nf := range c.nodes(true) {
		for _, k := range nf.etcdArgs {
			switch k {
			case "tls-min-version", "listen-client-http-urls":
				denied = append(denied, fmt.Sprintf("%s cluster.etcd.extraArgs %s", nf.node.Name, k))
			case "cipher-suites":
				ignored = append(ignored, fmt.Sprintf("%s cluster.etcd.extraArgs %s", nf.node.Name, k))
			}
		}
		for _, k := range nf.apiArgs {
			switch k {
			case "tls-min-version":
				denied = append(denied, fmt.Sprintf("%s cluster.apiServer.extraArgs %s", nf.node.Name, k))
			case "tls-cipher-suites":
				ignored = append(ignored, fmt.Sprintf("%s cluster.apiServer.extraArgs %s", nf.node.Name, k))
			}
		}
	}
	if len(denied) > 0 { // rule:R10-tls13
		c.refuse("R10", fmt.Sprintf("%s: %s (%s)", strings.Join(denied, "; "), ch.What, ch.Source), ch.Action)
	}
	if len(ignored) > 0 {
		c.warn("%s: ignored from %s (TLS 1.3 only); remove them", strings.Join(ignored, "; "), c.h.to.MinorTag())
	}
	c.warn("etcd and kube-apiserver accept TLS 1.3 only from %s: clients that speak only TLS 1.2 (old scrapers, backup tools, load-balancer health checks) stop connecting", c.h.to.MinorTag())
}

// etcdMetrics: from v1.14 etcd's /metrics and /health move to 2383, unless
// listen-metrics-urls is customised.
func (c *hopChecks) etcdMetrics() {
	c.ran++
	for _, nf := range c.nodes(true) {
		if slices.Contains(nf.etcdArgs, "listen-metrics-urls") {
			return // the metrics stay where they are configured
		}
	}
	switch {
	case len(c.f.scrapers) > 0:
		c.warn("etcd /metrics and /health move from 2379 to 2383; %s reach(es) etcd on 2379: change the port to 2383 (same client mTLS)", strings.Join(c.f.scrapers, ", "))
	case !c.f.kube:
		c.warn("etcd /metrics and /health move from 2379 to 2383; scrapers could not be looked for (%s): move any to 2383", c.f.kubeNote)
	}
}

// volumes: in-tree iSCSI volumes stop working with workload isolation, and
// FlexVolume loses its host path.
func (c *hopChecks) volumes() {
	c.ran++
	if !c.f.kube {
		c.warn("in-tree iSCSI and FlexVolume volumes could not be looked for (%s): with workload isolation iSCSI stops, and FlexVolume loses its host path", c.f.kubeNote)
		return
	}
	if len(c.f.iscsi) > 0 {
		state := "off on upgraded clusters until a SecurityProfileConfig turns it on"
		for _, nf := range c.nodes(false) {
			if nf.isolated {
				state = "ON for " + nf.node.Name
				break
			}
		}
		c.warn("in-tree iSCSI volumes (%s) stop working under workload isolation (%s): move them to a CSI driver (csi-driver-iscsi, democratic-csi) first", strings.Join(c.f.iscsi, ", "), state)
	}
	if len(c.f.flex) > 0 {
		c.warn("FlexVolume volumes (%s) lose /usr/libexec/kubernetes: move them to a CSI driver", strings.Join(c.f.flex, ", "))
	}
}

// runPreflight reads the cluster and runs the pre-flight on the path's
// hops: compute's one hook.
func runPreflight(ctx context.Context, s *cluster.Session, at map[string]talos.Release, stops []releases.Version, only map[string]bool) (preflightResult, error) {
	f, err := readFacts(ctx, s)
	if err != nil {
		return preflightResult{}, &sdk.Refusal{Rule: "R1", Reason: "target pre-flight: " + err.Error(),
			Fix: "run /talos health and bring every node back before upgrading"}
	}
	res := targetPreflight(f, preflightHops(at, stops, only), s.Inv)
	if res.refusal != nil {
		return res, res.refusal
	}
	return res, nil
}
