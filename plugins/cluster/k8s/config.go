package k8s

import (
	"context"
	"errors"
	"fmt"
	"strings"

	machineapi "github.com/siderolabs/talos/pkg/machinery/api/machine"
	"github.com/siderolabs/talos/pkg/machinery/client"
	"github.com/siderolabs/talos/pkg/machinery/config"
	"github.com/talosbot/talosbot/plugins/cluster"
	"google.golang.org/grpc"
)

// ConfigAPI is the part of the MachineService that applies machine configs. The generated
// machineapi.MachineServiceClient behind Clients.Machine satisfies it.
type ConfigAPI interface {
	ApplyConfiguration(ctx context.Context, in *machineapi.ApplyConfigurationRequest, opts ...grpc.CallOption) (*machineapi.ApplyConfigurationResponse, error)
}

func configAPI(c *cluster.Clients) (ConfigAPI, error) {
	api, ok := c.Machine.(ConfigAPI)
	if !ok {
		return nil, errors.New("this Talos client cannot apply machine configs")
	}
	return api, nil
}

// ReadMachineConfig reads a node's active machine config from its MachineConfig resource.
func ReadMachineConfig(ctx context.Context, c *cluster.Clients, n cluster.Node) (config.Provider, error) {
	cfg, err := cluster.MachineConfigOf(ctx, c.COSI, n.Address)
	if err != nil {
		return nil, fmt.Errorf("read machine config of %s: %w", n.Name, err)
	}
	if cfg.RawV1Alpha1() == nil {
		return nil, fmt.Errorf("machine config of %s has no v1alpha1 document", n.Name)
	}
	return cfg, nil
}

// ImageSet selects the images SetImages changes.
type ImageSet int

const (
	// ControlPlaneImages are the apiserver, controller-manager and scheduler images.
	ControlPlaneImages ImageSet = 1 << iota
	// ProxyImage is cluster.proxy.image.
	ProxyImage
	// KubeletImage is machine.kubelet.image.
	KubeletImage
)

// Images are the Kubernetes images a machine config runs (Talos defaults filled in).
type Images struct {
	APIServer, ControllerManager, Scheduler, Proxy, Kubelet string
	// ProxyEnabled is false when cluster.proxy.disabled is set (e.g. a CNI replaces kube-proxy).
	ProxyEnabled bool
}

// ImagesOf returns the Kubernetes images of a machine config.
func ImagesOf(cfg config.Provider) Images {
	out := Images{ProxyEnabled: true}
	// machinery v1.14 moved the Kubernetes settings off Machine()/Cluster() onto the
	// multi-doc K8s*Config accessors; v1alpha1 documents still answer through them.
	if k := cfg.K8sKubeletConfig(); k != nil {
		out.Kubelet = k.Image()
	}
	if a := cfg.K8sAPIServerConfig(); a != nil {
		out.APIServer = a.Image()
	}
	if c := cfg.K8sControllerManagerConfig(); c != nil {
		out.ControllerManager = c.Image()
	}
	if s := cfg.K8sSchedulerConfig(); s != nil {
		out.Scheduler = s.Image()
	}
	if p := cfg.K8sProxyConfig(); p != nil {
		out.Proxy = p.Image()
		out.ProxyEnabled = p.Enabled()
	}
	return out
}

// AtVersion reports whether every image of set runs version.
func (i Images) AtVersion(set ImageSet, version string) bool {
	var imgs []string
	if set&ControlPlaneImages != 0 {
		imgs = append(imgs, i.APIServer, i.ControllerManager, i.Scheduler)
	}
	if set&ProxyImage != 0 {
		imgs = append(imgs, i.Proxy)
	}
	if set&KubeletImage != 0 {
		imgs = append(imgs, i.Kubelet)
	}
	for _, img := range imgs {
		if !sameVersion(imageVersion(img), version) {
			return false
		}
	}
	return true
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
func ApplyNoReboot(ctx context.Context, c *cluster.Clients, n cluster.Node, data []byte) error {
	api, err := configAPI(c)
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
