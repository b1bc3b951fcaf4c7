package sim

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"slices"
	"strings"
	"sync"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/backoff"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"

	cosiapi "github.com/cosi-project/runtime/api/v1alpha1"
	clusterapi "github.com/siderolabs/talos/pkg/machinery/api/cluster"
	"github.com/siderolabs/talos/pkg/machinery/api/common"
	machineapi "github.com/siderolabs/talos/pkg/machinery/api/machine"
	storageapi "github.com/siderolabs/talos/pkg/machinery/api/storage"
)

// This file is the sim's apid: every node's port 50000 accepts any call and routes it the way
// Talos's apid director does — no routing metadata or "proxyfrom" goes to the local machined;
// "node" is forwarded one-to-one to that node's apid; "nodes" fans out one-to-many and the
// replies are rewritten on the wire (Metadata.Hostname appended to each message, per-node errors
// turned into messages carrying Metadata.Error).

// frame is an undecoded gRPC message.
type frame struct{ payload []byte }

// rawCodec passes frames through untouched and falls back to protobuf for typed messages.
type rawCodec struct{}

func (rawCodec) Marshal(v any) ([]byte, error) {
	if f, ok := v.(*frame); ok {
		return f.payload, nil
	}

	m, ok := v.(proto.Message)
	if !ok {
		return nil, fmt.Errorf("rawCodec: cannot marshal %T", v)
	}

	return proto.Marshal(m)
}

func (rawCodec) Unmarshal(data []byte, v any) error {
	if f, ok := v.(*frame); ok {
		f.payload = slices.Clone(data)

		return nil
	}

	m, ok := v.(proto.Message)
	if !ok {
		return fmt.Errorf("rawCodec: cannot unmarshal into %T", v)
	}

	return proto.Unmarshal(data, m)
}

func (rawCodec) Name() string { return "proto" }

// methodKind records which methods stream, so one-to-many replies are aggregated correctly.
type methodKind struct{ serverStreams, clientStreams bool }

func methodKinds() map[string]methodKind {
	kinds := map[string]methodKind{}

	for _, sd := range []grpc.ServiceDesc{
		machineapi.MachineService_ServiceDesc,
		machineapi.ImageService_ServiceDesc,
		machineapi.LifecycleService_ServiceDesc,
		clusterapi.ClusterService_ServiceDesc,
		cosiapi.State_ServiceDesc,
		storageapi.StorageService_ServiceDesc,
	} {
		for _, m := range sd.Methods {
			kinds["/"+sd.ServiceName+"/"+m.MethodName] = methodKind{}
		}

		for _, s := range sd.Streams {
			kinds["/"+sd.ServiceName+"/"+s.StreamName] = methodKind{serverStreams: s.ServerStreams, clientStreams: s.ClientStreams}
		}
	}

	return kinds
}

// one2ManyAllowed mirrors apid's explicit list of services that support "nodes" fan-out.
func one2ManyAllowed(method string) bool {
	for _, prefix := range []string{
		"/machine.MachineService/", "/cluster.ClusterService/", "/inspect.InspectService/",
		"/storage.StorageService/", "/time.TimeService/",
	} {
		if strings.HasPrefix(method, prefix) {
			return true
		}
	}

	return false
}

// proxyHandler is the node's apid: grpc.UnknownServiceHandler for the front server.
func (n *node) proxyHandler(_ any, ss grpc.ServerStream) error {
	method, ok := grpc.MethodFromServerStream(ss)
	if !ok {
		return status.Error(codes.Internal, "no method in stream")
	}

	n.trackUnary(method, 1)
	defer n.trackUnary(method, -1)

	md, _ := metadata.FromIncomingContext(ss.Context())
	// apid's authz injector: the caller's roles travel on in the metadata (access.go).
	md = withRoles(md, peerRoles(ss.Context(), md))

	if _, routed := md["proxyfrom"]; routed || md == nil {
		return n.forwardOne(ss, method, n.localConn, md)
	}

	nodes, okNodes := md["nodes"]
	node, okNode := md["node"]

	if okNode && len(node) != 1 {
		return status.Error(codes.InvalidArgument, "node metadata must be single-valued")
	}

	switch {
	case okNodes:
		if !one2ManyAllowed(method) {
			return status.Errorf(codes.InvalidArgument, "one-2-many proxying is not supported for method %s", method)
		}

		return n.forwardMany(ss, method, nodes, md)
	case okNode:
		conn, err := n.remoteConn(node[0])
		if err != nil {
			return err
		}

		return n.forwardOne(ss, method, conn, md)
	default:
		return n.forwardOne(ss, method, n.localConn, md)
	}
}

// trackUnary counts in-flight unary calls so a reboot lets their replies reach the wire first.
func (n *node) trackUnary(method string, delta int) {
	if n.c.kinds[method].serverStreams {
		return
	}

	n.inflight.add(delta)
}

// outgoing builds the metadata sent to the next hop: routing keys are dropped and
// "proxyfrom" marks the request as already routed (as apid does).
func outgoing(ctx context.Context, md metadata.MD) context.Context {
	out := metadata.MD{}

	for k, v := range md {
		switch {
		case strings.HasPrefix(k, ":"), strings.HasPrefix(k, "grpc-"),
			k == "node", k == "nodes", k == "proxyfrom", k == "content-type", k == "user-agent", k == "te":
			continue
		}

		out[k] = slices.Clone(v)
	}

	if a := md[":authority"]; len(a) > 0 {
		out.Set("proxyfrom", a...)
	} else {
		out.Set("proxyfrom", "unknown")
	}

	return metadata.NewOutgoingContext(ctx, out)
}

var bidi = &grpc.StreamDesc{ServerStreams: true, ClientStreams: true}

// forwardOne is a transparent one-to-one proxy.
func (n *node) forwardOne(ss grpc.ServerStream, method string, conn *grpc.ClientConn, md metadata.MD) error {
	ctx, cancel := context.WithCancel(ss.Context())
	defer cancel()

	cs, err := conn.NewStream(outgoing(ctx, md), bidi, method, grpc.ForceCodec(rawCodec{}))
	if err != nil {
		return err
	}

	go func() {
		for {
			f := &frame{}
			if err := ss.RecvMsg(f); err != nil {
				if errors.Is(err, io.EOF) {
					_ = cs.CloseSend()
				} else {
					cancel()
				}

				return
			}

			if err := cs.SendMsg(f); err != nil {
				return
			}
		}
	}()

	if hdr, err := cs.Header(); err == nil && len(hdr) > 0 {
		_ = ss.SendHeader(hdr)
	}

	for {
		f := &frame{}
		if err := cs.RecvMsg(f); err != nil {
			ss.SetTrailer(cs.Trailer())

			if errors.Is(err, io.EOF) {
				return nil
			}

			return err
		}

		if err := ss.SendMsg(f); err != nil {
			return err
		}
	}
}

// forwardMany fans a call out to every target and merges the replies like apid's one-2-many mode.
func (n *node) forwardMany(ss grpc.ServerStream, method string, targets []string, md metadata.MD) error {
	kind := n.c.kinds[method]
	if kind.clientStreams && kind.serverStreams {
		return status.Errorf(codes.InvalidArgument, "one-2-many proxying is not supported for bidirectional-streaming method %s", method)
	}

	if kind.clientStreams {
		return n.forwardManyUpload(ss, method, targets, md)
	}

	req := &frame{}
	if err := ss.RecvMsg(req); err != nil {
		return err
	}

	if kind.serverStreams {
		var (
			mu sync.Mutex
			wg sync.WaitGroup
		)

		send := func(b []byte) error {
			mu.Lock()
			defer mu.Unlock()

			return ss.SendMsg(&frame{payload: b})
		}

		for _, target := range targets {
			wg.Go(func() {
				err := n.callTarget(ss.Context(), method, target, req, md, func(b []byte) error {
					return send(append(b, hostnameMeta(target)...))
				})
				if err != nil && ss.Context().Err() == nil {
					_ = send(errorMessage(true, target, err))
				}
			})
		}

		wg.Wait()

		return nil
	}

	replies := make([][]byte, len(targets))

	var wg sync.WaitGroup

	for i, target := range targets {
		wg.Go(func() {
			var got []byte

			err := n.callTarget(ss.Context(), method, target, req, md, func(b []byte) error {
				out, err := appendUnaryMeta(b, target)
				if err != nil {
					return err
				}

				got = append(got, out...)

				return nil
			})
			if err != nil {
				got = errorMessage(false, target, err)
			}

			replies[i] = got
		})
	}

	wg.Wait()

	return ss.SendMsg(&frame{payload: slices.Concat(replies...)})
}

// forwardManyUpload is grpc-proxy's one-2-many mode for a client-streaming call with a unary
// reply (EtcdRecover): every message from the client goes to every target still accepting, and
// the targets' replies (or their errors) are merged into one reply.
func (n *node) forwardManyUpload(ss grpc.ServerStream, method string, targets []string, md metadata.MD) error {
	ctx, cancel := context.WithCancel(ss.Context())
	defer cancel()

	type backend struct {
		cs      grpc.ClientStream
		err     error // could not open the stream
		stopped bool  // the target ended the stream; its status comes with the reply
	}

	bs := make([]backend, len(targets))

	for i, target := range targets {
		conn, err := n.remoteConn(target)
		if err == nil {
			bs[i].cs, err = conn.NewStream(outgoing(ctx, md), bidi, method, grpc.ForceCodec(rawCodec{}))
		}

		bs[i].err = err
	}

	for {
		f := &frame{}
		if err := ss.RecvMsg(f); err != nil {
			if errors.Is(err, io.EOF) {
				break
			}

			return err
		}

		var wg sync.WaitGroup

		for i := range bs {
			if bs[i].err != nil || bs[i].stopped {
				continue
			}

			wg.Go(func() {
				if err := bs[i].cs.SendMsg(f); err != nil {
					bs[i].stopped = true
				}
			})
		}

		wg.Wait()
	}

	replies := make([][]byte, len(targets))

	var wg sync.WaitGroup

	for i, target := range targets {
		wg.Go(func() {
			if bs[i].err != nil {
				replies[i] = errorMessage(false, target, bs[i].err)

				return
			}

			_ = bs[i].cs.CloseSend()

			var got []byte

			for {
				f := &frame{}
				if err := bs[i].cs.RecvMsg(f); err != nil {
					if !errors.Is(err, io.EOF) {
						got = errorMessage(false, target, err)
					}

					break
				}

				out, err := appendUnaryMeta(f.payload, target)
				if err != nil {
					got = errorMessage(false, target, err)

					break
				}

				got = append(got, out...)
			}

			replies[i] = got
		})
	}

	wg.Wait()

	return ss.SendMsg(&frame{payload: slices.Concat(replies...)})
}

// callTarget performs one call on a target's apid and hands every reply to onMsg.
func (n *node) callTarget(ctx context.Context, method, target string, req *frame, md metadata.MD, onMsg func([]byte) error) error {
	conn, err := n.remoteConn(target)
	if err != nil {
		return err
	}

	ctx, cancel := context.WithCancel(ctx)
	defer cancel()

	cs, err := conn.NewStream(outgoing(ctx, md), bidi, method, grpc.ForceCodec(rawCodec{}))
	if err != nil {
		return err
	}

	if err = cs.SendMsg(req); err != nil && !errors.Is(err, io.EOF) {
		return err
	}

	if err = cs.CloseSend(); err != nil {
		return err
	}

	for {
		f := &frame{}
		if err := cs.RecvMsg(f); err != nil {
			if errors.Is(err, io.EOF) {
				return nil
			}

			return err
		}

		if err := onMsg(f.payload); err != nil {
			return err
		}
	}
}

func hostnameMeta(target string) []byte {
	b, _ := proto.Marshal(&common.Empty{Metadata: &common.Metadata{Hostname: target}}) //nolint:errcheck // cannot fail for this message

	return b
}

// appendUnaryMeta adds Metadata{Hostname} to every element of the reply's repeated field 1.
// Appending a field to an embedded message merges it, which is what apid relies on.
func appendUnaryMeta(resp []byte, target string) ([]byte, error) {
	meta := hostnameMeta(target)

	var out []byte

	for len(resp) > 0 {
		num, typ, n := protowire.ConsumeTag(resp)
		if n < 0 {
			return nil, protowire.ParseError(n)
		}

		if num != 1 || typ != protowire.BytesType {
			return nil, fmt.Errorf("unexpected reply field %d (type %d): replies must be `repeated X messages = 1`", num, typ)
		}

		v, m := protowire.ConsumeBytes(resp[n:])
		if m < 0 {
			return nil, protowire.ParseError(m)
		}

		out = protowire.AppendTag(out, 1, protowire.BytesType)
		out = protowire.AppendBytes(out, slices.Concat(v, meta))
		resp = resp[n+m:]
	}

	return out, nil
}

// errorMessage is apid's BuildError: a reply that only carries Metadata{Hostname, Error, Status}.
func errorMessage(streaming bool, target string, err error) []byte {
	e := &common.Empty{Metadata: &common.Metadata{
		Hostname: target,
		Error:    err.Error(),
		Status:   status.Convert(err).Proto(),
	}}

	var m proto.Message = e
	if !streaming {
		m = &common.EmptyResponse{Messages: []*common.Empty{e}}
	}

	b, _ := proto.Marshal(m) //nolint:errcheck // cannot fail for this message

	return b
}

// remoteConn returns (cached) this node's apid client connection to target's apid.
// Targets are IPs (as Talos expects) or sim node names.
func (n *node) remoteConn(target string) (*grpc.ClientConn, error) {
	if target == "" || strings.Contains(target, ":") && net.ParseIP(target) == nil {
		return nil, status.Errorf(codes.Internal, "invalid target %q", target)
	}

	addr := target
	if t := n.c.nodeByName(target); t != nil {
		addr = t.info.IP
	}

	n.connMu.Lock()
	defer n.connMu.Unlock()

	if conn, ok := n.remotes[addr]; ok {
		return conn, nil
	}

	// apid's backend connection (internal/app/apid/pkg/backend/apid.go): gRPC's default backoff
	// with MaxDelay 15s and a 20s MinConnectTimeout. A call to a node that does not answer waits
	// for the dial (until the caller's deadline); after a failed dial the next attempt comes only
	// after the backoff, also once the node is back.
	bo := backoff.DefaultConfig
	bo.MaxDelay = 15 * time.Second

	conn, err := grpc.NewClient(net.JoinHostPort(addr, fmt.Sprint(apidPort)),
		grpc.WithTransportCredentials(credentials.NewTLS(n.c.pki.clientTLS())),
		grpc.WithConnectParams(grpc.ConnectParams{Backoff: bo, MinConnectTimeout: 20 * time.Second}),
		grpc.WithDefaultCallOptions(grpc.ForceCodec(rawCodec{})),
	)
	if err != nil {
		return nil, status.Error(codes.Internal, err.Error())
	}

	n.remotes[addr] = conn

	return conn, nil
}
