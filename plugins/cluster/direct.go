package cluster

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/siderolabs/talos/pkg/machinery/client"
	"google.golang.org/grpc"
	"google.golang.org/grpc/backoff"
	"google.golang.org/grpc/keepalive"
)

// NodeClient is a Talos client whose only endpoint is node n itself, for following n through
// a reboot. Calls on it carry no node metadata: n's own apid serves them. Through the
// session's endpoints instead, a call to a rebooted node waits until the endpoint's apid
// redials it, which apid does on gRPC's reconnect backoff (1 s base, ×1.6, Talos
// internal/app/apid/pkg/backend/apid.go); the first call after the reboot then waits out
// that backoff although the node is up. A fresh client per attempt dials at once; the caller
// closes it. It fails when the session has no talosconfig (sessions built by hand in tests):
// the caller then follows the node through the endpoints.
func (s *Session) NodeClient(ctx context.Context, n Node) (*client.Client, error) {
	if len(s.talosconfig) == 0 {
		return nil, errors.New("no talosconfig in this session")
	}
	cfg, err := ParseTalosconfig(s.talosconfig)
	if err != nil {
		return nil, err
	}
	c, err := client.New(ctx, client.WithConfig(cfg), client.WithEndpoints(n.Address), client.WithGRPCDialOptions(
		// One attempt per client: no backoff to wait out, and a dial that gets no answer
		// (a machine that is off) gives up within seconds instead of 20.
		grpc.WithConnectParams(grpc.ConnectParams{Backoff: backoff.Config{BaseDelay: 50 * time.Millisecond, Multiplier: 1.6, MaxDelay: time.Second},
			MinConnectTimeout: 5 * time.Second}),
		grpc.WithKeepaliveParams(keepalive.ClientParameters{Time: 10 * time.Second, Timeout: 5 * time.Second}),
	))
	if err != nil {
		return nil, fmt.Errorf("create a Talos client for %s: %w", n.Name, err)
	}
	return c, nil
}
