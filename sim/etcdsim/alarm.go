package etcdsim

import (
	"context"
	"fmt"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// RaiseAlarm activates an alarm for this member through etcd's own Alarm RPC, as etcd's
// server does itself when the backend exceeds its quota (NOSPACE): the alarm goes through raft,
// so it needs a leader, and once applied the cluster refuses writes with "etcdserver: mvcc:
// database space exceeded" until it is disarmed.
func (m *Member) RaiseAlarm(ctx context.Context, alarm pb.AlarmType) error {
	return m.call(ctx, "raise alarm", func(ctx context.Context, cli *clientv3.Client) error {
		_, err := pb.NewMaintenanceClient(cli.ActiveConnection()).Alarm(ctx, &pb.AlarmRequest{
			Action: pb.AlarmRequest_ACTIVATE, MemberID: m.ID(), Alarm: alarm,
		})
		if err != nil {
			return fmt.Errorf("activate %s: %w", alarm, err)
		}
		return nil
	})
}

// DisarmAlarm clears an alarm of this member (etcdctl alarm disarm).
func (m *Member) DisarmAlarm(ctx context.Context, alarm pb.AlarmType) error {
	return m.call(ctx, "disarm alarm", func(ctx context.Context, cli *clientv3.Client) error {
		_, err := cli.AlarmDisarm(ctx, &clientv3.AlarmMember{MemberID: m.ID(), Alarm: alarm})
		return err
	})
}
