package cluster

import (
	"context"
	"fmt"
	"maps"
	"strings"
	"sync"

	"github.com/siderolabs/talos/pkg/machinery/api/common"
	"github.com/siderolabs/talos/pkg/machinery/client"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// Talos answers a call to several nodes with one message per node, once
// every node has answered. ByNode turns such a reply into answers and
// failures by node name; PerNode asks each node on its own instead, for the
// calls a node can hold until the deadline (etcd status: the gate's probe,
// the quorum read, the snapshot source pick).

// NodeFailure is why one node did not answer.
type NodeFailure struct {
	Node        string
	Msg         string
	Unreachable bool
}

// FailureOf classifies a gRPC error from a single-target call.
func FailureOf(node string, err error) NodeFailure {
	st := status.Convert(err)
	return NodeFailure{Node: node, Msg: ShortErr(st.Message()), Unreachable: UnreachableCode(st.Code())}
}

// UnreachableCode reports whether a gRPC code means the node did not answer
// (down, or too slow), as opposed to an answer that is an error.
func UnreachableCode(c codes.Code) bool {
	return c == codes.Unavailable || c == codes.DeadlineExceeded || c == codes.Canceled
}

// ShortErr keeps the useful tail of gRPC dial errors
// ("…: dial tcp 10.0.0.2:50000: connect: connection refused").
func ShortErr(msg string) string {
	if why := ExplainTLS(msg); why != "" {
		return why
	}
	if i := strings.LastIndex(msg, "dial tcp "); i >= 0 {
		return msg[i:]
	}
	if len(msg) > 160 {
		return msg[:157] + "..."
	}
	return msg
}

// DescribeFailures renders failures grouped: unreachable first, then errors.
func DescribeFailures(fs []NodeFailure) (detail string, unreachable []string) {
	var errs []string
	for _, f := range fs {
		if f.Unreachable {
			unreachable = append(unreachable, f.Node)
		} else {
			errs = append(errs, f.Node+": "+f.Msg)
		}
	}
	var parts []string
	if len(unreachable) > 0 {
		first := ""
		for _, f := range fs {
			if f.Unreachable {
				first = f.Msg
				break
			}
		}
		parts = append(parts, fmt.Sprintf("unreachable: %s (%s)", strings.Join(unreachable, ", "), first))
	}
	parts = append(parts, errs...)
	return strings.Join(parts, "; "), unreachable
}

type WithMetadata interface{ GetMetadata() *common.Metadata }

// ByNode splits a one-to-many reply (client.WithNodes) into answers and
// failures by node name. apid echoes each target in Metadata.Hostname and
// turns a failed target into a message carrying Metadata.Error; a target
// without any message is a failure too.
func ByNode[T WithMetadata](inv Inventory, targets []string, msgs []T) (map[string]T, []NodeFailure) {
	ok := map[string]T{}
	failed := map[string]NodeFailure{}
	for _, m := range msgs {
		md := m.GetMetadata()
		host := md.GetHostname()
		if host == "" && len(targets) == 1 {
			host = targets[0]
		}
		name := inv.NameOf(host)
		if md.GetError() != "" {
			code := codes.Unknown
			if st := md.GetStatus(); st != nil {
				code = codes.Code(st.GetCode())
			}
			failed[name] = NodeFailure{Node: name, Msg: ShortErr(md.GetError()),
				Unreachable: UnreachableCode(code) || strings.Contains(md.GetError(), "connection refused")}
			continue
		}
		ok[name] = m
	}
	var fs []NodeFailure
	for _, t := range targets {
		name := inv.NameOf(t)
		if f, bad := failed[name]; bad {
			fs = append(fs, f)
		} else if _, good := ok[name]; !good {
			fs = append(fs, NodeFailure{Node: name, Msg: "no reply"})
		}
	}
	return ok, fs
}

// PerNode makes one call per target, concurrently, instead of one
// one-to-many call: apid answers a one-to-many call only once every backend
// has answered, and a node whose etcd is stopped makes machined wait for its
// local etcd until the caller's deadline (Talos v1.13.9
// internal/app/machined/internal/server/v1alpha1/v1alpha1_server.go,
// EtcdStatus), which would turn the answers of the healthy members into one
// deadline error for all of them. PerNode itself returns when the last call
// has: a node that holds its call costs the caller's whole deadline, so
// callers bound ctx.
func PerNode[T WithMetadata](ctx context.Context, inv Inventory, targets []string, call func(context.Context) ([]T, error)) (map[string]T, []NodeFailure) {
	msgs := make([][]T, len(targets))
	errs := make([]error, len(targets))
	var wg sync.WaitGroup
	for i, t := range targets {
		wg.Go(func() { msgs[i], errs[i] = call(client.WithNode(ctx, t)) })
	}
	wg.Wait()
	ok := map[string]T{}
	var fs []NodeFailure
	for i, t := range targets {
		if errs[i] != nil {
			fs = append(fs, FailureOf(inv.NameOf(t), errs[i]))
			continue
		}
		o, f := ByNode(inv, []string{t}, msgs[i])
		maps.Copy(ok, o)
		fs = append(fs, f...)
	}
	return ok, fs
}

// AllFailed marks every target as failed by one call error.
func AllFailed(inv Inventory, targets []string, err error) []NodeFailure {
	fs := make([]NodeFailure, len(targets))
	for i, t := range targets {
		fs[i] = FailureOf(inv.NameOf(t), err)
	}
	return fs
}
