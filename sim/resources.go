package sim

import (
	"bytes"
	"context"
	"crypto/rand"
	"fmt"
	"math/big"
	"net/netip"
	"strings"

	"github.com/cosi-project/runtime/pkg/resource"
	"github.com/cosi-project/runtime/pkg/resource/meta"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	k8sruntime "k8s.io/apimachinery/pkg/runtime"

	"github.com/siderolabs/talos/pkg/machinery/api/common"
	machineapi "github.com/siderolabs/talos/pkg/machinery/api/machine"
	talosconfig "github.com/siderolabs/talos/pkg/machinery/config"
	"github.com/siderolabs/talos/pkg/machinery/config/configloader"
	"github.com/siderolabs/talos/pkg/machinery/config/machine"
	"github.com/siderolabs/talos/pkg/machinery/nethelpers"
	"github.com/siderolabs/talos/pkg/machinery/resources/block"
	"github.com/siderolabs/talos/pkg/machinery/resources/cluster"
	"github.com/siderolabs/talos/pkg/machinery/resources/config"
	"github.com/siderolabs/talos/pkg/machinery/resources/etcd"
	"github.com/siderolabs/talos/pkg/machinery/resources/k8s"
	"github.com/siderolabs/talos/pkg/machinery/resources/network"
	"github.com/siderolabs/talos/pkg/machinery/resources/runtime"
	timeres "github.com/siderolabs/talos/pkg/machinery/resources/time"
	"github.com/siderolabs/talos/pkg/machinery/resources/v1alpha1"
)

// This file derives a node's COSI resources from its simulated state. Each resource names the
// Talos v1.13.9 controller that produces it (its owner, as on a real node); docs/SIMULATOR.md
// lists them with their source paths and divergences.

// desiredResource is one resource as its controller would write it.
type desiredResource struct {
	res   resource.Resource
	owner string
}

// cosiNamespaces are the namespaces the sim registers (a subset of Talos's, see
// internal/app/machined/pkg/runtime/v1alpha2/v1alpha2_state.go).
func cosiNamespaces() []struct{ name, description string } {
	return []struct{ name, description string }{
		{v1alpha1.NamespaceName, "Talos v1alpha1 subsystems glue resources."},
		{cluster.NamespaceName, "Cluster configuration and discovery resources."},
		{config.NamespaceName, "Talos node configuration."},
		{etcd.NamespaceName, "etcd resources."},
		{k8s.NamespaceName, "Kubernetes all node types resources."},
		{k8s.ControlPlaneNamespaceName, "Kubernetes control plane resources."},
		{network.NamespaceName, "Networking resources."},
	}
}

// cosiResourceTypes are the resource types the sim serves. Only these are registered, so any
// other type gives Talos's "resource type ... is not supported" instead of an empty list that
// would pretend the node has none.
func cosiResourceTypes() []meta.ResourceWithRD {
	return append([]meta.ResourceWithRD{
		&block.VolumeStatus{},
		&cluster.Identity{},
		&cluster.Member{},
		&config.MachineConfig{},
		&config.MachineType{},
		&etcd.Member{},
		&etcd.Spec{},
		&k8s.Nodename{},
		&k8s.NodeStatus{},
		&k8s.StaticPodStatus{},
		&network.AddressStatus{},
		&network.HostnameStatus{},
		&network.NodeAddress{},
		&network.Status{},
		&runtime.Diagnostic{},
		&runtime.MachineStatus{},
		&runtime.Version{},
		&timeres.Status{},
		&v1alpha1.Service{},
	}, append(kubeResourceTypes(), landingResourceTypes()...)...) // staticpods.go, landing.go
}

// configCache keeps the parsed machine config until the node's config bytes change.
type configCache struct {
	raw []byte
	cfg talosconfig.Provider
	err error
}

func (c *configCache) get(raw []byte) (talosconfig.Provider, error) {
	if c.cfg == nil && c.err == nil || !bytes.Equal(c.raw, raw) {
		c.raw = bytes.Clone(raw)
		c.cfg, c.err = configloader.NewFromBytes(raw)
	}

	return c.cfg, c.err
}

// cosiHostname is the node's Talos hostname (network.HostnameStatus).
func (n *node) cosiHostname() string { return n.info.Hostname }

// cosiNodename is the node's Kubernetes Node name (k8s.Nodename).
func (n *node) cosiNodename() string { return n.info.NodeName }

func (n *node) machineType() machine.Type {
	if n.info.Role == RoleControlPlane {
		return machine.TypeControlPlane
	}

	return machine.TypeWorker
}

// nodePrefix is the node's address with the sim's /24 block.
func (n *node) nodePrefix() netip.Prefix {
	addr, err := netip.ParseAddr(n.info.IP)
	if err != nil {
		return netip.Prefix{}
	}

	return netip.PrefixFrom(addr, 24)
}

// desiredResources is every resource the node's controllers would have written by now.
func (n *node) desiredResources(ctx context.Context, cache *configCache) []desiredResource {
	n.mu.Lock()
	raw := bytes.Clone(n.config)
	version := n.version
	img := n.img
	n.mu.Unlock()

	var out []desiredResource

	add := func(owner string, r resource.Resource) { out = append(out, desiredResource{res: r, owner: owner}) }

	// config.MachineConfig: machined's runtime stores the applied config under both ids
	// (internal/app/machined/pkg/runtime/v1alpha1/v1alpha1_runtime.go SetConfig/SetPersistedConfig).
	cfg, err := cache.get(raw)
	if err == nil {
		add("", config.NewMachineConfigWithID(cfg, config.ActiveID))
		add("", config.NewMachineConfigWithID(cfg, config.PersistentID))
	} else {
		n.c.log.Warn("machine config does not load", "node", n.info.Name, "err", err)
	}

	add("block.VolumeManagerController", ephemeralVolume())

	if v := n.etcdVolumeStatus(); v != nil {
		add("block.VolumeManagerController", v)
	}

	mt := config.NewMachineType()
	mt.SetMachineType(n.machineType())
	add("config.MachineTypeController", mt)

	v := runtime.NewVersion()
	v.TypedSpec().Name = "Talos"
	v.TypedSpec().Version = version
	add("runtime.VersionController", v)

	hs := network.NewHostnameStatus(network.NamespaceName, network.HostnameID)
	hs.TypedSpec().Hostname = n.cosiHostname()
	add("network.HostnameSpecController", hs)

	nn := k8s.NewNodename(k8s.NamespaceName, k8s.NodenameID)
	nn.TypedSpec().Nodename = n.cosiNodename()
	nn.TypedSpec().HostnameVersion = "1"
	add("k8s.NodenameController", nn)

	ts := n.timeStatus() // machinestatus.go
	add("time.SyncController", ts)

	ns := n.networkStatus()
	add("network.StatusController", ns)

	out = append(out, n.addressResources()...)
	out = append(out, n.kubeResources(img, cfg)...) // staticpods.go

	services := n.serviceResources(ctx)
	for _, s := range services {
		add("v1alpha1.ServiceController", s)
	}

	if m := n.localEtcdMember(services); m != nil {
		add("etcd.MemberController", m)
	}
	if s := n.etcdSpec(); s != nil {
		add("etcd.SpecController", s)
	}

	pods := n.staticPodFault(n.staticPodStatuses(ctx))
	for _, p := range pods {
		add("k8s.KubeletStaticPodController", p)
	}

	nodeStatus := n.nodeStatus(ctx, services)
	if nodeStatus != nil {
		add("k8s.NodeStatusController", nodeStatus)
	}

	add("cluster.NodeIdentityController", n.cosi.identity())

	for _, m := range n.c.clusterMembers() {
		add("cluster.MemberController", m)
	}

	add("runtime.MachineStatusController", n.machineStatus(n.unmetConditions(ts, ns, services, pods, nodeStatus)))

	out = append(out, n.landingResources()...) // landing.go

	return out
}

// ephemeralSize is the sim's EPHEMERAL partition size (a 100 GiB system disk).
const ephemeralSize = 96 << 30

// ephemeralVolume follows block.VolumeManagerController for the EPHEMERAL volume, the one
// pkg/cluster/check's disk size check reads.
func ephemeralVolume() *block.VolumeStatus {
	r := block.NewVolumeStatus(block.NamespaceName, "EPHEMERAL")
	*r.TypedSpec() = block.VolumeStatusSpec{
		Phase:          block.VolumePhaseReady,
		Type:           block.VolumeTypePartition,
		Location:       "/dev/sda6",
		MountLocation:  "/dev/sda6",
		PartitionIndex: 6,
		ParentLocation: "/dev/sda",
		Size:           ephemeralSize,
		PrettySize:     "96 GiB",
		Filesystem:     block.FilesystemTypeXFS,
	}

	return r
}

// addressResources follows network.AddressStatusController and network.NodeAddressController:
// the node's address on eth0 (the sim's loopback alias) and the loopback itself.
func (n *node) addressResources() []desiredResource {
	p := n.nodePrefix()
	lo := netip.MustParsePrefix("127.0.0.1/8")

	var out []desiredResource

	for _, a := range []struct {
		link  string
		index uint32
		p     netip.Prefix
		scope nethelpers.Scope
	}{
		{"lo", 1, lo, nethelpers.ScopeHost},
		{"eth0", 2, p, nethelpers.ScopeGlobal},
	} {
		r := network.NewAddressStatus(network.NamespaceName, network.AddressID(a.link, a.p))
		*r.TypedSpec() = network.AddressStatusSpec{
			Address:   a.p,
			Local:     a.p.Addr(),
			LinkIndex: a.index,
			LinkName:  a.link,
			Family:    nethelpers.FamilyInet4,
			Scope:     a.scope,
			Flags:     nethelpers.AddressFlags(nethelpers.AddressPermanent),
		}
		out = append(out, desiredResource{res: r, owner: "network.AddressStatusController"})
	}

	for _, id := range []string{network.NodeAddressDefaultID, network.NodeAddressCurrentID, network.NodeAddressRoutedID, network.NodeAddressAccumulativeID} {
		r := network.NewNodeAddress(network.NamespaceName, id)
		r.TypedSpec().Addresses = []netip.Prefix{p}
		r.TypedSpec().SortAlgorithm = nethelpers.AddressSortAlgorithmV2
		out = append(out, desiredResource{res: r, owner: "network.NodeAddressController"})
	}

	return out
}

// serviceResources follows v1alpha1.ServiceController: a resource per running service (a
// service that is not running has none).
func (n *node) serviceResources(ctx context.Context) []*v1alpha1.Service {
	var out []*v1alpha1.Service

	for _, si := range n.serviceStates(ctx) {
		if si.GetState() != "Running" {
			continue
		}

		s := v1alpha1.NewService(si.GetId())
		*s.TypedSpec() = v1alpha1.ServiceSpec{Running: true, Healthy: si.GetHealth().GetHealthy(), Unknown: si.GetHealth().GetUnknown()}
		out = append(out, s)
	}

	return out
}

func findService(services []*v1alpha1.Service, id string) *v1alpha1.Service {
	for _, s := range services {
		if s.Metadata().ID() == id {
			return s
		}
	}

	return nil
}

// localEtcdMember follows etcd.MemberController: the local member id while etcd runs healthy.
func (n *node) localEtcdMember(services []*v1alpha1.Service) *etcd.Member {
	svc := findService(services, "etcd")
	m := n.member()

	if svc == nil || !svc.TypedSpec().Healthy || m == nil || !m.Running() {
		return nil
	}

	r := etcd.NewMember(etcd.NamespaceName, etcd.LocalMemberID)
	r.TypedSpec().MemberID = etcd.FormatMemberID(m.ID())

	return r
}

// staticPodStatuses follows k8s.KubeletStaticPodController: one status per static pod the
// kubelet runs, id "<namespace>/<pod>". The sim's kubelet state is the mirror pods it keeps in
// the kube-apiserver (Options.StaticPods); without them a node runs no static pods.
func (n *node) staticPodStatuses(ctx context.Context) []*k8s.StaticPodStatus {
	if n.c.kube == nil || !n.hasStaticPods() {
		return nil
	}

	var out []*k8s.StaticPodStatus

	for _, comp := range StaticPodComponents() {
		name := StaticPodName(comp, n.cosiNodename())

		p, err := n.c.kube.client.CoreV1().Pods(staticPodNamespace).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			continue
		}

		u, err := k8sruntime.DefaultUnstructuredConverter.ToUnstructured(&p.Status)
		if err != nil {
			continue
		}

		r := k8s.NewStaticPodStatus(k8s.NamespaceName, staticPodNamespace+"/"+name)
		r.TypedSpec().PodStatus = u
		out = append(out, r)
	}

	return out
}

// nodeStatus follows k8s.NodeStatusController: the kubelet's Node as the apiserver has it.
// Without Options.Kube there is no apiserver: the Node is taken as Ready while the kubelet
// service is healthy (a divergence, listed in docs/SIMULATOR.md).
func (n *node) nodeStatus(ctx context.Context, services []*v1alpha1.Service) *k8s.NodeStatus {
	name := n.cosiNodename()
	r := k8s.NewNodeStatus(k8s.NamespaceName, name)
	r.TypedSpec().Nodename = name

	if n.c.kube == nil {
		kubelet := findService(services, "kubelet")
		r.TypedSpec().NodeReady = kubelet != nil && kubelet.TypedSpec().Healthy

		return r
	}

	node, err := n.c.kube.client.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		return nil
	}

	r.TypedSpec().Unschedulable = node.Spec.Unschedulable
	r.TypedSpec().Labels = node.Labels
	r.TypedSpec().Annotations = node.Annotations

	for _, c := range node.Status.Conditions {
		if c.Type == corev1.NodeReady {
			r.TypedSpec().NodeReady = c.Status == corev1.ConditionTrue
		}
	}

	for _, cidr := range node.Spec.PodCIDRs {
		if p, err := netip.ParsePrefix(cidr); err == nil {
			r.TypedSpec().PodCIDRs = append(r.TypedSpec().PodCIDRs, p)
		}
	}

	return r
}

// identity is cluster.Identity: a random node id kept across reboots (a reset node never
// comes back in the sim, so the new id a wipe would give is never seen).
func (s *cosiState) identity() *cluster.Identity {
	r := cluster.NewIdentity(cluster.NamespaceName, cluster.LocalIdentity)
	r.TypedSpec().NodeID = s.identityID()

	return r
}

// randomNodeID is a base62 string of 32 random bytes, the shape of Talos's node identity.
func randomNodeID() string {
	var b [32]byte
	_, _ = rand.Read(b[:])

	return new(big.Int).SetBytes(b[:]).Text(62)
}

// clusterMembers follows cluster.MemberController: every node discovery knows of, keyed by its
// Kubernetes node name. A wiped (reset) node has left; a rebooting one stays listed, as its
// affiliate data outlives the reboot.
func (c *Cluster) clusterMembers() []*cluster.Member {
	var out []*cluster.Member

	for _, o := range c.nodes {
		o.mu.Lock()
		st, version := o.state, o.version
		o.mu.Unlock()

		if st == stateReset {
			continue
		}

		m := cluster.NewMember(cluster.NamespaceName, o.cosiNodename())
		*m.TypedSpec() = cluster.MemberSpec{
			NodeID:          o.cosi.identityID(),
			Hostname:        o.cosiHostname(),
			MachineType:     o.machineType(),
			OperatingSystem: fmt.Sprintf("Talos (%s)", version),
		}

		if p := o.nodePrefix(); p.IsValid() {
			m.TypedSpec().Addresses = []netip.Addr{p.Addr()}
		}

		if o.info.Role == RoleControlPlane {
			m.TypedSpec().ControlPlane = &cluster.ControlPlane{APIServerPort: 6443}
		}

		out = append(out, m)
	}

	return out
}

// identityID is the node's cluster identity for other nodes' member lists.
func (s *cosiState) identityID() string {
	s.idMu.Lock()
	defer s.idMu.Unlock()

	if s.nodeID == "" {
		s.nodeID = randomNodeID()
	}

	return s.nodeID
}

// machineStage folds the node's runtime events (this boot's history) into the machine stage.
func (n *node) machineStage() runtime.MachineStage {
	replay, _, cancel, err := n.events.subscribe(&machineapi.EventsRequest{TailEvents: -1})
	if err != nil {
		return runtime.MachineStageUnknown
	}

	cancel()

	return foldStage(replay)
}

// foldStage is MachineStatusController's event watcher: sequence starts set the stage, the
// boot sequence's clean end sets running, a fatal error means a reboot, and the kexec or
// install phase of an installing sequence and the maintenance task mark their stages.
func foldStage(events []simEvent) runtime.MachineStage {
	stage := runtime.MachineStageUnknown
	current := ""

	for _, ev := range events {
		switch p := ev.payload.(type) {
		case *machineapi.SequenceEvent:
			current = p.Sequence

			switch p.Action {
			case machineapi.SequenceEvent_START:
				switch p.Sequence {
				case "boot", "initialize":
					stage = runtime.MachineStageBooting
				case "shutdown":
					stage = runtime.MachineStageShuttingDown
				case "upgrade", "stageUpgrade", "maintenanceUpgrade":
					stage = runtime.MachineStageUpgrading
				case "reset":
					stage = runtime.MachineStageResetting
				case "reboot":
					stage = runtime.MachineStageRebooting
				}
			case machineapi.SequenceEvent_NOOP:
				if p.Error != nil && p.Error.GetCode() == common.Code_FATAL && p.Sequence != "shutdown" {
					stage = runtime.MachineStageRebooting
				}
			case machineapi.SequenceEvent_STOP:
				if p.Sequence == "boot" && p.Error == nil {
					stage = runtime.MachineStageRunning
				}

				current = ""
			}
		case *machineapi.PhaseEvent:
			if p.Action != machineapi.PhaseEvent_START {
				continue
			}

			switch {
			case current == "install" && p.Phase == "install":
				stage = runtime.MachineStageInstalling
			case p.Phase == "kexec" && (current == "install" || current == "upgrade" || current == "stageUpgrade" || current == "maintenanceUpgrade"):
				stage = runtime.MachineStageRebooting
			}
		case *machineapi.TaskEvent:
			if p.Task == "runningMaintenance" {
				switch p.Action {
				case machineapi.TaskEvent_START:
					stage = runtime.MachineStageMaintenance
				case machineapi.TaskEvent_STOP:
					stage = runtime.MachineStageBooting
				}
			}
		}
	}

	return stage
}

// machineStatus follows MachineStatusController: while booting or running, ready when no
// readiness check is unmet (machinestatus.go runs the checks).
func (n *node) machineStatus(unmet []runtime.UnmetCondition) *runtime.MachineStatus {
	stage := n.machineStage()
	r := runtime.NewMachineStatus()
	r.TypedSpec().Stage = stage
	r.TypedSpec().Status.Ready = true

	if stage != runtime.MachineStageBooting && stage != runtime.MachineStageRunning {
		return r
	}

	r.TypedSpec().Status.Ready = len(unmet) == 0
	r.TypedSpec().Status.UnmetConditions = unmet

	return r
}

func servicesProblems(services []*v1alpha1.Service, typ machine.Type) string {
	required := []string{"apid", "machined", "kubelet"}
	if typ.IsControlPlane() {
		required = append(required, "etcd", "trustd")
	}

	var problems []string

	for _, s := range services {
		if !s.TypedSpec().Unknown && !s.TypedSpec().Healthy {
			problems = append(problems, s.Metadata().ID()+" not healthy")
		}
	}

	for _, id := range required {
		if findService(services, id) == nil {
			problems = append(problems, id+" not running")
		}
	}

	return strings.Join(problems, ", ")
}

func staticPodProblems(pods []*k8s.StaticPodStatus) string {
	var problems []string

	for _, p := range pods {
		var st corev1.PodStatus
		if err := k8sruntime.DefaultUnstructuredConverter.FromUnstructured(p.TypedSpec().PodStatus, &st); err != nil {
			problems = append(problems, p.Metadata().ID()+" unknown")

			continue
		}

		switch st.Phase {
		case corev1.PodPending, corev1.PodFailed, corev1.PodUnknown:
			problems = append(problems, p.Metadata().ID()+" "+strings.ToLower(string(st.Phase)))
		case corev1.PodRunning:
			ready := false

			for _, c := range st.Conditions {
				if c.Type == corev1.PodReady {
					ready = c.Status == corev1.ConditionTrue
				}
			}

			if !ready {
				problems = append(problems, p.Metadata().ID()+" not ready")
			}
		}
	}

	return strings.Join(problems, ", ")
}
