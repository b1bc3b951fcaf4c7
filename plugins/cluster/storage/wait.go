package storage

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/util/retry"
)

// LimitError is a wait that ran out of its limit: the roll pauses (it does
// not fail) so that the operator can Resume once storage caught up, or
// Abandon.
type LimitError struct {
	// What the roll waited for, and how far it got.
	What string
}

func (e *LimitError) Error() string { return e.What }

// IsLimit reports whether err is a wait that ran out of its limit.
func IsLimit(err error) bool {
	var l *LimitError
	return errors.As(err, &l)
}

// Waiter runs the waits around one node's drain.
type Waiter struct {
	Kube     kubernetes.Interface
	Dyn      dynamic.Interface
	Settings Settings
	// Interval between reads (default 2 s).
	Interval time.Duration
	// Progress, when set, gets the wait's state for the live message
	// ("pvc-data: rebuilding 62 %, 1 of 3 volumes").
	Progress func(line string)
	// Now is the clock: it stamps the switchover
	// (status.targetPrimaryTimestamp) and measures each wait against its
	// limit. Nil: time.Now.
	Now func() time.Time
}

func (w Waiter) now() time.Time {
	if w.Now == nil {
		return time.Now()
	}
	return w.Now()
}

// poll calls done every Interval until it holds (true), ctx ends (its
// error), or limit has passed on w's clock (false): the limit is measured
// on Now, so a test moves it with its clock instead of sleeping it out.
func (w Waiter) poll(ctx context.Context, limit time.Duration, done func(context.Context) bool) (bool, error) {
	deadline := w.now().Add(limit)
	tick := time.NewTicker(w.interval())
	defer tick.Stop()
	for {
		if done(ctx) {
			return true, nil
		}
		if !w.now().Before(deadline) {
			return false, nil
		}
		select {
		case <-ctx.Done():
			return false, ctx.Err()
		case <-tick.C:
		}
	}
}

func (w Waiter) interval() time.Duration {
	if w.Interval <= 0 {
		return 2 * time.Second
	}
	return w.Interval
}

func (w Waiter) progress(line string) {
	if w.Progress != nil {
		w.Progress(line)
	}
}

// Affected names the Longhorn volumes with a replica on node (Kubernetes
// name): read before the node goes down, they are what After waits for.
func (w Waiter) Affected(ctx context.Context, node string) ([]string, error) {
	st, err := Read(ctx, w.Kube, w.Dyn, w.Settings)
	if err != nil {
		return nil, err
	}
	var out []string
	for _, v := range st.Volumes {
		if v.State == volumeAttached && v.HasReplicaOn(node) {
			out = append(out, v.Name)
		}
	}
	return out, nil
}

// Before makes node (a Kubernetes Node name) safe to drain: every
// CloudNativePG primary on it is switched over to a ready instance
// elsewhere and waited for, and every Longhorn volume whose last healthy
// replica is on it waits for a healthy replica on another node (or is
// refused, per Settings.LastReplica). It returns lines for the record.
func (w Waiter) Before(ctx context.Context, node string) ([]string, error) {
	st, err := Read(ctx, w.Kube, w.Dyn, w.Settings)
	if err != nil {
		return nil, err
	}
	// Every refusal before anything changes, by the forecast's own rule
	// (R3 is decided in one place): a refused node is left as it was.
	if err := Build(st, Input{Order: []string{node}}, w.Settings).Refusal(); err != nil {
		return nil, err
	}
	var last []string
	for _, v := range st.Volumes {
		if v.State == volumeAttached && v.OnlyHealthyOn(node) {
			last = append(last, v.Name)
		}
	}
	var lines []string
	for _, p := range st.Postgres {
		if p.PrimaryNode() != node {
			continue
		}
		line, err := w.switchover(ctx, p, node)
		if err != nil {
			return lines, err
		}
		lines = append(lines, line)
	}
	if len(last) > 0 {
		if err := w.waitHealthyElsewhere(ctx, node, last); err != nil {
			return lines, err
		}
		lines = append(lines, fmt.Sprintf("💽 %s: a healthy replica on another node before draining %s", strings.Join(last, ", "), node))
	}
	return lines, nil
}

// switchover promotes a ready instance on another node, as `kubectl cnpg
// promote` does (cloudnative-pg v1.30.0 internal/cmd/plugin/promote/
// promote.go: status.targetPrimary, targetPrimaryTimestamp, phase
// "Switchover in progress" and its reason, through the status
// subresource), then waits until status.currentPrimary is the new one,
// the phase is healthy and every instance is ready.
func (w Waiter) switchover(ctx context.Context, p Postgres, node string) (string, error) {
	cand := p.Candidate(node) // Before refused when there is none
	res := w.Dyn.Resource(clusterGVR).Namespace(p.Namespace)
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		cl, err := res.Get(ctx, p.Name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		st, _ := cl.Object["status"].(map[string]any)
		if st == nil {
			st = map[string]any{}
		}
		st["targetPrimary"] = cand
		st["targetPrimaryTimestamp"] = w.now().UTC().Format(time.RFC3339Nano)
		st["phase"] = phaseSwitchover
		st["phaseReason"] = "Switching over to " + cand
		cl.Object["status"] = st
		_, err = res.UpdateStatus(ctx, cl, metav1.UpdateOptions{})
		return err
	})
	if err != nil {
		return "", fmt.Errorf("switch CloudNativePG %s over to %s: %w", p.Key(), cand, err)
	}
	w.progress(fmt.Sprintf("%s: switching the primary over from %s to %s", p.Key(), p.CurrentPrimary, cand))
	var last Postgres
	ok, err := w.poll(ctx, w.Settings.SwitchoverWait, func(ctx context.Context) bool {
		st, err := Read(ctx, w.Kube, w.Dyn, w.Settings)
		if err != nil {
			return false // a read that fails is tried again until the limit
		}
		for _, q := range st.Postgres {
			if q.Key() == p.Key() {
				last = q
				return q.CurrentPrimary == cand && q.Phase == phaseHealthy && q.PodReady[cand]
			}
		}
		return false
	})
	if err != nil {
		return "", err
	}
	if !ok {
		return "", &LimitError{What: fmt.Sprintf("CloudNativePG %s: switchover to %s not done within %s (current primary %s, phase %q)",
			p.Key(), cand, w.Settings.SwitchoverWait, last.CurrentPrimary, last.Phase)}
	}
	return fmt.Sprintf("🐘 %s: primary switched over from %s (on %s) to %s before the drain", p.Key(), p.CurrentPrimary, node, cand), nil
}

// waitHealthyElsewhere waits until each volume has a healthy replica on a
// node other than node.
func (w Waiter) waitHealthyElsewhere(ctx context.Context, node string, names []string) error {
	var pending []string
	ok, err := w.poll(ctx, w.Settings.RebuildWait, func(ctx context.Context) bool {
		st, err := Read(ctx, w.Kube, w.Dyn, w.Settings)
		if err != nil {
			return false // tried again until the limit
		}
		pending = pending[:0]
		var prog []string
		for _, v := range st.Volumes {
			if !contains(names, v.Name) {
				continue
			}
			if v.OnlyHealthyOn(node) || len(v.HealthyOn()) == 0 {
				pending = append(pending, v.Label())
				if p, ok := v.Progress(); ok {
					prog = append(prog, fmt.Sprintf("%s: rebuilding %d %%", v.Label(), p))
				}
			}
		}
		if len(pending) > 0 {
			w.progress(fmt.Sprintf("before %s: waiting for a healthy replica elsewhere of %s %s", node, strings.Join(pending, ", "), strings.Join(prog, "; ")))
		}
		return len(pending) == 0
	})
	if err != nil {
		return err
	}
	if !ok {
		return &LimitError{What: fmt.Sprintf("before %s: %s still had its last healthy replica on %s after %s",
			node, strings.Join(pending, ", "), node, w.Settings.RebuildWait)}
	}
	return nil
}

// After waits until every volume of names (Affected, read before the
// node went down) is healthy again, reporting the rebuild's progress, up
// to Settings.RebuildWait; then a *LimitError.
func (w Waiter) After(ctx context.Context, node string, names []string) ([]string, error) {
	if len(names) == 0 {
		return nil, nil
	}
	var line string
	ok, err := w.poll(ctx, w.Settings.RebuildWait, func(ctx context.Context) bool {
		st, err := Read(ctx, w.Kube, w.Dyn, w.Settings)
		if err != nil {
			return false // tried again until the limit
		}
		var parts []string
		done := 0
		for _, v := range st.Volumes {
			if !contains(names, v.Name) {
				continue
			}
			if v.Robustness == robustHealthy {
				done++
				continue
			}
			if p, ok := v.Progress(); ok {
				parts = append(parts, fmt.Sprintf("%s: rebuilding %d %%", v.Label(), p))
			} else {
				parts = append(parts, fmt.Sprintf("%s: %s", v.Label(), orUnknown(v.Robustness)))
			}
		}
		if len(parts) == 0 {
			return true
		}
		line = fmt.Sprintf("%s, %d of %d volumes healthy", strings.Join(parts, "; "), done, len(names))
		w.progress(line)
		return false
	})
	if err != nil {
		return nil, err
	}
	if !ok {
		return nil, &LimitError{What: fmt.Sprintf("after %s: Longhorn not healthy again within %s (%s)", node, w.Settings.RebuildWait, line)}
	}
	return []string{fmt.Sprintf("💽 after %s: %d Longhorn volume(s) healthy again", node, len(names))}, nil
}

func orUnknown(s string) string {
	if s == "" {
		return "unknown"
	}
	return s
}

func contains(xs []string, x string) bool {
	for _, y := range xs {
		if y == x {
			return true
		}
	}
	return false
}
