package talos

import (
	"context"
	"errors"
	"fmt"
	"io"
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
	r, err := s.Talos.Read(client.WithNode(ctx, n.Address), BootIDPath)
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

// TalosTag asks one node for Version.Tag.
func TalosTag(ctx context.Context, s *cluster.Session, n cluster.Node) (string, error) {
	resp, err := s.Talos.MachineClient.Version(client.WithNode(ctx, n.Address), &emptypb.Empty{})
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
	// Note is a boot-sequence message, e.g. an A/B fallback after a failed boot.
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

// TrackReboot follows a node through a reboot with its events stream,
// reconnecting while it is down, until the node is back: the boot id changed
// and MachineStatus is running and ready. It returns the new boot id and
// version; the caller compares the version with what it expects. A failed
// sequence of opts.Actor (the node stays up) ends the wait with a
// SequenceError; no return within opts.Timeout gives a TimeoutError.
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
	last := "waiting for the reboot"
	var note string
	down := false
	var res TrackResult
	var resErr error
	done := false
	// One events stream at a time; a broken one is reopened every opts.Retry.
	_ = wait.PollUntilContextCancel(tctx, opts.Retry, true, func(context.Context) (bool, error) {
		res, done, resErr = watchOnce(tctx, s, n, opts, &last, &note, &down, logf)
		return done, nil
	})
	switch {
	case done:
		return res, resErr
	case ctx.Err() != nil:
		return TrackResult{}, ctx.Err()
	}
	return TrackResult{}, &TimeoutError{Node: n.Name, Timeout: opts.Timeout, Last: last}
}

// watchOnce reads one events stream until the node is back (done), a
// sequence failed (done, error) or the stream broke (not done: reconnect).
func watchOnce(ctx context.Context, s *cluster.Session, n cluster.Node, opts TrackOptions, last, note *string, down *bool,
	logf func(string, ...any)) (TrackResult, bool, error) {
	sctx, cancel := context.WithCancel(client.WithNode(ctx, n.Address))
	defer cancel()
	// Tail every event: after a reboot machined's history holds exactly the
	// new boot, so a stream opened late still sees it.
	stream, err := s.Talos.Events(sctx, client.WithTailEvents(-1))
	if err != nil {
		if !*down {
			*down = true
			logf("%s is down (%s)", n.Name, status.Convert(err).Message())
		}
		*last = "unreachable: " + cluster.ShortErr(status.Convert(err).Message())
		return TrackResult{}, false, nil
	}
	for {
		msg, err := stream.Recv()
		if err != nil {
			if errors.Is(err, io.EOF) || ctx.Err() == nil {
				*last = "events stream closed: " + cluster.ShortErr(status.Convert(err).Message())
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
					*note = p.GetError().GetMessage()
					continue
				}
				if opts.Actor != "" && ev.ActorID == opts.Actor {
					return TrackResult{}, true, &SequenceError{Node: n.Name, Sequence: p.GetSequence(), Message: p.GetError().GetMessage()}
				}
			}
		case *machineapi.MachineStatusEvent:
			stage := p.GetStage().String()
			*last = "machine stage " + stage
			if p.GetStage() != machineapi.MachineStatusEvent_RUNNING || !p.GetStatus().GetReady() {
				continue
			}
			id, err := BootID(ctx, s, n)
			if err != nil {
				// Running, but the boot id is not readable yet: read the
				// stream again (its replay brings this event back).
				*last = "running but " + err.Error()
				return TrackResult{}, false, nil
			}
			if id == opts.OldBootID {
				continue // the old boot's "running", replayed
			}
			tag, err := TalosTag(ctx, s, n)
			if err != nil {
				*last = "back but " + err.Error()
				return TrackResult{}, false, nil
			}
			logf("%s is back: boot id changed, running and ready, Talos %s", n.Name, tag)
			return TrackResult{BootID: id, Version: tag, Note: *note}, true, nil
		}
	}
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
