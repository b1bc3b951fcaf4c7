package sim

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	clusterapi "github.com/siderolabs/talos/pkg/machinery/api/cluster"
	machineapi "github.com/siderolabs/talos/pkg/machinery/api/machine"
)

// imageService is the v1.13 ImageService (only Pull is simulated).
type imageService struct {
	machineapi.UnimplementedImageServiceServer

	n *node
}

func (s *imageService) Pull(req *machineapi.ImageServicePullRequest, srv grpc.ServerStreamingServer[machineapi.ImageServicePullResponse]) error {
	if req.ImageRef == "" {
		return status.Error(codes.InvalidArgument, "image_ref is required")
	}

	if s.n.currentFault().ImagePullFailure {
		return pullError(req.ImageRef)
	}

	if err := srv.Send(&machineapi.ImageServicePullResponse{Response: &machineapi.ImageServicePullResponse_PullProgress{
		PullProgress: &machineapi.ImageServicePullProgress{LayerId: "sha256:5im", Progress: &machineapi.ImageServicePullLayerProgress{}},
	}}); err != nil {
		return err
	}

	s.n.mu.Lock()
	s.n.pulled[req.ImageRef] = true
	s.n.mu.Unlock()

	return srv.Send(&machineapi.ImageServicePullResponse{Response: &machineapi.ImageServicePullResponse_Name{Name: req.ImageRef}})
}

// lifecycleService is the v1.13 LifecycleService: Upgrade writes the new image to the boot
// entry; the next reboot switches to it.
type lifecycleService struct {
	machineapi.UnimplementedLifecycleServiceServer

	n *node
}

func progress(msg string) *machineapi.LifecycleServiceUpgradeResponse {
	return &machineapi.LifecycleServiceUpgradeResponse{Progress: &machineapi.LifecycleServiceInstallProgress{
		Response: &machineapi.LifecycleServiceInstallProgress_Message{Message: msg},
	}}
}

func (s *lifecycleService) Upgrade(req *machineapi.LifecycleServiceUpgradeRequest, srv grpc.ServerStreamingServer[machineapi.LifecycleServiceUpgradeResponse]) error {
	image := req.GetSource().GetImageName()

	target, err := versionFromImage(image)
	if err != nil {
		return status.Error(codes.InvalidArgument, err.Error())
	}

	if s.n.currentFault().ImagePullFailure {
		return pullError(image)
	}

	if err = s.n.begin(); err != nil {
		return err
	}
	defer s.n.end()

	for _, msg := range []string{
		"running installer " + image,
		"upgrading Talos to " + target,
		"writing boot entry for " + target,
	} {
		if err := srv.Send(progress(msg)); err != nil {
			return err
		}
	}

	s.n.mu.Lock()
	s.n.stagedImage = image
	s.n.mu.Unlock()

	return srv.Send(&machineapi.LifecycleServiceUpgradeResponse{Progress: &machineapi.LifecycleServiceInstallProgress{
		Response: &machineapi.LifecycleServiceInstallProgress_ExitCode{ExitCode: 0},
	}})
}

// clusterService implements ClusterService.HealthCheck from the sim's own state.
type clusterService struct {
	clusterapi.UnimplementedClusterServiceServer

	n *node
}

type healthCheck struct {
	name  string
	check func(ctx context.Context, nodes []*node) error
}

func (s *clusterService) HealthCheck(req *clusterapi.HealthCheckRequest, srv grpc.ServerStreamingServer[clusterapi.HealthCheckProgress]) error {
	c := s.n.c

	timeout := req.GetWaitTimeout().AsDuration()
	if timeout <= 0 {
		timeout = 20 * time.Minute
	}

	ctx, cancel := context.WithTimeout(srv.Context(), timeout)
	defer cancel()

	nodes := c.nodes

	if info := req.GetClusterInfo(); info != nil && len(info.ControlPlaneNodes)+len(info.WorkerNodes) > 0 {
		nodes = nil

		for _, addr := range slices.Concat(info.ControlPlaneNodes, info.WorkerNodes) {
			n, err := c.node(addr)
			if err != nil {
				return status.Error(codes.InvalidArgument, err.Error())
			}

			nodes = append(nodes, n)
		}
	}

	checks := []healthCheck{
		{"etcd to be healthy", checkEtcdHealthy},
		{"etcd members to be consistent across nodes", checkEtcdConsistent},
		{"etcd members to be control plane nodes", checkEtcdMembersAreCPs},
		{"apid to be ready", checkAPIDReady},
		{"kubelet to be healthy", checkServiceHealthy("kubelet")},
		{"all control plane static pods to be running", checkServiceHealthy("")},
	}

	if c.kube != nil {
		checks = append(checks, healthCheck{"all k8s nodes to report ready", func(ctx context.Context, nodes []*node) error {
			return c.kube.allReady(ctx, nodes)
		}})
	}

	for _, hc := range checks {
		if err := s.wait(ctx, srv, hc, nodes); err != nil {
			return err
		}
	}

	return nil
}

func (s *clusterService) wait(ctx context.Context, srv grpc.ServerStreamingServer[clusterapi.HealthCheckProgress], hc healthCheck, nodes []*node) error {
	send := func(msg string) error {
		return srv.Send(&clusterapi.HealthCheckProgress{Message: msg})
	}

	if err := send("waiting for " + hc.name); err != nil {
		return err
	}

	t := time.NewTicker(100 * time.Millisecond)
	defer t.Stop()

	last := ""

	for {
		err := hc.check(ctx, nodes)
		if err == nil {
			return send("waiting for " + hc.name + ": OK")
		}

		if msg := err.Error(); msg != last {
			last = msg

			if serr := send("waiting for " + hc.name + ": " + msg); serr != nil {
				return serr
			}
		}

		select {
		case <-ctx.Done():
			return status.Errorf(codes.DeadlineExceeded, "waiting for %s: %v", hc.name, err)
		case <-t.C:
		}
	}
}

func controlPlanes(nodes []*node) []*node {
	var out []*node

	for _, n := range nodes {
		if n.info.Role == RoleControlPlane && !n.leftEtcd() {
			out = append(out, n)
		}
	}

	return out
}

func checkEtcdHealthy(ctx context.Context, nodes []*node) error {
	var errs []error

	for _, n := range controlPlanes(nodes) {
		m := n.member()
		if m == nil || !m.Running() {
			errs = append(errs, fmt.Errorf("node %s: etcd is not running", n.info.IP))

			continue
		}

		hctx, cancel := context.WithTimeout(ctx, time.Second)
		err := m.Healthy(hctx)
		cancel()

		if err != nil {
			errs = append(errs, fmt.Errorf("node %s: %w", n.info.IP, err))
		}
	}

	return errors.Join(errs...)
}

func checkEtcdConsistent(ctx context.Context, nodes []*node) error {
	leaders := map[uint64][]string{}

	for _, n := range controlPlanes(nodes) {
		m := n.member()
		if m == nil || !m.Running() {
			return fmt.Errorf("node %s: etcd is not running", n.info.IP)
		}

		st, err := m.Status(ctx)
		if err != nil {
			return fmt.Errorf("node %s: %w", n.info.IP, err)
		}

		if st.Leader == 0 {
			return fmt.Errorf("node %s: etcd has no leader", n.info.IP)
		}

		leaders[st.Leader] = append(leaders[st.Leader], n.info.IP)
	}

	if len(leaders) > 1 {
		return fmt.Errorf("etcd members disagree on the leader: %v", leaders)
	}

	return nil
}

func checkEtcdMembersAreCPs(ctx context.Context, nodes []*node) error {
	cps := controlPlanes(nodes)
	if len(cps) == 0 {
		return nil
	}

	m := cps[0].member()
	if m == nil || !m.Running() {
		return fmt.Errorf("node %s: etcd is not running", cps[0].info.IP)
	}

	ml, err := m.MemberList(ctx)
	if err != nil {
		return err
	}

	var names, want []string
	for _, pm := range ml.Members {
		names = append(names, pm.Name)
	}

	for _, n := range cps {
		want = append(want, n.info.Name)
	}

	slices.Sort(names)
	slices.Sort(want)

	if !slices.Equal(names, want) {
		return fmt.Errorf("etcd members %v do not match control plane nodes %v", names, want)
	}

	return nil
}

func checkAPIDReady(_ context.Context, nodes []*node) error {
	var down []string

	for _, n := range nodes {
		n.mu.Lock()
		up := n.front != nil && n.state == stateRunning
		n.mu.Unlock()

		if !up {
			down = append(down, n.info.IP)
		}
	}

	if len(down) > 0 {
		return fmt.Errorf("nodes not reachable: %s", strings.Join(down, ", "))
	}

	return nil
}

// checkServiceHealthy checks one service ("" = every service) on every node.
func checkServiceHealthy(id string) func(context.Context, []*node) error {
	return func(ctx context.Context, nodes []*node) error {
		for _, n := range nodes {
			for _, svc := range n.serviceStates(ctx) {
				if id != "" && svc.Id != id || svc.Id == "etcd" && n.leftEtcd() {
					continue
				}

				if !svc.Health.Healthy {
					return fmt.Errorf("node %s: service %q is not healthy: %s", n.info.IP, svc.Id, svc.Health.LastMessage)
				}
			}
		}

		return nil
	}
}
