package cluster

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/siderolabs/talos/pkg/machinery/api/common"
	machineapi "github.com/siderolabs/talos/pkg/machinery/api/machine"
	"github.com/siderolabs/talos/pkg/machinery/client"
	"google.golang.org/grpc"
	"google.golang.org/grpc/backoff"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/keepalive"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/emptypb"
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

// DirectClients are the session's Clients with a Machine API that sends each call routed to
// one node (client.WithNode) to that node's own address (NodeClient), and through the
// endpoints when the node cannot be reached that way. After a reboot, reads of the rebooted
// node (the quorum check after it) then do not wait for the endpoint's apid to redial it.
// A client that fails with Unavailable is dropped, so the next call dials afresh instead of
// waiting out its backoff. Close releases the node clients (not the session's).
func (s *Session) DirectClients() *Clients {
	d := &directMachine{s: s, conns: map[string]*client.Client{}, endpointsOnly: map[string]bool{}}
	return &Clients{Machine: d, Health: s.Health, COSI: s.COSI, Kube: s.Kube, Dynamic: s.Dynamic, closers: []func() error{d.close}}
}

type directMachine struct {
	s     *Session
	mu    sync.Mutex
	conns map[string]*client.Client
	// endpointsOnly: addresses the bot cannot reach directly (the endpoints could while
	// the direct dial failed); later calls go through the endpoints at once.
	endpointsOnly map[string]bool
}

func (d *directMachine) close() error {
	d.mu.Lock()
	defer d.mu.Unlock()
	var errs []error
	for addr, c := range d.conns {
		errs = append(errs, c.Close())
		delete(d.conns, addr)
	}
	return errors.Join(errs...)
}

func (d *directMachine) get(ctx context.Context, addr string) MachineAPI {
	d.mu.Lock()
	defer d.mu.Unlock()
	if c, ok := d.conns[addr]; ok {
		return c.MachineClient
	}
	if d.endpointsOnly[addr] {
		return nil
	}
	c, err := d.s.NodeClient(ctx, Node{Name: addr, Address: addr})
	if err != nil {
		return nil
	}
	d.conns[addr] = c
	return c.MachineClient
}

func (d *directMachine) drop(addr string) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if c, ok := d.conns[addr]; ok {
		_ = c.Close()
		delete(d.conns, addr)
	}
}

// routeDirect runs call on node's own client (the "node" metadata removed), falling back to
// the session's endpoints when that fails with Unavailable or is not possible.
func routeDirect[T any](d *directMachine, ctx context.Context, call func(MachineAPI, context.Context) (T, error)) (T, error) {
	md, _ := metadata.FromOutgoingContext(ctx)
	nodes := md.Get("node")
	if len(nodes) != 1 {
		return call(d.s.Machine, ctx)
	}
	if m := d.get(ctx, nodes[0]); m != nil {
		own := md.Copy()
		own.Delete("node")
		r, err := call(m, metadata.NewOutgoingContext(ctx, own))
		if status.Code(err) != codes.Unavailable {
			return r, err
		}
		d.drop(nodes[0])
		r, err = call(d.s.Machine, ctx)
		if err == nil {
			d.mu.Lock()
			d.endpointsOnly[nodes[0]] = true
			d.mu.Unlock()
		}
		return r, err
	}
	return call(d.s.Machine, ctx)
}

func (d *directMachine) Version(ctx context.Context, in *emptypb.Empty, opts ...grpc.CallOption) (*machineapi.VersionResponse, error) {
	return routeDirect(d, ctx, func(m MachineAPI, c context.Context) (*machineapi.VersionResponse, error) {
		return m.Version(c, in, opts...)
	})
}

func (d *directMachine) ServiceList(ctx context.Context, in *emptypb.Empty, opts ...grpc.CallOption) (*machineapi.ServiceListResponse, error) {
	return routeDirect(d, ctx, func(m MachineAPI, c context.Context) (*machineapi.ServiceListResponse, error) {
		return m.ServiceList(c, in, opts...)
	})
}

func (d *directMachine) EtcdStatus(ctx context.Context, in *emptypb.Empty, opts ...grpc.CallOption) (*machineapi.EtcdStatusResponse, error) {
	return routeDirect(d, ctx, func(m MachineAPI, c context.Context) (*machineapi.EtcdStatusResponse, error) {
		return m.EtcdStatus(c, in, opts...)
	})
}

func (d *directMachine) EtcdAlarmList(ctx context.Context, in *emptypb.Empty, opts ...grpc.CallOption) (*machineapi.EtcdAlarmListResponse, error) {
	return routeDirect(d, ctx, func(m MachineAPI, c context.Context) (*machineapi.EtcdAlarmListResponse, error) {
		return m.EtcdAlarmList(c, in, opts...)
	})
}

func (d *directMachine) EtcdMemberList(ctx context.Context, in *machineapi.EtcdMemberListRequest, opts ...grpc.CallOption) (*machineapi.EtcdMemberListResponse, error) {
	return routeDirect(d, ctx, func(m MachineAPI, c context.Context) (*machineapi.EtcdMemberListResponse, error) {
		return m.EtcdMemberList(c, in, opts...)
	})
}

func (d *directMachine) EtcdSnapshot(ctx context.Context, in *machineapi.EtcdSnapshotRequest, opts ...grpc.CallOption) (grpc.ServerStreamingClient[common.Data], error) {
	// A snapshot is a long stream: through the endpoints, as before.
	return d.s.Machine.EtcdSnapshot(ctx, in, opts...)
}
