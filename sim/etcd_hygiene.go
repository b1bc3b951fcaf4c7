package sim

import (
	"context"
	"errors"

	machineapi "github.com/siderolabs/talos/pkg/machinery/api/machine"
	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"google.golang.org/protobuf/types/known/emptypb"
)

// etcd hygiene (docs/SIMULATOR.md "etcd defragment and alarm disarm"), as
// Talos v1.13.9 serves them in
// internal/app/machined/internal/server/v1alpha1/v1alpha1_server.go
// (EtcdDefragment, EtcdAlarmDisarm): control planes only, the local
// member's client, the error wrapped as "failed to defragment etcd" /
// "failed to disarm etcd alarm".

func (s *machined) EtcdDefragment(ctx context.Context, _ *emptypb.Empty) (*machineapi.EtcdDefragmentResponse, error) {
	m, err := s.etcdMember(ctx, "etcd defragment")
	if err != nil {
		return nil, err
	}

	if err := m.Defragment(ctx); err != nil {
		return nil, etcdErr("failed to defragment etcd", err)
	}

	return &machineapi.EtcdDefragmentResponse{Messages: []*machineapi.EtcdDefragment{{}}}, nil
}

func (s *machined) EtcdAlarmDisarm(ctx context.Context, _ *emptypb.Empty) (*machineapi.EtcdAlarmDisarmResponse, error) {
	m, err := s.etcdMember(ctx, "etcd alarm disarm")
	if err != nil {
		return nil, err
	}

	resp, err := m.DisarmAll(ctx)
	if err != nil {
		return nil, etcdErr("failed to disarm etcd alarm", err)
	}

	out := &machineapi.EtcdAlarmDisarm{}
	for _, a := range resp.Alarms {
		out.MemberAlarms = append(out.MemberAlarms, &machineapi.EtcdMemberAlarm{
			MemberId: a.MemberID,
			Alarm:    machineapi.EtcdMemberAlarm_AlarmType(a.Alarm),
		})
	}

	// Space not back: etcd's quota check raises NOSPACE again at the next
	// write (etcdserver quotaKVServer.check), so a member whose
	// etcdNoSpace fault still holds has its alarm again.
	var errs []error
	for _, o := range s.n.c.nodes {
		if o.currentFault().EtcdNoSpace {
			if om := o.member(); om != nil && om.Running() {
				errs = append(errs, om.RaiseAlarm(ctx, pb.AlarmType_NOSPACE))
			}
		}
	}

	errs = append(errs, s.n.c.probeQuotaWrites(ctx))
	if err := errors.Join(errs...); err != nil {
		return nil, etcdErr("failed to disarm etcd alarm", err)
	}

	return &machineapi.EtcdAlarmDisarmResponse{Messages: []*machineapi.EtcdAlarmDisarm{out}}, nil
}
