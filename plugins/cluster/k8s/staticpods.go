package k8s

import (
	"context"
	"fmt"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/wait"
)

// Control-plane components Talos runs as static pods; the kubelet publishes each as the
// mirror pod kube-system/<component>-<node>.
const (
	ComponentAPIServer         = "kube-apiserver"
	ComponentControllerManager = "kube-controller-manager"
	ComponentScheduler         = "kube-scheduler"
)

const staticPodNamespace = "kube-system"

// StaticPodComponents lists the control-plane static pods in upgrade order.
func StaticPodComponents() []string {
	return []string{ComponentAPIServer, ComponentControllerManager, ComponentScheduler}
}

// StaticPodName is the mirror pod name of a component on a node.
func StaticPodName(component, node string) string { return component + "-" + node }

// waitPoll is how often the waits below re-read the API.
const waitPoll = 250 * time.Millisecond

// pollUntil calls check until it reports done, ctx ends or timeout passes. It returns nil
// when done, or an error saying which limit was hit.
func pollUntil(ctx context.Context, timeout time.Duration, check func() (bool, error)) error {
	var failed error
	err := wait.PollUntilContextTimeout(ctx, waitPoll, timeout, true, func(context.Context) (bool, error) {
		done, err := check()
		failed = err
		return done, err
	})
	switch {
	case failed != nil:
		return failed
	case err == nil:
		return nil
	case ctx.Err() != nil:
		return fmt.Errorf("stopped (%w)", ctx.Err())
	}
	return fmt.Errorf("timed out")
}

func podImage(pod *corev1.Pod, component string) string {
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
func imageVersion(ref string) string {
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
func sameVersion(a, b string) bool {
	return a != "" && strings.TrimPrefix(a, "v") == strings.TrimPrefix(b, "v")
}

func orUnknown(s string) string {
	if s == "" {
		return "unknown"
	}
	return s
}
