package sim

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"context"
	"errors"
	"fmt"
	"io"
	"runtime"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/emptypb"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/siderolabs/talos/pkg/machinery/api/common"
	machineapi "github.com/siderolabs/talos/pkg/machinery/api/machine"

	"go.etcd.io/etcd/client/v3/concurrency"

	"github.com/talosbot/talosbot/sim/etcdsim"
)

const chunkSize = 32 * 1024

// stateConfigPath is where Talos before v1.12 kept the machine config on the STATE partition.
const stateConfigPath = "/system/state/config.yaml"

func tsProto(t time.Time) *timestamppb.Timestamp { return timestamppb.New(t) }

// machined implements MachineService for one node.
type machined struct {
	machineapi.UnimplementedMachineServiceServer

	n *node
}

func (s *machined) Version(context.Context, *emptypb.Empty) (*machineapi.VersionResponse, error) {
	v := s.n.talosVersion()

	return &machineapi.VersionResponse{Messages: []*machineapi.Version{{
		Version: &machineapi.VersionInfo{
			Tag:       v,
			Sha:       "sim0000",
			Built:     "",
			GoVersion: runtime.Version(),
			Os:        "linux",
			Arch:      "amd64",
		},
		Platform: &machineapi.PlatformInfo{Name: s.n.info.Platform, Mode: "cloud"},
		Features: &machineapi.FeaturesInfo{Rbac: true},
	}}}, nil
}

func (s *machined) Hostname(context.Context, *emptypb.Empty) (*machineapi.HostnameResponse, error) {
	return &machineapi.HostnameResponse{Messages: []*machineapi.Hostname{{Hostname: s.n.info.Hostname}}}, nil
}

func (s *machined) ServiceList(ctx context.Context, _ *emptypb.Empty) (*machineapi.ServiceListResponse, error) {
	return &machineapi.ServiceListResponse{Messages: []*machineapi.ServiceList{{Services: s.n.serviceStates(ctx)}}}, nil
}

// etcdMember returns the node's own etcd member, as machined's local client
// (etcd.NewLocalClient) reaches it. The etcd client waits for a connection (WaitForReady), so
// while the member is stopped the call waits until the member is back or the caller's deadline.
func (s *machined) etcdMember(ctx context.Context, api string) (*etcdsim.Member, error) {
	if s.n.info.Role != RoleControlPlane {
		return nil, status.Errorf(codes.Unimplemented, "%s is only available on control plane nodes", api)
	}

	m := s.n.member()
	if m == nil {
		return nil, status.Errorf(codes.Unimplemented, "%s is only available on control plane nodes", api)
	}

	if err := waitRunning(ctx, func() bool { return m.Running() && !m.Removed() }); err != nil {
		return nil, fmt.Errorf("%s: %w", api, err)
	}

	return m, nil
}

// clusterMember is a running member reached through every control plane's endpoint, as
// etcd.NewClientFromControlPlaneIPs does: the local member being down does not matter while
// another one answers; with none running the call waits until the caller's deadline.
func (s *machined) clusterMember(ctx context.Context, api string) (*etcdsim.Member, error) {
	if s.n.info.Role != RoleControlPlane {
		return nil, status.Errorf(codes.Unimplemented, "%s is only available on control plane nodes", api)
	}

	var found *etcdsim.Member

	err := waitRunning(ctx, func() bool {
		if m := s.n.member(); m != nil && m.Running() && !m.Removed() {
			found = m

			return true
		}

		for _, m := range s.n.c.etcd.Members() {
			if m.Running() && !m.Removed() {
				found = m

				return true
			}
		}

		return false
	})
	if err != nil {
		return nil, fmt.Errorf("%s: %w", api, err)
	}

	return found, nil
}

// waitRunning polls ok until it holds or ctx ends (a gRPC client waiting for its connection).
func waitRunning(ctx context.Context, ok func() bool) error {
	if ok() {
		return nil
	}

	t := time.NewTicker(50 * time.Millisecond)
	defer t.Stop()

	for {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-t.C:
			if ok() {
				return nil
			}
		}
	}
}

func etcdErr(api string, err error) error {
	if _, ok := status.FromError(err); ok {
		return err
	}

	code := codes.Unknown
	if errors.Is(err, context.DeadlineExceeded) {
		code = codes.DeadlineExceeded
	}

	return status.Errorf(code, "%s: %v", api, err)
}

func (s *machined) EtcdStatus(ctx context.Context, _ *emptypb.Empty) (*machineapi.EtcdStatusResponse, error) {
	m, err := s.etcdMember(ctx, "etcd status")
	if err != nil {
		return nil, err
	}

	st, err := m.Status(ctx)
	if err != nil {
		return nil, etcdErr("failed to query etcd status", err)
	}

	return &machineapi.EtcdStatusResponse{Messages: []*machineapi.EtcdStatus{{
		MemberStatus: &machineapi.EtcdMemberStatus{
			MemberId:         st.Header.GetMemberId(),
			ProtocolVersion:  s.n.etcdVersion(st.Version), // versions.go: the release's etcd
			StorageVersion:   st.StorageVersion,
			DbSize:           st.DbSize,
			DbSizeInUse:      st.DbSizeInUse,
			Leader:           st.Leader,
			RaftIndex:        st.RaftIndex,
			RaftTerm:         st.RaftTerm,
			RaftAppliedIndex: st.RaftAppliedIndex,
			Errors:           st.Errors,
			IsLearner:        st.IsLearner,
		},
	}}}, nil
}

func (s *machined) EtcdMemberList(ctx context.Context, req *machineapi.EtcdMemberListRequest) (*machineapi.EtcdMemberListResponse, error) {
	get := s.clusterMember
	if req.QueryLocal {
		get = s.etcdMember
	}

	m, err := get(ctx, "member list")
	if err != nil {
		return nil, err
	}

	var others []*etcdsim.Member
	if !req.QueryLocal {
		others = s.n.c.etcd.Members()
	}

	ml, err := requireLeaderMemberList(ctx, m, others)
	if err != nil {
		return nil, err
	}

	out := &machineapi.EtcdMembers{}

	for _, pm := range ml.Members {
		out.LegacyMembers = append(out.LegacyMembers, pm.Name) //nolint:staticcheck // Talos still fills it
		out.Members = append(out.Members, &machineapi.EtcdMember{
			Id:         pm.ID,
			Hostname:   pm.Name,
			PeerUrls:   pm.PeerURLs,
			ClientUrls: pm.ClientURLs,
			IsLearner:  pm.IsLearner,
		})
	}

	return &machineapi.EtcdMemberListResponse{Messages: []*machineapi.EtcdMembers{out}}, nil
}

func (s *machined) EtcdLeaveCluster(ctx context.Context, _ *machineapi.EtcdLeaveClusterRequest) (*machineapi.EtcdLeaveClusterResponse, error) {
	m, err := s.etcdMember(ctx, "etcd leave")
	if err != nil {
		return nil, err
	}

	if err = m.Leave(ctx); err != nil {
		return nil, etcdErr("failed to leave etcd cluster", err)
	}

	s.n.mu.Lock()
	s.n.etcdLeft = true
	s.n.mu.Unlock()

	return &machineapi.EtcdLeaveClusterResponse{Messages: []*machineapi.EtcdLeaveCluster{{}}}, nil
}

func (s *machined) EtcdRemoveMemberByID(ctx context.Context, req *machineapi.EtcdRemoveMemberByIDRequest) (*machineapi.EtcdRemoveMemberByIDResponse, error) {
	m, err := s.clusterMember(ctx, "etcd remove member")
	if err != nil {
		return nil, err
	}

	// Talos refuses an id that is not a member instead of succeeding silently.
	ml, err := requireLeaderMemberList(ctx, m, s.n.c.etcd.Members())
	if err != nil {
		return nil, err
	}

	found := false

	for _, pm := range ml.Members {
		if pm.ID == req.MemberId {
			found = true
		}
	}

	if !found {
		return nil, status.Errorf(codes.NotFound, "etcd member %016x not found", req.MemberId)
	}

	if err = m.RemoveMember(ctx, req.MemberId); err != nil {
		return nil, etcdErr("failed to remove etcd member", err)
	}

	for _, o := range s.n.c.nodes {
		if mm := o.member(); mm != nil && mm.Removed() {
			o.mu.Lock()
			o.etcdLeft = true
			o.mu.Unlock()
		}
	}

	return &machineapi.EtcdRemoveMemberByIDResponse{Messages: []*machineapi.EtcdRemoveMemberByID{{}}}, nil
}

func (s *machined) EtcdForfeitLeadership(ctx context.Context, _ *machineapi.EtcdForfeitLeadershipRequest) (*machineapi.EtcdForfeitLeadershipResponse, error) {
	m, err := s.etcdMember(ctx, "etcd forfeit leadership")
	if err != nil {
		return nil, err
	}

	st, err := m.Status(ctx)
	if err != nil {
		return nil, etcdErr("failed to query etcd status", err)
	}

	// Talos answers with the new leader's name, or nothing when this member did not lead.
	if st.Leader != st.Header.GetMemberId() {
		return &machineapi.EtcdForfeitLeadershipResponse{Messages: []*machineapi.EtcdForfeitLeadership{{}}}, nil
	}

	id, err := m.ForfeitLeadership(ctx)
	if err != nil {
		return nil, etcdErr("failed to forfeit leadership", err)
	}

	name := ""

	for _, o := range s.n.c.etcd.Members() {
		if o.ID() == id {
			name = o.Name()
		}
	}

	return &machineapi.EtcdForfeitLeadershipResponse{Messages: []*machineapi.EtcdForfeitLeadership{{Member: name}}}, nil
}

func (s *machined) EtcdAlarmList(ctx context.Context, _ *emptypb.Empty) (*machineapi.EtcdAlarmListResponse, error) {
	m, err := s.etcdMember(ctx, "etcd alarm list")
	if err != nil {
		return nil, err
	}

	al, err := m.AlarmList(ctx)
	if err != nil {
		return nil, etcdErr("failed to list etcd alarms", err)
	}

	out := &machineapi.EtcdAlarm{}
	for _, a := range al.Alarms {
		out.MemberAlarms = append(out.MemberAlarms, &machineapi.EtcdMemberAlarm{
			MemberId: a.MemberID,
			Alarm:    machineapi.EtcdMemberAlarm_AlarmType(a.Alarm),
		})
	}

	return &machineapi.EtcdAlarmListResponse{Messages: []*machineapi.EtcdAlarm{out}}, nil
}

func (s *machined) EtcdSnapshot(_ *machineapi.EtcdSnapshotRequest, srv grpc.ServerStreamingServer[common.Data]) error {
	m, err := s.etcdMember(srv.Context(), "etcd snapshot")
	if err != nil {
		return err
	}

	r, err := m.Snapshot(srv.Context())
	if err != nil {
		return etcdErr("failed reading etcd snapshot", err)
	}
	defer r.Close() //nolint:errcheck

	return streamReader(srv, r)
}

func streamReader(srv grpc.ServerStreamingServer[common.Data], r io.Reader) error {
	buf := make([]byte, chunkSize)

	for {
		k, err := r.Read(buf)
		if k > 0 {
			if serr := srv.Send(&common.Data{Bytes: append([]byte(nil), buf[:k]...)}); serr != nil {
				return serr
			}
		}

		if errors.Is(err, io.EOF) {
			return nil
		}

		if err != nil {
			return status.Errorf(codes.Unknown, "read: %v", err)
		}
	}
}

// etcdUpgradeCheck is etcd.Client.ValidateForUpgrade (internal/pkg/etcd/etcd.go): no
// single-member refusal (removed in v1.8); two members refuse; every member must be started and
// answer a quorum read within QuorumCheckTimeout (a stopped member makes the call wait that long).
func (s *machined) etcdUpgradeCheck(ctx context.Context, m *etcdsim.Member) error {
	ml, err := m.MemberList(ctx)
	if err != nil {
		return err
	}

	if len(ml.Members) == 2 {
		return fmt.Errorf("etcd member count(%d) is insufficient to maintain quorum if upgrade commences", len(ml.Members))
	}

	for _, pm := range ml.Members {
		if pm.Name == "" {
			return fmt.Errorf("etcd member %016x is not started, all members must be running to perform an upgrade", pm.ID)
		}

		target := s.n.c.etcd.MemberByID(pm.ID)

		hctx, cancel := context.WithTimeout(ctx, quorumCheckTimeout)
		herr := waitRunning(hctx, func() bool { return target != nil && target.Running() })

		if herr == nil {
			herr = target.Healthy(hctx)
		}

		cancel()

		if herr != nil {
			return fmt.Errorf("etcd member %016x is not healthy; all members must be healthy to perform an upgrade: %w", pm.ID, herr)
		}
	}

	return nil
}

// quorumCheckTimeout is etcd.QuorumCheckTimeout.
const quorumCheckTimeout = 15 * time.Second

// Upgrade is the legacy MachineService.Upgrade (v1alpha1_server.go): pull and validate the
// installer first (a bad image is the RPC's error); on control planes, unless force or preserve,
// take the cluster-wide upgrade mutex and run ValidateForUpgrade; then acknowledge and run the
// upgrade (or stageUpgrade) sequence in the background.
func (s *machined) Upgrade(ctx context.Context, req *machineapi.UpgradeRequest) (*machineapi.UpgradeResponse, error) {
	actor := newUUID()

	if _, err := s.n.pull(ctx, nsSystem, req.Image); err != nil {
		return nil, fmt.Errorf("error validating installer image %q: %w", req.Image, err)
	}

	if s.n.info.Role == RoleControlPlane && !req.Force && !req.Preserve {
		m, err := s.clusterMember(ctx, "upgrade")
		if err != nil {
			return nil, fmt.Errorf("failed to create etcd client: %w", err)
		}

		unlock, err := s.n.c.tryLockUpgradeMutex(ctx)
		if err != nil {
			return nil, fmt.Errorf("failed to acquire upgrade mutex: %w", err)
		}

		err = s.etcdUpgradeCheck(ctx, m)

		// Talos unlocks when the handler returns; the sim's sequence can reach its reboot at
		// once, so unlock before it starts (the mutex only guards the checks).
		unlock()

		if err != nil {
			return nil, fmt.Errorf("error validating etcd for upgrade: %w", err)
		}
	}

	kexec := req.RebootMode == machineapi.UpgradeRequest_DEFAULT

	if req.Stage {
		// The image goes into META; the next boot installs it.
		s.n.mu.Lock()
		s.n.nextImage = req.Image
		s.n.mu.Unlock()

		s.n.startSequence(sequenceRequest{actor: actor, sequence: seqStageUpgrade, image: req.Image, kexec: kexec})
	} else {
		s.n.startSequence(sequenceRequest{actor: actor, sequence: seqUpgrade, image: req.Image, kexec: kexec})
	}

	return &machineapi.UpgradeResponse{Messages: []*machineapi.Upgrade{{Ack: "Upgrade request received", ActorId: actor}}}, nil
}

// tryLockUpgradeMutex is v1alpha1_server.go's: an etcd concurrency mutex on
// constants.EtcdTalosEtcdUpgradeMutex with a 60 s session, held for the pre-upgrade checks.
func (c *Cluster) tryLockUpgradeMutex(ctx context.Context) (func(), error) {
	cli, err := c.etcd.Client(ctx)
	if err != nil {
		return nil, err
	}

	sess, err := concurrency.NewSession(cli, concurrency.WithContext(ctx), concurrency.WithTTL(60))
	if err != nil {
		_ = cli.Close()

		return nil, fmt.Errorf("error establishing etcd concurrency session: %w", err)
	}

	mu := concurrency.NewMutex(sess, "talos:v1:etcdUpgradeMutex")

	if err = mu.TryLock(ctx); err != nil {
		_ = sess.Close()
		_ = cli.Close()

		return nil, fmt.Errorf("error trying to lock etcd upgrade mutex: %w", err)
	}

	return func() {
		uctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()

		_ = mu.Unlock(uctx)
		_ = sess.Close()
		_ = cli.Close()
	}, nil
}

// Reboot acknowledges and runs the reboot sequence in the background; a LOCKED refusal is an
// event, not the RPC's error.
func (s *machined) Reboot(_ context.Context, req *machineapi.RebootRequest) (*machineapi.RebootResponse, error) {
	actor := newUUID()

	s.n.startSequence(sequenceRequest{actor: actor, sequence: seqReboot, force: req.Mode == machineapi.RebootRequest_FORCE})

	return &machineapi.RebootResponse{Messages: []*machineapi.Reboot{{ActorId: actor}}}, nil
}

// Rollback reverts the bootloader to the previous entry, then reboots with takeover (and, as in
// Talos, without an actor id).
func (s *machined) Rollback(_ context.Context, _ *machineapi.RollbackRequest) (*machineapi.RollbackResponse, error) {
	s.n.mu.Lock()
	prev := s.n.prevVersion
	s.n.mu.Unlock()

	if prev == "" {
		// A plain error (codes.Unknown), as GRUB's revert returns it (bootloader/grub/revert.go).
		return nil, errNoRollbackEntry
	}

	s.n.startSequence(sequenceRequest{sequence: seqReboot, takeover: true, rollback: true})

	return &machineapi.RollbackResponse{Messages: []*machineapi.Rollback{{}}}, nil
}

// Reset acknowledges and runs the reset sequence in the background.
func (s *machined) Reset(_ context.Context, req *machineapi.ResetRequest) (*machineapi.ResetResponse, error) {
	if len(req.GetUserDisksToWipe()) > 0 && req.Mode == machineapi.ResetRequest_SYSTEM_DISK {
		return nil, errors.New("reset failed: invalid input, wipe mode SYSTEM_DISK doesn't support UserDisksToWipe parameter")
	}

	actor := newUUID()

	var labels []string

	for _, p := range req.GetSystemPartitionsToWipe() {
		if p.GetWipe() {
			labels = append(labels, p.GetLabel())
		}
	}

	if err := s.n.checkWipeLabels(req.GetSystemPartitionsToWipe()); err != nil {
		return nil, err
	}

	s.n.startSequence(sequenceRequest{actor: actor, sequence: seqReset, graceful: req.Graceful, reboot: req.Reboot, wipeLabels: labels})

	return &machineapi.ResetResponse{Messages: []*machineapi.Reset{{ActorId: actor}}}, nil
}

func (s *machined) Events(req *machineapi.EventsRequest, srv grpc.ServerStreamingServer[machineapi.Event]) error {
	replay, ch, cancel, err := s.n.events.subscribe(req)
	if err != nil {
		return status.Error(codes.InvalidArgument, err.Error())
	}
	defer cancel()

	// Talos first sends an empty (hello) event so the client knows the watch is established.
	hello, err := simEvent{id: s.n.c.ids.next(), actorID: req.WithActorId}.toMachine()
	if err != nil {
		return err
	}

	if err = srv.Send(hello); err != nil {
		return err
	}

	send := func(ev simEvent) error {
		if req.WithActorId != "" && ev.actorID != req.WithActorId {
			return nil
		}

		m, err := ev.toMachine()
		if err != nil {
			return err
		}

		return srv.Send(m)
	}

	for _, ev := range replay {
		if err := send(ev); err != nil {
			return err
		}
	}

	for {
		select {
		case <-srv.Context().Done():
			return nil
		case ev, ok := <-ch:
			if !ok {
				return status.Error(codes.Unavailable, "event stream closed: node is going down")
			}

			if err := send(ev); err != nil {
				return err
			}
		}
	}
}

func (s *machined) Read(req *machineapi.ReadRequest, srv grpc.ServerStreamingServer[common.Data]) error {
	var data []byte

	switch req.Path {
	case "/proc/sys/kernel/random/boot_id":
		s.n.mu.Lock()
		data = []byte(s.n.bootID + "\n")
		s.n.mu.Unlock()
	case stateConfigPath:
		// Talos v1.12 stopped mounting the STATE partition, so there the file does not exist
		// and Read gives os.Stat's NotFound; clients read the MachineConfig resource instead.
		if !s.n.behaviour().stateConfigFile {
			return status.Errorf(codes.NotFound, "stat %s: no such file or directory", req.Path)
		}

		s.n.mu.Lock()
		data = append([]byte(nil), s.n.config...)
		s.n.mu.Unlock()
	default:
		return status.Errorf(codes.NotFound, "stat %s: no such file or directory", req.Path)
	}

	return streamReader(srv, bytes.NewReader(data))
}

func (s *machined) ApplyConfiguration(_ context.Context, req *machineapi.ApplyConfigurationRequest) (*machineapi.ApplyConfigurationResponse, error) {
	if err := s.n.applyModeRefusal(req.Mode); err != nil { // versions.go: v1.14 removed REBOOT
		return nil, err
	}

	if req.Mode != machineapi.ApplyConfigurationRequest_NO_REBOOT {
		return nil, status.Errorf(codes.Unimplemented, "the sim applies configuration only in NO_REBOOT mode (got %s)", req.Mode)
	}

	img, typ, err := parseImages(req.Data)
	if err != nil {
		return nil, status.Errorf(codes.InvalidArgument, "configuration validation failed: %v", err)
	}

	if typ != s.n.info.Role {
		return nil, status.Errorf(codes.InvalidArgument, "configuration validation failed: machine type can't be changed from %q to %q", s.n.info.Role, typ)
	}

	details := "Applied configuration without a reboot"
	if req.DryRun {
		details = "Dry run: configuration is valid and would be applied without a reboot"
	} else {
		s.n.mu.Lock()
		prev := s.n.img
		s.n.img = img
		s.n.config = append([]byte(nil), req.Data...)
		s.n.mu.Unlock()

		s.n.kubeConfigApplied(prev, img) // kube.go: kubelet restart, static pods
	}

	return &machineapi.ApplyConfigurationResponse{Messages: []*machineapi.ApplyConfiguration{{
		Mode:        machineapi.ApplyConfigurationRequest_NO_REBOOT,
		ModeDetails: details,
	}}}, nil
}

func (s *machined) Kubeconfig(_ *emptypb.Empty, srv grpc.ServerStreamingServer[common.Data]) error {
	if s.n.info.Role != RoleControlPlane {
		return status.Error(codes.Unimplemented, "kubeconfig is only available on control plane nodes")
	}

	kc, err := s.n.c.adminKubeconfig() // kubeconfig.go: Talos's shape
	if err != nil {
		return status.Errorf(codes.FailedPrecondition, "kubeconfig: %v", err)
	}

	var buf bytes.Buffer

	gz := gzip.NewWriter(&buf)
	tw := tar.NewWriter(gz)

	if err := tw.WriteHeader(&tar.Header{Name: "kubeconfig", Mode: 0o600, Size: int64(len(kc)), ModTime: s.n.c.now()}); err != nil {
		return err
	}

	if _, err := tw.Write(kc); err != nil {
		return err
	}

	if err := tw.Close(); err != nil {
		return err
	}

	if err := gz.Close(); err != nil {
		return err
	}

	return streamReader(srv, &buf)
}
