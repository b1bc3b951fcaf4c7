package cluster

import (
	"context"
	"errors"
	"fmt"
	"strings"

	machineapi "github.com/siderolabs/talos/pkg/machinery/api/machine"
	"github.com/siderolabs/talos/pkg/machinery/client"
	"github.com/siderolabs/talos/pkg/machinery/config"
	"github.com/siderolabs/talos/pkg/machinery/config/encoder"
	"github.com/siderolabs/talos/pkg/machinery/config/types/v1alpha1"
	"google.golang.org/grpc"
)

// ConfigAPI is the part of the MachineService that applies machine configs. The generated
// machineapi.MachineServiceClient behind Clients.Machine satisfies it.
type ConfigAPI interface {
	ApplyConfiguration(ctx context.Context, in *machineapi.ApplyConfigurationRequest, opts ...grpc.CallOption) (*machineapi.ApplyConfigurationResponse, error)
}

func (c *Clients) k8sConfigAPI() (ConfigAPI, error) {
	api, ok := c.Machine.(ConfigAPI)
	if !ok {
		return nil, errors.New("this Talos client cannot apply machine configs")
	}
	return api, nil
}

// ReadMachineConfig reads a node's active machine config from its MachineConfig resource.
func ReadMachineConfig(ctx context.Context, c *Clients, n Node) (config.Provider, error) {
	cfg, err := MachineConfigOf(ctx, c.COSI, n.Address)
	if err != nil {
		return nil, fmt.Errorf("read machine config of %s: %w", n.Name, err)
	}
	if cfg.RawV1Alpha1() == nil {
		return nil, fmt.Errorf("machine config of %s has no v1alpha1 document", n.Name)
	}
	return cfg, nil
}

// K8sImageSet selects the images SetK8sImages changes.
type K8sImageSet int

const (
	// K8sControlPlaneImages are the apiserver, controller-manager and scheduler images.
	K8sControlPlaneImages K8sImageSet = 1 << iota
	// K8sProxyImage is cluster.proxy.image.
	K8sProxyImage
	// K8sKubeletImage is machine.kubelet.image.
	K8sKubeletImage
)

// K8sImages are the Kubernetes images a machine config runs (Talos defaults filled in).
type K8sImages struct {
	APIServer, ControllerManager, Scheduler, Proxy, Kubelet string
	// ProxyEnabled is false when cluster.proxy.disabled is set (e.g. a CNI replaces kube-proxy).
	ProxyEnabled bool
}

// K8sImagesOf returns the Kubernetes images of a machine config.
func K8sImagesOf(cfg config.Provider) K8sImages {
	out := K8sImages{ProxyEnabled: true}
	if m := cfg.Machine(); m != nil {
		out.Kubelet = m.Kubelet().Image()
	}
	if cl := cfg.Cluster(); cl != nil {
		out.APIServer = cl.APIServer().Image()
		out.ControllerManager = cl.ControllerManager().Image()
		out.Scheduler = cl.Scheduler().Image()
		out.Proxy = cl.Proxy().Image()
		out.ProxyEnabled = cl.Proxy().Enabled()
	}
	return out
}

// AtVersion reports whether every image of set runs version.
func (i K8sImages) AtVersion(set K8sImageSet, version string) bool {
	var imgs []string
	if set&K8sControlPlaneImages != 0 {
		imgs = append(imgs, i.APIServer, i.ControllerManager, i.Scheduler)
	}
	if set&K8sProxyImage != 0 {
		imgs = append(imgs, i.Proxy)
	}
	if set&K8sKubeletImage != 0 {
		imgs = append(imgs, i.Kubelet)
	}
	for _, img := range imgs {
		if !k8sSameVersion(k8sImageVersion(img), version) {
			return false
		}
	}
	return true
}

// SetK8sImages retags the selected images of cfg to version (same repository) and returns
// the encoded config. It changes nothing else in the document.
func SetK8sImages(cfg config.Provider, set K8sImageSet, version string) ([]byte, error) {
	cur := K8sImagesOf(cfg)
	patched, err := cfg.PatchV1Alpha1(func(c *v1alpha1.Config) error {
		if set&(K8sControlPlaneImages|K8sProxyImage) != 0 && c.ClusterConfig == nil {
			return errors.New("machine config has no cluster section")
		}
		if set&K8sControlPlaneImages != 0 {
			cc := c.ClusterConfig
			if cc.APIServerConfig == nil {
				cc.APIServerConfig = &v1alpha1.APIServerConfig{}
			}
			if cc.ControllerManagerConfig == nil {
				cc.ControllerManagerConfig = &v1alpha1.ControllerManagerConfig{}
			}
			if cc.SchedulerConfig == nil {
				cc.SchedulerConfig = &v1alpha1.SchedulerConfig{}
			}
			cc.APIServerConfig.ContainerImage = Retag(cur.APIServer, version)
			cc.ControllerManagerConfig.ContainerImage = Retag(cur.ControllerManager, version)
			cc.SchedulerConfig.ContainerImage = Retag(cur.Scheduler, version)
		}
		if set&K8sProxyImage != 0 {
			if c.ClusterConfig.ProxyConfig == nil {
				c.ClusterConfig.ProxyConfig = &v1alpha1.ProxyConfig{}
			}
			c.ClusterConfig.ProxyConfig.ContainerImage = Retag(cur.Proxy, version)
		}
		if set&K8sKubeletImage != 0 {
			if c.MachineConfig == nil {
				return errors.New("machine config has no machine section")
			}
			if c.MachineConfig.MachineKubelet == nil {
				c.MachineConfig.MachineKubelet = &v1alpha1.KubeletConfig{}
			}
			c.MachineConfig.MachineKubelet.KubeletImage = Retag(cur.Kubelet, version)
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("set Kubernetes images: %w", err)
	}
	out, err := patched.EncodeBytes(encoder.WithComments(encoder.CommentsDisabled))
	if err != nil {
		return nil, fmt.Errorf("encode machine config: %w", err)
	}
	return out, nil
}

// Retag replaces the tag (and drops any digest) of an image reference.
func Retag(ref, version string) string {
	if i := strings.Index(ref, "@"); i >= 0 {
		ref = ref[:i]
	}
	if slash, colon := strings.LastIndex(ref, "/"), strings.LastIndex(ref, ":"); colon > slash {
		ref = ref[:colon]
	}
	return ref + ":" + version
}

// ApplyNoReboot applies a machine config to one node in NO_REBOOT mode (Talos restarts the
// affected static pods and the kubelet; the node stays up).
func ApplyNoReboot(ctx context.Context, c *Clients, n Node, data []byte) error {
	api, err := c.k8sConfigAPI()
	if err != nil {
		return err
	}
	resp, err := api.ApplyConfiguration(client.WithNode(ctx, n.Address), &machineapi.ApplyConfigurationRequest{
		Data: data, Mode: machineapi.ApplyConfigurationRequest_NO_REBOOT,
	})
	if err != nil {
		return fmt.Errorf("apply machine config to %s (NO_REBOOT): %w", n.Name, err)
	}
	for _, m := range resp.GetMessages() {
		if e := m.GetMetadata().GetError(); e != "" {
			return fmt.Errorf("apply machine config to %s (NO_REBOOT): %s", n.Name, e)
		}
	}
	return nil
}
