package etcdsim

import (
	"context"
	"errors"
	"fmt"
	"os"
	"slices"
	"strings"
	"time"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/server/v3/embed"
	"k8s.io/apimachinery/pkg/util/wait"
)

// Add joins a new member to the running cluster the way a Talos control plane
// joins an existing cluster: added as a learner, started, and promoted to a
// voting member once it has caught up. It returns when the member votes.
// Like every membership change it may wait up to ~5 s right after a start
// (see Leave).
func (c *Cluster) Add(ctx context.Context, spec MemberSpec) (*Member, error) {
	m, err := c.AddLearner(ctx, spec)
	if err != nil {
		return nil, err
	}
	if err := m.Promote(ctx); err != nil {
		return m, err
	}
	return m, nil
}

// AddLearner adds a new member as a non-voting learner and starts it; call
// Promote to make it vote. A learner answers Status and serializable reads
// only, which is the window the "wait until voting member" check watches.
func (c *Cluster) AddLearner(ctx context.Context, spec MemberSpec) (*Member, error) {
	m, err := c.newMember(spec)
	if err != nil {
		return nil, err
	}
	m.removed = true // not in the membership until the add succeeds
	c.mu.Lock()
	for _, o := range c.members {
		switch {
		case o.spec.Name == m.spec.Name:
			c.mu.Unlock()
			return nil, fmt.Errorf("etcdsim: add member: name %q is taken; use Rejoin for a member that left", m.spec.Name)
		case o.clientURL.Host == m.clientURL.Host || o.peerURL.Host == m.peerURL.Host || o.clientURL.Host == m.peerURL.Host || o.peerURL.Host == m.clientURL.Host:
			c.mu.Unlock()
			return nil, fmt.Errorf("etcdsim: add member %s: address of %s reused; give it its own loopback IP", m.spec.Name, o.spec.Name)
		}
	}
	c.members = append(c.members, m)
	c.mu.Unlock()

	m.opMu.Lock()
	defer m.opMu.Unlock()
	if err := m.join(ctx); err != nil {
		c.mu.Lock()
		c.members = slices.DeleteFunc(c.members, func(x *Member) bool { return x == m })
		c.mu.Unlock()
		return nil, err
	}
	return m, nil
}

// Rejoin brings back a member that left or was removed, as a reinstalled
// node would: empty data directory, new member ID, learner first, then
// promoted. It returns when the member votes.
func (m *Member) Rejoin(ctx context.Context) error {
	err := func() error {
		m.opMu.Lock()
		defer m.opMu.Unlock()
		if !m.isRemoved() {
			return fmt.Errorf("etcdsim: member %s: rejoin: still in the membership; Leave or RemoveMember first", m.spec.Name)
		}
		m.shutdown(true)
		return m.join(ctx)
	}()
	if err != nil {
		return err
	}
	return m.Promote(ctx)
}

// join adds m as a learner through the running members and starts it from an
// empty data directory. The caller holds opMu; m is removed and stopped.
func (m *Member) join(ctx context.Context) error {
	var eps []string
	for _, o := range m.c.Members() {
		if o != m && o.Running() {
			eps = append(eps, o.ClientURL())
		}
	}
	if len(eps) == 0 {
		return fmt.Errorf("etcdsim: member %s: join: %w: no running member to join through; Restart one first", m.spec.Name, ErrNotRunning)
	}
	ctx, cancel := withDefaultTimeout(ctx, defaultReconfigTimeout)
	defer cancel()
	cli, err := m.c.newClient(eps)
	if err != nil {
		return err
	}
	defer cli.Close()

	var resp *clientv3.MemberAddResponse
	if err := m.c.retryReconfig(ctx, func(ctx context.Context) (err error) {
		resp, err = cli.MemberAddAsLearner(ctx, []string{m.PeerURL()})
		return err
	}); err != nil {
		return fmt.Errorf("etcdsim: member %s: add as learner: %w", m.spec.Name, err)
	}
	newID := resp.Member.ID
	rollback := func(cause error) error {
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), m.c.opts.CallTimeout)
		defer cancel()
		if err := m.c.removeMember(rctx, cli, newID); err != nil {
			return errors.Join(cause, fmt.Errorf("etcdsim: member %s: undo add of %x: %w", m.spec.Name, newID, err))
		}
		return cause
	}

	// A joining member must be told the whole current membership; etcd
	// checks it against what the cluster reports.
	var parts []string
	for _, pm := range resp.Members {
		name := pm.Name
		switch {
		case pm.ID == newID:
			name = m.spec.Name
		case name == "":
			name = fmt.Sprintf("unstarted-%x", pm.ID)
		}
		for _, u := range pm.PeerURLs {
			parts = append(parts, name+"="+u)
		}
	}
	if err := os.RemoveAll(m.dir); err != nil {
		return rollback(fmt.Errorf("etcdsim: member %s: clear data dir: %w", m.spec.Name, err))
	}
	e, err := m.launch(embed.ClusterStateFlagExisting, strings.Join(parts, ","))
	if err != nil {
		return rollback(err)
	}
	if err := m.awaitReady(ctx, e); err != nil {
		return rollback(err)
	}
	m.mu.Lock()
	m.removed = false
	m.mu.Unlock()
	m.c.lg.Info("etcd member joined as learner", "member", m.spec.Name, "id", fmt.Sprintf("%x", newID))
	return nil
}

// IsLearner reports whether the running member is a non-voting learner.
func (m *Member) IsLearner() bool {
	e := m.server()
	return e != nil && e.Server.IsLearner()
}

// Promote makes a learner a voting member, retrying while etcd reports it is
// not yet in sync with the leader. Promoting a voting member does nothing.
func (m *Member) Promote(ctx context.Context) error {
	var eps []string
	for _, o := range m.c.Members() {
		if o != m && o.Running() && !o.IsLearner() {
			eps = append(eps, o.ClientURL())
		}
	}
	if len(eps) == 0 {
		return fmt.Errorf("etcdsim: member %s: promote: %w: no running voting member", m.spec.Name, ErrNotRunning)
	}
	ctx, cancel := withDefaultTimeout(ctx, defaultReconfigTimeout)
	defer cancel()
	cli, err := m.c.newClient(eps)
	if err != nil {
		return err
	}
	defer cli.Close()
	id := m.ID()
	err = m.c.retryReconfig(ctx, func(ctx context.Context) error {
		_, err := cli.MemberPromote(ctx, id)
		if errors.Is(err, rpctypes.ErrMemberNotLearner) {
			return nil
		}
		return err
	})
	if err != nil {
		return fmt.Errorf("etcdsim: member %s: promote: %w", m.spec.Name, err)
	}
	// The cluster has accepted the promotion; the member itself learns of it
	// when it applies the conf change. Return once it votes, so callers (and
	// Rejoin) never see a promoted member that still calls itself a learner.
	if err := wait.PollUntilContextCancel(ctx, 10*time.Millisecond, true, func(context.Context) (bool, error) {
		return !m.IsLearner(), nil
	}); err != nil {
		return fmt.Errorf("etcdsim: member %s: promote: promoted, but the member did not apply it: %w", m.spec.Name, err)
	}
	return nil
}
