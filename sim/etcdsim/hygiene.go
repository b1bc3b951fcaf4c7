package etcdsim

import (
	"context"

	clientv3 "go.etcd.io/etcd/client/v3"
)

// Defragment defragments this member's backend through its own endpoint, as
// Talos's EtcdDefragment does with the local member's client (the member
// stops serving while it runs; DbSize drops to about DbSizeInUse).
func (m *Member) Defragment(ctx context.Context) error {
	return m.call(ctx, "defragment", func(ctx context.Context, cli *clientv3.Client) error {
		_, err := cli.Defragment(ctx, m.clientURL.String())
		return err
	})
}

// DisarmAll disarms every alarm, as Talos's EtcdAlarmDisarm does: it calls
// AlarmDisarm with an empty AlarmMember, which clientv3 turns into one
// disarm per listed alarm (clientv3 maintenance.go). It returns the alarms
// that were disarmed.
func (m *Member) DisarmAll(ctx context.Context) (*clientv3.AlarmResponse, error) {
	var resp *clientv3.AlarmResponse
	err := m.call(ctx, "alarm disarm", func(ctx context.Context, cli *clientv3.Client) (err error) {
		resp, err = cli.AlarmDisarm(ctx, &clientv3.AlarmMember{})
		return err
	})
	return resp, err
}
