package sim

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/siderolabs/talos/pkg/machinery/api/common"
	machineapi "github.com/siderolabs/talos/pkg/machinery/api/machine"

	"github.com/talosbot/talosbot/sim/etcdsim"
)

// This file is etcd disaster recovery the Talos v1.13.9 way:
//   - the etcd service of a control plane whose data directory is empty waits to join
//     (internal/app/machined/pkg/system/services/etcd.go: argsForControlPlane →
//     buildInitialCluster → addMember, retried; the service stays Preparing meanwhile) and,
//     once it joined as a learner, is promoted (promoteMember);
//   - MachineService.EtcdRecover stores an uploaded snapshot at /var/lib/etcd.snapshot and
//     MachineService.Bootstrap starts etcd as a new one-member cluster, restored from that
//     snapshot when recover_etcd is set (v1alpha1_server.go Bootstrap/EtcdRecover,
//     services.BootstrapEtcd, Etcd.recoverFromSnapshot);
//   - the EtcdDataLost fault and Cluster.LoseEtcdQuorum lose the data that needs it.

// etcdJoinRetry is the pause between two join attempts. Talos waits 3 s ± 1 s
// (retry.Constant(EtcdJoinTimeout, WithUnits(3s), WithJitter(1s))); the sim is quicker so that
// tests do not wait for it.
const etcdJoinRetry = 250 * time.Millisecond

// etcdJoinAttempt bounds one join attempt, as Talos's 30 s attemptCtx does.
const etcdJoinAttempt = 30 * time.Second

// Etcd service states and messages, as Talos's service runner reports them
// (internal/app/machined/pkg/system/service_runner.go, system.go).
const (
	svcPreparing  = "Preparing"
	svcFailed     = "Failed"
	msgPreparing  = "Running pre state"
	msgPreFailure = "Failed to run pre stage: "
)

// etcdService is the node's etcd service where it is not simply "the member runs from its data
// directory": waiting to join, bootstrapping, or failed in its pre stage. Guarded by node.mu.
type etcdService struct {
	state, msg    string        // "" when the member's own state tells
	cancel        func()        // stops the join loop or bootstrap running in the background
	done          chan struct{} // closed when that background work ended
	bootstrapping bool          // a Bootstrap is restoring or starting the member
}

// etcdServiceOverride is the etcd service state ServiceList reports instead of the member's.
func (n *node) etcdServiceOverride() (string, string) {
	n.mu.Lock()
	defer n.mu.Unlock()

	return n.etcdSvc.state, n.etcdSvc.msg
}

func (n *node) setEtcdService(state, msg string) {
	n.mu.Lock()
	n.etcdSvc.state, n.etcdSvc.msg = state, msg
	n.mu.Unlock()
}

// etcdJoins reports whether the node's etcd service, starting now, would join an existing
// cluster: its data directory is empty (argsForControlPlane: IsDirEmpty), its system disk was
// not wiped whole (that leaves maintenance mode, which the sim does not run) and it did not
// leave etcd (the sim keeps a node that left out until its EPHEMERAL is wiped).
func (n *node) etcdJoins(m *etcdsim.Member) bool {
	n.mu.Lock()
	out := n.wiped || n.etcdLeft
	n.mu.Unlock()

	return !out && m.DataEmpty()
}

// runEtcdService runs f in the background as the node's etcd service pre stage, replacing any
// earlier one (which is stopped first, as system.Services(r).Stop(ctx, "etcd") does).
func (n *node) runEtcdService(f func(ctx context.Context)) {
	n.stopEtcdJoin()

	ctx, cancel := context.WithCancel(n.c.ctx)
	done := make(chan struct{})

	n.mu.Lock()
	n.etcdSvc.cancel, n.etcdSvc.done = cancel, done
	n.etcdSvc.state, n.etcdSvc.msg = svcPreparing, msgPreparing
	n.mu.Unlock()

	n.c.goBackground(func(context.Context) {
		defer close(done)
		defer cancel()

		f(ctx)
	})
}

// stopEtcdJoin stops the join loop or bootstrap running in the background and waits for it.
func (n *node) stopEtcdJoin() {
	n.mu.Lock()
	cancel, done := n.etcdSvc.cancel, n.etcdSvc.done
	n.etcdSvc.cancel, n.etcdSvc.done = nil, nil
	n.mu.Unlock()

	if cancel != nil {
		cancel()
		<-done
	}
}

// startEtcdJoin starts the etcd service's join loop: Preparing until a join attempt succeeds
// through a member with a leader, then running as a learner, promoted in the background.
func (n *node) startEtcdJoin() {
	m := n.member()
	if m == nil {
		return
	}

	// Talos gives up after etcdJoinTimeout on the sim's clock (etcdfaults.go), counted from
	// the service's start (now, not when the goroutine first runs).
	started := n.c.now()

	n.runEtcdService(func(ctx context.Context) {
		t := time.NewTimer(0)
		defer t.Stop()

		var errs joinErrors

		for {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
			}

			actx, cancel := n.joinAttemptContext(ctx, started)
			err := m.JoinCluster(actx)

			cancel()

			if err == nil {
				break
			}

			if errors.Is(err, etcdsim.ErrDataPresent) {
				// Data appeared (a bootstrap won the race): this service has nothing to join.
				n.setEtcdService("", "")

				return
			}

			n.c.log.Debug("etcd is waiting to join the cluster", "node", n.info.Name, "err", err)
			errs.add(err)

			if n.c.now().Sub(started) >= etcdJoinTimeout {
				n.setEtcdService(svcFailed, joinFailure(errs))
				n.c.log.Warn("etcd gave up joining the cluster", "node", n.info.Name, "after", etcdJoinTimeout)

				return
			}

			t.Reset(etcdJoinRetry)
		}

		n.mu.Lock()
		n.etcdLeft = false
		n.etcdSvc.state, n.etcdSvc.msg = "", ""
		n.mu.Unlock()

		n.c.log.Info("etcd joined the cluster as a learner", "node", n.info.Name)

		// promoteMember: retried until the learner caught up with the leader.
		for ctx.Err() == nil {
			if err := m.Promote(ctx); err == nil {
				n.c.log.Info("etcd member promoted", "node", n.info.Name)

				return
			}
		}
	})
}

// wipePartitions is ResetSystemDiskSpec for the labels given: EPHEMERAL holds /var/lib/etcd
// (the node's etcd data and any uploaded snapshot), STATE the machine config (without it the
// node would boot into maintenance mode, which the sim does not run: it stays wiped).
func (n *node) wipePartitions(labels []string) error {
	if slices.Contains(labels, "STATE") {
		n.mu.Lock()
		n.wiped = true
		n.mu.Unlock()
	}

	// etcd's data is on EPHEMERAL, or on its own ETCD volume (etcdvolume.go).
	if !slices.Contains(labels, n.etcdDataLabel()) {
		return nil
	}

	m := n.member()
	if m == nil {
		return nil
	}

	n.stopEtcdJoin()

	if err := m.Wipe(); err != nil {
		return err
	}

	if err := os.Remove(m.RecoverySnapshotPath()); err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("wipe etcd recovery snapshot: %w", err)
	}

	n.mu.Lock()
	n.etcdLeft = false // a fresh EPHEMERAL: the etcd service joins again on the next boot
	n.mu.Unlock()

	return nil
}

// loseEtcdData is the EtcdDataLost fault: the member stops and its data directory is deleted;
// the etcd service, with an empty data directory, goes back to its join loop.
func (n *node) loseEtcdData() error {
	m := n.member()
	if m == nil {
		return nil
	}

	n.stopEtcdJoin()

	if err := m.Wipe(); err != nil {
		return err
	}

	n.mu.Lock()
	running := n.state == stateRunning
	n.mu.Unlock()

	if running && n.etcdJoins(m) {
		n.startEtcdJoin()
	}

	return nil
}

// LoseEtcdQuorum loses etcd's quorum the way a disaster does: the EtcdDataLost fault on a
// majority of the control planes (the last ones in node order), whose members stop and lose
// their data, so their etcd services wait to join (Preparing) and the remaining members run on
// their data without a leader (Running, unhealthy). It returns the nodes that lost their data;
// the others keep stale data that must be wiped (reset of EPHEMERAL) before they can join the
// recovered cluster. Recover with EtcdRecover + Bootstrap{RecoverEtcd} on a node that lost its
// data.
func (c *Cluster) LoseEtcdQuorum(ctx context.Context) ([]string, error) {
	var cps []*node

	for _, n := range c.nodes {
		if n.info.Role == RoleControlPlane {
			cps = append(cps, n)
		}
	}

	majority := len(cps)/2 + 1
	targets := cps[len(cps)-majority:]

	var (
		lost []string
		errs []error
	)

	// Stop them all first: losing the data one node at a time would let the first one's etcd
	// service join back while the others still keep quorum.
	for _, n := range targets {
		if m := n.member(); m != nil {
			n.stopEtcdJoin()

			if err := m.Stop(); err != nil {
				errs = append(errs, err)
			}
		}
	}

	for _, n := range targets {
		f := n.currentFault()
		f.EtcdDataLost = true

		if err := c.Inject(ctx, n.info.Name, f); err != nil {
			errs = append(errs, err)

			continue
		}

		lost = append(lost, n.info.Name)
	}

	return lost, errors.Join(errs...)
}

// EtcdRecover is MachineService.EtcdRecover (v1alpha1_server.go): the client streams the
// snapshot in chunks; it is written to /var/lib/etcd.snapshot (here next to the member's data
// directory, etcdsim.Member.RecoverySnapshotPath), truncating an earlier upload, and removed
// again if the upload fails. Nothing is checked about the snapshot itself: that happens when
// Bootstrap restores it.
func (s *machined) EtcdRecover(srv grpc.ClientStreamingServer[common.Data, machineapi.EtcdRecoverResponse]) error {
	m := s.n.member()
	if s.n.info.Role != RoleControlPlane || m == nil {
		return status.Error(codes.Unimplemented, "etcd recover is only available on control plane nodes")
	}

	path := m.RecoverySnapshotPath()

	f, err := os.OpenFile(path, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, 0o600)
	if err != nil {
		return fmt.Errorf("error creating etcd recovery snapshot: %w", err)
	}
	defer f.Close() //nolint:errcheck

	ok := false

	defer func() {
		if !ok {
			_ = os.Remove(path)
		}
	}()

	for {
		msg, err := srv.Recv()
		if errors.Is(err, io.EOF) {
			break
		}

		if err != nil {
			return err
		}

		if _, err := f.Write(msg.GetBytes()); err != nil {
			return fmt.Errorf("error writing snapshot: %w", err)
		}
	}

	if err := f.Sync(); err != nil {
		return fmt.Errorf("error fsyncing snapshot: %w", err)
	}

	if err := f.Close(); err != nil {
		return fmt.Errorf("error closing snapshot: %w", err)
	}

	ok = true

	s.n.callMu.Lock()
	s.n.recovery.Uploads++
	s.n.callMu.Unlock()

	s.n.c.log.Info("etcd recovery snapshot uploaded", "node", s.n.info.Name)

	return srv.SendAndClose(&machineapi.EtcdRecoverResponse{Messages: []*machineapi.EtcdRecover{{}}})
}

// Bootstrap is MachineService.Bootstrap (v1alpha1_server.go) with services.BootstrapEtcd: on a
// control plane whose etcd data directory is empty it stops the etcd service (its join loop)
// and starts it again in bootstrap mode, a new one-member cluster, restored from the uploaded
// snapshot when recover_etcd is set. It answers once the service is started; the restore and
// the start happen in the service's pre stage, so their failures ("error verifying snapshot",
// "error recovering from the snapshot") show in the etcd service (Failed), not in the reply.
func (s *machined) Bootstrap(_ context.Context, req *machineapi.BootstrapRequest) (*machineapi.BootstrapResponse, error) {
	n := s.n

	m := n.member()
	if n.info.Role != RoleControlPlane || m == nil {
		return nil, status.Error(codes.Unimplemented, "bootstrap is only available on control plane nodes")
	}

	n.mu.Lock()
	busy := n.etcdSvc.bootstrapping
	if !busy {
		n.etcdSvc.bootstrapping = true
	}
	n.mu.Unlock()

	// A bootstrap still restoring counts as data: the sim refuses it as Talos would a moment
	// later, rather than racing two restores into one directory.
	if busy || m.Running() || !m.DataEmpty() {
		if !busy {
			n.mu.Lock()
			n.etcdSvc.bootstrapping = false
			n.mu.Unlock()
		}

		return nil, status.Error(codes.AlreadyExists, "etcd data directory is not empty")
	}

	n.callMu.Lock()
	n.recovery.Bootstraps++
	n.callMu.Unlock()

	n.c.log.Info("bootstrap request received", "node", n.info.Name, "recoverEtcd", req.GetRecoverEtcd())

	n.runEtcdService(func(ctx context.Context) {
		defer func() {
			n.mu.Lock()
			n.etcdSvc.bootstrapping = false
			n.mu.Unlock()
		}()

		st, err := m.Bootstrap(ctx, req.GetRecoverEtcd(), req.GetRecoverSkipHashCheck())
		if err != nil {
			if ctx.Err() == nil {
				n.c.log.Warn("etcd bootstrap failed", "node", n.info.Name, "err", err)
				n.setEtcdService(svcFailed, msgPreFailure+err.Error())
			}

			return
		}

		n.mu.Lock()
		n.etcdLeft = false
		n.etcdSvc.state, n.etcdSvc.msg = "", ""
		n.mu.Unlock()

		if st != nil {
			n.c.log.Info("recovered etcd from snapshot", "node", n.info.Name, "revision", st.Revision, "keys", st.TotalKey)
		}

		n.c.restartKube(ctx)
	})

	return &machineapi.BootstrapResponse{Messages: []*machineapi.Bootstrap{{}}}, nil
}

// RecoveryCounts is what one node's etcd recovery endpoints accepted, as opposed to Calls, which
// counts every request including refused ones.
type RecoveryCounts struct {
	// Uploads counts EtcdRecover uploads stored in full (a cut-off upload is removed, uncounted).
	Uploads int
	// Bootstraps counts Bootstrap requests that started etcd as a new cluster; those answered
	// AlreadyExists (data present, or a bootstrap still restoring) are not counted.
	Bootstraps int
}

// RecoveryCounts returns what the node's EtcdRecover and Bootstrap accepted since the cluster
// started (zero for an unknown node).
func (c *Cluster) RecoveryCounts(nodeName string) RecoveryCounts {
	n, err := c.node(nodeName)
	if err != nil {
		return RecoveryCounts{}
	}

	n.callMu.Lock()
	defer n.callMu.Unlock()

	return n.recovery
}

// restartKube restarts the kube-apiserver after etcd was bootstrapped again (see
// KubeBackend.Restart), once the new member serves.
func (c *Cluster) restartKube(ctx context.Context) {
	if c.kubeRestart == nil {
		return
	}

	if err := c.kubeRestart(ctx); err != nil {
		c.log.Warn("restart kube-apiserver after etcd bootstrap", "err", err)

		return
	}

	c.log.Info("kube-apiserver restarted on the bootstrapped etcd")
}

// EtcdMemberView is one control plane's etcd as tests (and the recovery plugin's tests) see it.
type EtcdMemberView struct {
	Node    string `json:"node"`    // inventory name (cp-1…)
	Member  string `json:"member"`  // etcd member name
	Service string `json:"service"` // the etcd service state ServiceList reports: Running, Preparing, Failed, Finished
	// Message is the health message, or the last event's ("Running pre state", "Failed to run
	// pre stage: …") before any health check.
	Message string `json:"message,omitempty"`
	Healthy bool   `json:"healthy"` // the service's health (a linearizable read answers)
	Running bool   `json:"running"` // the member's etcd server runs
	Leader  uint64 `json:"leader"`  // the leader this member sees (0: none, or not running)
	ID      uint64 `json:"id"`      // the member's current ID (0 before it first started)
}

// EtcdView is every control plane's etcd and the membership of the cluster that has a leader.
type EtcdView struct {
	Members []EtcdMemberView `json:"members"` // node order
	// Leader is the node whose member every running member agrees leads; "" when there is no
	// leader or the running members disagree (a member on stale data sees none).
	Leader string `json:"leader"`
	// Voters and Learners are the member names in the membership, read through a member that
	// has a leader (nil when none has).
	Voters   []string `json:"voters"`
	Learners []string `json:"learners"`
}

// EtcdView reads every control plane's etcd service and member, and the membership through a
// member with a leader.
func (c *Cluster) EtcdView(ctx context.Context) EtcdView {
	var (
		v      EtcdView
		withLd *etcdsim.Member
		agreed uint64
		agree  = true
	)

	for _, n := range c.nodes {
		m := n.member()
		if m == nil {
			continue
		}

		mv := EtcdMemberView{Node: n.info.Name, Member: m.Name(), Running: m.Running(), ID: m.ID()}

		for _, s := range n.serviceStates(ctx) {
			if s.GetId() != "etcd" {
				continue
			}

			mv.Service, mv.Healthy, mv.Message = s.GetState(), s.GetHealth().GetHealthy(), s.GetHealth().GetLastMessage()

			if evs := s.GetEvents().GetEvents(); s.GetHealth().GetUnknown() && len(evs) > 0 {
				mv.Message = evs[len(evs)-1].GetMsg() // no health check yet: the last event says why
			}
		}

		if mv.Running {
			if st, err := m.Status(ctx); err == nil {
				mv.Leader = st.Leader
			}

			if mv.Leader == 0 || (agreed != 0 && mv.Leader != agreed) {
				agree = false
			}

			agreed = mv.Leader

			if mv.Leader != 0 && withLd == nil {
				withLd = m
			}
		}

		v.Members = append(v.Members, mv)
	}

	if agree && agreed != 0 {
		for _, mv := range v.Members {
			if mv.Running && mv.ID == agreed {
				v.Leader = mv.Node
			}
		}
	}

	if withLd != nil {
		if list, err := withLd.MemberList(ctx); err == nil {
			for _, pm := range list.Members {
				if pm.IsLearner {
					v.Learners = append(v.Learners, pm.Name)
				} else {
					v.Voters = append(v.Voters, pm.Name)
				}
			}
		}
	}

	return v
}

// WaitEtcdHealthy waits until every control plane's etcd service is Running and healthy, all
// agree on one leader, and the membership has exactly voters voting members and no learner:
// the end state of a recovery. It returns the last view, with an error naming what was missing
// when ctx ends first.
func (c *Cluster) WaitEtcdHealthy(ctx context.Context, voters int) (EtcdView, error) {
	t := time.NewTicker(100 * time.Millisecond)
	defer t.Stop()

	for {
		v := c.EtcdView(ctx)

		why := ""

		for _, mv := range v.Members {
			if why == "" && (mv.Service != "Running" || !mv.Healthy) {
				why = fmt.Sprintf("%s: etcd %s (%s)", mv.Node, mv.Service, mv.Message)
			}
		}

		switch {
		case why != "":
		case v.Leader == "":
			why = "no agreed leader"
		case len(v.Voters) != voters || len(v.Learners) > 0:
			why = fmt.Sprintf("voters %v, learners %v; want %d voters", v.Voters, v.Learners, voters)
		default:
			return v, nil
		}

		select {
		case <-ctx.Done():
			return v, fmt.Errorf("sim: etcd not healthy: %s: %w", why, ctx.Err())
		case <-t.C:
		}
	}
}
