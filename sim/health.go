package sim

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"net/netip"
	"net/url"
	"slices"
	"strings"
	"time"

	"github.com/hashicorp/go-multierror"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	clusterapi "github.com/siderolabs/talos/pkg/machinery/api/cluster"
	machineapi "github.com/siderolabs/talos/pkg/machinery/api/machine"
	"github.com/siderolabs/talos/pkg/machinery/imager/quirks"
)

// clusterService is ClusterService.HealthCheck as machined serves it
// (internal/app/machined/internal/server/v1alpha1/v1alpha1_cluster.go): control planes only;
// the node list comes from the request (IP literals) or discovery; then pkg/cluster/check's
// DefaultClusterChecks run in order, each polled every Options.HealthCheckInterval, with the
// progress lines of its healthReporter. The checks read the sim's state directly instead of
// calling back into the API; a node that does not answer makes an attempt wait for its timeout.
type clusterService struct {
	clusterapi.UnimplementedClusterServiceServer

	n *node
}

// hcNode is a cluster.NodeInfo: an internal IP, with the sim node behind it (nil: none).
type hcNode struct {
	ip   string
	cp   bool
	node *node
}

type hcInfo struct {
	nodes []hcNode
}

func (i hcInfo) controlPlanes() []hcNode {
	var out []hcNode

	for _, n := range i.nodes {
		if n.cp {
			out = append(out, n)
		}
	}

	return out
}

func ips(nodes []hcNode) []string {
	out := make([]string, len(nodes))
	for i, n := range nodes {
		out[i] = n.ip
	}

	return out
}

type condition struct {
	desc   string
	assert func(ctx context.Context, info hcInfo) error
}

// errSkip is conditions.ErrSkipAssertion.
var errSkip = errors.New("SKIP")

func (s *clusterService) HealthCheck(req *clusterapi.HealthCheckRequest, srv grpc.ServerStreamingServer[clusterapi.HealthCheckProgress]) error {
	if s.n.info.Role != RoleControlPlane {
		return status.Error(codes.Unimplemented, "cluster health check is only available on control plane nodes")
	}

	ctx, cancel := context.WithTimeout(srv.Context(), req.GetWaitTimeout().AsDuration())
	defer cancel()

	info, err := s.clusterInfo(req)
	if err != nil {
		return err
	}

	if err := srv.Send(&clusterapi.HealthCheckProgress{Message: fmt.Sprintf("discovered nodes: %q", ips(info.nodes))}); err != nil {
		return err
	}

	for _, c := range s.checks() {
		if err := ctx.Err(); err != nil {
			return err
		}

		if err := s.poll(ctx, srv, c, info); err != nil {
			return err
		}
	}

	return nil
}

// clusterInfo is buildClusterInfo: an explicit list must be IP literals (cluster.IPsToNodeInfos);
// without one, discovery gives every node that is still a cluster member (not reset).
func (s *clusterService) clusterInfo(req *clusterapi.HealthCheckRequest) (hcInfo, error) {
	c := s.n.c
	ci := req.GetClusterInfo()

	var info hcInfo

	if len(ci.GetControlPlaneNodes()) > 0 || len(ci.GetWorkerNodes()) > 0 {
		for i, list := range [][]string{ci.GetControlPlaneNodes(), ci.GetWorkerNodes()} {
			for _, a := range list {
				ip, err := netip.ParseAddr(a)
				if err != nil {
					return hcInfo{}, err
				}

				info.nodes = append(info.nodes, hcNode{ip: ip.String(), cp: i == 0, node: c.byIP[ip.String()]})
			}
		}

		return info, nil
	}

	for _, n := range c.nodes {
		n.mu.Lock()
		member := !n.wiped
		n.mu.Unlock()

		if member {
			info.nodes = append(info.nodes, hcNode{ip: n.info.IP, cp: n.info.Role == RoleControlPlane, node: n})
		}
	}

	return info, nil
}

// poll is conditions.PollingCondition.Wait under check.Wait's reporter: each attempt gets the
// interval as its timeout; the line "waiting for <desc>: <last result>" is sent when it changes.
func (s *clusterService) poll(ctx context.Context, srv grpc.ServerStreamingServer[clusterapi.HealthCheckProgress], c condition, info hcInfo) error {
	interval := s.n.c.opts.HealthCheckInterval
	last := ""

	report := func(result string) error {
		line := strings.TrimSpace(fmt.Sprintf("waiting for %s: %s", c.desc, result))
		if line == last {
			return nil
		}

		last = line

		return srv.Send(&clusterapi.HealthCheckProgress{Message: line})
	}

	if err := report("..."); err != nil {
		return err
	}

	t := time.NewTicker(interval)
	defer t.Stop()

	for {
		actx, cancel := context.WithTimeout(ctx, interval)
		err := c.assert(actx, info)
		cancel()

		switch {
		case err == nil:
			return report("OK")
		case errors.Is(err, errSkip):
			return report("SKIP")
		}

		if rerr := report(err.Error()); rerr != nil {
			return rerr
		}

		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-t.C:
		}
	}
}

// checks is check.DefaultClusterChecks (pkg/cluster/check/default.go), in its order.
func (s *clusterService) checks() []condition {
	c := s.n.c

	out := []condition{
		{"etcd to be healthy", func(ctx context.Context, info hcInfo) error {
			return serviceHealth(ctx, info.controlPlanes(), "etcd")
		}},
		{"etcd members to be consistent across nodes", etcdConsistent},
		{"etcd members to be control plane nodes", etcdMembersAreControlPlanes},
		{"apid to be ready", func(ctx context.Context, info hcInfo) error { return reach(ctx, info.nodes) }},
		{"all nodes memory sizes", memorySizes},
		{"all nodes disk sizes", diskSizes},
		{"no diagnostics", func(ctx context.Context, info hcInfo) error { return reach(ctx, info.nodes) }},
		{"kubelet to be healthy", func(ctx context.Context, info hcInfo) error {
			return serviceHealth(ctx, info.controlPlanes(), "kubelet")
		}},
		{"all nodes to finish boot sequence", allBooted},
	}

	if c.kube == nil {
		return append(out, skippedKubernetesChecks()...)
	}

	k := c.kube

	return append(out,
		condition{"all k8s nodes to report", func(ctx context.Context, info hcInfo) error {
			return k.nodesMatch(ctx, info.nodes, false)
		}},
		condition{"all control plane static pods to be running", func(ctx context.Context, info hcInfo) error {
			for _, cp := range info.controlPlanes() {
				if err := reach(ctx, []hcNode{cp}); err != nil {
					return fmt.Errorf("error listing static pods on node %s: %w", cp.ip, err)
				}
			}

			return nil
		}},
		condition{"all control plane components to be ready", func(ctx context.Context, info hcInfo) error {
			if err := k.nodesMatch(ctx, info.controlPlanes(), true); err != nil {
				return err
			}

			if !c.opts.StaticPods {
				// No mirror pods without Options.StaticPods (divergence).
				return nil
			}

			return k.controlPlanePodsReady(ctx, len(info.controlPlanes()))
		}},
		condition{"all k8s nodes to report ready", k.allNodesReady},
		condition{"kube-proxy to report ready", func(ctx context.Context, _ hcInfo) error {
			return k.workloadReady(ctx, true, "k8s-app=kube-proxy")
		}},
		condition{"coredns to report ready", func(ctx context.Context, _ hcInfo) error {
			return k.workloadReady(ctx, false, "k8s-app=kube-dns")
		}},
		condition{"all k8s nodes to report schedulable", k.allNodesSchedulable},
	)
}

// reach is a fan-out call's fate: an address with no sim node refuses the connection; a node
// that is down makes the call wait for the attempt's deadline.
func reach(ctx context.Context, nodes []hcNode) error {
	var errs *multierror.Error

	for _, hn := range nodes {
		if err := reachOne(ctx, hn); err != nil {
			errs = multierror.Append(errs, err)
		}
	}

	return errs.ErrorOrNil()
}

func reachOne(ctx context.Context, hn hcNode) error {
	if hn.node == nil {
		return fmt.Errorf("%s: rpc error: code = Unavailable desc = connection error: desc = \"transport: Error while dialing: dial tcp %s:%d: connect: connection refused\"", hn.ip, hn.ip, apidPort)
	}

	if hn.node.up() {
		return nil
	}

	<-ctx.Done()

	return fmt.Errorf("%s: rpc error: code = DeadlineExceeded desc = context deadline exceeded", hn.ip)
}

// up reports whether the node answers its API.
func (n *node) up() bool {
	n.mu.Lock()
	defer n.mu.Unlock()

	return n.front != nil && n.state == stateRunning
}

// serviceHealth is check.ServiceHealthAssertion.
func serviceHealth(ctx context.Context, nodes []hcNode, service string) error {
	var (
		errs    *multierror.Error
		replies int
		infos   []struct {
			ip  string
			svc *machineapi.ServiceInfo
		}
	)

	for _, hn := range nodes {
		if err := reachOne(ctx, hn); err != nil {
			return err
		}

		for _, svc := range hn.node.serviceStates(ctx) {
			if svc.Id == service {
				replies++

				infos = append(infos, struct {
					ip  string
					svc *machineapi.ServiceInfo
				}{hn.ip, svc})
			}
		}
	}

	if replies != len(nodes) {
		return fmt.Errorf("expected a response with %d node(s), got %d", len(nodes), replies)
	}

	slices.SortFunc(infos, func(a, b struct {
		ip  string
		svc *machineapi.ServiceInfo
	}) int {
		return cmp.Compare(a.ip, b.ip)
	})

	for _, i := range infos {
		evs := i.svc.GetEvents().GetEvents()
		last := evs[len(evs)-1]

		if last.State != "Running" {
			errs = multierror.Append(errs, fmt.Errorf("%s: service %q not in expected state %q: current state [%s] %s", i.ip, service, "Running", last.State, last.Msg))

			continue
		}

		if !i.svc.GetHealth().GetHealthy() {
			errs = multierror.Append(errs, fmt.Errorf("%s: service is not healthy: %s", i.ip, service))
		}
	}

	return errs.ErrorOrNil()
}

// memberList is what EtcdMemberList on a control plane gives (any running member answers).
func memberList(ctx context.Context, hn hcNode) ([]string, []string, error) {
	if err := reachOne(ctx, hn); err != nil {
		return nil, nil, err
	}

	m, err := (&machined{n: hn.node}).clusterMember(ctx, "member list")
	if err != nil {
		return nil, nil, fmt.Errorf("%s: %w", hn.ip, err)
	}

	ml, err := m.MemberList(ctx)
	if err != nil {
		return nil, nil, fmt.Errorf("%s: %w", hn.ip, err)
	}

	var names, peerIPs []string

	for _, pm := range ml.Members {
		names = append(names, fmt.Sprintf("%s/%x/%v", pm.Name, pm.ID, pm.IsLearner))

		for _, pu := range pm.PeerURLs {
			u, perr := url.Parse(pu)
			if perr != nil {
				return nil, nil, perr
			}

			peerIPs = append(peerIPs, u.Hostname())
		}
	}

	return names, peerIPs, nil
}

// etcdConsistent is check.EtcdConsistentAssertion.
func etcdConsistent(ctx context.Context, info hcInfo) error {
	cps := info.controlPlanes()
	slices.SortFunc(cps, func(a, b hcNode) int { return cmp.Compare(a.ip, b.ip) })

	var first []string

	for i, cp := range cps {
		names, _, err := memberList(ctx, cp)
		if err != nil {
			return err
		}

		slices.Sort(names)

		if i == 0 {
			first = names

			continue
		}

		if !slices.Equal(first, names) {
			return fmt.Errorf("%s: expected to have %v members, got %v", cp.ip, first, names)
		}
	}

	return nil
}

// etcdMembersAreControlPlanes is check.EtcdControlPlaneNodesAssertion.
func etcdMembersAreControlPlanes(ctx context.Context, info hcInfo) error {
	cps := info.controlPlanes()
	if len(cps) == 0 {
		return errors.New("no control plane nodes")
	}

	_, peerIPs, err := memberList(ctx, cps[0])
	if err != nil {
		return err
	}

	cpIPs := ips(cps)

	for _, ip := range peerIPs {
		if !slices.Contains(cpIPs, ip) {
			return fmt.Errorf("etcd member ips %q are not subset of control plane node ips %q", peerIPs, cpIPs)
		}
	}

	return nil
}

// memorySizes is check.AllNodesMemorySizes with pkg/minimal's limits.
func memorySizes(ctx context.Context, info hcInfo) error {
	if err := reach(ctx, info.nodes); err != nil {
		return fmt.Errorf("error getting version: %w", err)
	}

	var errs *multierror.Error

	for _, hn := range info.nodes {
		minimum := uint64(1<<30 - 150<<20)
		if hn.cp {
			minimum = 1848<<20 - 150<<20
		}

		if total := hn.node.c.opts.MemoryBytes >> 10 << 10; total < minimum {
			errs = multierror.Append(errs, fmt.Errorf("node %q does not meet memory requirements: expected at least %d MiB, actual %d MiB", hn.ip, minimum>>20, total>>20))
		}
	}

	return errs.ErrorOrNil()
}

// diskSizes is check.AllNodesDiskSizes: the EPHEMERAL volume against pkg/minimal.DiskSize less
// the other partitions.
func diskSizes(ctx context.Context, info hcInfo) error {
	if err := reach(ctx, info.nodes); err != nil {
		return fmt.Errorf("error getting version: %w", err)
	}

	ps := quirks.New("").PartitionSizes()
	minimal := uint64(6<<30) - (ps.UKIEFISize() + ps.StateSize() + ps.METASize() + 10<<20)

	var errs *multierror.Error

	sorted := slices.Clone(info.nodes)
	slices.SortFunc(sorted, func(a, b hcNode) int { return cmp.Compare(a.ip, b.ip) })

	for _, hn := range sorted {
		if size := hn.node.c.opts.EphemeralBytes; size < minimal {
			errs = multierror.Append(errs, fmt.Errorf("ephemeral partition %q for node %q is too small, expected at least %d bytes, actual %d bytes", "/dev/sda6", hn.ip, minimal, size))
		}
	}

	return errs.ErrorOrNil()
}

// allBooted is check.AllNodesBootedAssertion on the nodes' machine stage.
func allBooted(ctx context.Context, info hcInfo) error {
	if err := reach(ctx, info.nodes); err != nil {
		return err
	}

	byStage := map[string][]string{}

	for _, hn := range info.nodes {
		hn.node.mu.Lock()
		stage := hn.node.stage
		hn.node.mu.Unlock()

		if stage != machineapi.MachineStatusEvent_RUNNING {
			byStage[strings.ToLower(stage.String())] = append(byStage[strings.ToLower(stage.String())], hn.ip)
		}
	}

	if len(byStage) == 0 {
		return nil
	}

	var parts []string

	for stage, nodes := range byStage {
		slices.Sort(nodes)
		parts = append(parts, fmt.Sprintf("%s: %v", stage, nodes))
	}

	slices.Sort(parts)

	return fmt.Errorf("nodes are not running: %s", strings.Join(parts, ", "))
}

// nodesMatch is cluster.NodesMatch between the expected nodes and the Kubernetes Nodes (only
// control-plane-labelled ones with cpOnly), matched by InternalIP.
func (k *kubeSide) nodesMatch(ctx context.Context, expected []hcNode, cpOnly bool) error {
	list, err := k.client.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
	if err != nil {
		return err
	}

	actual := map[string]bool{}

	for _, kn := range list.Items {
		if _, isCP := kn.Labels[controlPlaneLabel]; cpOnly && !isCP {
			continue
		}

		for _, a := range kn.Status.Addresses {
			if a.Type == corev1.NodeInternalIP {
				actual[a.Address] = true
			}
		}
	}

	for _, e := range expected {
		if !actual[e.ip] {
			return fmt.Errorf("can't find expected node with IPs %q", []string{e.ip})
		}

		delete(actual, e.ip)
	}

	if len(actual) > 0 {
		var unexpected []string
		for ip := range actual {
			unexpected = append(unexpected, ip)
		}

		slices.Sort(unexpected)

		return fmt.Errorf("unexpected nodes with IPs %q", unexpected)
	}

	return nil
}

// controlPlanePodsReady is the pod half of K8sFullControlPlaneAssertion.
func (k *kubeSide) controlPlanePodsReady(ctx context.Context, want int) error {
	for _, app := range []string{"kube-apiserver", "kube-scheduler", "kube-controller-manager"} {
		pods, err := k.client.CoreV1().Pods("kube-system").List(ctx, metav1.ListOptions{LabelSelector: "k8s-app = " + app})
		if err != nil {
			return fmt.Errorf("error listing pods for app %s: %w", app, err)
		}

		if len(pods.Items) != want {
			return fmt.Errorf("expected number of pods for %s to be %d, got %d", app, want, len(pods.Items))
		}

		var notReady []string

		for _, p := range pods.Items {
			if !podReady(&p) {
				notReady = append(notReady, p.Name)
			}
		}

		if len(notReady) > 0 {
			return fmt.Errorf("some pods are not ready for %s: %v", app, notReady)
		}
	}

	return nil
}

func podReady(p *corev1.Pod) bool {
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodReady {
			return c.Status == corev1.ConditionTrue
		}
	}

	return false
}

// allNodesReady is check.K8sAllNodesReadyAssertion.
func (k *kubeSide) allNodesReady(ctx context.Context, _ hcInfo) error {
	list, err := k.client.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
	if err != nil {
		return err
	}

	var notReady []string

	for _, kn := range list.Items {
		for _, c := range kn.Status.Conditions {
			if c.Type == corev1.NodeReady && c.Status != corev1.ConditionTrue {
				notReady = append(notReady, kn.Name)
			}
		}
	}

	if len(notReady) > 0 {
		return fmt.Errorf("some nodes are not ready: %v", notReady)
	}

	return nil
}

// allNodesSchedulable is check.K8sAllNodesSchedulableAssertion (it stops at the first cordoned node).
func (k *kubeSide) allNodesSchedulable(ctx context.Context, _ hcInfo) error {
	list, err := k.client.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
	if err != nil {
		return err
	}

	for _, kn := range list.Items {
		if kn.Spec.Unschedulable {
			return fmt.Errorf("some nodes are not schedulable: %v", []string{kn.Name})
		}
	}

	return nil
}

// workloadReady is the kube-proxy (DaemonSet) and CoreDNS (Deployment) checks: skipped when the
// workload does not exist, else K8sPodReadyAssertion with its replica count.
func (k *kubeSide) workloadReady(ctx context.Context, daemonSet bool, selector string) error {
	var replicas int

	if daemonSet {
		dss, err := k.client.AppsV1().DaemonSets("kube-system").List(ctx, metav1.ListOptions{LabelSelector: selector})
		if err != nil {
			return err
		}

		if len(dss.Items) == 0 {
			return errSkip
		}

		replicas = int(dss.Items[0].Status.DesiredNumberScheduled)
	} else {
		ds, err := k.client.AppsV1().Deployments("kube-system").List(ctx, metav1.ListOptions{LabelSelector: selector})
		if err != nil {
			return err
		}

		if len(ds.Items) == 0 {
			return errSkip
		}

		if r := ds.Items[0].Spec.Replicas; r != nil {
			replicas = int(*r)
		}
	}

	pods, err := k.client.CoreV1().Pods("kube-system").List(ctx, metav1.ListOptions{LabelSelector: selector})
	if err != nil {
		return err
	}

	if len(pods.Items) == 0 {
		return fmt.Errorf("no pods found for namespace %q and label selector %q", "kube-system", selector)
	}

	var ready, notReady []string

	for _, p := range pods.Items {
		if p.DeletionTimestamp != nil || p.Status.Phase == corev1.PodFailed {
			continue
		}

		if podReady(&p) {
			ready = append(ready, p.Name)
		} else {
			notReady = append(notReady, p.Name)
		}
	}

	switch {
	case len(ready) == 0:
		return fmt.Errorf("no ready pods found for namespace %q and label selector %q", "kube-system", selector)
	case len(notReady) > 0:
		return fmt.Errorf("some pods are not ready: %v", notReady)
	case len(ready) != replicas:
		return fmt.Errorf("expected %d ready pods, got %d", replicas, len(ready))
	}

	return nil
}

// kubernetesCheckNames are the Kubernetes checks of check.DefaultClusterChecks
// (pkg/cluster/check/default.go K8sComponentsReadinessChecks, then the rest), in order.
func kubernetesCheckNames() []string {
	return []string{
		"all k8s nodes to report", "all control plane static pods to be running", "all control plane components to be ready",
		"all k8s nodes to report ready", "kube-proxy to report ready", "coredns to report ready", "all k8s nodes to report schedulable",
	}
}

// skippedKubernetesChecks stand for the Kubernetes checks on a sim without a Kubernetes side
// (no Options.Kube or KubeOnEtcd). Real Talos v1.13.9 always runs them: machined's
// HealthCheck (internal/app/machined/internal/server/v1alpha1/v1alpha1_cluster.go) gives
// check.Wait the node's own admin kubeconfig and check.DefaultClusterChecks
// (pkg/cluster/check/default.go) includes them unconditionally, so a Talos whose apiserver is
// unreachable waits on "all k8s nodes to report" until the timeout. A sim without Kubernetes
// is not such a cluster but one whose Kubernetes is not simulated, so each check reports
// SKIP (conditions.ErrSkipAssertion's line, as Talos prints for a check that does not apply)
// instead of passing silently: the client sees every check Talos runs, and which ones the
// sim did not (docs/SIMULATOR.md).
func skippedKubernetesChecks() []condition {
	names := kubernetesCheckNames()
	out := make([]condition, len(names))

	for i, name := range names {
		out[i] = condition{name, func(context.Context, hcInfo) error { return errSkip }}
	}

	return out
}
