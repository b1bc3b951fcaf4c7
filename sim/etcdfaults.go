package sim

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
)

// etcdJoinTimeout is how long Talos's etcd service tries to join an existing cluster before its
// pre stage fails (constants.EtcdJoinTimeout, 30 minutes; buildInitialCluster in
// internal/app/machined/pkg/system/services/etcd.go, v1.13.9 and v1.14.1). It is measured on
// the sim's clock (Options.Now), so a test moves a fake clock past it instead of waiting.
const etcdJoinTimeout = 30 * time.Minute

// joinFailure is the etcd service's message once the join gave up: the pre stage's error as
// Talos words it — argsForControlPlane's "failed to build initial etcd cluster", wrapping
// buildInitialCluster's "failed to build cluster arguments", wrapping go-retry's ErrorSet
// (each distinct attempt error, then "timeout").
func joinFailure(errs []string) string {
	all := append(append([]string(nil), errs...), "timeout")

	return fmt.Sprintf("%sfailed to build initial etcd cluster: failed to build cluster arguments: %d error(s) occurred:\n\t%s",
		msgPreFailure, len(all), strings.Join(all, "\n\t"))
}

// joinErrors collects the distinct attempt errors of a join loop, as go-retry's ErrorSet does
// (a few kept: the first distinct ones tell what went wrong).
type joinErrors []string

func (j *joinErrors) add(err error) {
	// An attempt cut short by the overall deadline is go-retry's "timeout", added last.
	if errors.Is(err, context.Canceled) {
		return
	}

	msg := err.Error()
	// Talos's attempt error is addMember's; drop the sim's member prefix.
	if _, after, ok := strings.Cut(msg, ": join: "); ok {
		msg = after
	}

	for _, e := range *j {
		if e == msg {
			return
		}
	}

	if len(*j) < 4 {
		*j = append(*j, msg)
	}
}

// joinAttemptContext bounds one join attempt as Talos does: its own 30 s, and the whole join's
// 30 minutes (go-retry runs each attempt under the overall deadline). The overall deadline is
// on the sim's clock, which a test may move, so it is polled.
func (n *node) joinAttemptContext(ctx context.Context, started time.Time) (context.Context, context.CancelFunc) {
	actx, cancel := context.WithTimeout(ctx, etcdJoinAttempt)

	go func() {
		t := time.NewTicker(etcdJoinRetry)
		defer t.Stop()

		for {
			select {
			case <-actx.Done():
				return
			case <-t.C:
				if n.c.now().Sub(started) >= etcdJoinTimeout {
					cancel()

					return
				}
			}
		}
	}()

	return actx, cancel
}

// etcdRestartForever is the etcd service's state while its process keeps exiting: Talos's
// restart runner (internal/app/machined/pkg/system/runner/restart/restart.go, Forever, which the
// etcd service uses: services/etcd.go) reports Waiting with the containerd runner's error
// (runner/containerd/containerd.go: `task "etcd" failed: exit code N`), v1.13.9.
const (
	svcWaiting        = "Waiting"
	msgEtcdRestarting = `Error running Containerd(etcd), going to restart forever: task "etcd" failed: exit code 1 (last log "{\"level\":\"fatal\",\"msg\":\"failed to start etcd\",\"error\":\"member has already been removed or its peers refuse it\"}")`
)

// etcdExitsAtStart is the EtcdRejoinFailure fault at a boot: the member does not start, the
// service waits to restart it forever.
func (n *node) etcdExitsAtStart() {
	n.setEtcdService(svcWaiting, msgEtcdRestarting)
	n.c.log.Warn("etcd exits at start (etcdRejoinFailure fault)", "node", n.info.Name)
}

// checkRoleFaults validates the faults of this file's area before Inject applies them.
func checkRoleFaults(n *node, f Fault) error {
	if (f.EtcdNoSpace || f.EtcdRejoinFailure) && n.info.Role != RoleControlPlane {
		return fmt.Errorf("sim: etcdNoSpace and etcdRejoinFailure need a control-plane node; %s is a worker", n.info.Name)
	}
	if err := checkEtcdQuota(n, f); err != nil {
		return err
	}

	switch f.ApidCertificate {
	case "", apidCertExpired, apidCertNoSAN:
	default:
		return fmt.Errorf("sim: apidCertificate %q is not a fault; use %q or %q", f.ApidCertificate, apidCertExpired, apidCertNoSAN)
	}

	return nil
}

// applyRoleFaults applies the changes of this file's faults between old and f.
func (n *node) applyRoleFaults(ctx context.Context, old, f Fault, running bool) []error {
	var errs []error

	if m := n.member(); m != nil {
		switch {
		case f.EtcdNoSpace && !old.EtcdNoSpace:
			errs = append(errs, m.RaiseAlarm(ctx, pb.AlarmType_NOSPACE))
		case !f.EtcdNoSpace && old.EtcdNoSpace && m.Running():
			errs = append(errs, m.DisarmAlarm(ctx, pb.AlarmType_NOSPACE))
		}

		errs = append(errs, n.applyEtcdQuota(ctx, m, old, f))

		// Cleared while the service restarts forever: its next restart succeeds.
		if !f.EtcdRejoinFailure && old.EtcdRejoinFailure && running {
			if state, _ := n.etcdServiceOverride(); state == svcWaiting {
				n.setEtcdService("", "")
				errs = append(errs, m.Restart(ctx))
			}
		}
	}

	if f.ApidCertificate != old.ApidCertificate && running && !f.addressGone() {
		// apid reloads its certificate: new connections get the new one.
		n.stopFront()
		n.serveFront()
	}

	return errs
}
