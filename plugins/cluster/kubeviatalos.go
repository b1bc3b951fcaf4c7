package cluster

import (
	"context"
	"fmt"
	"time"

	"k8s.io/client-go/kubernetes"
)

// talosKubeCheckTimeout bounds the check that a kubeconfig fetched from the Talos API reaches
// the Kubernetes API.
const talosKubeCheckTimeout = 10 * time.Second

// DrainKube is the Kubernetes client a client-side drain uses: the configured kubeconfig's, or,
// without one, a client built from the admin kubeconfig Talos serves (MachineService.Kubeconfig,
// os:admin), as talosctl's upgrade does for its drain (cmd/talosctl/cmd/talos/drain.go,
// cmd/talosctl/pkg/talos/kubeclient FromTalosClient, v1.13.9). That kubeconfig is a secret: it
// is held in memory only, for this session (R23), never written, logged or returned. The client
// is checked against the API server (its version) so that a kubeconfig that cannot reach
// Kubernetes is found before a node is touched, not at its drain.
func (s *Session) DrainKube(ctx context.Context) (kubernetes.Interface, error) {
	if s.Kube != nil {
		return s.Kube, nil
	}
	if s.talosKube != nil {
		return s.talosKube, nil
	}
	b, err := s.Talos.Kubeconfig(ctx)
	if err != nil {
		return nil, fmt.Errorf("fetch the kubeconfig through the Talos API (MachineService.Kubeconfig): %w", err)
	}
	kube, _, err := NewKubeClients(b)
	clear(b)
	if err != nil {
		return nil, fmt.Errorf("the kubeconfig from the Talos API: %w", err)
	}
	cctx, cancel := context.WithTimeout(ctx, talosKubeCheckTimeout)
	defer cancel()
	err = kube.Discovery().RESTClient().Get().AbsPath("/version").Do(cctx).Error()
	if err != nil {
		return nil, fmt.Errorf("the kubeconfig from the Talos API does not reach Kubernetes: %w", err)
	}
	s.talosKube = kube
	return kube, nil
}

// DrainedWith is the client the session's drains used (DrainKube's), nil when none was made:
// the uncordon after a node's reboot, and the cleanup of a failed one, use the same.
func (s *Session) DrainedWith() kubernetes.Interface {
	if s.Kube != nil {
		return s.Kube
	}
	return s.talosKube
}
