package cluster

import (
	"context"
	"fmt"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
)

// Control-plane components Talos runs as static pods; the kubelet publishes each as the
// mirror pod kube-system/<component>-<node>.
const (
	ComponentAPIServer         = "kube-apiserver"
	ComponentControllerManager = "kube-controller-manager"
	ComponentScheduler         = "kube-scheduler"
)

const k8sStaticPodNamespace = "kube-system"

// StaticPodComponents lists the control-plane static pods in upgrade order.
func StaticPodComponents() []string {
	return []string{ComponentAPIServer, ComponentControllerManager, ComponentScheduler}
}

// StaticPodName is the mirror pod name of a component on a node.
func StaticPodName(component, node string) string { return component + "-" + node }

// k8sWaitPoll is how often the waits below re-read the API.
const k8sWaitPoll = 250 * time.Millisecond

// StaticPodState says why a static pod is (not yet) at the wanted version and Ready.
func StaticPodState(pod *corev1.Pod, component, version string) (ok bool, why string) {
	img := k8sPodImage(pod, component)
	if got := k8sImageVersion(img); !k8sSameVersion(got, version) {
		return false, fmt.Sprintf("runs %s, not %s", k8sOrUnknown(img), version)
	}
	for _, c := range pod.Status.Conditions {
		if c.Type == corev1.PodReady {
			if c.Status == corev1.ConditionTrue {
				return true, "Ready at " + version
			}
			why := "not Ready"
			if c.Reason != "" {
				why += " (" + c.Reason
				if c.Message != "" {
					why += ": " + c.Message
				}
				why += ")"
			}
			return false, why
		}
	}
	return false, "no Ready condition yet (phase " + k8sOrUnknown(string(pod.Status.Phase)) + ")"
}

// WaitStaticPods waits until the node's static pods of components run version and are
// Ready. On timeout the error names every pod still not there and why, e.g.
// "kube-system/kube-scheduler-cp-1 not Ready (ContainersNotReady: …)".
func WaitStaticPods(ctx context.Context, kube kubernetes.Interface, node, version string, components []string, timeout time.Duration) error {
	var pending []string
	check := func() (bool, error) {
		pending = pending[:0]
		for _, comp := range components {
			name := StaticPodName(comp, node)
			pod, err := kube.CoreV1().Pods(k8sStaticPodNamespace).Get(ctx, name, metav1.GetOptions{})
			switch {
			case apierrors.IsNotFound(err):
				pending = append(pending, k8sStaticPodNamespace+"/"+name+" does not exist yet")
				continue
			case err != nil:
				pending = append(pending, k8sStaticPodNamespace+"/"+name+": "+err.Error())
				continue
			}
			if ok, why := StaticPodState(pod, comp, version); !ok {
				pending = append(pending, k8sStaticPodNamespace+"/"+name+" "+why)
			}
		}
		return len(pending) == 0, nil
	}
	if err := k8sPollUntil(ctx, timeout, check); err != nil {
		return fmt.Errorf("%s after %s: %s", err, timeout, strings.Join(pending, "; "))
	}
	return nil
}

// WaitKubeletVersion waits until Node.status.nodeInfo.kubeletVersion equals version.
func WaitKubeletVersion(ctx context.Context, kube kubernetes.Interface, node, version string, timeout time.Duration) error {
	last := "unknown"
	check := func() (bool, error) {
		kn, err := kube.CoreV1().Nodes().Get(ctx, node, metav1.GetOptions{})
		if err != nil {
			last = err.Error()
			return false, nil
		}
		last = kn.Status.NodeInfo.KubeletVersion
		return k8sSameVersion(last, version), nil
	}
	if err := k8sPollUntil(ctx, timeout, check); err != nil {
		return fmt.Errorf("kubelet on %s reports %s, not %s, %s after %s", node, k8sOrUnknown(last), version, err, timeout)
	}
	return nil
}

// pollUntil calls check until it reports done, ctx ends or timeout passes. It returns nil
// when done, or an error saying which limit was hit.
func k8sPollUntil(ctx context.Context, timeout time.Duration, check func() (bool, error)) error {
	deadline := time.NewTimer(timeout)
	defer deadline.Stop()
	tick := time.NewTicker(k8sWaitPoll)
	defer tick.Stop()
	for {
		done, err := check()
		if err != nil {
			return err
		}
		if done {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("stopped (%w)", ctx.Err())
		case <-deadline.C:
			return fmt.Errorf("timed out")
		case <-tick.C:
		}
	}
}

func k8sPodImage(pod *corev1.Pod, component string) string {
	for _, c := range pod.Spec.Containers {
		if c.Name == component {
			return c.Image
		}
	}
	if len(pod.Spec.Containers) > 0 {
		return pod.Spec.Containers[0].Image
	}
	return ""
}

// imageVersion returns the tag of an image reference ("repo/x:v1.36.3@sha256:…" → "v1.36.3").
func k8sImageVersion(ref string) string {
	if i := strings.Index(ref, "@"); i >= 0 {
		ref = ref[:i]
	}
	slash, colon := strings.LastIndex(ref, "/"), strings.LastIndex(ref, ":")
	if colon <= slash {
		return ""
	}
	return ref[colon+1:]
}

// sameVersion compares versions with or without the leading v.
func k8sSameVersion(a, b string) bool {
	return a != "" && strings.TrimPrefix(a, "v") == strings.TrimPrefix(b, "v")
}

func k8sOrUnknown(s string) string {
	if s == "" {
		return "unknown"
	}
	return s
}
