package sim

import (
	"encoding/base64"
	"fmt"
	"strings"

	"github.com/siderolabs/talos/pkg/machinery/config/configloader"
	"go.yaml.in/yaml/v3"
)

// images is the part of a machine config the sim acts on.
type images struct {
	Install           string
	Kubelet           string
	APIServer         string
	ControllerManager string
	Scheduler         string
	Proxy             string
}

func defaultImages(installer, k8sVersion string) images {
	return images{
		Install:           installer,
		Kubelet:           "ghcr.io/siderolabs/kubelet:" + k8sVersion,
		APIServer:         "registry.k8s.io/kube-apiserver:" + k8sVersion,
		ControllerManager: "registry.k8s.io/kube-controller-manager:" + k8sVersion,
		Scheduler:         "registry.k8s.io/kube-scheduler:" + k8sVersion,
		Proxy:             "registry.k8s.io/kube-proxy:" + k8sVersion,
	}
}

// imageTag returns the tag of an image reference ("repo/x:v1.13.9@sha256:…" gives "v1.13.9").
func imageTag(ref string) string {
	if i := strings.Index(ref, "@"); i >= 0 {
		ref = ref[:i]
	}

	slash := strings.LastIndex(ref, "/")

	colon := strings.LastIndex(ref, ":")
	if colon <= slash {
		return ""
	}

	return ref[colon+1:]
}

// versionFromImage parses a Talos or Kubernetes version from an image tag.
func versionFromImage(ref string) (string, error) {
	tag := imageTag(ref)
	if tag == "" {
		return "", fmt.Errorf("image %q has no tag: use a tagged image such as factory.talos.dev/nocloud-installer/<schematic>:v1.13.9", ref)
	}

	if !strings.HasPrefix(tag, "v") {
		tag = "v" + tag
	}

	if _, _, ok := majorMinor(tag); !ok {
		return "", fmt.Errorf("image %q: tag %q is not a version (want vX.Y.Z)", ref, tag)
	}

	return tag, nil
}

// majorMinor parses "vX.Y[.Z…]".
func majorMinor(v string) (major, minor int, ok bool) {
	if _, err := fmt.Sscanf(strings.TrimPrefix(v, "v"), "%d.%d", &major, &minor); err != nil {
		return 0, 0, false
	}

	return major, minor, true
}

// atLeast reports whether version v is at least major.minor.
func atLeast(v string, major, minor int) bool {
	ma, mi, ok := majorMinor(v)
	if !ok {
		return false
	}

	return ma > major || ma == major && mi >= minor
}

// machineConfig renders a minimal v1alpha1 machine config that configloader accepts.
// caPEM is the Talos API CA (machine.ca), kubeCAPEM the Kubernetes CA (cluster.ca), etcdCAPEM
// etcd's (cluster.etcd.ca).
func machineConfig(clusterName, role, endpoint string, caPEM, kubeCAPEM, etcdCAPEM []byte, img images) ([]byte, error) {
	ca := base64.StdEncoding.EncodeToString(caPEM)
	kubeCA := base64.StdEncoding.EncodeToString(kubeCAPEM)
	etcdCA := base64.StdEncoding.EncodeToString(etcdCAPEM)

	cfg := map[string]any{
		"version": "v1alpha1",
		"debug":   false,
		"persist": true,
		"machine": map[string]any{
			"type":  role,
			"token": "simsim.simulatortoken01",
			"ca":    map[string]any{"crt": ca, "key": ""},
			"kubelet": map[string]any{
				"image": img.Kubelet,
			},
			"install": map[string]any{
				"disk":  "/dev/sda",
				"image": img.Install,
				"wipe":  false,
			},
		},
		"cluster": map[string]any{
			"clusterName":  clusterName,
			"controlPlane": map[string]any{"endpoint": endpoint},
			"network": map[string]any{
				"dnsDomain":      "cluster.local",
				"podSubnets":     []string{"10.244.0.0/16"},
				"serviceSubnets": []string{"10.96.0.0/12"},
			},
			"token":             "simsim.simulatortoken02",
			"ca":                map[string]any{"crt": kubeCA, "key": ""},
			"etcd":              map[string]any{"ca": map[string]any{"crt": etcdCA, "key": ""}},
			"apiServer":         map[string]any{"image": img.APIServer},
			"controllerManager": map[string]any{"image": img.ControllerManager},
			"scheduler":         map[string]any{"image": img.Scheduler},
			"proxy":             map[string]any{"image": img.Proxy},
		},
	}

	out, err := yaml.Marshal(cfg)
	if err != nil {
		return nil, fmt.Errorf("render machine config: %w", err)
	}

	return out, nil
}

// parseImages extracts the images and machine type from a machine config.
func parseImages(data []byte) (images, string, error) {
	cfg, err := configloader.NewFromBytes(data)
	if err != nil {
		return images{}, "", fmt.Errorf("load machine config: %w", err)
	}

	if cfg.Machine() == nil || cfg.Cluster() == nil {
		return images{}, "", fmt.Errorf("machine config has no v1alpha1 machine/cluster sections")
	}

	img := images{
		Install: cfg.Machine().Install().Image(),
		Kubelet: cfg.K8sKubeletConfig().Image(),
		Proxy:   cfg.K8sProxyConfig().Image(),
	}

	// machinery v1.14 reads the Kubernetes settings through the K8s*Config accessors (a
	// v1alpha1 document answers through its bridge, never nil once Machine/Cluster exist).
	if cfg.Machine().Type().IsControlPlane() {
		img.APIServer = cfg.K8sAPIServerConfig().Image()
		img.ControllerManager = cfg.K8sControllerManagerConfig().Image()
		img.Scheduler = cfg.K8sSchedulerConfig().Image()
	}

	return img, cfg.Machine().Type().String(), nil
}
