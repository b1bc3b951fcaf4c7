package k8s

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/cosi-project/runtime/pkg/safe"
	"github.com/cosi-project/runtime/pkg/state"
	"github.com/siderolabs/talos/pkg/machinery/api/common"
	machineapi "github.com/siderolabs/talos/pkg/machinery/api/machine"
	"github.com/siderolabs/talos/pkg/machinery/client"
	talosk8s "github.com/siderolabs/talos/pkg/machinery/resources/k8s"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	k8sruntime "k8s.io/apimachinery/pkg/runtime"

	"github.com/talosbot/talosbot/plugins/cluster"
)

// The Kubernetes upgrade's per-node reads and waits. They read each node's own Talos API
// (client.WithNode with the inventory address), as talosctl upgrade-k8s does: the static pods'
// command lines (k8s.StaticPod), the kubelet's spec (k8s.KubeletSpec), the static pods' status
// (k8s.StaticPodStatus) and the node's Kubernetes name (k8s.Nodename). Nothing is looked up by
// the inventory name, so a Talos hostname or Node name that differs from it does not matter.

// ComponentKubeProxy and ComponentKubelet complete StaticPodComponents for the images an
// upgrade sets (ConfigImage, SetImage).
const (
	ComponentKubeProxy = "kube-proxy"
	ComponentKubelet   = "kubelet"
)

// StaticPodArgs reads the command line (command, then args) of the node's control-plane
// static pods, as go-kubernetes' checks read the StaticPod resources. A component the node
// does not run is absent.
func StaticPodArgs(ctx context.Context, c *cluster.Clients, n cluster.Node) (map[string][]string, error) {
	out := map[string][]string{}

	for _, comp := range StaticPodComponents() {
		sp, err := safe.StateGetByID[*talosk8s.StaticPod](client.WithNode(ctx, n.Address), c.COSI, comp)
		if state.IsNotFoundError(err) {
			continue
		}

		if err != nil {
			return nil, fmt.Errorf("read the %s StaticPod of %s: %w", comp, n.Name, err)
		}

		var pod corev1.Pod
		if err := k8sruntime.DefaultUnstructuredConverter.FromUnstructured(sp.TypedSpec().Pod, &pod); err != nil {
			return nil, fmt.Errorf("the %s StaticPod of %s is not a pod: %w", comp, n.Name, err)
		}

		for _, ct := range pod.Spec.Containers {
			if ct.Name == comp || len(pod.Spec.Containers) == 1 {
				out[comp] = append(append([]string(nil), ct.Command...), ct.Args...)
			}
		}
	}

	return out, nil
}

// KubeletSpecOf reads the node's KubeletSpec: the kubelet image that runs (the machine config
// may leave it unset), its arguments and configuration.
func KubeletSpecOf(ctx context.Context, c *cluster.Clients, n cluster.Node) (*talosk8s.KubeletSpecSpec, error) {
	ks, err := safe.StateGetByID[*talosk8s.KubeletSpec](client.WithNode(ctx, n.Address), c.COSI, talosk8s.KubeletID)
	if err != nil {
		return nil, fmt.Errorf("read the KubeletSpec of %s: %w", n.Name, err)
	}

	return ks.TypedSpec(), nil
}

// KubeletSuffix is the variant suffix of a kubelet image's tag ("…:v1.35.2-fat" → "-fat"):
// Sidero's kubelet image comes as -fat and -slim too, and an upgrade keeps the variant
// (pkg/cluster/kubernetes/kubelet.go extractKubeletVersionSuffix).
func KubeletSuffix(image string) string {
	image, _, _ = strings.Cut(image, "@")
	for _, s := range []string{"-fat", "-slim"} {
		if strings.HasSuffix(image, s) {
			return s
		}
	}

	return ""
}

// KubeletTarget is the kubelet image an upgrade to target sets: the running image's
// repository and variant at the target version.
func KubeletTarget(running, target string) string {
	return Retag(running, target+KubeletSuffix(running))
}

// SameImage compares references without their digests.
func SameImage(a, b string) bool {
	a, _, _ = strings.Cut(a, "@")
	b, _, _ = strings.Cut(b, "@")

	return a != "" && a == b
}

// StaticPodReady reads the node's StaticPodStatus of component (its id is
// "kube-system/<component>-<Node name>") and says whether its container runs image and the
// pod is Ready, and if not why.
func StaticPodReady(ctx context.Context, c *cluster.Clients, n cluster.Node, component, image string) (bool, string, error) {
	list, err := safe.StateListAll[*talosk8s.StaticPodStatus](client.WithNode(ctx, n.Address), c.COSI)
	if err != nil {
		return false, "", fmt.Errorf("read the StaticPodStatus of %s: %w", n.Name, err)
	}

	prefix := "kube-system/" + component + "-"

	for st := range list.All() {
		id := st.Metadata().ID()
		if !strings.HasPrefix(id, prefix) {
			continue
		}

		var ps corev1.PodStatus
		if err := k8sruntime.DefaultUnstructuredConverter.FromUnstructured(st.TypedSpec().PodStatus, &ps); err != nil {
			return false, id + ": unreadable status: " + err.Error(), nil
		}

		running := ""

		for _, cs := range ps.ContainerStatuses {
			if cs.Name == component || len(ps.ContainerStatuses) == 1 {
				running = cs.Image
			}
		}

		if !SameImage(running, image) {
			return false, fmt.Sprintf("%s runs %s, not %s", id, orUnknown(running), image), nil
		}

		for _, cond := range ps.Conditions {
			if cond.Type != corev1.PodReady {
				continue
			}

			if cond.Status == corev1.ConditionTrue {
				return true, id + " Ready at " + image, nil
			}

			why := id + " not Ready"
			if cond.Reason != "" {
				why += " (" + cond.Reason
				if cond.Message != "" {
					why += ": " + cond.Message
				}

				why += ")"
			}

			return false, why, nil
		}

		return false, id + " has no Ready condition yet", nil
	}

	return false, "no StaticPodStatus " + prefix + "* on " + n.Name + " yet", nil
}

// WaitStaticPod waits until the node's component runs image and is Ready (StaticPodStatus).
func WaitStaticPod(ctx context.Context, c *cluster.Clients, n cluster.Node, component, image string, timeout time.Duration) error {
	last := ""

	err := pollUntil(ctx, timeout, func() (bool, error) {
		ok, why, err := StaticPodReady(ctx, c, n, component, image)
		if err != nil {
			last = err.Error()

			return false, nil // the node may be busy restarting the pod; the deadline decides
		}

		last = why

		return ok, nil
	})
	if err != nil {
		return fmt.Errorf("%s on %s %w after %s: %s", component, n.Name, err, timeout, last)
	}

	return nil
}

// WaitKubelet waits until the node's Node, kubeNode (the name the operation's identity map
// resolved for n), reports the kubelet version and is Ready, as talosctl's
// checkNodeKubeletVersion does.
func WaitKubelet(ctx context.Context, c *cluster.Clients, n cluster.Node, kubeNode, version string, timeout time.Duration) error {
	if kubeNode == "" {
		return fmt.Errorf("kubelet on %s: no Kubernetes Node resolved for it", n.Name)
	}

	last := "unknown"

	err := pollUntil(ctx, timeout, func() (bool, error) {
		kn, err := c.Kube.CoreV1().Nodes().Get(ctx, kubeNode, metav1.GetOptions{})
		if err != nil {
			last = fmt.Sprintf("get Node %s: %v", kubeNode, err)

			return false, nil
		}

		v := kn.Status.NodeInfo.KubeletVersion
		if !sameVersion(v, version) {
			last = fmt.Sprintf("Node %s reports kubelet %s, not %s", kn.Name, orUnknown(v), version)

			return false, nil
		}

		for _, cond := range kn.Status.Conditions {
			if cond.Type == corev1.NodeReady && cond.Status == corev1.ConditionTrue {
				return true, nil
			}
		}

		last = fmt.Sprintf("Node %s is at %s but not Ready", kn.Name, version)

		return false, nil
	})
	if err != nil {
		return fmt.Errorf("kubelet on %s %w after %s: %s", n.Name, err, timeout, last)
	}

	return nil
}

// imagePuller is the legacy MachineService.ImagePull, what talosctl upgrade-k8s v1.13.9
// pre-pulls with (still served by Talos v1.13; the generated MachineServiceClient has it).
type imagePuller interface {
	ImagePull(ctx context.Context, in *machineapi.ImagePullRequest, opts ...grpc.CallOption) (*machineapi.ImagePullResponse, error)
}

// ErrPullUnsupported: the node does not serve ImagePull; like talosctl, the image is then
// not pre-pulled there (the switch pulls it).
var ErrPullUnsupported = errors.New("ImagePull is not implemented by this node")

// PullImage pre-pulls one image on one node into the CRI or system containerd namespace.
func PullImage(ctx context.Context, c *cluster.Clients, n cluster.Node, ns common.ContainerdNamespace, image string) error {
	p, ok := c.Machine.(imagePuller)
	if !ok {
		return ErrPullUnsupported
	}

	resp, err := p.ImagePull(client.WithNode(ctx, n.Address), &machineapi.ImagePullRequest{Namespace: ns, Reference: image})
	if status.Code(err) == codes.Unimplemented {
		return ErrPullUnsupported
	}

	if err != nil {
		return fmt.Errorf("pull %s on %s: %w", image, n.Name, err)
	}

	for _, m := range resp.GetMessages() {
		if e := m.GetMetadata().GetError(); e != "" {
			return fmt.Errorf("pull %s on %s: %s", image, n.Name, e)
		}
	}

	return nil
}
