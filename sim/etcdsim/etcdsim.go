// Package etcdsim runs a real etcd cluster inside the current process: one
// embedded etcd server (go.etcd.io/etcd/server/v3/embed) per simulated Talos
// control-plane node. The Talos API simulator uses it so that etcd status,
// membership, snapshots, leadership moves and quorum loss behave exactly as
// etcd does, not as a model of it.
//
// Each member listens on its own loopback address (any 127/8 address works on
// Linux without setup), so a member keeps the standard ports 2379/2380 and
// several clusters can run side by side in parallel tests.
//
// Transport is plain HTTP/gRPC without TLS. Everything stays on loopback
// inside one process, so TLS would only add certificate plumbing and start-up
// time without protecting anything; the simulator's own Talos API (the part
// talosbot talks to) is where mTLS matters.
//
// Timing is tuned for loopback: 50 ms heartbeat and 500 ms election timeout
// by default, and fsync is disabled (UnsafeNoFsync) because the data only has
// to survive a simulated reboot (a graceful Close), never a power cut.
// What to expect (2-core machine): Start takes about 0.3 s for one or three
// members (mostly raft's randomised first election); Stop of a member whose
// peers still run takes about 1 s (etcd waits that long for peer streams to
// drain); removing or adding a live member is refused by etcd until its peer
// connections are 5 s old, so Leave, Add and RemoveMember of a running member
// retry for up to ~5 s after a (re)start, as Talos does.
//
// Disaster recovery follows Talos's etcd service (recover.go): Member.Wipe
// loses a member's data, Member.Bootstrap starts a new one-member cluster,
// restored from RecoverySnapshotPath with etcdutl's snapshot.Restore when
// asked, and Member.JoinCluster plus Promote bring an empty member back as a
// learner and then a voter.
//
// etcd's zap logs go to Options.Logger at error level by default. The zap
// and grpc global loggers are never touched (embed.Config.SetupGlobalLoggers
// is not called), so nothing reaches stderr behind the caller's back.
package etcdsim

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/server/v3/embed"
	"go.uber.org/zap"
)

// Default ports used when a MemberSpec leaves ClientPort or PeerPort at 0.
const (
	DefaultClientPort = 2379
	DefaultPeerPort   = 2380
)

const (
	defaultHeartbeat   = 50 * time.Millisecond
	defaultElection    = 500 * time.Millisecond
	defaultCallTimeout = 2 * time.Second
	// defaultStartTimeout bounds Start/Restart when the caller's context has
	// no deadline, so a cluster that can never form fails instead of hanging.
	defaultStartTimeout = time.Minute
	// defaultReconfigTimeout bounds membership changes when the caller's
	// context has no deadline. etcd refuses to remove a live member until
	// its peers have been connected for 5 s, so this must be well above that.
	defaultReconfigTimeout = 30 * time.Second
	pollInterval           = 10 * time.Millisecond
	retryInterval          = 100 * time.Millisecond
)

// Errors callers may want to tell apart with errors.Is.
var (
	// ErrNotRunning: the member's etcd server is stopped.
	ErrNotRunning = errors.New("etcdsim: member is not running")
	// ErrRemoved: the member is no longer part of the etcd membership.
	ErrRemoved = errors.New("etcdsim: member was removed from the etcd cluster")
	// ErrNoTransferee: ForfeitLeadership found no other running voting member.
	ErrNoTransferee = errors.New("etcdsim: no other running voting member can take leadership")
	// ErrLastMember: Leave would remove the only running member.
	ErrLastMember = errors.New("etcdsim: member is the last running member")
)

// MemberSpec describes one member. IP must be a loopback address such as
// 127.31.7.2; ports 0 mean 2379 (client) and 2380 (peer).
type MemberSpec struct {
	Name                 string
	IP                   string
	ClientPort, PeerPort int
}

// Options tune a cluster. The zero value is ready to use.
type Options struct {
	// Logger receives this package's own events and etcd's log entries at
	// EtcdLogLevel or above. Nil discards everything.
	Logger *slog.Logger
	// EtcdLogLevel is the threshold for etcd's own zap logging: "debug",
	// "info", "warn" or "error". Empty means "error": etcd is very chatty.
	EtcdLogLevel string
	// HeartbeatInterval and ElectionTimeout default to 50 ms and 500 ms.
	// Raise them on a heavily loaded machine if leaders flap.
	HeartbeatInterval, ElectionTimeout time.Duration
	// CallTimeout bounds each client call (Status, MemberList, ...) so that a
	// member without a leader or a stopped member answers promptly. Default 2 s.
	CallTimeout time.Duration
}

// Cluster is a set of embedded etcd members forming one etcd cluster.
type Cluster struct {
	dir   string
	token string
	opts  Options
	lg    *slog.Logger
	zlg   *zap.Logger

	mu      sync.Mutex
	members []*Member
}

// Start forms a new cluster (static bootstrap) from specs, with data
// directories under dir/<name>. All members form it together (none waits for
// another to be ready); Start returns once every member serves client
// requests and all agree on one leader. A member whose data directory already
// holds etcd data resumes from it, so Close followed by Start on the same dir
// and specs brings the same cluster back.
//
// Start takes at most a minute when ctx has no deadline.
func Start(ctx context.Context, dir string, specs []MemberSpec, opts Options) (*Cluster, error) {
	c, err := newCluster(dir, specs, opts)
	if err != nil {
		return nil, err
	}
	ctx, cancel := withDefaultTimeout(ctx, defaultStartTimeout)
	defer cancel()

	began := time.Now()
	// Launch members one after another, then wait for all of them together.
	// Launching is quick and does not need the other members, but a member
	// launched while a peer's port is bound and not yet served spends a
	// full second probing that peer for an existing cluster; in order, each
	// probe meets either a closed port or a serving peer.
	launched := make([]*embed.Etcd, len(c.members))
	var errs []error
	for i, m := range c.members {
		e, err := m.launch(embed.ClusterStateFlagNew, c.initialCluster())
		if err != nil {
			errs = append(errs, err)
			break
		}
		launched[i] = e
	}
	if len(errs) == 0 {
		errs = make([]error, len(c.members))
		var wg sync.WaitGroup
		for i, m := range c.members {
			wg.Go(func() { errs[i] = m.awaitReady(ctx, launched[i]) })
		}
		wg.Wait()
	} else {
		for _, e := range launched {
			if e != nil {
				closeUnready(e) // these never reach quorum: a later member did not start
			}
		}
	}
	if err := errors.Join(errs...); err != nil {
		_ = c.Close()
		return nil, fmt.Errorf("etcdsim: start cluster: %w", err)
	}
	if _, err := c.WaitLeader(ctx); err != nil {
		_ = c.Close()
		return nil, fmt.Errorf("etcdsim: start cluster: %w", err)
	}
	c.lg.Info("etcd cluster started", "members", len(c.members), "took", time.Since(began))
	return c, nil
}

func newCluster(dir string, specs []MemberSpec, opts Options) (*Cluster, error) {
	if len(specs) == 0 {
		return nil, errors.New("etcdsim: no members given; pass at least one MemberSpec")
	}
	if dir == "" {
		return nil, errors.New("etcdsim: empty data directory; pass a directory such as t.TempDir()")
	}
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	if opts.HeartbeatInterval <= 0 {
		opts.HeartbeatInterval = defaultHeartbeat
	}
	if opts.ElectionTimeout <= 0 {
		opts.ElectionTimeout = defaultElection
	}
	if opts.ElectionTimeout < 5*opts.HeartbeatInterval {
		return nil, fmt.Errorf("etcdsim: ElectionTimeout %v must be at least 5×HeartbeatInterval (%v)", opts.ElectionTimeout, opts.HeartbeatInterval)
	}
	if opts.CallTimeout <= 0 {
		opts.CallTimeout = defaultCallTimeout
	}
	zlg, err := newZapLogger(opts.Logger, opts.EtcdLogLevel)
	if err != nil {
		return nil, err
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("etcdsim: create data directory: %w", err)
	}
	var tok [8]byte
	if _, err := rand.Read(tok[:]); err != nil {
		return nil, fmt.Errorf("etcdsim: cluster token: %w", err)
	}
	c := &Cluster{
		dir: dir,
		// A token unique per cluster keeps members of two clusters that
		// happen to share addresses from ever joining each other.
		token: "etcdsim-" + hex.EncodeToString(tok[:]),
		opts:  opts,
		lg:    opts.Logger,
		zlg:   zlg,
	}
	names := map[string]bool{}
	addrs := map[string]bool{}
	for _, s := range specs {
		m, err := c.newMember(s)
		if err != nil {
			return nil, err
		}
		if names[s.Name] {
			return nil, fmt.Errorf("etcdsim: duplicate member name %q; names must be unique", s.Name)
		}
		names[s.Name] = true
		for _, a := range []string{m.clientURL.Host, m.peerURL.Host} {
			if addrs[a] {
				return nil, fmt.Errorf("etcdsim: address %s used twice; give each member its own loopback IP", a)
			}
			addrs[a] = true
		}
		c.members = append(c.members, m)
	}
	return c, nil
}

func (c *Cluster) newMember(s MemberSpec) (*Member, error) {
	if s.Name == "" || s.Name == "." || s.Name == ".." || strings.ContainsAny(s.Name, `/\,=`) {
		return nil, fmt.Errorf("etcdsim: member name %q is not usable; use a plain name such as cp-1", s.Name)
	}
	ip := net.ParseIP(s.IP)
	if ip == nil || !ip.IsLoopback() || ip.To4() == nil {
		return nil, fmt.Errorf("etcdsim: member %s: IP %q is not an IPv4 loopback address; use one in 127.0.0.0/8 such as 127.31.7.2", s.Name, s.IP)
	}
	if s.ClientPort == 0 {
		s.ClientPort = DefaultClientPort
	}
	if s.PeerPort == 0 {
		s.PeerPort = DefaultPeerPort
	}
	for _, p := range []int{s.ClientPort, s.PeerPort} {
		if p < 1 || p > 65535 {
			return nil, fmt.Errorf("etcdsim: member %s: port %d out of range", s.Name, p)
		}
	}
	if s.ClientPort == s.PeerPort {
		return nil, fmt.Errorf("etcdsim: member %s: client and peer port are both %d; use different ports", s.Name, s.PeerPort)
	}
	s.IP = ip.String()
	return &Member{
		c:         c,
		spec:      s,
		dir:       filepath.Join(c.dir, s.Name),
		clientURL: url.URL{Scheme: "http", Host: net.JoinHostPort(s.IP, strconv.Itoa(s.ClientPort))},
		peerURL:   url.URL{Scheme: "http", Host: net.JoinHostPort(s.IP, strconv.Itoa(s.PeerPort))},
	}, nil
}

// initialCluster renders "name=peerURL,..." for every member still in the
// membership. etcd only reads it when a data directory is new; a member
// restarting from its own data takes the membership from its WAL.
func (c *Cluster) initialCluster() string {
	var parts []string
	for _, m := range c.Members() {
		if !m.isRemoved() {
			parts = append(parts, m.spec.Name+"="+m.peerURL.String())
		}
	}
	return strings.Join(parts, ",")
}

// config builds the embed.Config of one member.
func (c *Cluster) config(m *Member, state, initialCluster string) *embed.Config {
	cfg := embed.NewConfig()
	cfg.Name = m.spec.Name
	cfg.Dir = m.dir
	cfg.ListenClientUrls = []url.URL{m.clientURL}
	cfg.AdvertiseClientUrls = []url.URL{m.clientURL}
	cfg.ListenPeerUrls = []url.URL{m.peerURL}
	cfg.AdvertisePeerUrls = []url.URL{m.peerURL}
	cfg.InitialCluster = initialCluster
	cfg.InitialClusterToken = c.token
	cfg.ClusterState = state
	cfg.TickMs = uint(c.opts.HeartbeatInterval / time.Millisecond)
	cfg.ElectionMs = uint(c.opts.ElectionTimeout / time.Millisecond)
	cfg.UnsafeNoFsync = true
	cfg.QuotaBackendBytes = m.Quota()
	cfg.EnableGRPCGateway = false
	cfg.LogLevel = "error"
	if c.opts.EtcdLogLevel != "" {
		cfg.LogLevel = strings.ToLower(c.opts.EtcdLogLevel)
	}
	cfg.ZapLoggerBuilder = embed.NewZapLoggerBuilder(c.zlg.With(zap.String("member", m.spec.Name)))
	return cfg
}

// Member returns the member called name, or nil.
func (c *Cluster) Member(name string) *Member {
	for _, m := range c.Members() {
		if m.spec.Name == name {
			return m
		}
	}
	return nil
}

// Members returns every member in start order, running or not.
func (c *Cluster) Members() []*Member {
	c.mu.Lock()
	defer c.mu.Unlock()
	return slices.Clone(c.members)
}

// MemberByID returns the member with etcd member ID id, or nil.
func (c *Cluster) MemberByID(id uint64) *Member {
	if id == 0 {
		return nil // "no leader", never a member
	}
	for _, m := range c.Members() {
		if m.ID() == id {
			return m
		}
	}
	return nil
}

// Client returns a client over the client URLs of all running members, for
// tests to Put and Get keys. The caller closes it. ctx is only checked: the
// client outlives it.
func (c *Cluster) Client(ctx context.Context) (*clientv3.Client, error) {
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("etcdsim: client: %w", err)
	}
	var eps []string
	for _, m := range c.Members() {
		if m.Running() {
			eps = append(eps, m.ClientURL())
		}
	}
	if len(eps) == 0 {
		return nil, fmt.Errorf("etcdsim: client: %w: no member is running; Restart one first", ErrNotRunning)
	}
	return c.newClient(eps)
}

func (c *Cluster) newClient(endpoints []string) (*clientv3.Client, error) {
	cli, err := clientv3.New(clientv3.Config{
		Endpoints:   endpoints,
		DialTimeout: c.opts.CallTimeout,
		Logger:      c.zlg.Named("client"),
		// AutoSyncInterval stays 0: a member's own client must never drift
		// to other members' endpoints.
	})
	if err != nil {
		return nil, fmt.Errorf("etcdsim: create client for %v: %w", endpoints, err)
	}
	return cli, nil
}

// WaitLeader waits until every running member reports the same leader and
// that leader is one of them, and returns the leader's ID.
func (c *Cluster) WaitLeader(ctx context.Context) (uint64, error) {
	t := time.NewTicker(pollInterval)
	defer t.Stop()
	for {
		lead, view := c.agreedLeader()
		if lead != 0 {
			return lead, nil
		}
		select {
		case <-ctx.Done():
			return 0, fmt.Errorf("etcdsim: members did not agree on a leader (%s): %w", view, ctx.Err())
		case <-t.C:
		}
	}
}

// agreedLeader returns the leader all running members see (0 if none or if
// they disagree) and a description of each member's view for error messages.
func (c *Cluster) agreedLeader() (uint64, string) {
	var (
		lead    uint64
		agree   = true
		running = map[uint64]bool{}
		view    []string
	)
	for _, m := range c.Members() {
		e := m.server()
		if e == nil {
			view = append(view, m.spec.Name+": stopped")
			continue
		}
		l := uint64(e.Server.Leader())
		running[uint64(e.Server.MemberID())] = true
		view = append(view, fmt.Sprintf("%s sees leader %x", m.spec.Name, l))
		if l == 0 || (lead != 0 && l != lead) {
			agree = false
		}
		lead = l
	}
	if !agree || !running[lead] {
		return 0, strings.Join(view, ", ")
	}
	return lead, strings.Join(view, ", ")
}

// RestartStopped restarts every stopped member that is still in the
// membership, concurrently. Use it after stopping a majority: a single
// Restart cannot finish then, because a member only serves once a quorum
// is back.
func (c *Cluster) RestartStopped(ctx context.Context) error {
	var (
		wg   sync.WaitGroup
		mu   sync.Mutex
		errs []error
	)
	for _, m := range c.Members() {
		if m.Running() || m.isRemoved() {
			continue
		}
		wg.Go(func() {
			if err := m.Restart(ctx); err != nil {
				mu.Lock()
				errs = append(errs, err)
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	return errors.Join(errs...)
}

// Close stops every member, keeping data directories. Followers stop first so
// that the leader does not spend its shutdown handing leadership to a member
// that is itself going away.
func (c *Cluster) Close() error {
	ms := c.Members()
	lead, _ := c.agreedLeader()
	var last []*Member
	var wg sync.WaitGroup
	errs := make([]error, len(ms))
	for i, m := range ms {
		if lead != 0 && m.ID() == lead {
			last = append(last, m)
			continue
		}
		wg.Go(func() { errs[i] = m.Stop() })
	}
	wg.Wait()
	for _, m := range last {
		errs = append(errs, m.Stop())
	}
	return errors.Join(errs...)
}

func withDefaultTimeout(ctx context.Context, d time.Duration) (context.Context, context.CancelFunc) {
	if _, ok := ctx.Deadline(); ok {
		return context.WithCancel(ctx)
	}
	return context.WithTimeout(ctx, d)
}

// startHint turns common start failures into advice.
func startHint(err error, m *Member) string {
	if errors.Is(err, syscall.EADDRINUSE) {
		return fmt.Sprintf(" (address %s or %s is taken; give this member another loopback IP)", m.clientURL.Host, m.peerURL.Host)
	}
	return ""
}

// sortedMembers returns ms ordered by name, for deterministic choices.
func sortedMembers(ms []*Member) []*Member {
	sort.Slice(ms, func(i, j int) bool { return ms[i].spec.Name < ms[j].spec.Name })
	return ms
}
