// Package sim is a simulated Talos cluster for tests and demos. Every node serves the Talos API
// on its own loopback address, port 50000, with mTLS, so the official machinery client works
// against it unchanged: apid-style routing ("node"/"nodes" metadata), MachineService, ImageService,
// LifecycleService, ClusterService.HealthCheck and the COSI resource API (cosi.go, resources.go).
// Control-plane nodes are backed by a real
// embedded etcd cluster (sim/etcdsim). Reboots, upgrades, rollbacks and resets close the node's
// listener, bounce its etcd member and emit Talos-shaped events. Faults are injectable from Go
// (Inject/Clear) and over a loopback HTTP control API (ServeControl). See docs/SIMULATOR.md.
package sim

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"sync"
	"syscall"
	"time"

	"github.com/siderolabs/crypto/x509"
	machineapi "github.com/siderolabs/talos/pkg/machinery/api/machine"
	clientconfig "github.com/siderolabs/talos/pkg/machinery/client/config"
	"k8s.io/client-go/kubernetes"

	"github.com/talosbot/talosbot/sim/etcdsim"
)

// apidPort is Talos's API port.
const apidPort = 50000

// Defaults for Options.
const (
	DefaultTalosVersion      = "v1.12.6"
	DefaultKubernetesVersion = "v1.35.2"
	DefaultRebootDelay       = 500 * time.Millisecond
	DefaultHostLabel         = "topology.kubernetes.io/zone"
	DefaultClusterName       = "talosbot-sim"
	DefaultInstallerClass    = "default"
	DefaultDrainTimeout      = 30 * time.Second
	// DefaultHealthCheckInterval is pkg/cluster/check's polling interval.
	DefaultHealthCheckInterval = 5 * time.Second
	DefaultBootDuration        = 200 * time.Millisecond
)

// DefaultSchematic is the Image Factory schematic id the sim's installer images use.
var DefaultSchematic = func() string {
	s := sha256.Sum256([]byte("talosbot sim default schematic"))

	return hex.EncodeToString(s[:])
}()

// Roles reported in NodeInfo.Role.
const (
	RoleControlPlane = "controlplane"
	RoleWorker       = "worker"
)

// Options configure a simulated cluster.
type Options struct {
	// Dir holds etcd data and the talosconfig. Empty: a private temp dir removed by Close.
	Dir string
	// Name is the cluster name (talosconfig context). Default "talosbot-sim".
	Name string
	// ControlPlanes (≥ 1) and Workers count the nodes: cp-1…cp-N, worker-1…worker-M.
	ControlPlanes, Workers int
	// Hosts is how many Proxmox hosts (pve1…pveK) nodes are spread over, round robin. Default 3.
	Hosts int
	// TalosVersion every node starts at. Default v1.12.6.
	TalosVersion string
	// KubernetesVersion of the kubelet and control-plane images. Default v1.35.2.
	KubernetesVersion string
	// RebootDelay is how long a rebooting node's listener stays closed. Default 500ms.
	RebootDelay time.Duration
	// BootDuration is how long a rebooted node's boot sequence takes once its API answers
	// again (its services starting); it ends Ready. Default 200ms. The first boot in Start
	// takes no time.
	BootDuration time.Duration
	// Kube, when set, is the Kubernetes side: Node objects, Ready flips, cordon and drain.
	Kube kubernetes.Interface
	// KubeOnEtcd, instead of Kube, starts the Kubernetes side once the control planes' etcd
	// is up, given the members' client URLs, so that the kube-apiserver stores into the
	// sim's etcd as it does on a Talos control plane (snapshots hold /registry keys).
	// Close stops it (KubeBackend.Stop) before it stops etcd. See KubeBackend.
	KubeOnEtcd func(ctx context.Context, etcdServers []string) (KubeBackend, error)
	// Kubeconfig is the kube-apiserver's admin kubeconfig: the Kubeconfig RPC answers with its
	// server, CA and client certificate in Talos's shape (kubeconfig.go; a token is dropped).
	// Empty: a new admin certificate from the sim's Kubernetes CA for https://<cp-1>:6443.
	Kubeconfig []byte
	// HostLabel is the Node label carrying the Proxmox host. Default topology.kubernetes.io/zone.
	HostLabel string
	// DrainTimeout bounds the server-side drain of a legacy upgrade. Default 30s.
	DrainTimeout time.Duration
	// StaticPods (with Kube) publishes the control planes' static pods as mirror pods in
	// kube-system and plays the kubelet for them on config changes. Off by default so that
	// pod counts seen by existing tests do not change.
	StaticPods bool
	// BootstrapManifests (with Kube and StaticPods) applies Talos's kube-proxy bootstrap
	// manifest (a DaemonSet) at start, serves it as a Manifest resource, and plays the
	// DaemonSet controller and kubelets that keep one Ready pod per node at its image
	// (kubeproxy.go). Off by default so that pod counts seen by existing tests do not change.
	BootstrapManifests bool
	// EtcdVolume gives v1.14+ control planes a dedicated ETCD volume (a VolumeConfig named
	// ETCD with provisioning): /var/lib/etcd is its own partition, and wiping EPHEMERAL no
	// longer clears etcd (etcdvolume.go).
	EtcdVolume bool
	// StaticPodReadyDelay is how long a control-plane static pod recreated by a config change
	// takes to become Ready. Default 200ms.
	StaticPodReadyDelay time.Duration
	// PodGCQuarantine (with StaticPods) is how long a deleted Node's pods stay before
	// kube-controller-manager's PodGC deletes them (podgc.go). Default 40s, as Kubernetes.
	PodGCQuarantine time.Duration
	// Logger receives sim events. Nil discards.
	Logger *slog.Logger
	// Now is the clock. Nil: time.Now.
	Now func() time.Time
	// OnCall, when set, runs for every call a node's machined serves, after it is counted and
	// before it is handled (node is the inventory name, method the full gRPC method). An error
	// ends the call with that error, unhandled. Tests use it to hold a call while they act, for
	// example to kill a client at the moment one step of its work reached the node; it must
	// return once ctx (the call's) ends.
	OnCall func(ctx context.Context, node, method string) error
	// OnTransition, when set, is told of every change of a node's lifecycle state (down for
	// a reboot, running again, reset), after it took effect (observe.go). The soak harness
	// checks its invariants on them (never two nodes down, never a lost quorum). It runs on
	// the node's sequence goroutine and must return quickly.
	OnTransition func(Transition)
	// Naming gives each node its Talos hostname, Kubernetes Node name and etcd member name.
	// Nil (or empty fields) derive them as Talos does: hostname = the inventory name, Node name
	// and etcd member name = the hostname. DistinctNames makes them all differ.
	Naming func(NodeInfo) NodeNames
	// HealthCheckInterval is how often ClusterService.HealthCheck retries a failing check, and
	// how long one attempt may take. Default 5s, pkg/cluster/check's interval.
	HealthCheckInterval time.Duration
	// MemoryBytes is the MemTotal each node reports (Memory RPC). Default 4 GiB.
	MemoryBytes uint64
	// EphemeralBytes is the size of each node's EPHEMERAL volume. Default 90 GiB.
	EphemeralBytes uint64
}

// NodeNames are the names a node goes by besides its inventory name (NodeInfo.Name).
type NodeNames struct {
	// Hostname is the Talos hostname (Hostname RPC, the Node's Hostname address).
	Hostname string
	// NodeName is the Kubernetes Node object's name.
	NodeName string
	// EtcdMember is the control plane's etcd member name.
	EtcdMember string
}

// DistinctNames is an Options.Naming where no two names of a node are equal: inventory
// "cp-1", hostname "talos-cp-1-<hash>", Node name "<hostname>.sim.internal" (a kubelet that
// registers with its FQDN) and etcd member "<hostname>-etcd".
func DistinctNames(info NodeInfo) NodeNames {
	h := sha256.Sum256([]byte(info.Name))
	host := "talos-" + info.Name + "-" + hex.EncodeToString(h[:2])

	return NodeNames{Hostname: host, NodeName: host + ".sim.internal", EtcdMember: host + "-etcd"}
}

// NodeInfo describes one simulated node.
type NodeInfo struct {
	Name           string // inventory name: cp-1…, worker-1…
	Hostname       string // Talos hostname
	NodeName       string // Kubernetes Node name
	EtcdMember     string // etcd member name (control planes)
	IP             string
	Role           string // "controlplane" or "worker"
	Host           string // Proxmox host: pve1…
	Platform       string // "nocloud"
	InstallerClass string
	Schematic      string
}

// Cluster is a running simulated Talos cluster.
type Cluster struct {
	opts    Options
	log     *slog.Logger
	now     func() time.Time
	pki     *pki
	kubeCA  *kubeCA // Talos's cluster.ca: kubeconfig.go
	etcdCA  *kubeCA // cluster.etcd.ca
	ids     *idGen
	kinds   map[string]methodKind
	etcd    *etcdsim.Cluster
	images  *imageRegistry
	kube    *kubeSide
	dir     string
	tempDir bool

	nodes  []*node
	byName map[string]*node
	byIP   map[string]*node

	talosconfig []byte

	// kubeStop stops a kube-apiserver started by Options.KubeOnEtcd.
	kubeStop func()
	// kubeRestart restarts it (KubeBackend.Restart); nil when it cannot.
	kubeRestart func(ctx context.Context) error

	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup

	faultMu    sync.Mutex
	leaderless map[string][]string // node → members stopped by its NoEtcdLeader fault

	ctlMu  sync.Mutex
	ctlSrv []io.Closer

	closeOnce sync.Once
}

// Start builds and starts a cluster. Close it when done.
func Start(ctx context.Context, opts Options) (_ *Cluster, err error) {
	opts, err = withDefaults(opts)
	if err != nil {
		return nil, err
	}

	c := &Cluster{
		opts:       opts,
		log:        opts.Logger,
		now:        opts.Now,
		kinds:      methodKinds(),
		byName:     map[string]*node{},
		byIP:       map[string]*node{},
		leaderless: map[string][]string{},
		images:     newRegistry(),
	}
	c.ids = newIDGen(c.now)
	c.ctx, c.cancel = context.WithCancel(context.Background())

	defer func() {
		if err != nil {
			_ = c.Close()
		}
	}()

	c.dir = opts.Dir
	if c.dir == "" {
		if c.dir, err = os.MkdirTemp("", "talosbot-sim-"); err != nil {
			return nil, fmt.Errorf("create sim dir: %w", err)
		}

		c.tempDir = true
	} else if err = os.MkdirAll(c.dir, 0o700); err != nil {
		return nil, fmt.Errorf("create sim dir %s: %w", c.dir, err)
	}

	if c.pki, err = newPKI(opts.Name, c.now); err != nil {
		return nil, err
	}

	if c.kubeCA, err = newKubeCA(opts.Name+" sim Kubernetes CA", c.now()); err != nil { // kubeconfig.go
		return nil, err
	}

	if c.etcdCA, err = newKubeCA(opts.Name+" sim etcd CA", c.now()); err != nil {
		return nil, err
	}

	if opts.Kube != nil {
		c.kube = &kubeSide{c: c, client: opts.Kube, hostLabel: opts.HostLabel, drainTimeout: opts.DrainTimeout, log: c.log}
	}

	if err = c.bindNodes(); err != nil {
		return nil, err
	}

	if err = c.checkNames(); err != nil {
		return nil, err
	}

	var specs []etcdsim.MemberSpec

	for _, n := range c.nodes {
		if n.info.Role == RoleControlPlane {
			specs = append(specs, etcdsim.MemberSpec{Name: n.info.EtcdMember, IP: n.info.IP})
		}
	}

	// Each run gets a new IP block, so etcd data from an earlier run in the same Dir cannot
	// be resumed (its peer URLs differ): start clean.
	if err = os.RemoveAll(filepath.Join(c.dir, "etcd")); err != nil {
		return nil, fmt.Errorf("remove stale etcd data: %w", err)
	}

	c.etcd, err = etcdsim.Start(ctx, filepath.Join(c.dir, "etcd"), specs, etcdsim.Options{Logger: c.log.With("component", "etcd")})
	if err != nil {
		return nil, fmt.Errorf("start etcd (%d members): %w", len(specs), err)
	}

	if err = c.startKubeOnEtcd(ctx); err != nil {
		return nil, err
	}

	for _, n := range c.nodes {
		if err = n.startBackend(); err != nil {
			return nil, err
		}
	}

	if c.kube != nil {
		if opts.StaticPods {
			c.goBackground(c.kube.runKubelet)
			c.goBackground(func(ctx context.Context) { c.kube.runPodGC(ctx, opts.PodGCQuarantine) }) // podgc.go
		}

		if err = c.startBootstrapManifests(ctx); err != nil {
			return nil, err
		}

		for _, n := range c.nodes {
			if err = c.kube.register(ctx, n.info, n.kubeletVersion(), n.talosVersion()); err != nil {
				return nil, err
			}

			if _, err = n.syncStaticPods(ctx, true); err != nil {
				return nil, err
			}
		}
	}

	for _, n := range c.nodes {
		n.logs.booted(n)
		n.serveFront()
		n.runBoot(ctx, "", 0)
	}

	if err = c.writeTalosconfig(); err != nil {
		return nil, err
	}

	c.log.Info("sim cluster started", "name", opts.Name, "controlPlanes", opts.ControlPlanes, "workers", opts.Workers)

	return c, nil
}

func withDefaults(o Options) (Options, error) {
	if o.ControlPlanes < 1 {
		return o, errors.New("sim: Options.ControlPlanes must be at least 1")
	}

	if o.Workers < 0 {
		return o, errors.New("sim: Options.Workers must not be negative")
	}

	if o.ControlPlanes+o.Workers > 250 {
		return o, errors.New("sim: at most 250 nodes fit a /24 loopback block")
	}

	if o.Kube != nil && o.KubeOnEtcd != nil {
		return o, errors.New("sim: set Options.Kube or Options.KubeOnEtcd, not both")
	}

	if o.Name == "" {
		o.Name = DefaultClusterName
	}

	if o.Hosts <= 0 {
		o.Hosts = 3
	}

	if o.TalosVersion == "" {
		o.TalosVersion = DefaultTalosVersion
	}

	if o.KubernetesVersion == "" {
		o.KubernetesVersion = DefaultKubernetesVersion
	}

	if _, _, ok := majorMinor(o.TalosVersion); !ok {
		return o, fmt.Errorf("sim: TalosVersion %q is not vX.Y.Z", o.TalosVersion)
	}

	if o.RebootDelay <= 0 {
		o.RebootDelay = DefaultRebootDelay
	}

	if o.HostLabel == "" {
		o.HostLabel = DefaultHostLabel
	}

	if o.DrainTimeout <= 0 {
		o.DrainTimeout = DefaultDrainTimeout
	}

	if o.StaticPodReadyDelay <= 0 {
		o.StaticPodReadyDelay = DefaultStaticPodReadyDelay
	}

	if o.PodGCQuarantine <= 0 {
		o.PodGCQuarantine = DefaultPodGCQuarantine
	}

	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}

	if o.Now == nil {
		o.Now = time.Now
	}

	if o.BootDuration <= 0 {
		o.BootDuration = DefaultBootDuration
	}

	if o.HealthCheckInterval <= 0 {
		o.HealthCheckInterval = DefaultHealthCheckInterval
	}

	if o.MemoryBytes == 0 {
		o.MemoryBytes = 4 << 30
	}

	if o.EphemeralBytes == 0 {
		o.EphemeralBytes = 90 << 30
	}

	return o, nil
}

// installerImage is the installer a node of this class runs, as the runbook derives it.
func installerImage(schematic, version string) string {
	return "factory.talos.dev/nocloud-installer/" + schematic + ":" + version
}

// bindNodes picks a random 127.X.Y.0/24 block and binds port 50000 on .2, .3, … for every
// node; on EADDRINUSE (another sim, or a leftover) it retries with another block.
func (c *Cluster) bindNodes() error {
	total := c.opts.ControlPlanes + c.opts.Workers

	var lastErr error

	for range 20 {
		x, _ := rand.Int(rand.Reader, big.NewInt(254))
		y, _ := rand.Int(rand.Reader, big.NewInt(256))
		block := net.IPv4(127, byte(x.Int64()+1), byte(y.Int64()), 0)

		listeners := make([]net.Listener, 0, total)

		var err error

		for i := range total {
			ip := net.IPv4(block[12], block[13], block[14], byte(i+2))

			var lis net.Listener

			lis, err = net.Listen("tcp", net.JoinHostPort(ip.String(), fmt.Sprint(apidPort)))
			if err != nil {
				break
			}

			// etcd needs 2379/2380 on the same IP: make sure they are free too.
			if i < c.opts.ControlPlanes {
				err = portsFree(ip.String(), etcdsim.DefaultClientPort, etcdsim.DefaultPeerPort)
				if err != nil {
					_ = lis.Close()

					break
				}
			}

			listeners = append(listeners, lis)
		}

		if err != nil {
			for _, l := range listeners {
				_ = l.Close()
			}

			lastErr = err

			if errors.Is(err, syscall.EADDRINUSE) {
				continue
			}

			return fmt.Errorf("bind loopback address (Linux binds any 127/8 address; elsewhere add aliases): %w", err)
		}

		for i, lis := range listeners {
			c.addNode(i, lis)
		}

		return nil
	}

	return fmt.Errorf("no free 127.X.Y.0/24 block found after 20 tries: %w", lastErr)
}

func portsFree(ip string, ports ...int) error {
	for _, p := range ports {
		l, err := net.Listen("tcp", net.JoinHostPort(ip, fmt.Sprint(p)))
		if err != nil {
			return err
		}

		_ = l.Close()
	}

	return nil
}

func (c *Cluster) addNode(i int, lis net.Listener) {
	info := NodeInfo{
		IP:             lis.Addr().(*net.TCPAddr).IP.String(),
		Host:           fmt.Sprintf("pve%d", i%c.opts.Hosts+1),
		Platform:       "nocloud",
		InstallerClass: DefaultInstallerClass,
		Schematic:      DefaultSchematic,
	}

	if i < c.opts.ControlPlanes {
		info.Name = fmt.Sprintf("cp-%d", i+1)
		info.Role = RoleControlPlane
	} else {
		info.Name = fmt.Sprintf("worker-%d", i-c.opts.ControlPlanes+1)
		info.Role = RoleWorker
	}

	var names NodeNames
	if c.opts.Naming != nil {
		names = c.opts.Naming(info)
	}

	info.Hostname = names.Hostname
	if info.Hostname == "" {
		info.Hostname = info.Name
	}

	info.NodeName = names.NodeName
	if info.NodeName == "" {
		info.NodeName = info.Hostname
	}

	// etcd/spec.go names the member after the hostname.
	info.EtcdMember = names.EtcdMember
	if info.EtcdMember == "" {
		info.EtcdMember = info.Hostname
	}

	n := newNode(c, info)
	n.gate = newGate(lis)
	c.nodes = append(c.nodes, n)
	c.byName[info.Name] = n
	c.byIP[info.IP] = n
}

// checkNames refuses an Options.Naming that gives two nodes the same hostname, Node name or
// etcd member name (Talos nodes would collide in discovery, Kubernetes and etcd).
func (c *Cluster) checkNames() error {
	seen := map[string]string{}

	for _, n := range c.nodes {
		// A slice, not a map: the first collision reported must not depend on map order (a
		// hostname collision usually implies a Node name one too).
		names := [][2]string{{"hostname", n.info.Hostname}, {"Node name", n.info.NodeName}, {"etcd member name", n.info.EtcdMember}}
		if n.info.Role != RoleControlPlane {
			names = names[:2] // a worker has no etcd member
		}

		for _, kn := range names {
			kind, name := kn[0], kn[1]

			key := kind + "\x00" + name
			if other, dup := seen[key]; dup {
				return fmt.Errorf("sim: Options.Naming gives %s and %s the same %s %q; names must be unique", other, n.info.Name, kind, name)
			}

			seen[key] = n.info.Name
		}
	}

	return nil
}

func (c *Cluster) nodeByName(name string) *node { return c.byName[name] }

// node looks a node up by name or IP.
func (c *Cluster) node(nameOrIP string) (*node, error) {
	if n, ok := c.byName[nameOrIP]; ok {
		return n, nil
	}

	if n, ok := c.byIP[nameOrIP]; ok {
		return n, nil
	}

	return nil, fmt.Errorf("sim: unknown node %q (use a name like cp-1 or worker-1, or its IP)", nameOrIP)
}

func (c *Cluster) controlPlaneEndpoints() []string {
	var eps []string

	for _, n := range c.nodes {
		if n.info.Role == RoleControlPlane {
			eps = append(eps, n.info.IP)
		}
	}

	return eps
}

func (c *Cluster) writeTalosconfig() error {
	eps := c.controlPlaneEndpoints()
	cfg := clientconfig.NewConfig(c.opts.Name, eps, c.pki.caPEM,
		&x509.PEMEncodedCertificateAndKey{Crt: c.pki.clientCrtPEM, Key: c.pki.clientKeyPEM})
	// A default node, as `talosctl config node` sets one: without it plain
	// `talosctl version` fails with "nodes are not set for the command".
	// Clients that name their nodes (the bot, -n) are unaffected.
	if len(eps) > 0 {
		cfg.Contexts[c.opts.Name].Nodes = eps[:1]
	}

	b, err := cfg.Bytes()
	if err != nil {
		return fmt.Errorf("render talosconfig: %w", err)
	}

	c.talosconfig = b

	if err = os.WriteFile(filepath.Join(c.dir, "talosconfig"), b, 0o600); err != nil {
		return fmt.Errorf("write talosconfig: %w", err)
	}

	return nil
}

// Talosconfig returns the client configuration (machinery clientconfig format): one context
// named after the cluster, every control-plane endpoint, the first control plane as its default
// node, CA and an os:admin client certificate.
// It is also written 0600 to Dir/talosconfig. It is a secret: keep it out of logs.
func (c *Cluster) Talosconfig() []byte { return append([]byte(nil), c.talosconfig...) }

// Dir is where etcd data and the talosconfig live.
func (c *Cluster) Dir() string { return c.dir }

// Nodes lists the nodes in order: control planes, then workers.
func (c *Cluster) Nodes() []NodeInfo {
	out := make([]NodeInfo, len(c.nodes))
	for i, n := range c.nodes {
		out[i] = n.info
	}

	return out
}

// Etcd exposes the real etcd cluster behind the control planes (for assertions in tests).
func (c *Cluster) Etcd() *etcdsim.Cluster { return c.etcd }

// NodeVersion returns the Talos version a node currently runs ("" when unknown node).
func (c *Cluster) NodeVersion(name string) string {
	n, err := c.node(name)
	if err != nil {
		return ""
	}

	return n.talosVersion()
}

// NodeBooted reports whether a node finished its boot sequence (machine stage running, as
// MachineStatusEvent publishes it): a node can already run its new version while it still boots
// and refuses connections (for assertions in tests).
func (c *Cluster) NodeBooted(name string) bool {
	n, err := c.node(name)
	if err != nil {
		return false
	}

	n.mu.Lock()
	defer n.mu.Unlock()

	return n.stage == machineapi.MachineStatusEvent_RUNNING
}

// Close stops every node, etcd and the control API, and removes a temp Dir.
func (c *Cluster) Close() error {
	var errs []error

	c.closeOnce.Do(func() {
		c.cancel()

		c.ctlMu.Lock()
		for _, s := range c.ctlSrv {
			_ = s.Close()
		}
		c.ctlMu.Unlock()

		for _, n := range c.nodes {
			n.shutdown()
		}

		c.wg.Wait()

		if c.kubeStop != nil {
			c.kubeStop()
		}

		if c.etcd != nil {
			if err := c.etcd.Close(); err != nil {
				errs = append(errs, fmt.Errorf("close etcd: %w", err))
			}
		}

		if c.tempDir {
			if err := os.RemoveAll(c.dir); err != nil {
				errs = append(errs, fmt.Errorf("remove sim dir: %w", err))
			}
		}
	})

	return errors.Join(errs...)
}

// goBackground runs f tied to the cluster's lifetime.
func (c *Cluster) goBackground(f func(ctx context.Context)) {
	c.wg.Go(func() { f(c.ctx) })
}
