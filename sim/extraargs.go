package sim

import (
	"sort"
	"strings"

	talosconfig "github.com/siderolabs/talos/pkg/machinery/config"
	"github.com/siderolabs/talos/pkg/machinery/resources/k8s"
)

// componentArgs are the machine config's extraArgs per Kubernetes component and the kubelet's
// extraConfig.
type componentArgs struct {
	byComponent   map[string]map[string][]string // static pod component → flag → values
	kubelet       map[string][]string
	kubeletConfig map[string]any
}

// extraArgsOf reads cluster.apiServer/controllerManager/scheduler.extraArgs and
// machine.kubelet.extraArgs/extraConfig (nil cfg: none).
func extraArgsOf(cfg talosconfig.Provider) componentArgs {
	out := componentArgs{byComponent: map[string]map[string][]string{}}

	if cfg == nil {
		return out
	}

	if k := cfg.K8sKubeletConfig(); k != nil {
		out.kubelet = k.ExtraArgs()
		out.kubeletConfig = k.ExtraConfig()
	}

	if cfg.Cluster() != nil && cfg.Machine() != nil && cfg.Machine().Type().IsControlPlane() {
		out.byComponent[ComponentAPIServer] = cfg.K8sAPIServerConfig().ExtraArgs()
		out.byComponent[ComponentControllerManager] = cfg.K8sControllerManagerConfig().ExtraArgs()
		out.byComponent[ComponentScheduler] = cfg.K8sSchedulerConfig().ExtraArgs()
	}

	return out
}

// withExtraArgs merges extraArgs into a command line the way Talos's argsbuilder does for the
// flags the sim renders: a flag given in extraArgs replaces the default of the same name, and
// each of its values becomes one --flag=value, in flag order. (Talos also merges a few flags
// additively, such as feature-gates and enable-admission-plugins, and refuses some; the sim's
// defaults set none of the additive ones, and it refuses nothing.)
func withExtraArgs(base []string, extra map[string][]string) []string {
	if len(extra) == 0 {
		return base
	}

	out := make([]string, 0, len(base)+len(extra))

	for _, a := range base {
		k, _, _ := strings.Cut(strings.TrimPrefix(a, "--"), "=")
		if _, replaced := extra[k]; replaced && strings.HasPrefix(a, "--") {
			continue
		}

		out = append(out, a)
	}

	keys := make([]string, 0, len(extra))
	for k := range extra {
		keys = append(keys, k)
	}

	sort.Strings(keys)

	for _, k := range keys {
		for _, v := range extra[k] {
			out = append(out, "--"+k+"="+v)
		}
	}

	return out
}

func argValues(extra map[string][]string) map[string]k8s.ArgValues {
	if len(extra) == 0 {
		return nil
	}

	out := make(map[string]k8s.ArgValues, len(extra))
	for k, v := range extra {
		out[k] = k8s.ArgValues{Values: v}
	}

	return out
}

// kubeletConfiguration is the KubeletSpec's configuration document: the sim renders only its
// type and the machine config's extraConfig merged on top (kubelet_spec.go merges extraConfig
// into the full KubeletConfiguration it builds).
func kubeletConfiguration(extraConfig map[string]any) map[string]any {
	out := map[string]any{"apiVersion": "kubelet.config.k8s.io/v1beta1", "kind": "KubeletConfiguration"}

	for k, v := range extraConfig {
		out[k] = v
	}

	return out
}
