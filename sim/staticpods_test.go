package sim_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"testing"
	"time"

	machineapi "github.com/siderolabs/talos/pkg/machinery/api/machine"
	"github.com/siderolabs/talos/pkg/machinery/client"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/talosbot/talosbot/internal/testenv"
	"github.com/talosbot/talosbot/sim"
)

// staticPod reads a mirror pod's image and readiness.
func staticPod(ctx context.Context, kc kubernetes.Interface, comp, node string) (image string, ready bool, err error) {
	p, err := kc.CoreV1().Pods("kube-system").Get(ctx, sim.StaticPodName(comp, node), metav1.GetOptions{})
	if err != nil {
		return "", false, err
	}

	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodReady {
			ready = c.Status == corev1.ConditionTrue
		}
	}

	if _, ok := p.Annotations[corev1.MirrorPodAnnotationKey]; !ok {
		return "", false, fmt.Errorf("pod %s is not a mirror pod", p.Name)
	}

	return p.Spec.Containers[0].Image, ready, nil
}

func waitStaticPod(t *testing.T, kc kubernetes.Interface, comp, node, image string, ready bool) {
	t.Helper()

	eventually(t, 20*time.Second, comp+" on "+node, func() error {
		img, r, err := staticPod(t.Context(), kc, comp, node)
		if err == nil && (img != image || r != ready) {
			err = fmt.Errorf("%s-%s: image %s ready %t, want %s ready %t", comp, node, img, r, image, ready)
		}

		return err
	})
}

// TestStaticPods: control planes publish Ready mirror pods for their static pods; a config
// apply recreates the changed ones at the new image, Ready after a delay; a StaticPodNotReady
// fault keeps one from becoming Ready until it is cleared; the kubelet version follows
// machine.kubelet.image.
func TestStaticPods(t *testing.T) {
	kube := testenv.StartKube(t)
	kc := kube.Client

	c, cli := startSim(t, sim.Options{ControlPlanes: 1, Workers: 1, Kube: kc, StaticPods: true, StaticPodReadyDelay: 50 * time.Millisecond})
	ctx := t.Context()

	for _, comp := range sim.StaticPodComponents() {
		waitStaticPod(t, kc, comp, "cp-1", "registry.k8s.io/"+comp+":"+sim.DefaultKubernetesVersion, true)
	}

	if _, err := kc.CoreV1().Pods("kube-system").Get(ctx, sim.StaticPodName(sim.ComponentAPIServer, "worker-1"), metav1.GetOptions{}); err == nil {
		t.Fatal("a worker has a control-plane static pod")
	}

	if err := c.Inject(ctx, "worker-1", sim.Fault{StaticPodNotReady: sim.ComponentScheduler}); err == nil {
		t.Fatal("StaticPodNotReady accepted on a worker")
	}

	if err := c.Inject(ctx, "cp-1", sim.Fault{StaticPodNotReady: "kube-nothing"}); err == nil {
		t.Fatal("StaticPodNotReady accepted an unknown component")
	}

	if err := c.Inject(ctx, "cp-1", sim.Fault{StaticPodNotReady: sim.ComponentScheduler}); err != nil {
		t.Fatal(err)
	}

	nctx := client.WithNode(ctx, c.Nodes()[0].IP)

	cfg := machineConfig(ctx, t, cli, c.Nodes()[0].IP)
	newCfg := bytes.ReplaceAll(cfg, []byte(":"+sim.DefaultKubernetesVersion), []byte(":v1.36.3"))

	if _, err := cli.ApplyConfiguration(nctx, &machineapi.ApplyConfigurationRequest{Data: newCfg, Mode: machineapi.ApplyConfigurationRequest_NO_REBOOT}); err != nil {
		t.Fatal(err)
	}

	waitStaticPod(t, kc, sim.ComponentAPIServer, "cp-1", "registry.k8s.io/kube-apiserver:v1.36.3", true)
	waitStaticPod(t, kc, sim.ComponentControllerManager, "cp-1", "registry.k8s.io/kube-controller-manager:v1.36.3", true)

	// The faulty one is at the new image but stays not Ready while the others are Ready.
	waitStaticPod(t, kc, sim.ComponentScheduler, "cp-1", "registry.k8s.io/kube-scheduler:v1.36.3", false)

	eventually(t, 10*time.Second, "kubelet version", func() error {
		n, err := kc.CoreV1().Nodes().Get(ctx, "cp-1", metav1.GetOptions{})
		if err == nil && n.Status.NodeInfo.KubeletVersion != "v1.36.3" {
			err = fmt.Errorf("kubeletVersion %s", n.Status.NodeInfo.KubeletVersion)
		}

		return err
	})

	if err := c.Clear(ctx, "cp-1"); err != nil {
		t.Fatal(err)
	}

	waitStaticPod(t, kc, sim.ComponentScheduler, "cp-1", "registry.k8s.io/kube-scheduler:v1.36.3", true)
}

func TestStaticPodFaultJSON(t *testing.T) {
	var f sim.Fault
	if err := json.Unmarshal([]byte(`{"staticPodNotReady":"kube-apiserver"}`), &f); err != nil || f.StaticPodNotReady != "kube-apiserver" {
		t.Fatalf("unmarshal: %+v %v", f, err)
	}

	b, _ := json.Marshal(f)
	if !bytes.Contains(b, []byte(`"staticPodNotReady":"kube-apiserver"`)) {
		t.Fatalf("marshal: %s", b)
	}
}
