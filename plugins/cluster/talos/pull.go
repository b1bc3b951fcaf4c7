package talos

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/siderolabs/talos/pkg/machinery/api/common"
	machineapi "github.com/siderolabs/talos/pkg/machinery/api/machine"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/talosbot/talosbot/plugins/cluster"
	"github.com/talosbot/talosbot/plugins/sdk"
)

// TalosPullTimeout is how long Talos itself retries a registry it cannot reach before its pull
// fails (image.PullTimeout, internal/pkg/containers/image/image.go, v1.13.9). While it retries,
// ImageService.Pull streams nothing.
const TalosPullTimeout = 20 * time.Minute

// PullOptions bound a pull that makes no progress.
type PullOptions struct {
	// Stall is how long a pull may go without a progress message (or its end) before the bot
	// abandons it. Zero: PullStall of no settings.
	Stall time.Duration
	// Log hears, while a pull makes no progress, how long it has waited.
	Log func(msg string)
}

// PullStall is the no-progress limit of an installer pull: the node timeout
// (settings.node_timeout_ms, timeouts.node in the bot's configuration), since the pull is part
// of one node's upgrade, capped below Talos's own 20 minutes so that the bot's clear failure
// comes first. No setting of its own: the core's configuration stays free of plugin settings.
func PullStall(s sdk.Settings) time.Duration {
	return min(NodeTimeout(s), TalosPullTimeout-time.Minute)
}

// reportEvery is how often a stalled pull is reported: four times within the limit, at most
// every 30 seconds.
func reportEvery(stall time.Duration) time.Duration {
	return min(max(stall/4, 100*time.Millisecond), 30*time.Second)
}

// ErrPullStalled marks a pull the bot abandoned because it made no progress.
var ErrPullStalled = errors.New("the pull made no progress")

// pullImage is ImageService.Pull into ci, followed to its end. Every streamed message is
// progress; a pull silent for o.Stall is cancelled and fails with ErrPullStalled, and while it is
// silent o.Log hears about it, so that a registry Talos cannot reach is neither a silent
// 20-minute wait nor a bare timeout.
func pullImage(ctx context.Context, s *cluster.Session, ci *common.ContainerdInstance, image string, o PullOptions) error {
	if o.Stall <= 0 {
		o.Stall = PullStall(sdk.Settings{})
	}

	ctx, cancel := context.WithCancel(ctx)
	defer cancel()

	stream, err := s.Talos.ImageClient.Pull(ctx, &machineapi.ImageServicePullRequest{Containerd: ci, ImageRef: image})
	if err != nil {
		return err
	}

	recv := make(chan error)

	go func() {
		for {
			_, err := stream.Recv()
			select {
			case recv <- err:
			case <-ctx.Done():
				return
			}

			if err != nil {
				return
			}
		}
	}()

	last := time.Now()
	stall := time.NewTimer(o.Stall)
	report := time.NewTicker(reportEvery(o.Stall))

	defer stall.Stop()
	defer report.Stop()

	for {
		select {
		case err := <-recv:
			if errors.Is(err, io.EOF) {
				return nil
			}

			if err != nil {
				return err
			}

			last = time.Now()

			stall.Reset(o.Stall)
		case <-report.C:
			if o.Log != nil {
				o.Log(fmt.Sprintf("still pulling %s: no progress for %s (Talos retries a registry it cannot reach for up to %s); the bot gives up after %s without progress",
					image, time.Since(last).Round(time.Second), TalosPullTimeout, o.Stall))
			}
		case <-stall.C:
			return fmt.Errorf("%w for %s (Talos retries a registry it cannot reach for up to %s, and sends nothing meanwhile): check that the node reaches the registry of %s (network, DNS, registry mirrors), or raise timeouts.node",
				ErrPullStalled, o.Stall, TalosPullTimeout, image)
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// installerGone reports whether LifecycleService.Upgrade failed because the installer is no
// longer in containerd (internal/app/lifecycle/container.go: "installer image … not found in
// containerd store"), as after Talos's image GC removed an installer pulled over an hour before.
func installerGone(err error) bool {
	st, ok := status.FromError(err)

	return ok && (st.Code() == codes.Internal || st.Code() == codes.NotFound) && strings.Contains(st.Message(), "not found in containerd store")
}
