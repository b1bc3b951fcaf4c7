package etcd

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/siderolabs/talos/pkg/machinery/api/common"
	machineapi "github.com/siderolabs/talos/pkg/machinery/api/machine"
	"github.com/talosbot/talosbot/plugins/cluster"
	"github.com/talosbot/talosbot/plugins/cluster/identity"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/emptypb"
)

// hangAfter answers etcd status with a healthy three-member view (cp-1
// leads) for its first n calls, one node per call as apid proxies it, then
// holds every call until its context ends, as a member whose etcd stopped
// does. Its member list is empty, so the reading assumes the inventory's.
type hangAfter struct {
	cluster.MachineAPI
	n     int32
	calls atomic.Int32
}

func (h *hangAfter) EtcdStatus(ctx context.Context, _ *emptypb.Empty, _ ...grpc.CallOption) (*machineapi.EtcdStatusResponse, error) {
	if h.calls.Add(1) > h.n {
		<-ctx.Done()
		return nil, status.FromContextError(ctx.Err()).Err()
	}
	md, _ := metadata.FromOutgoingContext(ctx)
	ids := map[string]uint64{"10.0.0.1": 1, "10.0.0.2": 2, "10.0.0.3": 3}
	id, ok := ids[strings.Join(md.Get("node"), ",")]
	if !ok {
		return nil, status.Error(codes.Unavailable, "connection refused")
	}
	return &machineapi.EtcdStatusResponse{Messages: []*machineapi.EtcdStatus{{Metadata: &common.Metadata{},
		MemberStatus: &machineapi.EtcdMemberStatus{MemberId: id, Leader: 1, RaftIndex: 100}}}}, nil
}

func (h *hangAfter) EtcdMemberList(context.Context, *machineapi.EtcdMemberListRequest, ...grpc.CallOption) (*machineapi.EtcdMemberListResponse, error) {
	return &machineapi.EtcdMemberListResponse{}, nil
}

func threeCP() cluster.Inventory {
	return cluster.Inventory{Name: "t", Nodes: []cluster.Node{
		{Name: "cp-1", Address: "10.0.0.1", Role: cluster.RoleControlPlane},
		{Name: "cp-2", Address: "10.0.0.2", Role: cluster.RoleControlPlane},
		{Name: "cp-3", Address: "10.0.0.3", Role: cluster.RoleControlPlane},
		{Name: "w-1", Address: "10.0.0.4", Role: cluster.RoleWorker},
	}}
}

// TestWaitQuorumKeepsTheLastCompleteReading: once the members stop answering,
// every later reading runs into its deadline; the refusal must still name
// what the last complete reading found, not "deadline exceeded".
func TestWaitQuorumKeepsTheLastCompleteReading(t *testing.T) {
	m := &hangAfter{n: 3}
	check := func(q Quorum) error {
		if len(q.Healthy) == 3 {
			return errors.New("three healthy members, and still refused")
		}
		return fmt.Errorf("%d healthy members", len(q.Healthy))
	}
	q, err := WaitQuorum(context.Background(), &cluster.Clients{Machine: m}, identity.Unresolved(threeCP()), 2*time.Second, check)
	if err == nil || err.Error() != "three healthy members, and still refused" || len(q.Healthy) != 3 {
		t.Fatalf("WaitQuorum = %+v, %v; want the complete reading's refusal", q, err)
	}
	if m.calls.Load() <= 3 {
		t.Fatal("WaitQuorum read only once")
	}
}
