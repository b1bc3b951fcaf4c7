package sim

import (
	"context"
	"errors"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/talosbot/talosbot/sim/etcdsim"
)

// errNoRollbackEntry is what a Rollback gets on a node with no previous boot entry: GRUB's
// revert (internal/app/machined/pkg/runtime/v1alpha1/bootloader/grub/revert.go, v1.13.9)
// returns a plain error, which gRPC sends as codes.Unknown.
var errNoRollbackEntry = errors.New(`cannot rollback to "", label does not exist`)

// requireLeaderMemberList is Talos's member list (EtcdMemberList, EtcdRemoveMemberByID in
// v1alpha1_server.go, v1.13.9): under clientv3.WithRequireLeader, so a member that knows no
// leader refuses it with "etcdserver: no leader" rather than waiting for a quorum read. The
// etcd client retries that refusal about a hundred times (25 ms apart) and then returns it;
// the sim answers it without the retries.
//
// others are the members Talos's client may also reach (every control plane's, for a
// cluster-wide list; none for query_local): its retries land on another endpoint, so the
// list fails only when no running member knows a leader.
func requireLeaderMemberList(ctx context.Context, m *etcdsim.Member, others []*etcdsim.Member) (*clientv3.MemberListResponse, error) {
	for _, o := range others {
		if m.KnowsLeader() {
			break
		}

		if o.Running() && !o.Removed() {
			m = o
		}
	}

	if !m.KnowsLeader() {
		return nil, memberListErr(rpctypes.ErrNoLeader)
	}

	ml, err := m.MemberList(clientv3.WithRequireLeader(ctx))
	if err != nil {
		return nil, memberListErr(err)
	}

	return ml, nil
}

// memberListErr is a member list's failure as Talos's machined returns it: the etcd client's
// error unwrapped (v1alpha1_server.go EtcdMemberList returns it as is), so without a leader
// the call fails at once, under clientv3.WithRequireLeader, with "etcdserver: no leader"
// (an rpctypes.EtcdError, not a gRPC status: the client sees codes.Unknown).
func memberListErr(err error) error {
	if errors.Is(err, rpctypes.ErrNoLeader) {
		return status.Error(codes.Unknown, rpctypes.ErrNoLeader.Error())
	}

	return etcdErr("failed to list etcd members", err)
}
