package gate

import (
	"context"
	"fmt"
	"strings"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/talosbot/talosbot/plugins/cluster"
)

// planProbeTimeout bounds the plan-time look at Kubernetes: a plan must not
// hang on an API that does not answer; saying so is the point.
const planProbeTimeout = 10 * time.Second

// KubernetesProbeTitles names the probes that need the Kubernetes API.
func KubernetesProbeTitles() []string {
	var out []string
	for _, p := range Probes() {
		if p.Kubernetes {
			out = append(out, p.Title)
		}
	}
	return out
}

// PlanWarnings are the warnings a disruptive plan carries when some of the
// gate's probes will not be able to run, so the approvers read it on the
// approval card before they approve: no kubeconfig (the Kubernetes probes
// are not checked), a Kubernetes API that does not answer (the gate, which
// requires it, will stop the operation), no Flux (the Flux probe is not
// checked). It reads the cluster and changes nothing; nil when every probe
// can run.
func PlanWarnings(ctx context.Context, c *cluster.Clients) []string {
	kprobes := strings.Join(KubernetesProbeTitles(), ", ")
	if c.Kube == nil || c.Dynamic == nil {
		return []string{fmt.Sprintf("health gate: no kubeconfig for this cluster, so its Kubernetes probes (%s) are %s: "+
			"nothing will stop this operation for a NotReady node, a stalled Flux object or a blocking PodDisruptionBudget; "+
			"configure the cluster's kubeconfig to have them checked", kprobes, NotChecked)}
	}
	ctx, cancel := context.WithTimeout(ctx, planProbeTimeout)
	defer cancel()
	if _, err := c.Kube.CoreV1().Nodes().List(ctx, metav1.ListOptions{Limit: 1}); err != nil {
		return []string{fmt.Sprintf("health gate: the Kubernetes API did not answer (%s), so its Kubernetes probes (%s) cannot run; "+
			"the gate requires them when a kubeconfig is configured and will stop this operation until the API answers", cluster.ShortErr(err.Error()), kprobes)}
	}
	objs, installed, err := FluxStatus(ctx, c.Dynamic)
	switch {
	case err != nil:
		return []string{"health gate: Flux could not be read (" + cluster.ShortErr(err.Error()) + "); the gate will fail on it until it can"}
	case !installed:
		return []string{"health gate: the Flux probe is " + NotChecked + ": " + FluxNotInstalled}
	case len(objs) == 0:
		return []string{"health gate: the Flux probe is " + NotChecked + ": " + FluxEmpty}
	}
	return nil
}
