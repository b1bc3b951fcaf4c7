package k8s

import (
	"errors"
	"fmt"

	"github.com/siderolabs/talos/pkg/machinery/config"
	"github.com/siderolabs/talos/pkg/machinery/config/encoder"
	"github.com/siderolabs/talos/pkg/machinery/config/types/v1alpha1"
)

// ConfigImage is the image the machine config sets for a component (Talos defaults filled in).
func ConfigImage(cfg config.Provider, component string) string {
	imgs := ImagesOf(cfg)

	switch component {
	case ComponentAPIServer:
		return imgs.APIServer
	case ComponentControllerManager:
		return imgs.ControllerManager
	case ComponentScheduler:
		return imgs.Scheduler
	case ComponentKubeProxy:
		return imgs.Proxy
	default:
		return imgs.Kubelet
	}
}

// SetImage sets one component's image in the machine config, as talosctl's patchers do
// (pkg/cluster/kubernetes/talos_managed.go upgradeStaticPodPatcher, patchKubeProxy;
// kubelet.go upgradeKubeletPatcher), and returns the encoded config. Nothing else changes.
func SetImage(cfg config.Provider, component, image string) ([]byte, error) {
	patched, err := cfg.PatchV1Alpha1(func(c *v1alpha1.Config) error {
		if component == ComponentKubelet {
			if c.MachineConfig == nil {
				return errors.New("machine config has no machine section")
			}

			if c.MachineConfig.MachineKubelet == nil {
				c.MachineConfig.MachineKubelet = &v1alpha1.KubeletConfig{}
			}

			c.MachineConfig.MachineKubelet.KubeletImage = image

			return nil
		}

		if c.ClusterConfig == nil {
			return errors.New("machine config has no cluster section")
		}

		cc := c.ClusterConfig

		switch component {
		case ComponentAPIServer:
			if cc.APIServerConfig == nil {
				cc.APIServerConfig = &v1alpha1.APIServerConfig{}
			}

			cc.APIServerConfig.ContainerImage = image
		case ComponentControllerManager:
			if cc.ControllerManagerConfig == nil {
				cc.ControllerManagerConfig = &v1alpha1.ControllerManagerConfig{}
			}

			cc.ControllerManagerConfig.ContainerImage = image
		case ComponentScheduler:
			if cc.SchedulerConfig == nil {
				cc.SchedulerConfig = &v1alpha1.SchedulerConfig{}
			}

			cc.SchedulerConfig.ContainerImage = image
		case ComponentKubeProxy:
			if cc.ProxyConfig == nil {
				cc.ProxyConfig = &v1alpha1.ProxyConfig{}
			}

			cc.ProxyConfig.ContainerImage = image
		default:
			return fmt.Errorf("unknown component %q", component)
		}

		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("set the %s image: %w", component, err)
	}

	out, err := patched.EncodeBytes(encoder.WithComments(encoder.CommentsDisabled))
	if err != nil {
		return nil, fmt.Errorf("encode machine config: %w", err)
	}

	return out, nil
}
