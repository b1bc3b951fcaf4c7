package k8s_test

import (
	"testing"
	"time"

	"github.com/siderolabs/talos/pkg/machinery/config"
	"github.com/siderolabs/talos/pkg/machinery/config/configloader"
	"github.com/talosbot/talosbot/plugins/cluster/internal/simtest"
	"github.com/talosbot/talosbot/plugins/cluster/k8s"
	"github.com/talosbot/talosbot/sim"
)

func TestKubeletTargetKeepsRepositoryAndVariant(t *testing.T) {
	for running, want := range map[string]string{
		"ghcr.io/siderolabs/kubelet:v1.35.2":                     "ghcr.io/siderolabs/kubelet:v1.36.3",
		"ghcr.io/siderolabs/kubelet:v1.35.2-fat":                 "ghcr.io/siderolabs/kubelet:v1.36.3-fat",
		"mirror.local:5000/kubelet:v1.35.2-slim@sha256:0123abcd": "mirror.local:5000/kubelet:v1.36.3-slim",
		"ghcr.io/siderolabs/kubelet:v1.35.2-fatter":              "ghcr.io/siderolabs/kubelet:v1.36.3",
	} {
		if got := k8s.KubeletTarget(running, "v1.36.3"); got != want {
			t.Errorf("KubeletTarget(%s) = %s, want %s", running, got, want)
		}
	}

	if !k8s.SameImage("a/b:v1@sha256:00", "a/b:v1") || k8s.SameImage("", "") || k8s.SameImage("a/b:v1", "a/b:v1-fat") {
		t.Fatal("SameImage ignores digests only")
	}
}

// TestSetImageChangesOneComponent: each component's image is set alone, as talosctl patches
// one static pod at a time; nothing else in the config changes.
func TestSetImageChangesOneComponent(t *testing.T) {
	c := simtest.Start(t, sim.Options{ControlPlanes: 1, TalosVersion: "v1.13.9", KubernetesVersion: "v1.35.2"})
	inv, cl := simtest.Connect(t, c, nil)
	ctx := simtest.Ctx(t, time.Minute)

	cfg, err := k8s.ReadMachineConfig(ctx, cl, inv.Nodes[0])
	if err != nil {
		t.Fatal(err)
	}

	all := []string{k8s.ComponentAPIServer, k8s.ComponentControllerManager, k8s.ComponentScheduler, k8s.ComponentKubeProxy, k8s.ComponentKubelet}
	for _, comp := range all {
		data, err := k8s.SetImage(cfg, comp, "example.com/"+comp+":v9.9.9")
		if err != nil {
			t.Fatal(err)
		}

		patched, err := cfgFrom(data)
		if err != nil {
			t.Fatal(err)
		}

		for _, other := range all {
			got, was := k8s.ConfigImage(patched, other), k8s.ConfigImage(cfg, other)
			if other == comp && got != "example.com/"+comp+":v9.9.9" || other != comp && got != was {
				t.Fatalf("SetImage(%s): %s is %s (was %s)", comp, other, got, was)
			}
		}
	}

	if _, err := k8s.SetImage(cfg, "etcd", "x:v1"); err == nil {
		t.Fatal("an unknown component was accepted")
	}
}

func cfgFrom(data []byte) (config.Provider, error) { return configloader.NewFromBytes(data) }
