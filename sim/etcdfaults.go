package sim

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"
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
