package sim_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/cosi-project/runtime/pkg/resource"
	"github.com/cosi-project/runtime/pkg/safe"
	"github.com/cosi-project/runtime/pkg/state"
	machineapi "github.com/siderolabs/talos/pkg/machinery/api/machine"
	"github.com/siderolabs/talos/pkg/machinery/client"
	"github.com/siderolabs/talos/pkg/machinery/resources/k8s"
	"github.com/siderolabs/talos/pkg/machinery/resources/v1alpha1"
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
	t.Parallel()
	slow(t)
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
	t.Parallel()
	var f sim.Fault
	if err := json.Unmarshal([]byte(`{"staticPodNotReady":"kube-apiserver"}`), &f); err != nil || f.StaticPodNotReady != "kube-apiserver" {
		t.Fatalf("unmarshal: %+v %v", f, err)
	}

	b, _ := json.Marshal(f)
	if !bytes.Contains(b, []byte(`"staticPodNotReady":"kube-apiserver"`)) {
		t.Fatalf("marshal: %s", b)
	}
}

// TestUpgradeK8sProtocol drives the sim the way talosctl upgrade-k8s does
// (pkg/cluster/kubernetes/talos_managed.go, kubelet.go), through the COSI API: the
// APIServerConfig resource advances on a config apply, the recreated mirror pod carries that
// version in talos.dev/config-version, and a new kubelet image restarts the kubelet service
// (its Service resource is destroyed, then running and healthy again) after which the Node
// reports the new version. A terminating pod on a sim node is then finished, as a kubelet does.
func TestUpgradeK8sProtocol(t *testing.T) {
	t.Parallel()
	slow(t)
	kube := testenv.StartKube(t)
	kc := kube.Client

	c, cli := startSim(t, sim.Options{ControlPlanes: 1, Kube: kc, StaticPods: true, StaticPodReadyDelay: 300 * time.Millisecond})
	cp := c.Nodes()[0]

	ctx, cancel := context.WithTimeout(client.WithNode(t.Context(), cp.IP), 2*time.Minute)
	defer cancel()

	apiCh := make(chan state.Event, 16)
	if err := cli.COSI.Watch(ctx, resource.NewMetadata(k8s.ControlPlaneNamespaceName, k8s.APIServerConfigType, k8s.APIServerConfigID, resource.VersionUndefined), apiCh); err != nil {
		t.Fatal(err)
	}

	kubeletCh := make(chan state.Event, 16)
	if err := cli.COSI.Watch(ctx, resource.NewMetadata(v1alpha1.NamespaceName, v1alpha1.ServiceType, "kubelet", resource.VersionUndefined), kubeletCh); err != nil {
		t.Fatal(err)
	}

	next := func(ch chan state.Event, what string) state.Event {
		t.Helper()

		select {
		case ev := <-ch:
			return ev
		case <-ctx.Done():
			t.Fatalf("%s: %v", what, ctx.Err())
		}

		return state.Event{}
	}

	if ev := next(apiCh, "APIServerConfig"); ev.Type != state.Created {
		t.Fatalf("first APIServerConfig event %v, want Created", ev.Type)
	}

	if ev := next(kubeletCh, "kubelet service"); ev.Type != state.Created {
		t.Fatalf("first kubelet service event %v, want Created", ev.Type)
	}

	spec, err := safe.StateGetByID[*k8s.KubeletSpec](ctx, cli.COSI, k8s.KubeletID)
	if err != nil || spec.TypedSpec().Image != "ghcr.io/siderolabs/kubelet:"+sim.DefaultKubernetesVersion {
		t.Fatalf("KubeletSpec: %v %v", spec, err)
	}

	cfg := machineConfig(ctx, t, cli, cp.IP)
	newCfg := bytes.ReplaceAll(cfg, []byte(":"+sim.DefaultKubernetesVersion), []byte(":v1.36.3"))

	if _, err := cli.ApplyConfiguration(ctx, &machineapi.ApplyConfigurationRequest{Data: newCfg, Mode: machineapi.ApplyConfigurationRequest_NO_REBOOT}); err != nil {
		t.Fatal(err)
	}

	ev := next(apiCh, "APIServerConfig update")
	if ev.Type != state.Updated || ev.Resource.(*k8s.APIServerConfig).TypedSpec().Image != "registry.k8s.io/kube-apiserver:v1.36.3" {
		t.Fatalf("APIServerConfig event %v %v, want Updated to v1.36.3", ev.Type, ev.Resource)
	}

	version := ev.Resource.Metadata().Version().String()

	eventually(t, 30*time.Second, "kube-apiserver mirror pod at config version "+version, func() error {
		p, err := kc.CoreV1().Pods("kube-system").Get(ctx, sim.StaticPodName(sim.ComponentAPIServer, cp.Name), metav1.GetOptions{})
		if err != nil {
			return err
		}

		if got := p.Annotations["talos.dev/config-version"]; got != version || p.Status.HostIP != cp.IP {
			return fmt.Errorf("config-version %q hostIP %q", got, p.Status.HostIP)
		}

		return nil
	})

	if ev := next(kubeletCh, "kubelet stop"); ev.Type != state.Destroyed {
		t.Fatalf("kubelet service event %v, want Destroyed (restart)", ev.Type)
	}

	ev = next(kubeletCh, "kubelet start")
	if ev.Type != state.Created || !ev.Resource.(*v1alpha1.Service).TypedSpec().Healthy {
		t.Fatalf("kubelet service event %v %v, want Created healthy", ev.Type, ev.Resource)
	}

	// By the time the kubelet is healthy again it has posted its new version.
	n, err := kc.CoreV1().Nodes().Get(ctx, cp.Name, metav1.GetOptions{})
	if err != nil || n.Status.NodeInfo.KubeletVersion != "v1.36.3" {
		t.Fatalf("Node after the kubelet restart: %v %v", n.Status.NodeInfo.KubeletVersion, err)
	}

	// The kubelet finishes a deletion that has a grace period.
	pod, err := kc.CoreV1().Pods("default").Create(ctx, &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: "default"},
		Spec:       corev1.PodSpec{NodeName: cp.Name, Containers: []corev1.Container{{Name: "c", Image: "registry.k8s.io/pause:3.10"}}},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}

	grace := int64(300)
	if err := kc.CoreV1().Pods("default").Delete(ctx, pod.Name, metav1.DeleteOptions{GracePeriodSeconds: &grace}); err != nil {
		t.Fatal(err)
	}

	eventually(t, 30*time.Second, "terminating pod deleted", func() error {
		if _, err := kc.CoreV1().Pods("default").Get(ctx, pod.Name, metav1.GetOptions{}); err == nil {
			return errors.New("still there")
		}

		return nil
	})
}
