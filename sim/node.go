package sim

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"net"
	"strings"
	"sync"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	"google.golang.org/grpc/test/bufconn"

	clusterapi "github.com/siderolabs/talos/pkg/machinery/api/cluster"
	"github.com/siderolabs/talos/pkg/machinery/api/common"
	machineapi "github.com/siderolabs/talos/pkg/machinery/api/machine"

	"github.com/talosbot/talosbot/sim/etcdsim"
)

// Node lifecycle states.
const (
	stateRunning   = "running"
	stateRebooting = "rebooting"
	stateReset     = "reset"
)

// inflightCounter counts in-flight unary calls and lets a reboot wait until there are none.
type inflightCounter struct {
	mu   sync.Mutex
	n    int
	zero chan struct{} // closed when n drops to 0
}

func (c *inflightCounter) add(delta int) {
	c.mu.Lock()
	defer c.mu.Unlock()

	if c.n == 0 && delta > 0 {
		c.zero = make(chan struct{})
	}

	c.n += delta

	if c.n == 0 && delta < 0 {
		close(c.zero)
	}
}

// wait returns when no call is in flight or after max.
func (c *inflightCounter) wait(max time.Duration) {
	c.mu.Lock()
	if c.n == 0 {
		c.mu.Unlock()

		return
	}

	ch := c.zero
	c.mu.Unlock()

	t := time.NewTimer(max)
	defer t.Stop()

	select {
	case <-ch:
	case <-t.C:
	}
}

type node struct {
	c    *Cluster
	info NodeInfo

	pendingLis net.Listener

	backend   *grpc.Server
	bufLis    *bufconn.Listener
	localConn *grpc.ClientConn

	connMu  sync.Mutex
	remotes map[string]*grpc.ClientConn

	inflight inflightCounter
	events   *eventLog

	callMu sync.Mutex
	calls  map[string]int

	mu          sync.Mutex
	front       *grpc.Server
	state       string
	busy        bool
	version     string
	prevVersion string
	bootID      string
	img         images
	config      []byte
	stagedImage string
	pulled      map[string]bool
	fault       Fault
	etcdLeft    bool
	returnCh    chan struct{} // closed to release a node held down by NeverReturn

	staticMu sync.Mutex // serialises the kubelet's work on the node's static pods

	cosi *cosiState // the node's COSI resources (cosi.go)
}

func newNode(c *Cluster, info NodeInfo) *node {
	n := &node{
		c:       c,
		info:    info,
		remotes: map[string]*grpc.ClientConn{},
		events:  newEventLog(c.ids, c.now),
		calls:   map[string]int{},
		state:   stateRunning,
		version: c.opts.TalosVersion,
		bootID:  newUUID(),
		pulled:  map[string]bool{},
	}
	n.img = defaultImages(installerImage(info.Schematic, c.opts.TalosVersion), c.opts.KubernetesVersion)
	n.renderConfig()

	return n
}

func newUUID() string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	b[6] = b[6]&0x0f | 0x40
	b[8] = b[8]&0x3f | 0x80

	return fmt.Sprintf("%x-%x-%x-%x-%x", b[0:4], b[4:6], b[6:8], b[8:10], b[10:16])
}

// renderConfig regenerates config.yaml from the node's images. Caller holds mu (or owns n).
func (n *node) renderConfig() {
	cfg, err := machineConfig(n.c.opts.Name, n.info.Role, "https://"+n.c.firstCPIP()+":6443", n.c.pkiCAPEM(), n.img)
	if err != nil {
		n.c.log.Error("render machine config", "node", n.info.Name, "err", err)

		return
	}

	n.config = cfg
}

func (c *Cluster) firstCPIP() string {
	for _, n := range c.nodes {
		if n.info.Role == RoleControlPlane {
			return n.info.IP
		}
	}

	return "127.0.0.1"
}

func (c *Cluster) pkiCAPEM() []byte {
	if c.pki == nil {
		return nil
	}

	return c.pki.caPEM
}

func (n *node) talosVersion() string {
	n.mu.Lock()
	defer n.mu.Unlock()

	return n.version
}

func (n *node) kubeletVersion() string {
	n.mu.Lock()
	defer n.mu.Unlock()

	return imageTag(n.img.Kubelet)
}

func (n *node) member() *etcdsim.Member {
	if n.info.Role != RoleControlPlane || n.c.etcd == nil {
		return nil
	}

	return n.c.etcd.Member(n.info.Name)
}

func (n *node) currentFault() Fault {
	n.mu.Lock()
	defer n.mu.Unlock()

	return n.fault
}

// startBackend starts the node's machined: typed services on an in-memory listener that only
// the node's own apid reaches.
func (n *node) startBackend() error {
	n.bufLis = bufconn.Listen(1 << 20)
	n.backend = grpc.NewServer(
		grpc.ChainUnaryInterceptor(n.unaryInterceptor),
		grpc.ChainStreamInterceptor(n.streamInterceptor),
	)

	md := &machined{n: n}
	machineapi.RegisterMachineServiceServer(n.backend, md)
	machineapi.RegisterImageServiceServer(n.backend, &imageService{n: n})
	machineapi.RegisterLifecycleServiceServer(n.backend, &lifecycleService{n: n})
	clusterapi.RegisterClusterServiceServer(n.backend, &clusterService{n: n})
	n.registerCOSI(n.backend)

	go func() { _ = n.backend.Serve(n.bufLis) }()

	conn, err := grpc.NewClient("passthrough:///machined-"+n.info.Name,
		grpc.WithContextDialer(func(ctx context.Context, _ string) (net.Conn, error) { return n.bufLis.DialContext(ctx) }),
		grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithDefaultCallOptions(grpc.ForceCodec(rawCodec{})),
	)
	if err != nil {
		return fmt.Errorf("node %s: connect to machined: %w", n.info.Name, err)
	}

	n.localConn = conn

	return nil
}

// serviceAvailable gates ImageService and LifecycleService: they exist from Talos v1.13.
func (n *node) serviceAvailable(method string) error {
	if strings.HasPrefix(method, "/machine.ImageService/") || strings.HasPrefix(method, "/machine.LifecycleService/") {
		if !atLeast(n.talosVersion(), 1, 13) {
			svc := strings.Split(strings.TrimPrefix(method, "/"), "/")[0]

			return status.Errorf(codes.Unimplemented, "unknown service %s", svc)
		}
	}

	return nil
}

// before runs for every call the node's machined serves: counts it and applies latency.
func (n *node) before(ctx context.Context, method string) error {
	n.callMu.Lock()
	n.calls[method]++
	n.callMu.Unlock()

	if err := n.serviceAvailable(method); err != nil {
		return err
	}

	if d := n.currentFault().Latency; d > 0 {
		t := time.NewTimer(d)
		defer t.Stop()

		select {
		case <-ctx.Done():
			return status.FromContextError(ctx.Err()).Err()
		case <-t.C:
		}
	}

	return nil
}

func (n *node) unaryInterceptor(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
	if err := n.before(ctx, info.FullMethod); err != nil {
		return nil, err
	}

	return handler(ctx, req)
}

func (n *node) streamInterceptor(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
	if err := n.before(ss.Context(), info.FullMethod); err != nil {
		return err
	}

	return handler(srv, ss)
}

// serveFront starts the node's apid on lis (or binds its address again when lis is nil).
func (n *node) serveFront(lis net.Listener) {
	n.mu.Lock()
	defer n.mu.Unlock()

	n.serveFrontLocked(lis)
}

func (n *node) serveFrontLocked(lis net.Listener) {
	if n.front != nil {
		return
	}

	if lis == nil {
		var err error

		lis, err = net.Listen("tcp", net.JoinHostPort(n.info.IP, fmt.Sprint(apidPort)))
		if err != nil {
			n.c.log.Error("node listener", "node", n.info.Name, "err", err)

			return
		}
	}

	tlsCfg, err := n.c.pki.serverTLS(n.info.Name, net.ParseIP(n.info.IP))
	if err != nil {
		n.c.log.Error("node TLS", "node", n.info.Name, "err", err)
		_ = lis.Close()

		return
	}

	srv := grpc.NewServer(
		grpc.Creds(credentials.NewTLS(tlsCfg)),
		grpc.UnknownServiceHandler(n.proxyHandler),
		grpc.ForceServerCodec(rawCodec{}),
	)
	n.front = srv

	go func() { _ = srv.Serve(lis) }()
}

// stopFront closes the node's listener and connections. Unary calls in flight get their reply
// out first (a node acks an upgrade before it reboots); streams such as Events are cut.
func (n *node) stopFront() {
	n.mu.Lock()
	srv := n.front
	n.front = nil
	n.mu.Unlock()

	if srv == nil {
		return
	}

	n.inflight.wait(2 * time.Second)

	done := make(chan struct{})

	go func() {
		srv.GracefulStop()
		close(done)
	}()

	t := time.NewTimer(100 * time.Millisecond)
	defer t.Stop()

	select {
	case <-done:
	case <-t.C:
		srv.Stop()
		<-done
	}
}

func (n *node) shutdown() {
	n.mu.Lock()
	if n.returnCh != nil {
		close(n.returnCh)
		n.returnCh = nil
	}
	n.mu.Unlock()

	n.stopFront()

	if n.pendingLis != nil {
		_ = n.pendingLis.Close()
	}

	n.connMu.Lock()
	for _, c := range n.remotes {
		_ = c.Close()
	}
	n.connMu.Unlock()

	if n.localConn != nil {
		_ = n.localConn.Close()
	}

	if n.backend != nil {
		n.backend.Stop()
	}

	n.events.reset()
}

// emit publishes a runtime event on the node.
func (n *node) emitSeq(actor, seq string, action machineapi.SequenceEvent_Action, errMsg string) {
	ev := &machineapi.SequenceEvent{Sequence: seq, Action: action}
	if errMsg != "" {
		ev.Error = &common.Error{Code: common.Code_FATAL, Message: errMsg}
	}

	n.events.publish(actor, ev)
}

func (n *node) emitTask(actor, task string, action machineapi.TaskEvent_Action) {
	n.events.publish(actor, &machineapi.TaskEvent{Task: task, Action: action})
}

func (n *node) emitStage(actor string, stage machineapi.MachineStatusEvent_MachineStage, ready bool) {
	st := &machineapi.MachineStatusEvent_MachineStatus{Ready: ready}
	if !ready && stage == machineapi.MachineStatusEvent_BOOTING {
		st.UnmetConditions = []*machineapi.MachineStatusEvent_MachineStatus_UnmetCondition{
			{Name: "services", Reason: "some services are not healthy"},
		}
	}

	n.events.publish(actor, &machineapi.MachineStatusEvent{Stage: stage, Status: st})
}

// publishBoot emits the events of a boot sequence (the node just came up).
func (n *node) publishBoot(note string) {
	n.emitStage("", machineapi.MachineStatusEvent_BOOTING, false)
	n.emitSeq("", "boot", machineapi.SequenceEvent_START, "")

	if note != "" {
		n.emitSeq("", "boot", machineapi.SequenceEvent_NOOP, note)
	}

	for _, task := range []string{"startAllServices", "labelNodeAsControlPlane", "uncordonNode"} {
		if task == "labelNodeAsControlPlane" && n.info.Role != RoleControlPlane {
			continue
		}

		n.emitTask("", task, machineapi.TaskEvent_START)
		n.emitTask("", task, machineapi.TaskEvent_STOP)
	}

	n.emitSeq("", "boot", machineapi.SequenceEvent_STOP, "")
	n.emitStage("", machineapi.MachineStatusEvent_RUNNING, true)
}

// begin marks a sequence as running; Talos refuses a second one while the first holds the lock.
func (n *node) begin() error {
	n.mu.Lock()
	defer n.mu.Unlock()

	if n.state != stateRunning {
		return status.Errorf(codes.Unavailable, "node %s is %s", n.info.Name, n.state)
	}

	if n.busy {
		return status.Error(codes.FailedPrecondition, "locked: another sequence (upgrade, reboot, reset) is running on this node; wait for it to finish")
	}

	n.busy = true

	return nil
}

func (n *node) end() {
	n.mu.Lock()
	n.busy = false
	n.mu.Unlock()
}

type rebootPlan struct {
	actor    string
	sequence string // "upgrade", "reboot"
	image    string // target installer image (upgrade) or ""
	rollback bool
	drain    bool // legacy upgrade: cordon and drain server-side
}

// runReboot is the background half of Upgrade, Reboot and Rollback.
func (n *node) runReboot(ctx context.Context, p rebootPlan) {
	defer n.end()

	stage := machineapi.MachineStatusEvent_REBOOTING
	if p.sequence == "upgrade" {
		stage = machineapi.MachineStatusEvent_UPGRADING
	}

	n.emitSeq(p.actor, p.sequence, machineapi.SequenceEvent_START, "")
	n.emitStage(p.actor, stage, false)

	fail := func(msg string) {
		n.emitSeq(p.actor, p.sequence, machineapi.SequenceEvent_STOP, msg)
		n.emitStage(p.actor, machineapi.MachineStatusEvent_RUNNING, true)
		n.c.log.Warn("sequence failed", "node", n.info.Name, "sequence", p.sequence, "err", msg)
	}

	if p.sequence == "upgrade" {
		if p.drain && n.c.kube != nil {
			n.emitTask(p.actor, "cordonAndDrainNode", machineapi.TaskEvent_START)

			if err := n.c.kube.cordonAndDrain(ctx, n.info.Name); err != nil {
				_ = n.c.kube.uncordon(ctx, n.info.Name)
				fail(fmt.Sprintf("task cordonAndDrainNode failed: %v", err))

				return
			}

			n.emitTask(p.actor, "cordonAndDrainNode", machineapi.TaskEvent_STOP)
		}

		n.emitTask(p.actor, "upgrade", machineapi.TaskEvent_START)

		if n.currentFault().ImagePullFailure {
			if p.drain && n.c.kube != nil {
				_ = n.c.kube.uncordon(ctx, n.info.Name)
			}

			fail(pullError(p.image).Error())

			return
		}

		n.emitTask(p.actor, "upgrade", machineapi.TaskEvent_STOP)
	}

	n.emitTask(p.actor, "stopAllServices", machineapi.TaskEvent_START)
	n.emitTask(p.actor, "stopAllServices", machineapi.TaskEvent_STOP)
	n.emitSeq(p.actor, p.sequence, machineapi.SequenceEvent_STOP, "")
	n.emitStage(p.actor, machineapi.MachineStatusEvent_REBOOTING, false)

	n.goDown(ctx)

	if !n.waitReturn(ctx) {
		return
	}

	note := n.switchVersion(p)
	n.comeUp(ctx, note)
}

func pullError(image string) error {
	return status.Errorf(codes.Unknown, "error pulling image %q: failed to resolve reference %q: unexpected status from HEAD request: 503 Service Unavailable (simulated image pull failure)", image, image)
}

// goDown is the shutdown half of a reboot: Kubernetes NotReady, etcd member stopped,
// listener closed, in-memory events gone.
func (n *node) goDown(ctx context.Context) {
	n.mu.Lock()
	n.state = stateRebooting
	n.mu.Unlock()

	if n.c.kube != nil {
		if err := n.c.kube.setReady(ctx, n.info.Name, false, "KubeletNotReady", "node is rebooting"); err != nil {
			n.c.log.Warn("kube: mark node not ready", "node", n.info.Name, "err", err)
		}
	}

	if m := n.member(); m != nil && m.Running() {
		if err := m.Stop(); err != nil {
			n.c.log.Warn("stop etcd member", "node", n.info.Name, "err", err)
		}
	}

	n.stopFront()
	n.events.reset()
}

// waitReturn waits out the reboot delay (plus SlowReboot) and holds the node down while a
// NeverReturn fault is set. It reports false when the cluster is closing.
func (n *node) waitReturn(ctx context.Context) bool {
	f := n.currentFault()

	t := time.NewTimer(n.c.opts.RebootDelay + f.SlowReboot)
	defer t.Stop()

	select {
	case <-ctx.Done():
		return false
	case <-t.C:
	}

	for {
		n.mu.Lock()
		if !n.fault.NeverReturn {
			n.mu.Unlock()

			return true
		}

		if n.returnCh == nil {
			n.returnCh = make(chan struct{})
		}

		ch := n.returnCh
		n.mu.Unlock()

		select {
		case <-ctx.Done():
			return false
		case <-ch:
		}
	}
}

// switchVersion applies what the reboot changes: a staged or requested upgrade, a rollback,
// or (with BootFailure) the A/B fallback to the old version. It returns a note for the events.
func (n *node) switchVersion(p rebootPlan) string {
	n.mu.Lock()
	defer n.mu.Unlock()

	n.bootID = newUUID()

	image := p.image
	if image == "" && n.stagedImage != "" {
		image = n.stagedImage
	}

	n.stagedImage = ""

	switch {
	case p.rollback:
		n.version, n.prevVersion = n.prevVersion, n.version
		n.img.Install = installerImage(n.info.Schematic, n.version)
	case image != "":
		target, err := versionFromImage(image)
		if err != nil {
			return err.Error()
		}

		if n.fault.BootFailure {
			// The new image was written but does not boot: the bootloader falls back to the
			// previous (A/B) entry, so the node comes back on its old version.
			return fmt.Sprintf("boot of Talos %s failed; bootloader rolled back to %s (A/B fallback)", target, n.version)
		}

		if target != n.version {
			n.prevVersion = n.version
		}

		n.version = target
		n.img.Install = image
	}

	n.renderConfig()

	return ""
}

// comeUp is the boot half of a reboot.
func (n *node) comeUp(ctx context.Context, note string) {
	if m := n.member(); m != nil && !n.leftEtcd() && !n.currentFault().EtcdStopped {
		if err := m.Restart(ctx); err != nil {
			n.c.log.Warn("restart etcd member", "node", n.info.Name, "err", err)
		}
	}

	n.mu.Lock()
	n.state = stateRunning
	unreachable := n.fault.Unreachable
	n.mu.Unlock()

	if !unreachable {
		n.serveFront(nil)
		n.c.peersReconnect(n.info.IP)
	}

	n.publishBoot(note)

	if n.c.kube != nil {
		if err := n.c.kube.booted(ctx, n.info.Name, n.kubeletVersion(), n.talosVersion()); err != nil {
			n.c.log.Warn("kube: node ready", "node", n.info.Name, "err", err)
		}
	}

	n.c.log.Info("node booted", "node", n.info.Name, "version", n.talosVersion())
}

func (n *node) leftEtcd() bool {
	n.mu.Lock()
	defer n.mu.Unlock()

	return n.etcdLeft
}

// peersReconnect skips the other apids' reconnect backoff to ip: they would find the node
// again within their (short) backoff anyway; this keeps "up" the same moment on every node.
func (c *Cluster) peersReconnect(ip string) {
	for _, o := range c.nodes {
		o.connMu.Lock()
		if conn, ok := o.remotes[ip]; ok {
			conn.ResetConnectBackoff()
		}
		o.connMu.Unlock()
	}
}

// runReset is the background half of Reset: graceful leaves etcd; the node then stays down
// (wiped, as if powered off or waiting in maintenance mode).
func (n *node) runReset(ctx context.Context, actor string, graceful bool) {
	defer n.end()

	n.emitSeq(actor, "reset", machineapi.SequenceEvent_START, "")
	n.emitStage(actor, machineapi.MachineStatusEvent_RESETTING, false)

	if graceful {
		if n.c.kube != nil {
			n.emitTask(actor, "cordonAndDrainNode", machineapi.TaskEvent_START)

			if err := n.c.kube.cordonAndDrain(ctx, n.info.Name); err != nil {
				n.c.log.Warn("reset: drain", "node", n.info.Name, "err", err)
			}

			n.emitTask(actor, "cordonAndDrainNode", machineapi.TaskEvent_STOP)
		}

		if m := n.member(); m != nil && !n.leftEtcd() {
			n.emitTask(actor, "leaveEtcd", machineapi.TaskEvent_START)

			if err := m.Leave(ctx); err != nil && !errors.Is(err, etcdsim.ErrRemoved) {
				n.emitSeq(actor, "reset", machineapi.SequenceEvent_STOP, fmt.Sprintf("task leaveEtcd failed: %v", err))
				n.emitStage(actor, machineapi.MachineStatusEvent_RUNNING, true)

				return
			}

			n.mu.Lock()
			n.etcdLeft = true
			n.mu.Unlock()
			n.emitTask(actor, "leaveEtcd", machineapi.TaskEvent_STOP)
		}
	}

	n.emitTask(actor, "resetSystemDisk", machineapi.TaskEvent_START)
	n.emitTask(actor, "resetSystemDisk", machineapi.TaskEvent_STOP)
	n.emitSeq(actor, "reset", machineapi.SequenceEvent_STOP, "")

	n.goDown(ctx)

	n.mu.Lock()
	n.state = stateReset
	n.mu.Unlock()
}

// serviceStates is what ServiceList reports for this node.
func (n *node) serviceStates(ctx context.Context) []*machineapi.ServiceInfo {
	ids := []string{"apid", "containerd", "cri", "etcd", "kubelet", "machined", "syslogd", "trustd", "udevd"}
	f := n.currentFault()

	var out []*machineapi.ServiceInfo

	for _, id := range ids {
		if (id == "etcd" || id == "trustd") && n.info.Role != RoleControlPlane {
			continue
		}

		state, healthy, msg := "Running", true, ""

		if id == "etcd" {
			m := n.member()

			switch {
			case n.leftEtcd() || m == nil || m.Removed():
				state, healthy, msg = "Finished", false, "etcd member left the cluster"
			case !m.Running():
				state, healthy, msg = "Failed", false, "etcd is not running"
			default:
				hctx, cancel := context.WithTimeout(ctx, time.Second)
				if err := m.Healthy(hctx); err != nil {
					healthy, msg = false, err.Error()
				}
				cancel()
			}
		}

		if f.UnhealthyService == id {
			healthy, msg = false, "health check failed (simulated fault)"
		}

		ts := n.c.now()
		out = append(out, &machineapi.ServiceInfo{
			Id:    id,
			State: state,
			Events: &machineapi.ServiceEvents{Events: []*machineapi.ServiceEvent{
				{Msg: "Starting service", State: "Preparing", Ts: tsProto(ts)},
				{Msg: "Service started", State: state, Ts: tsProto(ts)},
			}},
			Health: &machineapi.ServiceHealth{Healthy: healthy, LastMessage: msg, LastChange: tsProto(ts)},
		})
	}

	return out
}
