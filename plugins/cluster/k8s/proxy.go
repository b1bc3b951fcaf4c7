package k8s

import (
	"context"
	"fmt"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/util/retry"
)

// KubeProxyDaemonSet is where Talos's bootstrap manifests put kube-proxy.
const KubeProxyDaemonSet = "kube-proxy"

// UpgradeKubeProxyDaemonSet sets the kube-proxy container of kube-system/kube-proxy to
// version and waits for the rollout. Talos renders that DaemonSet from cluster.proxy.image
// only at bootstrap (talosctl upgrade-k8s updates it through its manifest sync, which this
// bot does not do), so this one manifest is patched directly. skipped is true when there
// is no such DaemonSet (kube-proxy not used, e.g. a CNI replaces it) or it is already
// rolled out at version.
func UpgradeKubeProxyDaemonSet(ctx context.Context, kube kubernetes.Interface, version string, timeout time.Duration) (detail string, skipped bool, err error) {
	dss := kube.AppsV1().DaemonSets(staticPodNamespace)
	ds, err := dss.Get(ctx, KubeProxyDaemonSet, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return "no kube-system/kube-proxy DaemonSet: kube-proxy is not used", true, nil
	}
	if err != nil {
		return "", false, fmt.Errorf("read kube-system/kube-proxy: %w", err)
	}
	idx := proxyContainer(ds)
	if idx < 0 {
		return "", false, fmt.Errorf("kube-system/kube-proxy has no container named kube-proxy; update it by hand")
	}
	running := imageVersion(ds.Spec.Template.Spec.Containers[idx].Image)
	if sameVersion(running, version) && rolledOut(ds) {
		return "kube-system/kube-proxy already runs " + version, true, nil
	}
	// A DaemonSet already newer (an earlier hop of a multi-hop upgrade aimed past this one, or a
	// hand edit) is left alone: setting the hop's version would downgrade kube-proxy.
	if _, cur, cerr := ParseVersion(running); cerr == nil {
		if _, want, werr := ParseVersion(version); werr == nil && cur.GT(want) {
			return "kube-system/kube-proxy already runs " + running + ", newer than " + version + "; left alone", true, nil
		}
	}
	err = retry.RetryOnConflict(retry.DefaultRetry, func() error {
		cur, gerr := dss.Get(ctx, KubeProxyDaemonSet, metav1.GetOptions{})
		if gerr != nil {
			return gerr
		}
		i := proxyContainer(cur)
		if i < 0 {
			return fmt.Errorf("kube-system/kube-proxy has no container named kube-proxy")
		}
		cur.Spec.Template.Spec.Containers[i].Image = Retag(cur.Spec.Template.Spec.Containers[i].Image, version)
		_, uerr := dss.Update(ctx, cur, metav1.UpdateOptions{})
		return uerr
	})
	if err != nil {
		return "", false, fmt.Errorf("update kube-system/kube-proxy image: %w", err)
	}
	var last *appsv1.DaemonSet
	werr := pollUntil(ctx, timeout, func() (bool, error) {
		cur, gerr := dss.Get(ctx, KubeProxyDaemonSet, metav1.GetOptions{})
		if gerr != nil {
			return false, nil
		}
		last = cur
		return rolledOut(cur), nil
	})
	if werr != nil {
		st := "no status"
		if last != nil {
			st = fmt.Sprintf("%d of %d updated, %d available", last.Status.UpdatedNumberScheduled,
				last.Status.DesiredNumberScheduled, last.Status.NumberAvailable)
		}
		return "", false, fmt.Errorf("kube-system/kube-proxy rollout to %s %s after %s (%s)", version, werr, timeout, st)
	}
	return "kube-system/kube-proxy rolled out at " + version, false, nil
}

func proxyContainer(ds *appsv1.DaemonSet) int {
	for i, c := range ds.Spec.Template.Spec.Containers {
		if c.Name == "kube-proxy" {
			return i
		}
	}
	return -1
}

func rolledOut(ds *appsv1.DaemonSet) bool {
	s := ds.Status
	return s.ObservedGeneration >= ds.Generation && s.UpdatedNumberScheduled >= s.DesiredNumberScheduled &&
		s.NumberAvailable >= s.DesiredNumberScheduled
}
