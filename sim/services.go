package sim

import (
	"context"
	"strings"

	"github.com/siderolabs/talos/pkg/machinery/api/common"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	machineapi "github.com/siderolabs/talos/pkg/machinery/api/machine"
)

// imageService is the v1.13 ImageService (only Pull is simulated).
type imageService struct {
	machineapi.UnimplementedImageServiceServer

	n *node
}

// Pull is internal/app/images/images.go Pull: the image lands in the namespace the request
// names; the reply is the pulled reference pinned to its digest.
func (s *imageService) Pull(req *machineapi.ImageServicePullRequest, srv grpc.ServerStreamingServer[machineapi.ImageServicePullResponse]) error {
	ns, err := containerdNamespace(req.GetContainerd())
	if err != nil {
		return err
	}

	if req.ImageRef == "" {
		return status.Error(codes.InvalidArgument, "image_ref is required")
	}

	img, err := s.n.apiPull(srv.Context(), ns, req.ImageRef) // versions.go
	if err != nil {
		if status.Code(err) == codes.NotFound && !strings.HasPrefix(status.Convert(err).Message(), "error pulling image") {
			return status.Errorf(codes.NotFound, "error pulling image: %s", status.Convert(err).Message())
		}

		return err
	}

	if err := srv.Send(&machineapi.ImageServicePullResponse{Response: &machineapi.ImageServicePullResponse_PullProgress{
		PullProgress: &machineapi.ImageServicePullProgress{LayerId: strings.TrimPrefix(digestOf(img.pinned), "sha256:")[:12], Progress: &machineapi.ImageServicePullLayerProgress{
			Status: machineapi.ImageServicePullLayerProgress_EXTRACT_COMPLETE,
		}},
	}}); err != nil {
		return err
	}

	return srv.Send(&machineapi.ImageServicePullResponse{Response: &machineapi.ImageServicePullResponse_Name{Name: img.pinned}})
}

// lifecycleService is the v1.13 LifecycleService (internal/app/lifecycle): Upgrade runs the
// installer from an image already in containerd; it writes the new boot entry and does not
// reboot. It takes its own install/upgrade mutex, not the sequencer's lock.
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
	s.n.mu.Lock()
	if s.n.installing {
		s.n.mu.Unlock()

		return status.Error(codes.FailedPrecondition, "another installation/upgrade is already in progress")
	}

	s.n.installing = true
	s.n.mu.Unlock()

	defer func() {
		s.n.mu.Lock()
		s.n.installing = false
		s.n.mu.Unlock()
	}()

	image := req.GetSource().GetImageName()
	if image == "" {
		return status.Error(codes.InvalidArgument, "installer image name is required")
	}

	ns, err := containerdNamespace(req.GetContainerd())
	if err != nil {
		return err
	}

	if !s.n.havePulled(ns, image) {
		return status.Errorf(codes.Internal, "upgrade failed: installer image %q not found in containerd store: image %q: not found", image, image)
	}

	target, ok := s.n.c.images.version(image)
	if !ok {
		return status.Errorf(codes.Internal, "upgrade failed: installer image %q is not a Talos installer", image)
	}

	// The installer's output streams back line by line, then its exit code; a non-zero exit
	// is not the RPC's error (internal/app/lifecycle/container.go) and installs nothing.
	run := runInstaller(s.n.talosVersion(), target, image) // installer.go
	for _, msg := range run.lines {
		if err := srv.Send(progress(msg)); err != nil {
			return err
		}
	}

	if run.exitCode == 0 {
		s.n.mu.Lock()
		s.n.nextImage = image
		s.n.mu.Unlock()
	}

	return srv.Send(&machineapi.LifecycleServiceUpgradeResponse{Progress: &machineapi.LifecycleServiceInstallProgress{
		Response: &machineapi.LifecycleServiceInstallProgress_ExitCode{ExitCode: run.exitCode},
	}})
}

// ImagePull is the legacy MachineService.ImagePull
// (internal/app/machined/internal/server/v1alpha1/v1alpha1_images.go, deprecated for
// ImageService.Pull but still served by v1.13, and what `talosctl upgrade-k8s` pre-pulls
// with): the image lands in the CRI or system namespace; an image the registry does not have
// is NotFound "error pulling image: …".
func (s *machined) ImagePull(ctx context.Context, req *machineapi.ImagePullRequest) (*machineapi.ImagePullResponse, error) {
	var ns string

	switch req.GetNamespace() {
	case common.ContainerdNamespace_NS_CRI:
		ns = nsCRI
	case common.ContainerdNamespace_NS_SYSTEM:
		ns = nsSystem
	default:
		return nil, status.Errorf(codes.InvalidArgument, "invalid namespace %s", req.GetNamespace())
	}

	if _, err := s.n.apiPull(ctx, ns, req.GetReference()); err != nil { // versions.go
		if status.Code(err) == codes.NotFound && !strings.HasPrefix(status.Convert(err).Message(), "error pulling image") {
			return nil, status.Errorf(codes.NotFound, "error pulling image: %s", status.Convert(err).Message())
		}

		return nil, err
	}

	return &machineapi.ImagePullResponse{Messages: []*machineapi.ImagePull{{}}}, nil
}
