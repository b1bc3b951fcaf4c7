package etcdsim

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/url"
	"os"
	"sync"
	"time"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/server/v3/embed"
)

// Member is one embedded etcd server. Its methods are safe for concurrent
// use; lifecycle changes (Stop, Restart, Leave, removal) are serialised.
type Member struct {
	c         *Cluster
	spec      MemberSpec
	dir       string
	clientURL url.URL
	peerURL   url.URL

	// opMu serialises lifecycle changes so that, for example, Restart never
	// binds the ports while a Stop is still releasing them.
	opMu sync.Mutex

	mu      sync.Mutex // guards the fields below; never held across I/O
	e       *embed.Etcd
	cli     *clientv3.Client // client on this member's endpoint only
	id      uint64
	removed bool
	quota   int64 // --quota-backend-bytes, 0: etcd's default (quota.go)
}

// Name is the etcd member name.
func (m *Member) Name() string { return m.spec.Name }

// Spec returns the member's spec with default ports filled in.
func (m *Member) Spec() MemberSpec { return m.spec }

// DataDir is the member's etcd data directory (dir/<name>).
func (m *Member) DataDir() string { return m.dir }

// ID is the etcd member ID; it is known once the member has started and is
// kept while the member is stopped.
func (m *Member) ID() uint64 {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.id
}

// ClientURL is the member's client URL, such as http://127.31.7.2:2379.
func (m *Member) ClientURL() string { return m.clientURL.String() }

// PeerURL is the member's peer URL, such as http://127.31.7.2:2380.
func (m *Member) PeerURL() string { return m.peerURL.String() }

// Running reports whether the member's etcd server is up. A server that
// stopped by itself (for example because another member removed it) counts
// as not running.
func (m *Member) Running() bool {
	e := m.server()
	if e == nil {
		return false
	}
	select {
	case <-e.Server.StopNotify():
		return false
	default:
		return true
	}
}

// KnowsLeader reports whether the running member currently follows or is a
// leader. After a majority stops, the survivor keeps its old leader until
// raft's election timeout (CheckQuorum) makes it step down.
func (m *Member) KnowsLeader() bool {
	e := m.server()
	return e != nil && e.Server.Leader() != 0
}

// Removed reports whether the member left or was removed from the membership.
func (m *Member) Removed() bool { return m.isRemoved() }

func (m *Member) isRemoved() bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.removed
}

func (m *Member) server() *embed.Etcd {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.e
}

// start launches the etcd server and waits until it serves client requests.
// The caller holds opMu or has exclusive access to m.
func (m *Member) start(ctx context.Context, state, initialCluster string) error {
	e, err := m.launch(state, initialCluster)
	if err != nil {
		return err
	}
	return m.awaitReady(ctx, e)
}

// launch starts the etcd server without waiting for it to be ready; that
// needs a quorum, so for a new cluster every member must be launched first.
func (m *Member) launch(state, initialCluster string) (*embed.Etcd, error) {
	if err := os.MkdirAll(m.dir, 0o700); err != nil {
		return nil, fmt.Errorf("etcdsim: member %s: create data dir: %w", m.spec.Name, err)
	}
	e, err := embed.StartEtcd(m.c.config(m, state, initialCluster))
	if err != nil {
		return nil, fmt.Errorf("etcdsim: member %s: start etcd: %w%s", m.spec.Name, err, startHint(err, m))
	}
	return e, nil
}

// awaitReady waits until e serves client requests and then records it as
// the member's running server. On failure it closes e.
func (m *Member) awaitReady(ctx context.Context, e *embed.Etcd) error {
	select {
	case <-e.Server.ReadyNotify():
	case err := <-e.Err():
		closeUnready(e)
		return fmt.Errorf("etcdsim: member %s: etcd failed while starting: %w", m.spec.Name, err)
	case <-e.Server.StopNotify():
		closeUnready(e)
		return fmt.Errorf("etcdsim: member %s: etcd stopped while starting (was it removed from the cluster?)", m.spec.Name)
	case <-ctx.Done():
		closeUnready(e)
		return fmt.Errorf("etcdsim: member %s: not ready (a member only serves once a quorum of members runs): %w", m.spec.Name, ctx.Err())
	}
	m.mu.Lock()
	m.e = e
	m.id = uint64(e.Server.MemberID())
	m.mu.Unlock()
	m.c.lg.Debug("etcd member started", "member", m.spec.Name, "id", fmt.Sprintf("%x", m.ID()))
	return nil
}

// closeUnready closes a server that may never have become ready. embed.Etcd.Close first
// waits until the client listeners are served or the server is stopping (etcd v3.7
// embed/etcd.go Close ranging over serversC, embed/serve.go serve's select on ReadyNotify
// and StoppingNotify), and a member only becomes ready once its own registration is
// committed, which needs a quorum. Its peers may already be gone (a Ctrl-C during the
// demo's start closes every member at once), so Close could wait forever. HardStop ends
// the server's run loop first; it returns at once on a server that already stopped, and
// skips the leadership hand-over a member without a cluster cannot make.
func closeUnready(e *embed.Etcd) {
	e.Server.HardStop()
	e.Close()
}

// client returns the cached client bound to this member's endpoint only.
func (m *Member) client() (*clientv3.Client, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.e == nil {
		return nil, fmt.Errorf("etcdsim: member %s: %w", m.spec.Name, ErrNotRunning)
	}
	if m.cli == nil {
		cli, err := m.c.newClient([]string{m.clientURL.String()})
		if err != nil {
			return nil, err
		}
		m.cli = cli
	}
	return m.cli, nil
}

// call runs f with this member's client under the per-call timeout.
func (m *Member) call(ctx context.Context, what string, f func(context.Context, *clientv3.Client) error) error {
	cli, err := m.client()
	if err != nil {
		return err
	}
	cctx, cancel := context.WithTimeout(ctx, m.c.opts.CallTimeout)
	defer cancel()
	if err := f(cctx, cli); err != nil {
		return fmt.Errorf("etcdsim: member %s: %s: %w", m.spec.Name, what, err)
	}
	return nil
}

// Status is the maintenance Status RPC on this member's own endpoint. A
// member without a leader answers with Leader 0 and "etcdserver: no leader"
// in Errors.
func (m *Member) Status(ctx context.Context) (*clientv3.StatusResponse, error) {
	var resp *clientv3.StatusResponse
	err := m.call(ctx, "status", func(ctx context.Context, cli *clientv3.Client) (err error) {
		resp, err = cli.Status(ctx, m.clientURL.String())
		return err
	})
	return resp, err
}

// MemberList is the linearizable member list as seen through this member; it
// needs a leader.
func (m *Member) MemberList(ctx context.Context) (*clientv3.MemberListResponse, error) {
	var resp *clientv3.MemberListResponse
	err := m.call(ctx, "member list", func(ctx context.Context, cli *clientv3.Client) (err error) {
		resp, err = cli.MemberList(ctx)
		return err
	})
	return resp, err
}

// MemberListSerializable is this member's local view of the membership; it
// answers without a leader.
func (m *Member) MemberListSerializable(ctx context.Context) (*clientv3.MemberListResponse, error) {
	var resp *clientv3.MemberListResponse
	err := m.call(ctx, "member list (serializable)", func(ctx context.Context, cli *clientv3.Client) (err error) {
		resp, err = cli.MemberList(ctx, clientv3.WithSerializable())
		return err
	})
	return resp, err
}

// AlarmList lists active alarms (it goes through raft, so it needs a leader).
func (m *Member) AlarmList(ctx context.Context) (*clientv3.AlarmResponse, error) {
	var resp *clientv3.AlarmResponse
	err := m.call(ctx, "alarm list", func(ctx context.Context, cli *clientv3.Client) (err error) {
		resp, err = cli.AlarmList(ctx)
		return err
	})
	return resp, err
}

// Snapshot streams this member's backend database as etcd sends it: the
// bbolt file followed by a 32-byte sha256 trailer. ctx governs the whole
// stream (no per-call timeout); the caller closes the reader.
func (m *Member) Snapshot(ctx context.Context) (io.ReadCloser, error) {
	cli, err := m.client()
	if err != nil {
		return nil, err
	}
	rc, err := cli.Snapshot(ctx)
	if err != nil {
		return nil, fmt.Errorf("etcdsim: member %s: snapshot: %w", m.spec.Name, err)
	}
	return rc, nil
}

// Healthy returns nil when the member serves a linearizable read within the
// call timeout, like `etcdctl endpoint health`. A member that knows it has
// no leader fails at once with rpctypes.ErrNoLeader.
func (m *Member) Healthy(ctx context.Context) error {
	// Without a leader the read could only time out; say so at once.
	if e := m.server(); e != nil && e.Server.Leader() == 0 {
		return fmt.Errorf("etcdsim: member %s: health check: %w", m.spec.Name, rpctypes.ErrNoLeader)
	}
	return m.call(ctx, "health check", func(ctx context.Context, cli *clientv3.Client) error {
		_, err := cli.Get(ctx, "health")
		if errors.Is(err, rpctypes.ErrPermissionDenied) {
			return nil // answered, so raft works; auth is not our concern
		}
		return err
	})
}

// ForfeitLeadership moves leadership to another running voting member if this
// member leads and returns the new leader's ID. If it does not lead, it
// changes nothing and returns the current leader. If it leads but no other
// running voting member exists, it returns its own ID and ErrNoTransferee.
func (m *Member) ForfeitLeadership(ctx context.Context) (uint64, error) {
	st, err := m.Status(ctx)
	if err != nil {
		return 0, err
	}
	self := st.Header.MemberId
	if st.Leader != self {
		return st.Leader, nil
	}
	list, err := m.MemberListSerializable(ctx)
	if err != nil {
		return 0, err
	}
	voting := map[uint64]bool{}
	for _, pm := range list.Members {
		if !pm.IsLearner {
			voting[pm.ID] = true
		}
	}
	var lastErr error
	for _, cand := range sortedMembers(m.c.Members()) {
		id := cand.ID()
		if cand == m || id == self || !voting[id] || !cand.Running() {
			continue
		}
		err := m.call(ctx, "move leader", func(ctx context.Context, cli *clientv3.Client) error {
			_, err := cli.MoveLeader(ctx, id)
			return err
		})
		if err == nil {
			m.c.lg.Info("etcd leadership moved", "from", m.spec.Name, "to", cand.spec.Name)
			return id, nil
		}
		lastErr = err
	}
	if lastErr != nil {
		return 0, lastErr
	}
	return self, fmt.Errorf("etcdsim: member %s: %w", m.spec.Name, ErrNoTransferee)
}

// Leave does what a graceful Talos reset does to etcd: hand off leadership if
// this member leads, remove the member from the membership through the other
// members, stop its server and wipe its data directory. It retries while etcd
// answers "unhealthy cluster" (etcd refuses to remove a live member until its
// peers have been connected for 5 s) and gives up when ctx ends (after 30 s
// when ctx has no deadline).
func (m *Member) Leave(ctx context.Context) error {
	m.opMu.Lock()
	defer m.opMu.Unlock()
	if m.isRemoved() {
		return fmt.Errorf("etcdsim: member %s: leave: %w", m.spec.Name, ErrRemoved)
	}
	if !m.Running() {
		return fmt.Errorf("etcdsim: member %s: leave: %w; Restart it first or remove it from another member with RemoveMember", m.spec.Name, ErrNotRunning)
	}
	var eps []string
	for _, o := range m.c.Members() {
		if o != m && o.Running() {
			eps = append(eps, o.ClientURL())
		}
	}
	if len(eps) == 0 {
		return fmt.Errorf("etcdsim: member %s: leave: %w; etcd cannot remove the only member (use Stop, or a non-graceful reset)", m.spec.Name, ErrLastMember)
	}
	ctx, cancel := withDefaultTimeout(ctx, defaultReconfigTimeout)
	defer cancel()
	if _, err := m.ForfeitLeadership(ctx); err != nil && !errors.Is(err, ErrNoTransferee) {
		// Not fatal: removal works from a leader too; Talos also goes on.
		m.c.lg.Warn("etcd forfeit leadership before leave failed", "member", m.spec.Name, "err", err)
	}
	cli, err := m.c.newClient(eps)
	if err != nil {
		return err
	}
	defer cli.Close()
	if err := m.c.removeMember(ctx, cli, m.ID()); err != nil {
		return fmt.Errorf("etcdsim: member %s: leave: %w", m.spec.Name, err)
	}
	m.shutdown(true)
	if err := os.RemoveAll(m.dir); err != nil {
		return fmt.Errorf("etcdsim: member %s: wipe data dir: %w", m.spec.Name, err)
	}
	m.c.lg.Info("etcd member left the cluster", "member", m.spec.Name)
	return nil
}

// RemoveMember removes member id through this member (etcdctl member remove).
// If id belongs to a member of this cluster, that member's server is stopped,
// as etcd does to a removed member; its data directory stays, unusable, like
// the disk of a node that was removed without a reset.
func (m *Member) RemoveMember(ctx context.Context, id uint64) error {
	cli, err := m.client()
	if err != nil {
		return err
	}
	ctx, cancel := withDefaultTimeout(ctx, defaultReconfigTimeout)
	defer cancel()
	if err := m.c.removeMember(ctx, cli, id); err != nil {
		return fmt.Errorf("etcdsim: member %s: remove member %x: %w", m.spec.Name, id, err)
	}
	if t := m.c.MemberByID(id); t != nil {
		t.opMu.Lock()
		t.shutdown(true)
		t.opMu.Unlock()
	}
	return nil
}

// removeMember calls MemberRemove until it succeeds, the member is already
// gone, etcd refuses for quorum reasons, or ctx ends.
func (c *Cluster) removeMember(ctx context.Context, cli *clientv3.Client, id uint64) error {
	return c.retryReconfig(ctx, func(ctx context.Context) error {
		_, err := cli.MemberRemove(ctx, id)
		if errors.Is(err, rpctypes.ErrMemberNotFound) {
			return nil
		}
		return err
	})
}

// retryReconfig runs a membership change until it succeeds, etcd refuses it
// for quorum reasons, or ctx ends. Other errors are retried: typically
// "unhealthy cluster" (etcd only reconfigures once peers have been connected
// for 5 s) or a leader election in progress.
func (c *Cluster) retryReconfig(ctx context.Context, f func(context.Context) error) error {
	t := time.NewTimer(0)
	defer t.Stop()
	for {
		cctx, cancel := context.WithTimeout(ctx, c.opts.CallTimeout)
		err := f(cctx)
		cancel()
		switch {
		case err == nil:
			return nil
		case errors.Is(err, rpctypes.ErrMemberNotEnoughStarted):
			return fmt.Errorf("%w: fewer members would be started than a quorum needs; start the stopped members first", err)
		case errors.Is(err, rpctypes.ErrMemberNotLearner), errors.Is(err, rpctypes.ErrPeerURLExist), errors.Is(err, rpctypes.ErrMemberExist):
			return err
		}
		t.Reset(retryInterval)
		select {
		case <-ctx.Done():
			return fmt.Errorf("gave up: %w (last error: %w)", ctx.Err(), err)
		case <-t.C:
		}
	}
}

// shutdown stops the server and forgets the client. The caller holds opMu.
func (m *Member) shutdown(removed bool) {
	m.mu.Lock()
	e, cli := m.e, m.cli
	m.e, m.cli = nil, nil
	if removed {
		m.removed = true
	}
	m.mu.Unlock()
	if cli != nil {
		_ = cli.Close()
	}
	if e != nil {
		e.Close()
	}
}

// Stop stops the server like a reboot or power-off would, keeping the data
// directory. etcd hands leadership to a connected peer first if this member
// leads. The ports are free when Stop returns.
func (m *Member) Stop() error {
	m.opMu.Lock()
	defer m.opMu.Unlock()
	m.shutdown(false)
	m.c.lg.Debug("etcd member stopped", "member", m.spec.Name)
	return nil
}

// Restart starts the member again from its data directory and returns once it
// serves client requests. That needs a quorum: after stopping a majority use
// Cluster.RestartStopped, which restarts them together. Restart of a running
// member does nothing.
func (m *Member) Restart(ctx context.Context) error {
	m.opMu.Lock()
	defer m.opMu.Unlock()
	if m.isRemoved() {
		return fmt.Errorf("etcdsim: member %s: restart: %w; it cannot come back with its old identity", m.spec.Name, ErrRemoved)
	}
	if m.Running() {
		return nil
	}
	m.shutdown(false) // a server that stopped by itself still holds its ports
	ctx, cancel := withDefaultTimeout(ctx, defaultStartTimeout)
	defer cancel()
	return m.start(ctx, embed.ClusterStateFlagExisting, m.c.initialCluster())
}
