package cluster

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	machineapi "github.com/siderolabs/talos/pkg/machinery/api/machine"
	"google.golang.org/grpc"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/emptypb"
)

// hangAfter answers etcd status like fakeMachine for its first n calls, then
// holds every call until its context ends, as a member whose etcd stopped does.
type hangAfter struct {
	*fakeMachine
	n     int32
	calls atomic.Int32
}

func (h *hangAfter) EtcdStatus(ctx context.Context, e *emptypb.Empty, o ...grpc.CallOption) (*machineapi.EtcdStatusResponse, error) {
	if h.calls.Add(1) > h.n {
		<-ctx.Done()
		return nil, status.FromContextError(ctx.Err()).Err()
	}
	return h.fakeMachine.EtcdStatus(ctx, e, o...)
}

// TestWaitQuorumKeepsTheLastCompleteReading: once the members stop answering,
// every later reading runs into its deadline; the refusal must still name
// what the last complete reading found, not "deadline exceeded".
func TestWaitQuorumKeepsTheLastCompleteReading(t *testing.T) {
	m := &hangAfter{fakeMachine: &fakeMachine{status: healthyStatus(), members: 3}, n: 3}
	check := func(q Quorum) error {
		if len(q.Healthy) == 3 {
			return errors.New("three healthy members, and still refused")
		}
		return fmt.Errorf("%d healthy members", len(q.Healthy))
	}
	q, err := WaitQuorum(context.Background(), &Clients{Machine: m}, threeCP(), 2*time.Second, check)
	if err == nil || err.Error() != "three healthy members, and still refused" || len(q.Healthy) != 3 {
		t.Fatalf("WaitQuorum = %+v, %v; want the complete reading's refusal", q, err)
	}
	if m.calls.Load() <= 3 {
		t.Fatal("WaitQuorum read only once")
	}
}
