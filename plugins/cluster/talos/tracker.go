package talos

import (
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"
	"time"

	"github.com/cosi-project/runtime/pkg/safe"
	machineapi "github.com/siderolabs/talos/pkg/machinery/api/machine"
	"github.com/siderolabs/talos/pkg/machinery/client"
	"github.com/siderolabs/talos/pkg/machinery/resources/runtime"
	"github.com/talosbot/talosbot/plugins/cluster"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/emptypb"
	"k8s.io/apimachinery/pkg/util/wait"
)

// BootIDPath is where Talos exposes the kernel's boot id.
const BootIDPath = "/proc/sys/kernel/random/boot_id"

// BootID reads a node's boot id (new on every boot).
func BootID(ctx context.Context, s *cluster.Session, n cluster.Node) (string, error) {
	return bootIDVia(client.WithNode(ctx, n.Address), s.Talos, n)
}

// TalosTag asks one node for Version.Tag.
func TalosTag(ctx context.Context, s *cluster.Session, n cluster.Node) (string, error) {
	return TalosTagFrom(ctx, s.Talos.MachineClient, n)
}

// TalosTagFrom asks one node for Version.Tag through m (Session.DirectClients' Machine reads
// it at the node's own address).
func TalosTagFrom(ctx context.Context, m cluster.MachineAPI, n cluster.Node) (string, error) {
	resp, err := m.Version(client.WithNode(ctx, n.Address), &emptypb.Empty{})
	if err != nil {
		return "", fmt.Errorf("read the Talos version of %s: %w", n.Name, err)
	}
	if len(resp.GetMessages()) == 0 {
		return "", fmt.Errorf("read the Talos version of %s: empty reply", n.Name)
	}
	return resp.GetMessages()[0].GetVersion().GetTag(), nil
}

// TrackOptions tune TrackReboot.
type TrackOptions struct {
	// Timeout bounds the whole wait (settings.node_timeout_ms).
	Timeout time.Duration
	// OldBootID is the boot id before the reboot was requested.
	OldBootID string
	// Actor is the actor id of the request (legacy Upgrade, Reboot): a
	// failed sequence of that actor ends the wait at once.
	Actor string
	// Retry is the pause between reconnects (default 100ms).
	Retry time.Duration
	// Log, when set, hears progress lines ("rebooting", "back, booting").
	Log func(msg string)
}

// TrackResult is the node after the reboot.
type TrackResult struct {
	BootID  string
	Version string
	// Note is a boot-sequence message, e.g. the failed boot before an A/B fallback.
	Note string
}

// TimeoutError is a node that did not come back in time.
type TimeoutError struct {
	Node    string
	Timeout time.Duration
	Last    string
}

func (e *TimeoutError) Error() string {
	return fmt.Sprintf("%s did not come back within the node timeout %s (last seen: %s)", e.Node, e.Timeout, e.Last)
}

// SequenceError is a sequence (upgrade, reboot) that failed on the node,
// which stays up on its old version.
type SequenceError struct {
	Node, Sequence, Message string
}

func (e *SequenceError) Error() string {
	return fmt.Sprintf("the %s sequence failed on %s: %s", e.Sequence, e.Node, e.Message)
}

// NotRebootedError is a node that accepted the reboot but never rebooted: at the timeout it
// answers with the boot id it had before.
type NotRebootedError struct {
	Node    string
	Timeout time.Duration
}

func (e *NotRebootedError) Error() string {
	return fmt.Sprintf("%s never rebooted: its boot id is unchanged after the node timeout %s", e.Node, e.Timeout)
}

// NotReadyError is a node that rebooted and runs, but whose MachineStatus is not ready at the
// timeout: Talos's readiness conditions (time, network, services, static pods, the Kubernetes
// Node) are unmet. Different from a node that did not come back.
type NotReadyError struct {
	Node, Version string
	Timeout       time.Duration
	Unmet         []*machineapi.MachineStatusEvent_MachineStatus_UnmetCondition
}

func (e *NotReadyError) Error() string {
	var what, why []string
	for _, u := range e.Unmet {
		what = append(what, conditionWords(u.GetName(), u.GetReason())...)
		why = append(why, u.GetName()+": "+u.GetReason())
	}
	return fmt.Sprintf("%s booted %s but is not ready: %s (Talos's unmet conditions after %s: %s)", e.Node, e.Version,
		strings.Join(slices.Compact(what), ", "), e.Timeout, strings.Join(why, "; "))
}

// conditionWords says an unmet MachineStatus condition in a few words: the services by name
// (Talos's reason is "kubelet not healthy, etcd not running"), the others by what they wait on.
func conditionWords(name, reason string) []string {
	switch name {
	case "services":
		var out []string
		for p := range strings.SplitSeq(reason, ", ") {
			svc, _, _ := strings.Cut(p, " ")
			out = append(out, svc)
		}
		return out
	case "staticPods":
		return []string{"static pods"}
	case "nodeReady":
		return []string{"Kubernetes node not Ready"}
	case "time":
		return []string{"time not synced"}
	case "network":
		return []string{"network (" + reason + ")"}
	}
	return []string{name}
}

// TrackReboot follows a node through a reboot with its events stream,
// reconnecting while it is down, until the node is back: the boot id changed
// and MachineStatus is running and ready. It returns the new boot id and
// version; the caller compares the version with what it expects. A failed
// sequence of opts.Actor (the node stays up) ends the wait with a
// SequenceError. At opts.Timeout: a node that booted but is not ready gives a
// NotReadyError, one that still has its old boot id a NotRebootedError, any
// other a TimeoutError.
//
// Every other attempt goes to the node's own address (Session.NodeClient), as
// a client with the node as its endpoint does, so that a node that is back is
// seen at once rather than when the endpoint's apid redials it; the attempts
// in between go through the endpoints, for a bot that cannot reach nodes
// directly.
func TrackReboot(ctx context.Context, s *cluster.Session, n cluster.Node, opts TrackOptions) (TrackResult, error) {
	if opts.Retry <= 0 {
		opts.Retry = 100 * time.Millisecond
	}
	logf := func(format string, a ...any) {
		if opts.Log != nil {
			opts.Log(fmt.Sprintf(format, a...))
		}
	}
	tctx, cancel := context.WithTimeout(ctx, opts.Timeout)
	defer cancel()
	st := &trackState{last: "waiting for the reboot"}
	var res TrackResult
	var resErr error
	done := false
	attempt := 0
	// One events stream at a time; a broken one is reopened every opts.Retry.
	_ = wait.PollUntilContextCancel(tctx, opts.Retry, true, func(context.Context) (bool, error) {
		attempt++
		res, done, resErr = watchOnce(tctx, s, n, opts, st, attempt%2 == 1, logf)
		return done, nil
	})
	switch {
	case done:
		return res, resErr
	case ctx.Err() != nil:
		return TrackResult{}, ctx.Err()
	case st.unmet != nil:
		return TrackResult{}, &NotReadyError{Node: n.Name, Version: st.bootedVersion, Timeout: opts.Timeout, Unmet: st.unmet}
	}
	// Still the old boot? Asked once more, under the caller's context.
	rctx, rcancel := context.WithTimeout(ctx, 5*time.Second)
	defer rcancel()
	if id, err := BootID(rctx, s, n); err == nil && id == opts.OldBootID {
		return TrackResult{}, &NotRebootedError{Node: n.Name, Timeout: opts.Timeout}
	}
	return TrackResult{}, &TimeoutError{Node: n.Name, Timeout: opts.Timeout, Last: st.last}
}

// trackState is what TrackReboot learnt so far.
type trackState struct {
	last, note string
	down       bool
	// unmet: the new boot is running but not ready (bootedVersion), with these conditions.
	unmet         []*machineapi.MachineStatusEvent_MachineStatus_UnmetCondition
	bootedVersion string
}

// watchOnce reads one events stream until the node is back (done), a
// sequence failed (done, error) or the stream broke (not done: reconnect).
// direct: through a client of the node's own address.
func watchOnce(ctx context.Context, s *cluster.Session, n cluster.Node, opts TrackOptions, st *trackState, direct bool,
	logf func(string, ...any)) (TrackResult, bool, error) {
	cli, nodeCtx := s.Talos, func(c context.Context) context.Context { return client.WithNode(c, n.Address) }
	if direct {
		dc, err := s.NodeClient(ctx, n)
		if err != nil {
			return TrackResult{}, false, nil // the next attempt goes through the endpoints
		}
		defer dc.Close() //nolint:errcheck
		cli, nodeCtx = dc, func(c context.Context) context.Context { return c }
	}
	sctx, cancel := context.WithCancel(nodeCtx(ctx))
	defer cancel()
	// Tail every event: after a reboot machined's history holds exactly the
	// new boot, so a stream opened late still sees it.
	stream, err := cli.Events(sctx, client.WithTailEvents(-1))
	if err != nil {
		if !st.down {
			st.down = true
			logf("%s is down (%s)", n.Name, status.Convert(err).Message())
		}
		st.last = "unreachable: " + cluster.ShortErr(status.Convert(err).Message())
		return TrackResult{}, false, nil
	}
	for {
		msg, err := stream.Recv()
		if err != nil {
			if errors.Is(err, io.EOF) || ctx.Err() == nil {
				st.last = "events stream closed: " + cluster.ShortErr(status.Convert(err).Message())
			}
			return TrackResult{}, false, nil
		}
		ev, err := client.UnmarshalEvent(msg)
		if err != nil {
			continue // the hello event and kinds we do not follow
		}
		switch p := ev.Payload.(type) {
		case *machineapi.SequenceEvent:
			if p.GetError() != nil && p.GetError().GetMessage() != "" {
				if p.GetSequence() == "boot" {
					st.note = p.GetError().GetMessage()
					continue
				}
				if opts.Actor != "" && ev.ActorID == opts.Actor {
					return TrackResult{}, true, &SequenceError{Node: n.Name, Sequence: p.GetSequence(), Message: p.GetError().GetMessage()}
				}
			}
		case *machineapi.MachineStatusEvent:
			stage := p.GetStage().String()
			st.last = "machine stage " + stage
			if p.GetStage() != machineapi.MachineStatusEvent_RUNNING {
				continue
			}
			id, err := bootIDVia(sctx, cli, n)
			if err != nil {
				// Running, but the boot id is not readable yet: read the
				// stream again (its replay brings this event back).
				st.last = "running but " + err.Error()
				return TrackResult{}, false, nil
			}
			if id == opts.OldBootID {
				continue // the old boot's "running", replayed
			}
			tag, err := talosTagVia(sctx, cli, n)
			if err != nil {
				st.last = "back but " + err.Error()
				return TrackResult{}, false, nil
			}
			if !p.GetStatus().GetReady() {
				// Booted, not ready: wait for the next MachineStatus event,
				// and remember why in case it never comes.
				st.unmet, st.bootedVersion = p.GetStatus().GetUnmetConditions(), tag
				st.last = fmt.Sprintf("booted %s, not ready", tag)
				logf("%s booted Talos %s; waiting for it to be ready (%s)", n.Name, tag, (&NotReadyError{Node: n.Name, Version: tag, Unmet: st.unmet}).Error())
				continue
			}
			logf("%s is back: boot id changed, running and ready, Talos %s", n.Name, tag)
			return TrackResult{BootID: id, Version: tag, Note: st.note}, true, nil
		}
	}
}

// bootIDVia is BootID through cli, with the node already chosen by ctx or the client.
func bootIDVia(ctx context.Context, cli *client.Client, n cluster.Node) (string, error) {
	r, err := cli.Read(ctx, BootIDPath)
	if err != nil {
		return "", fmt.Errorf("read the boot id of %s: %w", n.Name, err)
	}
	defer r.Close() //nolint:errcheck
	b, err := io.ReadAll(io.LimitReader(r, 256))
	if err != nil {
		return "", fmt.Errorf("read the boot id of %s: %w", n.Name, err)
	}
	id := strings.TrimSpace(string(b))
	if len(id) < 16 {
		// A read cut short (the node going down) must not look like a new boot.
		return "", fmt.Errorf("read the boot id of %s: short read %q", n.Name, id)
	}
	return id, nil
}

// talosTagVia is TalosTag through cli, with the node already chosen by ctx or the client.
func talosTagVia(ctx context.Context, cli *client.Client, n cluster.Node) (string, error) {
	resp, err := cli.MachineClient.Version(ctx, &emptypb.Empty{})
	if err != nil {
		return "", fmt.Errorf("read the Talos version of %s: %w", n.Name, err)
	}
	if len(resp.GetMessages()) == 0 {
		return "", fmt.Errorf("read the Talos version of %s: empty reply", n.Name)
	}
	return resp.GetMessages()[0].GetVersion().GetTag(), nil
}

// Settled reports whether node n's machine is running and ready now, read
// from its runtime.MachineStatus resource (`talosctl get machinestatus`),
// the state machined's MachineStatusController keeps. A node that accepted
// an upgrade and is upgrading, rebooting or still booting is not settled: a
// resumed run must wait for it rather than upgrade it again. This replaces
// reading the event history for a fixed window: a quiet stream says nothing
// about whether a node is done.
func Settled(ctx context.Context, s *cluster.Session, n cluster.Node) (bool, string, error) {
	ms, err := safe.StateGetByID[*runtime.MachineStatus](client.WithNode(ctx, n.Address), s.COSI, runtime.MachineStatusID)
	if err != nil {
		return false, "", fmt.Errorf("read the machine status of %s: %w", n.Name, err)
	}
	spec := ms.TypedSpec()
	state := fmt.Sprintf("stage %s, ready %v", spec.Stage, spec.Status.Ready)
	return spec.Stage == runtime.MachineStageRunning && spec.Status.Ready, state, nil
}
