package sim_test

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/cosi-project/runtime/pkg/safe"
	"github.com/siderolabs/talos/pkg/machinery/api/common"
	"github.com/siderolabs/talos/pkg/machinery/client"
	"github.com/siderolabs/talos/pkg/machinery/config/types/meta"
	"github.com/siderolabs/talos/pkg/machinery/config/types/v1alpha1"
	"github.com/siderolabs/talos/pkg/machinery/resources/k8s"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/talosbot/talosbot/internal/testenv"
	"github.com/talosbot/talosbot/sim"
)

// TestExtraArgs: the machine config's extraArgs reach the static pods' command lines (the
// StaticPod resource and the mirror pod) and the kubelet's arguments, extraConfig the
// kubelet's configuration, as Talos renders them; a -fat kubelet image runs a kubelet that
// reports the plain version. These are what talosctl upgrade-k8s's pre-flight checks read.
func TestExtraArgs(t *testing.T) {
	t.Parallel()
	slow(t)
	kube := testenv.StartKube(t)

	c, cli := startSim(t, sim.Options{ControlPlanes: 1, Kube: kube.Client, StaticPods: true, StaticPodReadyDelay: 100 * time.Millisecond})
	cp := c.Nodes()[0]

	ctx, cancel := context.WithTimeout(client.WithNode(t.Context(), cp.IP), 2*time.Minute)
	defer cancel()

	applyPatch(ctx, t, cli, cp.IP, func(c *v1alpha1.Config) {
		c.ClusterConfig.APIServerConfig.ExtraArgsConfig = meta.Args{
			"feature-gates":  meta.NewArgValue("WatchFromStorageWithoutResourceVersion=false", nil),
			"secure-port":    meta.NewArgValue("7443", nil),
			"audit-log-path": meta.NewArgValue("-", nil),
		}
		c.MachineConfig.MachineKubelet.KubeletExtraArgs = meta.Args{"pod-infra-container-image": meta.NewArgValue("registry.k8s.io/pause:3.10", nil)}
		c.MachineConfig.MachineKubelet.KubeletExtraConfig = meta.Unstructured{Object: map[string]any{"featureGates": map[string]any{"SizeMemoryBackedVolumes": true}}}
		c.MachineConfig.MachineKubelet.KubeletImage = "ghcr.io/siderolabs/kubelet:v1.36.3-fat"
	})

	wantAPI := []string{"--audit-log-path=-", "--feature-gates=WatchFromStorageWithoutResourceVersion=false", "--secure-port=7443"}

	eventually(t, 30*time.Second, "kube-apiserver StaticPod and mirror pod with the extra args", func() error {
		sp, err := safe.StateGetByID[*k8s.StaticPod](ctx, cli.COSI, k8s.APIServerID)
		if err != nil {
			return err
		}

		cmd := commandOf(sp.TypedSpec().Pod)
		if err := hasArgs(cmd, wantAPI...); err != nil {
			return fmt.Errorf("StaticPod: %w", err)
		}

		if slices.Contains(cmd, "--secure-port=6443") {
			return fmt.Errorf("StaticPod keeps the default --secure-port next to the extra one: %v", cmd)
		}

		p, err := kube.Client.CoreV1().Pods("kube-system").Get(ctx, sim.StaticPodName(sim.ComponentAPIServer, cp.NodeName), metav1.GetOptions{})
		if err != nil {
			return err
		}

		return hasArgs(p.Spec.Containers[0].Command, wantAPI...)
	})

	eventually(t, 30*time.Second, "KubeletSpec with the extra args and config, kubelet at v1.36.3", func() error {
		ks, err := safe.StateGetByID[*k8s.KubeletSpec](ctx, cli.COSI, k8s.KubeletID)
		if err != nil {
			return err
		}

		if err := hasArgs(ks.TypedSpec().Args, "--pod-infra-container-image=registry.k8s.io/pause:3.10"); err != nil {
			return err
		}

		if g, _ := ks.TypedSpec().Config["featureGates"].(map[string]any); g["SizeMemoryBackedVolumes"] != true {
			return fmt.Errorf("KubeletSpec config %v lacks the extraConfig feature gate", ks.TypedSpec().Config)
		}

		n, err := kube.Client.CoreV1().Nodes().Get(ctx, cp.NodeName, metav1.GetOptions{})
		if err != nil {
			return err
		}

		if v := n.Status.NodeInfo.KubeletVersion; v != "v1.36.3" {
			return fmt.Errorf("kubelet of image …:v1.36.3-fat reports %q, want v1.36.3", v)
		}

		return nil
	})
}

// TestLegacyImagePull: MachineService.ImagePull (what talosctl upgrade-k8s pre-pulls with)
// pulls into the namespace asked for, refuses an unknown namespace, and fails under the
// ImagePullFailure fault.
func TestLegacyImagePull(t *testing.T) {
	t.Parallel()
	c, cli := startSim(t, sim.Options{ControlPlanes: 1, TalosVersion: "v1.13.9"})
	cp := c.Nodes()[0]

	ctx, cancel := context.WithTimeout(client.WithNode(t.Context(), cp.IP), time.Minute)
	defer cancel()

	//nolint:staticcheck // the legacy call is the one under test
	if err := cli.ImagePull(ctx, common.ContainerdNamespace_NS_CRI, "registry.k8s.io/kube-apiserver:v1.36.3"); err != nil {
		t.Fatalf("pull into CRI: %v", err)
	}

	//nolint:staticcheck
	if err := cli.ImagePull(ctx, common.ContainerdNamespace_NS_SYSTEM, "ghcr.io/siderolabs/kubelet:v1.36.3-fat"); err != nil {
		t.Fatalf("pull into system: %v", err)
	}

	//nolint:staticcheck
	if err := cli.ImagePull(ctx, common.ContainerdNamespace_NS_UNKNOWN, "registry.k8s.io/kube-apiserver:v1.36.3"); status.Code(err) != codes.InvalidArgument {
		t.Fatalf("unknown namespace: %v, want InvalidArgument", err)
	}

	if got := c.Calls(cp.Name, "ImagePull"); got != 3 {
		t.Fatalf("ImagePull calls = %d, want 3", got)
	}

	if err := c.Inject(ctx, cp.Name, sim.Fault{ImagePullFailure: true}); err != nil {
		t.Fatal(err)
	}

	// An image the node does not have yet needs the registry, which fails; one it has is
	// not fetched again (image.WithSkipIfAlreadyPulled).
	//nolint:staticcheck
	if err := cli.ImagePull(ctx, common.ContainerdNamespace_NS_CRI, "registry.k8s.io/kube-apiserver:v1.36.2"); status.Code(err) != codes.NotFound {
		t.Fatalf("pull under ImagePullFailure: %v, want NotFound", err)
	}

	//nolint:staticcheck
	if err := cli.ImagePull(ctx, common.ContainerdNamespace_NS_CRI, "registry.k8s.io/kube-apiserver:v1.36.3"); err != nil {
		t.Fatalf("pull of an image the node has, under ImagePullFailure: %v", err)
	}
}

func commandOf(pod map[string]any) []string {
	spec, _ := pod["spec"].(map[string]any)
	containers, _ := spec["containers"].([]any)

	if len(containers) == 0 {
		return nil
	}

	c, _ := containers[0].(map[string]any)
	raw, _ := c["command"].([]any)

	var out []string

	for _, a := range raw {
		s, _ := a.(string)
		out = append(out, s)
	}

	return out
}

func hasArgs(cmd []string, want ...string) error {
	for _, w := range want {
		if !slices.Contains(cmd, w) {
			return fmt.Errorf("command %v lacks %s", cmd, w)
		}
	}

	return nil
}
